"""The CLI through click's CliRunner: the README's main job, build, report and errors."""
from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from tilake.cli import main


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    out = tmp_path_factory.mktemp("example")
    r = CliRunner().invoke(main, ["example", "--out", str(out)], catch_exceptions=False)
    return out, r


def test_example_prints_summary_and_writes_outputs(example):
    out, r = example
    assert r.exit_code == 0, r.output
    assert "comparison rows per grade" in r.output
    lines = re.findall(r"│ ((?:🔴|🟠|🟡|🟢)[^│]*?)\s*│\s+(\d+) │", r.output)
    # the default phases (log-prob forward vs prefill): KV cache and sampling run on the inference side only
    assert lines == [("🔴 高差异 / high", "1"), ("🟠 中差异 / medium", "2"), ("🟡 低差异 / low", "1"),
                     ("🟡 推理独有 / inference only", "1"), ("🟢 无差异 / none", "3"),
                     ("🟢 推理独有 / inference only", "1")]   # one-side-only rows are never "none"
    assert "train: evidence = device" in r.output and "infer: evidence = device" in r.output
    for name in ("train_infer_op_diff_report.md", "operator_diff_table.csv", "megatron_runtime_ops.json",
                 "vllm_runtime_ops.json", "op_diff_overview.png"):
        assert (out / name).is_file(), name
    md = (out / "train_infer_op_diff_report.md").read_text(encoding="utf-8")
    assert "Qwen/Qwen3-0.6B" in md and "synthetic" in md  # honest about the bundled capture
    assert "TP=1, PP=1, EP=1" in md


def test_build_passes_its_own_tests(example):
    out, _ = example
    r = CliRunner().invoke(main, ["build", "--check", "--lake", str(out / "lake")])
    assert r.exit_code == 0, r.output
    m = re.search(r"dbt build: (\d+) nodes, (\d+) failed", r.output)
    assert m and int(m.group(1)) > 30 and m.group(2) == "0"


def test_report_command_english(example, tmp_path):
    out, _ = example
    r = CliRunner().invoke(main, ["report", "example-qwen3-0.6b-grpo", "--lake", str(out / "lake"),
                                  "--out", str(tmp_path), "--lang", "en"])
    assert r.exit_code == 0, r.output
    # the steps counted were chosen at ingest; the report command says which (issue 12 item 3)
    assert r.output.splitlines()[-2:] == ["train: profiler steps counted: step 1 (STEP_TIME; rank 0)",
                                          "infer: profiler steps counted: step 1 (STEP_TIME; rank 0)"]
    assert [ln.split(":")[0] for ln in r.output.splitlines()[:-2]] == [
        "report", "chart", "csv", "ops", "ops", "html", "numeric_csv", "xlsx"]
    md = (tmp_path / "train_infer_op_diff_report.md").read_text(encoding="utf-8")
    assert md.startswith("# Train–infer operator diff report — Qwen/Qwen3-0.6B")
    ops = json.loads((tmp_path / "megatron_runtime_ops.json").read_text(encoding="utf-8"))
    # the kernels of the phase compared (the actor's log-prob forward: 3,184 of the step's 14,823)
    assert ops["side"] == "train" and ops["backend"] == "megatron" and 3000 < ops["total_kernel_calls"] < 10000


def test_report_unknown_run_is_one_line(example, tmp_path):
    out, _ = example
    r = CliRunner().invoke(main, ["report", "nope", "--lake", str(out / "lake"), "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and "run 'nope' is not in the warehouse" in r.output


def test_report_without_warehouse(tmp_path):
    r = CliRunner().invoke(main, ["report", "x", "--lake", str(tmp_path / "none")])
    assert r.exit_code == 2 and "run `tilake build` first" in r.output


@pytest.mark.parametrize("args, message", [
    (["ingest", "--run-id", "a/b", "--train", "x"], "error: invalid run id 'a/b'"),
    (["ingest", "--tag", "novalue", "--train", "x"], "error: --tag expects key=value, got 'novalue'"),
    (["report", "../up"], "error: invalid run id '../up'"),
    (["runs", "diff", "a", "b c"], "error: invalid run id 'b c'"),
    (["dumps", "analyze", "--train", "t", "--infer", "i", "--out", "o", "--cu-seqlens", "0,x"],
     "error: --cu-seqlens must be comma-separated integers, got '0,x'"),
    (["dumps", "analyze", "--train", "t", "--infer", "i", "--out", "o", "--request-tokens", "5"],
     "error: --request-tokens must be START:END, got '5'"),
    (["dumps", "analyze", "--train", "t", "--infer", "i", "--out", "o", "--card", "model"],
     "error: --card expects key=value, got 'model'"),
])
def test_bad_values_fail_at_the_door_with_one_line(tmp_path, args, message):
    r = CliRunner().invoke(main, args + (["--lake", str(tmp_path / "lake")] if args[0] != "dumps" else []))
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [message + r.output.strip()[len(message):]]
    assert r.output.startswith(message) and not (tmp_path / "lake").exists()


def test_param_types_convert():
    from tilake.cli import IntList, KeyValue, TokenRange

    assert KeyValue().convert(" a = 12 ", None, None) == ("a", "12")
    assert KeyValue(numbers=True).convert("train_tp=2", None, None) == ("train_tp", 2)
    assert KeyValue(numbers=True).convert("model=Qwen3-8B", None, None) == ("model", "Qwen3-8B")
    assert IntList().convert("0,5,13", None, None) == [0, 5, 13]
    assert TokenRange().convert("6:14", None, None) == (6, 14)
