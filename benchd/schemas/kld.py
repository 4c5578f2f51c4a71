"""KL divergence results (benchd.engine.kld): one per candidate and `[kld]` context, and the corpus they share."""

from __future__ import annotations

from msgspec import Struct


class KldCorpus(Struct, kw_only=True, frozen=True):
    """The text every candidate was scored on: where it came from, its sha256 and size."""

    path: str
    source: str  # "benchd's own text (benchd/data/kld-corpus.txt)" or "the sweep's kld.corpus"
    sha256: str
    bytes: int
    words: int
    tokens: int | None = None  # in the reference's tokenizer (BOS included), as the scoring tool reads it
    tokens_source: str | None = None


class KldResult(Struct, kw_only=True, frozen=True):
    """One candidate at one context against the reference. Every null figure has a reason in
    `null_reasons` (a candidate with another tokenizer: all of them). Uncertainties are the standard error
    of the mean over the scored tokens, as llama-perplexity prints them (`±`)."""

    candidate: str
    reference: str
    context: int
    status: str  # "ok" | "null" | "failed"
    reason: str | None = None
    kld_mean: float | None = None
    kld_mean_se: float | None = None
    kld_median: float | None = None
    kld_p99: float | None = None
    kld_max: float | None = None
    top1_agree: float | None = None  # fraction of scored tokens whose most likely token is the reference's
    top1_agree_se: float | None = None
    ppl_ratio: float | None = None  # PPL(candidate) / PPL(reference) on the scored tokens
    ppl_ratio_se: float | None = None
    ppl: float | None = None
    ppl_reference: float | None = None
    tokens_scored: int | None = None
    chunks: int | None = None
    #: The mean KLD of each chunk (recovered from the tool's cumulative per-chunk lines, or computed in-process).
    chunk_kld: list[float] = []
    tool: str | None = None  # "llama-perplexity" | "mlx_lm (benchd.engine.kld_mlx)"
    tool_version: str | None = None
    binary: str | None = None
    binary_sha256: str | None = None
    argv: list[str] = []
    #: Candidate args that do not reach the scoring tool (server-only flags), named so nothing is silent.
    dropped_args: list[str] = []
    reference_logits: str | None = None  # the cached reference file the candidate was scored against
    seconds: float | None = None  # wall clock of the candidate's (last) scoring run (the reference's run apart)
    attempts: int = 1  # llama-perplexity runs until its summary block arrived (benchd.engine.kld.KLD_ATTEMPTS)
    summary: str | None = None  # which output gave the figures: "summary block", "last chunk line", "computed in-process"
    reference_seconds: float | None = None  # the reference logits' run, null when they came from the cache
    mem_peak_bytes: int | None = None
    mem_source: str | None = None
    #: How comparable the figure is to a same-runtime one (an MLX candidate scored against a GGUF reference).
    comparability: str | None = None
    notes: list[str] = []
    null_reasons: dict[str, str] = {}
