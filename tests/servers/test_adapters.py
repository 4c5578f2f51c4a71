"""Adapters without a server: argv, validation, environment, request bodies, and the raw->normalized map.

The `normalize` tests feed final chunks copied verbatim from the real servers on this machine (llama.cpp
b1-0c1e570, mlx-lm 0.32.2, mlx-vlm 0.7.10; see tests/runtimes/test_servers_real.py for the live runs):
they pin the mapping; the live tests prove the shapes.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

from benchd.config import Config
from benchd.errors import BenchdError
from benchd.probe_result import ProbeResult
from benchd.schemas import Candidate, Row, Sampling, Spec, Sweep
from benchd.servers.runtimes import ADAPTERS, flags, get_adapter
from benchd.servers.runtimes.base import CTX_MARGIN_TOKENS, ChatSettings


def cand(runtime: str = "llama-server", **kw: object) -> Candidate:
    fields: dict[str, object] = {"id": "c1", "runtime": runtime, "model": "/models/m.gguf"}
    fields.update(kw)
    return msgspec.convert(fields, Candidate)


def test_registry_and_unknown_runtime() -> None:
    assert set(ADAPTERS) == {"llama-server", "mlx_lm.server", "mlx_vlm.server", "openai"}
    for name, adapter in ADAPTERS.items():
        assert adapter.name == name
    with pytest.raises(BenchdError) as err:
        get_adapter("vllm")
    assert "llama-server" in err.value.message


def test_llama_argv_ctx_spec_and_metrics() -> None:
    a = get_adapter("llama-server")
    c = cand(spec={"kind": "draft", "draft_model": "/models/d.gguf", "draft_max": 8}, args=["-fa", "on"])
    ctx = a.launcher.server_ctx_size(c, 2048, 128)
    assert ctx == 2048 + 128 + CTX_MARGIN_TOKENS
    argv = a.launcher.argv(c, command=["/bin/llama-server"], port=4321, ctx_size=ctx)
    assert argv[0] == "/bin/llama-server"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "4321"
    assert argv[argv.index("-m") + 1] == "/models/m.gguf"
    assert argv[argv.index("-c") + 1] == str(ctx)
    assert "--metrics" in argv
    assert argv[argv.index("-np") + 1] == "1"
    assert argv[argv.index("-md") + 1] == "/models/d.gguf"
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "8"
    assert argv[1:3] == ["-fa", "on"]  # the candidate's args first, benchd's own flags after them
    assert a.launcher.restarts_per_context(c)


def test_llama_pinned_ctx_and_own_slot_count() -> None:
    a = get_adapter("llama-server")
    c = cand(ctx_size=65536, args=["--parallel", "2"])
    assert not a.launcher.restarts_per_context(c)
    assert a.launcher.server_ctx_size(c, 2048, 128) == 65536
    argv = a.launcher.argv(c, command=["x"], port=1, ctx_size=65536)
    assert "-np" not in argv and argv[1:3] == ["--parallel", "2"]


def test_mtp_needs_no_draft_model() -> None:
    a = get_adapter("llama-server")
    c = cand(spec={"kind": "mtp"})
    assert a.checks.validate(c) == []
    argv = a.launcher.argv(c, command=["x"], port=1, ctx_size=100)
    assert "-md" not in argv and argv[argv.index("--spec-type") + 1] == "draft-mtp"


@pytest.mark.parametrize(
    ("runtime", "arg", "hint"),
    [
        ("llama-server", "-c", "use `ctx_size`"),
        ("llama-server", "--ctx-size=4096", "use `ctx_size`"),
        ("llama-server", "--port", "free port"),
        ("llama-server", "--host", "127.0.0.1"),
        ("llama-server", "-m", "use `model`"),
        ("llama-server", "-md", "use `spec.draft_model`"),
        ("mlx_lm.server", "--model", "use `model`"),
        ("mlx_lm.server", "--num-draft-tokens", "use `spec.draft_max`"),
        ("mlx_vlm.server", "--host", "127.0.0.1"),
        ("mlx_vlm.server", "--draft-kind", "use `spec.kind`"),
    ],
)
def test_reserved_args_are_rejected_naming_the_field(runtime: str, arg: str, hint: str) -> None:
    errors = get_adapter(runtime).checks.validate(cand(runtime, args=["--foo", arg, "1"]))
    assert len(errors) == 1
    assert errors[0].code == "reserved_arg"
    assert hint in errors[0].message
    assert errors[0].field is not None and errors[0].field.endswith("args[1]")


@pytest.mark.parametrize(
    ("args", "env", "note"),
    [
        ([], {}, "load mode auto (default: mmap unless a device cannot)"),
        (["-lm", "none"], {}, "load mode none (-lm)"),
        (["--load-mode", "mlock"], {}, "load mode mlock (--load-mode)"),
        (["--load-mode=mmap+mlock"], {}, "load mode mmap+mlock (--load-mode)"),
        ([], {"LLAMA_ARG_LOAD_MODE": "dio"}, "load mode dio (env LLAMA_ARG_LOAD_MODE)"),
        (["-lm", "none"], {"LLAMA_ARG_LOAD_MODE": "dio"}, "load mode none (-lm)"),  # the flag wins, as in llama.cpp
    ],
)
def test_llama_load_mode_note(args: list[str], env: dict[str, str], note: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14, finding 5: the default is `auto` (not "mmap (default)") and `-lm` is the same flag."""
    monkeypatch.delenv("LLAMA_ARG_LOAD_MODE", raising=False)
    got = get_adapter("llama-server").launcher.memory_note(cand(args=args, env=env))
    assert got is not None and got.split("; ")[0] == note
    assert "--cache-ram 0 MiB" in got  # the cold probes' host-RAM prompt cache, off (issue 40)


def test_llama_cold_starts_have_no_host_ram_prompt_cache_and_sessions_do() -> None:
    """Issue 40: cold probes run with `--cache-ram 0` (finished slots' states would grow the memory peak
    probe after probe); a session gets a start of its own with the build's default; the flag is benchd's."""
    a = get_adapter("llama-server")
    c = cand()
    argv = a.launcher.argv(c, command=["x"], port=1, ctx_size=512)
    assert argv[argv.index("--cache-ram") + 1] == "0"
    start = a.sessions.session_start(c)
    assert start.own_start and start.candidate.args[-2:] == ["--cache-ram", "8192"]
    session_argv = a.launcher.argv(start.candidate, command=["x"], port=1, ctx_size=512)
    assert session_argv.count("--cache-ram") == 1 and session_argv[1:3] == ["--cache-ram", "8192"]
    assert "--cache-ram 8192" in start.notes and "cold probes run with --cache-ram 0" in start.notes
    for args, env, field in ((["--cache-ram", "64"], {}, "args[0]"), (["-cram=64"], {}, "args[0]"),
                             ([], {"LLAMA_ARG_CACHE_RAM": "64"}, "env.LLAMA_ARG_CACHE_RAM")):
        errors = a.checks.validate(cand(args=args, env=env))
        assert [e.code for e in errors] in (["reserved_arg"], ["reserved_env"]), errors
        assert errors[0].field is not None and errors[0].field.endswith(field) and "sessions" in errors[0].message


def test_llama_reserved_env() -> None:
    errors = get_adapter("llama-server").checks.validate(cand(env={"LLAMA_ARG_CTX_SIZE": "4096", "OK": "1"}))
    assert [e.code for e in errors] == ["reserved_env"]
    assert "use `ctx_size`" in errors[0].message


@pytest.mark.parametrize(
    ("runtime", "kind", "supported"),
    [
        ("llama-server", "medusa", "draft, eagle3, mtp"),
        ("mlx_lm.server", "mtp", "draft"),
        ("mlx_vlm.server", "draft", "dflash, eagle3, mtp"),
    ],
)
def test_unsupported_spec_kind_names_supported(runtime: str, kind: str, supported: str) -> None:
    errors = get_adapter(runtime).checks.validate(cand(runtime, spec={"kind": kind, "draft_model": "/d"}))
    assert [e.code for e in errors] == ["unsupported_spec"]
    assert kind in errors[0].message and supported in errors[0].message
    assert errors[0].field is not None and errors[0].field.endswith("spec.kind")


def test_missing_draft_model() -> None:
    errors = get_adapter("mlx_lm.server").checks.validate(cand("mlx_lm.server", spec={"kind": "draft"}))
    assert [e.code for e in errors] == ["missing_draft_model"]


@pytest.mark.parametrize("runtime", ["mlx_lm.server", "mlx_vlm.server"])
def test_mlx_rejects_ctx_size_and_never_restarts(runtime: str) -> None:
    a = get_adapter(runtime)
    errors = a.checks.validate(cand(runtime, ctx_size=4096))
    assert [e.code for e in errors] == ["unsupported_ctx_size"]
    assert not a.launcher.restarts_per_context(cand(runtime))
    assert a.launcher.server_ctx_size(cand(runtime), 2048, 128) is None


def test_mlx_argv() -> None:
    lm = get_adapter("mlx_lm.server")
    c = cand("mlx_lm.server", spec={"kind": "draft", "draft_model": "/d", "draft_max": 4})
    argv = lm.launcher.argv(c, command=["/v/bin/mlx_lm.server"], port=9, ctx_size=None)
    assert argv[:7] == ["/v/bin/mlx_lm.server", "--model", "/models/m.gguf", "--host", "127.0.0.1", "--port", "9"]
    assert argv[-4:] == ["--draft-model", "/d", "--num-draft-tokens", "4"]
    assert argv[argv.index("--prompt-cache-size") + 1] == "0"
    vlm = get_adapter("mlx_vlm.server")
    c = cand("mlx_vlm.server", spec={"kind": "mtp", "draft_max": 3})
    argv = vlm.launcher.argv(c, command=["/v/bin/python", "-m", "mlx_vlm.server"], port=9, ctx_size=None)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--draft-model") + 1] == "/models/m.gguf"  # mtp: the model's own weights
    assert argv[argv.index("--draft-kind") + 1] == "mtp"
    assert argv[argv.index("--draft-block-size") + 1] == "3"


def test_mlx_env_offline_with_existing_cache(tmp_path) -> None:
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    env = get_adapter("mlx_lm.server").launcher.env(cand("mlx_lm.server", env={"HF_HUB_OFFLINE": "0", "X": "y"}), config)
    assert env["HF_HUB_CACHE"] == str(config.hf_cache_dir)
    assert config.hf_cache_dir.is_dir()
    assert env["HF_HUB_OFFLINE"] == "0"  # the candidate's env wins
    assert env["X"] == "y"
    llama_env = get_adapter("llama-server").launcher.env(cand(env={"A": "b"}), config)
    assert llama_env["A"] == "b"


def test_request_bodies() -> None:
    s = Sampling(temperature=0.0, seed=7)
    for name, adapter in ADAPTERS.items():
        body = adapter.requests.request_body(model="m", prompt="hi", max_tokens=5, sampling=s)
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert body["max_tokens"] == 5 and body["temperature"] == 0.0 and body["seed"] == 7
        assert body["messages"] == [{"role": "user", "content": "hi"}]
        assert adapter.requests.request_headers()["Content-Type"] == "application/json"
        if name == "llama-server":
            assert body["cache_prompt"] is False and "ignore_eos" not in body  # a probe's: `length_fields`
        assert "ignore_eos" not in adapter.requests.answer_body(model="m", prompt="hi", max_tokens=5, sampling=s)
    assert get_adapter("mlx_lm.server").requests.request_model(cand("mlx_lm.server")) == "default_model"
    assert get_adapter("mlx_vlm.server").requests.request_model(cand("mlx_vlm.server")) == "/models/m.gguf"
    assert get_adapter("llama-server").requests.request_model(cand(request_model="q")) == "q"



def test_probe_body_is_the_request_body_with_the_candidates_model_and_its_length_fields() -> None:
    llama = get_adapter("llama-server").requests
    c = cand(request_model="q")
    body = llama.probe_body(c, prompt="hi", settings=ChatSettings(5, thinking="on", run_to_length=False))
    assert body["model"] == "q" and body["max_tokens"] == 5 and body["ignore_eos"] is False
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert llama.probe_body(c, prompt="hi", settings=ChatSettings(5))["ignore_eos"] is True
    mlx = get_adapter("mlx_lm.server").requests
    plain = mlx.probe_body(cand("mlx_lm.server"), prompt="hi", settings=ChatSettings(5, run_to_length=False))
    assert plain == mlx.request_body(model="default_model", prompt="hi", max_tokens=5, sampling=Sampling())


def test_chat_settings_of_a_sweep_carry_its_sampling_thinking_and_eos_rule() -> None:
    sweep = Sweep(name="s", candidates=[cand()], contexts=[64], gen_tokens=24, sampling=Sampling(seed=9),
                  thinking="off", ignore_eos=False)
    every = ChatSettings.of(sweep)
    assert every == ChatSettings(24, Sampling(seed=9), thinking="off", run_to_length=False)
    assert ChatSettings.of(sweep, 16) == ChatSettings(16, Sampling(seed=9), "off", False)
    assert ChatSettings.of(sweep, 16, to_length=True).run_to_length is True  # the unrecorded probes
    body = get_adapter("llama-server").requests.probe_body(cand(), prompt="hi", settings=every)
    assert (body["max_tokens"], body["seed"], body["ignore_eos"]) == (24, 9, False)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


# ------------------------------------------------------------------------- normalize on real shapes

def result_with(final: dict, chunks: int = 64, window_s: float = 0.1) -> ProbeResult:
    t0 = time.perf_counter()
    times = [t0 + 0.02 + window_s * i / (chunks - 1) for i in range(chunks)]
    return ProbeResult(
        status="ok", error=None, http_status=200, started=t0, ended=times[-1] + 0.001,
        first_content=times[0], last_content=times[-1], content_chunks=chunks, chunk_times=times,
        final=final, done=True, answer_chunks=chunks, first_answer=times[0],
    )


LLAMA_SPEC_FINAL: dict[str, Any] = {
    "choices": [], "object": "chat.completion.chunk",
    "usage": {"completion_tokens": 64, "prompt_tokens": 315, "total_tokens": 379,
              "prompt_tokens_details": {"cached_tokens": 0}},
    "timings": {"cache_n": 0, "prompt_n": 315, "prompt_ms": 62.69, "prompt_per_second": 5024.72,
                "predicted_n": 64, "predicted_ms": 29.98, "predicted_per_second": 2101.26,
                "draft_n": 56, "draft_n_accepted": 56},
}
MLX_LM_FINAL: dict[str, Any] = {
    "object": "chat.completion", "model": "default_model", "choices": [],
    "usage": {"prompt_tokens": 314, "completion_tokens": 64, "total_tokens": 378,
              "prompt_tokens_details": {"cached_tokens": 0}},
}
MLX_VLM_FINAL: dict[str, Any] = {
    "object": "chat.completion.chunk", "choices": [],
    "usage": {"prompt_tokens": 314, "completion_tokens": 64, "total_tokens": 378,
              "prompt_tokens_details": {"cached_tokens": 0}},
    "timings": {"prompt_n": 314, "cache_n": 0, "predicted_n": 64, "prompt_per_second": 10765.38,
                "predicted_per_second": 524.83, "peak_memory": 0.002357843, "draft_kind": None,
                "draft_rounds": None, "draft_n": None, "draft_n_accepted": None},
}


def test_normalize_llama_with_spec() -> None:
    n = get_adapter("llama-server").reader.normalize(result_with(LLAMA_SPEC_FINAL), spec_configured=True)
    assert (n.prompt_tokens, n.cached_tokens, n.gen_tokens) == (315, 0, 64)
    assert n.prompt_tps == 5024.72 and n.gen_tps == 2101.26
    assert n.sources["prompt_tps"] == n.sources["gen_tps"] == "server:timings"
    assert n.sources["cached_tokens"] == "server:timings cache_n"
    assert (n.draft_n, n.draft_accepted, n.draft_acceptance) == (56, 56, 1.0)
    assert n.gen_tps_client == pytest.approx(63 / 0.1, rel=1e-6)
    assert n.sources["gen_tps_client"] == "client:stream-window"
    assert n.null_reasons == {}
    fields = n.row_fields()
    assert "server_peak_memory_bytes" not in fields or "server_peak_memory_bytes" in Row.__struct_fields__
    Row(job="j", candidate="c", runtime="llama-server", context=1, kind="probe", probe=0, status="ok", **fields)


def test_normalize_llama_without_spec_has_null_acceptance() -> None:
    final = {**LLAMA_SPEC_FINAL, "timings": {k: v for k, v in LLAMA_SPEC_FINAL["timings"].items()
                                              if not k.startswith("draft")}}
    n = get_adapter("llama-server").reader.normalize(result_with(final), spec_configured=False)
    assert n.draft_acceptance is None and n.null_reasons["draft_acceptance"] == "no spec configured"
    n = get_adapter("llama-server").reader.normalize(result_with(final), spec_configured=True)
    assert n.draft_acceptance is None and "no draft counts" in n.null_reasons["draft_acceptance"]


def test_normalize_mlx_lm() -> None:
    n = get_adapter("mlx_lm.server").reader.normalize(result_with(MLX_LM_FINAL), spec_configured=True)
    assert n.prompt_tps is None
    assert n.null_reasons["prompt_tps"] == "mlx_lm.server reports no prompt timing"
    assert n.gen_tps == n.gen_tps_client == pytest.approx(630.0, rel=1e-6)
    assert n.sources["gen_tps"] == "client:stream-window"
    assert n.cached_tokens == 0 and n.gen_tokens == 64 and n.prompt_tokens == 314
    assert "exposes no draft acceptance" in n.null_reasons["draft_acceptance"]


def test_normalize_mlx_vlm() -> None:
    n = get_adapter("mlx_vlm.server").reader.normalize(result_with(MLX_VLM_FINAL), spec_configured=False)
    assert n.prompt_tps == 10765.38 and n.gen_tps == 524.83
    assert n.server_peak_memory_bytes == 2_357_843
    assert n.sources["server_peak_memory_bytes"].startswith("server:peak_memory")
    assert n.cached_tokens == 0
    assert n.gen_tps_client is not None
    assert n.draft_n is None and n.null_reasons["draft_n"] == "no spec configured"


def test_spec_struct_is_what_validate_reads() -> None:
    # guards the Spec fields this module relies on
    s = Spec(kind="draft", draft_model="/d", draft_max=2)
    assert (s.kind, s.draft_model, s.draft_max) == ("draft", "/d", 2)


def test_mlx_vlm_session_start_and_its_cache_rule() -> None:
    """Session starts turn its prefix cache on and its disk tier (kept across starts) off, unless the
    candidate's env says otherwise; its cache keeps the prompt only, in blocks of `APC_BLOCK_SIZE`."""
    vlm = get_adapter("mlx_vlm.server")
    cand = Candidate(id="v", runtime="mlx_vlm.server", model="/m")
    start = vlm.sessions.session_start(cand)
    assert start.own_start and start.candidate.env == {"APC_ENABLED": "1", "APC_DISK_ENABLED": "0"}
    assert "APC_ENABLED=1" in start.notes and "APC_DISK_ENABLED=0" in start.notes
    own = vlm.sessions.session_start(msgspec.structs.replace(cand, env={"APC_DISK_ENABLED": "1", "APC_BLOCK_SIZE": "32"}))
    assert own.candidate.env["APC_DISK_ENABLED"] == "1" and "APC_DISK_ENABLED=1 (candidate env)" in own.notes
    rule = vlm.sessions.prefix_cache_rule(cand)
    assert (rule.block_tokens, rule.keeps_generated) == (16, False) and "apc.py" in rule.source
    assert vlm.sessions.prefix_cache_rule(own.candidate).block_tokens == 32
    assert get_adapter("llama-server").sessions.prefix_cache_rule(cand).keeps_generated


def test_mlx_vlm_levels_are_capped_by_its_own_max_num_seqs() -> None:
    vlm = get_adapter("mlx_vlm.server")
    cand = Candidate(id="v", runtime="mlx_vlm.server", model="/m")
    start = vlm.parallel.parallel_start(cand, 2, None)
    assert start.serial is None and start.candidate.args[-2:] == ["--max-num-seqs", "2"]
    capped = msgspec.structs.replace(cand, args=["--max-num-seqs", "2"])
    problems = vlm.parallel.validate_levels(capped, [1, 2, 4])
    assert len(problems) == 1 and "level 4 is above the 2" in problems[0].message
    assert "--max-num-seqs 2" in problems[0].message


def test_flag_values_reads_both_forms_in_order_and_leaves_out_a_last_flag_without_value() -> None:
    args = ["-np", "2", "--parallel=4", "-c", "512", "-np"]
    assert flags.flag_values(args, ("-np", "--parallel")) == [("-np", "2"), ("--parallel", "4")]
    assert flags.flag_values(args, ("--kv-bits",)) == []


@pytest.mark.parametrize(("runtime", "args", "slots", "named"), [
    ("llama-server", ["-np", "2", "--parallel=4"], 4, "--parallel 4 (candidate args)"),
    ("mlx_lm.server", ["--decode-concurrency", "3"], 3, "--decode-concurrency 3 (candidate args)"),
    ("mlx_vlm.server", ["--max-num-seqs=5"], 5, "--max-num-seqs 5 (candidate args)"),
    ("llama-server", ["-np", "auto"], None, ""),
    ("mlx_lm.server", [], None, ""),
])
def test_parallel_slots_are_the_last_value_of_the_runtimes_own_flag(
        runtime: str, args: list[str], slots: int | None, named: str) -> None:
    candidate = Candidate(id="p", runtime=runtime, model="/m", args=args)
    assert get_adapter(runtime).parallel.parallel_slots(candidate) == (slots, named)
