"""Shared pieces of the fault suite (issue 8): figures, event following, sweeps, orphan scans, fake servers.

Why a module of its own (not the conftest): test modules import it by name (`tests/faults` is on
sys.path through pytest's rootdir insertion), and `benchmarks/fault_report.py` reads the figures file
it writes.

Figures: every test adds what it measured with `figure(name, value)` (counts add up, other values are
kept as lists). They are written to `$BENCHD_FAULT_FIGURES` (a JSON file) after each update, and the
suite's conftest prints them at the end of the session. Every figure is measured by the test that
records it; nothing is a constant.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from testlib import wait_until  # noqa: F401  (the fault tests take it from here)

from benchd.store import Store

# ------------------------------------------------------------------------------------------ figures

FIGURES: dict[str, Any] = {}
_FIG_LOCK = threading.Lock()


def figures_path() -> Path | None:
    raw = os.environ.get("BENCHD_FAULT_FIGURES")
    return Path(raw) if raw else None


def figure(name: str, value: Any, *, add: bool = True, keep_max: bool = False) -> None:
    """Record a measured figure: numbers add up (`add`) or keep their maximum (`keep_max`), anything else
    is appended to a list; `add=False` sets it."""
    with _FIG_LOCK:
        if keep_max:
            FIGURES[name] = max(FIGURES.get(name, value), value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and add:
            FIGURES[name] = FIGURES.get(name, 0) + value
        elif add:
            FIGURES.setdefault(name, []).append(value)
        else:
            FIGURES[name] = value
        path = figures_path()
        if path is not None:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(FIGURES, indent=1, sort_keys=True, default=str))
            os.replace(tmp, path)


# ------------------------------------------------------------------------------------------ sweeps

FAULT_TAG_ENV = "BENCHD_FAULT_TAG"


def sweep_doc(model: Path | str, *, contexts: list[int], gen_tokens: int, probes: int, binary: Path | str | None,
              name: str = "fault", cooldown_s: float = 0.0, tag: str | None = None,
              probe_timeout_s: float | None = None, candidates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A small sweep on the tiny model; `tag` goes into the server's environment so the test can find
    every server process of this run with psutil (other helpers run llama-servers on this machine too)."""
    cand: dict[str, Any] = {"id": "tiny", "runtime": "llama-server", "model": str(model)}
    if binary is not None:
        cand["binary"] = str(binary)
    if tag is not None:
        cand["env"] = {FAULT_TAG_ENV: tag}
    doc: dict[str, Any] = {
        "name": name, "contexts": contexts, "gen_tokens": gen_tokens, "probes": probes, "warmup": 0,
        "sustained": {"tokens": 0},
        "cooldown": {"policy": "fixed", "seconds": cooldown_s, "max_seconds": cooldown_s},
        "candidates": candidates if candidates is not None else [cand],
    }
    if probe_timeout_s is not None:
        doc["probe_timeout_s"] = probe_timeout_s
    return doc


# ------------------------------------------------------------------------------------------ events


def read_events(state_dir: Path, job: str) -> list[dict[str, Any]]:
    """Events straight from the store file (WAL: a reader may look while the daemon writes)."""
    store = Store(state_dir / "benchd.sqlite3")
    try:
        return [{"seq": e.seq, "time": e.time, "type": e.type, "payload": e.payload} for e in store.events.page(job)]
    finally:
        store.close()


def read_rows(state_dir: Path, job: str) -> list[Any]:
    store = Store(state_dir / "benchd.sqlite3")
    try:
        return store.results.rows(job)
    finally:
        store.close()


def store_counts(state_dir: Path) -> dict[str, int]:
    store = Store(state_dir / "benchd.sqlite3")
    try:
        return store.counts()
    finally:
        store.close()


class Follower:
    """Follows a job's event stream on a raw socket in a thread; events land in `self.q` as dicts.

    A raw socket (not the client) so the reader parses as little as possible: the kill hooks react
    to an event within a millisecond or two of its arrival. The thread ends when the stream ends
    (terminal event, daemon killed); `None` is queued then.
    """

    def __init__(self, sock_path: Path, job: str, since: int = 0) -> None:
        self.q: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.settimeout(None)
        self._sock.connect(str(sock_path))
        self._sock.sendall(f"GET /v1/jobs/{job}/events?since={since}&follow=true HTTP/1.1\r\n"
                           f"Host: benchd\r\n\r\n".encode())
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        buf = b""
        header_done = False
        try:
            while True:
                data = self._sock.recv(65536)
                if not data:
                    break
                buf += data
                if not header_done:
                    if b"\r\n\r\n" not in buf:
                        continue
                    _, buf = buf.split(b"\r\n\r\n", 1)
                    header_done = True
                # chunked transfer: lines of JSON are inside chunks; pick out the JSON lines
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    line = line.strip()
                    if line.startswith(b"{"):
                        self.q.put(json.loads(line))
                    elif line == b"0":  # the last chunk: the daemon ended the stream (keep-alive stays open)
                        return
        except OSError:
            pass
        finally:
            self.q.put(None)

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next event, or None when the stream ended; TimeoutError if nothing came in time."""
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no event within {timeout} s") from None

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(timeout=5)


# ------------------------------------------------------------------------------------------ processes


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Live processes whose environment carries `BENCHD_FAULT_TAG=tag` (servers of this test run)."""
    out = []
    for p in psutil.process_iter(["name"]):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get(FAULT_TAG_ENV) == tag:
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


def orphans(tag: str, live_daemon_pid: int | None) -> list[psutil.Process]:
    """Tagged server processes not descended from the live daemon (None: every tagged one is an orphan)."""
    out = []
    for p in tagged_processes(tag):
        try:
            ancestors = {a.pid for a in p.parents()}
        except psutil.Error:
            continue
        if live_daemon_pid is None or live_daemon_pid not in ancestors:
            out.append(p)
    return out


def kill_tagged(tag: str) -> int:
    n = 0
    for p in tagged_processes(tag):
        try:
            p.kill()
            n += 1
        except psutil.Error:
            pass
    return n


def rss_bytes(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


# ------------------------------------------------------------------------------------------ fake server

FAKE_SERVER = r'''
"""A FAKE llama-server, for faults a real server cannot be made to show (issue 8, part 2 and 3).

A real llama-server cannot be told to answer garbage, to close a stream half-way, to never become
healthy or to log megabytes a second; this script does exactly one of those, chosen by
$FAKE_MODE, and otherwise speaks just enough of llama-server's API (GET /health, GET /props,
POST /tokenize, POST /v1/chat/completions streamed) for the supervisor to start it like the real one.
It accepts llama-server's flags (-m, --host, --port, -c, ...) and ignores all but --host/--port.

Modes: garbage (non-SSE bytes on the chat stream), early-close (two content chunks, then the
connection is closed without [DONE]), never-healthy (503 "Loading model" forever), hang-tokenize
(/tokenize answers once, then never: a server hung while the engine sizes a prompt), chatty (writes
FAKE_CHATTY_MB megabytes to stdout at FAKE_CHATTY_MBPS MB/s while serving good answers), ok (good answers).
"""
import json, os, socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
host, port = "127.0.0.1", 8080
for i, a in enumerate(args):
    if a == "--host":
        host = args[i + 1]
    if a == "--port":
        port = int(args[i + 1])
# The fact queries benchd asks a llama-server binary (issue 13/17) answer like the real build does.
if "--version" in args:
    print("version: 0.0-fake (build 0, commit fake)", file=sys.stderr)
    sys.exit(0)
if "--help" in args:
    print("--fit [on|off]   fit the model to the device memory")
    sys.exit(0)
if "--list-devices" in args:
    print("Available devices:")
    sys.exit(0)
MODE = os.environ.get("FAKE_MODE", "ok")
TOKENIZED = 0
print(f"fake llama-server mode={MODE} argv={args}", flush=True)


def chunk(content=None, finish=None, usage=False):
    doc = {"id": "x", "object": "chat.completion.chunk", "choices": []}
    if content is not None or finish is not None:
        doc["choices"] = [{"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}]
    if usage:
        doc["usage"] = {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
        doc["timings"] = {"cache_n": 0, "prompt_n": 10, "prompt_per_second": 1000.0, "predicted_n": 4,
                          "predicted_per_second": 500.0}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _json(self, code, doc):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            if MODE == "never-healthy":
                return self._json(503, {"error": {"code": 503, "message": "Loading model"}})
            return self._json(200, {"status": "ok"})
        if self.path == "/props":
            return self._json(200, {"build_info": "fake-0", "total_slots": 1})
        return self._json(404, {"error": "no"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        if self.path == "/tokenize":
            global TOKENIZED
            TOKENIZED += 1
            if MODE == "hang-tokenize" and TOKENIZED > 1:
                time.sleep(3600)  # the tokenizer hangs after its first answer (the engine's probe of it)
            doc = json.loads(raw or b"{}")
            return self._json(200, {"tokens": list(range(max(1, len(str(doc.get("content", ""))) // 4)))})
        if self.path != "/v1/chat/completions":
            return self._json(404, {"error": "no"})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        if MODE == "garbage":
            self.wfile.write(b"\x00\xffTHIS IS NOT SERVER-SENT EVENTS\r\n<html>garbage</html>\n\n")
            self.wfile.flush()
            return
        if MODE == "early-close":
            self.wfile.write(chunk("he") + chunk("llo"))
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        for word in ("a", "b", "c", "d"):
            self.wfile.write(chunk(word))
        self.wfile.write(chunk(finish="length") + chunk(usage=True) + b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def chatter():
    mb = float(os.environ.get("FAKE_CHATTY_MB", "0"))
    rate = float(os.environ.get("FAKE_CHATTY_MBPS", "8")) * 1024 * 1024
    block = ("chatty log line " * 8 + "\n").encode() * 512
    written = 0
    t0 = time.monotonic()
    while written < mb * 1024 * 1024:
        os.write(1, block)
        written += len(block)
        ahead = written / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
    print(f"chatty: wrote {written} bytes", flush=True)


srv = ThreadingHTTPServer((host, port), H)
srv.daemon_threads = True
if MODE == "chatty":
    threading.Thread(target=chatter, daemon=True).start()
srv.serve_forever()
'''


#: The model path of fake-server candidates: the fake server never reads it, but benchd checks before each
#: server start that the model file exists (issue 18), so it must be a file that is always there.
FAKE_MODEL = sys.executable


def write_fake_server(folder: Path) -> Path:
    """The fake server as an executable file (shebang = this interpreter), usable as a candidate `binary`."""
    path = folder / "fake-llama-server"
    path.write_text(f"#!{sys.executable}\n" + FAKE_SERVER)
    path.chmod(0o755)
    return path


def iter_lines(path: Path) -> Iterator[str]:
    try:
        yield from path.read_text(errors="replace").splitlines()
    except OSError:
        return


# ------------------------------------------------------------------------------------------ raw HTTP


class RawHttp:
    """HTTP/1.1 over the daemon's Unix socket with one persistent (keep-alive) connection.

    Hand-written so the fuzzer controls every byte of the request and pays no client overhead per
    request; reconnects (and counts it) when the daemon closes the connection, e.g. after a 413.
    """

    def __init__(self, sock_path: Path, timeout: float = 30.0) -> None:
        self.sock_path = sock_path
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.buf = b""
        self.reconnects = 0

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(self.timeout)
        s.connect(str(self.sock_path))
        self.buf = b""
        return s

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _recv(self) -> bytes:
        assert self.sock is not None
        data = self.sock.recv(262144)
        if not data:
            raise ConnectionError("closed by the daemon")
        return data

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self.buf:
            self.buf += self._recv()
        head, self.buf = self.buf.split(marker, 1)
        return head

    def _read_n(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.buf += self._recv()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def request(self, method: str, target: str, body: bytes = b"",
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        for attempt in (0, 1):
            if self.sock is None:
                self.sock = self._connect()
                if attempt:
                    self.reconnects += 1
            try:
                return self._exchange(method, target, body, headers or {})
            except (ConnectionError, BrokenPipeError) as exc:
                self.close()
                if attempt:
                    raise ConnectionError(f"daemon closed the connection twice: {exc}") from exc
        raise AssertionError("unreachable")

    def _exchange(self, method: str, target: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        assert self.sock is not None
        hdrs = {"Host": "benchd", "Content-Length": str(len(body)), **headers}
        head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
        try:
            self.sock.sendall(head.encode("latin-1") + body)
        except BrokenPipeError:
            pass  # the daemon may answer (413) and close before reading it all
        status_line, *lines = self._read_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        out = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
        if out.get("transfer-encoding") == "chunked":
            data = b""
            while True:
                size = int(self._read_until(b"\r\n").split(b";")[0] or b"0", 16)
                if size == 0:
                    self._read_until(b"\r\n")
                    break
                data += self._read_n(size)
                self._read_n(2)
        else:
            data = self._read_n(int(out.get("content-length", "0")))
        if out.get("connection", "").lower() == "close":
            self.close()
        return status, out, data
