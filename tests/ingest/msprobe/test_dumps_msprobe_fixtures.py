"""Older real msprobe files (shared/fixtures/msprobe, mstt 8.3.3 test data): a Megatron (PanGu) NPU
statistics dump with construct.json roots "" and the {name: frames} stack.json form."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tilake.diagnosis.lake_rows import stats_rows
from tilake.ingest.msprobe.probe import probe_side
from tilake.ingest.msprobe.reader import DumpSide

FIX = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "msprobe"
PANGU = FIX / "mindspore_ut" / "compare" / "dump_file" / "pytorch_data"

pytestmark = pytest.mark.skipif(not PANGU.is_dir(), reason="shared/fixtures/msprobe not present beside the clone")


def test_megatron_npu_statistics_dump_8x_layout():
    d = DumpSide(PANGU)
    assert d.construct_variant == "8.x" and d.stack_variant == "8.x"
    assert d.meta["task"] == "statistics" and d.warnings == []
    p = probe_side(d)
    assert p["layers"] == 1 and p["wrapper_segments"] == {"module": 4}
    assert {"ParallelAttention", "ParallelTransformerLayer", "RMSNorm", "VocabParallelEmbedding"} <= set(p["module_classes"])
    assert {"NPU.npu_rms_norm", "NPU.npu_fusion_attention", "Distributed.all_reduce"} <= set(p["apis"])
    # "" roots are roots; children found by structure
    emb = "Module.module.module.language_model.embedding.word_embeddings.VocabParallelEmbedding.forward.0"
    assert d.children(emb) == ["Tensor.__or__.0.forward", "Distributed.all_reduce.0.forward"]
    assert d.parents["Tensor.__add__.0.forward"] is None
    frames = d.stack_frames()
    assert "Tensor.__add__.0.forward" in frames and frames["Tensor.__add__.0.forward"][0].startswith("File ")
    # statistics only: no tensor files; each slot keeps msprobe's own statistics (dump.json values)
    rows = stats_rows(d, "train", 0)
    assert rows and {(r["status"], r["stats_source"]) for r in rows} == {("msprobe_summary", "msprobe")}
    add0 = [r for r in rows if r["entry"] == "Tensor.__add__.0.forward"]
    assert [(r["io_kind"], r["idx"], r["max"], r["norm"], r["numel"]) for r in add0] == [
        ("input", "0", 423.0, 423.0, 1), ("output", "0", 424.0, 424.0, 1)]   # int64 scalars, shape []
    assert all(r["md5"] is None and r.get("content_hash") is None for r in rows)


REAL = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "real_public"


@pytest.mark.skipif(not (REAL / "dump_lm_compare_statistics").is_dir(), reason="shared real_public fixtures absent")
def test_probe_names_statistics_md5_grads_and_a_mindspore_side():
    from tilake.ingest.msprobe.probe import probe

    r = probe(REAL / "dump_lm_compare_statistics" / "pt", REAL / "dump_lm_compare_statistics" / "ms")
    pt, ms = r["train"], r["infer"]
    assert pt["summary_mode"] == "statistics" and pt["pt_files_present"] == 0
    assert pt["parameters_grad"]["entries"] == sum(1 for e in json.loads(
        (REAL / "dump_lm_compare_statistics" / "pt" / "dump.json").read_text())["data"] if e.endswith(".parameters_grad"))
    assert pt["parameters_grad"]["entries"] > 0 and pt["parameters_grad"]["tensors"] >= pt["parameters_grad"]["entries"]
    assert ms["framework_detected"] == "mindspore" and ms["module_entries"] == 0
    assert any(n.startswith("MindSpore dump (168 Cell.* entries): not supported") for n in ms["notes"])
    md5 = probe(REAL / "dump_llama2_md5" / "npu")["train"]
    assert md5["summary_mode"] == "md5" and md5["module_classes"]["FlashSelfAttention"] > 0


@pytest.mark.skipif(not (REAL / "dump_lm_compare_statistics").is_dir(), reason="shared real_public fixtures absent")
def test_a_mindspore_side_is_named_unsupported_not_0_modules():
    from tilake.diagnosis import analyze as A
    from tilake.diagnosis import maps as M

    d = REAL / "dump_lm_compare_statistics"
    an = A.analyze_pair([A.RoundInput(d / "pt", d / "ms")], M.load_map("qwen3_megatron_vllm"))
    assert an.verdict == "evidence_missing"
    assert an.suggestions[0]["fix"] == "unsupported_framework"
    assert "the infer dump is MindSpore (168 Cell.* entries): not supported" in an.verdict_reason


@pytest.mark.skipif(not (REAL / "dump_lm_compare_statistics").is_dir(), reason="shared real_public fixtures absent")
def test_megatron_core_map_on_the_real_mindspeed_first_pp_stage():
    """Every training-side selector of the Megatron-core map resolves on the real MindSpeed-LLM dump except
    the final norm and output layer, which that first pipeline stage does not run: said so, not 'missing'."""
    from tilake.diagnosis import analyze as A
    from tilake.diagnosis import maps as M
    from tilake.diagnosis import selectors as S

    d = REAL / "dump_lm_compare_statistics" / "pt"
    pair = A.Pair(d, d, M.load_map("qwen3_megatron_vllm"))
    assert pair.stage_ends["train"] is True and pair.layer_counts["train"] == 2
    unresolved = []
    for b in pair.boundaries:
        try:
            S.resolve(pair.views["train"], b.spec["train"], "train")
        except S.Unavailable:
            unresolved.append(b.name)
    assert unresolved == ["final_norm.out", "logits"] and len(pair.boundaries) == 25
    row = A.compare_boundary(pair, next(b for b in pair.boundaries if b.name == "final_norm.out"))
    assert row["reason"].startswith("not in this train dump: it ends at layer 1 (a pipeline stage before the last")


@pytest.mark.skipif(not (REAL / "dump_llama2_md5").is_dir(), reason="shared real_public fixtures absent")
def test_real_megatron_legacy_md5_pair_finds_its_first_divergence_without_tensors():
    """The shipped Megatron-legacy map on the real Llama2 md5 dumps (NPU vs GPU bench): the exact gate
    runs on md5 alone; embedding, input norm, fused qkv and flash attention of layer 0 are EXACT, the
    attention output projection (RowParallelLinear) is the first to differ."""
    from tilake.diagnosis import analyze as A
    from tilake.diagnosis import maps as M

    d = REAL / "dump_llama2_md5"
    an = A.analyze_pair([A.RoundInput(d / "npu", d / "bench")], M.load_map("llama2_megatron_legacy"))
    assert an.sides["train"]["layers"] == 4 and an.rounds[0]["counts"] == {"EXACT": 4, "NOT_EXACT": 30}
    fd = an.rounds[0]["first_divergence"]
    assert fd["boundary"] == "L0.attn_dense.out" and fd["reason"] == "every earlier boundary is EXACT"
    assert [p["boundary"] for p in an.points] == ["L0.attn_dense.out"] and an.points[0]["class"] is None
    assert an.verdict == "nonzero" and an.consistency == "unknown"
    assert "collect tensor mode for L0.attn_dense.out" in an.verdict_reason
