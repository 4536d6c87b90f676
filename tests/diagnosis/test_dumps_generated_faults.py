"""Generated pairs (tests/fixtures/msprobe_writer.py, msprobe on-disk format) with injected faults, through stub rounds."""
from __future__ import annotations

import json
from pathlib import Path

import msprobe_writer as G  # noqa: E402
import pytest

from tilake.diagnosis import analyze as A  # noqa: E402
from tilake.diagnosis import maps as M  # noqa: E402
from tilake.diagnosis import outputs as O  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    cfg = G.Cfg()
    w = G.weights(cfg)
    G.dump_train(cfg, root / "train", w)
    return cfg, w, root


def run_rounds(cfg, w, root: Path, fault, max_rounds: int = 4):
    """Round 0, then apply each stub instruction to the inference side (msprobe load) until done."""
    bmap = M.load_map("qwen3_hf_vllm")
    G.dump_infer(cfg, root / f"{fault}_r0", fault, w=w)
    rounds = [A.RoundInput(root / "train", root / f"{fault}_r0")]
    an = A.analyze_pair(rounds, bmap)
    while an.stub_instruction.get("needed") and len(rounds) <= max_rounds:
        instr = an.stub_instruction
        assert instr["available"] and instr["target_side"] == "infer" and instr["source_side"] == "train"
        k = instr["round"]
        pair = A.Pair(rounds[0].train, rounds[0].infer, bmap)
        src = root / f"{fault}_load{k}"
        files = A.prepare_stub_source(pair, instr, src)
        assert all(f.is_file() for f in files)
        load = {"path": str(src), "modules": instr["msprobe_config"]["load"]["modules"]}
        G.dump_infer(cfg, root / f"{fault}_r{k}", fault, load=load, w=w)
        rounds.append(A.RoundInput(root / "train", root / f"{fault}_r{k}"))
        an = A.analyze_pair(rounds, bmap)
    return an


def test_clean_generated_pair_is_bitwise_exact(base):
    cfg, w, root = base
    G.dump_infer(cfg, root / "clean", None, w=w)
    an = A.analyze_pair([A.RoundInput(root / "train", root / "clean")], M.load_map("qwen3_hf_vllm"))
    assert an.rounds[0]["counts"] == {"EXACT": 35}
    assert an.verdict == "exact" and an.consistency == "bitwise"
    assert an.points == [] and an.stub_instruction["needed"] is False


def test_corrupted_weight_row(base, tmp_path):
    cfg, w, root = base
    an = run_rounds(cfg, w, root, "weight_row")
    r0 = an.rounds[0]
    assert r0["first_divergence"]["boundary"] == "L1.gate_proj.out"
    p = an.points[0]
    assert p["class"] == "logic-level" and p["pattern"] == "whole_columns"
    # the corrupted row is found by the weight hypothesis, with its row count
    hyp = {h["hypothesis"]: h for h in an.hypotheses}
    assert hyp["weights not in sync"]["status"] == "confirmed"
    assert "L1.gate_proj.weight" in hyp["weights not in sync"]["evidence"][0]
    assert "1 of 64 rows" in hyp["weights not in sync"]["evidence"][0]
    # round 1: stub verified, downstream all EXACT → exactly one independent point
    assert len(an.rounds) == 2
    assert an.rounds[1]["stub_verification"]["effective"] is True
    assert an.rounds[1]["outcome"] == "downstream_all_exact"
    assert [x["boundary"] for x in an.points] == ["L1.gate_proj.out"]
    assert an.verdict == "nonzero" and an.consistency == "logic_level"
    assert an.stub_instruction["needed"] is False
    paths = O.write_outputs(an, {"model": "gen"}, tmp_path)
    src = json.loads(paths["report_source"].read_text())
    assert src["logic_level_points"] == ["L1.gate_proj.out"] and src["summary"]["rounds"] == 2


def test_wrong_attention_scale_constant(base):
    cfg, w, root = base
    an = run_rounds(cfg, w, root, "attn_scale")
    assert an.rounds[0]["first_divergence"]["boundary"] == "L0.attn_core.out"
    assert an.points[0]["class"] == "logic-level"
    assert an.points[0]["tensor_ulp"] > 4
    # the constant is wrong in every layer: the stub of layer 0 reveals layer 1 as a second point
    assert [(x["round"], x["boundary"], x["class"]) for x in an.points] == [
        (0, "L0.attn_core.out", "logic-level"), (1, "L1.attn_core.out", "logic-level")]
    assert [r["outcome"] for r in an.rounds] == ["stub_needed", "stub_needed", "downstream_all_exact"]
    assert all(r["stub_verification"]["effective"] for r in an.rounds[1:])
    # cumulative stubs: round 2 keeps layer 0's override
    assert len(an.rounds[2]["stub_verification"]["checks"]) == 2
    # the amplification chain starts at the first divergence and grows downstream
    chain = an.rounds[0]["amplification_chain"]
    assert chain[0]["boundary"] == "L0.attn_core.out" and chain[0]["growth_vs_first"] == 1.0
    assert max(c["growth_vs_first"] for c in chain) > 1.0


def test_dropped_residual(base):
    cfg, w, root = base
    an = run_rounds(cfg, w, root, "drop_residual")
    assert an.rounds[0]["first_divergence"]["boundary"] == "final_norm.out"
    assert an.points[0]["class"] == "logic-level"
    # every layer's residual stream (vLLM output.0 + output.1 summed in fp32) is still EXACT
    rows0 = {r["boundary"]: r for r in an.boundary_rows if r["round"] == 0}
    assert rows0["L1.layer.out"]["status"] == "EXACT"
    assert len(an.points) == 1 and an.rounds[-1]["outcome"] == "downstream_all_exact"


def test_stub_not_taking_effect_stops_the_loop(base):
    cfg, w, root = base
    bmap = M.load_map("qwen3_hf_vllm")
    G.dump_infer(cfg, root / "ne_r0", "weight_row", w=w)
    G.dump_infer(cfg, root / "ne_r1", "weight_row", w=w)  # collected without the load setting
    an = A.analyze_pair([A.RoundInput(root / "train", root / "ne_r0"),
                         A.RoundInput(root / "train", root / "ne_r1")], bmap)
    assert an.rounds[1]["outcome"] == "stub_not_effective"
    assert an.rounds[1]["stub_verification"]["effective"] is False
    assert not [r for r in an.boundary_rows if r["round"] == 1]  # downstream not compared
    assert any("did not take effect" in n for n in an.notes)


def test_stub_instruction_matches_msprobe_load(base, tmp_path):
    cfg, w, root = base
    G.dump_infer(cfg, root / "si_r0", "drop_residual", w=w)
    an = A.analyze_pair([A.RoundInput(root / "train", root / "si_r0")], M.load_map("qwen3_hf_vllm"))
    si = an.stub_instruction
    assert si["round"] == 1 and si["isolate_boundary"]["name"] == "final_norm.out"
    m = si["modules"][0]
    assert m["target_entry"] == "Module.logits_processor.LogitsProcessor.forward.0"
    assert m["target_input"] == 1
    assert m["target_file"] == "Module.logits_processor.LogitsProcessor.forward.0.input.1.pt"
    assert m["source_pt"][0].endswith("Module.model.norm.Qwen3RMSNorm.forward.0.output.0.pt")
    assert m["transform"] == ["{'squeeze': 0}"]
    load = si["msprobe_config"]["load"]
    assert load["modules"] == [m["target_entry"]] and load["dump_after_load"] is True
    assert set(load) == {"path", "modules", "step", "rank", "dump_after_load"}


def test_cli_stub_round_trip(base, tmp_path):
    from click.testing import CliRunner

    from tilake.cli import main

    cfg, w, root = base
    G.dump_infer(cfg, tmp_path / "r0", "weight_row", w=w)
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(root / "train"), "--infer", str(tmp_path / "r0"),
                                  "--out", str(tmp_path / "out0"), "--no-charts"])
    assert r.exit_code == 0, r.output
    assert "L1.gate_proj.out" in r.output and "logic-level" in r.output
    instr = tmp_path / "out0" / "stub_instruction.json"
    r = CliRunner().invoke(main, ["dumps", "stub-prepare", "--train", str(root / "train"), "--infer",
                                  str(tmp_path / "r0"), "--instruction", str(instr), "--out", str(tmp_path / "stub1")])
    assert r.exit_code == 0, r.output
    cfg_json = json.loads((tmp_path / "stub1" / "msprobe_config.json").read_text())
    assert cfg_json["task"] == "tensor" and cfg_json["load"]["dump_after_load"] is True
    src = Path(cfg_json["load"]["path"]) / "step0" / "rank0" / "dump_tensor_data"
    assert (src / "Module.model.layers.1.mlp.act_fn.SiluAndMul.forward.0.input.0.pt").is_file()
    G.dump_infer(cfg, tmp_path / "r1", "weight_row", w=w, load=cfg_json["load"])
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(root / "train"), "--infer", str(tmp_path / "r0"),
                                  "--round", str(root / "train"), str(tmp_path / "r1"),
                                  "--out", str(tmp_path / "out1"), "--no-charts"])
    assert r.exit_code == 0, r.output
    src1 = json.loads((tmp_path / "out1" / "report_source.json").read_text())
    assert [x["outcome"] for x in src1["rounds"]] == ["stub_needed", "downstream_all_exact"]
    assert src1["stub_instruction"]["needed"] is False
    md = (tmp_path / "out1" / "alignment_report.md").read_text()
    assert "round 1: outcome `downstream_all_exact`; stub verification: effective" in md
    # a finished instruction cannot be prepared again
    r = CliRunner().invoke(main, ["dumps", "stub-prepare", "--train", str(root / "train"), "--infer",
                                  str(tmp_path / "r0"), "--instruction", str(tmp_path / "out1" / "stub_instruction.json"),
                                  "--out", str(tmp_path / "stub2")])
    assert r.exit_code == 2 and "no further round is needed" in r.output


def test_rounding_first_divergence_hiding_a_logic_fault(tmp_path):
    """Eager vs SDPA attention (rounding, as in pairA) plus a corrupted weight row downstream: the row is a
    suspect in round 0 and is confirmed as an independent logic-level point after isolating the roundings."""
    cfg = G.Cfg(train_attn="eager")
    w = G.weights(cfg)
    G.dump_train(cfg, tmp_path / "train", w)
    an = run_rounds(cfg, w, tmp_path, "weight_row", max_rounds=5)
    r0 = an.rounds[0]
    assert r0["first_divergence"]["boundary"] == "L0.attn_core.out"
    assert an.points[0]["class"] == "rounding-level"
    assert [s["boundary"] for s in r0["suspects"]] == ["L1.gate_proj.out"]
    row = next(r for r in an.boundary_rows if r["round"] == 0 and r["boundary"] == "L1.gate_proj.out")
    assert row["role"] == "suspect"
    assert [(p["round"], p["boundary"], p["class"]) for p in an.points] == [
        (0, "L0.attn_core.out", "rounding-level"), (1, "L1.attn_core.out", "rounding-level"),
        (2, "L1.gate_proj.out", "logic-level")]
    assert an.rounds[-1]["outcome"] == "downstream_all_exact"
    assert all(r["stub_verification"]["effective"] for r in an.rounds[1:])
    assert an.verdict == "nonzero" and an.consistency == "logic_level"


def test_megatron_style_training_side(base, tmp_path):
    """Megatron-core naming ([S, B, H], module.module wrappers, per-query-group linear_qkv) ↔ vLLM."""
    cfg, w, root = base
    G.dump_megatron(cfg, tmp_path / "meg", w)
    G.dump_infer(cfg, tmp_path / "clean", None, w=w)
    G.dump_infer(cfg, tmp_path / "wr", "weight_row", w=w)
    bmap = M.load_map("qwen3_megatron_vllm")
    an = A.analyze_pair([A.RoundInput(tmp_path / "meg", tmp_path / "clean")], bmap)
    assert an.rounds[0]["counts"] == {"EXACT": 25} and an.verdict == "exact"
    scan = [s for s in an.layout_scans if s["boundary"] == "L0.qkv.out"][0]
    assert scan["chosen"] == "per_group" and scan["scores"]["per_group"] == pytest.approx(1.0)
    assert scan["scores"]["concat"] < 0.9
    assert all(x["status"] == "EXACT" for x in an.weight_rows)
    an = A.analyze_pair([A.RoundInput(tmp_path / "meg", tmp_path / "wr")], bmap)
    assert an.rounds[0]["first_divergence"]["boundary"] == "L1.gate_up.out"
    assert [(p["boundary"], p["class"]) for p in an.points] == [("L1.gate_up.out", "logic-level")]
    assert [x["boundary"] for x in an.weight_rows if x["status"] != "EXACT"] == ["L1.gate_up.weight"]


def test_map_listed_out_of_order_keeps_the_first_divergence(base, tmp_path):
    """Execution order is the law: a map that lists ``L{i}.layer.out`` right after the input norm must not
    make it the first divergence (it runs after attention; construct.json says so)."""
    cfg, w, root = base
    G.dump_infer(cfg, root / "oo_r0", "attn_scale", w=w)
    bmap = M.load_map("qwen3_hf_vllm")
    bs = bmap["boundaries"]
    lo = next(b for b in bs if b["name"] == "L{i}.layer.out")
    bs.remove(lo)
    bs.insert(next(i for i, b in enumerate(bs) if b["name"] == "L{i}.input_layernorm.out") + 1, lo)
    an = A.analyze_pair([A.RoundInput(root / "train", root / "oo_r0")], bmap)
    fd = an.rounds[0]["first_divergence"]
    assert fd["boundary"] == "L0.attn_core.out" and fd["reason"] == "every earlier boundary is EXACT"
    rows = {r["boundary"]: r for r in an.boundary_rows}
    assert rows["L0.layer.out"]["position"] > rows["L0.down_proj.out"]["position"] > rows["L0.attn_core.out"]["position"]
    assert any("execution order" in n and "L0.down_proj.out runs before L0.layer.out" in n for n in an.notes)


def test_nothing_compared_exits_3_and_names_the_fix(base, tmp_path):
    """Sides swapped, or the wrong map: no boundary resolves; the exit status says so (3, outputs written)
    and the fix the dump names point to is suggested."""
    from click.testing import CliRunner

    from tilake.cli import main

    cfg, w, root = base
    G.dump_megatron(cfg, root / "meg", w)
    G.dump_infer(cfg, root / "sw_infer", None, w=w)
    # --map auto finds the Megatron map from the dump names alone
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(root / "meg"), "--infer", str(root / "sw_infer"),
                                  "--out", str(tmp_path / "o0"), "--no-charts"])
    assert r.exit_code == 0, r.output
    src = json.loads((tmp_path / "o0" / "report_source.json").read_text())
    assert src["map"]["name"] == "qwen3_megatron_vllm" and src["results"]["verdict"] == "exact"
    # a Megatron training dump analysed with the HF map forced: the megatron map resolves
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(root / "meg"), "--infer", str(root / "sw_infer"),
                                  "--map", "qwen3_hf_vllm", "--out", str(tmp_path / "o1"), "--no-charts"])
    assert r.exit_code == 3, r.output
    assert "--map qwen3_megatron_vllm" in r.output
    src = json.loads((tmp_path / "o1" / "report_source.json").read_text())
    assert src["results"]["verdict"] == "evidence_missing"
    assert src["suggestions"][0]["fix"] == "other_map" and src["suggestions"][0]["resolvable"] == 25  # every boundary of that map
    # the sides swapped (vLLM dump as --train, HF dump as --infer) with the Megatron map
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(root / "sw_infer"), "--infer", str(root / "meg"),
                                  "--map", "qwen3_megatron_vllm", "--out", str(tmp_path / "o2"), "--no-charts"])
    assert r.exit_code == 3, r.output
    assert "--train and --infer look swapped" in r.output


def test_a_whole_model_is_not_taken_for_a_pipeline_stage(base, tmp_path):
    cfg, w, root = base
    G.dump_megatron(cfg, tmp_path / "meg", w)
    G.dump_infer(cfg, tmp_path / "inf", None, w=w)
    pair = A.Pair(tmp_path / "meg", tmp_path / "inf", M.load_map("qwen3_megatron_vllm"))
    assert pair.stage_ends == {"train": False, "infer": False}


def test_clean_eager_vs_sdpa_pair_stubs_rounding_points_until_only_isolated_ones_remain(tmp_path):
    """HF eager attention vs SDPA, no fault: each layer's attention output is an independent rounding point;
    stub rounds run until every remaining difference is one of them (2 points for 2 layers), then the
    verdict may say the sides agree up to rounding."""
    cfg = G.Cfg(train_attn="eager")
    w = G.weights(cfg)
    G.dump_train(cfg, tmp_path / "train", w)
    an = run_rounds(cfg, w, tmp_path, None, max_rounds=5)
    assert [(p["round"], p["boundary"], p["class"]) for p in an.points] == [
        (0, "L0.attn_core.out", "rounding-level"), (1, "L1.attn_core.out", "rounding-level")]
    assert [r["outcome"] for r in an.rounds] == ["stub_needed", "stub_needed", "downstream_all_exact"]
    assert an.stub_instruction["needed"] is False
    assert an.verdict == "nonzero" and an.consistency == "rounding_only"


def test_clean_pair_with_fp32_fused_add_norm_runs_stub_rounds_to_the_end(tmp_path):
    """Stub rounds run until every remaining difference is an isolated rounding point: 6 independent points,
    one per fused norm (4) plus one per eager attention (2); a norm whose residual input was compared in
    an earlier round (upstream of the stub) still counts its inputs as EXACT."""
    cfg = G.Cfg(train_attn="eager", infer_add_norm="fp32")
    w = G.weights(cfg)
    G.dump_train(cfg, tmp_path / "train", w)
    an = run_rounds(cfg, w, tmp_path, None, max_rounds=8)
    assert [(p["round"], p["boundary"]) for p in an.points] == G.EAGER_FP32_ADD_NORM_POINTS
    assert {p["class"] for p in an.points} == {"rounding-level"}
    assert [r["outcome"] for r in an.rounds] == ["stub_needed"] * 6 + ["downstream_all_exact"]
    assert all(r["stub_verification"]["effective"] for r in an.rounds[1:])
    # round 1: the post-attention norm's inputs are o_proj.out (EXACT now) and embed (EXACT in round 0)
    row = next(r for r in an.boundary_rows if r["round"] == 1 and r["boundary"] == "L0.post_attention_layernorm.out")
    assert row["input_statuses"] == {"L0.o_proj.out": "EXACT", "embed": "EXACT"} and row["role"] == "independent_point"
    assert an.rounds[1]["counts"] == {"EXACT": 1, "NOT_EXACT": 24}
    assert an.stub_instruction["needed"] is False
    assert an.verdict == "nonzero" and an.consistency == "rounding_only"


STUBBED = ["L0.q_proj.out", "L0.k_proj.out", "L0.v_proj.out", "L0.q_norm.out", "L0.k_norm.out",
           "L0.q_after_rope", "L0.k_after_rope", "L0.o_proj.out"]


@pytest.mark.parametrize("name", STUBBED)
def test_every_attention_boundary_has_a_stub_that_takes_effect(base, tmp_path, name):
    """The qwen3 map's stubs up to the attention output: msprobe load on the inference side replaces the
    consuming module's input with the training tensor, bitwise (verified on the next round's dump)."""
    cfg, w, root = base
    bmap = M.load_map("qwen3_hf_vllm")
    G.dump_infer(cfg, tmp_path / "r0", "attn_scale", w=w)
    pair = A.Pair(root / "train", tmp_path / "r0", bmap)
    instr = A.stub_instruction(pair, [], {"boundary": name}, 0, None)
    assert instr["available"] is True and not instr.get("warnings"), instr
    files = A.prepare_stub_source(pair, instr, tmp_path / "src")
    load = {"path": str(tmp_path / "src"), "modules": instr["msprobe_config"]["load"]["modules"]}
    G.dump_infer(cfg, tmp_path / "r1", "attn_scale", load=load, w=w)
    ver = A.verify_stub(A.Pair(root / "train", tmp_path / "r1", bmap), instr)
    assert ver["effective"] is True, ver
    # the load really replaces the input: a source moved one bit is what the module then receives
    import torch

    (f,) = files
    moved = torch.load(str(f))
    moved = (moved.view(torch.int16) + 1).view(torch.bfloat16)
    torch.save(moved, str(f))
    d = G.dump_infer(cfg, tmp_path / "r2", "attn_scale", load=load, w=w)
    got = torch.load(str(d / "dump_tensor_data" / instr["modules"][0]["target_file"]))
    assert torch.equal(got.view(torch.int16), moved.view(torch.int16))
