"""Synthetic LLM-shaped torch_npu profiler captures with the exact schema of real files.

Facade of the ``synth_*`` modules, plus a small CLI::

    python -m tilake.synth profiler-output OUT [--infer-form db|raw|text] [--train-ranks N]
                                  [--level level0|level1|level2] [--seed N] [--layers N]
                                  [--unparsed-train-ranks I ...] [--infer-replicas N] [--schema 2025-01|8.5]
                                  [--block-columns blockDim|blockNum|block_dim] [--wal] [--session-end ok|null|zero]
                                  [--no-stack] [--no-mstx] [--phase-marks mstx|verl]
    python -m tilake.synth big-db OUT.db --rows N

What you get (see each module for the sources of every format fact):

* :mod:`~tilake.synth.tables` — CREATE statements and enum contents copied from the real fixture DBs.
* :mod:`~tilake.synth.records` — :class:`Population` (editable list of :class:`HostOp` with their
  :class:`Kernel` rows), :class:`JobConfig`; :mod:`~tilake.synth.population` —
  :func:`train_population` (Megatron actor+ref, one GRPO step of Qwen3-0.6B) and
  :func:`infer_population` (vllm-ascend rollout); :mod:`~tilake.synth.catalog` — :data:`CATALOG` of
  op types → kernel names.
* :mod:`~tilake.synth.db` — :func:`write_profiler_db` (variants: level0/1/2, block column names,
  WAL, open session, switches off, empty device tables, no COMPUTE_TASK_INFO, newer CANN schema).
* :mod:`~tilake.synth.text` — :func:`write_text_export` (kernel_details/op_statistic/api_statistic/
  operator_details CSVs with the real headers and quirks).
* :mod:`~tilake.synth.layout` — :func:`make_profiler_output` (verl ``profiler_output/``),
  :func:`write_raw` and :func:`write_analysed` (unparsed folder → parsed, the ``analyse()`` stand-in).
* :func:`write_big_db` — a DB with N TASK + N COMPUTE_TASK_INFO rows in the real schema (benchmarks).

Every writer returns a summary dict with paths and the expected counts, so tests assert real numbers.
Same seed → byte-identical DB files; no wall clock is read.
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Optional, Union

from tilake.synth.catalog import CATALOG, KernelTemplate
from tilake.synth.db import DEVICE_TABLE_MODES, LEVELS, SESSION_END_MODES, write_profiler_db
from tilake.synth.layout import (
    INFER_FORMS,
    make_profiler_output,
    population_from_json,
    population_to_json,
    pt_dir_name,
    write_analysed,
    write_raw,
)
from tilake.synth.population import infer_population, train_population
from tilake.synth.records import HostOp, JobConfig, Kernel, Population, make_kernel, make_op
from tilake.synth.tables import BLOCK_COLUMNS, FWK_STRING_BASE, INVALID, SCHEMAS, columns_of, ddl
from tilake.synth.text import write_text_export
from tilake.synth.timeline import DEFAULT_START_NS, build_timeline

__all__ = [
    "BLOCK_COLUMNS", "CATALOG", "DEFAULT_START_NS", "DEVICE_TABLE_MODES", "FWK_STRING_BASE", "HostOp", "INFER_FORMS",
    "INVALID", "JobConfig", "Kernel", "KernelTemplate", "LEVELS", "Population", "SCHEMAS", "SESSION_END_MODES",
    "build_timeline", "columns_of", "ddl", "infer_population", "make_kernel", "make_op", "make_profiler_output",
    "population_from_json", "population_to_json", "pt_dir_name", "train_population", "write_analysed",
    "write_big_db", "write_profiler_db", "write_raw", "write_text_export",
]

#: kernels cycled through by :func:`write_big_db` (name, opType, accelerator, device task type)
_BIG_KERNELS = [
    ("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", "KERNEL_AICORE"),
    ("aclnnRmsNorm_RmsNorm_RmsNorm", "RmsNorm", "AI_VECTOR_CORE", "KERNEL_AIVEC"),
    ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "FlashAttentionScore", "MIX_AIC",
     "MIX_AIC"),
    ("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", "KERNEL_AIVEC"),
    ("aclnnSwiGlu_SwiGlu_SwiGlu", "SwiGlu", "AI_VECTOR_CORE", "KERNEL_AIVEC"),
    ("aclnnRotaryPositionEmbedding_RotaryMul_RotaryMul", "RotaryMul", "AI_VECTOR_CORE", "KERNEL_AIVEC"),
    ("aclnnCast_CastAiCore_Cast", "Cast", "AI_VECTOR_CORE", "KERNEL_AIVEC"),
]


def write_big_db(path: Union[str, Path], rows: int, *, engine: str = "duckdb", batch: int = 200_000,
                 start_ns: int = DEFAULT_START_NS) -> dict:
    """A DB with ``rows`` TASK and ``rows`` COMPUTE_TASK_INFO rows (real DDL), for the ingest benchmark.

    Tables are created with :mod:`sqlite3` from the embedded real DDL (plus the small dictionaries:
    STRING_IDS, ENUM_API_TYPE, SESSION_TIME_INFO, META_DATA, RANK_DEVICE_MAP, CANN_API empty); the two big
    tables are filled either by DuckDB's SQLite scanner (``engine='duckdb'``:
    ``INSERT INTO s.TASK SELECT … FROM range(N)``) or by ``sqlite3.executemany`` in batches
    (``engine='sqlite'``). Kernel i: ``globalTaskId = i``, start ``start_ns + 2000·i`` ns, duration
    1500 ns, name/opType cycling through 7 LLM kernels.

    Returns:
        ``{"path", "rows", "engine", "seconds", "bytes"}``.
    Raises:
        FileExistsError: ``path`` exists; ValueError: unknown engine or rows < 1.
    """
    if engine not in ("duckdb", "sqlite"):
        raise ValueError(f"engine must be 'duckdb' or 'sqlite', got {engine!r}")
    if rows < 1:
        raise ValueError("rows must be >= 1")
    path = Path(path)
    if path.exists():
        raise FileExistsError(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    st = ddl()
    strings = {}
    for name, op, acc, dev in _BIG_KERNELS:
        for v in (name, op, acc, dev):
            strings.setdefault(v, len(strings))
    for v in ("N/A", "FORMAT_ND", "DT_BF16", '"4096,1024"', "launch"):
        strings.setdefault(v, len(strings))
    con = sqlite3.connect(str(path), isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=DELETE")
        con.execute("BEGIN")
        for t in ("SESSION_TIME_INFO", "NPU_INFO", "ENUM_API_TYPE", "COMPUTE_TASK_INFO", "TASK", "CANN_API",
                  "META_DATA", "STRING_IDS", "RANK_DEVICE_MAP"):
            con.execute(st[t])
        con.execute("INSERT INTO SESSION_TIME_INFO VALUES (?,?)", (start_ns, start_ns + 2000 * rows + 10_000))
        con.execute("INSERT INTO NPU_INFO VALUES (0,'Ascend910B')")
        from tilake.synth.tables import enum_api_type
        con.executemany("INSERT INTO ENUM_API_TYPE VALUES (?,?)", enum_api_type())
        con.executemany("INSERT INTO META_DATA VALUES (?,?)", [("SCHEMA_VERSION", "1.0.0")])
        con.execute("INSERT INTO RANK_DEVICE_MAP VALUES (0,0)")
        con.executemany("INSERT INTO STRING_IDS VALUES (?,?)", [(i, v) for v, i in strings.items()])
        con.execute("COMMIT")
        if engine == "sqlite":
            con.execute("PRAGMA synchronous=OFF")
            nk = len(_BIG_KERNELS)
            ids = [(strings[n], strings[o], strings[a], strings[d]) for n, o, a, d in _BIG_KERNELS]
            na, nd, bf, sh = strings["N/A"], strings["FORMAT_ND"], strings["DT_BF16"], strings['"4096,1024"']
            for lo in range(0, rows, batch):
                hi = min(rows, lo + batch)
                con.execute("BEGIN")
                con.executemany("INSERT INTO TASK VALUES (?,?,?,?,?,?,?,?,?,?,?)", (
                    (start_ns + 2000 * i, start_ns + 2000 * i + 1500, 0, 1000 + i, i, 3217657, ids[i % nk][3],
                     INVALID, 2, i % 65536, INVALID) for i in range(lo, hi)))
                con.executemany("INSERT INTO COMPUTE_TASK_INFO VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", (
                    (ids[i % nk][0], i, 48, 0, ids[i % nk][2], ids[i % nk][1], nd, bf, sh, nd, bf, sh, na)
                    for i in range(lo, hi)))
                con.execute("COMMIT")
    finally:
        con.close()
    if engine == "duckdb":
        from tilake.lake.duck import connect, sql_str
        nk = len(_BIG_KERNELS)

        def case(idx: int) -> str:
            return "CASE i % {n} {w} END".format(n=nk, w=" ".join(
                f"WHEN {k} THEN {strings[_BIG_KERNELS[k][idx]]}" for k in range(nk)))
        d = connect(sqlite=True)
        try:
            d.execute(f"ATTACH {sql_str(path)} AS s (TYPE sqlite)")
            d.execute("BEGIN")
            d.execute(f"INSERT INTO s.TASK SELECT {start_ns} + 2000*i, {start_ns} + 2000*i + 1500, 0, 1000 + i, i, "
                      f"3217657, {case(3)}, {INVALID}, 2, i % 65536, {INVALID} FROM range({rows}) t(i)")
            d.execute(f"INSERT INTO s.COMPUTE_TASK_INFO SELECT {case(0)}, i, 48, 0, {case(2)}, {case(1)}, "
                      f"{strings['FORMAT_ND']}, {strings['DT_BF16']}, {strings[chr(34) + '4096,1024' + chr(34)]}, "
                      f"{strings['FORMAT_ND']}, {strings['DT_BF16']}, {strings[chr(34) + '4096,1024' + chr(34)]}, "
                      f"{strings['N/A']} FROM range({rows}) t(i)")
            d.execute("COMMIT")
            d.execute("DETACH s")
        finally:
            d.close()
    return {"path": str(path), "rows": rows, "engine": engine, "seconds": round(time.perf_counter() - t0, 3),
            "bytes": path.stat().st_size}


def _cli(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tilake.synth",
                                 description="Write synthetic LLM-shaped torch_npu profiler captures.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    po = sub.add_parser("profiler-output", help="write a verl profiler_output/ folder")
    po.add_argument("out")
    po.add_argument("--infer-form", choices=INFER_FORMS, default="db")
    po.add_argument("--train-ranks", type=int, default=1)
    po.add_argument("--unparsed-train-ranks", type=int, nargs="*", default=[])
    po.add_argument("--level", choices=LEVELS, default="level1")
    po.add_argument("--seed", type=int, default=0)
    po.add_argument("--layers", type=int, default=28, help="transformer layers (28 = Qwen3-0.6B)")
    po.add_argument("--infer-replicas", type=int, default=1)
    po.add_argument("--schema", choices=SCHEMAS, default="2025-01", help="CANN table variant")
    po.add_argument("--block-columns", choices=tuple(BLOCK_COLUMNS), default="blockDim")
    po.add_argument("--wal", action="store_true", help="leave the DBs in WAL journal mode")
    po.add_argument("--session-end", choices=SESSION_END_MODES, default="ok")
    po.add_argument("--no-stack", action="store_true", help="no PYTORCH_CALLCHAINS")
    po.add_argument("--no-mstx", action="store_true", help="no MSTX_EVENTS on the training DBs")
    po.add_argument("--phase-marks", choices=("mstx", "verl"), default="mstx",
                    help="verl: the range names of a real verl + vLLM run on both sides (docs/phases.md)")
    big = sub.add_parser("big-db", help="write a DB with N TASK + N COMPUTE_TASK_INFO rows")
    big.add_argument("out")
    big.add_argument("--rows", type=int, required=True)
    big.add_argument("--engine", choices=("duckdb", "sqlite"), default="duckdb")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "profiler-output":
            r = make_profiler_output(a.out, infer_form=a.infer_form, train_ranks=a.train_ranks, level=a.level,
                                     seed=a.seed, unparsed_train_ranks=a.unparsed_train_ranks,
                                     job=JobConfig(layers=a.layers), infer_replicas=a.infer_replicas,
                                     schema=a.schema, block_columns=a.block_columns, wal=a.wal,
                                     session_end=a.session_end, with_stack=not a.no_stack,
                                     infer_with_stack=not a.no_stack, with_mstx=not a.no_mstx,
                                     phase_marks=a.phase_marks)
            print(json.dumps({"root": r["root"], "train": [{k: e[k] for k in ("rank", "dir", "form", "db")}
                                                           for e in r["train"]],
                              "infer": [{k: e[k] for k in ("replica", "dir", "form", "db")} for e in r["infer"]],
                              "expected": {k: v for k, v in r["expected"].items() if not k.endswith("op_types")}},
                             indent=2))
        else:
            print(json.dumps(write_big_db(a.out, a.rows, engine=a.engine), indent=2))
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_cli())
