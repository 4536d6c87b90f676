"""``--json``: one JSON document on stdout for ``example``, ``run``, ``runs``, ``trend`` and ``dumps analyze``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main


def _json(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # the whole of stdout parses: nothing else was printed there


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    out = tmp_path_factory.mktemp("json_example")
    return out, _json(CliRunner().invoke(main, ["example", "--out", str(out), "--json"]))


def test_example_json(example):
    out, got = example
    assert got["run_id"] == "example-qwen3-0.6b-grpo" and got["status"] == "ok"
    assert got["lake"] == str((out / "lake").resolve())
    assert got["grade_counts"] == {"red": 1, "orange": 2, "yellow": 2, "green": 4, "evidence_missing": 0}
    assert got["evidence"] == {"train": "device", "infer": "device"} and got["kernels"] > 10000
    names = {k: Path(v).name for k, v in got["outputs"].items() if k != "runtime_ops"}
    assert names == {"report": "train_infer_op_diff_report.md", "csv": "operator_diff_table.csv",
                     "chart": "op_diff_overview.png", "html": "train_infer_op_diff_report.html",
                     "numeric_csv": "operator_diff_table_numeric.csv", "xlsx": "operator_diff.xlsx"}
    assert all(Path(p).is_file() for k, p in got["outputs"].items() if k != "runtime_ops")
    assert sorted(Path(p).name for p in got["outputs"]["runtime_ops"]) == ["megatron_runtime_ops.json",
                                                                         "vllm_runtime_ops.json"]


def test_run_runs_and_trend_json(example, tmp_path):
    out, _ = example
    lake = str(out / "lake")
    got = _json(CliRunner().invoke(main, ["run", str(out / "profiler_output"), "--run-id", "again", "--lake", lake,
                                          "--out", str(tmp_path / "again"), "--model-family", "qwen3", "--json"]))
    assert got["run_id"] == "again" and got["grade_counts"]["red"] == 1
    assert Path(got["outputs"]["xlsx"]).parent == (tmp_path / "again").resolve()
    runs = _json(CliRunner().invoke(main, ["runs", "--lake", lake, "--json"]))
    assert runs["lake"] == str(Path(lake).resolve())
    assert [r["run_id"] for r in runs["runs"]] == ["example-qwen3-0.6b-grpo", "again"]
    assert all(r["has_profile"] and r["model_family"] == "qwen3" for r in runs["runs"])
    tr = _json(CliRunner().invoke(main, ["trend", "-m", "red_rows", "--by", "model_family", "--lake", lake,
                                         "-o", str(tmp_path / "red.png"), "--json"]))
    assert tr["metric"] == "red_rows" and tr["chart"] == str(tmp_path / "red.png")
    assert [(s["label"], [(p["x"], p["value"], p["last_run_id"]) for p in s["points"]]) for s in tr["series"]] == \
           [("qwen3", [(1, 1.0, "example-qwen3-0.6b-grpo"), (2, 1.0, "again")])]
    names = _json(CliRunner().invoke(main, ["trend", "--list", "--json"]))
    assert "red_rows" in {t["name"] for t in names["trends"]}


def test_dumps_analyze_json(tmp_path):
    import msprobe_writer as G

    cfg = G.Cfg()
    w = G.weights(cfg)
    G.dump_train(cfg, tmp_path / "train", w)
    G.dump_infer(cfg, tmp_path / "infer", "attn_scale", w=w)
    got = _json(CliRunner().invoke(main, ["dumps", "analyze", "--train", str(tmp_path / "train"), "--infer",
                                          str(tmp_path / "infer"), "--out", str(tmp_path / "out"), "--no-charts",
                                          "--json"]))
    assert got["first_divergence"] == "L0.attn_core.out" and got["stub_needed"] is True
    assert got["points"] == [[0, "L0.attn_core.out", "logic-level"]]
    assert Path(got["outputs"]["boundary_results_xlsx"]).is_file()
