"""KL divergence against a reference candidate: the sweep's `[kld]` tail step and its checks. Results are
`kld_finished` events (a resumed job skips them). Reasons and facts: docs/kld.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import math
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import msgspec

from benchd.atomic import atomic_replace
from benchd.config import Config
from benchd.errors import BenchdError
from benchd.lifeline import die_with_daemon
from benchd.schemas import Candidate, Event, KldCorpus, KldResult, Sweep
from benchd.sensors.facts import hash_file, hash_model
from benchd.sensors.memory.sampler import MemorySampler
from benchd.servers.locate import (
    _argv_python,
    _dist_version,
    llama_version,
    resolve_llama_binary,
    resolve_mlx_command,
)
from benchd.servers.runtimes.flags import flag_values
from benchd.servers.runtimes.vision import gguf_metadata
from benchd.stats.notation import plural

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "data" / "kld-corpus.txt"
GGUF_RUNTIME = "llama-server"
MLX_RUNTIMES = ("mlx_lm.server", "mlx_vlm.server")
MLX_SCRIPT = Path(__file__).resolve().parent.parent / "data" / "kldmlx.py"  # run by the MLX venv, not imported
#: llama-server flags that change what llama-perplexity computes (True: the flag takes a value).
PASS_FLAGS: dict[str, bool] = {
    "-ctk": True, "--cache-type-k": True, "-ctv": True, "--cache-type-v": True, "-fa": True, "--flash-attn": True,
    "-t": True, "--threads": True, "-tb": True, "--threads-batch": True, "-ngl": True, "--n-gpu-layers": True,
    "--gpu-layers": True, "-ub": True, "--ubatch-size": True, "--mlock": False, "-nkvo": False,
    "--no-kv-offload": False, "--override-kv": True, "-ot": True, "--override-tensor": True, "--rope-scaling": True,
    "--rope-scale": True, "--rope-freq-base": True, "--rope-freq-scale": True, "--swa-full": False, "-sm": True,
    "--split-mode": True, "-ts": True, "--tensor-split": True, "-mg": True, "--main-gpu": True, "-dev": True,
    "--device": True, "--numa": True, "-cmoe": False, "--cpu-moe": False, "-ncmoe": True, "--n-cpu-moe": True,
}
#: A scoring run may take this long per 1k tokens of one chunk pass before it is killed (a hang guard).
SECONDS_PER_1K_TOKENS = 120.0
#: mlx_lm's KV quantization flags a candidate may carry in `args` (as `mlx_lm.server` would take them).
MLX_KV_FLAGS = ("--kv-bits", "--kv-group-size", "--quantized-kv-start")


def corpus_path(sweep: Sweep) -> tuple[Path, str]:
    """The text to score and where it comes from."""
    if sweep.kld.corpus:
        return Path(sweep.kld.corpus), "the sweep's kld.corpus"
    return DEFAULT_CORPUS, "benchd's own text (benchd/data/kld-corpus.txt, written for benchd, MIT)"


def corpus_facts(sweep: Sweep) -> KldCorpus:
    path, source = corpus_path(sweep)
    data = path.read_bytes()
    return KldCorpus(path=str(path), source=source, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
                     words=len(data.decode("utf-8", "replace").split()))


@dataclass(frozen=True)
class Tokenizer:
    """A candidate's vocabulary: the token strings by id, hashed (`key`), and where they were read."""

    key: str
    n_vocab: int
    source: str


def _hash_tokens(tokens: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(list(tokens), ensure_ascii=False).encode()).hexdigest()


def tokenizer_of(cand: Candidate) -> Tokenizer:
    """The candidate's vocabulary (GGUF or MLX dir); raises ValueError naming what could not be read."""
    if cand.runtime == GGUF_RUNTIME:
        return _gguf_tokenizer(cand.model)
    if cand.runtime in MLX_RUNTIMES:
        return _mlx_tokenizer(Path(cand.model) / "tokenizer.json")
    raise ValueError(f"runtime {cand.runtime} is not scored (KLD needs llama-server or mlx_lm.server weights)")


def _gguf_tokenizer(model: str) -> Tokenizer:
    try:
        meta = gguf_metadata(model)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {model} as a GGUF: {exc}") from exc
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise ValueError(f"{model} has no tokenizer.ggml.tokens")
    return Tokenizer(_hash_tokens([str(t) for t in tokens]), len(tokens), "GGUF tokenizer.ggml.tokens")


def _mlx_tokenizer(path: Path) -> Tokenizer:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    vocab = dict(data.get("model", {}).get("vocab") or {})
    for added in data.get("added_tokens") or []:
        vocab[str(added.get("content"))] = int(added.get("id"))
    if not vocab:
        raise ValueError(f"{path} has no vocabulary")
    by_id = [""] * (max(vocab.values()) + 1)
    for text, i in vocab.items():
        by_id[i] = text
    return Tokenizer(_hash_tokens(by_id), len(by_id), "tokenizer.json vocabulary and added tokens")


def count_tokens(cand: Candidate, text_path: Path, cache_dir: Path, timeout: float = 120.0) -> int:
    """The corpus's token count in the candidate's own tokenizer, BOS included."""
    if cand.runtime == GGUF_RUNTIME:
        exe, _ = resolve_llama_binary(None, cache_dir, "llama-tokenize")
        argv = [str(exe), "-m", cand.model, "-f", str(text_path), "--ids", "--show-count", "--log-disable"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              preexec_fn=die_with_daemon())
        m = re.search(r"Total number of tokens: (\d+)", proc.stdout)
        if proc.returncode != 0 or not m:
            raise ValueError(f"llama-tokenize failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
        return int(m.group(1))
    python = _mlx_python(cache_dir)
    proc = subprocess.run([python, str(MLX_SCRIPT), "count", "--model", cand.model, "--corpus", str(text_path)],
                          capture_output=True, text=True, timeout=timeout, check=False, preexec_fn=die_with_daemon())
    if proc.returncode != 0:
        raise ValueError(f"the MLX tokenizer failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return int(json.loads(proc.stdout)["tokens"])


def _mlx_python(cache_dir: Path) -> str:
    """The interpreter of the MLX runtime benchd would start (its venv's python)."""
    return _argv_python(resolve_mlx_command("mlx_lm.server", None, cache_dir)[0])


def scored(sweep: Sweep) -> list[Candidate]:
    """The candidates `[kld]` scores: every candidate benchd starts (the reference included)."""
    return [c for c in sweep.candidates if not c.external] if sweep.kld.reference else []


def planned_runs(sweep: Sweep, corpus_tokens: int) -> list[tuple[str, int, int, str]]:
    """The runs `[kld]` makes: (candidate id, context, tokens evaluated, purpose), the reference's first."""
    k = sweep.kld
    if k.reference is None:
        return []
    out = []
    for ctx in k.contexts:
        chunks = max(1, k.tokens // ctx) if k.tokens is not None else corpus_tokens // ctx
        out.append((k.reference, ctx, chunks * ctx, "reference logits"))
        out += [(c.id, ctx, chunks * ctx, "scoring") for c in scored(sweep)]
    return out


def static_problems(sweep: Sweep) -> list[BenchdError]:
    """What the daemon refuses at submit, no file tokenized: a reference benchd starts and scores, the
    corpus readable and two chunks of the largest context long by its bytes (a token is >= 1 byte)."""
    k = sweep.kld
    if k.reference is None:
        return []
    out: list[BenchdError] = []
    ref = next((c for c in sweep.candidates if c.id == k.reference), None)
    if ref is None:
        return [BenchdError("kld_reference", f"kld.reference {k.reference!r} is not a candidate id (candidates: "
                            f"{', '.join(c.id for c in sweep.candidates)})", "$.kld.reference")]
    if ref.external or ref.runtime not in (GGUF_RUNTIME, *MLX_RUNTIMES):
        out.append(BenchdError("kld_reference", f"kld.reference {ref.id!r} runs {ref.runtime}: a reference needs "
                               "weights benchd loads (llama-server GGUF or mlx_lm.server dir)", "$.kld.reference"))
    return out + _corpus_problems(sweep)  # a refused cache type: the llama-server adapter's flag check


def _corpus_problems(sweep: Sweep) -> list[BenchdError]:
    """The corpus given as an absolute path, readable, and two chunks of the largest context long by bytes."""
    k = sweep.kld
    path, _ = corpus_path(sweep)
    if k.corpus and not os.path.isabs(k.corpus):
        return [BenchdError("relative_path", f"kld.corpus {k.corpus!r} is relative; the daemon needs an absolute "
                            "path (benchctl resolves it against the sweep file's folder)", "$.kld.corpus")]
    try:
        size = path.stat().st_size
    except OSError as exc:
        return [BenchdError("kld_corpus", f"kld.corpus {path} cannot be read: {exc.strerror or exc}", "$.kld.corpus")]
    need = 2 * max(k.contexts)
    if size + 1 >= need:
        return []
    return [BenchdError("kld_corpus_short", f"kld.corpus {path} has {size} bytes: fewer tokens than "
                        f"the {need} the scoring needs for kld.contexts {max(k.contexts)} (two chunks: "
                        "llama-perplexity refuses a text shorter than 2 x context)", "$.kld.corpus")]


def local_problems(sweep: Sweep, cache_dir: Path) -> list[BenchdError]:
    """`benchctl validate`'s check here: the static ones, the corpus's token count, the tokenizers."""
    out = static_problems(sweep)
    k = sweep.kld
    if k.reference is None or out:
        return out
    ref = next(c for c in sweep.candidates if c.id == k.reference)
    try:
        ref_tok = tokenizer_of(ref)
    except ValueError as exc:
        return [BenchdError("kld_reference", f"kld.reference {ref.id!r}: {exc}", "$.kld.reference")]
    out += _token_count_problems(sweep, ref, cache_dir)
    for i, cand in enumerate(sweep.candidates):
        why = None if cand.external or cand.id == ref.id else tokenizer_mismatch(ref, ref_tok, cand)
        if why:
            out.append(BenchdError("kld_tokenizer", f"candidate {cand.id!r}: {why}; it cannot be scored against "
                                   f"kld.reference {ref.id!r}", f"$.candidates[{i}].model"))
    return out


def _token_count_problems(sweep: Sweep, ref: Candidate, cache_dir: Path) -> list[BenchdError]:
    """The corpus counted in the reference's tokenizer: two chunks of every context long."""
    path, _ = corpus_path(sweep)
    try:
        n = count_tokens(ref, path, cache_dir)
    except (ValueError, BenchdError, OSError, subprocess.TimeoutExpired) as exc:
        return [BenchdError("kld_corpus", f"kld.corpus {path}: cannot count its tokens with the reference's "
                            f"tokenizer: {exc}", "$.kld.corpus")]
    short = [c for c in sweep.kld.contexts if n < 2 * c]
    if not short:
        return []
    return [BenchdError("kld_corpus_short", f"kld.corpus {path} is {n} tokens in {ref.id!r}'s tokenizer: "
                        f"fewer than two chunks of kld.contexts {', '.join(map(str, short))} (the scoring "
                        f"needs 2 x context tokens)", "$.kld.corpus")]


def tokenizer_mismatch(ref: Candidate, ref_tok: Tokenizer, cand: Candidate) -> str | None:
    """Why `cand` cannot be scored against `ref` (None: it can)."""
    try:
        tok = tokenizer_of(cand)
    except ValueError as exc:
        return str(exc)
    if tok.key != ref_tok.key:
        return (f"its tokenizer ({tok.n_vocab} tokens, {tok.source}) is not the reference's ({ref_tok.n_vocab} "
                f"tokens, {ref_tok.source})")
    if cand.runtime == GGUF_RUNTIME and ref.runtime != GGUF_RUNTIME:
        return "a GGUF candidate is scored by llama-perplexity, which needs a GGUF reference"
    return None


def split_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(args llama-perplexity gets, args it does not get) from a llama-server candidate's args."""
    keep: list[str] = []
    drop: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, _ = a.partition("=")
        takes = PASS_FLAGS.get(name)
        if takes is None:
            drop.append(a)
            if i + 1 < len(args) and not args[i + 1].startswith("-"):
                drop.append(args[i + 1])
                i += 1
        elif takes and not eq and i + 1 < len(args):
            keep += [a, args[i + 1]]
            i += 1
        else:
            keep.append(a)
        i += 1
    return keep, drop


#: mlx_lm.server's `--quantized-kv-start` default (mlx_lm/generate.py, 0.32.2; kldmlx.py uses the same).
MLX_QUANTIZED_KV_START = 5000


def mlx_kv_notes(args: Sequence[str], ctx: int) -> list[str]:
    """What an MLX candidate's KV flags did at `ctx` (a start at or past the chunk: full precision)."""
    got = dict(flag_values(args, MLX_KV_FLAGS))
    if "--kv-bits" not in got:
        return []
    start = int(got.get("--quantized-kv-start", MLX_QUANTIZED_KV_START))
    if start >= ctx - 1:
        return [f"--kv-bits {got['--kv-bits']}: mlx_lm quantizes the cache from token {start} "
                f"(--quantized-kv-start), so at context {ctx} it stayed full precision, as on the server"]
    return [f"--kv-bits {got['--kv-bits']} from token {start} (--quantized-kv-start)"]


def _mlx_kv_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    keep = [x for f, v in flag_values(args, MLX_KV_FLAGS) for x in (f, v)]
    return keep, [a for a in args if a not in keep]


_NUM = r"(-?[0-9.]+(?:e[-+]?\d+)?|nan|-?inf)"
_PM = r"\s*±\s*"


#: Runs of `llama-perplexity --kl-divergence` per candidate and context until its summary block arrives
#: (docs/kld.md#why-a-run-may-be-repeated).
KLD_ATTEMPTS = 4
#: llama-perplexity prints its summary block only over at least this many scored tokens.
SUMMARY_MIN_TOKENS = 100


def parse_kld_output(text: str, context: int) -> dict[str, Any]:
    """The figures of `llama-perplexity --kl-divergence`; `summary` says which gave them: "summary block",
    "last chunk line" (no percentiles) or None (the output stops before its last chunk: no figures)."""
    out: dict[str, Any] = {"summary": None, **_summary_block(text)}
    if "top1_agree" in out and "kld_mean" in out:
        out["summary"] = "summary block"
    expected = re.search(r"kl_divergence: computing over (\d+) chunks", text)
    out["chunks_expected"] = int(expected.group(1)) if expected else None
    _chunk_lines(text, context, out)
    if out["summary"] is None:
        for key in [k for k in out if k.startswith(("kld_", "top1_", "ppl"))]:
            del out[key]
    return out


_SUMMARY = {
    "ppl": rf"^Mean PPL\(Q\)\s+:\s+{_NUM}{_PM}{_NUM}",
    "ppl_reference": rf"^Mean PPL\(base\)\s+:\s+{_NUM}{_PM}{_NUM}",
    "ppl_ratio": rf"^Mean PPL\(Q\)/PPL\(base\)\s+:\s+{_NUM}{_PM}{_NUM}",
    "kld_mean": rf"^Mean\s+KLD:\s+{_NUM}{_PM}{_NUM}",
    "kld_max": rf"^Maximum KLD:\s+{_NUM}",
    "kld_p99": rf"^99\.0%\s+KLD:\s+{_NUM}",
    "kld_median": rf"^Median\s+KLD:\s+{_NUM}",
    "top1_agree": rf"^Same top p:\s+{_NUM}{_PM}{_NUM}\s*%",
}


def _summary_block(text: str) -> dict[str, float]:
    """The summary block's figures found in `text` (with `_se` where it prints one)."""
    out: dict[str, float] = {}
    for key, pat in _SUMMARY.items():
        m = re.search(pat, text, re.M)
        if m:
            scale = 0.01 if key == "top1_agree" else 1.0
            out[key] = float(m.group(1)) * scale
            if m.lastindex and m.lastindex >= 2 and key not in ("ppl", "ppl_reference"):
                out[f"{key}_se"] = float(m.group(2)) * scale
    return out


def _chunk_lines(text: str, context: int, out: dict[str, Any]) -> None:
    """Adds the per-chunk figures to `out`, and the last chunk line's in place of a lost summary."""
    per_chunk = context - 1 - context // 2
    chunks = re.findall(rf"^\s*(\d+)\s+{_NUM}{_PM}{_NUM}\s+{_NUM}{_PM}{_NUM}\s+{_NUM}{_PM}{_NUM}\s+{_NUM}{_PM}{_NUM}\s*%"
                        rf"\s+{_NUM}{_PM}{_NUM}\s*%\s*$", text, re.M)
    if chunks:
        cum = [float(c[5]) for c in chunks]
        out["chunks"] = len(chunks)
        out["tokens_scored"] = len(chunks) * per_chunk
        out["chunk_kld"] = [round(x, 6) for x in [cum[0], *(cum[i] * (i + 1) - cum[i - 1] * i for i in range(1, len(cum)))]]
        last = chunks[-1]
        if out["summary"] is None and out["chunks_expected"] is not None and int(last[0]) == out["chunks_expected"]:
            out["summary"] = "last chunk line"
            out["kld_mean"], out["kld_mean_se"] = cum[-1], float(last[6])
            out["top1_agree"], out["top1_agree_se"] = float(last[9]) / 100, float(last[10]) / 100
            out["ppl"] = float(last[1])
            ratio = math.exp(float(last[3]))
            out["ppl_ratio"], out["ppl_ratio_se"] = ratio, ratio * float(last[4])


@dataclass
class Run:
    """One finished tool run: its exit status (None: killed at the deadline), output, wall clock and memory."""

    status: int | None
    output: str
    seconds: float
    mem_peak_bytes: int | None
    mem_source: str | None
    mem_null: str | None


async def run_tool(argv: list[str], log: Path, deadline_s: float, env: dict[str, str] | None = None,
                   model_paths: Sequence[str] = (), rate_hz: float = 10.0) -> Run:
    """Run `argv` in its own process group, its memory sampled until it exits; its output kept in `log`."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
                                                env=env, start_new_session=True,
                                                preexec_fn=die_with_daemon())  # benchd.lifeline
    sampler = MemorySampler(proc.pid, rate_hz, model_paths=model_paths)
    await sampler.start()
    out = b""
    status: int | None = None
    try:
        async with asyncio.timeout(deadline_s):
            out, _ = await proc.communicate()
            status = proc.returncode
    except TimeoutError:
        status = None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        mem = await sampler.stop()
    seconds = time.monotonic() - started
    text = out.decode(errors="replace")
    await asyncio.to_thread(_write_log, log, text)
    return Run(status, text, seconds, mem.peak_bytes, mem.source if mem.peak_bytes is not None else None,
               mem.null_reasons.get("peak_bytes") if mem.peak_bytes is None else None)


def _write_log(log: Path, text: str) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text)


def _tail(text: str, n: int = 1200) -> str:
    return text.strip()[-n:]


@dataclass
class Plan:
    """One scoring run, prepared off the event loop: argv, the tool and its fingerprint, the args left out."""

    argv: list[str]
    tool: str
    version: str | None
    binary: str | None
    binary_sha256: str | None
    dropped: list[str]


CROSS_RUNTIME = (
    "cross-runtime: the reference's log-probabilities came from llama.cpp on the GGUF, the candidate's from "
    "mlx_lm on the MLX weights, on the same token ids; the KLD holds the weight format's loss plus the two "
    "runtimes' numerical differences (kernels, accumulation order), so it is an upper bound on the "
    "quantization's own cost")


class _Recorder(Protocol):
    """What `tail_step` asks of the job's recorder (benchd.engine.recorder.Recorder)."""

    def past_events(self, types: Iterable[str]) -> list[Event]: ...

    def emit(self, type_: str, **payload: object) -> None: ...


class _Pool(Protocol):
    """What `tail_step` asks of the job's servers (benchd.engine.pool.ServerPool)."""

    async def release_all(self, keep: int | None = None) -> None: ...


async def tail_step(job: str, sweep: Sweep, config: Config, recorder: _Recorder, pool: _Pool, rate_hz: float) -> None:
    """The sweep's `[kld]` step, last: every server released, then `KldRunner` on the pairs not scored."""
    if sweep.kld.reference not in {c.id for c in sweep.candidates}:  # off (submit refuses any other)
        return
    await pool.release_all()
    done = done_from_events(recorder.past_events(["kld_finished"]))
    await KldRunner(job, sweep, config.cache_dir, config.state_dir, recorder.emit, done, rate_hz=rate_hz).run()


class KldRunner:
    """The `[kld]` step of one job: reference logits per context (cached), then each candidate scored."""

    def __init__(self, job: str, sweep: Sweep, cache_dir: Path, state_dir: Path,
                 emit: Callable[..., None], done: set[tuple[str, int]], rate_hz: float = 10.0) -> None:
        self.job, self.sweep, self.cache_dir, self.rate_hz = job, sweep, Path(cache_dir), rate_hz
        self.emit, self.done = emit, done
        self.logs = Path(state_dir) / "kld" / job
        self.ref = next(c for c in sweep.candidates if c.id == sweep.kld.reference)
        self.corpus, _ = corpus_path(sweep)
        self.hashes = self.cache_dir / "model-hashes.json"  # the fingerprint's sha256 cache (servers.fingerprint)

    def result(self, cand: Candidate, context: int, **kw: Any) -> KldResult:
        return KldResult(candidate=cand.id, reference=self.ref.id, context=context, **kw)

    def record(self, r: KldResult) -> None:
        self.emit("kld_finished", **msgspec.to_builtins(r))

    def todo(self) -> list[tuple[Candidate, int]]:
        return [(c, ctx) for ctx in sorted(self.sweep.kld.contexts) for c in scored(self.sweep)
                if (c.id, ctx) not in self.done]

    async def run(self) -> None:
        todo = self.todo()
        if not todo:
            return
        try:
            ref_tok = await asyncio.to_thread(tokenizer_of, self.ref)
        except ValueError as exc:
            for c, ctx in todo:
                self.record(self.result(c, ctx, status="failed", reason=f"the reference's tokenizer: {exc}"))
            return
        self.emit("kld_started", purpose="corpus", corpus=msgspec.to_builtins(await asyncio.to_thread(self.corpus_record)))
        mismatch = await self._mismatches([c for c, _ in todo], ref_tok)
        for ctx in sorted(self.sweep.kld.contexts):
            cands = [c for c, x in todo if x == ctx]
            if cands:
                await self._run_context(ctx, cands, mismatch)

    async def _mismatches(self, cands: list[Candidate], ref_tok: Tokenizer) -> dict[str, str | None]:
        unique = {c.id: c for c in cands}.values()
        return {c.id: await asyncio.to_thread(tokenizer_mismatch, self.ref, ref_tok, c)
                for c in unique if c.id != self.ref.id}

    async def _run_context(self, ctx: int, cands: list[Candidate], mismatch: dict[str, str | None]) -> None:
        base, why, ref_s = await self.reference_logits(ctx)
        for cand in cands:
            if base is None:
                self.record(self.result(cand, ctx, status="failed", reason=why))
            elif (miss := mismatch.get(cand.id)) is not None:
                self.record(self.result(cand, ctx, status="null", reason=miss, null_reasons={"kld_mean": miss}))
            else:
                self.emit("kld_started", candidate=cand.id, context=ctx)
                self.record(await self.score(cand, ctx, base, ref_s if cand.id == self.ref.id else None))

    def corpus_record(self) -> KldCorpus:
        facts = corpus_facts(self.sweep)
        try:
            n = count_tokens(self.ref, self.corpus, self.cache_dir)
        except (ValueError, BenchdError, OSError, subprocess.TimeoutExpired) as exc:
            return msgspec.structs.replace(facts, tokens_source=f"not counted: {exc}")
        return msgspec.structs.replace(facts, tokens=n, tokens_source=f"{self.ref.id}'s tokenizer ("
                                       + ("llama-tokenize" if self.ref.runtime == GGUF_RUNTIME else "mlx_lm") + ")")

    def chunks(self, ctx: int) -> int | None:
        t = self.sweep.kld.tokens
        return None if t is None else max(1, t // ctx)

    def _key(self, ctx: int, argv_tail: Sequence[str]) -> str:
        model_sha = hash_model(self.ref.model, self.hashes).sha256
        if model_sha is None:
            raise OSError(f"cannot hash {self.ref.model}")
        corpus_sha = hashlib.sha256(self.corpus.read_bytes()).hexdigest()
        raw = json.dumps([model_sha, corpus_sha, ctx, self.chunks(ctx), list(argv_tail)])
        return f"{model_sha[:16]}-{corpus_sha[:12]}-c{ctx}-{hashlib.sha256(raw.encode()).hexdigest()[:12]}"

    def reference_argv(self, ctx: int, out: Path) -> tuple[list[str], list[str]]:
        """(the reference run's argv writing `out`, the part of it that keys the cache)."""
        chunk_args = ["--chunks", str(n)] if (n := self.chunks(ctx)) else []
        if self.ref.runtime == GGUF_RUNTIME:
            keep, _ = split_args(self.ref.args)
            tail = ["-c", str(ctx), *chunk_args, *keep]
            exe, _how = resolve_llama_binary(self.ref.binary, self.cache_dir, "llama-perplexity")
            return [str(exe), "-m", self.ref.model, "-f", str(self.corpus), "--kl-divergence-base", str(out),
                    *tail], [llama_version(exe) or str(exe), *tail]
        keep, _ = _mlx_kv_args(self.ref.args)
        tail = ["--ctx", str(ctx), *chunk_args, *keep]
        python = _mlx_python(self.cache_dir)
        return [python, str(MLX_SCRIPT), "base", "--model", self.ref.model, "--corpus", str(self.corpus),
                "--out", str(out), *tail], [_mlx_version(python) or python, *tail]

    def _prepare_reference(self, ctx: int) -> tuple[Path, list[str]]:
        argv, keyed = self.reference_argv(ctx, Path("OUT"))
        path = self.cache_dir / "kld" / f"{self._key(ctx, keyed)}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        return path, [str(tmp) if a == "OUT" else a for a in argv]

    async def reference_logits(self, ctx: int) -> tuple[Path | None, str, float | None]:
        """(the reference's logit file at `ctx`, cached or made now, or None; a note or why; seconds)."""
        try:
            path, argv = await asyncio.to_thread(self._prepare_reference, ctx)
        except (OSError, BenchdError) as exc:
            return None, f"the reference's logits cannot be prepared: {exc}", None
        if await asyncio.to_thread(path.is_file):
            return path, "cached", None
        tmp = Path(next(a for a in argv if ".tmp" in a))
        self.emit("kld_started", candidate=self.ref.id, context=ctx, purpose="reference logits")
        run = await run_tool(argv, self.logs / f"reference-{self.ref.id}-c{ctx}.log", self.deadline(ctx),
                             env=self.env(self.ref), model_paths=[self.ref.model], rate_hz=self.rate_hz)
        ok = await asyncio.to_thread(lambda: run.status == 0 and tmp.is_file() and tmp.stat().st_size > 20)
        if not ok:
            await asyncio.to_thread(tmp.unlink, True)
            what = "timed out" if run.status is None else f"exit {run.status}"
            return None, f"the reference logits run failed ({what}): {_tail(run.output, 600)}", None
        await asyncio.to_thread(atomic_replace, tmp, path)
        return path, "made", round(run.seconds, 3)

    def deadline(self, ctx: int) -> float:
        """A hang guard: generous seconds per 1k tokens the run may score (bytes bound the token count)."""
        n = self.chunks(ctx) or max(1, self.corpus.stat().st_size // ctx)
        return 60.0 + SECONDS_PER_1K_TOKENS * n * ctx / 1000.0

    def env(self, cand: Candidate) -> dict[str, str]:
        env = {**os.environ, **cand.env}
        env.setdefault("HF_HUB_OFFLINE", "1")
        return env

    def plan(self, cand: Candidate, ctx: int, base: Path, json_out: Path) -> Plan:
        """The scoring run of `cand` against `base` (blocking: resolves and hashes the tool)."""
        if cand.runtime == GGUF_RUNTIME:
            exe, _how = resolve_llama_binary(cand.binary, self.cache_dir, "llama-perplexity")
            keep, drop = split_args(cand.args)
            argv = [str(exe), "-m", cand.model, "--kl-divergence-base", str(base), "--kl-divergence",
                    "-c", str(ctx), *keep]
            tool, version, binary = "llama-perplexity", llama_version(exe), str(exe)
        else:
            keep, drop = _mlx_kv_args(cand.args)
            binary = _mlx_python(self.cache_dir)
            argv = [binary, str(MLX_SCRIPT), "score", "--model", cand.model, "--base", str(base),
                    "--json-out", str(json_out), *keep]
            tool, version = "mlx_lm (benchd/data/kldmlx.py)", _mlx_version(binary)
        sha = None
        with contextlib.suppress(OSError):
            sha = hash_file(Path(binary), self.hashes)
        return Plan(argv, tool, version, binary, sha, drop)

    async def score(self, cand: Candidate, ctx: int, base: Path, ref_s: float | None) -> KldResult:
        log = self.logs / f"{cand.id}-c{ctx}.log"
        json_out = log.with_suffix(".json")
        common: dict[str, object] = {"reference_logits": str(base), "reference_seconds": ref_s}
        try:
            plan = await asyncio.to_thread(self.plan, cand, ctx, base, json_out)
        except BenchdError as exc:
            return self.result(cand, ctx, status="failed", reason=exc.message, **common)
        run, attempts, figures = await self._attempts(plan, cand, ctx, log)
        facts: dict[str, object] = {
            "tool": plan.tool, "tool_version": plan.version, "binary": plan.binary,
            "binary_sha256": plan.binary_sha256, "argv": plan.argv, "dropped_args": plan.dropped,
            "seconds": round(run.seconds, 3), "attempts": attempts, "mem_peak_bytes": run.mem_peak_bytes,
            "mem_source": run.mem_source, **common,
        }
        nulls: dict[str, str] = {"mem_peak_bytes": run.mem_null} if run.mem_null else {}
        if run.status != 0:
            what = "timed out" if run.status is None else f"exit {run.status}"
            return self.result(cand, ctx, status="failed", reason=f"{plan.tool} {what}: {_tail(run.output)}",
                               null_reasons=nulls, **facts)
        if cand.runtime != GGUF_RUNTIME:
            try:
                figures = json.loads(await asyncio.to_thread(json_out.read_text))
            except (OSError, ValueError) as exc:
                return self.result(cand, ctx, status="failed", reason=f"no figures from {plan.tool}: {exc}",
                                   null_reasons=nulls, **facts)
            figures["summary"] = "computed in-process"
            facts.update(self._mlx_facts(cand, ctx))
        if "kld_mean" not in figures:
            return self.result(cand, ctx, status="failed", reason=f"{plan.tool}'s output stopped before its last "
                               f"chunk in {plural(attempts, 'run')} (the pinned build's unflushed log at exit): "
                               f"{_tail(run.output, 600)}", null_reasons=nulls, **facts)
        nulls.update(_percentile_nulls(plan.tool, figures, attempts))
        figures.pop("chunks_expected", None)
        return self.result(cand, ctx, status="ok", null_reasons=nulls, **facts, **figures)

    async def _attempts(self, plan: Plan, cand: Candidate, ctx: int, log: Path) -> tuple[Run, int, dict[str, Any]]:
        """(the last run, runs made, the best figures): a GGUF scoring runs again until `_final`."""
        attempts, figures = 0, cast("dict[str, Any]", {})
        while True:
            attempts += 1
            run = await run_tool(plan.argv, log, self.deadline(ctx), env=self.env(cand), model_paths=[cand.model],
                                 rate_hz=self.rate_hz)
            if run.status != 0 or cand.runtime != GGUF_RUNTIME:
                return run, attempts, figures
            got = parse_kld_output(run.output, ctx)
            if got["summary"] is not None and figures.get("summary") != "summary block":
                figures = got
            if _final(got, attempts):
                return run, attempts, figures

    def _mlx_facts(self, cand: Candidate, ctx: int) -> dict[str, object]:
        facts: dict[str, object] = {"comparability": CROSS_RUNTIME} if self.ref.runtime == GGUF_RUNTIME else {}
        facts["notes"] = mlx_kv_notes(cand.args, ctx)
        return facts


def _final(got: dict[str, Any], attempts: int) -> bool:
    """The output needs no other attempt: a summary block, a run too short for one, or the last attempt."""
    no_block = (got.get("tokens_scored") or 0) < SUMMARY_MIN_TOKENS
    return bool(got["summary"] == "summary block" or (got["summary"] and no_block) or attempts >= KLD_ATTEMPTS)


def _percentile_nulls(tool: str, figures: dict[str, Any], attempts: int) -> dict[str, str]:
    scored_n = figures.get("tokens_scored") or 0
    why = (f"{tool} prints percentiles only over >= {SUMMARY_MIN_TOKENS} scored tokens ({scored_n} here)"
           if scored_n < SUMMARY_MIN_TOKENS else
           f"{tool}'s summary block was lost in {plural(attempts, 'run')}: the pinned build does not flush its log "
           "at exit (common/log.cpp); mean, top-1 and PPL ratio come from its last chunk line")
    return {name: why for name in ("kld_median", "kld_p99", "kld_max", "ppl_ratio", "ppl_reference")
            if name not in figures}


@functools.lru_cache(maxsize=8)
def _mlx_version(python: str) -> str | None:
    """`mlx-lm X mlx Y` as the venv's package metadata says (benchd.servers.locate's reader)."""
    lm, core = _dist_version(python, "mlx-lm"), _dist_version(python, "mlx")
    return f"mlx-lm {lm} mlx {core}" if lm and core else None


def done_from_events(events: Sequence[Event]) -> set[tuple[str, int]]:
    """(candidate, context) pairs a job already scored (its `kld_finished` events)."""
    return {(e.payload["candidate"], int(e.payload["context"])) for e in events
            if e.type == "kld_finished" and "candidate" in e.payload}


def results_from_events(events: Sequence[Event]) -> list[KldResult]:
    """The runbook's `kld` list: the last `kld_finished` event per candidate and context."""
    found: dict[tuple[str, int], KldResult] = {}
    for e in events:
        if e.type == "kld_finished":
            r = msgspec.convert(e.payload, KldResult)
            found[(r.candidate, r.context)] = r
    return sorted(found.values(), key=lambda r: (r.context, r.candidate))


def pareto_samples(results: Sequence[KldResult]) -> dict[str, list[float]]:
    """The `kld` axis's samples per candidate: its per-chunk mean KLDs at its largest scored context."""
    out: dict[str, tuple[int, list[float]]] = {}
    for r in results:
        if r.status == "ok" and r.chunk_kld and (r.candidate not in out or r.context > out[r.candidate][0]):
            out[r.candidate] = (r.context, list(r.chunk_kld))
    return {c: v for c, (_, v) in out.items()}


def seconds_left(sweep: Sweep, events: Sequence[Event], prompt_tps: float | None) -> tuple[float, str] | None:
    """(the `[kld]` step's seconds left in a running job, the rate's source); None without a rate."""
    if sweep.kld.reference is None:
        return None
    tokens = _corpus_tokens(sweep, events)
    rated = _seconds_per_token(events, prompt_tps)
    if tokens is None or rated is None:
        return None
    rate, source = rated
    done = done_from_events(events)
    started = {x for _c, x in done}
    left = sum(n for c, x, n, purpose in planned_runs(sweep, tokens)
               if (c, x) not in done and (purpose == "scoring" or x not in started))
    return left * rate, source


def _corpus_tokens(sweep: Sweep, events: Sequence[Event]) -> int | None:
    """`kld.tokens`, else the counted corpus, else its bytes / 4 (benchctl validate's stated assumption)."""
    corpus = corpus_from_events(events)
    tokens = sweep.kld.tokens or (corpus.tokens if corpus is not None else None)
    if tokens is not None:
        return tokens
    try:
        return corpus_path(sweep)[0].stat().st_size // 4
    except OSError:
        return None


def _timed_runs(events: Sequence[Event]) -> list[KldResult]:
    return [r for r in results_from_events(events) if r.status == "ok" and r.seconds and r.chunks]


def _seconds_per_token(events: Sequence[Event], prompt_tps: float | None) -> tuple[float, str] | None:
    """The job's finished scoring runs' seconds per evaluated token, else `prompt_tps`'s, and its source."""
    ran = _timed_runs(events)
    if ran:
        rate = sum(r.seconds or 0.0 for r in ran) / sum((r.chunks or 0) * r.context for r in ran)
        return rate, f"this job's {plural(len(ran), 'finished scoring run')}"
    if prompt_tps:
        return 1.0 / prompt_tps, f"this job's probe prompt rate ({prompt_tps:.4g} tok/s)"
    return None


def corpus_from_events(events: Sequence[Event]) -> KldCorpus | None:
    """The runbook's `kld_corpus`: the last corpus record a `kld_started` event carried."""
    got = [e.payload["corpus"] for e in events if e.type == "kld_started" and "corpus" in e.payload]
    return msgspec.convert(got[-1], KldCorpus) if got else None


def shell_line(argv: Sequence[str]) -> str:
    """The argv as one shell line (the runbook names how to re-run a scoring by hand)."""
    return shlex.join(argv)
