"""Eval tiers: a quality check recorded beside the speed rows, so a fast candidate that answers
nonsense is visible.

Reasons and facts: docs/evals.md#eval-tiers.
"""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Literal, NamedTuple

from msgspec import Struct

from benchd.schemas import EvalResult

TaskKind = Literal["answer", "python"]


class GradeResult(NamedTuple):
    """A graded answer. `sandboxed` is None for answer tasks (no code runs), else whether the code ran
    without network; `limits` is None for answer tasks, else which resource limits applied."""

    passed: bool
    detail: str
    sandboxed: bool | None
    limits: str | None = None


MEMORY_LIMIT_BYTES = 1 << 30
FILE_SIZE_LIMIT_BYTES = 16 << 20
MAX_ANSWER_WORDS = 40  # smoke answers were asked to be terse; a wall of text is not an answer


class EvalTask(Struct, kw_only=True, frozen=True):
    """One eval prompt. `answer` tasks check `expected` in the reply; `python` tasks run `tests`
    (assert statements) after the code that defines `entry`."""

    id: str
    tier: str
    kind: TaskKind
    prompt: str
    expected: str = ""
    numeric: bool = False
    entry: str = ""
    tests: str = ""
    max_tokens: int = 256
    timeout_s: float = 10.0

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.prompt}]


def _answer(id: str, prompt: str, expected: str, numeric: bool = False) -> EvalTask:
    return EvalTask(id=id, tier="smoke", kind="answer", prompt=prompt, expected=expected, numeric=numeric)


SMOKE: tuple[EvalTask, ...] = (
    _answer("arith-17-25", "What is 17+25? Answer with the number only.", "42", numeric=True),
    _answer("capital-france", "What is the capital of France? Answer with one word.", "Paris"),
    _answer("reverse-stressed", "Write the word 'stressed' backwards. Answer with the word only.", "desserts"),
    _answer("sequence-doubling", "Which number comes next: 2, 4, 8, 16, ...? Answer with the number only.",
            "32", numeric=True),
    _answer("letters-benchmark", "How many letters are in the word 'benchmark'? Answer with the number only.",
            "9", numeric=True),
)

_CODE_SUFFIX = " Reply with only the code, in a single ```python code block."


def _code(id: str, entry: str, spec: str, tests: str) -> EvalTask:
    return EvalTask(id=id, tier="standard", kind="python", prompt=spec + _CODE_SUFFIX, entry=entry,
                    tests=tests.strip() + "\n", max_tokens=512)


STANDARD: tuple[EvalTask, ...] = (
    _code("is-palindrome", "is_palindrome",
          "Write a Python function `is_palindrome(s: str) -> bool` that returns True when `s` reads the same "
          "forwards and backwards, ignoring letter case and every character that is not a letter or digit.",
          """
assert is_palindrome("A man, a plan, a canal: Panama") is True, "Panama"
assert is_palindrome("race a car") is False, "race a car"
assert is_palindrome("") is True, "empty string"
assert is_palindrome("No 'x' in Nixon") is True, "Nixon"
"""),
    _code("fibonacci", "fib",
          "Write a Python function `fib(n: int) -> int` returning the n-th Fibonacci number, with fib(0) == 0 "
          "and fib(1) == 1. It must return fib(90) instantly.",
          """
assert fib(0) == 0, "fib(0)"
assert fib(1) == 1, "fib(1)"
assert fib(10) == 55, "fib(10)"
assert fib(90) == 2880067194370816120, "fib(90)"
"""),
    _code("flatten", "flatten",
          "Write a Python function `flatten(xs: list) -> list` that flattens arbitrarily nested lists into one "
          "flat list, keeping the order; strings are values, not lists.",
          """
assert flatten([1, [2, [3, [4]], 5]]) == [1, 2, 3, 4, 5], "nested"
assert flatten([]) == [], "empty"
assert flatten([[[]]]) == [], "empty nested"
assert flatten(["ab", ["c"]]) == ["ab", "c"], "strings kept whole"
"""),
    _code("merge-intervals", "merge_intervals",
          "Write a Python function `merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]` "
          "that merges overlapping or touching closed intervals and returns them sorted by start.",
          """
def _t(r):
    return [tuple(x) for x in r]
assert _t(merge_intervals([(1, 3), (2, 6), (8, 10), (15, 18)])) == [(1, 6), (8, 10), (15, 18)], "overlap"
assert _t(merge_intervals([(1, 4), (4, 5)])) == [(1, 5)], "touching"
assert _t(merge_intervals([])) == [], "empty"
assert _t(merge_intervals([(5, 7), (1, 2)])) == [(1, 2), (5, 7)], "unsorted input"
"""),
    _code("to-roman", "to_roman",
          "Write a Python function `to_roman(n: int) -> str` that converts an integer from 1 to 3999 to a "
          "Roman numeral.",
          """
for n, r in [(1, "I"), (4, "IV"), (9, "IX"), (58, "LVIII"), (1994, "MCMXCIV"), (3999, "MMMCMXCIX")]:
    assert to_roman(n) == r, f"to_roman({n}) == {r!r}"
"""),
)


def tasks(tier: str) -> list[EvalTask]:
    """The built-in tasks of a tier (`none` has none)."""
    if tier == "none":
        return []
    if tier == "smoke":
        return list(SMOKE)
    if tier == "standard":
        return list(STANDARD)
    raise ValueError(f"unknown eval tier {tier!r} (none | smoke | standard)")


# ---------------------------------------------------------------------------------------- grading

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def strip_thinking(text: str) -> str:
    """Drop reasoning blocks; an unclosed `<think>` means the model never answered."""
    text = _THINK.sub("", text)
    i = text.lower().find("<think>")
    return text[:i] if i >= 0 else text


def _grade_answer(task: EvalTask, answer_text: str) -> tuple[bool, str, None]:
    ans = strip_thinking(answer_text).strip()
    shown = ans[:80].replace("\n", " ")
    if not ans:
        return False, "empty answer", None
    if len(ans.split()) > MAX_ANSWER_WORDS:
        return False, f"answer too long ({len(ans.split())} words) for a terse question: {shown!r}", None
    if task.numeric:
        nums = _NUMBER.findall(ans)
        if not nums:
            return False, f"no number in the answer: {shown!r}", None
        ok = float(nums[-1]) == float(task.expected)
        return ok, f"{'expected' if ok else 'wanted ' + task.expected + ', got'} {nums[-1]}", None
    ok = re.search(rf"(?<![A-Za-z0-9]){re.escape(task.expected)}(?![A-Za-z0-9])", ans, re.IGNORECASE) is not None
    return ok, (f"found {task.expected!r}" if ok else f"{task.expected!r} not in {shown!r}"), None


def extract_code(answer_text: str, entry: str) -> str | None:
    """The fenced block that defines `entry` (else the first python/unlabelled block), else the
    whole reply when it defines `entry` and compiles."""
    text = strip_thinking(answer_text)
    blocks = [(lang.lower(), body) for lang, body in FENCE.findall(text)]
    defines = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(entry)}\s*\(", re.MULTILINE)
    for _, body in blocks:
        if defines.search(body):
            return body
    for lang, body in blocks:
        if lang in ("", "python", "py", "python3"):
            return body
    if defines.search(text):
        try:
            compile(text, "<answer>", "exec")
        except SyntaxError:
            return None
        return text
    return None


@functools.cache
def sandbox_prefix() -> tuple[str, ...] | None:
    """The command prefix that removes network access (`unshare -n` as root, `unshare -rn` in a user
    namespace), or None where neither works here. Checked once per process by running it."""
    if not sys.platform.startswith("linux"):
        return None
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for flags in (("-n",), ("-rn",)):
        try:
            r = subprocess.run([unshare, *flags, "true"], capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return (unshare, *flags)
    return None


# Runs first in the child Python: sets the resource limits, then runs the answer file. Doing it in the
# child (not in a preexec_fn) keeps grade() safe to call from a thread (asyncio.to_thread). A limit the
# kernel refuses is reported on stderr (LIMITS_MARKER + JSON) and the answer still runs.
LIMITS_MARKER = "BENCHD-LIMITS-REFUSED "
_BOOTSTRAP = """
import json, resource, runpy, sys
path, wanted = sys.argv[1], json.loads(sys.argv[2])
refused = {}
for name, (soft, hard) in wanted.items():
    try:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    except (ValueError, OSError) as exc:
        refused[name] = f"{type(exc).__name__}: {exc}"
if refused:
    sys.stderr.write(@MARKER@ + json.dumps(refused) + "\\n")
    sys.stderr.flush()
sys.argv = [path]
runpy.run_path(path, run_name="__main__")
""".replace("@MARKER@", repr(LIMITS_MARKER))


def planned_limits(cpu_s: int, platform: str | None = None) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """The rlimits the answer's child sets (name -> (soft, hard)), and those left out with why."""
    limits = {"RLIMIT_CPU": (cpu_s, cpu_s + 1), "RLIMIT_FSIZE": (FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES),
              "RLIMIT_CORE": (0, 0)}
    skipped: dict[str, str] = {}
    if (platform or sys.platform) == "darwin":
        skipped["RLIMIT_AS"] = ("not set on macOS: xnu refuses an address-space limit below the process's "
                                "current size (every Python process maps more than 1 GiB there)")
    else:
        limits["RLIMIT_AS"] = (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES)
    return limits, skipped


def describe_limits(limits: dict[str, tuple[int, int]], skipped: dict[str, str], refused: dict[str, str]) -> str:
    """One line for the eval record: what applied, what did not and why."""
    def show(name: str, value: int) -> str:
        if name == "RLIMIT_CPU":
            return f"{name}={value} s"
        return f"{name}={value // (1 << 20)} MiB" if value >= 1 << 20 else f"{name}={value}"

    applied = [show(n, soft) for n, (soft, _) in limits.items() if n not in refused]
    out = "applied: " + (", ".join(applied) or "none")
    missing = {**skipped, **{n: f"refused by the kernel ({why})" for n, why in refused.items()}}
    if missing:
        out += "; not applied: " + "; ".join(f"{n} {why}" for n, why in sorted(missing.items()))
    return out


def _refused_limits(stderr_lines: list[str]) -> dict[str, str]:
    for line in stderr_lines:
        if line.startswith(LIMITS_MARKER):
            try:
                found = json.loads(line[len(LIMITS_MARKER):])
            except ValueError:
                return {"?": line[len(LIMITS_MARKER):][:200]}
            return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
    return {}


def _grade_python(task: EvalTask, answer_text: str, timeout_s: float) -> GradeResult:
    code = extract_code(answer_text, task.entry)
    if code is None:
        return GradeResult(False, f"no code block defining {task.entry}()", None)
    return run_program(f"{code}\n\n# ---- benchd checks ----\n{task.tests}", timeout_s)


def run_program(program: str, timeout_s: float) -> GradeResult:
    """Run a Python program in the sandbox (no network where the OS allows, rlimits, a killed process
    group at `timeout_s`); it passes when it exits 0 having run to its end."""
    prefix = sandbox_prefix()
    sandboxed = prefix is not None
    marker = f"BENCHD-EVAL-OK-{secrets.token_hex(8)}"
    script = f"{program}\nprint({marker!r})\n"
    limits, skipped = planned_limits(max(1, int(timeout_s) + 1))
    with tempfile.TemporaryDirectory(prefix="benchd-eval-") as tmp:
        path = os.path.join(tmp, "answer.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(script)
        cmd = [*(prefix or ()), sys.executable, "-I", "-B", "-c", _BOOTSTRAP, path, json.dumps(limits)]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": tmp}
        proc = subprocess.Popen(
            cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, err = proc.communicate()
            lines = err.decode("utf-8", "replace").splitlines()
            return GradeResult(False, f"timeout after {timeout_s:g} s", sandboxed,
                               describe_limits(limits, skipped, _refused_limits(lines)))
    all_lines = err.decode("utf-8", "replace").strip().splitlines()
    applied = describe_limits(limits, skipped, _refused_limits(all_lines))
    stdout = out.decode("utf-8", "replace")
    if proc.returncode == 0 and marker in stdout:
        return GradeResult(True, "all checks passed", sandboxed, applied)
    lines = [ln for ln in all_lines if ln.strip() and not ln.startswith(LIMITS_MARKER)]
    why = lines[-1] if lines else f"exit status {proc.returncode}"
    if proc.returncode < 0:
        why = f"signal {-proc.returncode}" + (f" ({lines[-1]})" if lines else "")
    return GradeResult(False, why[:500], sandboxed, applied)


def grade(task: EvalTask, answer_text: str, *, timeout_s: float | None = None) -> GradeResult:
    """Grade one answer (blocks for at most the task's timeout when code runs)."""
    if task.kind == "answer":
        return GradeResult(*_grade_answer(task, answer_text))
    return _grade_python(task, answer_text, task.timeout_s if timeout_s is None else timeout_s)


def to_result(job: str, candidate: str, task: EvalTask, graded: GradeResult) -> EvalResult:
    return EvalResult(job=job, candidate=candidate, tier=task.tier, task=task.id, passed=graded.passed,
                      detail=graded.detail, sandboxed=graded.sandboxed, limits=graded.limits)


def pass_rate(results: list[EvalResult]) -> float | None:
    """Share of passed tasks; None when nothing ran."""
    return sum(r.passed for r in results) / len(results) if results else None
