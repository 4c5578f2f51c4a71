"""The platform report's `eval_sandbox` area: which sandbox is in force, and escape attempts run in it.

On a Mac this is where the `sandbox-exec` profile is tested (CI runs Linux): each attempt is a program
that exits 0 only when it was contained; `contained` is true when it was. What it checks is listed in
docs/evals.md#the-eval-sandbox.
"""

from __future__ import annotations

import secrets
import socket
from pathlib import Path
from typing import Any

import psutil

from benchctl.platform_report.context import Context


def _attempts(ctx: Context, unix_path: str, port: int, token: str) -> dict[str, str]:
    outside = [str(ctx.tmp / "escaped"), str(Path.home() / f".benchd-escape-{token}")]
    return {
        "write_outside_temp_dir": "ok = []\n" + "".join(
            f"try:\n    open({p!r}, 'w').write('x'); ok.append({p!r})\nexcept OSError:\n    pass\n" for p in outside)
            + "assert not ok, ok\n",
        "read_home_and_state_dir": f"import os\nseen = []\nfor p in ({str(Path.home())!r}, {str(ctx.state_dir)!r}):\n"
            "    try:\n        seen.append(os.listdir(p))\n    except OSError:\n        pass\nassert not seen\n",
        "unix_sockets": f"import socket\nreached = []\nfor p in ({unix_path!r}, {str(ctx.socket)!r}):\n"
            "    s = socket.socket(socket.AF_UNIX)\n    try:\n        s.connect(p); reached.append(p)\n"
            "    except OSError:\n        pass\nassert not reached, reached\n",
        "loopback_tcp": f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "    raise SystemExit(1)\nexcept OSError:\n    pass\n",
        "memory_2_gib": "x = bytearray(2 << 30)\nx[::4096] = b'y' * len(x[::4096])\nraise SystemExit(1)\n",
        "detached_grandchild": "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    os.execv(sys.executable, "
            f"[sys.executable, '-c', 'import time; time.sleep(600)  # {token}'])\n",
    }


def collect_sandbox(ctx: Context) -> dict[str, Any]:
    from benchd.servers import sandbox

    box = sandbox.detect()
    out: dict[str, Any] = {"kind": box.kind, "binary": box.binary, "detail": box.detail, "attempts": {}}
    if not box.isolated:
        return out
    token = secrets.token_hex(4)
    unix_path = f"/tmp/benchd-report-{token}.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen()
    tcp = socket.create_server(("127.0.0.1", 0))
    try:
        for name, program in _attempts(ctx, unix_path, tcp.getsockname()[1], token).items():
            got = sandbox.run(program, 20, sandbox=box)
            contained = got.passed_marker if name != "memory_2_gib" else (
                not got.passed_marker and ("MemoryError" in got.stderr_tail or bool(got.killed)))
            if name == "detached_grandchild":
                left = [p.pid for p in psutil.process_iter(["cmdline"]) if any(token in c for c in p.info["cmdline"] or ())]
                contained = contained and not left
            out["attempts"][name] = {"contained": contained, "returncode": got.returncode, "killed": got.killed,
                                     "stderr_tail": got.stderr_tail[-400:]}
    finally:
        unix.close()
        tcp.close()
        Path(unix_path).unlink(missing_ok=True)
    out["all_contained"] = all(a["contained"] for a in out["attempts"].values())
    return out
