"""Level-0 op types derived from kernel names (ingest/profiler/names.py) against real recorded op types.

Truth: every (Name, Type) pair of the real ``kernel_details.csv`` exports under ``../shared/fixtures``
(torch_npu level 1/2 text exports, msprof-analyze UT data), and the level-0 vs level-1 DBs of the same
msinsight job (``fixtures/profiler/msinsight/test/data/pytorch/db/level{0,1}``): level 0 stores ``N/A``
as the op type, level 1 the real one, for the same kernel names.
"""
from __future__ import annotations

import csv
import sqlite3

import duckdb
import pytest

from tilake.ingest.profiler.names import derived_op_type, op_type_or_derived


def derive(names):
    """{kernel name: derived op type} computed by the SQL expression of names.py."""
    con = duckdb.connect()
    con.execute("CREATE TABLE n (k VARCHAR)")
    con.executemany("INSERT INTO n VALUES (?)", [(n,) for n in names])
    return dict(con.execute(f"SELECT k, {derived_op_type('k')} FROM n").fetchall())


@pytest.mark.parametrize("name, expected", [
    # msprof-analyze UT kernel_details.csv: this name ran as MatMulV3 (its Type column)
    ("aclnnMatmul_MatMulV3Common_MatMulV5", "MatMulV3"),
    ("aclnnMm_MatMulV3Common_MatMulV3", "MatMulV3"),
    # level-1 DB of the msinsight job: MatMulCommon names no version, MemSet is another kernel
    ("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2"),
    ("aclnnMm_MatMulCommon_MemSet", "MemSet"),
    ("aclnnEmbeddingDenseBackward_SortAiCore_Sort", "Sort"),
    ("trans_TransData_17", "TransData"),
    ("hcom_allReduce__865_0_1", "hcom_allReduce_"),
    ("Conv2DBackpropFilter6_MemSet", "MemSet"),
    ("ReduceSum7", "ReduceSum"),
    ("ReshapeAndCacheNdKernel", "ReshapeAndCacheNdKernel"),
])
def test_derived_op_type_examples(name, expected):
    assert derive([name])[name] == expected


def test_recorded_op_type_wins_over_derivation():
    con = duckdb.connect()
    got = con.execute(f"SELECT {op_type_or_derived('t', 'k')} FROM (SELECT 'MatMulV3' AS t, "
                      f"'aclnnMatmul_MatMulV3Common_MatMulV5' AS k UNION ALL SELECT 'N/A', "
                      f"'aclnnMatmul_MatMulV3Common_MatMulV5') ORDER BY 1").fetchall()
    assert got == [("MatMulV3",), ("MatMulV3",)]


def test_every_real_text_export_pair_is_derived_right(shared_dir):
    pairs = set()
    for f in sorted((shared_dir / "fixtures").rglob("kernel_details*.csv")):
        with open(f, newline="", encoding="utf-8-sig") as fh:
            for row in csv.DictReader(fh):
                name, typ = row.get("Name"), row.get("Type")
                if name and typ and typ != "N/A":
                    pairs.add((name, typ))
    aclnn = {p for p in pairs if p[0].startswith("aclnn")}
    assert len(aclnn) == 99   # distinct aclnn (name, type) pairs in the shared fixtures
    got = derive(sorted({n for n, _ in aclnn}))
    wrong = sorted((n, t, got[n]) for n, t in aclnn if got[n] != t)
    assert wrong == []


def test_level0_names_derive_the_level1_op_types(shared_dir):
    root = shared_dir / "fixtures/profiler/msinsight/test/data/pytorch/db"

    def names(level):
        db = root / level / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
        # immutable=1: no -wal/-shm side files beside the read-only input (the level-1 DB is in WAL mode)
        con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
        try:
            return dict(con.execute(
                "SELECT DISTINCT s.value, t.value FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.name "
                "JOIN STRING_IDS t ON t.id = c.opType").fetchall())
        finally:
            con.close()

    l0, l1 = names("level0"), names("level1")
    assert set(l0.values()) == {"N/A"}
    assert len(l0) == 78 and set(l0) == set(l1)
    got = derive(sorted(l0))
    assert sorted((n, l1[n], got[n]) for n in l0 if got[n] != l1[n]) == []
