"""The verdict on a REAL verl RL step (verl 0.9.1 GRPO on this CPU: FSDP2 actor vs the vLLM CPU engine), kept.

The dumps are a recorded copy of what ``tilake scan --profiler torch --dump`` collected (``e2e/verl_cpu_dumps.sh``;
``tests/data/verl_step/README.md`` says how): the actor's log-prob forward through verl's precision_debugger, the
rollout's prefill of the same request through tilake's hook, and one stub round the scan ran by itself (msprobe
``load`` of the training side's q after RoPE into the engine's layer-0 attention). The verdict and its evidence are
written down in ``docs/dumps.md`` ("A real verl RL step"); these asserts are that text.
"""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.pipeline.scan_dump import logged_mismatch, logged_vs_dump, logprob_json
from tilake.vocab import LoggedVsDump

DATA = Path(__file__).resolve().parents[1] / "data" / "verl_step" / "verl_step.tar.gz"


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    """(report_source.json, logged mismatch, logged_vs_dump) of the recorded step, analysed once (round 0 + 1)."""
    root = tmp_path_factory.mktemp("verl_step")
    with tarfile.open(DATA) as tf:
        tf.extractall(root, filter="data") if hasattr(tarfile, "data_filter") else tf.extractall(root)
    d = root / "verl_step"
    logged = logged_mismatch(d / "round0" / "verl_step1_metrics.log", 1)
    lp = logprob_json(logged, root / "logprob.json")
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(d / "round0" / "train"), "--infer",
                                  str(d / "round0" / "infer"), "--round", str(d / "round0" / "train"),
                                  str(d / "round1" / "infer"), "--out", str(root / "out"), "--no-charts",
                                  "--logprob-json", str(lp)])
    assert r.exit_code == 0, r.output
    src = json.loads((root / "out" / "report_source.json").read_text())
    return src, logged, logged_vs_dump(logged, src["results"]["verdict"], src["first_divergence"].get("boundary"))


def _rows(src, k):
    return {b["boundary"]: b for b in src["boundaries"] if b["round"] == k}


def test_the_same_request_on_both_sides(step):
    src, _, _ = step
    assert src["map"]["name"] == "hf_vllm"
    assert src["token_ids"]["status"] == "equal" and src["token_ids"]["positions"] == 40
    # the actor's forward holds the prompt and the sampled token (41 rows); the rollout's prefill the prompt (40)
    (sel,) = src["canonical"]
    assert sel["side"] == "train" and sel["rows"] == [0, 40]


def test_first_divergence_is_the_rotary_embedding_at_rounding_level(step):
    src, _, _ = step
    r0 = _rows(src, 0)
    order = [b["boundary"] for b in src["boundaries"] if b["round"] == 0]
    first = order.index("L0.q_after_rope")
    # everything before RoPE is bitwise equal: embedding, the input norm, the q/k/v projections
    assert [r0[b]["status"] for b in order[:first]] == ["EXACT"] * 5
    assert src["first_divergence"]["boundary"] == "L0.q_after_rope"
    for b in ("L0.q_after_rope", "L0.k_after_rope"):
        assert r0[b]["status"] == "NOT_EXACT" and r0[b]["class"] == "rounding-level"
        assert r0[b]["role"] == "independent_point" and r0[b]["tensor_ulp"] <= 1.0
    # no logic-level difference anywhere; every compared boundary within 2 ULP at tensor scale
    compared = [b for b in r0.values() if b["status"] == "NOT_EXACT"]
    assert len(compared) == 28 and all(b["class"] == "rounding-level" for b in compared)
    assert max(b["tensor_ulp"] for b in compared) == 2.0
    assert src["logic_level_points"] == []


def test_weights_are_in_sync_and_the_logits_are_read_from_their_linear_under_verl(step):
    """msprobe 26.2 skips the model's first and last module when verl is imported (module_processor.py
    ``is_verl and idx in (1, len - 1)``): HF's lm_head and vLLM's LogitsProcessor are not dumped as modules. Their
    F.linear is, at the root: the map reads the logits and the lm_head weight from it (the last root-level
    ``Functional.linear`` of each side), so every weight boundary is checked and the logits are compared."""
    src, _, _ = step
    w = {x["boundary"]: x["status"] for x in src["weights"]}
    assert sum(s == "EXACT" for s in w.values()) == 27 and w["lm_head.weight"] == "EXACT"
    assert src["summary"]["weights_checked"] == src["summary"]["weights_total"] == 27
    lg = next(b for b in src["boundaries"] if b["round"] == 0 and b["boundary"] == "logits")
    assert lg["status"] == "NOT_EXACT" and lg["class"] == "rounding-level" and lg["tensor_ulp"] <= 0.5
    assert "Functional.linear" in lg["train_source"] and "under the root" in lg["infer_source"]
    ch = next(p for p in src["pitfalls"] if p["id"] == "logits_character")
    assert "argmax agreement 100.0%" in ch["evidence"][2]


def test_the_stub_round_took_effect_and_k_after_rope_remains(step):
    src, _, _ = step
    r1 = src["rounds"][1]
    ver = r1["stub_verification"]
    assert ver["effective"] is True
    assert ver["checks"] == [{"module": "Module.model.layers.0.self_attn.attn.Attention.forward.0", "input": 0,
                              "equal": True, "reason": None}]
    rows = _rows(src, 1)
    assert rows["L0.q_after_rope"]["status"] == "ISOLATED"
    assert rows["L0.k_after_rope"]["role"] == "independent_point" and rows["L0.k_after_rope"]["class"] == "rounding-level"
    assert r1["outcome"] == "stub_needed"
    assert src["stub_instruction"]["isolate_boundary"]["name"] == "L0.k_after_rope"


def test_verls_logged_mismatch_sits_beside_the_verdict(step):
    src, logged, lvd = step
    assert logged["training/rollout_probs_diff_max"] == pytest.approx(7.00982e-4, rel=1e-5)
    assert logged["rollout_corr/k3_kl"] == pytest.approx(0.0433649, rel=1e-5)
    assert src["results"]["verdict"] == "nonzero"
    lp = src["results"]["prefill_logprob_diff"]
    assert lp["status"] == "nonzero" and lp["max"] == pytest.approx(7.00982e-4, rel=1e-5)
    assert lvd["status"] == LoggedVsDump.CONSISTENT and "L0.q_after_rope" in lvd["text"]


def test_the_dumped_logits_do_not_hold_the_gap_verl_logs(step, tmp_path):
    """The logits are in the dumps at API level (both sides' last ``Functional.linear``: HF's lm_head over the 41
    rows, vLLM's over the sampled position): the sampled token's probability differs by < 1e-6 between them, about
    a thousandth of the |p_actor - p_rollout| verl logs for the same step (7.0e-4, which with its k3_kl 0.0434 and
    log_ppl_diff 0.310 means a 0.31-nat log-prob gap). The logged gap is not carried by the dumped forward."""
    import math

    import torch

    _, logged, _ = step
    root = tmp_path / "x"
    with tarfile.open(DATA) as tf:
        tf.extractall(root, filter="data") if hasattr(tarfile, "data_filter") else tf.extractall(root)
    t = root / "verl_step" / "round0" / "train" / "step0" / "rank0"
    i = root / "verl_step" / "round0" / "infer" / "step0" / "rank0"
    dt, di = (json.loads((p / "dump.json").read_text())["data"] for p in (t, i))

    def last_linear(d):
        return max((k for k in d if k.startswith("Functional.linear.")), key=lambda k: int(k.split(".")[2]))

    def pt(folder, name):
        return torch.load(folder / "dump_tensor_data" / name, weights_only=True)

    kt, ki = last_linear(dt), last_linear(di)
    assert torch.equal(pt(t, f"{kt}.input.1.pt"), pt(i, f"{ki}.input.1.pt"))    # the same lm_head weight, bf16
    logits_t = pt(t, f"{kt}.output.0.pt")[0].float()       # [41, vocab]
    logits_i = pt(i, f"{ki}.output.0.pt")[0].float()       # [vocab]: the sampled (last prompt) position
    emb = next(k for k in dt if k.startswith("Module.model.embed_tokens"))
    tok = int(pt(t, dt[emb]["input_args"][0]["data_name"]).flatten()[40])   # the response token the rollout sampled
    lp_t = torch.log_softmax(logits_t[39], -1)[tok].item()
    lp_i = torch.log_softmax(logits_i, -1)[tok].item()
    dumped = abs(math.exp(lp_t) - math.exp(lp_i))
    assert abs(lp_t - lp_i) < 1e-3 and dumped < 1e-6
    assert logged["training/rollout_probs_diff_max"] > 500 * dumped
    # verl's three figures agree with one another: p_actor - p_rollout = 7.0e-4 at p_rollout = exp(lp_i)
    r = math.log(math.exp(lp_i) + logged["training/rollout_probs_diff_max"]) - lp_i
    assert r == pytest.approx(logged["rollout_corr/log_ppl_diff"], rel=1e-2)
    assert math.exp(-r) - 1 + r == pytest.approx(logged["rollout_corr/k3_kl"], rel=1e-2)
