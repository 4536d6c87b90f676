"""Stage 3b of ``tilake scan``: verify the captures, ``analyse()`` raw folders, fall back.

Seed stages 3.2–3.4, reference doc §3:

* training: ``e2e/**/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler*.db`` (verl exports Db and
  parses on the fly);
* inference: raw ``agent_loop_rollout_replica_*/<name>_<pid>_<ts>_ascend_pt/`` folders (vllm-ascend
  exports Text and usually cannot parse inside its daemon worker) → ``analyse(path)`` through
  the seam, then ``COMPUTE_TASK_INFO`` must have rows.

Fallback chain per raw folder, every step recorded:
(1) no DB after ``analyse(path)`` → ``analyse(path, export_type=['db'])`` where the torch_npu
version supports it; (2) a DB whose ``COMPUTE_TASK_INFO`` is empty (or still no DB) →
host-side CSVs (``api_statistic.csv`` / ``operator_details.csv``), side labelled
"host-side fallback, not device"; (3) both fail → the comparison is skipped and the report lists
every operation attempted with its result.

Warnings that are normal when a Text-mode capture is parsed ("Failed to get acl to npu flow
events", "Failed to get task data from db", "no such table: TASK") are recognised and explained,
not counted as failures. DBs are opened with ``mode=ro&immutable=1`` so no ``-wal``/``-shm`` file
appears beside them (reference doc, traps).
"""
from __future__ import annotations

import re
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tilake.errors import TilakeError
from tilake.files import atomic_write_json
from tilake.ingest.profiler.db import check_header, readable_copy
from tilake.ingest.profiler.discover import is_raw, pt_dbs
from tilake.ingest.profiler.metadata import empty_reason
from tilake.ingest.scan.seam import NpuProbe, NpuSeam
from tilake.lake.duck import sqlite_ro
from tilake.progress import Display
from tilake.vocab import Evidence

STAGE3_FILE = "tilake_scan_stage3.json"
FORMAT = "tilake-scan-stage3/1"
HOST_FALLBACK_LABEL = "host-side fallback, not device"
HOST_CSVS = ("api_statistic.csv", "operator_details.csv")
TRACE_LABEL = "PyTorch-profiler trace (device kernels, or CPU ops where no device ran)"
DEVICE_CSVS = ("kernel_details.csv", "op_statistic.csv")

#: (pattern, explanation) of analyse() warnings that are normal for export_type=Text captures (seed §3.3)
KNOWN_WARNINGS: List[Tuple[str, str]] = [
    ("Failed to get acl to npu flow events",
     "normal for a Text-mode capture: the device binaries under device_*/data are empty, so flow events "
     "cannot be linked; device operators are restored from the host-side CANN_API records"),
    ("Failed to get task data from db",
     "normal for a Text-mode capture: msprof's task table is absent; COMPUTE_TASK_INFO is rebuilt from "
     "CANN_API (api_event) records"),
    ("no such table: TASK",
     "normal for a Text-mode capture (device data empty); not a failure as long as COMPUTE_TASK_INFO has rows"),
]


def _ro_connect(db: Path) -> sqlite3.Connection:
    return sqlite_ro(db)


def compute_task_rows(db: Path) -> Tuple[Optional[int], str]:
    """Rows in ``COMPUTE_TASK_INFO`` of ``db`` (read-only, immutable: nothing is created beside it).

    Returns:
        ``(rows, note)``; rows is None when the file cannot be read as SQLite, 0 with a note
        when the table is absent.
    """
    try:
        wal = check_header(db)        # a FIFO, a non-SQLite or truncated file: its own line
    except TilakeError as exc:
        return None, "not readable as SQLite: " + str(exc).replace(f"{db}: ", "")
    try:
        # a WAL-mode DB whose rows sit in its -wal, or one with a hot -journal: read as SQLite would, in a copy
        with readable_copy(db, wal) as readable:
            con = _ro_connect(readable)
            try:
                has = con.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND "
                                  "name='COMPUTE_TASK_INFO'").fetchone()[0]
                if not has:
                    return 0, "no COMPUTE_TASK_INFO table"
                return int(con.execute("SELECT count(*) FROM COMPUTE_TASK_INFO").fetchone()[0]), ""
            finally:
                con.close()
    except TilakeError as exc:
        return None, str(exc).replace(f"{db}: ", "")
    except sqlite3.DatabaseError as exc:
        return None, f"not readable as SQLite: {exc}"


def _csv_with_rows(pt_dir: Path, names: Sequence[str]) -> Optional[Path]:
    """The first of ``names`` in ``ASCEND_PROFILER_OUTPUT`` that has a header and at least one row."""
    out = pt_dir / "ASCEND_PROFILER_OUTPUT"
    for name in names:
        p = out / name
        try:
            if p.is_file():
                with p.open(encoding="utf-8-sig", errors="replace") as fh:
                    if sum(1 for ln in fh if ln.strip()) > 1:
                        return p
        except OSError:
            continue
    return None


def _host_csv(pt_dir: Path) -> Optional[Path]:
    """``api_statistic.csv`` / ``operator_details.csv`` with rows: the host-side fallback."""
    return _csv_with_rows(pt_dir, HOST_CSVS)


def _device_csv(pt_dir: Path) -> Optional[Path]:
    """``kernel_details.csv`` / ``op_statistic.csv`` with rows: device-side rows in text form."""
    return _csv_with_rows(pt_dir, DEVICE_CSVS)


@dataclass
class SourceState:
    """One ``*_ascend_pt`` folder after stage 3.

    Attributes:
        side: train | infer. path: the folder (relative to profiler_output when possible).
        status: ``device`` (COMPUTE_TASK_INFO has rows, or a text export's kernel_details.csv /
        op_statistic.csv has rows) | ``host_fallback`` | ``failed``.
        db: DB file or None. compute_task_info_rows: rows or None. fallback: None |
        ``export_type_db`` | ``text_export`` | ``host_csv``. csv: the CSV used. label: text for the report.
    """

    side: str
    path: str
    status: str
    db: Optional[str] = None
    compute_task_info_rows: Optional[int] = None
    fallback: Optional[str] = None
    csv: Optional[str] = None
    label: str = ""
    note: str = ""


@dataclass
class Stage3:
    """Everything stage 3 did; serialised to ``profiler_output/tilake_scan_stage3.json``."""

    output_dir: str
    seam: str
    real: bool
    operations: List[Dict[str, Any]] = field(default_factory=list)
    sources: List[SourceState] = field(default_factory=list)
    known_warnings: List[Dict[str, Any]] = field(default_factory=list)
    run: Optional[Dict[str, Any]] = None

    def op(self, side: str, target: str, operation: str, result: str, detail: str = "",
           fallback: Optional[str] = None, log: Optional[str] = None) -> None:
        """Record one operation (``result`` ∈ ok | failed | skipped | found | missing)."""
        self.operations.append({"n": len(self.operations) + 1, "side": side, "target": target,
                                "operation": operation, "result": result, "detail": detail,
                                "fallback": fallback, "log": log, "seam": self.seam, "real": self.real})

    def side_status(self, side: str) -> str:
        """``device`` | ``trace`` | ``host_fallback`` | ``failed`` for a side (best source wins)."""
        st = [s.status for s in self.sources if s.side == side]
        if "device" in st:
            return "device"
        if "trace" in st:
            return "trace"
        if "host_fallback" in st:
            return "host_fallback"
        return "failed"

    @property
    def comparison_possible(self) -> bool:
        """Both sides have device or host-fallback evidence (else fallback 3: skip the comparison)."""
        return all(self.side_status(s) != "failed" for s in ("train", "infer"))

    def lines(self) -> List[str]:
        """One line per operation, for reports and the console."""
        out = []
        for o in self.operations:
            fb = f" [fallback: {o['fallback']}]" if o.get("fallback") else ""
            who = "" if o.get("real") else f" [{o['seam']}]"
            out.append(f"{o['n']}. {o['side']} `{o['target']}`: {o['operation']} → {o['result']}"
                       f"{(' — ' + o['detail']) if o['detail'] else ''}{fb}{who}")
        return out

    def to_json(self) -> Dict[str, Any]:
        """The stage-3 record (format ``tilake-scan-stage3/1``); see README "tilake scan"."""
        sides = {}
        for s in ("train", "infer"):
            st = self.side_status(s)
            sides[s] = {"status": st,
                        "label": {"device": "device", "host_fallback": HOST_FALLBACK_LABEL, "trace": TRACE_LABEL,
                                  "failed": Evidence.MISSING}[st],
                        "sources": [asdict(x) for x in self.sources if x.side == s]}
        return {"format": FORMAT, "output_dir": self.output_dir, "seam": self.seam, "real": self.real,
                "comparison": "run" if self.comparison_possible else "skipped",
                "reason": "" if self.comparison_possible else _skip_reason(self),
                "sides": sides, "operations": self.lines(), "records": self.operations,
                "known_warnings": self.known_warnings, "run": self.run}


def _skip_reason(st: Stage3) -> str:
    bad = [s for s in ("train", "infer") if st.side_status(s) == "failed"]
    return ("no usable evidence on the " + " and ".join(bad) + " side" + ("s" if len(bad) > 1 else "")
            + " after every fallback: stages 4–5 (comparison) skipped")


def _rel(p: Path, root: Path) -> str:
    try:
        return str(p.relative_to(root))
    except ValueError:
        return str(p)


def _scan_warnings(st: Stage3, log: Optional[str]) -> None:
    if not log:
        return
    try:
        text = Path(log).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for pat, why in KNOWN_WARNINGS:
        n = text.count(pat)
        if n:
            hit = next((w for w in st.known_warnings if w["pattern"] == pat), None)
            if hit:
                hit["count"] += n
            else:
                st.known_warnings.append({"pattern": pat, "count": n, "explanation": why, "failure": False})


def _check_db(st: Stage3, side: str, pt: Path, root: Path, after: str) -> Tuple[Optional[Path], Optional[int], str]:
    dbs = pt_dbs(pt)
    if not dbs:
        st.op(side, _rel(pt, root), f"look for ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler*.db {after}",
              "missing")
        return None, None, "no DB"
    best: Tuple[Optional[Path], Optional[int], str] = (dbs[0], None, "")
    for db in dbs:
        n, note = compute_task_rows(db)
        st.op(side, _rel(db, root), "SELECT count(*) FROM COMPUTE_TASK_INFO",
              "ok" if n else "failed", note or f"{n} rows")
        if n and (best[1] is None or n > best[1]):
            best = (db, n, "")
        elif best[1] is None:
            best = (db, n, note)
    return best


def collect(output_dir: Path, seam: NpuSeam, probe: Optional[NpuProbe], env: Optional[Mapping[str, str]] = None,
            run_analyse: bool = True, console: Optional[Display] = None) -> Stage3:
    """Verify a verl ``profiler_output`` tree and parse raw folders, with the fallback chain.

    Args:
        output_dir: the ``global_profiler.save_path`` folder.
        seam: NPU seam used for ``analyse()``. probe: its probe (``analyse_export_type`` decides
            whether fallback 1 is possible; None = try it).
        run_analyse: False records what is there without parsing anything (``--from-output``).
        console: shows a spinner while ``analyse()`` runs (it can take minutes on a real capture).
    Returns:
        :class:`Stage3` (also written to ``<output_dir>/tilake_scan_stage3.json`` by the caller).
    """
    root = Path(output_dir)
    st = Stage3(str(root), seam.name, seam.real)
    if not root.is_dir():
        st.op("train", str(root), "find profiler_output", "missing", "the folder does not exist")
        return st
    pts = sorted(p for p in root.rglob("*_ascend_pt") if p.is_dir()
                 and not any(x.endswith("_ascend_pt") for x in p.relative_to(root).parts[:-1]))
    train = [p for p in pts if "e2e" in p.relative_to(root).parts or not _infer_path(p, root)]
    infer = [p for p in pts if _infer_path(p, root)]
    loose = [db for db in sorted(root.glob("e2e/**/ascend_pytorch_profiler*.db"))
             if not any(x.endswith("_ascend_pt") for x in db.relative_to(root).parts)]
    st.op("train", "e2e/", "find training captures (e2e/**/*_ascend_pt)", "found" if train or loose else "missing",
          f"{len(train)} folder(s)" + (f", {len(loose)} loose DB(s)" if loose else ""))
    st.op("infer", "agent_loop_rollout_replica_*/", "find inference captures (*_ascend_pt)",
          "found" if infer else "missing", f"{len(infer)} folder(s)")
    for db in loose:
        n, note = compute_task_rows(db)
        st.sources.append(SourceState("train", _rel(db, root), "device" if n else "failed", _rel(db, root), n,
                                      label=Evidence.DEVICE if n else Evidence.MISSING, note=note))
    for side, group in (("train", train), ("infer", infer)):
        for pt in group:
            st.sources.append(_one(st, side, pt, root, seam, probe, env, run_analyse, console))
    if not infer:
        st.sources.append(SourceState("infer", "agent_loop_rollout_replica_*", "failed",
                                      note="no *_ascend_pt folder under agent_loop_rollout_replica_*: the rollout "
                                      "profiler (discrete=True) wrote nothing"))
    if not train and not loose:
        st.sources.append(SourceState("train", "e2e", "failed", note="no training capture under e2e/"))
    return st


def _infer_path(p: Path, root: Path) -> bool:
    head = "/".join(p.relative_to(root).parts[:2]).lower()
    return any(h in head for h in ("rollout", "agent_loop", "vllm", "generate"))


def _analyse(seam: NpuSeam, pt: Path, export_type, log: Path, env, console: Optional[Display]):
    what = f"analyse({pt.name}{', export_type=' + str(export_type) if export_type else ''}) via {seam.name} …"
    if console is None:
        return seam.analyse(pt, export_type, log, env)
    with console.status(what):
        return seam.analyse(pt, export_type, log, env)


def _one(st: Stage3, side: str, pt: Path, root: Path, seam: NpuSeam, probe: Optional[NpuProbe],
         env: Optional[Mapping[str, str]], run_analyse: bool, console: Optional[Display] = None) -> SourceState:
    rel = _rel(pt, root)
    db, n, note = _check_db(st, side, pt, root, "(as collected)")
    if n:
        st.op(side, rel, "analyse()", "skipped", "already parsed during the run")
        return SourceState(side, rel, "device", _rel(db, root), n, label="device")
    if db is None and not is_raw(pt) and _host_csv(pt) is None:
        why = empty_reason(pt)  # "empty …" or what it holds instead (analysis.db, communication*.json, …)
        st.op(side, rel, "inspect folder", "failed", why)
        return SourceState(side, rel, "failed", note=why, label=Evidence.MISSING)
    logs = root / "tilake_scan_logs"
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", rel)
    if db is None and run_analyse and is_raw(pt):
        res = _analyse(seam, pt, None, logs / f"analyse_{safe}.log", env, console)
        _scan_warnings(st, res.log_path)
        st.op(side, rel, f"analyse('{rel}')", "ok" if res.ok else "failed", res.error or "", log=res.log_path)
        db, n, note = _check_db(st, side, pt, root, "after analyse()")
        if n:
            return SourceState(side, rel, "device", _rel(db, root), n, label="device")
        if db is None:
            # fallback 1: explicit DB export
            if probe is not None and probe.analyse_export_type is False:
                st.op(side, rel, f"analyse('{rel}', export_type=['db'])", "skipped",
                      "this torch_npu's analyse() has no export_type parameter (needs >= 7.1.0 / CANN 8.2.RC1)",
                      fallback="1: export_type=['db']")
            else:
                res = _analyse(seam, pt, ["db"], logs / f"analyse_db_{safe}.log", env, console)
                _scan_warnings(st, res.log_path)
                st.op(side, rel, f"analyse('{rel}', export_type=['db'])", "ok" if res.ok else
                      ("skipped" if res.unsupported else "failed"), res.error or "",
                      fallback="1: export_type=['db']", log=res.log_path)
                db, n, note = _check_db(st, side, pt, root, "after analyse(export_type=['db'])")
                if n:
                    return SourceState(side, rel, "device", _rel(db, root), n, fallback="export_type_db",
                                       label="device")
    elif db is None and not run_analyse and is_raw(pt):
        st.op(side, rel, "analyse()", "skipped", "recorded output is not modified (--from-output); run "
              f"torch_npu.profiler.profiler.analyse('{pt}') on the Ascend host")
    why = ("DB present but COMPUTE_TASK_INFO is empty" if db is not None and n == 0
           else "DB unreadable: " + note if db is not None else "no DB")
    # a text export with device rows (kernel_details.csv / op_statistic.csv) is device evidence
    dev = _device_csv(pt)
    if dev is not None:
        st.op(side, _rel(dev, root), f"use the text export's device rows ({why})", "ok",
              "device rows in text form (source kind text)")
        return SourceState(side, rel, "device", _rel(db, root) if db else None, n, fallback="text_export",
                           csv=_rel(dev, root), label="device (text export)", note=why)
    # fallback 2: host-side CSVs
    csv = _host_csv(pt)
    if csv is not None:
        st.op(side, _rel(csv, root), f"use host-side CSV ({why})", "ok", HOST_FALLBACK_LABEL,
              fallback="2: host-side CSV")
        return SourceState(side, rel, "host_fallback", _rel(db, root) if db else None, n, fallback="host_csv",
                           csv=_rel(csv, root), label=HOST_FALLBACK_LABEL, note=why)
    st.op(side, rel, f"look for {' / '.join(HOST_CSVS)} ({why})", "missing", fallback="2: host-side CSV")
    return SourceState(side, rel, "failed", _rel(db, root) if db else None, n, note=why + "; no host-side CSV",
                       label=Evidence.MISSING)


def collect_torch(output_dir: Path) -> Stage3:
    """Stage 3 for ``tilake scan --profiler torch``: find both sides' PyTorch-profiler traces in verl's layouts
    (:func:`tilake.ingest.profiler.discover.discover`: ``<role>_<scope>_step<N>_rank<r>-of-<ws>_pid<pid>_<ts>.json.gz``
    for training, ``agent_loop_rollout_replica_<r>/*.pt.trace.json.gz`` or relocated ``rollout-replica<r>_*`` for the
    rollout). Nothing is parsed here (no ``analyse()`` step exists for torch traces); vLLM's ``profiler_out_<r>.txt``
    is listed as recognised and not evidence.
    """
    from tilake.errors import TilakeError
    from tilake.ingest.profiler.discover import discover

    root = Path(output_dir)
    st = Stage3(str(root), "torch.profiler (verl global_profiler.tool=torch)", True)
    try:
        caps = [c for c in discover(root) if c.kind == "trace"]
    except TilakeError as exc:
        caps = []
        st.op("train", str(root), "find PyTorch-profiler traces", "missing", str(exc).split(" — ")[0])
    for side, where in (("train", "<role>_<scope>_step<N>_rank<r>-of-<ws>_pid<pid>_<ts>.json.gz"),
                        ("infer", "agent_loop_rollout_replica_*/*.pt.trace.json.gz, rollout-replica*_*")):
        mine = [c for c in caps if c.side == side]
        st.op(side, where, f"find {side} traces", "found" if mine else "missing", f"{len(mine)} trace(s)")
        for c in mine:
            rel = _rel(c.path, root)
            who = ", ".join(x for x in (c.role, f"RL step {c.rl_step}" if c.rl_step is not None else "") if x)
            st.sources.append(SourceState(side, rel, "trace", label=TRACE_LABEL, note=who))
            for ign in c.ignored:
                st.op(side, _rel(ign, root), "vLLM profiler summary table", "skipped",
                      "recognised, not evidence (a text rendering of the trace beside it)")
        if not mine:
            why = ("no training trace: are actor_rollout_ref.actor.profiler.enable=True and global_profiler.steps "
                   "reached?" if side == "train" else
                   "no rollout trace under agent_loop_rollout_replica_*: the rollout is traced only with "
                   "tool_config.torch discrete: true (verl vllm_async_server.py _should_profile)")
            st.sources.append(SourceState(side, where, "failed", note=why, label=Evidence.MISSING))
    return st


def write_stage3(st: Stage3, path: Path) -> Path:
    """Write the stage-3 JSON (UTF-8, indented)."""
    return atomic_write_json(path, st.to_json(), indent=2)
