"""`atomic_write`: a file is either its old content or its new content, never half of one.

Every file benchd rewrites in place (runbooks, the lock, `recheck.json`, server records, the hash
cache, the runtime marker) goes through it: written beside the target under a hidden name unique to
this process, flushed to disk, then renamed over the target (a rename within a directory is atomic).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def atomic_write(path: Path, data: bytes | str | Iterable[bytes]) -> None:
    """`data` may come in pieces (an iterable of bytes): a large file is then never whole in memory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with tmp.open("wb") as f:
        for chunk in (data,) if isinstance(data, (bytes, str)) else data:
            f.write(chunk.encode() if isinstance(chunk, str) else chunk)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
