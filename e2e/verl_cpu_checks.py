"""The checks e2e/verl_cpu.sh and e2e/verl_cpu_dumps.sh share (imported by their check step, run with tilake's
Python): the scan's JSON, one ``ok``/``FAIL`` line per check, and the checks every scan of run_grpo.sh must pass."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List


class Checks:
    """``check(ok, what)`` prints one line and remembers failures; ``res`` is the scan's ``--format json``."""

    def __init__(self, work: str) -> None:
        self.work = Path(work)
        self.res = json.loads((self.work / "scan.json").read_text())
        self.fails: List[str] = []

    def __call__(self, ok: bool, what: str) -> None:
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            self.fails.append(what)

    def scan_basics(self, blocks: List[str], rescan: str) -> None:
        """Status ok; the backup byte-identical to the original; the script keeps each block (``blocks``: the
        marker words after ``# >>> tilake scan: ``); a second dry run plans no change (``rescan``: its words)."""
        res = self.res
        self(res["status"] == "ok", f"scan status ok (got {res['status']})")
        backup = Path(res["backup"]) if res.get("backup") else None
        self(backup is not None and backup.is_file() and backup.read_bytes() == (self.work / "original.sh").read_bytes(),
             f"backup {backup} is byte-identical to the original script")
        text = (self.work / "user" / "run_grpo.sh").read_text()
        self(all(f"# >>> tilake scan: {b}" in text for b in blocks), f"the script keeps the injected {' and '.join(blocks)}")
        self(json.loads((self.work / "rescan.json").read_text())["diff"] == "", f"a second {rescan} plans no change "
             "(idempotent)")

    def exit(self) -> None:
        sys.exit(1 if self.fails else 0)
