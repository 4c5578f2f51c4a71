"""The layout's promises: the import contracts hold, every module imports on its own, and the code
carries no issue numbers (history lives in git, reasons in docs/).

`lint-imports` reads the contracts from pyproject.toml ([tool.importlinter]); `make lint` runs it too,
this test keeps it inside `make test`'s meaning. Importing each module in a fresh interpreter catches an
import that only works because another module happened to be imported first.
"""

from __future__ import annotations

import ast
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import benchctl
import benchd

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> list[str]:
    out = []
    for pkg in (benchd, benchctl):
        out.append(pkg.__name__)
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            out.append(info.name)
    return out


def test_import_contracts_hold() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(exe)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


@pytest.mark.slow
def test_every_module_imports_alone() -> None:
    mods = _modules()
    assert "benchd.daemon.queue" in mods and "benchd.sensors.memory.darwin" in mods
    script = (
        "import importlib, subprocess, sys\n"
        "bad = []\n"
        "for m in sys.argv[1:]:\n"
        "    r = subprocess.run([sys.executable, '-c', f'import {m}'], capture_output=True, text=True)\n"
        "    if r.returncode: bad.append((m, r.stderr.strip().splitlines()[-1:]))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, *mods], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_issue_numbers_in_the_code() -> None:
    """Docstrings and comments state the contract; which issue asked for it is in git's history."""
    pattern = re.compile(r"\bissues? #?\d+", re.I)
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
            for pkg in ("benchd", "benchctl") for p in sorted((ROOT / pkg).rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, "\n".join(hits)


def test_every_row_status_comes_from_decide() -> None:
    """`engine.rows.decide` is the one place a row's status is decided: no `build_row` call names one itself."""
    hits = []
    for p in sorted((ROOT / "benchd").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "build_row":
                status = next((k.value for k in node.keywords if k.arg == "status"), None)
                if not (isinstance(status, ast.Attribute) and status.attr == "status"):
                    hits.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not hits, f"build_row with a status not from decide(): {hits}"


def test_the_daemon_never_imports_numpy() -> None:
    """The tiny-model generator pulls numpy; the daemon's path must not."""
    code = "import sys, benchd.daemon.lifecycle, benchd.engine.scheduler; print('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stdout + done.stderr


def test_real_server_tests_live_in_real_files(tmp_path: Path) -> None:
    """`*_real.py` ⇔ the `real` marker: conftest marks every test of a `*_real.py` file `real`, and no other
    file asks for the marker, so `make test-fast` runs no server."""
    tests = Path(__file__).parent
    root = tests.parent
    marked = {str(p.relative_to(root)) for p in tests.rglob("test_*.py")
              if not p.name.endswith("_real.py") and re.search(r"mark\.real\b", p.read_text(encoding="utf-8"))}
    assert not marked, (f"real-server tests outside a *_real.py file: {sorted(marked)}; "
                        "move them into <name>_real.py (the marker then comes from conftest)")
    unmarked = tmp_path / "test_probe_real.py"  # a *_real.py file that does not ask for the marker
    unmarked.write_text("def test_one() -> None:\n    pass\n", encoding="utf-8")
    got = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-p", "tests.conftest", "--rootdir", str(tmp_path), "-m", "not real", str(unmarked)],
                         capture_output=True, text=True, cwd=root)
    assert "1 deselected" in got.stdout, got.stdout + got.stderr
