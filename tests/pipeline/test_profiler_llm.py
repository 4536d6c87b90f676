"""Operator diff on generated LLM-shaped captures (real torch_npu schema, synthetic kernels)."""
from __future__ import annotations

import csv
import json
import re
from types import SimpleNamespace

import pytest
from profiler_helpers import llm_pair, mart

from tilake.ingest.profiler.discover import explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake
from tilake.lake.warehouse import dbt_build
from tilake.reports.op_diff import write_report
from tilake.synth.population import JobConfig, infer_population, train_population

# phases "all": these runs grade every kernel of the step (the synthetic training DBs carry verl MSTX
# phase marks, so the default would compare only the actor's log-prob forward; tests/pipeline/test_phases.py)
META = {"model_id": "Qwen/Qwen3-0.6B", "model_family": "qwen3", "train_backend": "megatron",
        "infer_backend": "vllm", "parallel_config": {"tp": 1, "pp": 1, "ep": 1}, "phases": "all"}


SMALL = JobConfig(layers=4)


def _variants():
    """run id → (train population, infer population); every variant changes one computation."""
    t_unfused_attn = train_population(SMALL)
    assert t_unfused_attn.replace_op_type("FlashAttentionScore", ["BatchMatMulV2", "SoftmaxV2", "BatchMatMulV2"]) > 0
    t_sincos = train_population(SMALL)
    assert t_sincos.replace_op_type("RotaryMul", ["Sin", "Cos", "Mul"]) > 0
    i_unfused_norm = infer_population(SMALL)
    assert i_unfused_norm.replace_op_type("AddRmsNormBias", ["Add", "RmsNorm"]) > 0
    return {"llm": (train_population(SMALL), infer_population(SMALL)),
            "unfused-attn": (t_unfused_attn, infer_population(SMALL)),
            "sincos": (t_sincos, infer_population(SMALL)),
            "same-norm": (train_population(SMALL), i_unfused_norm)}


@pytest.fixture(scope="module")
def lake4(tmp_path_factory):
    """Four runs (reference + three variants) in one lake, one dbt build with its tests (`tilake build --check`), the reference's report."""
    tmp = tmp_path_factory.mktemp("llm")
    lake = Lake(tmp / "lake")
    caps = {}
    for run_id, (tpop, ipop) in _variants().items():
        caps[run_id] = llm_pair(tmp / run_id, tpop, ipop)
        ingest_profile(lake, run_id, explicit(tmp / run_id / "train", "train") +
                       explicit(tmp / run_id / "infer", "infer"), dict(META), progress=False)
    build = dbt_build(lake, progress=False, check=True)   # --check: data and unit tests too
    assert build.success and not build.failures
    out = write_report(lake.warehouse, "llm", tmp / "out", "zh")
    return lake, caps, out, build


def _grades(lake, run_id):
    return {m: (g, r) for m, g, r in mart(lake.root, f"SELECT module, grade, rule_id FROM fct_op_comparison "
                                                     f"WHERE run_id = '{run_id}'")}


@pytest.fixture(scope="module")
def reference(lake4):
    lake, caps, out, _build = lake4
    res = SimpleNamespace(report_path=out["report"], csv_path=out["csv"], runtime_ops=out["runtime_ops"])
    return res, _grades(lake, "llm"), lake, caps["llm"]


def test_dbt_build_check_ran_its_tests_and_unit_tests(lake4):
    _lake, _caps, _out, build = lake4
    kinds = {str(n[1]).split(".")[-1].lower() for n in build.nodes}
    assert {"model", "seed", "test", "unit_test"} <= {k.replace("nodetype.", "") for k in kinds} | kinds
    assert sum(1 for n in build.nodes if "unit" in str(n[1]).lower()) >= 2


def test_reference_job_grades_follow_the_rules(reference):
    _res, grades, _lake, _caps = reference
    assert grades["attention"] == ("red", "different_fused_kernel")
    assert grades["residual_norm"] == ("orange", "fusion_degree")
    assert grades["activation"] == ("green", "same_ops")          # SwiGlu on both sides (catalog: fused, same op)
    assert grades["rope"] == ("orange", "different_backend")       # CANN RotaryMul vs Triton _triton_rope
    assert grades["linear"] == ("yellow", "same_base_op")          # MatMulV2+MatMulV3 vs MatMulV2: other kernels
    assert grades["kv_cache"] == ("green", "one_side_no_equiv")    # inference only, no training equivalent
    assert grades["backward"] == ("green", "one_side_no_equiv")    # rules, not the seed table's 🟡


def test_residual_adds_join_the_norm_row_by_their_call_stack(reference):
    _res, _g, lake, _caps = reference
    row = mart(lake.root, "SELECT train_ops, train_op_calls, infer_ops, joined_by FROM fct_op_comparison "
                          "WHERE run_id = 'llm' AND module = 'residual_norm'")[0]
    assert set(row[0]) == {"RmsNorm", "Add"} and set(row[2]) == {"RmsNorm", "AddRmsNormBias"}
    assert row[3] == ["AddRmsNormBias"]
    # the forward's residual Adds carry Megatron's _bias_dropout_add_func frame: the norm row; the backward's
    # (autograd thread: torch_npu records no Python stack) have no context and stay Elementwise
    adds, split = mart(lake.root, "SELECT calls, display_split FROM fct_side_ops WHERE run_id='llm' AND side='train' "
                                  "AND op_type='Add'")[0]
    in_norm = dict(zip(row[0], row[1]))["Add"]
    elem = mart(lake.root, "SELECT train_ops, train_op_calls FROM fct_op_comparison WHERE run_id='llm' "
                           "AND module='elementwise'")[0]
    in_elem = dict(zip(elem[0], elem[1]))["Add"]
    pop = train_population(SMALL)
    stacked = sum(1 for o in pop.ops if o.stack for k in o.kernels if k.op_type == "Add")
    assert (in_norm, in_elem) == (stacked, adds - stacked) and 0 < stacked < adds
    assert split == f"residual_norm {in_norm}, elementwise {in_elem}"
    fm = mart(lake.root, "SELECT other_unfused_ops, replaced_steps_present, replaced_steps FROM fct_fused_matches "
                         "WHERE run_id='llm' AND fused_op = 'AddRmsNormBias'")[0]
    assert fm == (["Add"], 2, 2)


def test_counts_match_the_generated_population(reference):
    _res, _g, lake, caps = reference
    for side in ("train", "infer"):
        got = dict(mart(lake.root, f"SELECT kernel_name, calls FROM fct_side_kernel_names "
                                   f"WHERE run_id = 'llm' AND side = '{side}'"))
        assert got == caps[side]["kernel_name_counts"]


def test_csv_bom_header_and_rows(reference):
    res, grades, _lake, _caps = reference
    data = res.csv_path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    rows = list(csv.reader(data[3:].decode("utf-8").splitlines()))
    assert rows[0] == ["操作", "训练算子", "推理算子", "训练调用次数", "推理调用次数", "差异类型", "差异等级",
                       "训练代码路径", "推理代码路径"]
    assert len(rows) - 1 == len(grades)
    att = next(r for r in rows if r[0] == "注意力")
    assert att[1:3] == ["FlashAttentionScore", "FusedInferAttentionScore"] and att[6] == "🔴"
    norm = next(r for r in rows if r[0] == "残差+归一化")
    assert re.fullmatch(r"RmsNorm\(\d+\)\+Add\(\d+\)", norm[1]) and re.fullmatch(r"\d+", norm[3])   # one number (issue 19: was "16+2")
    assert norm[5] == "融合程度不同" and norm[6] == "🟠"
    assert norm[7] == "megatron/core/transformer/torch_norm.py"


def test_report_has_eight_sections_markup_and_call_stacks(reference):
    res, _g, _lake, _caps = reference
    md = res.report_path.read_text(encoding="utf-8")
    heads = re.findall(r"^## (\d)\. ", md, flags=re.M)
    assert heads == ["1", "2", "3", "4", "5", "6", "7", "8"]   # 8: kernel alignment per layer
    assert '<span style="color:red">🔴 高差异</span>' in md
    assert '<span style="color:orange">🟠 中差异</span>' in md
    assert md.count("<details><summary>调用栈详情</summary>") == 3   # attention, norm, rope
    assert "PYTORCH_CALLCHAINS" in md and "flash_attention" in md   # runtime frames, not notes
    for p in ("P0", "P1", "P3"):
        assert f"**{p}**" in md
    assert (res.report_path.parent / "op_diff_overview.png").stat().st_size > 1000


def test_runtime_ops_json_named_after_backends(reference):
    res, _g, _lake, caps = reference
    names = sorted(p.name for p in res.runtime_ops)
    assert names == ["megatron_runtime_ops.json", "vllm_runtime_ops.json"]
    data = json.loads((res.report_path.parent / "vllm_runtime_ops.json").read_text(encoding="utf-8"))
    assert data["total_kernel_calls"] == caps["infer"]["kernels"]
    assert {k["kernel_name"]: k["count"] for k in data["kernels"]} == caps["infer"]["kernel_name_counts"]


def test_english_report(tmp_path, reference):
    from tilake.reports.op_diff import write_report
    _res, _g, lake, _caps = reference
    out = write_report(lake.warehouse, "llm", tmp_path, "en")
    md = out["report"].read_text(encoding="utf-8")
    assert "## 5. Core comparison: training vs inference" in md
    assert '<span style="color:red">🔴 high</span>' in md


def test_unfused_attention_is_red_fused_vs_unfused(lake4):
    lake = lake4[0]
    assert _grades(lake, "unfused-attn")["attention"] == ("red", "fused_vs_unfused")
    row = mart(lake.root, "SELECT train_ops FROM fct_op_comparison WHERE run_id='unfused-attn' AND module='attention'")[0][0]
    assert set(row) == {"BatchMatMulV2", "SoftmaxV2"}


def test_sin_cos_rope_against_triton_is_red_by_rule(lake4):
    assert _grades(lake4[0], "sincos")["rope"] == ("red", "fused_vs_unfused")


def test_same_norm_fusion_on_both_sides_is_green(lake4):
    assert _grades(lake4[0], "same-norm")["residual_norm"] == ("green", "same_ops")
