"""The error rate of the `kld` axis's verdicts, simulated through the functions the daemon calls.

Each replicate draws per-token KL divergences for two candidates scored on the same chunks of one text
(log-normal per token, heavy-tailed like a quant's: a chunk difficulty factor and a per-token factor shared
by both candidates, since they read the same tokens, plus each candidate's own per-token noise), reduces
them to per-chunk means as `llama-perplexity` prints them and `benchd.engine.kld.parse_kld_output`
recovers them (`KldResult.chunk_kld`), takes the axis's samples with `benchd.engine.kld.pareto_samples`,
and asks the Pareto question as the runbook does (`results.pareto.row_judge`, α from `pareto.view_alpha`
over the sweep's `stats.stop.planned_axes`, the axis table's 10 % margin). Counts do not depend on load.

    python benchmarks/kld_sim.py [--reps N] [--seed S]
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats_sim import mc, start

from benchd.engine.kld import pareto_samples
from benchd.results.pareto import row_judge, view_alpha
from benchd.schemas import Candidate, Kld, KldResult, Point, Sweep
from benchd.stats import stop


@dataclass
class Case:
    """Two candidates' true mean KLD ratio (B ÷ A) on `chunks` chunks of `context` tokens."""

    name: str
    ratio: float
    chunks: int
    context: int = 512
    chunk_sigma: float = 0.08  # the chunk difficulty factor's log spread
    same: bool = False  # B is A (the same per-token values: a deterministic tool scoring one candidate twice)
    ask: str = "twins"  # twins: false "different" either way; margin: "different, B worse"; true: B worse found
    goal: str = ""


#: Per-token log-KLD spread, shared by both candidates (the same hard tokens) and each one's own (σ 1.41 in
#: all). With the chunk factor's 0.08 (`Case.chunk_sigma`) the per-chunk means' log spread is ~0.18, the
#: 0.17 of the 8 chunks of RESULTS.md section 15's run (the tiny model's q8_0 against f16 at 512).
SIGMA_SHARED = 1.0
SIGMA_OWN = 1.0
MEDIAN_KLD = 0.002


def _sweep(case: Case) -> Sweep:
    cands = [Candidate(id=x, runtime="llama-server", model="/m") for x in ("ref", "a", "b")]
    return Sweep(name="kld-sim", contexts=[512], gen_tokens=32, candidates=cands, order="interleaved",
                 kld=Kld(reference="ref", contexts=[case.context]))


def chunk_means(case: Case, rng: random.Random) -> tuple[list[float], list[float]]:
    """A's and B's per-chunk mean KLDs (each chunk scored on its second half, as the tool does)."""
    per_chunk = case.context - 1 - case.context // 2
    mu_b = math.log(case.ratio)
    a: list[float] = []
    b: list[float] = []
    for _ in range(case.chunks):
        c = rng.gauss(0.0, case.chunk_sigma)
        sa = sb = 0.0
        for _ in range(per_chunk):
            shared = c + rng.gauss(0.0, SIGMA_SHARED)
            own_a = rng.gauss(0.0, SIGMA_OWN)
            sa += math.exp(shared + own_a)
            sb += math.exp(shared + (own_a if case.same else rng.gauss(0.0, SIGMA_OWN)) + mu_b)
        a.append(round(MEDIAN_KLD * sa / per_chunk, 6))  # the 6 decimals parse_kld_output keeps
        b.append(round(MEDIAN_KLD * sb / per_chunk, 6))
    return a, b


def one(case: Case, rng: random.Random) -> tuple[str, bool | None, float]:
    """One replicate: the view's kld verdict, whether B is better, and the α it was judged at."""
    sweep = _sweep(case)
    a, b = chunk_means(case, rng)
    results = [KldResult(candidate=c, reference="ref", context=case.context, status="ok", chunk_kld=v)
               for c, v in (("a", a), ("b", b))]
    samples = pareto_samples(results)
    alpha, _ = view_alpha(sweep, sweep.order)
    judge = row_judge([], [], 512, order=sweep.order, alpha=alpha, k=len(stop.planned_axes(sweep)),
                      extra={"kld": samples})
    got = judge(Point(candidate="a", values={"kld": 1.0}), Point(candidate="b", values={"kld": 1.0}))
    v = got.verdicts["kld"]
    return v.verdict, v.b_better, got.alpha_axis


def run_case(case: Case, reps: int, rng: random.Random) -> dict[str, float]:
    """Rates over `reps` replicates: "different" either way, "different" with B worse, tied, unresolved."""
    n = {"different": 0, "different_b_worse": 0, "tied": 0, "unresolved": 0}
    alpha_axis = 0.0
    for _ in range(reps):
        verdict, b_better, alpha_axis = one(case, rng)
        n[verdict] += 1
        n["different_b_worse"] += verdict == "different" and b_better is False
    return {**{k: v / reps for k, v in n.items()}, "alpha_axis": alpha_axis}


def cases() -> list[Case]:
    return [
        Case("the same candidate twice (equal per-chunk values)", 1.0, 9, same=True,
             goal="never different"),
        Case("twins: equal true KLD, 9 chunks of 512 (benchd's own text)", 1.0, 9,
             goal="false different <= the stated α_axis"),
        Case("twins: equal true KLD, 3 chunks", 1.0, 3, goal="false different <= α_axis"),
        Case("twins: equal true KLD, 40 chunks", 1.0, 40, goal="false different <= α_axis"),
        Case("twins: equal true KLD, 9 chunks, chunk spread 0.35", 1.0, 9, chunk_sigma=0.35,
             goal="false different <= α_axis"),
        Case("true ratio on the margin (B 1.10x), 9 chunks", 1.10, 9, ask="margin",
             goal="different, B worse <= α_axis/2 + MC error"),
        Case("true ratio on the margin (B 1.10x), 40 chunks", 1.10, 40, ask="margin",
             goal="different, B worse <= α_axis/2 + MC error"),
        Case("power: B 1.25x, 9 chunks", 1.25, 9, ask="true", goal="reported"),
        Case("power: B 1.5x, 9 chunks", 1.5, 9, ask="true", goal="reported"),
        Case("power: B 2x, 9 chunks (a q4_0 against a q8_0 KV cache is several times)", 2.0, 9, ask="true",
             goal="reported"),
        Case("power: B 1.5x, 3 chunks", 1.5, 3, ask="true", goal="reported"),
        Case("power: B 1.5x, 40 chunks", 1.5, 40, ask="true", goal="reported"),
        Case("power: B 2x, 9 chunks, chunk spread 0.35", 2.0, 9, chunk_sigma=0.35, ask="true", goal="reported"),
    ]


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> list[tuple[Case, dict[str, float]]]:
    t0 = time.monotonic()
    args, rng = start("kld_sim", __doc__, argv, out)
    got = []
    for case in cases():
        r = run_case(case, args.reps, rng)
        got.append((case, r))
        reps = args.reps
        if case.ask == "twins":
            line = f"different {r['different']:.4f} ± {mc(r['different'], reps):.4f} vs α_axis {r['alpha_axis']:.4f}"
        elif case.ask == "margin":
            line = (f"different, B worse {r['different_b_worse']:.4f} ± {mc(r['different_b_worse'], reps):.4f} "
                    f"vs α_axis/2 {r['alpha_axis'] / 2:.4f}")
        else:
            line = f"B worse found {r['different_b_worse']:.4f} ± {mc(r['different_b_worse'], reps):.4f}"
        out(f"| {case.name} | {line} | tied {r['tied']:.3f}, unresolved {r['unresolved']:.3f} | goal: {case.goal} |")
    out(f"# {time.monotonic() - t0:.0f} s")
    return got


if __name__ == "__main__":
    main()
