"""What the runbook page costs: its size (goal < 1.5 MB) and the time to write it, beside the Markdown.

Method, all in one run:
1. The page of a real runbook (the newest in `--state-dir`, e.g. after `make demo`; or `--runbook PATH`)
   is rendered with the inlined Vega runtime and without it; sizes are printed part by part (runtime,
   chart specs + data, the rest).
2. Rendering the page vs rendering the Markdown (`report.render_markdown`), alternated `--rounds` times
   in this process: the median of each and their ratio (the page is written next to the Markdown).
3. The runtime bundle's first cost (vl-convert-python bundling, an empty cache dir) vs reading it from
   the cache, each in a fresh process, CPU seconds of the child (user + system).

    .venv/bin/python benchmarks/page_cost.py [--state-dir state] [--runbook PATH] [--rounds 20] [--json]

Exit status 0 when the page is under the size goal, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchd.config import Config
from benchd.results import html, report
from benchd.results.runbook import load_runbook

GOAL_BYTES = 1_500_000
CHILD = ("import sys; from pathlib import Path; from benchd.results.html import vega_runtime; "
         "rt = vega_runtime(Path(sys.argv[1])); assert rt.script")


def child_cpu_s(cache: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", CHILD, str(cache)], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state-dir", default="state")
    ap.add_argument("--runbook", default=None)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    config = Config.resolve(state_dir=args.state_dir)
    rb = load_runbook(args.runbook, config)
    if not html.available():
        print("the html extra is not installed: pip install 'benchd[html]'", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        first = child_cpu_s(cache)
        cached = child_cpu_s(cache)
        runtime = html.vega_runtime(cache)
        page = html.render_page(rb, runtime)
    tables_only = html.render_page(rb, html.Runtime(None, html.MISSING))
    specs = re.search(rb"<script type='application/json' id='benchd-charts'>(.*?)</script>", page, re.S)
    spec_bytes = len(specs.group(1)) if specs else 0
    runtime_bytes = len((runtime.script or "").encode())

    page_s: list[float] = []
    md_s: list[float] = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        html.render_page(rb, runtime)
        t1 = time.perf_counter()
        report.render_markdown(rb)
        t2 = time.perf_counter()
        page_s.append(t1 - t0)
        md_s.append(t2 - t1)

    out = {
        "runbook": rb.id, "candidates": len(rb.sweep.candidates), "contexts": len(rb.sweep.contexts),
        "rows": len(rb.rows), "page_bytes": len(page), "goal_bytes": GOAL_BYTES,
        "runtime_bytes": runtime_bytes, "charts_json_bytes": spec_bytes,
        "rest_bytes": len(page) - runtime_bytes - spec_bytes, "tables_only_page_bytes": len(tables_only),
        "render_page_ms_median": round(statistics.median(page_s) * 1000, 2),
        "render_markdown_ms_median": round(statistics.median(md_s) * 1000, 2),
        "page_over_markdown": round(statistics.median(page_s) / statistics.median(md_s), 2),
        "bundle_first_cpu_s": round(first, 2), "bundle_cached_cpu_s": round(cached, 2),
        "first_over_cached": round(first / cached, 1) if cached else None,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:<26} {v}")
    return 0 if len(page) < GOAL_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
