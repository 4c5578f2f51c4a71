"""A Hugging Face model id (`mlx-community/Qwen3-4B-4bit`) given as an MLX candidate's model, resolved
offline to its folder in the local Hugging Face cache: benchd never downloads at job time.

The cache is the Hub's own layout: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
`$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`; the id's folder is
`models--<org>--<name>`, its revision `refs/<rev>` (default `main`, or `id@rev`), the files
`snapshots/<commit>`. The resolved path names the commit, so the runbook records the revision.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from benchd.errors import BenchdError

#: `org/name` or `org/name@revision`, as the Hub spells ids (no leading dot, no `..`).
HF_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<rev>[\w./-]+))?$")


def hub_cache() -> Path:
    """The local Hugging Face hub cache (where `huggingface-cli download` puts models)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "huggingface" / "hub"


def looks_like_id(value: str) -> bool:
    return ".." not in value and HF_ID.match(value) is not None


def resolve_id(value: str, field: str, source: str = "") -> str:
    """The snapshot folder of a cached model id (`id` or `id@rev`); a BenchdError naming the field and
    where it looked when the id, its revision or its snapshot is not in the cache."""
    m = HF_ID.match(value)
    if m is None:
        raise BenchdError("bad_model", f"{value!r} is not a Hugging Face model id", field)
    repo, rev = m.group("repo"), m.group("rev") or "main"
    folder = hub_cache() / f"models--{repo.replace('/', '--')}"
    prefix = f"{source}: " if source else ""
    where = field.removeprefix("$.")
    if not folder.is_dir():
        raise BenchdError("model_not_cached", f"{prefix}{where} {value!r} reads as a Hugging Face id, and it is not in "
                          f"the local cache ({folder} does not exist): benchd never downloads; download it first "
                          f"(`huggingface-cli download {repo}`) or give the model folder's path", field)
    ref = folder / "refs" / rev
    commit = ref.read_text().strip() if ref.is_file() else rev
    snapshot = folder / "snapshots" / commit
    if not snapshot.is_dir():
        known = sorted(p.name for p in (folder / "refs").glob("*")) if (folder / "refs").is_dir() else []
        raise BenchdError("model_not_cached", f"{prefix}{where} {value!r}: revision {rev!r} is not in the local cache "
                          f"({snapshot} does not exist; cached refs: {', '.join(known) or 'none'})", field)
    return str(snapshot)
