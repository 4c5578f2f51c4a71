"""The `[kld]` table's checks and llama-perplexity's output, read as the pinned tool prints it.

`tests/data/kld/kl-divergence-full.txt` and `-cut.txt` are two real runs of the pinned
`llama-perplexity --kl-divergence` (q8_0 tiny model against its f32 reference, 18 chunks of 512): the
first printed everything, the second lost its last chunk and the summary block at exit (the pinned build
does not flush its log worker); the validate tests on the real tools are in test_kld_real.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchd.engine import kld
from benchd.engine.sweepcheck import submit_problems
from benchd.schemas import Candidate, Kld, Sweep

DATA = Path(__file__).resolve().parents[1] / "data" / "kld"


def _sweep(cands: list[Candidate], **kw: Any) -> Sweep:
    return Sweep(name="k", contexts=[64], gen_tokens=8, candidates=cands, kld=Kld(**kw))


def _gguf(cid: str, model: str = "/m.gguf", args: list[str] | None = None) -> Candidate:
    return Candidate(id=cid, runtime="llama-server", model=model, args=args or [])


def test_the_full_output_gives_every_figure() -> None:
    got = kld.parse_kld_output((DATA / "kl-divergence-full.txt").read_text(), 512)
    assert got["summary"] == "summary block"
    assert got["kld_mean"] == pytest.approx(0.002596) and got["kld_mean_se"] == pytest.approx(0.000052)
    assert got["kld_median"] == pytest.approx(0.001241) and got["kld_p99"] == pytest.approx(0.01627)
    assert got["top1_agree"] == pytest.approx(0.97865) and got["top1_agree_se"] == pytest.approx(0.00213)
    assert got["ppl_ratio"] == pytest.approx(8697.269882)
    assert got["chunks"] == got["chunks_expected"] == 18 and got["tokens_scored"] == 18 * 255
    # the per-chunk means recovered from the cumulative column average back to the last cumulative mean
    assert sum(got["chunk_kld"]) / 18 == pytest.approx(0.00260, abs=1e-5)


def test_a_cut_output_gives_no_figure() -> None:
    got = kld.parse_kld_output((DATA / "kl-divergence-cut.txt").read_text(), 512)
    assert got["summary"] is None and got["chunks"] < got["chunks_expected"]
    assert "kld_mean" not in got and "top1_agree" not in got


def test_the_last_chunk_line_stands_in_for_a_lost_summary() -> None:
    text = (DATA / "kl-divergence-full.txt").read_text()
    got = kld.parse_kld_output(text.split("====== Perplexity")[0], 512)
    assert got["summary"] == "last chunk line"
    assert got["kld_mean"] == pytest.approx(0.00260) and got["top1_agree"] == pytest.approx(0.97865)
    assert "kld_p99" not in got and "kld_median" not in got


def test_server_only_args_do_not_reach_the_tool() -> None:
    keep, drop = kld.split_args(["-t", "2", "--port", "8080", "-ctk=q4_0", "--jinja", "-fa", "on", "-np", "4"])
    assert keep == ["-t", "2", "-ctk=q4_0", "-fa", "on"]
    assert drop == ["--port", "8080", "--jinja", "-np", "4"]


def test_a_reference_that_is_not_a_candidate_is_refused() -> None:
    got = submit_problems(_sweep([_gguf("a")], reference="nope"))
    assert [(p.code, p.field) for p in got] == [("kld_reference", "$.kld.reference")]
    assert "'nope' is not a candidate id" in got[0].message


def test_a_corpus_shorter_than_two_chunks_by_its_bytes_is_refused_at_submit(tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("a few words only\n")
    got = submit_problems(_sweep([_gguf("a")], reference="a", corpus=str(short), contexts=[512]))
    assert [(p.code, p.field) for p in got] == [("kld_corpus_short", "$.kld.corpus")]
    assert "1024" in got[0].message


def test_a_cache_type_the_build_refuses_is_refused_at_submit() -> None:
    """The llama-server adapter's flag check (benchd.servers.runtimes.flags) refuses it for every sweep."""
    got = submit_problems(_sweep([_gguf("a"), _gguf("b", args=["-ctk", "q3_k"])], reference="a"))
    assert [p.code for p in got] == ["bad_arg_value"] and got[0].field == "$.candidates[1].args[0]"
    assert "q3_k" in got[0].message and "q4_0" in got[0].message


def test_the_default_corpus_is_benchds_own() -> None:
    facts = kld.corpus_facts(_sweep([_gguf("a")], reference="a"))
    assert facts.path == str(kld.DEFAULT_CORPUS) and "written for benchd" in facts.source
    assert facts.words > 3000 and len(facts.sha256) == 64


def test_mlx_kv_bits_below_the_servers_start_are_named() -> None:
    """mlx_lm.server quantizes its cache from token 5000 by default: a shorter chunk never reads it quantized."""
    late = kld.mlx_kv_notes(["--kv-bits", "4"], 512)
    assert late and "stayed full precision" in late[0] and "5000" in late[0]
    assert kld.mlx_kv_notes(["--kv-bits", "4", "--quantized-kv-start", "0"], 512) == [
        "--kv-bits 4 from token 0 (--quantized-kv-start)"]
    assert kld.mlx_kv_notes(["--max-tokens", "9"], 512) == []
