"""The op_catalog seeds as data: the op types issue 12 names have a row with a cited source; patterns are
valid regular expressions; the fallback covers every task type torch_npu / torch-profiler ingest writes."""
from __future__ import annotations

import csv
from pathlib import Path

import duckdb

SEEDS = Path(__file__).resolve().parents[2] / "dbt_project" / "seeds"

# uncategorized in ordinary GRPO captures and in the real msinsight_st_level2 capture (issue 12)
MUST = ["ClipByValueV2", "ScatterElements", "Cumsum", "LpNormV2", "Pows", "Range", "NotEqual", "Index",
        "LogicalNot", "ArgMaxWithValue", "GreaterEqual", "IndexPutV2", "LogicalOr"]


def rows(name):
    with open(SEEDS / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_named_op_types_have_a_row_with_a_source():
    cat = {r["pattern"]: r for r in rows("op_catalog.csv") if r["pattern_kind"] == "op_type"}
    missing = [op for op in MUST if op not in cat]
    assert missing == []
    assert [op for op in MUST if not cat[op]["source_note"].strip()] == []
    assert {op: cat[op]["category"] for op in ("LpNormV2", "Cumsum", "IndexPutV2", "ClipByValueV2")} == {
        "LpNormV2": "optimizer", "Cumsum": "reduction", "IndexPutV2": "layout", "ClipByValueV2": "elementwise"}


def test_patterns_are_unique_and_regexes_compile():
    con = duckdb.connect()
    for seed in ("op_catalog.csv", "op_catalog_torch.csv", "op_catalog_fallback.csv"):
        rs = rows(seed)
        keys = [(r["pattern_kind"], r["pattern"]) for r in rs]
        assert len(keys) == len(set(keys)), seed
        for kind, pattern in keys:
            if kind.endswith("regex") or kind == "aclnn_api":
                con.execute("SELECT regexp_matches('x', ?)", [pattern]).fetchone()   # raises when invalid


def test_fallback_covers_every_task_type_ingest_writes():
    fb = rows("op_catalog_fallback.csv")
    assert all(r["source_note"].strip() for r in fb)
    by_type = {r["pattern"]: r["category"] for r in fb if r["pattern_kind"] == "accelerator"}
    assert by_type == {"COMMUNICATION": "communication", "HCCL": "communication",
                       "AI_VECTOR_CORE": "elementwise", "MIX_AIV": "elementwise", "AI_CORE": "matmul",
                       "MIX_AIC": "matmul", "AI_CPU": "aicpu", "GPU": "other", "CPU": "other"}
