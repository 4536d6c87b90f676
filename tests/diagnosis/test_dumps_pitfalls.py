"""The named pitfalls of real runs (tilake/diagnosis/pitfalls.py), each made on a copy of the real msprobe
pair ``../shared/fixtures/dumps/pairA`` (msprobe 26.2, HF Qwen3 vs a vLLM-style model): the copy keeps that
dump's schema, names and files and changes exactly the tensor the pitfall is about."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from tilake.cli import main

LOGITS = "Module.logits_processor.LogitsProcessor.forward.0"


@pytest.fixture()
def pair_a(shared_dir, tmp_path) -> Path:
    src = shared_dir / "fixtures" / "dumps" / "pairA"
    dst = tmp_path / "pairA"
    shutil.copytree(src, dst)
    return dst


def _data(root: Path, side: str) -> Path:
    return root / side / "step0" / "rank0" / "dump_tensor_data"


def _analyse(root: Path, out: Path) -> dict:
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(root / "train"), "--infer", str(root / "infer"),
                                  "--out", str(out), "--no-charts"])
    assert r.exit_code == 0, r.output
    return json.loads((out / "report_source.json").read_text())


def _pitfall(src: dict, pid: str) -> dict:
    return next(p for p in src["pitfalls"] if p["id"] == pid)


def test_logits_rolled_by_one_position_are_named_and_equal_after_the_roll(pair_a, tmp_path):
    f = _data(pair_a, "infer") / f"{LOGITS}.output.0.pt"
    t = torch.load(f, weights_only=True)
    torch.save(torch.roll(t, 1, dims=0).clone(), f)   # vLLM prompt logprobs: logits[p] predicts token p+1
    src = _analyse(pair_a, tmp_path / "o")
    p = _pitfall(src, "logits_shift")
    assert p["status"] == "found" and "peak at +1" in p["evidence"][0]
    assert "after roll(-1) on the infer side" in p["evidence"][1] and "argmax agreement" in p["evidence"][1]


def test_logits_not_shifted_read_clear_with_the_correlation_peak_at_zero(pair_a, tmp_path):
    src = _analyse(pair_a, tmp_path / "o")
    p = _pitfall(src, "logits_shift")
    assert p["status"] == "clear" and "peak at 0" in p["evidence"][0]
    assert _pitfall(src, "logits_character")["status"] == "found"


def test_lm_head_inside_a_fused_logits_op_is_found_by_shape_and_checked_by_value(pair_a, tmp_path):
    """The rollout's logits op dumps no hidden state here (no via-op check); its lm_head GEMM ran as a plain
    ``Functional.linear`` whose input.1 is the weight (the real pairA dump has it, as vllm-ascend's fused
    AscendLogitsProcessor does): found by its shape [vocab, hidden] and compared by value."""
    dj = pair_a / "infer" / "step0" / "rank0" / "dump.json"
    d = json.loads(dj.read_text())
    d["data"][LOGITS]["input_args"] = [None]
    dj.write_text(json.dumps(d))
    src = _analyse(pair_a, tmp_path / "o")
    p = _pitfall(src, "lm_head_by_shape")
    assert p["status"] == "found" and "Functional.linear." in p["evidence"][0] and "input.1" in p["evidence"][0]
    lm = next(x for x in src["weights"] if x["boundary"] == "lm_head.weight")
    assert lm["status"] == "EXACT" and lm["via_op"]["status"] == "not_checked"


def test_a_norm_fused_into_the_next_gemm_on_one_side_is_named(pair_a, tmp_path):
    """The rollout's first input norm 'output' is its pre-norm input: its qkv GEMM took the norm inside."""
    pre = "Module.model.layers.0.input_layernorm.RMSNorm.forward.0"
    d = _data(pair_a, "infer")
    shutil.copy(d / f"{pre}.input.0.pt", d / f"{pre}.output.0.pt")
    src = _analyse(pair_a, tmp_path / "o")
    p = _pitfall(src, "norm_fused_into_gemm")
    assert p["status"] == "found" and "L0.input_layernorm.out" in p["evidence"][0]
