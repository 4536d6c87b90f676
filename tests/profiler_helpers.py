"""Helpers for the operator-diff tests: build LLM-shaped captures with the synthetic generator."""
from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Dict, Iterable, Optional

import duckdb

from tilake.ingest.synth_db import write_profiler_db
from tilake.ingest.synth_population import infer_population, train_population

FIXTURE_DB = "fixtures/profiler/msinsight/test/data/pytorch/db"
FIXTURE_TEXT = "fixtures/profiler/msinsight/test/data/pytorch/text"


def pt_db(root: Path, name: str, rank: int = 0) -> Path:
    """Path of ``<root>/<name>_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_<rank>.db``."""
    return root / f"{name}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db"


def llm_pair(root: Path, train_pop=None, infer_pop=None, **kw) -> Dict[str, dict]:
    """Write one training and one inference DB under ``root/train`` and ``root/infer``."""
    t = write_profiler_db(pt_db(root / "train", "host_1_1"), train_pop or train_population(), **kw)
    i = write_profiler_db(pt_db(root / "infer", "host_2_2"), infer_pop or infer_population(),
                          **{k: v for k, v in kw.items() if k not in ("with_mstx",)})
    return {"train": t, "infer": i}


def raw(lake_root: Path, table: str, where: str = "true"):
    """Rows of a raw lake table (all partitions) as a DuckDB relation result (list of tuples)."""
    glob = str(lake_root / "raw" / table / "**" / "*.parquet")
    return duckdb.sql(f"SELECT * FROM read_parquet('{glob}', hive_partitioning=false, union_by_name=true) "
                      f"WHERE {where}")


def mart(lake_root: Path, sql: str):
    """Run ``sql`` on the warehouse read-only; list of tuples."""
    con = duckdb.connect(str(lake_root / "warehouse.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def sqlite_count(db: Path, sql: str) -> int:
    """Scalar from an immutable read-only sqlite3 connection (creates nothing beside the file)."""
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def tree_digest(root: Path, skip: Iterable[str] = ()) -> Dict[str, str]:
    """``{relative path: sha256}`` of every file below ``root`` (inputs-unchanged checks)."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_file() and not any(s in p.parts for s in skip):
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def lake_state(lake_root: Path) -> Optional[Dict[str, str]]:
    """Digest of the lake's raw/ tree and warehouse (None when the lake does not exist)."""
    if not Path(lake_root).exists():
        return None
    return tree_digest(lake_root, skip=(".dbt",))
