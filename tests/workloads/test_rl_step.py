"""``tilake example --backend torch``: a real tiny-Qwen3 RL step profiled here, ingested, graded and
reported; attention is decomposed on the training path, fused on the inference path, graded 🔴 —
and the same rules grade CUDA traces (synthetic on CPU machines, real where CUDA is present)."""
from __future__ import annotations

import csv
import gzip
import json
import time

import duckdb
import pytest
import torch
from click.testing import CliRunner
from torch_trace_writer import verl_cuda_layout

from tilake.cli import main
from tilake.lake.store import Lake
from tilake.pipeline.example import TORCH_EXAMPLE_RUN_ID
from tilake.pipeline.profile import run_profile
from tilake.workloads.rl_step import run_rl_step


def _comparison(warehouse, run_id):
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        rows = con.execute("SELECT module, train_ops, infer_ops, grade, rule_id FROM fct_op_comparison "
                           "WHERE run_id = ?", [run_id]).fetchall()
    finally:
        con.close()
    return {r[0]: r[1:] for r in rows}


@pytest.fixture(scope="module")
def torch_example(tmp_path_factory):
    out = tmp_path_factory.mktemp("torch-example")
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["example", "--backend", "torch", "--out", str(out), "--lang", "en"],
                           catch_exceptions=False)
    return out, r, time.monotonic() - t0


def test_example_torch_runs_end_to_end_on_cpu(torch_example):
    out, r, seconds = torch_example
    assert r.exit_code == 0, r.output
    assert seconds < 120  # ~20 s on 2 idle cores; generous for a loaded CI machine
    po = out / "profiler_output"
    train, infer = po / "actor_update" / "prof_rank-0.json.gz", po / "rollout_generate" / "prof_rank-0.json.gz"
    for p in (train, infer):
        doc = json.load(gzip.open(p))
        assert doc["schemaVersion"] == 1
        assert any(e.get("name") == "ProfilerStep#0" for e in doc["traceEvents"])
    report = (out / "train_infer_op_diff_report.md").read_text(encoding="utf-8")
    assert "real torch.profiler traces of a tiny Qwen3-style model" in report
    assert "CPU-only trace" in report  # CPU ops are the evidence, labelled so
    assert "train: evidence = cpu_ops" in r.output and "infer: evidence = cpu_ops" in r.output
    assert (out / "torch-eager_runtime_ops.json").exists() and (out / "torch-sdpa_runtime_ops.json").exists()


def test_attention_decomposed_on_train_fused_on_infer_graded_red(torch_example):
    out, r, _ = torch_example
    comp = _comparison(out / "lake" / "warehouse.duckdb", TORCH_EXAMPLE_RUN_ID)
    train_ops, infer_ops, grade, rule = comp["attention"]
    # the eager attention's ops by their module frame (nn.Module: Attention_<n>): q@kᵀ and p@v, the causal mask,
    # the scale, softmax; the SDPA side's attention module also appends to its KV cache (aten::cat)
    assert {"aten::_softmax", "aten::bmm", "aten::masked_fill_", "aten::tril", "aten::div"} <= set(train_ops)
    assert "aten::mm" not in train_ops       # q/k/v/o projections stay MatMul (nn.Linear frames)
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in infer_ops and "aten::_softmax" not in infer_ops
    assert (grade, rule) == ("red", "fused_vs_unfused")
    assert set(comp["linear"][0]) <= {"aten::mm", "aten::bmm"} and set(comp["linear"][1]) == {"aten::mm"}
    assert "uncategorized" not in comp  # every op of the workload is in op_catalog_torch
    rows = list(csv.DictReader((out / "operator_diff_table.csv").open(encoding="utf-8-sig")))
    assert any("_scaled_dot_product_flash_attention_for_cpu" in json.dumps(row) for row in rows)


def test_cuda_traces_graded_by_the_same_rules(tmp_path):
    root = verl_cuda_layout(tmp_path / "profile")
    res = run_profile(root, Lake(tmp_path / "lake"), "cuda-synth", tmp_path / "out", run_meta={}, lang="en", progress=False)
    assert res.evidence == {"train": "device", "infer": "device"} and res.status == "ok"
    comp = _comparison(tmp_path / "lake" / "warehouse.duckdb", "cuda-synth")
    train_ops, infer_ops, grade, rule = comp["attention"]
    # no Python stack and no annotation says the training bmm/softmax are attention: they stay MatMul / Softmax,
    # and the fused attention on the other side is not compared with them by name: no grade, never green
    assert train_ops is None and infer_ops == ["aten::_flash_attention_forward"]
    assert (grade, rule) == ("evidence_missing", "one_side_basic_unplaced")
    assert "aten::bmm" in comp["linear"][0] and comp["softmax"][0] == ["aten::_softmax"]
    con = duckdb.connect(str(tmp_path / "lake" / "warehouse.duckdb"), read_only=True)
    ops = {(r[0], r[1]): r[2:] for r in con.execute(
        "SELECT side, op_type, category, module, fused, backend FROM fct_side_ops WHERE run_id = 'cuda-synth'"
    ).fetchall()}
    con.close()
    # kernel-name patterns of op_catalog_torch: flash-attention and vLLM kernels fused, cuBLAS GEMMs by aten op
    assert ops[("infer", "aten::_flash_attention_forward")] == ("attention", "attention", True, "flash_attn")
    assert ops[("infer", "_C::silu_and_mul")] == ("activation", "activation", True, "vllm")
    assert ops[("train", "aten::bmm")] == ("matmul", "linear", False, "aten")
    assert ops[("train", "aten::_softmax")] == ("softmax", "softmax", False, "aten")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA path needs one")
def test_workload_on_cuda_records_device_kernels(tmp_path):
    traces = run_rl_step(tmp_path / "po", device="cuda")
    res = run_profile(tmp_path / "po", Lake(tmp_path / "lake"), "cuda-real", tmp_path / "out", run_meta={}, lang="en",
                      progress=False)
    assert traces.device == "cuda" and res.evidence == {"train": "device", "infer": "device"}
    con = duckdb.connect(str(tmp_path / "lake" / "warehouse.duckdb"), read_only=True)
    variants = [r[0] for r in con.execute(
        "SELECT schema_variant FROM fct_capture_health WHERE run_id = 'cuda-real'").fetchall()]
    con.close()
    assert len(variants) == 2 and all("+device" in v for v in variants)  # cat kernel events, not CPU ops
    assert _comparison(tmp_path / "lake" / "warehouse.duckdb", "cuda-real")["attention"][2] == "red"
