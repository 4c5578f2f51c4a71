"""Random llama weights, in Hugging Face layout, shaped so a random model is usable in tests.

Everything comes from `numpy.random.default_rng(seed)`: the same seed gives the same bytes.

Reasons and facts: docs/testing.md#random-weights.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

#: Weight on hidden dimension 0 that pushes a suppressed token's logit down.
SUPPRESS = -400.0


@dataclass(frozen=True)
class Arch:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int = 32768
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def with_layers(self, n_layer: int) -> Arch:
        return replace(self, n_layer=n_layer)


#: "small": ~0.2 M parameters (f32 ~0.8 MB, f16 ~0.4 MB), thousands of tok/s.
#: "medium": ~25 M parameters, so prompt processing at 2k-8k tokens takes seconds on 2 cores.
SIZES: dict[str, Arch] = {
    "small": Arch(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128),
    "medium": Arch(n_embd=512, n_layer=8, n_head=8, n_head_kv=2, n_ff=1536),
}

Weights = dict[str, np.ndarray]


def random_weights(arch: Arch, n_vocab: int, seed: int) -> Weights:
    """Unstructured float32 weights in HF names; `impose_structure` makes them test-friendly."""
    rng = np.random.default_rng(seed)
    d, kv = arch.n_embd, arch.n_head_kv * arch.head_dim

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    w: Weights = {"model.embed_tokens.weight": normal((n_vocab, d), 0.3)}
    for i in range(arch.n_layer):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = normal((d, d), d**-0.5)
        w[p + "self_attn.k_proj.weight"] = normal((kv, d), d**-0.5)
        w[p + "self_attn.v_proj.weight"] = normal((kv, d), d**-0.5)
        w[p + "self_attn.o_proj.weight"] = normal((d, d), 0.3 * d**-0.5)
        w[p + "mlp.gate_proj.weight"] = normal((arch.n_ff, d), d**-0.5)
        w[p + "mlp.up_proj.weight"] = normal((arch.n_ff, d), d**-0.5)
        w[p + "mlp.down_proj.weight"] = normal((d, arch.n_ff), 0.3 * arch.n_ff**-0.5)
        w[p + "input_layernorm.weight"] = np.ones(d, dtype=np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(d, dtype=np.float32)
    w["model.norm.weight"] = np.ones(d, dtype=np.float32)
    w["lm_head.weight"] = normal((n_vocab, d), 1.0)
    return w


def impose_structure(w: Weights, suppressed: list[int]) -> Weights:
    """The constant-dimension trick described in the module docstring (in place; returns `w`)."""
    w["model.embed_tokens.weight"][:, 0] = 1.0
    for name, arr in w.items():
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight",
                          "up_proj.weight")):
            arr[:, 0] = 0.0
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            arr[0, :] = 0.0
    head = w["lm_head.weight"]
    head[:, 0] = 0.0
    head[suppressed, 0] = SUPPRESS
    return w


def perturbed(w: Weights, noise: float, seed: int, suppressed: list[int]) -> Weights:
    """A copy with Gaussian noise of `noise` x each tensor's std added (norms untouched): a draft model
    that agrees with the original on some tokens only (partial speculative acceptance)."""
    rng = np.random.default_rng(seed)
    out: Weights = {}
    for name, arr in w.items():
        if arr.ndim == 1:
            out[name] = arr.copy()
            continue
        std = float(arr[:, 1:].std())  # column 0 carries the structure, not the scale
        out[name] = arr + rng.standard_normal(arr.shape, dtype=np.float32) * np.float32(noise * std)
    return impose_structure(out, suppressed)


def n_params(w: Weights) -> int:
    return int(sum(a.size for a in w.values()))
