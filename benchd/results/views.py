"""The views of a runbook (a view registers in `RENDERERS`): what each needs installed and how it writes
its files; `render_views` is the in-process path (the worker in `render` calls it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from benchd.schemas import Runbook


@dataclass(frozen=True)
class Renderer:
    name: str
    missing: Callable[[], str | None]  # None: can render here; else why not (an install hint)
    render: Callable[[Runbook, Path, Path | None], list[Path]]  # (runbook, its folder, cache dir) -> files


def _charts_missing() -> str | None:
    from benchd.results import plot

    return None if plot.available() else plot.MISSING


def _charts(rb: Runbook, out_dir: Path, _cache_dir: Path | None) -> list[Path]:
    from benchd.results.plot import write_charts

    return write_charts(rb, out_dir)


def _page_missing() -> str | None:
    return None  # always written: without the html extra it has the tables and says why it has no charts


def _page(rb: Runbook, out_dir: Path, cache_dir: Path | None) -> list[Path]:
    from benchd.results.html import write_page

    return [write_page(rb, out_dir, cache_dir)]


#: Every view of a runbook, in render order (plain table: a new view adds one entry).
RENDERERS: dict[str, Renderer] = {
    "charts": Renderer("charts", _charts_missing, _charts),
    "page": Renderer("page", _page_missing, _page),
}


def available(names: list[str] | None = None) -> list[str]:
    """The views that can be rendered here (their requirements are importable); cheap, no import."""
    return [n for n in (names or list(RENDERERS)) if RENDERERS[n].missing() is None]


class Rendered(TypedDict):
    """What `render_views` did: the files written, and the views skipped or failed with why."""

    written: list[str]
    skipped: dict[str, str]
    errors: dict[str, str]


def render_views(rb: Runbook, out_dir: Path, names: list[str] | None = None, *, cache_dir: Path | None = None,
                 collect_errors: bool = False) -> Rendered:
    """Render views of `rb` into `out_dir` in THIS process: {written, skipped, errors}. A missing
    requirement skips the view; a failure raises, or with `collect_errors` is recorded by name."""
    out = Rendered(written=[], skipped={}, errors={})
    for name in names or list(RENDERERS):
        r = RENDERERS[name]
        why = r.missing()
        if why is not None:
            out["skipped"][name] = why
            continue
        try:
            out["written"] += [str(p) for p in r.render(rb, out_dir, cache_dir)]
        except Exception as exc:
            if not collect_errors:
                raise
            out["errors"][name] = f"{type(exc).__name__}: {exc}"
    return out
