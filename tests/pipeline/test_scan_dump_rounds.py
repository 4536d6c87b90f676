"""The round driver of ``tilake scan --dump`` (:mod:`tilake.pipeline.scan_dump`) with stand-in collectors: no verl,
no vLLM. The collectors dump the small HF-style / vLLM-style models of ``tests/fixtures/msprobe_writer.py`` (msprobe's
on-disk format; its writer implements msprobe's ``load`` override) and read the msprobe configs the driver writes
into each round's folder exactly as the real collection does (``msprobe_<side>.json``, ``load`` on the stub side).
"""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import msprobe_writer as G
import pytest

from tilake.errors import TilakeError
from tilake.pipeline.scan_dump import Collected, logged_mismatch, logged_vs_dump, run_dump_rounds
from tilake.vocab import LoggedVsDump, RoundsStop

# one verl console line of the dumped step (the format of shared/verl-cpu/logs/run_grpo_profiled.log.gz)
VERL_LINE = ("\x1b[36m(TaskRunnerV1 pid=1)\x1b[0m step:1 - global_seqlen/mean:41.0 - training/rollout_probs_diff_valid:1.0"
             " - training/rollout_probs_diff_max:0.000700982054695487 - training/rollout_probs_diff_mean:"
             "0.000700982054695487 - training/rollout_probs_diff_std:nan - rollout_corr/k3_kl:0.043364882469177246\n")


class StandIn:
    """A collector: the train side is the HF-style model, the infer side the vLLM-style one with ``fault``; each
    reads ``msprobe_<side>.json`` of the round and applies its ``load`` (``honour_load=False``: ignores it, as a
    collection whose override did not take effect). ``empty``: that side's dump.json holds no entry."""

    def __init__(self, cfg, w, fault=None, honour_load=True, empty=None, log_text=VERL_LINE):
        self.cfg, self.w, self.fault, self.honour_load, self.empty, self.log_text = cfg, w, fault, honour_load, empty, log_text
        self.calls = []

    def __call__(self, k: int, rd: Path) -> Collected:
        loads = {}
        for side in ("train", "infer"):
            cfg = json.loads((rd / f"msprobe_{side}.json").read_text())
            loads[side] = cfg.get("load") if self.honour_load else None
        self.calls.append((k, {s: bool(v) for s, v in loads.items()}))
        tr = G.dump_train(self.cfg, rd / "train", self.w)
        inf = G.dump_infer(self.cfg, rd / "infer", self.fault, load=loads["infer"], w=self.w)
        if self.empty:
            p = (tr if self.empty == "train" else inf) / "dump.json"
            meta = json.loads(p.read_text())
            meta["data"] = {}
            p.write_text(json.dumps(meta))
        log = rd / "run.log"
        log.write_text(self.log_text)
        return Collected(rd / "train", rd / "infer", log, 1.0, f"stand-in round {k}")


@pytest.fixture(scope="module")
def model():
    cfg = G.Cfg()
    return cfg, G.weights(cfg)


def test_rounds_run_themselves_until_no_stub_is_needed(model, tmp_path):
    cfg, w = model
    col = StandIn(cfg, w, "weight_row")
    res = run_dump_rounds(col, tmp_path / "work", tmp_path / "report", max_rounds=3, map_name="qwen3_hf_vllm")
    # round 0 plain, round 1 with msprobe load on the infer side only
    assert col.calls == [(0, {"train": False, "infer": False}), (1, {"train": False, "infer": True})]
    r0, r1 = res.rounds
    assert r0.first_divergence == "L1.gate_proj.out" and r0.outcome == "stub_needed" and r0.verified is None
    assert r1.target_side == "infer" and r1.isolates == "L1.gate_proj.out"
    assert r1.verified is True and r1.verification["checks"] and all(c["equal"] for c in r1.verification["checks"])
    assert r1.outcome == "downstream_all_exact"
    assert res.stop == RoundsStop.NO_STUB_NEEDED and "no further stub needed" in res.stop_reason
    # round 1's pair: the stubbed infer side of this round against round 0's train side (the stub's source)
    assert r1.train == r0.train and r1.infer.endswith("round1/infer")
    assert res.summary.points[0][1:] == ("L1.gate_proj.out", "logic-level") and len(res.summary.points) == 1
    rec = json.loads((tmp_path / "work" / "tilake_dump_rounds.json").read_text())
    assert rec["stop"] == "no_stub_needed" and [r["round"] for r in rec["rounds"]] == [0, 1]
    assert (tmp_path / "report" / "alignment_report.md").is_file()
    # the logged mismatch of the dumped step sits beside the verdict: both nonzero
    assert res.logged["training/rollout_probs_diff_max"] == pytest.approx(7.00982e-4, rel=1e-5)
    assert res.logged.get("training/rollout_probs_diff_std") is None   # verl logs nan for one token: left out
    assert res.logged_vs_dump["status"] == LoggedVsDump.CONSISTENT
    src = json.loads((tmp_path / "report" / "report_source.json").read_text())
    assert src["results"]["prefill_logprob_diff"]["status"] == "nonzero"
    assert "rollout_probs_diff" in src["results"]["prefill_logprob_diff"]["source"]


def test_max_rounds_bounds_the_collections(model, tmp_path):
    cfg, w = model
    col = StandIn(cfg, w, "weight_row")
    res = run_dump_rounds(col, tmp_path / "work", tmp_path / "report", max_rounds=0, map_name="qwen3_hf_vllm")
    assert len(col.calls) == 1 and res.stop == RoundsStop.MAX_ROUNDS
    assert "--max-rounds 0 reached: round 1 would isolate L1.gate_proj.out" in res.stop_reason


def test_a_stub_that_did_not_take_effect_stops_the_rounds(model, tmp_path):
    cfg, w = model
    col = StandIn(cfg, w, "weight_row", honour_load=False)
    res = run_dump_rounds(col, tmp_path / "work", tmp_path / "report", max_rounds=3, map_name="qwen3_hf_vllm")
    assert len(res.rounds) == 2 and res.rounds[1].verified is False
    assert res.rounds[1].outcome == "stub_not_effective"
    assert res.stop == RoundsStop.STUB_NOT_EFFECTIVE and "did not take effect" in res.stop_reason


@pytest.mark.parametrize("side", ["train", "infer"])
def test_an_empty_dump_is_an_error_not_a_skip(model, tmp_path, side):
    cfg, w = model
    with pytest.raises(TilakeError, match=f"the {side} side's dump is empty"):
        run_dump_rounds(StandIn(cfg, w, empty=side), tmp_path / "work", tmp_path / "report", map_name="qwen3_hf_vllm")


def test_nonzero_logged_mismatch_with_an_all_exact_dump_is_a_contradiction(model, tmp_path):
    cfg, w = model
    res = run_dump_rounds(StandIn(cfg, w, None), tmp_path / "work", tmp_path / "report", map_name="qwen3_hf_vllm")
    assert res.summary.verdict == "exact" and len(res.rounds) == 1 and res.stop == RoundsStop.NO_STUB_NEEDED
    assert res.logged_vs_dump["status"] == LoggedVsDump.CONTRADICTION
    assert "every compared boundary of the dumps is bitwise EXACT" in res.logged_vs_dump["text"]
    # and the analysis' own report says so (the measured diff is set beside the verdict there too)
    md = (tmp_path / "report" / "alignment_report.md").read_text()
    assert "contradiction: the measured log-prob diff is nonzero" in md


def test_the_final_analysis_lands_in_the_lake_with_every_round(model, tmp_path):
    cfg, w = model
    lake = tmp_path / "lake"
    res = run_dump_rounds(StandIn(cfg, w, "weight_row"), tmp_path / "work", tmp_path / "report", max_rounds=3,
                          map_name="qwen3_hf_vllm", lake_path=lake, run_id="scan-dump-t", card={"model": "m"})
    assert res.summary.lake_rows["stub_rounds"] == 1 and res.summary.lake_rows["dump_runs"] == 1
    def raw(table: str) -> str:   # the run's Parquet partitions (no warehouse without --build)
        return f"read_parquet('{lake}/raw/{table}/**/*.parquet', hive_partitioning=true, union_by_name=true)"

    sr = duckdb.sql(f"select round, verified, outcome from {raw('stub_rounds')} where run_id = 'scan-dump-t'").fetchall()
    card = json.loads(duckdb.sql(f"select task_card from {raw('dump_runs')} where run_id = 'scan-dump-t'").fetchone()[0])
    sides = duckdb.sql(f"select distinct round, side from {raw('tensor_stats')} where run_id = 'scan-dump-t' "
                       "order by round, side").fetchall()
    assert sr == [(1, True, "downstream_all_exact")]
    how = card["collection"]
    assert how["stop"] == "no_stub_needed" and how["rounds_collected"] == 2 and how["max_rounds"] == 3
    assert [(r["round"], r["verified"], r["outcome"]) for r in how["rounds"]] == [
        (0, None, "stub_needed"), (1, True, "downstream_all_exact")]
    assert how["logged_mismatch"]["rollout_corr/k3_kl"] == pytest.approx(0.0433649, rel=1e-5)
    assert card["dumps"]["train"]["step"] == 1 and card["dumps"]["train"]["msprobe_step"] == 0
    assert sides == [(0, "infer"), (0, "train"), (1, "infer"), (1, "train")]


def test_logged_mismatch_reads_the_dumped_step_only(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("step:2 - training/rollout_probs_diff_max:0.5\n" + VERL_LINE)
    got = logged_mismatch(log, 1)
    assert got["training/rollout_probs_diff_max"] == pytest.approx(7.00982e-4, rel=1e-5)
    assert got["source"].startswith(f"{log}:2 ")
    assert logged_mismatch(log, 3) == {} and logged_mismatch(None, 1) == {}
    assert logged_vs_dump({}, "exact", None)["status"] == LoggedVsDump.EVIDENCE_MISSING
    zero = {"training/rollout_probs_diff_max": 0.0, "rollout_corr/k3_kl": 0.0}
    assert logged_vs_dump(zero, "nonzero", "L0.x")["status"] == LoggedVsDump.CONTRADICTION
    assert logged_vs_dump(zero, "exact", None)["status"] == LoggedVsDump.CONSISTENT
