"""Real msprobe 26.2.0 dumps (shared/fixtures/dumps/pairA, pairE): the measured reference holds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.diagnosis import analyze as A
from tilake.diagnosis import maps as M
from tilake.diagnosis import outputs as O
from tilake.pipeline.dumps import write_dump_outputs

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
DUMPS = SHARED / "fixtures" / "dumps"

pytestmark = pytest.mark.skipif(not (DUMPS / "pairA").is_dir(),
                                reason="shared/fixtures/dumps/pairA not present beside the clone")

# in the training side's execution order (HF Qwen3: q_norm(q_proj(x)) runs before k_proj)
UP_TO_ROPE = ["embed", "L0.input_layernorm.out", "L0.q_proj.out", "L0.q_norm.out", "L0.k_proj.out",
              "L0.k_norm.out", "L0.v_proj.out", "L0.q_after_rope", "L0.k_after_rope"]


@pytest.fixture(scope="module", params=["pairA", "pairE"])
def analysis(request):
    bmap = M.load_map("qwen3_hf_vllm")
    p = DUMPS / request.param
    return request.param, A.analyze_pair([A.RoundInput(p / "train", p / "infer")], bmap)


def test_exact_up_to_rope_then_attention_rounding(analysis):
    name, an = analysis
    rows = {r["boundary"]: r for r in an.boundary_rows}
    assert len(rows) == 35
    order = [r["boundary"] for r in sorted(an.boundary_rows, key=lambda r: r["position"])]
    assert order[:9] == UP_TO_ROPE and order[9] == "L0.attn_core.out" and order[-1] == "logits"
    for b in UP_TO_ROPE:
        assert rows[b]["status"] == "EXACT", (name, b, rows[b])
        assert rows[b]["max_abs_diff"] == 0
    fd = an.rounds[0]["first_divergence"]
    assert fd["status"] == "found" and fd["boundary"] == "L0.attn_core.out"
    att = rows["L0.attn_core.out"]
    assert att["status"] == "NOT_EXACT" and att["class"] == "rounding-level"
    assert att["inputs_equal"] is True
    # every later boundary is compared and differs at rounding level only
    assert all(r["status"] == "NOT_EXACT" for r in an.boundary_rows if r["position"] >= 9)
    assert not [r for r in an.boundary_rows if r.get("class") == "logic-level"]
    assert [p["boundary"] for p in an.points] == ["L0.attn_core.out"]
    assert att["role"] == "independent_point" and rows["logits"]["role"] == "propagated"
    assert rows["embed"]["role"] is None
    assert an.points[0]["class"] == "rounding-level"
    assert an.rounds[0]["suspects"] == []
    # a rounding-level point with differences downstream is not the end: its stub is offered until every
    # remaining difference is an isolated rounding point (the pair has no round 1 dump, so it stays open)
    assert an.verdict == "nonzero" and an.consistency == "unknown"
    assert "not explained yet" in an.verdict_reason
    assert an.logprob["status"] == "evidence_missing" and an.logprob["mean"] is None
    si = an.stub_instruction
    assert si["needed"] is True and si["available"] is True and si["isolate_boundary"]["name"] == "L0.attn_core.out"
    assert an.rounds[0]["outcome"] == "stub_needed"


def test_pairA_matches_the_measured_reference_table():
    bmap = M.load_map("qwen3_hf_vllm")
    an = A.analyze_pair([A.RoundInput(DUMPS / "pairA" / "train", DUMPS / "pairA" / "infer")], bmap)
    rows = {r["boundary"]: r for r in an.boundary_rows}
    # figures from shared/fixtures/dumps/README.md "Measured reference for pairA"
    att = rows["L0.attn_core.out"]
    assert att["max_abs_diff"] == pytest.approx(0.0078125)
    assert att["tensor_ulp"] == pytest.approx(1.0)
    assert att["max_elem_ulp_significant"] == 15
    assert att["row_indices_differing"] == [1, 2, 3, 4, 5, 6, 7]
    assert rows["L0.o_proj.out"]["tensor_ulp"] == pytest.approx(0.5625)
    assert rows["L0.down_proj.out"]["tensor_ulp"] == pytest.approx(1.5)
    assert rows["L1.input_layernorm.out"]["tensor_ulp"] == pytest.approx(2.0)
    assert rows["logits"]["max_abs_diff"] == pytest.approx(0.0234375)
    assert rows["logits"]["train_shape"] == rows["logits"]["infer_shape"] == [8, 128]  # after squeeze
    # histogram covers every element; equal elements sit in bin "0"
    assert sum(att["ulp_hist"].values()) == att["numel"] == 256
    assert att["ulp_hist"]["0"] == 256 - att["mismatch_count"]
    # the fused qkv layout was confirmed by a correlation scan, and recorded
    scans = [s for s in an.layout_scans if s["boundary"] == "L0.q_proj.out"]
    assert scans and scans[0]["chosen"] == "concat" and scans[0]["scores"]["concat"] == pytest.approx(1.0)
    assert scans[0]["scores"]["per_group"] < 0.9
    gate = [s for s in an.layout_scans if s["boundary"] == "L1.gate_proj.out"][0]
    assert gate["chosen"] == "concat" and gate["scores"]["interleaved"] < 0.9
    # weights: every mapped weight bitwise equal; lm_head has no inference-side slot
    w = {r["boundary"]: r["status"] for r in an.weight_rows}
    assert w.pop("lm_head.weight") == "evidence_missing"
    assert set(w.values()) == {"EXACT"} and len(w) == 15
    hyp = {h["hypothesis"]: h["status"] for h in an.hypotheses}
    assert hyp["weights not in sync"] == "excluded"
    assert hyp["fused kernel / accumulation order"] == "confirmed"
    assert hyp["parallel layout differs"] == "evidence_missing"
    assert hyp["randomness (dropout, sampling)"] == "excluded"


def test_pairE_maps_through_fsdp_names():
    bmap = M.load_map("qwen3_hf_vllm")
    an = A.analyze_pair([A.RoundInput(DUMPS / "pairE" / "train", DUMPS / "pairE" / "infer")], bmap)
    rows = {r["boundary"]: r for r in an.boundary_rows}
    assert "_fsdp_wrapped_module" in rows["L1.q_proj.out"]["train_source"]
    assert rows["L0.q_after_rope"]["train_source"].startswith("Tensor.__add__.")
    assert all(r["status"] not in ("evidence_missing", "MISSING") for r in an.boundary_rows)


def test_outputs_and_reports(tmp_path):
    bmap = M.load_map("qwen3_hf_vllm")
    rin = A.RoundInput(DUMPS / "pairA" / "train", DUMPS / "pairA" / "infer")
    an = A.analyze_pair([rin], bmap)
    pair = A.Pair(rin.train, rin.infer, bmap)
    card = O.task_card(pair.dumps["train"], pair.dumps["infer"], {"model": "qwen3-tiny"})
    paths = write_dump_outputs(an, card, tmp_path)
    for k in ("task_card", "boundary_results", "stub_instruction", "report_source", "report_md", "report_html"):
        assert paths[k].is_file()
    tc = json.loads(paths["task_card"].read_text())
    assert tc["model"] == "qwen3-tiny" and tc["hardware"] == "unknown" and tc["prompt_length"] == "unknown"
    assert tc["parallel"]["train"] == "unknown"
    src = json.loads(paths["report_source"].read_text())
    assert src["results"]["verdict"] == "nonzero"
    assert src["first_divergence"]["boundary"] == "L0.attn_core.out"
    assert src["amplification_chain"][0]["boundary"] == "L0.attn_core.out"
    assert src["results"]["prefill_logprob_diff"]["status"] == "evidence_missing"
    md = paths["report_md"].read_text()
    html = paths["report_html"].read_text()
    assert "L0.attn_core.out" in md and "evidence_missing" in md
    assert html.count("data:image/png;base64,") == 1  # the amplification chain
    # one signed-ULP histogram per diverging boundary, plus the per-row error curve of the one point
    assert html.count("<svg") == 26 + 1 and html.count("error per row") == 1
    # no prompt / token ids in any report (prompt = 17, 3, 99, 42, 7, 120, 64, 5)
    for text in (md, html, paths["report_source"].read_text(), paths["boundary_results"].read_text()):
        assert "17, 3, 99" not in text and "[17,3,99" not in text.replace(" ", "")


def test_cli_probe_and_analyze_into_lake(tmp_path):
    r = CliRunner().invoke(main, ["dumps", "probe", "--train", str(DUMPS / "pairE" / "train"),
                                  "--infer", str(DUMPS / "pairE" / "infer"), "--json", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    p = json.loads((tmp_path / "p.json").read_text())
    assert p["train"]["wrapper_segments"] == {"_fsdp_wrapped_module": 66}
    assert {f["module"] for f in p["infer"]["fused_modules"]} == {
        "model.layers.{i}.self_attn.qkv_proj.QKVParallelLinear",
        "model.layers.{i}.mlp.gate_up_proj.MergedColumnParallelLinear"}
    assert "Tensor.__add__" in p["api_counter_drift"]
    assert p["train"]["slots_by_io"]["parameter"] == 25
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(DUMPS / "pairA" / "train"),
                                  "--infer", str(DUMPS / "pairA" / "infer"), "--out", str(tmp_path / "out"),
                                  "--run-id", "pairA", "--lake", str(tmp_path / "lake"), "--no-charts"])
    assert r.exit_code == 0, r.output
    assert "L0.attn_core.out" in r.output
    from tilake.lake.duck import connect

    con = connect()
    g = str(tmp_path / "lake" / "raw" / "tensor_stats" / "**" / "*.parquet")
    n, bad, mism = con.execute(f"select count(*), count(*) filter (where status <> 'ok'), "
                               f"count(*) filter (where dtype_mismatch) from read_parquet('{g}', union_by_name=true)").fetchone()
    assert n == 413 + 372 and bad == 0 and mism == 0
    g = str(tmp_path / "lake" / "raw" / "boundary_results" / "**" / "*.parquet")
    assert con.execute(f"select count(*) from read_parquet('{g}') where kind='activation'").fetchone()[0] == 35


def test_measured_logprob_diff_is_reported_only_when_supplied(tmp_path):
    lp = tmp_path / "lp.json"
    lp.write_text(json.dumps({"mean": 0.0012, "max": 0.031, "std": 0.004, "source": "training log, step 12"}))
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(DUMPS / "pairA" / "train"), "--infer",
                                  str(DUMPS / "pairA" / "infer"), "--out", str(tmp_path / "o"), "--no-charts",
                                  "--logprob-json", str(lp)])
    assert r.exit_code == 0, r.output
    src = json.loads((tmp_path / "o" / "report_source.json").read_text())
    assert src["results"]["prefill_logprob_diff"] == {"status": "nonzero", "mean": 0.0012, "max": 0.031,
                                                      "std": 0.004, "source": "training log, step 12"}
    md = (tmp_path / "o" / "alignment_report.md").read_text()
    assert "Prefill log-prob diff: `nonzero` (mean 0.0012, max 0.031, source training log, step 12)" in md
