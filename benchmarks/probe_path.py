"""One probe's path through benchd's modules (issue 33's re-entry goal), traced on a real llama-server: the
calls, the modules, the depth, how often control comes back to a module it had left, and how often a
module calls up into one still on the stack. Counts, not timing: the load does not move them.

    .venv/bin/python benchmarks/probe_path.py [--json]

The sweep: the small tiny model, one candidate, context 64, 3 probes, one warm-up, `starts = "once"` (so
the probe's path holds no server start), cooldown 0, no sustained run. Traced: the second probe's visit,
`engine.cells.Cells.visit` from its call to its return (the round's probe: size the prompt, cool down,
record, send, rows, commit), in the task that runs it (`sys.setprofile`; the sampler's thread and other
tasks are not in it). Counted: fresh calls of functions in `benchd.*` and their final returns (a coroutine's
suspensions and resumptions are the event loop's, not the path's). The module sequence is the module on top
of that call stack after each call and return, consecutive repeats merged; a *re-entry* is a step of that
sequence into a module that had been on top before and was left (a return to the caller counts: control
came back); a *call back* is a fresh call into a module entered before and no longer on the stack (returns
aside: the issue's baseline counted 37 of these beside 47 returns into scheduler.py, so it cannot have
counted returns); a *call up* is a fresh call into a module that is lower on the stack (a cycle). A generator
closed at its `yield` looks suspended to the profiler, so a call up may be such a stale frame: read the
names it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import dis
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from benchd.engine import cells as cells_mod
from benchd.schemas import Candidate, Cooldown, Sustained, Sweep

YIELD = dis.opmap["YIELD_VALUE"]


class PathTrace:
    """The logical call stack of benchd frames in one task, and the module sequence it walks."""

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.seen: set[int] = set()
        self.keep: list[FrameType] = []  # frames stay alive, so their ids stay unique
        self.stack: list[str] = []
        self.frames: list[int] = []  # the ids of the frames on `stack`, to pop the right one
        self.sequence: list[str] = []
        self.calls = 0
        self.call_ups: list[tuple[str, str]] = []
        self.depth = 0
        self.modules: Counter[str] = Counter()
        self.calls_back: Counter[str] = Counter()

    def step(self) -> None:
        top = self.stack[-1] if self.stack else "(outside)"
        if not self.sequence or self.sequence[-1] != top:
            self.sequence.append(top)

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event not in ("call", "return") or self.task is None:
            return
        mod = frame.f_globals.get("__name__", "")
        if not mod.startswith("benchd"):
            return
        try:
            if asyncio.current_task() is not self.task:
                return
        except RuntimeError:
            return
        if event == "call":
            if id(frame) in self.seen:
                return  # a coroutine resumed
            self.seen.add(id(frame))
            self.keep.append(frame)
            if mod in self.stack[:-1] and (not self.stack or self.stack[-1] != mod):
                self.call_ups.append((self.stack[-1], f"{mod}.{frame.f_code.co_name}"))
            if mod not in self.stack and mod in self.modules:
                self.calls_back[mod] += 1
            self.calls += 1
            self.modules[mod] += 1
            self.stack.append(mod)
            self.frames.append(id(frame))
            self.depth = max(self.depth, len(self.stack))
            self.step()
        else:
            code = frame.f_code.co_code
            if 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == YIELD:
                return  # a coroutine suspended
            if id(frame) not in self.frames:
                return
            at = self.frames.index(id(frame))
            del self.frames[at:], self.stack[at:]
            self.step()

    def report(self) -> dict[str, Any]:
        reentries = sum(1 for i, m in enumerate(self.sequence) if m in self.sequence[:i] and m != "(outside)")
        return {"calls": self.calls, "modules": len(self.modules), "max_depth": self.depth,
                "module_steps": len(self.sequence), "reentries": reentries,
                "reentries_by_module": dict(Counter(m for i, m in enumerate(self.sequence)
                                                    if m in self.sequence[:i] and m != "(outside)").most_common()),
                "calls_back": sum(self.calls_back.values()),
                "calls_back_by_module": dict(self.calls_back.most_common()),
                "call_ups": self.call_ups, "calls_by_module": dict(self.modules.most_common())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    small = C.tiny("small")
    sweep = Sweep(name="probe-path", contexts=[64], gen_tokens=8, warmup=1, probes=3, sentinel=False, starts="once",
                  sustained=Sustained(tokens=0), cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
                  candidates=[Candidate(id="tiny", runtime="llama-server", model=str(small.target))])
    trace = PathTrace()
    real_visit = cells_mod.Cells.visit
    visits = 0

    async def traced_visit(self: Any, cand: Candidate, context: int, kind: str, *args: Any, **kw: Any) -> int:
        nonlocal visits
        if kind == "probe":
            visits += 1
        if visits != 2 or kind != "probe" or trace.task is not None:
            return await real_visit(self, cand, context, kind, *args, **kw)
        trace.task = asyncio.current_task()
        outer: FrameType | None = sys._getframe()
        while outer is not None:  # the task's frames already running: resuming them is not a call
            trace.seen.add(id(outer))
            trace.keep.append(outer)
            outer = outer.f_back
        sys.setprofile(trace.profile)
        try:
            return await real_visit(self, cand, context, kind, *args, **kw)
        finally:
            sys.setprofile(None)

    cells_mod.Cells.visit = traced_visit  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="bd-path-") as tmp:
        C.run_engine(sweep, Path(tmp) / "state", lambda r: r.outcome.state)
    got = trace.report()
    if a.json:
        print(json.dumps(got, indent=2))
        return
    print(f"one probe's path (Cells.visit of the second probe), load average {C.machine()['loadavg_1m']:.2f} "
          "(counts: the load does not move them)")
    print(f"  {got['calls']} calls across {got['modules']} modules, {got['max_depth']} deep, "
          f"{got['module_steps']} module steps")
    print(f"  re-entries (control back in a module it had left): {got['reentries']}")
    print(f"    by module: {got['reentries_by_module']}")
    print(f"  calls back into a module entered before and since left (returns aside): {got['calls_back']}")
    print(f"    by module: {got['calls_back_by_module']}")
    print(f"  calls up into a module still on the stack: {len(got['call_ups'])} {got['call_ups']}")
    print(f"  calls by module: {got['calls_by_module']}")


if __name__ == "__main__":
    main()
