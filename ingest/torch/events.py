"""Stream the events of one PyTorch-profiler Chrome trace into small CSV staging files: the reference reader.

The loader first tries the fast read (:mod:`tilake.ingest.torch.parts` + :mod:`tilake.ingest.torch.stage`,
DuckDB's JSON reader, the same rows); this reader takes every trace that one refuses and names what is wrong.

A trace is read with ``ijson`` (C backend ``yajl2_c``) one event at a time, so memory stays
bounded whatever the file size: each event is routed to a CSV file in the staging folder and only
counters stay in memory. DuckDB then builds the lake tables from those files
(:mod:`tilake.ingest.torch.load`).

Format facts (Kineto's Chrome-trace writer as used by ``torch.profiler.profile.export_chrome_trace``
and ``tensorboard_trace_handler``; checked against a trace written by torch 2.13 on CPU):

* the file is one JSON object: header keys (``schemaVersion`` = 1, ``deviceProperties``,
  ``with_stack``, ``record_shapes``, ``baseTimeNanoseconds``, ``distributedInfo`` …) come before
  ``traceEvents`` in Kineto's own writer, but *after* it in traces re-written by other exporters (the
  HF-transformers/TraceLens Qwen traces of ``../shared/fixtures/real_gpu_traces``: ``metadata``,
  ``traceEvents``, then ``schemaVersion`` … ``baseTimeNanoseconds``). Both are read in the one streaming
  pass: the head by :func:`read_header`, the keys after the array from the bytes the stream read after
  the last event (:class:`_TailReader`); a legacy autograd-profiler export (PyTorch < 1.8.1) is a bare
  JSON array;
* ``distributedInfo`` = ``{"backend", "rank", "world_size", …}`` (torch ``_ExperimentalConfig`` /
  ``torch.profiler`` ``_get_distributed_info``): the rank of the process that wrote the trace;
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
import json
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

import ijson

from tilake.errors import TilakeError
from tilake.ingest.inputs import is_gzip_file, open_decompressed

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
    "runtime": ["corr", "ext_id", "name", "tid", "ts", "dur", "pid"],
    "ranges": ["cat", "name", "tid", "ts", "dur"],
    "py": ["py_id", "parent_id", "name", "pid", "tid", "ts", "dur"],
    "other": ["ts", "dur"],   # ph:X events of any other category: only their times (session bounds)
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
        distributed: ``distributedInfo`` (``rank``, ``world_size``, ``backend``; {} when absent).
        keys_after_events: top-level keys written after ``traceEvents`` (read from the stream's tail).
        cpu_start_ns: first ``cpu_op`` start (trace clock ns): kernels before it with no launch event are
            orphans (ran before the CPU window).
    """

    header: Dict = field(default_factory=dict)
    device_names: list = field(default_factory=list)
    distributed: Dict = field(default_factory=dict)
    keys_after_events: list = field(default_factory=list)
    cpu_start_ns: Optional[int] = None
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
    """Whether the file starts with the gzip magic bytes.

    Raises:
        SpecialFile: a FIFO, device or socket (never opened blocking).
    """
    return is_gzip_file(path)


class _SkipBom:
    """Stream wrapper that drops a UTF-8 byte-order mark at the start (editors on Windows write one; JSON
    parsers refuse it, and the file is otherwise whole)."""

    def __init__(self, f) -> None:
        self.f = f
        self.first = True

    def read(self, size: int = -1) -> bytes:
        b = self.f.read(size)
        if self.first and b:      # ijson reads 0 bytes first to learn the stream's type
            self.first = False
            if len(b) < 3 and b"\xef\xbb\xbf".startswith(b):
                b += self.f.read(3 - len(b))
            if b.startswith(b"\xef\xbb\xbf"):
                b = b[3:] or self.f.read(size)
        return b

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.f.close()

    def close(self) -> None:
        self.f.close()


def open_trace(path: Path):
    """Binary stream of the trace's JSON text (gunzipped on the fly when the file is gzip, at most
    :data:`tilake.ingest.inputs.GZIP_MAX_RATIO` × its size; a leading UTF-8 BOM dropped).

    Raises:
        SpecialFile: a FIFO, device or socket. DecompressionBomb (while reading): the gzip stream grows past the
            ratio. OSError: as ``open``.
    """
    return _SkipBom(open_decompressed(path, "trace"))


class TruncatedTrace(TilakeError):
    """The trace's JSON or gzip stream ends early or is damaged. ``events`` = events read before that."""

    def __init__(self, message: str, path: Path, events: int = 0) -> None:
        super().__init__(message, path=path)
        self.reason = message
        self.events = events
        self.kind = "truncated"      # or "nonfinite" (NaN/Infinity literal), "invalid" (other damage)


_NONFINITE = re.compile(r"(?<![A-Za-z\"])-?(NaN|Infinity)(?![A-Za-z\"])")


def _truncated(path: Path, exc: Exception, events: int = 0) -> TruncatedTrace:
    """The error for a stream that stopped parsing, with its real cause: a stream that ends early (truncated), a
    ``NaN``/``Infinity`` value (Python's ``json.dump`` writes them; JSON has no such literal), or other damage."""
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = str(exc)
    early = isinstance(exc, EOFError) or "premature EOF" in text or "incomplete" in text.lower() or \
        isinstance(exc, zlib.error) or "Compressed file ended" in text
    if not early and _NONFINITE.search(text.split("\n", 1)[1] if "\n" in text else ""):
        t = TruncatedTrace(f"not valid JSON after {events} events: a NaN or Infinity value (Python's json.dump writes "
                           "them, JSON has no such literal); the file is complete, not truncated — write it with "
                           "allow_nan=False or replace the values with null", path, events)
        t.kind = "nonfinite"
        return t
    if not early:
        t = TruncatedTrace(f"not valid JSON after {events} events ({detail}): the file is damaged or not a Chrome "
                           "trace; re-export it (export_chrome_trace) or copy it again", path, events)
        t.kind = "invalid"
        return t
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
                elif prefix.startswith("distributedInfo.") and prefix.count(".") == 1 and event in (
                        "string", "number", "boolean", "null"):
                    scan.distributed[prefix.split(".", 1)[1]] = value
    except (ijson.JSONError, EOFError, OSError, zlib.error, UnicodeDecodeError) as exc:
        raise _truncated(path, exc) from exc
    raise TilakeError("not a Chrome trace: no traceEvents array", path=path)


class _TailReader:
    """File wrapper for ``ijson`` that keeps the bytes read since the chunk holding the end of the latest
    event (``pin()`` after each event): after the stream ends they hold the end of ``traceEvents`` and
    every top-level key written after it. yajl2_c parses a whole chunk before it reads the next one, so the
    chunk read last when an event is yielded holds that event's end."""

    def __init__(self, f) -> None:
        self.f = f
        self.chunks: list = []
        self.read_count = 0
        self.pinned = 0

    def read(self, size: int = -1) -> bytes:
        b = self.f.read(size)
        if b:
            # a chunk of whitespace only (padding between or after events) is kept as one space: the tail then
            # stays small and keys_after_events linear, whatever the padding
            self.chunks.append(b if b.strip() else b" ")
            self.read_count += 1
            extra = len(self.chunks) - (self.read_count - self.pinned)
            if extra > 0:
                del self.chunks[:extra]
        return b

    def pin(self) -> None:
        """Keep from the newest chunk on (called after an event was taken)."""
        self.pinned = self.read_count - 1

    def tail(self) -> bytes:
        """The bytes kept (from the chunk holding the last event's end to the end of the file)."""
        return b"".join(self.chunks)


_CLOSE_RE = re.compile(rb"\]\s*,\s*\"")


def keys_after_events(tail: bytes) -> Dict:
    """Top-level keys that follow the ``traceEvents`` array, parsed from the stream's ``tail`` bytes.

    The array's closing ``]`` is the first ``]`` followed by ``, "`` from which the rest of the text
    parses as the remaining members of one JSON object (``{`` + rest); a ``]`` inside an event leaves an
    unbalanced ``}`` and fails, and one in a header list before the array (small files are kept whole)
    gives an object that still holds ``traceEvents``. Returns {} when no key follows the array (Kineto's
    own writer order).
    """
    for m in _CLOSE_RE.finditer(tail):
        rest = tail[m.start() + 1:].lstrip()[1:]  # drop "]" and ","
        try:
            obj = json.loads(b"{" + rest)
        except ValueError:
            continue
        if isinstance(obj, dict) and "traceEvents" not in obj:  # a "]" of a header list before the array
            return obj
    return {}


def merge_header(scan: TraceScan, extra: Dict) -> None:
    """Fold top-level keys read after ``traceEvents`` into ``scan`` (scalars, device names,
    ``distributedInfo``); keys already read from the head win."""
    for k, v in extra.items():
        if k == "traceEvents":
            continue
        scan.keys_after_events.append(k)
        if isinstance(v, (str, int, float, bool)) or v is None:
            scan.header.setdefault(k, v)
        elif k == "deviceProperties" and isinstance(v, list) and not scan.device_names:
            scan.device_names = [d.get("name") for d in v if isinstance(d, dict) and "name" in d]
        elif k == "distributedInfo" and isinstance(v, dict) and not scan.distributed:
            scan.distributed = {a: b for a, b in v.items() if isinstance(b, (str, int, float, bool)) or b is None}


MAX_TRACE_NS = 1 << 62
"""Largest trace time taken, in ns (year 2116): the one bound, checked by the loader on the staged columns
(:func:`tilake.ingest.torch.stage.load_csvs`) and named per event by :func:`bad_time_event`."""


def _event_ns(e: dict, key: str, idx: int, path: Path) -> Optional[int]:
    """``e[key]`` (µs) as integer ns, or None when absent.

    Raises:
        TilakeError: not a number, not finite, or beyond :data:`MAX_TRACE_NS`: names the event (index in
            ``traceEvents``, name, ``ph``) and the field, not the staging CSV.
    """
    x = e.get(key)
    if x is None:
        return None
    ns = None
    if type(x) in (int, float):
        try:
            ns = round(x * 1000)
        except (ValueError, OverflowError):
            ns = None
    if ns is None or abs(ns) > MAX_TRACE_NS:
        raise TilakeError(f"traceEvents[{idx - 1}] (name {str(e.get('name'))[:80]!r}, ph {e.get('ph')!r}): "
                          f"{key} {str(x)[:40]} µs is not a trace time (not finite or past 2**62 ns)",
                          path=path)
    return ns


def bad_time_event(path: Path) -> None:
    """Find the first ``ph: X`` event whose ``ts`` or ``dur`` is not a trace time and raise its error.

    Called by the loader only after the one check on the staged columns failed (a value past
    :data:`MAX_TRACE_NS`, or text DuckDB cannot read as a number), so the error names the event in
    ``traceEvents`` rather than a staging CSV line; costs one more pass over the file on that path only.
    Returns None when every time is plausible (the caller then reports its own error).

    Raises:
        TilakeError: from :func:`_event_ns`, for the first such event.
    """
    with open_trace(path) as f:
        for idx, e in enumerate(ijson.items(f, "traceEvents.item", use_float=True), 1):
            if e.get("ph") == "X":
                _event_ns(e, "ts", idx, path)
                _event_ns(e, "dur", idx, path)


def _s(x) -> Optional[str]:
    """A name on one CSV line (DuckDB's parallel CSV reader needs rows without embedded newlines)."""
    if isinstance(x, str) and ("\n" in x or "\r" in x):
        return x.replace("\n", " ").replace("\r", " ")
    return x


_ENC = json.JSONEncoder(separators=(",", ":")).encode  # json.dumps(..., separators=) builds one per call


def _j(x) -> Optional[str]:
    return None if x is None else _ENC(x)


def stream_events(path: Path, folder: Path, scan: TraceScan) -> Dict[str, Path]:
    """Stream ``traceEvents`` of ``path`` into CSV files under ``folder``; fills ``scan``.

    Times in the CSVs are the trace's own µs as written (ints stay ints); the loader makes integer ns
    (``ts * 1000``, exact for every double), then adds ``baseTimeNanoseconds``, checks them against
    :data:`MAX_TRACE_NS` and sets ``scan.start_ns`` / ``end_ns`` / ``cpu_start_ns``. Returns
    the CSV path per staging file name (:data:`FILES`). ``ProfilerStep#N`` ranges are taken from
    ``user_annotation`` (and ``cpu_op`` in older torch) events, never from ``gpu_user_annotation``.

    Raises:
        TruncatedTrace: the JSON or gzip stream ends early or is malformed (names the file).
    """
    folder.mkdir(parents=True, exist_ok=True)
    paths = {k: folder / f"{k}.csv" for k in FILES}
    handles = {k: open(p, "w", newline="", encoding="utf-8") for k, p in paths.items()}
    w = {k: csv.writer(h).writerow for k, h in handles.items()}
    w_ops, w_dev, w_rt, w_rng, w_py, w_oth = (w[k] for k in ("ops", "device", "runtime", "ranges", "py", "other"))
    counts: Dict[str, int] = {}
    cat_of = CATEGORY.get
    idx = steps = 0
    empty: Dict = {}
    try:
        with open_trace(path) as raw:
            f = _TailReader(raw)
            for e in ijson.items(f, "traceEvents.item", use_float=True):
                f.pinned = f.read_count - 1
                idx += 1
                get = e.get
                raw_cat = get("cat")
                if get("ph") != "X":
                    ph = get("ph")
                    key = "metadata" if ph == "M" else (raw_cat or f"ph:{ph}")
                    counts[key] = counts.get(key, 0) + 1
                    continue
                cat = cat_of(raw_cat) or raw_cat or "uncategorised"
                counts[cat] = counts.get(cat, 0) + 1
                # times stay in µs as written (int or float); the loader turns them into exact ns, takes the
                # session bounds from the staged columns and checks them there once (MAX_TRACE_NS)
                ts, dur = get("ts"), get("dur")
                args = get("args")
                if not isinstance(args, dict):     # a list or scalar where Kineto writes an object: no ids
                    args = empty
                if cat == "python_function":
                    w_py((args.get("Python id"), args.get("Python parent id"), _s(get("name")),
                          get("pid"), get("tid"), ts, dur))
                    continue
                name = get("name")
                if cat in ("cpu_op", "user_annotation") and isinstance(name, str) and name.startswith("ProfilerStep#"):
                    steps += 1
                    w_rng(("user_annotation", _s(name), get("tid"), ts, dur))
                    continue
                if cat == "cpu_op":
                    w_ops((idx, _s(name), get("pid"), get("tid"), ts, dur, args.get("External id"),
                           args.get("Sequence number"), args.get("Fwd thread id"),
                           _j(args.get("Input Dims")), _j(args.get("Input type"))))
                elif cat in ("cuda_runtime", "cuda_driver"):
                    w_rt((args.get("correlation"), args.get("External id"), _s(name), get("tid"), ts, dur, get("pid")))
                elif cat in DEVICE_CATS:
                    w_dev((idx, cat, _s(name), get("pid"), get("tid"), ts, dur, args.get("External id"),
                           args.get("correlation"), args.get("device"), args.get("stream"),
                           _j(args.get("grid")), _j(args.get("block")), args.get("bytes")))
                elif cat in ("user_annotation", "gpu_user_annotation"):
                    w_rng((cat, _s(name), get("tid"), ts, dur))
                else:
                    w_oth((ts, dur))
            merge_header(scan, keys_after_events(f.tail()))
    except (ijson.JSONError, EOFError, OSError, zlib.error, UnicodeDecodeError) as exc:
        scan.counts.update(counts)
        scan.steps += steps
        raise _truncated(path, exc, idx) from exc
    finally:
        for h in handles.values():
            h.close()
    scan.counts.update(counts)
    scan.steps += steps
    return paths
