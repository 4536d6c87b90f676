"""Stream the events of one PyTorch-profiler Chrome trace into small CSV staging files.

A trace is read with ``ijson`` (C backend ``yajl2_c``) one event at a time, so memory stays
bounded whatever the file size: each event is routed to a CSV file in the staging folder and only
counters stay in memory. DuckDB then builds the lake tables from those files
(:mod:`tilake.ingest.torch.load`).

Format facts (Kineto's Chrome-trace writer as used by ``torch.profiler.profile.export_chrome_trace``
and ``tensorboard_trace_handler``; checked against a trace written by torch 2.13 on CPU):

* the file is one JSON object: header keys (``schemaVersion`` = 1, ``deviceProperties``,
  ``with_stack``, ``record_shapes``, ``baseTimeNanoseconds``, ``distributedInfo`` …) come *before*
  ``traceEvents``; a legacy autograd-profiler export (PyTorch < 1.8.1) is a bare JSON array;
* events are ``ph: X`` complete events with ``ts``/``dur`` in microseconds (float, 3 decimals).
  Absolute epoch time is ``baseTimeNanoseconds + ts * 1000`` when the header has the key;
* ``cat``: ``cpu_op`` (``aten::…`` and other operators; ``args``: ``External id``,
  ``Sequence number``, ``Fwd thread id``, ``Input Dims``, ``Input type`` when ``record_shapes``),
  ``kernel`` (device kernels; ``args``: ``External id``, ``correlation``, ``device``, ``stream``,
  ``grid``, ``block``), ``gpu_memcpy`` / ``gpu_memset`` (device copies, ``bytes``),
  ``cuda_runtime`` / ``cuda_driver`` (launch APIs, ``correlation``), ``user_annotation`` (CPU
  ``record_function`` ranges; ``ProfilerStep#N`` is one per ``prof.step()``),
  ``gpu_user_annotation`` (the same ranges on the device timeline), ``python_function``
  (``with_stack``: ``Python id`` / ``Python parent id``), flow events ``ph: s|f`` with
  ``cat: ac2g`` (launch → kernel, ``id`` = correlation), ``ph: M`` metadata;
* older Kineto spelled categories ``Kernel``, ``Memcpy``, ``Memset``, ``Runtime``, ``Operator``;
  they are mapped to the current names.
"""
from __future__ import annotations

import csv
import gzip
import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

import ijson

from tilake.errors import TilakeError

KNOWN_SCHEMA_VERSIONS = {1}
# category spellings → canonical category
CATEGORY = {
    "cpu_op": "cpu_op", "operator": "cpu_op", "Operator": "cpu_op",
    "kernel": "kernel", "Kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy", "Memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset", "Memset": "gpu_memset",
    "cuda_runtime": "cuda_runtime", "Runtime": "cuda_runtime", "cuda_driver": "cuda_driver",
    "user_annotation": "user_annotation", "gpu_user_annotation": "gpu_user_annotation",
    "python_function": "python_function",
}
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")

# staging CSV files and their columns (types are given to DuckDB's read_csv in load.py)
FILES = {
    "ops": ["idx", "name", "pid", "tid", "ts", "dur", "ext_id", "seq", "fwd_tid", "dims", "types"],
    "device": ["idx", "cat", "name", "pid", "tid", "ts", "dur", "ext_id", "corr", "device", "stream",
               "grid", "block", "bytes"],
    "runtime": ["corr", "ext_id", "name", "tid", "ts", "dur"],
    "ranges": ["cat", "name", "tid", "ts", "dur"],
    "py": ["py_id", "parent_id", "name", "pid", "tid", "ts", "dur"],
}


@dataclass
class TraceScan:
    """What one trace held, as counted while streaming it.

    Attributes:
        header: top-level scalar keys (``schemaVersion``, ``baseTimeNanoseconds``, …).
        device_names: ``deviceProperties[*].name`` (empty on CPU-only runs).
        counts: events per category (canonical names; ``ph:M`` as ``metadata``, flows as ``ac2g``,
            anything else by its own ``cat``). steps: ``ProfilerStep#N`` ranges seen.
        start_ns / end_ns: session bounds over all ``ph:X`` events (absolute ns).
        legacy: the file is a bare JSON array (autograd profiler, PyTorch < 1.8.1).
    """

    header: Dict = field(default_factory=dict)
    device_names: list = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    steps: int = 0
    start_ns: Optional[int] = None
    end_ns: Optional[int] = None
    legacy: bool = False

    @property
    def device_events(self) -> int:
        """Device kernels plus memcpy/memset events."""
        return sum(self.counts[c] for c in DEVICE_CATS)


def is_gzip(path: Path) -> bool:
    """Whether the file starts with the gzip magic bytes."""
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def open_trace(path: Path):
    """Binary stream of the trace's JSON text (gunzipped on the fly when the file is gzip)."""
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


class TruncatedTrace(TilakeError):
    """The trace's JSON or gzip stream ends early or is damaged. ``events`` = events read before that."""

    def __init__(self, message: str, path: Path, events: int = 0) -> None:
        super().__init__(message, path=path)
        self.reason = message
        self.events = events


def _truncated(path: Path, exc: Exception, events: int = 0) -> TruncatedTrace:
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return TruncatedTrace(f"truncated or corrupt trace: the JSON/gzip stream ends early or is damaged after "
                          f"{events} events ({detail}); re-export it (export_chrome_trace) or copy it again",
                          path, events)


def read_header(path: Path) -> TraceScan:
    """Read the top-level keys that precede ``traceEvents`` (stops there; reads only the head).

    Raises:
        TruncatedTrace: not JSON, or truncated before ``traceEvents``.
        TilakeError: no ``traceEvents`` key.
    """
    scan = TraceScan()
    try:
        with open_trace(path) as f:
            for prefix, event, value in ijson.parse(f, use_float=True):
                if prefix == "" and event == "start_array":
                    scan.legacy = True
                    return scan
                if prefix == "traceEvents" and event == "start_array":
                    return scan
                if "." not in prefix and event in ("string", "number", "boolean", "null") and prefix:
                    scan.header[prefix] = value
                elif prefix == "deviceProperties.item.name" and event == "string":
                    scan.device_names.append(value)
    except (ijson.JSONError, EOFError, OSError, zlib.error, UnicodeDecodeError) as exc:
        raise _truncated(path, exc) from exc
    raise TilakeError("not a Chrome trace: no traceEvents array", path=path)


def _ns(x) -> Optional[int]:
    return None if x is None else round(float(x) * 1000)


def _event_ns(e: dict, key: str, idx: int, path: Path) -> Optional[int]:
    """``e[key]`` (µs) as integer ns, or None when absent.

    Raises:
        TilakeError: not a number, not finite, or beyond 2**62 ns (year 2116): names the
            event (index in ``traceEvents``, name, ``ph``) and the field, not the staging CSV.
    """
    x = e.get(key)
    if x is None:
        return None
    try:
        v = float(x)
        ns = round(v * 1000)
    except (TypeError, ValueError, OverflowError):
        ns = None
    if ns is None or abs(ns) > (1 << 62):
        raise TilakeError(f"traceEvents[{idx - 1}] (name {str(e.get('name'))[:80]!r}, ph {e.get('ph')!r}): "
                          f"{key} {str(x)[:40]} µs is not a trace time (not finite or past 2**62 ns)",
                          path=path)
    return ns


def _s(x) -> Optional[str]:
    """A name on one CSV line (DuckDB's parallel CSV reader needs rows without embedded newlines)."""
    return x.replace("\n", " ").replace("\r", " ") if isinstance(x, str) else x


def _j(x) -> Optional[str]:
    return None if x is None else json.dumps(x, separators=(",", ":"))


def stream_events(path: Path, folder: Path, scan: TraceScan) -> Dict[str, Path]:
    """Stream ``traceEvents`` of ``path`` into CSV files under ``folder``; fills ``scan``.

    Times in the CSVs are integer ns on the trace's own clock (``ts * 1000``); the loader adds
    ``baseTimeNanoseconds``. Returns the CSV path per staging file name (:data:`FILES`).

    Raises:
        TruncatedTrace: the JSON or gzip stream ends early or is malformed (names the file).
    """
    folder.mkdir(parents=True, exist_ok=True)
    paths = {k: folder / f"{k}.csv" for k in FILES}
    handles = {k: open(p, "w", newline="", encoding="utf-8") for k, p in paths.items()}
    w = {k: csv.writer(h) for k, h in handles.items()}
    counts = scan.counts
    lo, hi = None, None
    idx = 0
    try:
        with open_trace(path) as f:
            for e in ijson.items(f, "traceEvents.item", use_float=True):
                idx += 1
                ph = e.get("ph")
                raw_cat = e.get("cat")
                if ph != "X":
                    counts["metadata" if ph == "M" else (raw_cat or f"ph:{ph}")] += 1
                    continue
                cat = CATEGORY.get(raw_cat, raw_cat or "uncategorised")
                counts[cat] += 1
                name = e.get("name")
                ts, dur = _event_ns(e, "ts", idx, path), _event_ns(e, "dur", idx, path) or 0
                if ts is not None:
                    lo = ts if lo is None or ts < lo else lo
                    hi = ts + dur if hi is None or ts + dur > hi else hi
                args = e.get("args") or {}
                tid = e.get("tid")
                if isinstance(name, str) and name.startswith("ProfilerStep#") and cat != "gpu_user_annotation":
                    scan.steps += 1
                    w["ranges"].writerow(("user_annotation", _s(name), tid, ts, dur))
                    continue
                if cat == "cpu_op":
                    w["ops"].writerow((idx, _s(name), e.get("pid"), tid, ts, dur, args.get("External id"),
                                       args.get("Sequence number"), args.get("Fwd thread id"),
                                       _j(args.get("Input Dims")), _j(args.get("Input type"))))
                elif cat in DEVICE_CATS:
                    w["device"].writerow((idx, cat, _s(name), e.get("pid"), tid, ts, dur, args.get("External id"),
                                          args.get("correlation"), args.get("device"), args.get("stream"),
                                          _j(args.get("grid")), _j(args.get("block")), args.get("bytes")))
                elif cat in ("cuda_runtime", "cuda_driver"):
                    w["runtime"].writerow((args.get("correlation"), args.get("External id"), _s(name), tid, ts, dur))
                elif cat in ("user_annotation", "gpu_user_annotation"):
                    w["ranges"].writerow((cat, _s(name), tid, ts, dur))
                elif cat == "python_function":
                    w["py"].writerow((args.get("Python id"), args.get("Python parent id"), _s(name),
                                      e.get("pid"), tid, ts, dur))
    except (ijson.JSONError, EOFError, OSError, zlib.error, UnicodeDecodeError) as exc:
        raise _truncated(path, exc, idx) from exc
    finally:
        for h in handles.values():
            h.close()
    scan.start_ns, scan.end_ns = lo, hi
    return paths
