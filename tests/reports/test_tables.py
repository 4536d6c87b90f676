"""Numeric companions of the seed CSV: ``operator_diff_table_numeric.csv`` and ``operator_diff.xlsx``."""
from __future__ import annotations

import csv
import json

import pytest
from report_helpers import raw_device_ns

from tilake.reports.op_diff import CSV_HEADER, write_report
from tilake.reports.tables import COMPARISON_COLUMNS, GRADE_FILL


@pytest.fixture(scope="module")
def numeric(example_run):
    out, _res = example_run
    data = (out / "operator_diff_table_numeric.csv").read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    rows = list(csv.DictReader(data[3:].decode("utf-8").splitlines()))
    return {r["module"]: r for r in rows}, data[3:].decode("utf-8").splitlines()[0]


def test_seed_csv_keeps_its_exact_header(example_run):
    out, _ = example_run
    first = (out / "operator_diff_table.csv").read_bytes()[3:].decode("utf-8").splitlines()[0]
    assert first.split(",") == CSV_HEADER


def test_numeric_csv_english_header_and_numbers(example_run, numeric):
    out, res = example_run
    rows, header = numeric
    assert header.split(",") == [en for _k, en, _zh in COMPARISON_COLUMNS]
    assert len(rows) == sum(res.grade_counts.values()) == 9
    norm = rows["residual_norm"]
    # the log-prob forward: 28 layers × 4 norms × 8 micro-forwards + final norms; its residual Adds by their stack
    assert norm["train_ops"] == "RmsNorm(904)+Add(448)" and norm["train_calls"] == "1352"
    assert norm["infer_calls"] == "904" and norm["grade"] == "orange" and norm["rule_id"] == "fusion_degree"
    t_ns = raw_device_ns(out / "lake", "train", ["RmsNorm", "Add"], phase="actor_compute_log_prob")
    i_ns = raw_device_ns(out / "lake", "infer", ["RmsNorm", "AddRmsNormBias"], phase="execute_context_%_generation_0(0)")
    assert float(norm["train_device_us"]) == pytest.approx(t_ns / 1000, abs=1e-3)
    assert float(norm["infer_device_us"]) == pytest.approx(i_ns / 1000, abs=1e-3)
    assert float(norm["train_mean_us"]) == pytest.approx(t_ns / 1000 / 1352, abs=1e-3)
    assert float(norm["device_ratio_infer_over_train"]) == pytest.approx(i_ns / t_ns, abs=1e-4)
    # a side without ops has no device time (empty), not 0; its calls are 0
    kv = rows["kv_cache"]
    assert kv["train_ops"] == "" and kv["train_calls"] == "0" and kv["train_device_us"] == ""
    assert kv["device_ratio_infer_over_train"] == "" and float(kv["infer_device_us"]) > 0
    assert kv["diff_type"] == "推理独有" and kv["grade"] == "green" and kv["one_side_only"] == "infer"
    assert rows["sampling"]["one_side_only"] == "infer" and norm["one_side_only"] == ""
    # the column sums a spreadsheet would compute equal the kernel totals of the run
    for side, backend in (("train", "megatron"), ("infer", "vllm")):
        ops = json.loads((out / f"{backend}_runtime_ops.json").read_text(encoding="utf-8"))
        assert sum(int(r[f"{side}_calls"]) for r in rows.values()) == ops["total_kernel_calls"]
        total_us = sum(float(r[f"{side}_device_us"] or 0) for r in rows.values())
        assert total_us == pytest.approx(sum(o["total_dur_us"] for o in ops["op_types"]), abs=0.01)


def test_xlsx_sheets_numbers_frozen_header_and_fills(example_run, numeric):
    from openpyxl import load_workbook

    out, _ = example_run
    rows, _ = numeric
    wb = load_workbook(out / "operator_diff.xlsx")
    assert wb.sheetnames == ["对比表", "训练算子", "推理算子", "采集健康度"]
    ws = wb["对比表"]
    head = [c.value for c in ws[1]]
    assert head[:6] == ["模块 ID", "操作", "训练算子", "推理算子", "训练调用次数", "推理调用次数"]
    assert ws.freeze_panes == "A2" and ws.auto_filter.ref.startswith("A1:")
    body = {r[0].value: r for r in ws.iter_rows(min_row=2)}
    att = body["attention"]
    assert att[4].value == 224 and isinstance(att[4].value, int)
    assert isinstance(att[6].value, float) and att[6].value == pytest.approx(float(rows["attention"]["train_device_us"]))
    assert att[head.index("差异等级")].value == "🔴 高差异"
    assert att[0].fill.start_color.rgb.endswith(GRADE_FILL["red"])
    assert body["rope"][0].fill.start_color.rgb.endswith(GRADE_FILL["orange"])
    ops = wb["训练算子"]
    assert ops.freeze_panes == "A2"
    first = [c.value for c in next(ops.iter_rows(min_row=2, max_row=2))]
    assert first[0] == 1 and isinstance(first[2], int) and 0 < first[3] <= 1
    assert ops.cell(2, 4).number_format == "0.0%"


def test_english_xlsx_headers(example_run, tmp_path):
    from openpyxl import load_workbook

    out, res = example_run
    got = write_report(out / "lake" / "warehouse.duckdb", res.run_id, tmp_path, "en")
    wb = load_workbook(got["xlsx"])
    assert wb.sheetnames == ["comparison", "train ops", "infer ops", "captures"]
    assert [c.value for c in wb["comparison"][1]][:3] == ["module", "module_label", "train_ops"]
    kv = next(r for r in wb["comparison"].iter_rows(min_row=2, values_only=True) if r[0] == "kv_cache")
    assert kv[11] == "inference only" and kv[12] == "🟢 inference only"   # never "🟢 none"
    # the numeric CSV header is English in both languages
    assert got["numeric_csv"].read_text(encoding="utf-8-sig").splitlines()[0].startswith("module,module_label,")
