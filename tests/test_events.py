"""The typed events (benchd/schemas/events.py): one payload struct per event type, every writer's keywords
among its fields, every event a sweep writes decodes, and docs/api.md's table is the structs'."""

from __future__ import annotations

import ast
import asyncio
import typing
from pathlib import Path

from benchd.schemas.api import EventType
from benchd.schemas.events import PAYLOADS, markdown, payload
from tests.engine.test_engine_fast import SCENARIOS, _run, _scenario

ROOT = Path(__file__).resolve().parents[1]


def test_one_struct_per_event_type() -> None:
    assert list(PAYLOADS) == list(typing.get_args(EventType))


def test_every_emit_names_fields_of_its_struct() -> None:
    """Each `emit("type", key=…)` / `events.append(job, "type", {...})` in benchd uses its struct's fields."""
    seen = set()
    for path in (ROOT / "benchd").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            kind = next((a for a in args if a in PAYLOADS), None)
            if kind is None or func not in ("emit", "append", "_insert_event", "transition"):
                continue
            keys = {k.arg for k in node.keywords if k.arg} if func == "emit" else {
                k.value for d in node.args if isinstance(d, ast.Dict) for k in d.keys if isinstance(k, ast.Constant)}
            fields = set(PAYLOADS[kind].__struct_fields__)
            assert keys <= fields, f"{path.relative_to(ROOT)}:{node.lineno} {kind}: {sorted(keys - fields)}"
            seen.add(kind)
    assert len(seen) > 15  # the scan found the writers


def test_every_event_a_sweep_writes_decodes_into_its_struct(tmp_path: Path) -> None:
    for name in SCENARIOS:
        config, store, job, sweep, script = _scenario(tmp_path / name, name)
        asyncio.run(_run(store, job, sweep, script, config))
        for e in store.events.iterate(job):
            got = payload(e)
            assert set(e.payload) <= set(type(got).__struct_fields__), (e.type, sorted(e.payload))


def test_the_api_doc_lists_the_events_from_the_structs() -> None:
    doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    block = doc.split("<!-- events: generated -->\n", 1)[1].split("<!-- /events -->", 1)[0]
    assert block == markdown(), "regenerate: python -m benchd.schemas.events (between the markers in docs/api.md)"
