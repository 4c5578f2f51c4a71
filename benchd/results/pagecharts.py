"""Vega-Lite specs for the runbook and comparison pages: every candidate one shape and colour everywhere,
fill for its state (`state_legend`). Reasons and facts: docs/architecture.md#the-pages-charts."""

from __future__ import annotations

from typing import Any

from benchd.results.records import axis_label
from benchd.results.text import STATE_WORDS

Spec = dict[str, Any]

SHAPES = ("circle", "square", "triangle-up", "diamond", "cross", "triangle-down", "triangle-right",
          "triangle-left", "wedge", "arrow")
#: Dark, light, mid... so neighbours differ in grey scale too (ColorBrewer-derived).
COLOURS = ("#08306b", "#f4a582", "#2166ac", "#b2182b", "#7fbc41", "#542788", "#e08214", "#4d4d4d",
           "#80cdc1", "#c51b7d")
MARKS = {"ok": ("circle", "#08306b"), "short": ("triangle-down", "#e08214"), "null": ("square", "#7f7f7f"),
         "failed": ("cross", "#b2182b"), "throttle-suspect": ("triangle-up", "#c51b7d"),
         "sentinel": ("diamond", "#7fbc41")}
DASHES = ([1, 0], [6, 3], [2, 2], [8, 2, 2, 2], [4, 4])
STATUS_FILL = {"frontier": 1.0, "tied": 0.4, "unresolved": 0.4, "dominated": 0.0}
#: The state legend's scale: each state's word (`text.STATE_WORDS`, as the report says it) and its fill.
STATE_SCALE: Spec = {"domain": [STATE_WORDS[k] for k in STATUS_FILL], "range": list(STATUS_FILL.values())}
CONFIG: Spec = {"font": "sans-serif", "axis": {"labelFontSize": 11, "titleFontSize": 11},
                "legend": {"labelFontSize": 11, "titleFontSize": 11}, "view": {"stroke": "#ccc"}}


def _grey(fill: float) -> str:
    level = round(255 - fill * (255 - 0x4d))
    return f"#{level:02x}{level:02x}{level:02x}"


def state_legend() -> str:
    """The fill legend in words: `filled = frontier, half-filled = tied or undecided, hollow = dominated`."""
    w = STATE_WORDS
    return (f"filled = {w['frontier']}, half-filled = {w['tied']} or {w['unresolved']} (on the frontier, not told "
            f"apart from another), hollow = {w['dominated']}")


def candidate_scales(candidates: list[str]) -> tuple[Spec, Spec]:
    """Shape and colour scales with a fixed domain: the same candidate looks the same everywhere."""
    n = len(candidates)
    shapes = [SHAPES[i % len(SHAPES)] for i in range(n)]
    colours = [COLOURS[i % len(COLOURS)] for i in range(n)]
    return ({"domain": candidates, "range": shapes}, {"domain": candidates, "range": colours})


def pareto_spec(points: list[Spec], context: int, axes: list[str], candidates: list[str],
                x_axis: str, y_axis: str) -> Spec:
    """One context's scatter. `xAxis`/`yAxis` are params the page's axis selectors change."""
    shape, colour = candidate_scales(candidates)
    pos = {
        "x": {"field": "x", "type": "quantitative", "title": axis_label(x_axis), "scale": {"zero": False, "nice": True}},
        "y": {"field": "y", "type": "quantitative", "title": axis_label(y_axis), "scale": {"zero": False, "nice": True}},
    }
    tooltip = [{"field": "candidate"}, {"field": "state"}, {"field": "relation", "title": "Pareto"},
               {"field": "probes"}]
    if any(p.get("verdict") for p in points):
        tooltip.append({"field": "verdict"})
    tooltip += [{"field": f"tip_{a}", "title": axis_label(a)} for a in axes]
    return {
        "description": f"Pareto view at context {context}: one point per candidate, the two chosen axes; "
                       f"{state_legend()}.",
        "width": 400, "height": 260, "config": CONFIG,
        "resolve": {"scale": {"fill": "independent"}, "legend": {"fill": "independent"}},
        "params": [{"name": "xAxis", "value": x_axis}, {"name": "yAxis", "value": y_axis}],
        "data": {"values": points},
        "transform": [{"calculate": "datum[xAxis]", "as": "x"}, {"calculate": "datum[yAxis]", "as": "y"},
                      {"filter": "isValid(datum.x) && isValid(datum.y)"},
                      {"calculate": "datum.candidate + (datum.status === 'frontier' ? '' : ' (' + datum.state + ')')",
                       "as": "label"}],
        "layer": [
            {"mark": {"type": "point", "size": 160, "strokeWidth": 2, "filled": False, "cursor": "pointer"},
             "encoding": {**pos,
                          "shape": {"field": "candidate", "type": "nominal", "scale": shape, "title": "candidate"},
                          "stroke": {"field": "candidate", "type": "nominal", "scale": colour},
                          "fill": {"field": "candidate", "type": "nominal", "scale": colour, "legend": None},
                          "fillOpacity": {"field": "state", "type": "nominal", "scale": STATE_SCALE, "legend": None},
                          "tooltip": tooltip}},
            {"mark": {"type": "text", "align": "left", "dx": 10, "dy": -8, "fontSize": 11},
             "encoding": {**pos, "text": {"field": "label"}}},
            # The state legend (Vega-Lite draws none for fillOpacity): a layer that draws no point carries
            # it as a fill of its own scale (fixed domain), grey as full, half and no fill.
            {"transform": [{"filter": "false"}], "mark": {"type": "point", "filled": True, "size": 0},
             "encoding": {**pos, "fill": {"field": "state", "type": "nominal", "title": "state", "scale": {
                 "domain": STATE_SCALE["domain"], "range": [_grey(v) for v in STATE_SCALE["range"]]},
                 "legend": {"symbolType": "circle", "symbolStrokeColor": "#4d4d4d", "symbolStrokeWidth": 1.5,
                            "symbolOpacity": 1}}}},
        ],
    }


def probes_spec(series: list[Spec], candidates: list[str]) -> Spec:
    """Small multiples: candidate rows × context columns, each probe's gen tok/s in order."""
    tooltip = [{"field": "candidate"}, {"field": "context"}, {"field": "probe"}, {"field": "mark", "title": "probe"},
               {"field": "gen_tps", "title": "gen tok/s", "format": ",.1f"}, {"field": "note"},
               {"field": "source"}, {"field": "cell_median", "title": "cell median", "format": ",.1f"},
               {"field": "verdict", "title": "cell"}]
    xy = {"x": {"field": "probe", "type": "ordinal", "title": "probe #", "axis": {"labelAngle": 0}},
          "y": {"field": "y", "type": "quantitative", "title": "gen tok/s", "scale": {"zero": False}}}
    return {
        "description": "Each probe's generation tok/s in order, one panel per candidate and context: drift and "
                       "outliers are visible; crosses are failed probes, squares null values, down-triangles "
                       "probes that generated fewer tokens than asked (at the bottom of the panel when null).",
        "config": CONFIG,
        "data": {"values": series},
        "facet": {"row": {"field": "candidate", "type": "nominal", "sort": candidates, "title": None},
                  "column": {"field": "context", "type": "ordinal", "title": "context (tokens)"}},
        "resolve": {"scale": {"y": "independent"}},
        "spec": {"width": 170, "height": 80, "layer": [
            {"transform": [{"filter": "datum.gen_tps !== null && datum.mark !== 'sentinel'"}],
             "mark": {"type": "line", "color": "#9ecae1"}, "encoding": xy},
            {"mark": {"type": "rule", "strokeDash": [4, 3], "color": "#4d4d4d"},
             "encoding": {"y": {"field": "cell_median", "aggregate": "max", "type": "quantitative"}}},
            {"mark": {"type": "point", "filled": True, "size": 60},
             "encoding": {**xy,
                          "shape": {"field": "mark", "type": "nominal", "title": "probe",
                                    "scale": {"domain": list(MARKS), "range": [s for s, _ in MARKS.values()]}},
                          "color": {"field": "mark", "type": "nominal", "title": "probe",
                                    "scale": {"domain": list(MARKS), "range": [c for _, c in MARKS.values()]}},
                          "tooltip": tooltip}},
        ]},
    }


def sustained_spec(windows: list[Spec], candidates: list[str]) -> Spec:
    shape, colour = candidate_scales(candidates)
    dashes = {"domain": candidates, "range": [DASHES[i % len(DASHES)] for i in range(len(candidates))]}
    enc = {"x": {"field": "window", "type": "quantitative", "title": "window # (in generation order)",
                 "axis": {"tickMinStep": 1}},
           "y": {"field": "tps", "type": "quantitative", "title": "tok/s in the window (log scale)",
                 "scale": {"type": "log"}},
           "color": {"field": "candidate", "type": "nominal", "scale": colour},
           "tooltip": [{"field": "candidate"}, {"field": "window"}, {"field": "tps", "title": "tok/s", "format": ",.1f"}]}
    return {
        "description": "Sustained generation: tokens per second in each window of one long generation, a line per "
                       "candidate (dash pattern and marker shape differ per candidate).",
        "width": 520, "height": 220, "config": CONFIG, "data": {"values": windows},
        "transform": [{"filter": "datum.tps > 0"}],  # a log scale has no place for 0
        "layer": [
            {"mark": {"type": "line", "strokeWidth": 2},
             "encoding": {**enc, "strokeDash": {"field": "candidate", "type": "nominal", "scale": dashes}}},
            {"mark": {"type": "point", "filled": True, "size": 70},
             "encoding": {**enc, "shape": {"field": "candidate", "type": "nominal", "scale": shape}}},
        ],
    }


def kld_spec(points: list[Spec], candidates: list[str]) -> Spec:
    """KLD against the reference (y, log) by the scoring run's peak memory (x), a panel per `[kld]` context."""
    shape, colour = candidate_scales(candidates)
    return {
        "description": "KL divergence from the reference against peak memory of the scoring run, one panel per "
                       "context, one point per candidate (marker shape and colour differ per candidate).",
        "config": CONFIG, "data": {"values": points},
        "transform": [{"filter": "datum.kld > 0"}],  # a log scale has no place for 0 (the reference itself)
        "facet": {"field": "context", "type": "ordinal", "title": "context (tokens per chunk)"},
        "spec": {"width": 260, "height": 200, "mark": {"type": "point", "filled": True, "size": 90},
                 "encoding": {
                     "x": {"field": "mem_mib", "type": "quantitative", "title": "peak memory (MiB)"},
                     "y": {"field": "kld", "type": "quantitative", "title": "mean KLD (log scale)",
                           "scale": {"type": "log"}},
                     "color": {"field": "candidate", "type": "nominal", "scale": colour},
                     "shape": {"field": "candidate", "type": "nominal", "scale": shape},
                     "tooltip": [{"field": "candidate"}, {"field": "context"},
                                 {"field": "kld", "title": "mean KLD", "format": ".3g"},
                                 {"field": "mem_mib", "title": "MiB", "format": ",.0f"}]}},
    }


def _lines_per_context(description: str, data: list[Spec], transform: Spec, enc: Spec, point_enc: Spec,
                       point_size: int) -> Spec:
    return {
        "description": description, "config": CONFIG, "data": {"values": data}, "transform": [transform],
        "facet": {"column": {"field": "context", "type": "ordinal", "title": "context (tokens)"}},
        "spec": {"width": 260, "height": 180, "layer": [
            {"mark": {"type": "line", "strokeWidth": 2}, "encoding": enc},
            {"mark": {"type": "point", "filled": True, "size": point_size}, "encoding": {**enc, **point_enc}},
        ]},
    }


def sessions_spec(turns: list[Spec], candidates: list[str]) -> Spec:
    """TTFT per session turn, a line per candidate, one panel per context (turn 1 is cold)."""
    shape, colour = candidate_scales(candidates)
    enc = {"x": {"field": "turn", "type": "ordinal", "title": "turn", "axis": {"labelAngle": 0}},
           "y": {"field": "ttft_ms", "type": "quantitative", "title": "TTFT (ms, log scale)", "scale": {"type": "log"}},
           "color": {"field": "candidate", "type": "nominal", "scale": colour},
           "tooltip": [{"field": "candidate"}, {"field": "context"}, {"field": "turn"},
                       {"field": "ttft_ms", "title": "TTFT ms", "format": ",.1f"}, {"field": "cached_tokens"},
                       {"field": "prompt_tokens"}, {"field": "reusable", "title": "reusable prefix"},
                       {"field": "miss", "title": "cache miss"}]}
    return _lines_per_context(
        "Session probes: the time to the first token of each turn on a warm prompt cache, a line per candidate; "
        "turn 1 is a cold prompt, later turns reuse what the cache still holds.", turns,
        {"filter": "datum.ttft_ms > 0"}, enc, {"shape": {"field": "candidate", "type": "nominal", "scale": shape}}, 60)


def levels_spec(rates: list[Spec], candidates: list[str]) -> Spec:
    """Aggregate vs per-request gen tok/s per concurrency level, a colour per candidate, a dash per measure."""
    _, colour = candidate_scales(candidates)
    enc = {"x": {"field": "level", "type": "ordinal", "title": "simultaneous requests", "axis": {"labelAngle": 0}},
           "y": {"field": "tps", "type": "quantitative", "title": "gen tok/s"},
           "color": {"field": "candidate", "type": "nominal", "scale": colour},
           "strokeDash": {"field": "measure", "type": "nominal", "title": "measure",
                          "scale": {"domain": ["aggregate", "per request"], "range": [[1, 0], [5, 3]]}},
           "tooltip": [{"field": "candidate"}, {"field": "context"}, {"field": "level"}, {"field": "measure"},
                       {"field": "tps", "title": "tok/s", "format": ",.1f"}]}
    return _lines_per_context(
        "Parallel requests: the aggregate generation rate of all simultaneous streams (solid) and each request's "
        "own rate (dashed) per level; level 1 is the cold probes.", rates, {"filter": "datum.tps !== null"}, enc,
        {}, 50)


def compare_spec(records: list[Spec]) -> Spec:
    """Ratio B/A per cell, one panel per metric; the rule at 1 is 'no change'."""
    return {
        "description": "Ratio B over A of each cell's median, one panel per metric; marker shape is the verdict.",
        "config": CONFIG, "data": {"values": records},
        "facet": {"column": {"field": "metric", "type": "nominal", "title": None}},
        "resolve": {"scale": {"x": "independent"}},
        "spec": {"width": 220, "height": {"step": 22}, "layer": [
            {"mark": {"type": "rule", "color": "#999", "strokeDash": [4, 3]}, "encoding": {"x": {"datum": 1}}},
            {"mark": {"type": "point", "filled": True, "size": 90},
             "encoding": {
                 "x": {"field": "ratio", "type": "quantitative", "title": "B / A", "scale": {"zero": False}},
                 "y": {"field": "cell", "type": "nominal", "title": None},
                 "shape": {"field": "verdict", "type": "nominal"},
                 "color": {"field": "verdict", "type": "nominal", "scale": {"scheme": "darkmulti"}},
                 "tooltip": [{"field": "cell"}, {"field": "metric"}, {"field": "median_a", "title": "A median"},
                             {"field": "median_b", "title": "B median"}, {"field": "ratio", "format": ".3f"},
                             {"field": "text", "title": "comparison"}, {"field": "verdict"}]}},
        ]},
    }
