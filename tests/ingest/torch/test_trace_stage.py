"""The fast trace read (event parts → DuckDB's JSON reader → one Parquet stage, :mod:`tilake.ingest.torch.stage`)
writes the same lake rows as the streaming reference reader (``ijson`` → CSV → DuckDB,
:func:`tilake.ingest.torch.events.stream_events`), on every real GPU trace of ``../shared`` and on our own
traces with the quirks the streaming reader handles (header keys after ``traceEvents``, names with line
breaks, empty strings, old category spellings, steps from ``cpu_op``, flows, an empty array); and every
input the part cutter cannot take safely (a cut inside a string or a nested list, a truncated stream) falls
back to the reference reader with the same result.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest

import tilake.ingest.torch.load as load
from tilake.ingest.profiler.discover import explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.ingest.torch import parts as parts_mod
from tilake.lake.store import Lake

REAL = "fixtures/real_gpu_traces"
TABLES = ("kernels", "host_ops", "call_stacks", "mstx_ranges", "captures")


def _rows(root: Path, table: str) -> list:
    files = sorted(str(p) for p in (root / "raw" / table).glob("**/*.parquet"))
    if not files:
        return []
    con = duckdb.connect()
    cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet({files}, union_by_name=true)").fetchall()]
    drop = [c for c in cols if c in ("ingested_at", "created_at", "reason", "elapsed_s")]
    keep = ", ".join(f'"{c}"' for c in cols if c not in drop)
    return con.execute(f"SELECT {keep} FROM read_parquet({files}, union_by_name=true) ORDER BY ALL").fetchall()


def _ingest(root: Path, trace: Path, fast: bool, monkeypatch, used: list) -> dict:
    real = load._stage_fast

    def spy(con, path, folder, scan):
        if not fast:
            return None, scan
        views, scan = real(con, path, folder, scan)
        used.append(views is not None)
        return views, scan

    monkeypatch.setattr(load, "_stage_fast", spy)
    lk = Lake(root)
    ingest_profile(lk, "r", explicit(trace, "train"), {}, allow_missing=True, progress=False)
    monkeypatch.setattr(load, "_stage_fast", real)
    return {t: _rows(root, t) for t in TABLES}


def _same(trace: Path, tmp_path: Path, monkeypatch) -> bool:
    """Ingest ``trace`` with both readers; assert equal rows; return whether the fast read took it."""
    used: list = []
    fast = _ingest(tmp_path / "fast", trace, True, monkeypatch, used)
    ref = _ingest(tmp_path / "ref", trace, False, monkeypatch, [])
    for table in TABLES:
        assert fast[table] == ref[table], f"{trace.name}: {table} differs between the fast and the streaming read"
    assert fast["kernels"] or fast["host_ops"] or fast["captures"], "nothing ingested"
    return bool(used and used[0])


def _real(shared_dir) -> list:
    root = shared_dir / REAL
    if not root.is_dir():
        pytest.skip(f"real GPU traces not found at {root}")
    return sorted(root.glob("*/**/*.json.gz"))


def test_fast_read_equals_the_streaming_read_on_every_real_gpu_trace(shared_dir, tmp_path, monkeypatch):
    traces = _real(shared_dir)
    assert len(traces) >= 10
    for i, trace in enumerate(traces):
        assert _same(trace, tmp_path / str(i), monkeypatch), f"{trace}: the fast read did not take a real trace"


def _doc(events, head=None, tail=None) -> dict:
    doc = dict(head or {"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000})
    doc["traceEvents"] = events
    doc.update(tail or {})
    return doc


def _kernel_events(n: int = 3, name: str = "aten::mm") -> list:
    out = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 900.0}]
    for i in range(n):
        t = 10.0 + 100 * i
        out += [
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t, "dur": 50.5,
             "args": {"External id": 10 + i, "Sequence number": i, "Fwd thread id": 0,
                      "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 1, "dur": 5,
             "args": {"External id": 10 + i, "correlation": 100 + i}},
            {"ph": "s", "id": 100 + i, "pid": 1, "tid": 1, "ts": t + 1, "cat": "ac2g", "name": "ac2g"},
            {"ph": "X", "cat": "kernel", "name": "sm90_gemm_kernel", "pid": 0, "tid": 7, "ts": t + 20, "dur": 3.25,
             "args": {"External id": 10 + i, "correlation": 100 + i, "device": 0, "stream": 7,
                      "grid": [1, 2, 3], "block": [128, 1, 1]}},
            {"ph": "f", "id": 100 + i, "pid": 0, "tid": 7, "ts": t + 20, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        ]
    out.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}})
    out.append({"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 5000, "s": "g"})
    return out


CASES = {
    # Kineto order, one line per value as Kineto writes them
    "kineto": lambda: _doc(_kernel_events(3000)),
    # HF/TraceLens exporters: metadata first, header keys after traceEvents, two devices (a "}, {" after the array)
    "keys_after": lambda: {"metadata": {"x": [{"a": 1}, {"b": 2}]}, "traceEvents": _kernel_events(),
                           "schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "A"}, {"id": 1, "name": "B"}],
                           "distributedInfo": {"rank": 3, "world_size": 8}},
    # old category spellings, a step as cpu_op, names with line breaks and empty strings, an odd category
    "quirks": lambda: _doc([
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#4", "pid": 1, "tid": 1, "ts": 0, "dur": 500},
        {"ph": "X", "cat": "Operator", "name": "aten::add\nline", "pid": 1, "tid": 1, "ts": 5, "dur": 10,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 6, "dur": 1,
         "args": {"correlation": 9, "External id": 1}},
        {"ph": "X", "cat": "Kernel", "name": "", "pid": 0, "tid": "stream 7", "ts": 20, "dur": 2,
         "args": {"correlation": 9, "External id": 1, "stream": 7}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 30, "dur": 2,
         "args": {"bytes": 4096, "correlation": 10}},
        {"ph": "X", "cat": "my_cat", "name": "x", "pid": 1, "tid": 1, "ts": 40, "dur": 1},
        {"ph": "X", "name": "no category", "pid": 1, "tid": 1, "ts": 41, "dur": 1},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": 19, "dur": 5},
        {"ph": "X", "cat": "python_function", "name": "train.py(1): <module>", "pid": 1, "tid": 1, "ts": 0, "dur": 600,
         "args": {"Python id": 1, "Python parent id": None}},
        {"ph": "i", "cat": "", "name": "instant", "pid": 1, "tid": 1, "ts": 3},
        {"ph": "C", "name": "counter", "pid": 1, "ts": 4, "args": {"v": 1}},
    ]),
    "empty": lambda: _doc([]),
    # a "}, {" inside a string and in a nested list of objects at a part boundary: the cut is refused
    "nested_cut": lambda: _doc([dict(e, args=dict(e.get("args", {}), note='}, {"x": 1}', more=[{"a": 1}, {"b": 2}]))
                                for e in _kernel_events(4000)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("how", ["indented", "one_line"])
def test_fast_read_equals_the_streaming_read_on_our_quirky_traces(case, how, tmp_path, monkeypatch):
    doc = CASES[case]()
    path = tmp_path / "t.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f, indent=2 if how == "indented" else None)
    if case == "nested_cut":
        monkeypatch.setattr(parts_mod, "PART_BYTES", 4096)
    if case == "kineto":   # many batches: idx continues across the staged files
        monkeypatch.setattr(parts_mod, "PART_BYTES", 4096)
        monkeypatch.setattr(parts_mod, "BATCH_PARTS", 4)
    # a cut inside a nested list of objects makes a part DuckDB refuses: the streaming read takes the trace
    assert _same(path, tmp_path, monkeypatch) is (case != "nested_cut")


def test_the_part_cutter_takes_the_array_and_the_keys_after_it(tmp_path, monkeypatch):
    monkeypatch.setattr(parts_mod, "PART_BYTES", 1024)
    doc = CASES["keys_after"]()
    doc["traceEvents"] = _kernel_events(200)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=1))
    folder = tmp_path / "parts"
    folder.mkdir()
    monkeypatch.setattr(parts_mod, "BATCH_PARTS", 3)
    batches: list = []

    def take(files):
        batches.append([json.loads(f.read_text()) for f in files])
        for f in files:   # as the stager does: no more than a batch on disk
            f.unlink()
        return True

    keys = parts_mod.split_events(path, folder, take)
    assert keys == {k: doc[k] for k in ("schemaVersion", "deviceProperties", "distributedInfo")}
    assert len(batches) > 3 and all(len(b) <= 3 for b in batches)
    assert [e for b in batches for part in b for e in part] == doc["traceEvents"]
    assert not list(folder.iterdir())


@pytest.mark.parametrize("damage", ["truncated", "not_json_after", "no_array"])
def test_the_part_cutter_refuses_what_it_cannot_end(damage, tmp_path):
    text = json.dumps(_doc(_kernel_events(50)), indent=1)
    text = {"truncated": text[: len(text) * 2 // 3], "not_json_after": text[:-2] + ', "x": }',
            "no_array": text.replace('"traceEvents"', '"events"')}[damage]
    path = tmp_path / "t.json"
    path.write_text(text)
    folder = tmp_path / "parts"
    folder.mkdir()
    assert parts_mod.split_events(path, folder, lambda files: True) is None


def test_a_refused_batch_stops_the_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(parts_mod, "PART_BYTES", 1024)
    monkeypatch.setattr(parts_mod, "BATCH_PARTS", 2)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_doc(_kernel_events(200)), indent=1))
    folder = tmp_path / "parts"
    folder.mkdir()
    calls: list = []
    assert parts_mod.split_events(path, folder, lambda files: calls.append(files) or False) is None
    assert len(calls) == 1
