"""The runbook page in a real browser: headless Chromium (the OS package) driven over the DevTools protocol.

Hand-built runbooks with nulls, failed rows and a single candidate, the page without the `html` extra and
the comparison page load without errors (no console error, no request other than the page's own file), the
last one's screenshot not blank; the session and level charts draw a line per candidate (and measure), their
null points left out, with a tooltip on hover; the priority selector comes first and every chart has a
legend. The page of a real demo sweep is in test_html_browser_real.py.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from cdp import Page, chromium, chromium_path
from test_html import NO_RUNTIME, agentic_doc, factory_runbook, newer_doc

from benchd.results import html
from benchd.results.compare import compare_runbooks

pytestmark = [pytest.mark.browser]


@pytest.fixture(autouse=True)
def _need_chromium() -> None:
    if chromium_path() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed in CI: `make test` installs it (Makefile target `browser`)")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    if not html.available():
        pytest.fail("the html extra is not installed (make test installs .[dev,plot,html])")


def assert_not_blank(png: Path) -> None:
    from PIL import Image

    with Image.open(png) as im:
        grey = im.convert("L")
        hist = grey.histogram()
        width, height = grey.size
    assert width >= 800 and height >= 800, (width, height)
    assert max(hist) / sum(hist) < 0.97, "the screenshot is (almost) one colour"
    assert sum(1 for n in hist if n) > 32, "too few grey levels for charts and text"


def assert_offline_and_clean(page: Page, url: str) -> None:
    assert page.errors() == []
    assert [u for u in page.requests() if u != url] == [], "the page made a request"


async def load(page: Page, path: Path, ready: str = "true") -> str:
    url = path.as_uri()  # tmp paths are absolute
    page.events.clear()
    await page.open(url)
    await page.wait_for(f"document.body.dataset.chartsReady === '{ready}'")
    return url


async def point_center(page: Page, selector: str, scroll: bool = True) -> tuple[float, float, str]:
    """The viewport centre of the first element matching `selector` (scrolled into view), and its aria-label."""
    x, y, label = await page.js(
        f"(() => {{ const p = document.querySelector({json.dumps(selector)});"
        f" if ({json.dumps(scroll)}) p.scrollIntoView({{block: 'center'}});"
        " const r = p.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2,"
        " p.getAttribute('aria-label')]; })()")
    return x, y, label


async def test_hand_built_runbooks_in_chromium(tmp_path: Path) -> None:
    """Nulls, a candidate with only failed rows, a single candidate, fields of newer runbooks (verdicts,
    sentinel, throttle, short probes, energy), no charts extra, and a comparison."""
    runtime = html.vega_runtime(tmp_path / "cache")
    full = factory_runbook(tmp_path / "full")
    single = factory_runbook(tmp_path / "single", only="mlx-lm")
    pages = {
        "full.html": (html.render_page(full, runtime), "true"),
        "single.html": (html.render_page(single, runtime), "true"),
        "newer-fields.html": (html.render_page(newer_doc(tmp_path / "newer"), runtime), "true"),
        "tables-only.html": (html.render_page(full, NO_RUNTIME), "absent"),
        "compare.html": (html.render_compare_page(compare_runbooks(full, full), runtime), "true"),
    }
    async with chromium(tmp_path / "profile") as page:
        for name, (data, ready) in pages.items():
            path = tmp_path / name
            await asyncio.to_thread(path.write_bytes, data)
            url = await load(page, path, ready)
            assert_offline_and_clean(page, url)
            if name != "compare.html":
                text = await page.js("document.body.innerText")
                assert "Lock a candidate" in text
                # The copy button copies (or, where the clipboard is refused, selects) the lock command.
                await page.js("document.querySelector('button.copy').click()")
                state = await page.wait_for("(() => { const b = document.querySelector('button.copy');"
                                            " return b.textContent !== 'copy' && b.textContent; })()")
                assert state in ("copied", "selected: press Ctrl/Cmd-C"), state
                if state != "copied":
                    assert (await page.js("String(window.getSelection())")).startswith("benchctl lock")
            if ready == "absent":
                assert "No charts:" in await page.js("document.body.innerText")
        assert_not_blank(await page.screenshot(tmp_path / "last.png"))


async def test_session_and_level_charts_in_chromium(tmp_path: Path) -> None:
    """TTFT per turn: a line and three points per candidate with sessions; aggregate vs per-request rate
    per level: a line per candidate and measure, the null aggregate of streams that did not overlap left
    out (no point, no error). Hovering a point shows its turn / level figures."""
    path = tmp_path / "agentic.html"
    await asyncio.to_thread(path.write_bytes, html.render_page(agentic_doc(tmp_path / "rb"), html.vega_runtime(tmp_path / "cache")))
    async with chromium(tmp_path / "profile") as page:
        url = await load(page, path)
        count = "(s => document.querySelectorAll(s).length)"
        assert await page.js(f"{count}('#chart-sessions g.mark-line.role-mark path')") == 2
        assert await page.js(f"{count}('#chart-sessions g.mark-symbol.role-mark path')") == 6
        labels = await page.js("Array.from(document.querySelectorAll('#chart-sessions text')).map(t => t.textContent)")
        assert {"gguf-plain", "mlx-lm", "turn"} <= set(labels), labels
        # level 1 (the cold cell's median) and 2, aggregate and per request; mlx-lm's aggregate at 2 is null
        assert await page.js(f"{count}('#chart-levels g.mark-line.role-mark path')") == 4
        assert await page.js(f"{count}('#chart-levels g.mark-symbol.role-mark path')") == 7
        x, y, label = await point_center(page, "#chart-sessions g.mark-symbol.role-mark path")
        await page.hover(x, y)
        tip = await page.wait_for("(() => { const t = document.querySelector('#vg-tooltip-element.visible');"
                                  " return t && t.innerText; })()")
        assert "turn" in tip and "TTFT ms" in tip and "cache miss" in tip, tip
        assert next(c for c in ("gguf-plain", "mlx-lm") if c in label) in tip, (label, tip)
        x, y, label = await point_center(page, "#chart-levels g.mark-symbol.role-mark path")
        await page.hover(x, y)
        tip = await page.wait_for("(() => { const t = document.querySelector('#vg-tooltip-element.visible');"
                                  " return t && t.innerText.includes('measure') && t.innerText; })()")
        assert "level" in tip and "tok/s" in tip, tip
        assert next(c for c in ("gguf-plain", "mlx-lm") if c in label) in tip, (label, tip)
        assert_offline_and_clean(page, url)


async def test_priority_selector_and_the_decision_first_in_chromium(tmp_path: Path) -> None:
    """The page opens on the priority selector, then the decision, the candidates and the summary; the
    selector offers `report --priority`'s priorities and shows each one's answer (the same lines) and
    only it, client-side: no request leaves the page."""
    from benchd.results.priority import PRIORITIES, priority_lines

    rb = newer_doc(tmp_path / "rb")
    path = tmp_path / "priority.html"
    await asyncio.to_thread(path.write_bytes, html.render_page(rb, html.vega_runtime(tmp_path / "cache")))
    async with chromium(tmp_path / "profile") as page:
        url = await load(page, path)
        order = await page.js("Array.from(document.querySelectorAll('main > section')).map(s => s.id)")
        assert order[:4] == ["priority", "decision", "candidates", "summary"], order
        top = await page.js("(() => { const r = document.getElementById('priority-choice').getBoundingClientRect();"
                            " return r.top; })()")
        assert 0 <= top < 900, "the selector is on the first screen"
        options = await page.js("Array.from(document.querySelectorAll('#priority-choice option')).map(o => o.value)")
        assert options == ["", *PRIORITIES]
        visible = "Array.from(document.querySelectorAll('article.priority')).filter(a => !a.hidden).map(a => a.dataset.priority)"
        assert await page.js(visible) == []
        for name in ("memory", "generation", ""):
            await page.js(f"(() => {{ const s = document.getElementById('priority-choice'); s.value = {json.dumps(name)};"
                          " s.dispatchEvent(new Event('change')); })()")
            await page.wait_for(f"document.body.dataset.priority === {json.dumps(name)}")
            assert await page.js(visible) == ([name] if name else [])
            if name:
                shown = await page.js(f"document.querySelector('article.priority[data-priority={name}]').innerText")
                assert shown.strip() == "\n".join(priority_lines(rb, name)).strip()
                assert shown.startswith(f"priority: {PRIORITIES[name].question}")
        decision = await page.js("document.getElementById('decision').innerText")
        assert "mlx-lm by gguf-plain" in decision
        assert_offline_and_clean(page, url)


async def test_every_chart_has_a_legend_in_the_state_words(tmp_path: Path) -> None:
    """Every chart the page draws has a legend; the Pareto charts' state legend and point labels use
    the words of `text.STATE_WORDS`, as the decision and the Pareto table do."""
    from benchd.results.text import STATE_WORDS

    path = tmp_path / "legends.html"
    rb = agentic_doc(tmp_path / "rb")  # sustained, sessions and levels beside the Pareto and probe charts
    await asyncio.to_thread(path.write_bytes, html.render_page(rb, html.vega_runtime(tmp_path / "cache")))
    async with chromium(tmp_path / "profile") as page:
        url = await load(page, path)
        legends = await page.js("Object.fromEntries(Array.from(document.querySelectorAll('div.chart')).map(c =>"
                                " [c.id, Array.from(c.querySelectorAll('.role-legend-title text')).map(t => t.textContent)]))")
        assert {"chart-probes", "chart-sustained", "chart-sessions", "chart-levels"} <= set(legends), legends
        assert all(titles for titles in legends.values()), legends
        assert legends["chart-sustained"] == ["candidate"]
        for ctx in (p.context for p in rb.pareto):
            assert legends[f"chart-pareto-{ctx}"] == ["candidate", "state"]
            labels = await page.js(f"Array.from(document.querySelectorAll('#chart-pareto-{ctx} "
                                   ".role-legend-label text')).map(t => t.textContent)")
            assert [w for w in labels if w in STATE_WORDS.values()] == [
                STATE_WORDS[k] for k in ("frontier", "tied", "unresolved", "dominated")]
        pareto = await page.js("document.getElementById('pareto').innerText")
        intro = pareto.split("Context")[0]  # the section's words for the fills: the same state words
        assert all(STATE_WORDS[k] in intro for k in ("frontier", "tied", "unresolved", "dominated")), intro
        assert f"({STATE_WORDS['dominated']})" in pareto
        assert_offline_and_clean(page, url)
