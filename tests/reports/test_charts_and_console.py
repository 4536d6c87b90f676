"""Charts, console and wording of the operator-diff outputs (issue 13: charts, 80 columns, one-side-only
wording, no spec section numbers; issue 14: torch-trace evidence named as such), on the bundled example."""
from __future__ import annotations

import copy
import io
import re
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from tilake.lake.registry import list_runs
from tilake.lake.store import Lake
from tilake.reports import op_diff, run_console, trends
from tilake.reports.tables import evidence_words

REPORTS = Path(op_diff.__file__).resolve().parent


@pytest.fixture(scope="module")
def facts(example_run):
    out, res = example_run
    return op_diff.load_facts(out / "lake" / "warehouse.duckdb", res.run_id)


def _texts(fig):
    return [t.get_text() for t in fig.axes[0].texts]


def test_overview_bars_fit_the_frame_with_counts_and_a_grade_legend(facts):
    import matplotlib.pyplot as plt

    fig = op_diff.overview_figure(facts)
    try:
        ax = fig.axes[0]
        top = max(max(r["train_calls"], r["infer_calls"]) for r in facts["comparison"])
        assert top == 1352                                   # Residual + norm, training side (RmsNorm + Add)
        assert ax.get_xlim()[1] >= 10 * top                  # a decade of room: no bar reaches the frame
        assert all(t.get_position()[0] < ax.get_xlim()[1] / 2 for t in ax.texts)   # labels inside too
        texts = _texts(fig)
        assert "1,352" in texts and "904" in texts and "224" in texts
        # the log-prob forward vs the prefill: 2 rows without training ops (KV cache, Sampling), none without
        # inference ops (backward, optimizer and loss kernels belong to update_actor, not compared)
        assert texts.count("none") == 2 and "no evidence" not in texts
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend == ["grade: high", "grade: medium", "grade: low / inference only",
                          "grade: none / inference only", "train (solid)", "infer (hatched)"]
    finally:
        plt.close(fig)


def test_overview_labels_a_side_without_evidence(facts):
    import matplotlib.pyplot as plt

    f = copy.deepcopy(facts)
    f["run"]["infer_evidence"] = "evidence_missing"
    for r in f["comparison"]:
        r.update(infer_calls=0, infer_ops=None, grade="evidence_missing")
    fig = op_diff.overview_figure(f)
    try:
        texts = _texts(fig)
        assert texts.count("no evidence") == len(f["comparison"]) == 9
        assert "inference: evidence_missing — no bars for this side" in texts
        assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()][0] == "grade: evidence missing"
    finally:
        plt.close(fig)


def test_trend_chart_has_run_ids_on_x_and_no_by_none(example_run, tmp_path):
    out, res = example_run
    tr = trends.compute_trend(Lake(out / "lake"), "red_rows", "none", "run")
    assert trends.trend_title(tr) == tr.trend.title and "by none" not in trends.trend_title(tr)
    assert trends.run_ticks(tr) == [(1, res.run_id)]
    assert trends.plot_trend(tr, tmp_path / "t.png").stat().st_size > 5_000
    grouped = trends.compute_trend(Lake(out / "lake"), "red_rows", "model_family", "run")
    assert trends.trend_title(grouped) == f"{tr.trend.title} by model_family"
    # 40 runs: 16 evenly spaced ticks, first and last kept; a long id keeps its distinguishing end
    many = trends.TrendResult(tr.trend, "none", "run", [trends.Series("all runs", [
        (i, 1.0, 1, f"nightly-qwen3-8b-grpo-megatron-vllm-{i:04d}") for i in range(1, 41)])], "")
    ticks = trends.run_ticks(many)
    assert len(ticks) == 16 and ticks[0] == (1, "…grpo-megatron-vllm-0001") and ticks[-1] == (40, "…grpo-megatron-vllm-0040")
    assert all(len(label) <= 24 for _, label in ticks)


def test_runs_at_80_columns_never_wrap_run_ids_or_print_dicts(example_run):
    from rich.console import Console

    out, _ = example_run
    runs = list_runs(Lake(out / "lake"))
    long_id = "grpo-qwen3-8b-megatron-tp4-pp2-vllm-ascend-0.9.1-nightly-20251129-a1b2c3d4"   # 74 characters
    runs.append(dict(runs[0], run_id=long_id, tags={"team": "rl", "ticket": "RL-12"},
                     tool_versions={"vllm-ascend": "0.9.1", "cann": "8.1.RC1", "torch-npu": "unknown"},
                     created_at=datetime(2025, 11, 29, 8, 0, 0)))
    buf = io.StringIO()
    run_console.print_runs(runs, Console(file=buf, width=80, force_terminal=False), lake_root=out / "lake")
    text = buf.getvalue()
    lines = text.splitlines()
    assert "example-qwen3-0.6b-grpo" in lines and long_id in lines     # each id whole, on its own line
    assert all(len(ln) <= 80 for ln in lines), max(lines, key=len)
    assert "{" not in text and "}" not in text and "'" not in text     # no raw Python dicts
    assert "  tags: team=rl, ticket=RL-12" in lines
    assert any(ln.startswith("  Qwen/Qwen3-0.6B (qwen3) · step 1 · ") for ln in lines)
    assert "  kernels train/infer 14823/3123 · captures 2" in lines
    assert "  tools: cann 8.1.RC1, vllm-ascend 0.9.1" in lines          # 'unknown' versions left out
    wide = io.StringIO()
    run_console.print_runs(runs, Console(file=wide, width=200, force_terminal=False))
    assert any(long_id in ln for ln in wide.getvalue().splitlines())    # the table keeps ids on one line


def test_one_side_rows_and_summary_counts(example_run):
    _out, res = example_run
    assert res.one_side == {"green:infer": 1, "yellow:infer": 1}        # KV cache; sampling (equivalent in training)
    rows = run_console.grade_rows(res.grade_counts, res.one_side)
    assert rows == [("🔴 高差异 / high", 1), ("🟠 中差异 / medium", 2), ("🟡 低差异 / low", 1),
                    ("🟡 推理独有 / inference only", 1), ("🟢 无差异 / none", 3), ("🟢 推理独有 / inference only", 1)]
    md = res.report_path.read_text(encoding="utf-8")
    kv = next(ln for ln in md.splitlines() if ln.startswith("| KV Cache |"))
    assert "🟢 推理独有</span>" in kv and "无差异" not in kv
    assert "`one_side_no_equiv` → <span style=\"color:green\">🟢 单侧独有</span>" in md


def test_reports_cite_no_spec_section_numbers(example_run):
    _out, res = example_run
    for p in list((REPORTS / "templates").iterdir()) + [REPORTS.parent / "dbt_project" / "seeds" / n
                                                         for n in ("grading_rules.csv", "recommendations.csv",
                                                                   "grades.csv", "modules.csv")]:
        assert not re.search(r"§\s*\d", p.read_text(encoding="utf-8")), p.name
    for p in (res.report_path, res.outputs["html"], res.csv_path):
        assert "§" not in p.read_text(encoding="utf-8-sig"), p.name


def test_torch_trace_evidence_is_named_as_such(facts, example_run):
    f = copy.deepcopy(facts)
    for c in f["captures"]:
        c["source_kind"] = "trace"
    f["run"]["train_evidence"] = "cpu_ops"
    cpu, gpu = evidence_words(f, "train", "en"), evidence_words(f, "infer", "en")
    assert cpu["source"] == "PyTorch profiler trace: CPU ops (cpu_op, innermost aten ops; no device events)"
    assert gpu["source"].startswith("PyTorch profiler trace: CUDA kernels (cat kernel")
    assert (cpu["time"], gpu["time"], cpu["stack"]) == ("CPU time (µs)", "Device time (µs)", "Python stack (with_stack)")
    assert evidence_words(facts, "train", "en")["source"] == "COMPUTE_TASK_INFO ⋈ TASK ⋈ STRING_IDS"
    md = op_diff.render_markdown(f, "zh")
    assert "| 训练 rank 0 | PyTorch profiler trace：CPU 算子（cpu_op，最内层 aten 算子；无 device 事件） |" in md
    assert "| # | 算子 (aten CPU 算子) |" in md and "| # | 算子 (CUDA kernel) |" in md
    assert "COMPUTE_TASK_INFO ⋈" not in md and "CANN 算子类型" not in md
    assert op_diff.runtime_ops(f, "train")["source"] == cpu["source"]
    from tilake.reports import op_diff_html, tables

    out, res = example_run
    ex = tables.mart_extras(out / "lake" / "warehouse.duckdb", res.run_id)
    html = op_diff_html.render_html(f, tables.comparison_records(f, ex, op_diff.csv_rows(f, "en"), "en"), ex["grades"], "en")
    assert html.count("<div class=\"rule\">PyTorch profiler trace: ") == len(f["captures"]) == 2
    assert "the time is the innermost CPU ops’ (cpu_op) duration, not device time" in html
    assert 'title="CPU time (µs): total / mean per call"' in html and "CANN op type" not in html
    # the console says where the evidence came from
    res = SimpleNamespace(evidence={"train": "cpu_ops", "infer": "device"}, ingest=SimpleNamespace(captures=[
        SimpleNamespace(capture=SimpleNamespace(side=s, kind="trace")) for s in ("train", "infer")]))
    assert run_console.evidence_note(res, "train") == " (PyTorch profiler trace: CPU ops (cpu_op), no device kernels)"
    assert run_console.evidence_note(res, "infer") == " (PyTorch profiler trace: CUDA kernels)"
    res.ingest.captures[0].capture.kind = "db"
    assert run_console.evidence_note(res, "train") == ""
