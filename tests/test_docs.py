"""The docs stay true to the code: every sweep-file field in the committed JSON schema is documented in
docs/sweep-file.md, every relative link in README.md and docs/ resolves (file, and heading anchor), and so does
every `docs/<page>.md#<heading>` a docstring or comment in benchd/ and benchctl/ points to."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def sweep_fields() -> dict[str, list[str]]:
    """Struct name -> its field names, for every struct the sweep schema defines."""
    schema = json.loads((ROOT / "schemas" / "sweep.schema.json").read_text())
    return {name: sorted(d.get("properties", {})) for name, d in schema["$defs"].items()}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", path.read_text(), re.M)}


def test_every_sweep_field_is_documented() -> None:
    """A field counts as documented as `name = ...`, `` `name` `` or a table header `[name]`."""
    text = (ROOT / "docs" / "sweep-file.md").read_text()
    missing = [
        f"{struct}.{field}"
        for struct, fields in sweep_fields().items()
        for field in fields
        if not re.search(rf"(^|[\s`{{,])({re.escape(field)})(\s*=|`)|\[\[?(\w+\.)?{re.escape(field)}\]", text, re.M)
    ]
    assert not missing, f"docs/sweep-file.md does not document: {', '.join(missing)}"


def test_relative_links_resolve() -> None:
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_docs_exist_and_are_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in DOCS[1:] if f"docs/{p.name}" not in readme]
    assert not unlinked, f"README.md does not link to: {', '.join(unlinked)}"


def test_code_pointers_into_the_docs_resolve() -> None:
    """A docstring keeps its contract and points to the reasons: `docs/measuring.md#memory-sampler`."""
    broken = []
    for src in sorted([*(ROOT / "benchd").rglob("*.py"), *(ROOT / "benchctl").rglob("*.py")]):
        for page, anchor in re.findall(r"docs/([\w-]+\.md)#([\w-]+)", src.read_text()):
            dest = ROOT / "docs" / page
            if not dest.is_file() or anchor not in anchors(dest):
                broken.append(f"{src.relative_to(ROOT)}: docs/{page}#{anchor}")
    assert not broken, "pointers to no such heading:\n" + "\n".join(broken)


def test_the_race_axes_named_in_the_docs_are_the_engines() -> None:
    """docs/measuring.md names the axes a race look compares; they are `racing.PROBE_AXES`, in its order."""
    from benchd.engine.racing import PROBE_AXES

    text = " ".join((ROOT / "docs" / "measuring.md").read_text().split())
    assert f"both sides measured ({', '.join(PROBE_AXES)}: `racing.PROBE_AXES`)" in text
