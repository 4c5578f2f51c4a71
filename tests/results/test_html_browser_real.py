"""The page of a REAL demo sweep (the session's `demo_run`: three candidates on real llama-server and mlx_lm.server,
two contexts) in headless Chromium: all drawn, tooltip on hover, another axis redraws, no request, not blank.
Set BENCHD_SCREENSHOT=path to also write the README's screenshot (the Pareto section, hovered)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cdp import chromium

from tests.results.test_html_browser import (  # noqa: F401  (_need_chromium: an autouse fixture, used by being imported)
    _need_chromium,
    assert_not_blank,
    assert_offline_and_clean,
    load,
    point_center,
)

pytestmark = [pytest.mark.browser]


def save_small(png: Path, out: Path) -> None:
    """The README's copy: the top 1000 px, 96 colours (a third of the size, still sharp text)."""
    from PIL import Image

    with Image.open(png) as im:
        small = im.crop((0, 0, im.width, min(im.height, 1000))).convert("RGB").quantize(colors=96, method=Image.Quantize.FASTOCTREE)
        small.save(out, optimize=True)


@pytest.mark.slow
async def test_demo_page_in_chromium(demo_run: Any, tmp_path: Path) -> None:
    assert demo_run.returncode == 0, demo_run.out[-3000:]
    (json_path,) = sorted((demo_run.state / "runbooks").glob("*.json"))
    doc = json.loads(json_path.read_text())
    candidates = [c["id"] for c in doc["sweep"]["candidates"]]
    contexts = doc["sweep"]["contexts"]
    page_path = json_path.with_suffix(".html")
    assert page_path.stat().st_size < 1_500_000, page_path.stat().st_size
    async with chromium(tmp_path / "profile") as page:
        url = await load(page, page_path)
        text = await page.js("document.body.innerText")
        for cand in candidates:
            assert cand in text
        for ctx in contexts:
            assert f"Context {ctx} tokens" in text
            drawn = await page.js(f"document.querySelectorAll('#chart-pareto-{ctx} g.mark-symbol.role-mark path').length")
            assert drawn == len(candidates), f"context {ctx}: {drawn} points drawn"
        labels = await page.js("Array.from(document.querySelectorAll('#chart-probes text')).map(t => t.textContent)")
        assert set(candidates) <= set(labels) and {str(c) for c in contexts} <= set(labels)

        # Hover: the tooltip appears with the cell's median, CI, probes and sources.
        ctx0 = contexts[0]
        assert not await page.js("!!document.querySelector('#vg-tooltip-element.visible')")
        x, y, label = await point_center(page, f"#chart-pareto-{ctx0} g.mark-symbol.role-mark path")
        await page.hover(x, y)
        tip = await page.wait_for("(() => { const t = document.querySelector('#vg-tooltip-element.visible');"
                                  " return t && t.innerText; })()")
        hovered = next(c for c in candidates if f"candidate: {c};" in label)
        assert hovered in tip and "median" in tip and "source: " in tip and "ok," in tip
        if os.environ.get("BENCHD_SCREENSHOT"):  # the README's picture: the Pareto section, a point hovered
            await page.js("window.scrollTo(0, document.getElementById('pareto').offsetTop - 8)")
            x, y, _ = await point_center(page, f"#chart-pareto-{ctx0} g.mark-symbol.role-mark path", scroll=False)
            await page.hover(x, y)
            await page.wait_for("!!document.querySelector('#vg-tooltip-element.visible')")
            shot = await page.screenshot(tmp_path / "readme.png", full_page=False)
            save_small(shot, Path(os.environ["BENCHD_SCREENSHOT"]))

        # Selection: another x axis redraws every Pareto chart with that axis, and names who is not drawn.
        before = await page.js(f"document.querySelector('#chart-pareto-{ctx0} .role-axis-title text').textContent")
        await page.js("(() => { const s = document.getElementById('x-axis'); s.value = 'prompt_tps';"
                      " s.dispatchEvent(new Event('change')); })()")
        after = await page.wait_for(
            f"(() => {{ const t = document.querySelector('#chart-pareto-{ctx0} .role-axis-title text');"
            " return t && t.textContent.startsWith('prompt processing') && t.textContent; })()")
        assert after != before
        undrawn = await page.js(f"document.getElementById('chart-pareto-{ctx0}-undrawn').textContent")
        assert "tiny-mlx" in undrawn and "no prompt timing" in undrawn  # mlx_lm.server reports none

        shot = await page.screenshot(tmp_path / "runbook.png")
        assert_not_blank(shot)
        assert_offline_and_clean(page, url)
