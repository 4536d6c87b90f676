"""Cut the ``traceEvents`` array of a Chrome trace into small JSON-array files at event boundaries.

The fast read of a trace (:mod:`tilake.ingest.torch.stage`) hands these part files to DuckDB's JSON reader
(``read_json(format='array')``, yyjson in C++), which parses them about 6× faster than ``ijson`` builds one
Python dict per event (0.14 s vs 0.95 s for the 216,092 events of the V100 trace, bench/README.md). Parts of
about :data:`PART_BYTES` keep the reader's buffers small: one 51 MB array costs it ~37 MiB, 2 MiB parts ~7 MiB.

Nothing here parses an event. A part boundary is a ``}`` , ``,`` , ``{"`` sequence found by one regex; if it
is not a top-level boundary (inside a string or a nested list of objects) the part before it is not a valid
JSON array (an unterminated string or an unclosed ``{``), DuckDB refuses it, and the caller reads the trace
with the streaming reader instead (:func:`tilake.ingest.torch.events.stream_events`), so a wrong cut can
cost time, never a wrong row. The array's start is the first ``"traceEvents": [`` whose preceding text
parses as the head of one JSON object; its end is the first ``}]`` (or the ``[`` of an empty array) after
which the rest of the file parses as the remaining members of that object (keys written after
``traceEvents`` by the HF/TraceLens exporters) and its closing ``}``.
"""
from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from tilake.ingest.torch.events import open_trace

PART_BYTES = 2 << 20
"""Target size of one part file (bytes): the JSON reader's peak memory follows the part, not the trace."""
BATCH_PARTS = 32
"""Parts handed over at a time: at most about 64 MiB of them on disk, whatever the trace's size."""
HEAD_LIMIT = 64 << 20
"""Header bytes searched for ``"traceEvents": [`` before giving up (the streaming reader then takes the file)."""
_BLOCK = 1 << 20
_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb'\}\s*,\s*(?=\{\s*")')
_END = re.compile(rb'\}\s*\]|\A\s*\]')
_WS = re.compile(r"[ \t\n\r]*")     # JSON's whitespace only (the text here may be Latin-1-decoded bytes)
MAX_PENDING = 4 * PART_BYTES + _BLOCK
"""Bytes held without a part boundary before the fast cut gives the file to the streaming reader: one event
this long, or whitespace padding between two events, would otherwise be searched again for every block read
(quadratic: 1 GiB of padding took minutes)."""
_DECODER = json.JSONDecoder()


def _array_start(head: bytes, pos: int = 0) -> Optional[int]:
    """Offset just after the ``[`` of the top-level ``traceEvents`` array in ``head`` (a match starting at or after
    ``pos``), or None."""
    for m in _START.finditer(head, pos):
        try:
            obj = json.loads(head[:m.end() - 1] + b"[]}")
        except ValueError:
            continue
        if isinstance(obj, dict):
            return m.end()
    return None


def _members_to_end(text: str, i: int) -> Optional[Dict]:
    """Parse ``text[i:]`` as the rest of a JSON object after one of its values: ``}`` or ``, "k": v …}``, then
    only whitespace. Returns the members (``{}`` for a bare ``}``), or None when the text is not that."""
    out: Dict = {}
    i = _WS.match(text, i).end()
    while True:
        if text.startswith("}", i):
            return out if _WS.match(text, i + 1).end() == len(text) else None
        if not text.startswith(",", i):
            return None
        i = _WS.match(text, i + 1).end()
        try:
            key, i = _DECODER.raw_decode(text, i)
        except ValueError:
            return None
        if not isinstance(key, str):
            return None
        i = _WS.match(text, i).end()
        if not text.startswith(":", i):
            return None
        i = _WS.match(text, i + 1).end()
        try:
            out[key], i = _DECODER.raw_decode(text, i)
        except ValueError:
            return None
        i = _WS.match(text, i).end()


def _array_end(buf: bytes) -> Optional[Tuple[int, Dict]]:
    """``(n, keys)``: ``buf[:n]`` is the array's content (without its ``]``) and ``keys`` the object's members
    after it, or None when ``buf`` does not end the array and the object.

    The structure is searched in ``buf`` decoded as Latin-1 (one character per byte, decoded once: each ``}]``
    candidate costs only the members it parses, not a decode of the rest); the members found are parsed again
    from UTF-8."""
    text = buf.decode("latin-1")
    for m in _END.finditer(buf):
        close = m.end() - 1                     # the array's "]"
        if _members_to_end(text, close + 1) is None:
            continue
        try:
            keys = _members_to_end(buf[close + 1:].decode("utf-8"), 0)
        except UnicodeDecodeError:
            return None
        if keys is not None and "traceEvents" not in keys:
            return (m.start() + 1 if buf[m.start():m.start() + 1] == b"}" else 0), keys
    return None


def _cuts(buf: bytes, size: int) -> List[Tuple[int, int]]:
    """``[(end, next_start)]`` boundaries splitting ``buf`` into pieces of at least ``size`` bytes."""
    out, pos = [], 0
    while True:
        m = _CUT.search(buf, pos + size)
        if m is None:
            return out
        out.append((m.start() + 1, m.end()))
        pos = m.end()


def _write(folder: Path, n: int, data) -> Path:
    p = folder / f"events-{n:06d}.json"
    with open(p, "wb") as f:
        f.write(b"[")
        f.write(data)
        f.write(b"]")
    return p


def split_events(path: Path, folder: Path, take: Callable[[List[Path]], bool]) -> Optional[Dict]:
    """Cut the events of ``path``'s ``traceEvents`` array into JSON-array files ``folder/events-NNNNNN.json`` and
    hand them to ``take`` in event order, :data:`BATCH_PARTS` at a time (the last batch when the stream ends), so
    at most about ``BATCH_PARTS × PART_BYTES`` of them sit on disk at once.

    Reads the (gunzipped) stream in 1 MiB blocks and holds at most about ``2 × PART_BYTES + 1 MiB`` of it.
    The array's end and the keys after it are looked for in what is held when the stream ends; a part
    boundary found past the array's end (keys after it that hold ``}, {"``, within one event of a cut) leaves
    them out of reach and the file to the streaming reader.

    Args:
        path: a Chrome trace (``.json`` or gzip). folder: an existing staging folder.
        take: called with each batch of part files; it may delete them; False stops the cut (None returned).
    Returns:
        the top-level keys written after the array (``{}`` in Kineto's own order), or None when the file is not
        cut here (no top-level ``traceEvents`` array in the first :data:`HEAD_LIMIT` bytes, a damaged or
        truncated stream, an end that does not parse, or ``take`` said False): the caller then reads it with
        :func:`tilake.ingest.torch.events.stream_events`, which names what is wrong.
    Raises:
        nothing for bad input or a full disk (a part that cannot be written gives None).
    """
    batch: List[Path] = []
    count = [0]

    def cut(buf, final: bool) -> int:
        """Write ``buf``'s pieces of ≥ PART_BYTES (and, when ``final``, the rest); return the bytes taken."""
        taken = 0
        view = memoryview(buf)
        for end, nxt in _cuts(buf, PART_BYTES):
            batch.append(_write(folder, count[0], view[taken:end]))
            count[0] += 1
            taken = nxt
        if final and (bytes(view[taken:]).strip() or not count[0]):   # an empty array is one empty part
            batch.append(_write(folder, count[0], view[taken:]))
            count[0] += 1
            taken = len(buf)
        view.release()
        return taken

    def hand(final: bool) -> bool:
        while len(batch) >= BATCH_PARTS or (final and batch):
            ok = take(batch[:BATCH_PARTS])
            del batch[:BATCH_PARTS]
            if not ok:
                return False
        return True

    try:
        with open_trace(path) as f:
            head = b""
            start = None
            while start is None:
                block = f.read(_BLOCK)
                if not block or len(head) > HEAD_LIMIT:
                    return None
                seen = max(0, len(head) - 4096)      # a key split over two blocks is still found; no re-search
                head += block
                start = _array_start(head, seen)
            pending = bytearray(memoryview(head)[start:])
            del head
            while True:
                block = f.read(_BLOCK)
                if not block:
                    break
                pending += block
                if len(pending) >= 2 * PART_BYTES:
                    del pending[:cut(pending, False)]
                    if not hand(False) or len(pending) > MAX_PENDING:
                        return None
        found = _array_end(pending)
        if found is None or (found[0] == 0 and count[0]):   # "]" at the start of a later piece: not an empty array
            return None
        n, keys = found
        del pending[n:]
        cut(pending, True)
        del pending   # before the last batch is staged: its bytes are all on disk now
        return keys if hand(True) else None
    except (OSError, EOFError, zlib.error):
        return None
