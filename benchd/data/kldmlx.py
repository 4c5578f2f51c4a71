"""KL divergence of an MLX model, run as a script by the MLX venv's python (benchd.engine.kld); imports
nothing of benchd. Reads and writes llama.cpp's reference file: docs/kld.md#the-mlx-scorer.

    count --model DIR --corpus FILE                                  -> {"tokens": N} on stdout
    base  --model DIR --corpus FILE --out FILE --ctx N [--chunks K] [kv flags]
    score --model DIR --base FILE --json-out FILE [kv flags]         -> the figures as JSON"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from typing import Any

import numpy as np

STEP = 2048  # tokens per forward pass (mlx_lm's default prefill step)
#: mlx_lm.server's `--quantized-kv-start` default (mlx_lm/generate.py DEFAULT_QUANTIZED_KV_START, 0.32.2).
QUANTIZED_KV_START = 5000


def _load(model_dir: str) -> tuple[Any, Any]:
    from mlx_lm import load

    loaded: tuple[Any, Any] = load(model_dir)
    return loaded


def _encode(tokenizer: Any, text: str) -> tuple[list[int], int | None]:
    """The text's ids as the tokenizer makes them (BOS included when it adds one) and that BOS id."""
    ids = list(tokenizer.encode(text))
    bos = getattr(tokenizer, "bos_token_id", None)
    adds = bos is not None and list(tokenizer.encode("a"))[:1] == [bos]
    return ids, (bos if adds else None)


def _cache(model: Any, kv_bits: int | None, group: int) -> list[Any]:
    from mlx_lm.models import cache as cache_mod

    return cache_mod.make_prompt_cache(model) if not kv_bits else \
        [cache_mod.QuantizedKVCache(group_size=group, bits=kv_bits) for _ in model.layers]


def chunk_logits(model: Any, toks: list[int], first: int, args: argparse.Namespace) -> np.ndarray:
    """float32 logits of positions first .. len(toks) - 2 (each predicting the next token)."""
    import mlx.core as mx

    start = args.quantized_kv_start if args.kv_bits else 0
    cache = _cache(model, None if start else args.kv_bits, args.kv_group_size)
    rows: list[np.ndarray] = []
    pos = 0
    while pos < len(toks) - 1:
        end = min(len(toks) - 1, pos + STEP)
        if args.kv_bits and start and pos < start:
            end = min(end, start)
        logits = model(mx.array(toks[pos:end])[None], cache=cache)[0].astype(mx.float32)
        mx.eval(logits)
        if end > first:
            rows.append(np.array(logits[max(first - pos, 0):]))
        if args.kv_bits and start and end >= start and not hasattr(cache[0], "bits"):
            cache = [c.to_quantized(group_size=args.kv_group_size, bits=args.kv_bits) for c in cache]
        pos = end
    return np.concatenate(rows)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    out: np.ndarray = x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    return out


def quantize_rows(logits: np.ndarray, nv: int) -> np.ndarray:
    """llama.cpp's `log_softmax(..., uint16_t * log_prob, ...)`: each row as scale, min_log_prob and uint16s."""
    n, v = logits.shape
    out = np.zeros((n, nv), dtype=np.uint16)
    mx_ = logits.max(axis=1)
    mn = np.maximum(logits.min(axis=1), mx_ - 16)
    lse = np.log(np.exp(logits.astype(np.float64) - mx_[:, None]).sum(axis=1)).astype(np.float32)
    min_lp = (mn - mx_ - lse).astype(np.float32)
    scale = ((mx_ - mn) / 65535.0).astype(np.float32)
    head = np.stack([scale, min_lp], axis=1).astype(np.float32).view(np.uint16)
    out[:, :4] = head
    safe = np.where(scale > 0, scale, 1.0)[:, None]
    q = np.where(logits > mn[:, None], np.rint((logits - mn[:, None]) / safe), 0)
    q = np.where(scale[:, None] > 0, q, 0)
    out[:, 4:4 + v] = q.astype(np.uint16)
    return out


def cmd_count(args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    ids, _ = _encode(tok, open(args.corpus, encoding="utf-8").read())
    print(json.dumps({"tokens": len(ids)}))


def cmd_base(args: argparse.Namespace) -> None:
    model, tokenizer = _load(args.model)
    ids, bos = _encode(tokenizer, open(args.corpus, encoding="utf-8").read())
    n_ctx = args.ctx
    if len(ids) < 2 * n_ctx:
        sys.exit(f"you need at least {2 * n_ctx} tokens for a context of {n_ctx}: the corpus is {len(ids)}")
    n_chunk = len(ids) // n_ctx if args.chunks is None else min(args.chunks, len(ids) // n_ctx)
    first = n_ctx // 2
    rows_out = []
    n_vocab = None
    for c in range(n_chunk):
        toks = ids[c * n_ctx:(c + 1) * n_ctx]
        run = [bos, *toks[1:]] if bos is not None else toks
        logits = chunk_logits(model, run, first, args)
        n_vocab = n_vocab or _vocab(tokenizer, logits.shape[1])
        rows_out.append(quantize_rows(logits[:, :n_vocab], 2 * ((n_vocab + 1) // 2) + 4))
    assert n_vocab is not None
    with open(args.out, "wb") as fh:
        fh.write(b"_logits_" + struct.pack("<iii", n_ctx, n_vocab, n_chunk))
        fh.write(np.asarray(ids[:n_chunk * n_ctx], dtype=np.int32).tobytes())
        for r in rows_out:
            fh.write(r.tobytes())


def _vocab(tokenizer: Any, width: int) -> int:
    """The vocabulary the scores cover: the tokenizer's size when the output layer is padded beyond it."""
    n = len(tokenizer.get_vocab()) if hasattr(tokenizer, "get_vocab") else width
    return min(n, width)


def _mean_se(s: np.ndarray) -> tuple[float, float]:
    """llama.cpp's `mean_and_uncertainty`: the mean and its standard error (0 under 11 values)."""
    n = s.size
    f = float(s.mean())
    var = float((s.astype(np.float64) ** 2).mean()) - f * f
    return f, (var / (n - 1)) ** 0.5 if var > 0 and n > 10 else 0.0


def _percentile(sorted_v: np.ndarray, fraction: float) -> float:
    p = fraction * (sorted_v.size - 1)
    ip = int(p)
    p -= ip
    return float((1 - p) * sorted_v[ip] + p * sorted_v[min(ip + 1, sorted_v.size - 1)])


def cmd_score(args: argparse.Namespace) -> None:
    with open(args.base, "rb") as fh:
        if fh.read(8) != b"_logits_":
            sys.exit(f"{args.base} is not a llama.cpp log-probability file")
        n_ctx, n_vocab, n_chunk = struct.unpack("<iii", fh.read(12))
        tokens = np.frombuffer(fh.read(4 * n_ctx * n_chunk), dtype=np.int32)
        nv = 2 * ((n_vocab + 1) // 2) + 4
        first = n_ctx // 2
        per = n_ctx - 1 - first
        base_rows = [np.frombuffer(fh.read(2 * nv * per), dtype=np.uint16).reshape(per, nv) for _ in range(n_chunk)]
    model, tokenizer = _load(args.model)
    _, bos = _encode(tokenizer, "a")
    klds, nll, nll_b, same, chunk_kld = [], [], [], 0, []
    for c in range(n_chunk):
        toks = [int(t) for t in tokens[c * n_ctx:(c + 1) * n_ctx]]
        run = [bos, *toks[1:]] if bos is not None else toks
        logits = chunk_logits(model, run, first, args)
        if logits.shape[1] < n_vocab:
            sys.exit(f"the model's output has {logits.shape[1]} logits, the reference {n_vocab}")
        lp = _log_softmax(logits[:, :n_vocab])
        b = base_rows[c]
        head = np.ascontiguousarray(b[:, :4]).view(np.float32)
        base_lp = head[:, :1] * b[:, 4:4 + n_vocab].astype(np.float32) + head[:, 1:2]
        p_base = np.where(base_lp > -16.0, np.exp(base_lp.astype(np.float64)), 0.0)
        k = (p_base * (base_lp - lp)).sum(axis=1)
        target = np.asarray(toks[first + 1:], dtype=np.int64)
        rows = np.arange(per)
        nll.append(-lp[rows, target])
        nll_b.append(-base_lp[rows, target].astype(np.float64))
        same += int((lp.argmax(axis=1) == base_lp.argmax(axis=1)).sum())
        klds.append(k)
        chunk_kld.append(float(k.mean()))
    kv = np.concatenate(klds)
    a, bb = np.concatenate(nll), np.concatenate(nll_b)
    n = kv.size
    log_ppl, log_ppl_se = _mean_se(a)
    log_base, log_base_se = _mean_se(bb)
    cov = float((a * bb).mean() - a.mean() * bb.mean()) / (n - 1) if n >= 10 else 0.0
    ratio_ln = log_ppl - log_base
    ratio_ln_se = max(log_ppl_se ** 2 + log_base_se ** 2 - 2 * cov, 0.0) ** 0.5
    top = same / n
    srt = np.sort(kv)
    mean, se = _mean_se(kv)
    out = {
        "kld_mean": mean, "kld_mean_se": se, "kld_median": float(np.median(kv)), "kld_p99": _percentile(srt, 0.99),
        "kld_max": float(srt[-1]), "top1_agree": top, "top1_agree_se": (top * (1 - top) / (n - 1)) ** 0.5,
        "ppl": float(np.exp(log_ppl)), "ppl_reference": float(np.exp(log_base)),
        "ppl_ratio": float(np.exp(ratio_ln)), "ppl_ratio_se": float(np.exp(ratio_ln) * ratio_ln_se),
        "tokens_scored": int(n), "chunks": int(n_chunk), "chunk_kld": chunk_kld,
    }
    with open(args.json_out, "w") as fh:
        json.dump(out, fh)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="kldmlx")
    p.add_argument("command", choices=("count", "base", "score"))
    p.add_argument("--model", required=True)
    p.add_argument("--corpus")
    p.add_argument("--out")
    p.add_argument("--base")
    p.add_argument("--json-out")
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--chunks", type=int)
    p.add_argument("--kv-bits", type=int)
    p.add_argument("--kv-group-size", type=int, default=64)
    p.add_argument("--quantized-kv-start", type=int, default=QUANTIZED_KV_START)
    args = p.parse_args(argv)
    {"count": cmd_count, "base": cmd_base, "score": cmd_score}[args.command](args)


if __name__ == "__main__":
    main()
