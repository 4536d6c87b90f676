"""Text exports of a synthetic capture: ``kernel_details.csv``, ``op_statistic.csv``,
``api_statistic.csv``, ``operator_details.csv`` with the real headers and quirks.

Headers are copied from the real 2025-01 torch_npu text fixtures
(``shared/fixtures/profiler/msinsight/test/data/pytorch/text/level{0,1,2}/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT``).
Quirks reproduced: ``Start Time(us)`` values end with a TAB; shapes carry literal double quotes inside
the field (csv-escaped as ``\"\"\"513,1024\"\"\"``); ``N/A`` for missing values; ``Model ID`` 4294967295;
communication rows have ``Task ID/Stream ID = N/A`` and ``Accelerator Core`` ``HCCL`` (2025-01) or
``COMMUNICATION`` (current msprof); kernel_details is written with CRLF line ends like torch_npu's csv
writer (level0/1 fixtures), the msprof copies (op/api statistic) with LF; operator_details holds framework
shapes joined by ``;\\n``.
"""
from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Union

from tilake.synth.records import Population
from tilake.synth.tables import (
    API_STATISTIC_HEADER,
    INVALID,
    KERNEL_DETAILS_HEADER_L0,
    KERNEL_DETAILS_HEADER_L1,
    OP_STATISTIC_HEADER,
    OPERATOR_DETAILS_HEADER,
)
from tilake.synth.timeline import Timeline, build_timeline

_API_LEVEL = {20000: "acl", 10000: "node", 5000: "runtime", 5500: "hccl", 15000: "model"}


def _us(ns: int) -> str:
    """ns → µs string with 3 decimals, exact (float would lose digits at epoch-ns magnitudes)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def write_text_export(folder: Union[str, Path], population: Population, *, rank: int = 0, level: str = "level1",
                      schema: str = "2025-01", seed: int = 0, start_ns: Optional[int] = None,
                      with_stack: bool = False, block_columns: str = "blockDim", device_id: Optional[int] = None,
                      timeline: Optional[Timeline] = None) -> dict:
    """Write the four CSVs into ``folder`` (an ``ASCEND_PROFILER_OUTPUT`` directory).

    Args:
        folder: output directory (created).
        population: the capture's host ops and kernels.
        rank, seed, start_ns: as for :func:`write_profiler_db` (same values → same times as the DB).
        level: ``level0`` writes the short kernel_details header with ``Type = N/A`` and no
            op_statistic/api_statistic (those need level1+, reference doc §3.1).
        schema: ``2025-01`` → the fixture's headers and communication accelerator ``HCCL``; ``8.5`` →
            ``COMMUNICATION`` and a ``Device_id`` column (kernel_details after ``Step Id``, first column of
            op_statistic/api_statistic: torch_npu ≥ 7.1.0 / current msprof, reference doc §3.3).
        block_columns: ``blockNum`` renames ``Block Dim``/``Mix Block Dim`` to ``Block Num``/``Mix Block Num``
            (torch_npu 26.0.0 / CANN 9.0).
        device_id: value of the ``Device_id`` column (default ``rank``).
        with_stack: fill operator_details ``Call Stack`` (vllm-ascend records no stack by default).
        timeline: a prebuilt timeline.
    Returns:
        ``{"folder", "files": [...], "kernel_rows", "op_statistic_rows", "api_statistic_rows",
        "operator_rows", "op_type_counts"}``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tl = timeline or build_timeline(population, rank=rank, seed=seed, start_ns=start_ns)
    l0 = level == "level0"
    kernels = sorted(tl.kernels, key=lambda kr: kr.start_ns)
    files = []
    # kernel_details.csv
    header = list(KERNEL_DETAILS_HEADER_L0 if l0 else KERNEL_DETAILS_HEADER_L1)
    if block_columns == "blockNum":
        header = [{"Block Dim": "Block Num", "Mix Block Dim": "Mix Block Num"}.get(h, h) for h in header]
    with_dev = schema != "2025-01"
    dev = rank if device_id is None else device_id
    n_pmu = len(KERNEL_DETAILS_HEADER_L1) - KERNEL_DETAILS_HEADER_L1.index("aicore_time(us)")
    rows = []
    prev_end = None
    for kr in kernels:
        k = kr.kernel
        comm = k.accelerator == "COMMUNICATION"
        wait = 0 if prev_end is None else max(0, kr.start_ns - prev_end)
        prev_end = kr.end_ns
        start = _us(kr.start_ns) + "\t"
        dur = _us(kr.end_ns - kr.start_ns)
        if l0:
            rows.append([1, k.name, "N/A", "N/A", start, dur, _us(wait), 0])
            continue
        acc = ("HCCL" if schema == "2025-01" else "COMMUNICATION") if comm else k.accelerator
        if comm:
            rows.append([1, INVALID, "N/A", "N/A", k.name, k.op_type, "N/A", acc, start, dur, _us(wait), 0]
                        + ["N/A"] * (len(header) - 12))
            continue
        shapes = f'"{k.input_shapes}"' if k.input_shapes else "N/A"
        oshapes = f'"{k.output_shapes}"' if k.output_shapes else "N/A"
        dur_us = (kr.end_ns - kr.start_ns) / 1000
        aic = k.accelerator in ("AI_CORE", "MIX_AIC")
        busy = [round(dur_us * 0.97, 3), int(dur_us * 1850)]
        pmu = (busy if aic else [0.0, 0]) + [0.0] * 11          # aicore_time … aic_icache_miss_rate (13)
        pmu += (busy if not aic else [0.0, 0]) + [0.0] * 9      # aiv_time … aiv_icache_miss_rate (11)
        pmu.append(60.0 if aic else 0)                          # cube_utilization(%)
        assert len(pmu) == n_pmu
        rows.append([1, INVALID, kr.task_id, kr.stream_id, k.name, k.op_type, "dynamic", acc, start, dur,
                     _us(wait), k.block_dim, k.mix_block_dim, "YES" if k.op_type.startswith("MatMul") else "NO",
                     shapes, k.input_dtypes or "N/A", k.input_formats or "N/A", oshapes, k.output_dtypes or "N/A",
                     k.output_formats or "N/A", "N/A"] + pmu)
    with open(folder / "kernel_details.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\r\n")
        w.writerow(header[:1] + ["Device_id"] + header[1:] if with_dev else header)
        w.writerows([r[:1] + [dev] + r[1:] for r in rows] if with_dev else rows)
    files.append("kernel_details.csv")
    counts: Dict[str, int] = defaultdict(int)
    for kr in kernels:
        counts[kr.kernel.op_type] += 1
    op_stat_rows = api_rows = 0
    if not l0:
        # op_statistic.csv: compute kernels grouped by (OP Type, Core Type), by total time desc
        groups: Dict[tuple, List[float]] = defaultdict(list)
        for kr in kernels:
            if kr.kernel.accelerator != "COMMUNICATION":
                groups[(kr.kernel.op_type, kr.kernel.accelerator)].append((kr.end_ns - kr.start_ns) / 1000)
        total = sum(sum(v) for v in groups.values()) or 1.0
        out = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
        with open(folder / "op_statistic.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow((["Device_id"] if with_dev else []) + OP_STATISTIC_HEADER)
            for (op_type, core), v in out:
                w.writerow(([dev] if with_dev else []) + [
                    op_type, core, len(v), round(sum(v), 3), round(min(v), 3), round(sum(v) / len(v), 3),
                    round(max(v), 3), round(100 * sum(v) / total, 3)])
        op_stat_rows = len(out)
        files.append("op_statistic.csv")
        # api_statistic.csv: CANN_API grouped by (level, name)
        agroups: Dict[tuple, List[float]] = defaultdict(list)
        for start, end, typ, _tid, _conn, name in tl.cann_rows:
            agroups[(_API_LEVEL.get(typ, str(typ)), name)].append((end - start) / 1000)
            if level == "level2" and name == "launch":
                agroups[("runtime", "KernelLaunch")].append((end - start - 600) / 1000)
        with open(folder / "api_statistic.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow((["Device_id"] if with_dev else []) + API_STATISTIC_HEADER)
            for (lvl, name), v in sorted(agroups.items()):
                w.writerow(([dev] if with_dev else []) + [
                    lvl, name, round(sum(v), 2), len(v), round(sum(v) / len(v), 3), round(min(v), 2),
                    round(max(v), 2), round(statistics.pvariance(v), 3)])
        api_rows = len(agroups)
        files.append("api_statistic.csv")
    # operator_details.csv: one row per framework op record (PYTORCH_API type 50001)
    dev_by_row: Dict[int, float] = defaultdict(float)
    for kr in kernels:
        if kr.host_row is not None:
            dev_by_row[kr.host_row] += (kr.end_ns - kr.start_ns) / 1000
    op_rows = 0
    with open(folder / "operator_details.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(OPERATOR_DETAILS_HEADER)
        for i, r in enumerate(tl.api_rows):
            start, end, _thread, name, typ, _pc, _seq, _fwd, shapes, _dtypes, stack, _idx = r
            if typ != 50001:
                continue
            shp = ";\n".join(shapes.split(";")) if shapes else ""
            stk = ";\n".join(stack) if (with_stack and stack) else ""
            host = round((end - start) / 1000, 2)
            dev = dev_by_row.get(i, 0)
            dev_total = dev if dev else dev_by_row.get(i + 1, 0)   # parent row aggregates its ACL child
            w.writerow([name, shp, stk, host, host, dev, dev_total, dev, dev_total])
            op_rows += 1
    files.append("operator_details.csv")
    return {"folder": str(folder), "files": files, "kernel_rows": len(rows), "op_statistic_rows": op_stat_rows,
            "api_statistic_rows": api_rows, "operator_rows": op_rows, "op_type_counts": dict(counts)}
