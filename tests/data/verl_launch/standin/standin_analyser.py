"""Test stand-in for ``torch_npu.profiler.profiler.analyse(path)`` (no torch_npu here).

Usage: ``python standin_analyser.py RAW_ASCEND_PT_DIR MODE``. It turns a raw inference folder
written by tilake's own generator into a parsed one (or fails) to drive each branch of scan
stage 3. It prints the warnings real Text-mode parses print so their recognition is exercised.

Modes: ``db`` (parsed DB), ``text`` (CSV exports only), ``fail`` (exit 1, nothing written),
``nothing`` (exit 0, nothing written — a CANN that does not export the DB from a text parse),
``empty_cti`` (DB whose COMPUTE_TASK_INFO is empty + a host-side ``api_statistic.csv`` built
from the DB's CANN_API rows, Level = ENUM_API_TYPE name as msprof writes it), ``empty_cti_nocsv`` (empty COMPUTE_TASK_INFO, no CSV).
"""
from __future__ import annotations

import csv
import sqlite3
import sys
from pathlib import Path

from tilake.synth import write_analysed


def _db(raw: Path) -> Path:
    return sorted((raw / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler*.db"))[0]


def _api_statistic(db: Path, out: Path) -> None:
    con = sqlite3.connect(db)
    rows = con.execute("SELECT e.name, s.value, count(*), sum(a.endNs - a.startNs) FROM CANN_API a "
                       "JOIN STRING_IDS s ON a.name = s.id JOIN ENUM_API_TYPE e ON a.type = e.id "
                       "GROUP BY 1, 2 ORDER BY 3 DESC, 2").fetchall()
    con.close()
    with open(out, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Variance"])
        for level, name, n, total in rows:
            t = (total or 0) / 1000.0
            w.writerow(["0", level, name, f"{t:.3f}", n, f"{t / n:.3f}", f"{t / n:.3f}", f"{t / n:.3f}", "0"])


def main() -> int:
    raw, mode = Path(sys.argv[1]), sys.argv[2]
    print(f"[stand-in analyser] parsing {raw} (mode {mode}) — not torch_npu")
    if mode == "fail":
        print("[ERROR] stand-in analyser: parse failed", file=sys.stderr)
        return 1
    print("[WARNING] Failed to get acl to npu flow events")
    print("[WARNING] Failed to get task data from db: no such table: TASK")
    if mode == "nothing":
        return 0
    if mode == "text":
        write_analysed(raw, "text")
        return 0
    write_analysed(raw, "db")
    if mode in ("empty_cti", "empty_cti_nocsv"):
        db = _db(raw)
        con = sqlite3.connect(db)
        con.execute("DELETE FROM COMPUTE_TASK_INFO")
        con.commit()
        con.close()
        for f in (raw / "ASCEND_PROFILER_OUTPUT").glob("*.csv"):
            f.unlink()
        if mode == "empty_cti":
            _api_statistic(db, raw / "ASCEND_PROFILER_OUTPUT" / "api_statistic.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
