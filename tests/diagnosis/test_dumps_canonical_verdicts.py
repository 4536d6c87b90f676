"""Verdicts from values only (issue 20), on hand-made dumps in msprobe's format (tests/fixtures/msprobe_mini.py):
a weight stored as int8, a weight of shard shape and a weight in another dtype never confirm "weights not in sync"
or "model configs not equivalent"; a weight that differs by value does."""
from __future__ import annotations

import torch
from msprobe_mini import write_dump, write_map

from tilake.diagnosis import analyze as A
from tilake.diagnosis import maps as M


def _run(tmp, train_w, infer_w):
    g = torch.Generator().manual_seed(5)
    ids = torch.arange(8)
    x = torch.randn(8, 16, generator=g).to(torch.bfloat16)

    def ents(ws):
        return [("Module.m.embed.Emb.forward.0", None, {"input": [ids], "output": [x]})] + \
               [(f"Module.m.w{i}.Lin.forward.0", None, {"output": [x], "parameters": {"weight": w}})
                for i, w in enumerate(ws)]

    tr = write_dump(tmp / "train", ents(train_w))
    inf = write_dump(tmp / "infer", ents(infer_w))
    bs = [{"name": "embed", "op": "embedding", "inputs": [], "train": {"module": "m.embed.Emb"},
           "infer": {"module": "m.embed.Emb"}}]
    ws = [{"name": f"w{i}", "train": {"module": f"m.w{i}.Lin", "io": "parameter", "index": "weight"},
           "infer": {"module": f"m.w{i}.Lin", "io": "parameter", "index": "weight"}} for i in range(len(train_w))]
    bmap = M.load_map(str(write_map(tmp / "m.yaml", bs, weights=ws, layer_input={"first": "embed"})))
    an = A.analyze_pair([A.RoundInput(tr, inf)], bmap)
    return an, {h["hypothesis"]: h for h in an.hypotheses}


def test_int8_storage_shard_shape_and_fp16_copy_confirm_nothing(tmp_path):
    g = torch.Generator().manual_seed(6)
    w = [torch.randn(4, 16, generator=g).to(torch.bfloat16) for _ in range(3)]
    q = (w[0].float() / (w[0].float().abs().amax(1, keepdim=True) / 127)).round().to(torch.int8)
    an, hyp = _run(tmp_path, w, [q, w[1][:2].contiguous(), w[2].to(torch.float16)])
    # nothing confirmed, and nothing excluded on partial evidence: one weight of three checked by value
    assert hyp["weights not in sync"]["status"] == "evidence_missing", hyp["weights not in sync"]
    ev = " ".join(hyp["weights not in sync"]["evidence"])
    assert "evidence_missing: 1 of 3 weights checked" in ev
    assert "w0: not comparable: torch.bfloat16 vs torch.int8 storage — dequantise" in ev
    assert "w1: not comparable: shape" in ev and "factor 2" in ev
    assert "equal after the cast loading does (train bfloat16 → float16)" in ev
    assert hyp["model configs not equivalent"]["status"] == "evidence_missing"
    assert "not a config value" in " ".join(hyp["model configs not equivalent"]["evidence"])
    assert hyp["inputs not aligned / padding not removed"]["status"] == "excluded"


def test_a_weight_that_differs_by_value_is_confirmed(tmp_path):
    g = torch.Generator().manual_seed(7)
    w = [torch.randn(4, 16, generator=g).to(torch.bfloat16)]
    bad = w[0].clone()
    bad[1, 3] = -bad[1, 3]
    _an, hyp = _run(tmp_path, w, [bad])
    assert hyp["weights not in sync"]["status"] == "confirmed"
    assert "w0: NOT_EXACT, 1 elements differ" in hyp["weights not in sync"]["evidence"][0]


def _quant_pair(tmp, corrupt: bool):
    """Train: bf16 weight; infer: the same weight as int8 + per-channel weight_scale (vLLM W8A16 layout)."""
    g = torch.Generator().manual_seed(8)
    ids = torch.arange(8)
    x = torch.randn(8, 16, generator=g).to(torch.bfloat16)
    w = torch.randn(4, 16, generator=g).to(torch.bfloat16)
    s = (w.float().abs().amax(1, keepdim=True) / 127).to(torch.bfloat16)
    q = (w.float() / s.float()).round().clamp(-127, 127).to(torch.int8)
    if corrupt:
        q[2, 5] = -q[2, 5] if q[2, 5] != 0 else 100
    emb = ("Module.m.embed.Emb.forward.0", None, {"input": [ids], "output": [x]})
    tr = write_dump(tmp / "train", [emb, ("Module.m.w0.Lin.forward.0", None, {"output": [x], "parameters": {"weight": w}})])
    inf = write_dump(tmp / "infer", [emb, ("Module.m.w0.Lin.forward.0", None,
                                           {"output": [x], "parameters": {"weight": q, "weight_scale": s}})])
    bs = [{"name": "embed", "op": "embedding", "inputs": [], "train": {"module": "m.embed.Emb"},
           "infer": {"module": "m.embed.Emb"}}]
    ws = [{"name": "w0", "train": {"module": "m.w0.Lin", "io": "parameter", "index": "weight"},
           "infer": {"module": "m.w0.Lin", "io": "parameter", "index": "weight"}}]
    bmap = M.load_map(str(write_map(tmp / "m.yaml", bs, weights=ws, layer_input={"first": "embed"})))
    an = A.analyze_pair([A.RoundInput(tr, inf)], bmap)
    return an, {h["hypothesis"]: h for h in an.hypotheses}


def test_int8_weight_with_scale_is_dequantised_and_judged_against_the_quantisation_step(tmp_path):
    an, hyp = _quant_pair(tmp_path / "ok", corrupt=False)
    assert [c["kind"] for c in an.canonical] == ["quant"] and "per channel" in an.canonical[0]["text"]
    (w,) = an.weight_rows
    assert w["infer_dtype"] == "torch.bfloat16" and w["quantisation"]["within"] is True
    assert hyp["weights not in sync"]["status"] == "excluded"
    assert "within the quantisation bound" in " ".join(hyp["weights not in sync"]["evidence"])
    _an, hyp = _quant_pair(tmp_path / "bad", corrupt=True)
    assert hyp["weights not in sync"]["status"] == "confirmed"
    assert "beyond the quantisation bound" in hyp["weights not in sync"]["evidence"][0]
