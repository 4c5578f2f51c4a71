"""Pure pieces of issue 13 (no server): the window accounting of tokens without a chunk, the scrubbed and
recorded environment, `--fit` as the candidate asks, why a probe ended short per runtime, and the runbook
flags. The real-server behaviour is in tests/engine/test_thinking_real.py and test_models_real.py."""

from __future__ import annotations

from typing import Any

from benchd.probe_result import ProbeResult
from benchd.results.flags import layer_split_flags, short_flags, thinking_flags
from benchd.schemas import Candidate, Row, Spec
from benchd.servers.runtimes import environment, get_adapter
from benchd.servers.runtimes.tokens import window_tokens


def result(chunks: int, reasoning: int, answer: int, finish: str | None, first_reasoning: bool) -> ProbeResult:
    return ProbeResult(status="ok", error=None, http_status=200, started=0.0, ended=1.0, content_chunks=chunks,
                       reasoning_chunks=reasoning, answer_chunks=answer, finish_reason=finish,
                       first_is_reasoning=first_reasoning)


def test_window_tokens_attributes_chunkless_tokens() -> None:
    # <think> + 24 reasoning + </think> + 8 answer + EOS = 35 tokens, 32 chunks
    assert window_tokens(result(32, 24, 8, "stop", True), 35) == (33, ["the final stop token", "the opening think tag"])
    # EOS suppressed, 128 tokens: only the opening tag is outside
    assert window_tokens(result(126, 24, 102, "length", True), 128) == (127, ["the opening think tag"])
    # thinking off: answer + EOS; no tags
    assert window_tokens(result(8, 0, 8, "stop", False), 9) == (8, ["the final stop token"])
    # a runtime that sends a chunk per token: nothing to attribute
    assert window_tokens(result(128, 0, 128, "length", False), 128) == (128, [])
    # the opening tag already in the prompt (no chunkless token before the window): not subtracted twice
    assert window_tokens(result(33, 24, 9, "length", True), 34) == (34, [])
    assert window_tokens(result(5, 0, 5, None, False), None) == (None, [])


def test_environment_scrubs_inherited_knobs_only_and_redacts_secrets() -> None:
    inherited = {"PATH": "/bin", "LLAMA_ARG_THREADS": "8", "GGML_CUDA_P2P": "1", "HOME": "/h", "APC_ENABLED": "1"}
    env = environment.build(get_adapter("llama-server").env_scrub, {}, {"LLAMA_ARG_N_GPU_LAYERS": "99",
                                                                         "HF_TOKEN": "x"}, inherited)
    assert env.env == {"PATH": "/bin", "HOME": "/h", "APC_ENABLED": "1", "LLAMA_ARG_N_GPU_LAYERS": "99", "HF_TOKEN": "x"}
    assert env.removed == ["GGML_CUDA_P2P", "LLAMA_ARG_THREADS"]
    assert env.recorded() == {"HF_TOKEN": "<redacted>", "LLAMA_ARG_N_GPU_LAYERS": "99"}
    vlm = environment.build(get_adapter("mlx_vlm.server").env_scrub, {"HF_HUB_OFFLINE": "1"}, {}, inherited)
    assert "APC_ENABLED" not in vlm.env and vlm.removed == ["APC_ENABLED"] and vlm.passed == {"HF_HUB_OFFLINE": "1"}


def _llama(**kw: Any) -> Candidate:
    return Candidate(id="c", runtime="llama-server", model="/m.gguf", **kw)


def test_fit_off_unless_the_candidate_asks() -> None:
    a = get_adapter("llama-server")
    assert a.launcher.fit_state(_llama()) == ("off", "benchd default (--fit off: the split is what the args say)")
    assert a.launcher.fit_state(_llama(args=["--fit", "on"]))[0] == "on"
    assert a.launcher.fit_state(_llama(args=["-fit=on"]))[0] == "on"
    assert a.launcher.fit_state(_llama(env={"LLAMA_ARG_FIT": "on"})) == ("on", "candidate env LLAMA_ARG_FIT")
    argv = a.launcher.argv(_llama(args=["--fit", "on"]), command=["llama-server"], port=1, ctx_size=None)
    assert argv.count("--fit") == 1 and argv[argv.index("--fit") + 1] == "on"
    assert get_adapter("mlx_lm.server").launcher.fit_state(Candidate(id="m", runtime="mlx_lm.server", model="/d"))[0] is None


def test_short_reasons_name_the_cause() -> None:
    vlm_spec = Candidate(id="v", runtime="mlx_vlm.server", model="/nonexistent", spec=Spec(kind="mtp"))
    why = get_adapter("mlx_vlm.server").reader.short_reason(vlm_spec, asked=64, got=35, finish_reason="stop", run_to_length=True)
    assert why.startswith("generated 35 of 64 tokens (finish_reason stop): mlx_vlm's speculative path (mtp)")
    lm = Candidate(id="l", runtime="mlx_lm.server", model="/nonexistent")
    assert "names no EOS id" in get_adapter("mlx_lm.server").reader.short_reason(lm, asked=64, got=9, finish_reason="stop",
                                                                         run_to_length=True)
    assert get_adapter("llama-server").reader.short_reason(_llama(), asked=64, got=9, finish_reason="stop",
                                                    run_to_length=False).endswith("(ignore_eos = false)")


def _row(cand: str, ctx: int, **kw: Any) -> Row:
    return Row(job="j", candidate=cand, runtime="llama-server", context=ctx, kind="probe", probe=0, status="ok", **kw)


def test_runbook_flags() -> None:
    rows = [_row("a", 1024, layer_split="33/33 layers on GPU"), _row("a", 32768, layer_split="20/33 layers on GPU"),
            _row("b", 1024), _row("b", 32768)]
    flags = layer_split_flags(rows)
    assert [f.candidate for f in flags] == ["a"] and "context 32768: 20/33 layers on GPU" in flags[0].detail
    mixed = thinking_flags([_row("a", 128, thinking="on"), _row("b", 128, thinking="off"), _row("a", 512, thinking="on")])
    assert len(mixed) == 1 and mixed[0].detail.startswith("context 128: thinking a on, b off")
    assert mixed[0].context == 128 and flags[0].context is None  # the layer split speaks of every context
    shorts = short_flags([_row("a", 128, short=True, short_reason="generated 9 of 64 tokens"), _row("a", 128)])
    assert len(shorts) == 1 and shorts[0].detail.startswith("1 probe ended short, kept out of the medians")
