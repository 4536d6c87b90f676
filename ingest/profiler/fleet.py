"""Ingest on a Ray cluster: one Ray task per capture, on the node that holds it (``--ray``).

verl already runs on Ray, so a fleet-size ingest uses that engine instead of building one. The flow
(:class:`RayFleet`, entered with :func:`ray_fleet`):

1. **Probe**: one task per alive node (hard node affinity, 0 CPUs) reports the node's host name and
   addresses, the cores Ray gives it, its DuckDB memory limit (``$TILAKE_MEMORY_LIMIT`` of the driver
   when set, else :func:`tilake.settings.default_memory_limit` of that node), and runs the caller's
   discovery on the paths that exist there (captures live on each node's local disk). The same absolute
   path seen by several nodes with the same size and mtime is one file on shared storage; with
   different ones the ingest stops (the nodes disagree about the file).
2. **Placement** per capture (:meth:`RayFleet.placement`): the host named by the capture — the
   ``<host>_<pid>_<ts>_ascend_pt`` folder name, else ``hostname`` in ``profiler_metadata.json``, else
   ``HOST_INFO.hostName`` of the DB — matched to a node's host name or address. Only one node sees
   the file: hard :class:`ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy` on it. Several
   do (shared storage): soft affinity to the named host when it is one of them, else Ray's default.
3. **Tasks**: each capture is ingested by :func:`tilake.ingest.profiler.load._run_one` (the threaded
   path's own function) in a worker of its node, through a writer on the lake's staging folder —
   which every node must see (the lake on shared storage; a node that does not see it fails its task
   with that said). Memory per task: the node's limit split as the threaded path splits it
   (``_workers_for``/``_share_of``: at least 256 MiB a task, cores/n threads), the task asking Ray for
   cores/n CPUs so at most n run at once on the node. File names ``part-t<capture index>-<seq>`` never
   clash. ``max_retries=0``: a lost task is reported, not silently re-run.
4. **Completeness** (:meth:`RayFleet.check_complete`): every task returned; every Parquet file it
   reported is in staging with the row count it reported (Parquet footers); no other file is there.
   Then the caller (:func:`tilake.ingest.profiler.load.ingest_profile`) writes the captures and runs
   rows and :meth:`tilake.lake.store.Lake.write_run` commits by ``os.rename``, exactly as the threaded
   path. A failed or lost task (a worker killed, a node lost, an exception) raises one
   :class:`TilakeError` naming the capture; the other tasks are cancelled and the staging folder is
   removed, so the lake is unchanged.

Ray is optional (``pip install '.[ray]'``); :func:`require_ray` says so in one line. Ray API facts:
``ray.init``/``ray.remote``/``ray.wait``/``ray.cancel``/``ray.nodes`` and
``NodeAffinitySchedulingStrategy(node_id, soft)`` as documented for Ray 2.x (checked on 2.60.0).
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from tilake import settings
from tilake.errors import TilakeError
from tilake.ingest.profiler.discover import Capture
from tilake.ingest.profiler.load import CaptureResult, _run_one, _share_of, _workers_for, _WorkerWriter
from tilake.ingest.profiler.metadata import read_metadata
from tilake.lake.duck import connect, sql_str
from tilake.lake.store import Lake, RunWriter, lake_write_error

INSTALL_HINT = "install it from a tilake checkout: pip install '.[ray]'"
# torch_npu names the capture folder <host>_<pid>_<timestamp>_ascend_pt (reference §3.1; discover._PT_RE)
_HOST_RE = re.compile(r"^(?P<host>.+)_(\d+)_(\d{14,})_ascend_pt$")
_ADDRESS_RE = re.compile(r"^(auto|local|(ray://)?[A-Za-z0-9._\[\]:-]+:\d+)$")


def require_ray():
    """The ``ray`` module.

    Raises:
        TilakeError: ray is not installed (one line with the install command).
    """
    try:
        import ray
    except ImportError:
        raise TilakeError("--ray needs the ray package, which is not installed", hint=INSTALL_HINT) from None
    return ray


def check_address(address: str) -> str:
    """``address`` if it is ``auto``, ``local``, ``HOST:PORT`` or ``ray://HOST:PORT``.

    ``auto``: the Ray cluster this machine belongs to (``$RAY_ADDRESS`` or the one started with
    ``ray start``), else a local Ray started for this command; ``local``: always a new local Ray.
    Raises:
        TilakeError: anything else (a folder given right after ``--ray`` is read as its value).
    """
    if not _ADDRESS_RE.match(str(address)):
        raise TilakeError(f"--ray {address!r}: give auto, local or HOST:PORT (ray://HOST:PORT for Ray Client)",
                          hint="put --ray after the profiler_output folder, or write --ray auto")
    return address


def host_of(cap: Capture) -> Optional[str]:
    """The host the capture names: the ``<host>_<pid>_<ts>_ascend_pt`` folder name, else ``hostname`` /
    ``host_name`` in ``profiler_metadata.json``, else ``HOST_INFO.hostName`` of the DB (torch_npu DB
    schema, ``synth/tables.py``); None when none says. Reads files: run it where the capture is."""
    if cap.pt_dir is not None:
        m = _HOST_RE.match(Path(cap.pt_dir).name)
        if m:
            return m.group("host")
        md = read_metadata(cap.pt_dir)
        for k in ("hostname", "host_name", "host"):
            if isinstance(md.get(k), str) and md[k]:
                return md[k]
    if cap.kind == "db":
        with contextlib.suppress(sqlite3.Error, OSError):
            con = sqlite3.connect(f"file:{Path(cap.path).resolve()}?mode=ro&immutable=1", uri=True)
            try:
                row = con.execute("SELECT hostName FROM HOST_INFO LIMIT 1").fetchone()
            finally:
                con.close()
            if row and row[0]:
                return str(row[0])
    return None


def _stat(path: Path) -> Tuple[int, int]:
    try:
        st = Path(path).stat()
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns) if Path(path).is_file() else (-2, st.st_mtime_ns)


def _probe_node(find: Optional[Callable[..., List[Capture]]], memory_limit: Optional[str],
                roots: Sequence[str] = ()) -> Dict[str, Any]:
    """Ray task, one per node: who this node is, its memory limit, which of ``roots`` exist there and
    the captures it sees."""
    import ray

    out: Dict[str, Any] = {"hostname": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id(),
                           "cores": settings.cores(), "error": None, "captures": [],
                           "roots": [r for r in roots if Path(r).exists()]}
    try:
        out["ip"] = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - an address is only a matching hint
        out["ip"] = None
    try:
        out["memory_limit"] = settings.check_memory_limit(memory_limit) if memory_limit else settings.memory_limit()
        if find is not None:
            for cap in find(present_only=True):
                out["captures"].append({"capture": cap, "stat": _stat(cap.path), "host": host_of(cap),
                                        "metadata": read_metadata(cap.pt_dir)})
    except TilakeError as exc:
        out["error"] = str(exc)
    return out


class _TaskWriter(_WorkerWriter):
    """The run's writer inside one Ray task: the lake's staging folder, file names
    ``part-t<index>-<seq>.parquet``, its own DuckDB instance (memory share, threads) and a node-local
    spill folder; remembers every Parquet file it wrote with its row count (:meth:`RayFleet.check_complete`)."""

    def __init__(self, lake: Lake, run_id: str, tables: List[str], staging: Path, index: int,
                 memory: str, threads: int) -> None:
        super().__init__(RunWriter(lake, run_id, tables, staging), 0, memory, threads)
        self.file_prefix = f"part-t{index:05d}-"
        self.files: List[Tuple[str, int]] = []
        self.spill_dir = Path(tempfile.mkdtemp(prefix="tilake-ray-spill-"))
        self._last: Optional[Path] = None

    def _target(self, table: str, partition: Dict) -> Path:
        self._last = super()._target(table, partition)
        return self._last

    def copy_query(self, table: str, sql: str, partition=None, con=None, strings=()) -> int:
        n = super().copy_query(table, sql, partition, con=con, strings=strings)
        self.files.append((str(self._last), n))
        return n


def _peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)


def _ingest_task(lake_root: str, run_id: str, tables: List[str], staging: str, index: int, cap: Capture,
                 row: Dict, memory: str, threads: int) -> Dict[str, Any]:
    """Ray task: ingest capture ``index`` into the staging folder; returns its result or its error line."""
    t0 = time.perf_counter()
    where = f"node {socket.gethostname()}"
    if not Path(staging).is_dir():
        return {"error": f"the lake's staging folder {staging} is not visible on {where}: put the lake on "
                         "storage every node mounts at the same path (NFS, a parallel file system)"}
    lake = Lake(lake_root)
    w = _TaskWriter(lake, run_id, tables, Path(staging), index, memory, threads)
    try:
        res: CaptureResult = _run_one(cap, w, row, lambda _text: None)
    except TilakeError as exc:
        return {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - said in one line by the driver, never a traceback
        mapped = lake_write_error(lake.root, exc)
        return {"error": str(mapped) if mapped else f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"}
    finally:
        w._close()
        shutil.rmtree(w.spill_dir, ignore_errors=True)
    return {"error": None, "result": res, "row": row, "files": w.files, "rows_written": dict(w.rows_written),
            "hostname": socket.gethostname(), "pid": os.getpid(), "seconds": time.perf_counter() - t0,
            "peak_rss_kib": _peak_rss_kib(), "memory": memory, "threads": threads}


@dataclass
class NodePlan:
    """One Ray node as the ingest uses it.

    Attributes:
        node_id: Ray node id (hex). hostname / ip: what the probe task read there.
        cpus: the node's ``CPU`` resource in Ray. memory_limit: DuckDB size text of the node.
        tasks: captures ingested at once there (``_workers_for``). memory: DuckDB limit of one task
            (``_share_of``). threads: DuckDB threads = CPUs asked of Ray per task.
    """

    node_id: str
    hostname: str
    ip: Optional[str]
    cpus: int
    memory_limit: str
    tasks: int
    memory: str
    threads: int


@dataclass
class RayFleet:
    """A Ray cluster connected for one ingest: its nodes, where each capture lives, the task runs.

    Obtained from :func:`ray_fleet`. ``stats`` holds one dict per finished task (capture index,
    host, pid, seconds, peak RSS of its worker process in KiB, memory share, threads) for benchmarks.
    """

    nodes: Dict[str, NodePlan] = field(default_factory=dict)
    seen: Dict[str, List[str]] = field(default_factory=dict)      # capture path → node ids that see it
    hosts: Dict[str, Optional[str]] = field(default_factory=dict)  # capture path → host it names
    meta: Dict[str, Dict] = field(default_factory=dict)           # capture path → profiler_metadata.json
    stats: List[Dict[str, Any]] = field(default_factory=list)
    memory_override: Optional[str] = None
    # the function each Ray task runs (a test swaps in one that kills its worker mid-ingest)
    task_fn: Callable[..., Dict[str, Any]] = _ingest_task

    # ------------------------------------------------------------------ probe and discovery
    def probe(self, find: Optional[Callable[..., List[Capture]]] = None, roots: Sequence[str] = ()) -> List[Capture]:
        """Run :func:`_probe_node` on every alive node; fill :attr:`nodes`, :attr:`seen`, :attr:`hosts`,
        :attr:`meta`; return the union of the captures the nodes found (``find(present_only=True)`` on
        each; each absolute path once), not yet deduplicated. ``roots``: the paths the user named (the
        profiler_output folder, ``--train``/``--infer``); each must exist on at least one node.

        Raises:
            TilakeError: no alive node; a node's discovery failed (bad capture: named); one path is
            a different file on two nodes; a named path exists on no node.
        """
        ray = require_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = [n for n in ray.nodes() if n.get("Alive")]
        if not alive:
            raise TilakeError("the Ray cluster has no alive node")
        remote = ray.remote(_probe_node)
        refs = {n["NodeID"]: remote.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote(find, self.memory_override, list(roots)) for n in alive}
        seen_roots: set = set()
        caps: Dict[str, Capture] = {}
        stat: Dict[str, Tuple[Tuple[int, int], str]] = {}
        for n in alive:
            nid = n["NodeID"]
            try:
                out = ray.get(refs[nid])
            except ray.exceptions.RayError as exc:
                raise TilakeError(f"Ray node {n.get('NodeManagerHostname') or nid[:8]}: the probe task failed "
                                  f"({type(exc).__name__}: {_first_line(exc)})") from None
            if out["error"]:
                raise TilakeError(f"on Ray node {out['hostname']}: {out['error']}")
            seen_roots.update(out["roots"])
            cpus = max(1, int(n.get("Resources", {}).get("CPU", out["cores"]) or 1))
            k = _workers_for(out["memory_limit"], cpus)
            self.nodes[nid] = NodePlan(nid, out["hostname"], out.get("ip") or n.get("NodeManagerAddress"), cpus,
                                       out["memory_limit"], k, _share_of(out["memory_limit"], k), max(1, cpus // k))
            for c in out["captures"]:
                cap, key = c["capture"], str(c["capture"].path)
                if key in stat and stat[key][0] != tuple(c["stat"]):
                    raise TilakeError(f"{key}: a different file on Ray nodes {stat[key][1]} and {out['hostname']} "
                                      "(size or modification time differ); name each node's captures by a path "
                                      "of its own")
                stat.setdefault(key, (tuple(c["stat"]), out["hostname"]))
                self.seen.setdefault(key, []).append(nid)
                caps.setdefault(key, cap)
                self.hosts.setdefault(key, c["host"])
                self.meta.setdefault(key, c["metadata"])
        lost = [r for r in roots if r not in seen_roots]
        if lost:
            raise TilakeError(f"{lost[0]}: does not exist on any of the {len(alive)} Ray node(s) "
                              f"({', '.join(sorted(p.hostname for p in self.nodes.values()))})")
        if find is not None and not caps:
            raise TilakeError(f"no profiler capture was found on any of the {len(alive)} Ray node(s) in "
                              + ", ".join(roots or ["the given paths"]))
        return list(caps.values())

    def metadata(self, cap: Capture) -> Dict:
        """``profiler_metadata.json`` of ``cap`` as read on its node (``{}`` when absent); read here when
        the capture was not found by :meth:`probe` (a caller that discovered on the driver)."""
        key = str(cap.path)
        return self.meta[key] if key in self.meta else read_metadata(cap.pt_dir)

    def placement(self, cap: Capture) -> Tuple[Optional[str], bool, str]:
        """``(node_id, soft, why)`` for ``cap``; node_id None = Ray's default scheduling."""
        key = str(cap.path)
        seen = self.seen.get(key) or list(self.nodes)
        host = self.hosts.get(key)
        named = [nid for nid in seen if host and _same_host(host, self.nodes[nid])] if host else []
        if named:
            return named[0], len(seen) > 1, f"host {host}"
        if len(seen) == 1:
            return seen[0], False, "the only node that sees the file"
        if len(seen) < len(self.nodes):
            return seen[hash(key) % len(seen)], True, "a node that sees the file"
        return None, True, "shared storage, host unknown"

    # ------------------------------------------------------------------ the ingest
    def run(self, w: RunWriter, captures: Sequence[Capture], rows: List[Dict], bar, task) -> List[CaptureResult]:
        """Ingest ``captures`` as Ray tasks into ``w``'s staging folder; results in input order
        (``rows[i]`` is updated with what the task filled in). See the module docstring.

        Raises:
            TilakeError: a task failed or was lost (capture named; others cancelled); staged files
            are incomplete (:meth:`check_complete`); Ctrl-C. The caller's ``write_run`` then removes
            the staging folder: the lake is unchanged.
        """
        ray = require_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not self.nodes:
            self.probe(None)
        fallback = min(self.nodes.values(), key=lambda p: settings.size_bytes(p.memory) or 0)
        remote = ray.remote(self.task_fn)
        refs, index = [], {}
        for i, cap in enumerate(captures):
            nid, soft, _why = self.placement(cap)
            plan = self.nodes.get(nid, fallback) if nid else fallback
            opts: Dict[str, Any] = {"num_cpus": plan.threads, "max_retries": 0}
            if nid:
                opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(nid, soft=soft)
            ref = remote.options(**opts).remote(str(w.lake.root), w.run_id, list(w.tables), str(w.staging), i,
                                                cap, rows[i], plan.memory, plan.threads)
            refs.append(ref)
            index[ref] = i
        results: List[Optional[CaptureResult]] = [None] * len(captures)
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    i = index[ref]
                    try:
                        out = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        raise TilakeError(f"{_label(captures[i])}: the Ray ingest task was lost "
                                          f"({type(exc).__name__}: {_first_line(exc)}); the lake is unchanged") from None
                    if out["error"]:
                        raise TilakeError(f"{_label(captures[i])}: {out['error']}")
                    results[i] = out["result"]
                    rows[i].clear()
                    rows[i].update(out["row"])
                    for t, k in out["rows_written"].items():
                        w.rows_written[t] = w.rows_written.get(t, 0) + k
                    self.stats.append({"index": i, **{k: out[k] for k in ("hostname", "pid", "seconds",
                                                                            "peak_rss_kib", "memory", "threads")},
                                       "files": out["files"]})
                    bar.advance(task)
        except BaseException as exc:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            with contextlib.suppress(Exception):   # let the cancelled tasks die before staging goes
                ray.wait(pending, num_returns=len(pending), timeout=30)
            if isinstance(exc, KeyboardInterrupt):
                raise TilakeError("interrupted by the user; the lake is unchanged") from exc
            raise
        self.check_complete(w, captures)
        return results

    def check_complete(self, w: RunWriter, captures: Sequence[Capture]) -> None:
        """Every task's reported files are in staging with their row counts; no other data file is.

        Raises:
            TilakeError: a file is missing or has other rows (capture named), or an unreported file
            is in staging (a task presumed dead still wrote).
        """
        by_task = {s["index"]: s["files"] for s in self.stats}
        missing = [i for i in range(len(captures)) if i not in by_task]
        if missing:
            raise TilakeError(f"{_label(captures[missing[0]])}: no result from its Ray task; the lake is unchanged")
        want = {os.path.realpath(p): (n, i) for i, files in by_task.items() for p, n in files}
        have = {os.path.realpath(p) for t in w.tables
                for p in (w.staging / t / f"run_id={w.run_id}").rglob("*.parquet")}
        extra = sorted(have - set(want))
        if extra:
            raise TilakeError(f"unexpected file in the staging folder, written by no finished Ray task: {extra[0]}; "
                              "the lake is unchanged")
        gone = [p for p in want if p not in have]
        if gone:
            raise TilakeError(f"{_label(captures[want[gone[0]][1]])}: its staged file {gone[0]} is missing "
                              "(shared storage lost it?); the lake is unchanged")
        if not want:
            return
        con = connect()
        try:
            got = dict(con.execute("SELECT file_name, sum(num_rows)::BIGINT FROM parquet_file_metadata(["
                                   + ", ".join(sql_str(p) for p in want) + "]) GROUP BY 1").fetchall())
        finally:
            con.close()
        for p, (n, i) in want.items():
            if got.get(p, 0) != n:
                raise TilakeError(f"{_label(captures[i])}: staged file {p} holds {got.get(p, 0)} rows, its Ray task "
                                  f"wrote {n}; the lake is unchanged")


def _label(cap: Capture) -> str:
    return f"{cap.side} rank {cap.rank} ({cap.path})"


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def _same_host(host: str, node: NodePlan) -> bool:
    h = host.lower()
    names = {node.hostname.lower(), node.hostname.lower().split(".")[0], (node.ip or "").lower()}
    return h in names or h.split(".")[0] in names


@contextlib.contextmanager
def ray_fleet(address: str = "auto", num_cpus: Optional[int] = None) -> Iterator[RayFleet]:
    """Connect to (or start) Ray for one command and yield a :class:`RayFleet`; disconnect after.

    Args:
        address: ``auto`` (``ray.init()``: ``$RAY_ADDRESS`` or the cluster this machine joined, else a
            new local Ray), ``local`` (a new local Ray), ``HOST:PORT`` / ``ray://HOST:PORT``.
        num_cpus: CPUs of a local Ray started here (default: this machine's cores).
    A Ray this process already initialised is used as it is and left running.
    Raises:
        TilakeError: ray not installed; bad address; Ray could not start or connect.
    """
    ray = require_ray()
    check_address(address)
    started = False
    if not ray.is_initialized():
        kw: Dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
        if address in ("auto", "local"):
            kw["num_cpus"] = num_cpus
        try:
            if address == "local":
                ray.init(address="local", **kw)
            elif address == "auto":
                ray.init(**kw)
            else:
                ray.init(address=address, **{k: v for k, v in kw.items() if k != "include_dashboard"})
        except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError …
            raise TilakeError(f"--ray {address}: Ray did not start or connect ({type(exc).__name__}: "
                              f"{_first_line(exc)})") from None
        started = True
    fleet = RayFleet(memory_override=settings.memory_limit_given())
    try:
        yield fleet
    finally:
        if started:
            with contextlib.suppress(Exception):
                ray.shutdown()
