"""Block-count column by meaning, per schema variant (issue #12 item 6; reference §0 item 3, §2.5).

Inputs: ``tilake.synth`` DBs in each real layout (``blockDim`` CANN 8.x, ``blockNum`` CANN 9.0,
``block_dim`` 2024-03); the CANN 9.1 variant is the 9.0 DB with the columns msprof 26.1.0 adds
(``gridDim``, a new ``blockDim``, both 0) and its own ``OVERLAP_ANALYSIS`` table (``msprof_db.cpp``).
"""
from __future__ import annotations

import sqlite3

import pytest
from profiler_helpers import pt_db, raw

from tilake.ingest.profiler.db import probe
from tilake.ingest.profiler.discover import explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake
from tilake.synth.db import write_profiler_db
from tilake.synth.population import JobConfig, infer_population, train_population


def _cann91(db):
    c = sqlite3.connect(db)
    c.execute("ALTER TABLE COMPUTE_TASK_INFO ADD COLUMN gridDim INTEGER")
    c.execute("ALTER TABLE COMPUTE_TASK_INFO ADD COLUMN blockDim INTEGER")
    c.execute("UPDATE COMPUTE_TASK_INFO SET gridDim = 0, blockDim = 0")
    c.execute("CREATE TABLE OVERLAP_ANALYSIS (id INTEGER PRIMARY KEY, deviceId INTEGER, startNs NUMERIC, "
              "endNs NUMERIC, type INTEGER)")
    c.commit()
    c.close()


@pytest.mark.parametrize("variant, columns, label", [
    ("8.x", "blockDim", "blockDim+stack"),
    ("9.0", "blockNum", "blockNum+stack"),
    ("9.1", "blockNum", "blockNum+gridDim+overlap+stack"),
    ("2024-03", "block_dim", "block_dim+stack"),
])
def test_block_count_per_variant(tmp_path, variant, columns, label):
    one = JobConfig(layers=1)
    db = pt_db(tmp_path / "train", "h_1_1")
    write_profiler_db(db, train_population(one), block_columns=columns)
    c = sqlite3.connect(db)
    expected = sorted(r[0] for r in c.execute(f"SELECT {columns} FROM COMPUTE_TASK_INFO"))
    c.close()
    assert sum(expected) > 0
    if variant == "9.1":
        _cann91(db)
    inf = pt_db(tmp_path / "infer", "h_2_2")
    write_profiler_db(inf, infer_population(one))
    pr = probe(db)
    assert pr.block_column == columns and pr.schema_variant == label
    lake = Lake(tmp_path / "lake")
    ingest_profile(lake, "r", explicit(db, "train") + explicit(inf, "infer"), progress=False)
    got = sorted(r[0] for r in raw(lake.root, "kernels", "side = 'train' AND global_task_id IS NOT NULL")
                 .project("block_dim").fetchall())
    assert got == expected
