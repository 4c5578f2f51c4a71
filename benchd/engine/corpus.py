"""The text every prompt is cut from: a fixed list of the Python standard library's own source files.
Reasons: docs/measuring.md#the-prompt-corpus.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import sysconfig
from dataclasses import dataclass

# The corpus: stdlib modules that exist as plain files in CPython 3.11-3.13 (sorted; ~2.1 M chars on
# 3.11). Files missing on some Python are skipped and the list actually read is recorded.
CORPUS_FILES: tuple[str, ...] = tuple(
    sorted(
        [
            "argparse.py", "ast.py", "asyncio/base_events.py", "asyncio/streams.py", "asyncio/tasks.py",
            "base64.py", "bisect.py", "calendar.py", "collections/__init__.py", "configparser.py",
            "contextlib.py", "copy.py", "csv.py", "dataclasses.py", "difflib.py", "email/message.py",
            "enum.py", "fnmatch.py", "fractions.py", "functools.py", "gettext.py", "heapq.py",
            "http/client.py", "inspect.py", "ipaddress.py", "json/__init__.py", "json/decoder.py",
            "json/encoder.py", "logging/__init__.py", "operator.py", "pprint.py", "queue.py", "random.py",
            "sched.py", "shlex.py", "shutil.py", "statistics.py", "string.py", "subprocess.py",
            "tarfile.py", "textwrap.py", "threading.py", "tokenize.py", "traceback.py", "typing.py",
            "unittest/case.py", "urllib/parse.py", "uuid.py", "weakref.py",
        ]
    )
)
FILE_SEPARATOR = "\n# ---- {path} ----\n"


@dataclass(frozen=True)
class Corpus:
    """The concatenated corpus text and what it was made from."""

    text: str
    files: tuple[str, ...]
    missing: tuple[str, ...]
    stdlib: str
    python: str
    sha256: str

    def take(self, n_chars: int) -> tuple[str, int]:
        """The first `n_chars` characters, cycling the corpus if it is shorter; returns (text, cycles)."""
        if n_chars <= len(self.text):
            return self.text[:n_chars], 1
        reps, rest = divmod(n_chars, len(self.text))
        return self.text * reps + self.text[:rest], reps + (1 if rest else 0)

    def describe(self) -> dict[str, object]:
        return {
            "source": "python-stdlib",
            "python": self.python,
            "stdlib": self.stdlib,
            "files": list(self.files),
            "missing": list(self.missing),
            "chars": len(self.text),
            "cycled": "the corpus repeats from its start when a prompt needs more characters",
        }


@functools.cache
def load_corpus(stdlib: str | None = None) -> Corpus:
    """Read the fixed file list from the stdlib folder (cached per folder)."""
    root = stdlib or sysconfig.get_paths()["stdlib"]
    parts: list[str] = []
    used: list[str] = []
    missing: list[str] = []
    for rel in CORPUS_FILES:
        path = os.path.join(root, *rel.split("/"))
        try:
            with open(path, encoding="utf-8", newline="") as fh:
                content = fh.read().replace("\r\n", "\n")
        except OSError:
            missing.append(rel)
            continue
        used.append(rel)
        parts.append(FILE_SEPARATOR.format(path=rel) + content)
    if not parts:
        raise RuntimeError(f"no corpus file found under the stdlib folder {root!r}")
    text = "".join(parts).lstrip("\n")
    return Corpus(
        text=text,
        files=tuple(used),
        missing=tuple(missing),
        stdlib=root,
        python=f"{sys.implementation.name} {'.'.join(map(str, sys.version_info[:3]))}",
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
    )
