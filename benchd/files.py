"""Files a user named: what kind each path is, and a read that opens regular files only, never blocking on
a FIFO (`os.open` with O_NONBLOCK, then `fstat` on the descriptor: no window between check and read)."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import IO, Any

_KINDS = ((stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
          (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "directory"), (stat.S_ISREG, "file"))


def kind_of_mode(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


def kind_of(path: str) -> str | None:
    """"file", "directory", "FIFO (named pipe)", "character device", ... (symlinks followed), or None
    when nothing is there (or it cannot be stat'ed). A `stat`, never an open."""
    try:
        return kind_of_mode(os.stat(path).st_mode)
    except (OSError, ValueError):
        return None


def open_regular(path: str, mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """`open(path, mode)` for reading, refusing anything but a regular file with an OSError (EINVAL)
    that names what it is; the open itself never blocks."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(st_mode):
            raise OSError(errno.EINVAL, f"{path} is a {kind_of_mode(st_mode)}, not a regular file")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return open(fd, mode, **kwargs)  # the caller closes it
    except BaseException:
        os.close(fd)
        raise


#: The most a small metadata file (a model dir's JSON configs, tokenizer included) may hold.
MAX_METADATA_BYTES = 64 << 20


def read_regular(path: str, max_bytes: int = MAX_METADATA_BYTES) -> bytes:
    """The whole of a regular file of at most `max_bytes` (`open_regular`'s refusals; a larger file
    is an OSError (EFBIG) rather than a read that fills memory)."""
    with open_regular(path) as f:
        data: bytes = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"{path} is larger than {max_bytes} bytes")
    return data
