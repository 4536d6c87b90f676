"""Issue 20 items 3, 4 and 6 on dumps written by the REAL msprobe (tests/fixtures/msprobe_shapes.py and
msprobe_shapes_more.py): a batched rollout whose request only the positions single out, int8 / int4 rollout
weights whose linear outputs are judged against the quantisation error, and MoE router decision flips."""
from __future__ import annotations

import csv
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from msprobe_python import PY, requires_msprobe

from tilake.cli import main
from tilake.diagnosis import analyze as A
from tilake.diagnosis import maps as M

FIX = Path(__file__).resolve().parents[1] / "fixtures"
GEN = {k: FIX / "msprobe_shapes.py" for k in ("ref", "int8")}
SIDES = [("ref", "train"), ("ref", "infer"), ("int8", "infer"), ("batched", "infer"), ("int4", "infer"),
         ("int8bad", "infer"), ("moe", "train"), ("moe", "infer"), ("moeflip", "infer")]
MB3 = 3 * 1024 * 1024

pytestmark = requires_msprobe


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes_more")

    def gen(ks):
        kind, side = ks
        out = root / f"{kind}_{side}"
        script = GEN.get(kind, FIX / "msprobe_shapes_more.py")
        p = subprocess.run([PY, str(script), kind, side, str(out)], capture_output=True, text=True, cwd=str(root))
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        return ks, out

    with ThreadPoolExecutor(2) as ex:   # the CI box has 2 cores
        return dict(ex.map(gen, SIDES))


def _analyse(train, infer, pairing=None):
    an = A.analyze_pair([A.RoundInput(train, infer)], M.load_map("qwen3_hf_vllm"), pairing)
    return an, {h["hypothesis"]: h for h in an.hypotheses}


def _row(an, name):
    return next(r for r in an.boundary_rows if r["boundary"] == name and r["round"] == 0)


def test_sizes_stay_small(dumps):
    for ks, p in dumps.items():
        assert sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) <= MB3, ks


# ------------------------------------------------------------------------------ item 3: batched rollout
def test_batched_rollout_request_singled_out_by_positions(dumps):
    # the request's ids occur twice in the batch [prompt+3 | other | prompt]; only rows 17..24 are a whole request
    an, hyp = _analyse(dumps["ref", "train"], dumps["batched", "infer"])
    assert an.verdict == "exact" and an.rounds[0]["counts"] == {"EXACT": 35}, an.verdict_reason
    (rec,) = an.canonical
    assert rec["side"] == "infer" and rec["rows"] == [17, 25]
    assert "inference rows 17–24 hold this request (by token ids and positions" in rec["text"]
    assert hyp["inputs not aligned / padding not removed"]["status"] == "excluded"
    ref = A.Pair(dumps["ref", "train"], dumps["ref", "infer"], M.load_map("qwen3_hf_vllm"))
    canon = A.Pair(dumps["ref", "train"], dumps["batched", "infer"], M.load_map("qwen3_hf_vllm")).dumps["infer"]
    n = 0
    for sl in ref.dumps["infer"].slots:   # every module tensor bitwise the single-request run's
        if sl.entry.startswith("Module.") and sl.data_name:
            c = canon.slot(sl.entry, sl.io, sl.index)
            assert torch.equal(canon.load(c), ref.dumps["infer"].load(sl)), (sl.entry, sl.io, sl.index)
            n += 1
    assert n >= 60


def test_batched_rollout_request_singled_out_by_cu_seqlens(dumps):
    an, _hyp = _analyse(dumps["ref", "train"], dumps["batched", "infer"], {"cu_seqlens": [0, 11, 17, 25]})
    assert an.verdict == "exact", an.verdict_reason
    (rec,) = an.canonical
    assert rec["rows"] == [17, 25] and "cu_seqlens [0, 11, 17, 25]" in rec["text"]


# ------------------------------------------------------------------------------ item 4: quantised weights
def test_int8_linear_outputs_are_quantisation_error_not_rounding(dumps):
    an, hyp = _analyse(dumps["ref", "train"], dumps["int8", "infer"])
    assert an.verdict == "nonzero" and an.consistency == "quantisation", an.verdict_reason
    assert "within the int8 quantisation error" in an.verdict_reason
    assert [p["boundary"] for p in an.points] == ["L0.q_proj.out", "L0.k_proj.out", "L0.v_proj.out"]
    assert {p["class"] for p in an.points} == {"quantisation-level"}
    q = _row(an, "L0.q_proj.out")
    assert q["quant_error"]["within"] and q["quant_error"]["scheme"] == "W8A16" and 0 < q["quant_error"]["ratio"] <= 1
    assert q["class_evidence"][0].startswith("within int8 quantisation error (W8A16, per channel)")
    # every quantised linear of both layers (qkv, o, gate_up, down) is within its bound; norms are not quantised
    lin = [r for r in an.boundary_rows if r.get("quant_error")]
    assert len(lin) == 14 and all(r["quant_error"]["within"] for r in lin)
    assert _row(an, "L0.q_norm.out").get("quant_error") is None
    assert hyp["weights not in sync"]["status"] == "excluded"
    assert "within int8 quantisation error" in " ".join(hyp["fused kernel / accumulation order"]["evidence"])
    assert an.moe == {}


def test_stale_scale_beyond_the_quantisation_error_is_a_finding(dumps):
    # the weights match their dumped scale (weight test passes); the kernel used 1.1 × the scale
    an, hyp = _analyse(dumps["ref", "train"], dumps["int8bad", "infer"])
    assert hyp["weights not in sync"]["status"] == "excluded"
    assert an.consistency == "logic_level", an.verdict_reason
    q = _row(an, "L0.q_proj.out")
    assert q["class"] == "logic-level" and q["quant_error"]["within"] is False and q["quant_error"]["ratio"] > 1
    assert q["class_evidence"][0].startswith("beyond int8 quantisation error (W8A16, per channel)")
    assert "L0.q_proj.out (round 0)" in an.verdict_reason
    # o_proj is fed the stale q/k/v: its inputs differ, so its bound cannot cover the difference (not a point)
    assert "its inputs differ" in " ".join(_row(an, "L0.o_proj.out")["class_evidence"])


def test_int4_packed_weights_are_unpacked_and_named(dumps, tmp_path):
    an, hyp = _analyse(dumps["ref", "train"], dumps["int4", "infer"])
    (rec,) = an.canonical
    assert rec["kind"] == "quant" and rec["bits"] == [4] and rec["packing"] == ["int4x2", "int4x8"]
    assert "int4 packed two a byte (low nibble first)" in rec["text"] and "eight an int32" in rec["text"]
    assert "per group of 16" in rec["text"] and "W4A16" in rec["text"]
    ws = [w for w in an.weight_rows if w["boundary"] != "lm_head.weight"]
    assert len(ws) == 15 and sum(1 for w in ws if (w.get("quantisation") or {}).get("within")) == 14
    assert hyp["weights not in sync"]["status"] == "excluded"
    assert an.consistency == "quantisation" and {p["class"] for p in an.points} == {"quantisation-level"}
    # the unpacked weights are the ones the forward used: the column-parallel outputs recompute bitwise
    side = A.Pair(dumps["ref", "train"], dumps["int4", "infer"], M.load_map("qwen3_hf_vllm")).dumps["infer"]
    for mod in ("self_attn.qkv_proj.QKVParallelLinear", "mlp.gate_up_proj.MergedColumnParallelLinear"):
        e = f"Module.model.layers.1.{mod}.forward.0"
        w = side.load(side.slot(e, "parameter", "weight"))
        x, y = side.load(side.slot(e, "input", "0")), side.load(side.slot(e, "output", "0"))
        assert w.dtype == torch.bfloat16 and torch.equal(F.linear(x, w), y), e
    row = side.slot("Module.model.layers.0.mlp.down_proj.RowParallelLinear.forward.0", "parameter", "weight")
    assert row is not None and list(row.declared_shape) == [32, 64]   # weight_packed [32, 8] int32 → [32, 64]
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(dumps["ref", "train"]), "--infer",
                                  str(dumps["int4", "infer"]), "--out", str(out), "--no-charts"])
    assert r.exit_code == 0, r.output
    md = (out / "alignment_report.md").read_text()
    assert "int4 packed two a byte" in md and "quantisation-level" in md


# ------------------------------------------------------------------------------ item 6: MoE routing
def _expected_flips(train_dir: Path, infer_dir: Path):
    a = json.loads((train_dir / "routing.json").read_text())
    b = json.loads((infer_dir / "routing.json").read_text())
    return [(int(layer), r, a[layer][r], b[layer][r]) for layer in sorted(a) for r in range(len(a[layer]))
            if set(a[layer][r]) != set(b[layer][r])]


def test_moe_healthy_pair_has_no_router_flip(dumps):
    an, hyp = _analyse(dumps["moe", "train"], dumps["moe", "infer"])
    assert _expected_flips(dumps["moe", "train"], dumps["moe", "infer"]) == []
    m = an.moe
    assert m["status"] == "compared" and m["rows_total"] == 16 and m["flipped_rows"] == 0
    assert [x["sources"] for x in m["layers"]] == [{"train": "dumped top-k indices", "infer": "top-2 of the router logits"}] * 2
    assert all(x["experts_out"]["status"] == "EXACT" for x in m["layers"])
    assert hyp["MoE router decisions differ (top-k expert set per token row)"]["status"] == "excluded"


def test_moe_router_flips_per_token_row_with_the_experts(dumps, tmp_path):
    exp = _expected_flips(dumps["moe", "train"], dumps["moeflip", "infer"])
    assert 1 <= len(exp) <= 8
    an, hyp = _analyse(dumps["moe", "train"], dumps["moeflip", "infer"])
    m = an.moe
    got = [(x["layer"], f["row"], f["train"], f["infer"]) for x in m["layers"] for f in x["flips"]]
    assert got == exp and m["flipped_rows"] == len(exp) and m["rows_total"] == 16
    text = f"router flips: {len(exp)} of 16 token rows"
    assert m["text"].startswith(text)
    l0, r0, a0, b0 = exp[0]
    one = f"layer {l0}: row {r0} {{{','.join(map(str, a0))}}}→{{{','.join(map(str, b0))}}}"
    assert one in m["text"]
    h = hyp["MoE router decisions differ (top-k expert set per token row)"]
    assert h["status"] == "confirmed" and one in h["evidence"][0]
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(dumps["moe", "train"]), "--infer",
                                  str(dumps["moeflip", "infer"]), "--out", str(out), "--no-charts"])
    assert r.exit_code == 0, r.output
    assert one in (out / "alignment_report.md").read_text() and one in (out / "alignment_report.html").read_text()
    assert json.loads((out / "report_source.json").read_text())["moe"]["flipped_rows"] == len(exp)
    with open(out / "router_flips.csv", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    assert [(int(x["layer"]), int(x["row"]), x["train_experts"], x["infer_experts"]) for x in rows] == \
        [(a, b, " ".join(map(str, c)), " ".join(map(str, d))) for a, b, c, d in exp]
    assert all(set(x["lost"].split()) == set(x["train_experts"].split()) - set(x["infer_experts"].split()) for x in rows)
