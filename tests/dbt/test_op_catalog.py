"""Every op gets a category (issue 12): op_catalog, the aclnn API family before the bare op type, the
fallback by task type, the uncategorized share per side, and the catalog warning of one run.

Inputs: the real 4-rank Megatron capture ``../shared/fixtures/real_public/msinsight_st_level2`` (text export,
torch_npu 2.7.1, CANN 8.3.RC1; ranks 1 and 3 have no kernel data), and a copy of its rank 0 in which the
op type ``Pows`` is renamed ``PowsV9`` (an op type no catalog row names; everything else byte-identical),
so the fallback has something to label.
"""
from __future__ import annotations

import shutil

import pytest

from tests.fixtures.profiler_helpers import mart
from tilake.lake.store import Lake
from tilake.pipeline.profile import run_profile

REAL = "fixtures/real_public/msinsight_st_level2"
# the 10 op types this capture left uncategorized before the catalog grew (issue 12), and where they go now
WAS_UNCATEGORIZED = {
    "LpNormV2": "optimizer", "Pows": "elementwise", "Range": "elementwise", "NotEqual": "elementwise",
    "Index": "layout", "LogicalNot": "elementwise", "ArgMaxWithValue": "reduction",
    "GreaterEqual": "elementwise", "IndexPutV2": "layout", "LogicalOr": "elementwise",
}


@pytest.fixture(scope="module")
def runs(shared_dir, tmp_path_factory):
    """One lake, three runs: the real capture, and two runs of the renamed-Pows copy of rank 0."""
    tmp = tmp_path_factory.mktemp("catalog")
    src = shared_dir / REAL / "rank_0_ascend_pt"
    mod = tmp / "mod" / "rank_0_ascend_pt"
    shutil.copytree(src, mod)
    out = mod / "ASCEND_PROFILER_OUTPUT"
    for name, old, new in (("kernel_details.csv", "_PowsAiCore_Pows,Pows,", "_PowsAiCore_Pows,PowsV9,"),
                           ("op_statistic.csv", ",Pows,", ",PowsV9,")):
        text = (out / name).read_text(encoding="utf-8")
        assert text.count(old) > 0
        (out / name).write_text(text.replace(old, new), encoding="utf-8")
    lake = Lake(tmp / "lake")
    res = {}
    for rid, path in (("mod_a", tmp / "mod"), ("real", shared_dir / REAL), ("mod_b", tmp / "mod")):
        res[rid] = run_profile(None, lake, rid, tmp / f"out_{rid}", run_meta={}, lang="en", train=[path],
                               allow_missing=True, progress=False)
    return lake, res


def test_real_capture_has_no_uncategorized_op_type(runs):
    lake, _ = runs
    assert mart(lake.root, "select calls, uncategorized_calls, fallback_calls, op_types, uncategorized_op_types, "
                           "fallback_op_types, derived_op_types from fct_side_categorisation "
                           "where run_id = 'real'") == [(5050, 0, 0, 53, 0, 0, 0)]
    assert mart(lake.root, "select op_type from fct_side_ops where run_id = 'real' "
                           "and category_source <> 'catalog'") == []
    got = dict(mart(lake.root, "select op_type, category from fct_side_ops where run_id = 'real' "
                               f"and op_type in {tuple(WAS_UNCATEGORIZED)}"))
    assert got == WAS_UNCATEGORIZED


def test_aclnn_api_family_before_bare_op_type(runs):
    lake, _ = runs
    got = dict(mart(lake.root, "select kernel_name, category from fct_side_kernel_names where run_id = 'real' "
                               "and kernel_name like 'aclnnEmbedding%'"))
    assert got == {
        "aclnnEmbeddingDenseBackward_SortAiCore_Sort": "backward",   # was sampling (op type Sort)
        "aclnnEmbeddingDenseBackward_CastAiCore_Cast": "backward",
        "aclnnEmbeddingDenseBackward_EmbeddingDenseGradV2_MemSet": "backward",
        "aclnnEmbeddingDenseBackward_EmbeddingDenseGradV2_EmbeddingDenseGradV2": "backward",
        "aclnnEmbedding_GatherV2AiCore_GatherV2": "layout",   # GatherV2 row: embedding lookup / index
    }
    # op-type grain: facts of the most-called kernel name, so 48 NonZero MemSets keep MemSet in layout
    assert mart(lake.root, "select op_type, category, calls from fct_side_ops where run_id = 'real' "
                           "and op_type in ('Sort', 'MemSet', 'Cast') order by op_type") == [
        ("Cast", "cast", 589), ("MemSet", "layout", 50), ("Sort", "backward", 2)]


def test_fallback_labels_what_no_catalog_row_names(runs):
    lake, res = runs
    assert mart(lake.root, "select op_type, category, module, category_source from fct_side_ops "
                           "where run_id = 'mod_a' and category_source <> 'catalog'") == [
        ("PowsV9", "elementwise", "elementwise", "fallback")]
    assert mart(lake.root, "select op_type, kernel_name, calls, category_source, fallback_category "
                           "from fct_uncategorized_kernels where run_id = 'mod_a'") == [
        ("PowsV9", "aclnnPowTensorScalar_PowsAiCore_Pows", 59, "fallback", "elementwise")]
    share = mart(lake.root, "select fallback_calls, calls, round(fallback_share, 5), uncategorized_share "
                            "from fct_side_categorisation where run_id = 'mod_a'")
    assert share == [(59, 2463, round(59 / 2463, 5), 0.0)]   # 2463 rows in rank 0 kernel_details.csv
    md = res["mod_a"].report_path.read_text(encoding="utf-8")
    assert "| PowsV9 | 59 | 2.4% | elementwise (fallback) | elementwise |" in md
    assert "Uncategorized: 0.0% of calls (0 op types); fallback category (kernel-name family / task type): 2.4% (1)." in md


def test_catalog_warning_counts_only_the_reported_run(runs):
    lake, res = runs
    # the lake holds two such kernel names (mod_a and mod_b), each run has one
    assert mart(lake.root, "select count(*) from fct_uncategorized_kernels") == [(2,)]
    want = ("1 kernel name(s) match no op_catalog entry (1 placed by the fallback by kernel-name family / "
            "task type; listed in the report): add them to op_catalog.csv in a rules folder (--rules DIR, "
            "$TILAKE_RULES or <lake>/rules/; copy the header of dbt_project/seeds/op_catalog.csv), then tilake build")
    for rid in ("mod_a", "mod_b"):
        assert [w for w in res[rid].warnings if "op_catalog" in w] == [want]
    assert [w for w in res["real"].warnings if "op_catalog" in w] == []


def test_level0_op_types_are_labelled_derived_from_kernel_name(shared_dir, tmp_path):
    """Real level-0 DBs of the msinsight CNN job (2 ranks; every opType is N/A)."""
    src = shared_dir / "fixtures/profiler/msinsight/test/data/pytorch/db/level0"
    lake = Lake(tmp_path / "lake")
    res = run_profile(None, lake, "l0", tmp_path / "out", run_meta={}, lang="en", train=[src], allow_missing=True, progress=False)
    assert mart(lake.root, "select calls, op_types, derived_op_types, uncategorized_op_types "
                           "from fct_side_categorisation where run_id = 'l0'") == [(382, 34, 34, 0)]
    md = res.report_path.read_text(encoding="utf-8")
    assert "34 op types; † derived from kernel name (level-0 capture records no op type)." in md
    # 27 trans_TransData_<n> names carry most TransData calls: the op type stays in layout although its
    # most-called single name is aclnnMaxPool2dWithMaskBackward_TransDataSpecial_TransData (backward API)
    assert "| 1 | TransData<sup>†</sup> | 114 | 29.8% | layout | cast_layout |" in md
