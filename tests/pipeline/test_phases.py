"""Phases, signatures, per-rank figures, settings and verl's mismatch metrics (issue 25, docs/phases.md).

Inputs:
* synthetic captures with the phase ranges of a real verl + vLLM run (``make_profiler_output(
  phase_marks="verl")``: ``actor_compute_log_prob`` / ``ref_compute_log_prob`` / ``actor_update`` as in the
  real verl 0.9.1 torch trace, ``execute_context_<n>(<tokens>)_generation_<n>(<tokens>)`` as in the real
  vLLM rollout trace), in the real torch_npu DB schema;
* the real verl CPU traces and console log in ``../shared/verl-cpu`` (skipped when absent);
* the real torch_npu 2.7.1 / CANN 8.3.RC1 ``profiler_info_0.json`` of ``../shared/fixtures/real_public``.
One lake, one dbt build for all runs.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from profiler_helpers import mart

from tilake.errors import TilakeError
from tilake.ingest.profiler.load import ingest_profile
from tilake.ingest.run_facts import parse_phases, read_rl_metrics, versions_from_profiler_info
from tilake.lake.store import Lake
from tilake.lake.warehouse import dbt_build
from tilake.pipeline.profile import collect_captures, facts_meta
from tilake.reports.op_diff import write_report
from tilake.synth import make_profiler_output
from tilake.synth.population import JobConfig, infer_population

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
VERL = SHARED / "verl-cpu"
TRAIN_TRACE = VERL / "traces" / "actor-rollout_train_step1_rank0-of-1_pid14185_20261201184328807.json.gz"
INFER_TRACE = VERL / "traces" / "1796150575179022847-rank-0.1796150643758034490.pt.trace.json.gz"
REAL_LOG = VERL / "logs" / "run_grpo_profiled.log.gz"
REAL_INFO = SHARED / "fixtures" / "real_public" / "msinsight_st_level2" / "rank_0_ascend_pt"
SMALL = JobConfig(layers=2)


def _nz_infer():
    """The rollout's MatMulV2 reads its weight in FRACTAL_NZ (vllm-ascend's NZ weight layout); else equal."""
    pop = infer_population(SMALL)
    n = 0
    for k in pop.kernels():
        if k.op_type == "MatMulV2":
            k.input_formats = "FORMAT_ND;FORMAT_FRACTAL_NZ"
            n += 1
    assert n > 0
    return pop


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("phases")
    lk = Lake(tmp / "lake")
    runs = {
        "marked": (dict(phase_marks="verl"), {}),
        "update-decode": (dict(phase_marks="verl"), {"phases": "train:update_actor,infer:decode"}),
        "all": (dict(phase_marks="verl"), {"phases": "all"}),
        "nz": (dict(phase_marks="verl", infer_pop=_nz_infer()), {}),
        "tp": (dict(phase_marks="verl", train_ranks=2),
               {"settings": {"train_tp": {"value": 1, "source": "test"}, "infer_tp": {"value": 2, "source": "test"},
                             "HCCL_DETERMINISTIC": {"value": "true", "source": "test"}}}),
        "nomarks": (dict(with_mstx=False), {}),
    }
    for rid, (synth, meta) in runs.items():
        po = tmp / rid / "profiler_output"
        make_profiler_output(po, job=SMALL, **synth)
        ingest_profile(lk, rid, collect_captures(po), {"model_id": "Qwen/Qwen3-0.6B", **meta}, progress=False)
    if TRAIN_TRACE.is_file() and INFER_TRACE.is_file() and REAL_LOG.is_file():
        caps = collect_captures(None, [TRAIN_TRACE], [INFER_TRACE])
        meta = facts_meta(log=REAL_LOG, settings=[("enforce_eager", "true")])
        ingest_profile(lk, "verl-cpu", caps, {"step": 1, **meta}, progress=False)
    res = dbt_build(lk, progress=False)
    assert res.success and not res.failures, res.failures
    return lk, tmp


def _grades(lk, rid):
    return {m: (g, r, d) for m, g, r, d in mart(lk.root, "select module, grade, rule_id, rule_detail from "
                                                         f"fct_op_comparison where run_id = '{rid}'")}


def _scope(lk, rid):
    return {s: (sc, n, tot) for s, sc, n, tot in mart(
        lk.root, f"select side, scope, compared_calls, all_calls from fct_phase_scope where run_id = '{rid}'")}


def test_default_compares_the_log_prob_forward_with_the_prefill_and_says_so(lake):
    lk, tmp = lake
    sc = _scope(lk, "marked")
    assert sc["train"][0] == "actor_log_prob" and sc["infer"][0] == "prefill"
    assert 0 < sc["train"][1] < sc["train"][2] and 0 < sc["infer"][1] < sc["infer"][2]
    g = _grades(lk, "marked")
    # the log-prob forward has no backward or optimizer kernels: those rows belong to update_actor
    assert "backward" not in g and "optimizer" not in g
    assert g["attention"][:2] == ("red", "different_fused_kernel")
    phases = dict(((s, p, src, ps), c) for s, p, src, ps, c in mart(
        lk.root, "select side, phase, phase_source, pass, sum(calls) from fct_run_phases where run_id = 'marked' "
                 "group by all"))
    assert phases[("train", "update_actor", "mark", "bwd")] > 0 and phases[("infer", "decode", "mark", "fwd")] > 0
    assert ("train", "ref_log_prob", "mark", "fwd") in phases
    md = write_report(lk.warehouse, "marked", tmp / "out-marked", "en")["report"].read_text(encoding="utf-8")
    assert f"training: actor_log_prob ({sc['train'][1]} / {sc['train'][2]} kernel calls)" in md
    assert f"inference: prefill ({sc['infer'][1]} / {sc['infer'][2]} kernel calls)" in md
    assert "`execute_context_1(512)_generation_0(0)`" in md and "`actor_compute_log_prob`" in md


def test_phases_option_chooses_other_phases_and_all_is_everything(lake):
    lk, _ = lake
    sc = _scope(lk, "update-decode")
    assert sc["train"][0] == "update_actor" and sc["infer"][0] == "decode"
    g = _grades(lk, "update-decode")
    assert g["backward"][2] is None and g["backward"][1] == "one_side_no_equiv" and "optimizer" in g
    al = _scope(lk, "all")
    assert al["train"][0] == "all kernels (--phases all)" and al["train"][1] == al["train"][2]


def test_no_marks_compares_everything_and_says_so(lake):
    lk, tmp = lake
    sc = _scope(lk, "nomarks")
    assert sc["train"][0].startswith("all kernels: no phase marks") and sc["train"][1] == sc["train"][2]
    src = {r[0] for r in mart(lk.root, "select distinct phase_source from fct_run_phases where run_id = 'nomarks' "
                                       "and side = 'train'")}
    assert src == {"op_type", "none"}        # backward/optimizer kernels are still known by their op type
    md = write_report(lk.warehouse, "nomarks", tmp / "out-nomarks", "en")["report"].read_text(encoding="utf-8")
    assert "No phase marks (MSTX ranges / torch user annotations): every kernel is compared." in md
    health = next(ln for ln in md.splitlines() if ln.startswith("Phase of each kernel"))
    assert health.startswith("Phase of each kernel (how it is known; section 5): training: mark 0, op_type ")
    assert health.endswith("— no phase marks (MSTX ranges / torch user annotations).")


def test_a_format_difference_in_an_equal_row_gets_its_own_grade_and_reason(lake):
    lk, tmp = lake
    grade, rule, detail = _grades(lk, "nz")["linear"]
    assert (grade, rule) == ("yellow", "same_ops_format_differs")
    assert detail == "MatMulV2 bf16 ND vs MatMulV2 bf16 ND/NZ"
    assert _grades(lk, "marked")["linear"][:2] == ("green", "same_ops")      # the same capture without NZ
    md = write_report(lk.warehouse, "nz", tmp / "out-nz", "en")["report"].read_text(encoding="utf-8")
    assert "same op types with different formats: MatMulV2 bf16 ND vs MatMulV2 bf16 ND/NZ" in md


def test_per_rank_figures_and_the_tp_note(lake):
    lk, tmp = lake
    note = mart(lk.root, "select parallel_note, ranks from fct_phase_scope where run_id = 'tp' and side = 'train'")[0]
    assert note[1] == 2 and note[0].startswith("train TP 1 on 2 ranks, infer TP 2 on 1 ranks: figures are per rank")
    calls, per_rank, ranks, dur, norm = mart(lk.root, "select train_calls, train_calls_per_rank, train_ranks, "
                                             "train_dur_ns_per_rank, train_dur_ns_tp_norm from fct_op_comparison "
                                             "where run_id = 'tp' and module = 'attention'")[0]
    one = mart(lk.root, "select train_calls from fct_op_comparison where run_id = 'marked' and module = 'attention'")
    assert ranks == 2 and calls == 2 * one[0][0] and per_rank == one[0][0]
    infer = mart(lk.root, "select infer_dur_ns_per_rank, infer_dur_ns_tp_norm from fct_op_comparison "
                          "where run_id = 'tp' and module = 'attention'")[0]
    assert norm == dur and infer[1] == pytest.approx(2 * infer[0])
    layers = mart(lk.root, "select train_calls_per_rank_per_layer from fct_op_comparison "
                           "where run_id = 'marked' and module = 'attention'")
    assert layers[0][0] is None          # no num_layers recorded for this run: no per-layer figure
    md = write_report(lk.warehouse, "tp", tmp / "out-tp-rank", "en")["report"].read_text(encoding="utf-8")
    assert "### Per rank" in md and "- Different parallelism: train TP 1 on 2 ranks" in md
    row = next(ln for ln in md.split("### Per rank")[1].splitlines() if ln.startswith("| Attention |"))
    assert row.split(" | ")[1:4] == ["2", "1", f"{one[0][0]:.1f}"]
    md1 = write_report(lk.warehouse, "marked", tmp / "out-m-rank", "en")["report"].read_text(encoding="utf-8")
    assert "### Per rank" not in md1     # one rank each, no TP recorded: sums are per-rank figures


def test_settings_in_runs_report_and_trend_by_setting(lake):
    lk, tmp = lake
    from tilake.lake.registry import list_runs
    from tilake.reports.trends import compute_trend

    runs = {r["run_id"]: r for r in list_runs(lk)}
    assert runs["tp"]["settings"]["HCCL_DETERMINISTIC"] == "true" and runs["marked"]["settings"] == {}
    md = write_report(lk.warehouse, "tp", tmp / "out-tp", "en")["report"].read_text(encoding="utf-8")
    assert "| Settings (the switches behind the kernels) | HCCL_DETERMINISTIC=true; infer_tp=2; train_tp=1 |" in md
    res = compute_trend(lk, "red_rows", "setting:HCCL_DETERMINISTIC")
    assert {s.label for s in res.series} >= {"HCCL_DETERMINISTIC=true", "HCCL_DETERMINISTIC=unknown"}
    with pytest.raises(TilakeError, match="invalid setting name"):
        compute_trend(lk, "red_rows", "setting:bad name")


def test_metrics_absent_are_evidence_missing_never_zero(lake):
    lk, tmp = lake
    rows = mart(lk.root, "select status, value, reason from fct_run_metrics where run_id = 'marked' "
                         "and metric = 'training/rollout_probs_diff_max'")
    assert rows == [("evidence_missing", None, "no RL log recorded with the run (tilake run --log FILE; "
                                              "tilake scan keeps its run.log)")]
    md = write_report(lk.warehouse, "marked", tmp / "out-m2", "en")["report"].read_text(encoding="utf-8")
    assert "| Measured train–rollout mismatch (verl log) | evidence_missing (no RL log recorded" in md


@pytest.mark.skipif(not (TRAIN_TRACE.is_file() and REAL_LOG.is_file()), reason="../shared/verl-cpu is absent")
def test_real_verl_traces_phases_and_the_real_logs_metrics(lake):
    lk, tmp = lake
    sc = _scope(lk, "verl-cpu")
    # real annotations: actor_compute_log_prob on the FSDP worker, execute_context_1(40)_generation_0(0) in vLLM
    assert sc["train"][0] == "actor_log_prob" and sc["infer"][0] == "prefill"
    marks = {(s, p): m for s, p, m in mart(lk.root, "select side, phase, min(example_mark) from fct_run_phases "
                                                    "where run_id = 'verl-cpu' and phase_source = 'mark' group by all")}
    assert marks[("train", "actor_log_prob")] == "actor_compute_log_prob"
    assert marks[("train", "update_actor")] == "actor_update"
    assert marks[("infer", "prefill")] == "execute_context_1(40)_generation_0(0)"
    assert marks[("infer", "decode")].startswith("execute_context_0(0)_generation_")
    m = dict(mart(lk.root, "select metric, value from fct_run_metrics where run_id = 'verl-cpu' and status = 'ok'"))
    assert m["training/rollout_probs_diff_mean"] == pytest.approx(7.867e-4, rel=1e-3)
    assert m["training/rollout_probs_diff_max"] == pytest.approx(2.783e-3, rel=1e-3)
    assert m["rollout_corr/k3_kl"] == pytest.approx(0.04296, rel=1e-3)
    md = write_report(lk.warehouse, "verl-cpu", tmp / "out-real", "en")["report"].read_text(encoding="utf-8")
    assert "probs diff mean 0.0007867, probs diff max 0.002783" in md and "k3 KL 0.04296" in md
    from tilake.reports.trends import compute_trend

    res = compute_trend(lk, "probs_diff_max", "setting:enforce_eager")
    assert [(s.label, s.values) for s in res.series] == [("enforce_eager=true", [pytest.approx(0.002782704308629036)])]


def test_rl_log_lines_console_and_jsonl(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("\x1b[36m(TaskRunner pid=1)\x1b[0m step:3 - actor/entropy:6.2 - training/rollout_probs_diff_max:"
                   "0.0021 - rollout_corr/chi2_token: - rollout_corr/chi2_seq:-0.5\n"
                   '{"step": 4, "data": {"training/rollout_probs_diff_mean": 0.001, "actor/pg_loss": 1.0}}\n'
                   '{"step": 5, "rollout_corr/k3_kl": 0.04}\n'
                   "not a metric line: step:x\n", encoding="utf-8")
    rows = [(r["step"], r["metric"], r["value"], r["format"], r["line_no"]) for r in read_rl_metrics(log)]
    assert rows == [(3, "training/rollout_probs_diff_max", 0.0021, "console", 1),
                    (3, "rollout_corr/chi2_seq", -0.5, "console", 1),
                    (4, "training/rollout_probs_diff_mean", 0.001, "jsonl", 2),
                    (5, "rollout_corr/k3_kl", 0.04, "jsonl", 3)]
    gz = tmp_path / "run.log.gz"
    gz.write_bytes(gzip.compress(log.read_bytes()))
    assert len(read_rl_metrics(gz)) == 4
    with pytest.raises(TilakeError, match="RL log not found"):
        facts_meta(log=tmp_path / "missing.log")


@pytest.mark.skipif(not REAL_LOG.is_file(), reason="../shared/verl-cpu is absent")
def test_the_real_verl_log_line_format():
    rows = {r["metric"]: r for r in read_rl_metrics(REAL_LOG)}
    assert rows["training/rollout_actor_probs_pearson_corr"]["value"] == pytest.approx(0.99958, rel=1e-4)
    assert rows["training/rollout_probs_diff_std"]["step"] == 1 and rows["rollout_corr/k3_kl"]["line_no"] == 1178
    assert "actor/entropy" not in rows                 # only the train–rollout mismatch metrics


def test_phases_spec_is_checked():
    assert parse_phases(None) is None and parse_phases("default") is None and parse_phases("all") == "all"
    assert parse_phases(" train:update_actor , infer:decode ") == "train:update_actor,infer:decode"
    with pytest.raises(TilakeError, match="unknown phase 'infer:backward'"):
        parse_phases("infer:backward")


@pytest.mark.skipif(not REAL_INFO.is_dir(), reason="../shared/fixtures/real_public is absent")
def test_versions_from_a_real_profiler_info():
    assert versions_from_profiler_info([REAL_INFO]) == {"torch_npu": "2.7.1", "cann": "8.3.RC1"}


def test_versions_absent_stay_absent(tmp_path):
    (tmp_path / "profiler_info_0.json").write_text(json.dumps({"rank_id": 0}), encoding="utf-8")
    (tmp_path / "profiler_info_1.json").write_text("{not json", encoding="utf-8")
    assert versions_from_profiler_info([tmp_path, None]) == {}


def test_settings_from_a_launch_script(tmp_path):
    script = Path(__file__).resolve().parents[1] / "data" / "verl_launch" / "grpo_qwen3_megatron_vllm_prof.sh"
    meta = facts_meta(script=script, settings=[("HCCL_DETERMINISTIC", "true"), ("num_layers", "28")])
    st = meta["settings"]
    assert st["enforce_eager"]["value"] is True and st["graph_mode"]["value"] is False
    assert st["enforce_eager"]["source"] == "launch script: override actor_rollout_ref.rollout.enforce_eager"
    assert st["train_tp"]["value"] == 1 and st["infer_tp"]["value"] == 1
    assert st["HCCL_DETERMINISTIC"] == {"value": True, "source": "--setting"} and st["num_layers"]["value"] == 28
    assert meta["parallel_config"]["tp"] == 1 and meta["script_path"].endswith("grpo_qwen3_megatron_vllm_prof.sh")
    with pytest.raises(TilakeError, match="launch script not found"):
        facts_meta(script=tmp_path / "nope.sh")
