"""Torch-profiler Chrome traces → raw lake tables: counts equal a direct count of the JSON events;
CPU-only traces are labelled; truncated, legacy and unknown-schema traces never read as "no difference"."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from torch_trace_writer import FLASH, GEMM, INFER_CUDA, SILU_MUL, SOFTMAX, TRAIN_CUDA, make_trace, verl_cuda_layout

from tilake.errors import TilakeError
from tilake.ingest.profiler.discover import discover, explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake

REAL = Path(__file__).resolve().parents[2] / "data" / "torch_cpu_trace" / "prof_rank-0.json.gz"


def _ingest(tmp_path: Path, caps, allow_missing=False):
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "t1", caps, {}, allow_missing=allow_missing, progress=False)
    return lake, res


def _dicts(lake: Lake, table: str, where: str = "true"):
    con = duckdb.connect()
    rows = con.execute(f"SELECT * FROM read_parquet('{lake.raw}/{table}/run_id=t1/**/*.parquet', "
                       f"hive_partitioning=true, union_by_name=true) WHERE {where}").fetchall()
    cols = [d[0] for d in con.description]
    return [dict(zip(cols, r)) for r in rows]


def test_real_cpu_trace_counts_equal_direct_count(tmp_path):
    events = json.load(gzip.open(REAL))["traceEvents"]
    direct = Counter(e.get("cat") for e in events if e.get("ph") == "X")
    names = Counter(e["name"] for e in events if e.get("cat") == "cpu_op")
    lake, res = _ingest(tmp_path, explicit(REAL, "train") + explicit(REAL, "infer"))
    assert [c.status for c in res.captures] == ["ok", "ok"]
    host = _dicts(lake, "host_ops", "side = 'train'")
    assert len(host) == direct["cpu_op"] == 54
    kernels = _dicts(lake, "kernels", "side = 'train'")
    per_name = Counter(k["kernel_name"] for k in kernels)
    # compute ops with only allocation/view ops inside them stand for kernels, once per event
    for name in ("aten::bmm", "aten::_softmax", "aten::_scaled_dot_product_flash_attention_for_cpu"):
        assert per_name[name] == names[name] > 0
    assert per_name == {"aten::bmm": 2, "aten::div": 1, "aten::_softmax": 1,
                        "aten::_scaled_dot_product_flash_attention_for_cpu": 1}
    assert {k["accelerator"] for k in kernels} == {"CPU"} and {k["device_task_type"] for k in kernels} == {"cpu_op"}
    cap = _dicts(lake, "captures", "side = 'train'")[0]
    assert cap["backend"] == "torch_trace" and cap["source_kind"] == "trace"
    assert "cpu_only" in cap["schema_variant"] and "CPU-only trace" in cap["reason"]
    rows = json.loads(cap["table_rows"])
    assert rows["cpu_op"] == direct["cpu_op"] and rows["python_function"] == direct["python_function"]
    assert rows["steps"] == 1 and cap["kernel_count"] == 5 and cap["host_op_count"] == 54
    ranges = sorted(r["message"] for r in _dicts(lake, "mstx_ranges", "side = 'train'"))
    assert ranges == ["ProfilerStep#0", "actor_update", "rollout_generate"]
    # with_stack: every kernel has a Python stack whose outermost frame is the script
    stacks = _dicts(lake, "call_stacks", "side = 'train'")
    chains = {}
    for s in stacks:
        chains.setdefault(s["callchain_id"], []).append((s["depth"], s["frame"]))
    for k in kernels:
        frames = [f for _, f in sorted(chains[k["callchain_id"]])]
        assert frames[-1].startswith("make_trace.py(")


def test_cuda_trace_kernels_linked_to_ops(tmp_path):
    p = tmp_path / "t" / "prof_rank-3.json.gz"
    counts = make_trace(p, TRAIN_CUDA, steps=2, annotation="actor_update", memcpy=2)
    lake, res = _ingest(tmp_path, explicit(p, "train") + explicit(p, "infer"))
    assert res.captures[0].capture.rank == 3
    kernels = _dicts(lake, "kernels", "side = 'train'")
    assert len(kernels) == counts["kernel"] == 8
    assert len(_dicts(lake, "host_ops", "side = 'train'")) == counts["cpu_op"] == 16
    by_op = Counter((k["op_type"], k["kernel_name"]) for k in kernels)
    assert by_op == {("aten::mm", GEMM): 2, ("aten::bmm", GEMM): 4, ("aten::_softmax", SOFTMAX): 2}
    assert {k["cann_api_name"] for k in kernels} == {"cudaLaunchKernel"}
    assert {k["accelerator"] for k in kernels} == {"GPU"} and not any(k["op_type_derived"] for k in kernels)
    cap = _dicts(lake, "captures", "side = 'train'")[0]
    rows = json.loads(cap["table_rows"])
    # memcpy/memset are kept apart: counted, not kernels
    assert rows["gpu_memcpy"] == counts["gpu_memcpy"] == 4 and rows["gpu_memset"] == 4
    assert rows["ac2g"] == 16 and rows["steps"] == 2 and rows["kernel"] == 8
    assert cap["schema_variant"].startswith("chrome_trace_v1+device") and cap["status"] == "ok"
    host = {h["host_op_id"]: h for h in _dicts(lake, "host_ops", "side = 'train'")}
    assert sum(h["kernel_count"] for h in host.values()) == 8
    assert all(host[k["host_op_id"]]["name"] == k["op_type"] for k in kernels)
    assert cap["session_start_ns"] > 1790857026000000000


def test_discover_verl_layout_sides(tmp_path):
    root = verl_cuda_layout(tmp_path / "profile")
    caps = discover(root)
    assert [(c.side, c.kind, c.rank, c.path.parent.name) for c in caps] == [
        ("train", "trace", 0, "actor_update"), ("infer", "trace", 0, "rollout_generate")]
    lake, _ = _ingest(tmp_path, caps)
    infer = Counter(k["kernel_name"] for k in _dicts(lake, "kernels", "side = 'infer'"))
    assert infer == {GEMM: 1, FLASH: 1, SILU_MUL: 1}
    assert len(INFER_CUDA) == 3


def test_truncated_gz_is_one_clear_error_and_lake_unchanged(tmp_path):
    p = tmp_path / "prof_rank-0.json.gz"
    make_trace(p, TRAIN_CUDA, steps=300)  # larger than ijson's read buffer: events come before the break
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    lake = Lake(tmp_path / "lake")
    with pytest.raises(TilakeError) as e:
        ingest_profile(lake, "t1", explicit(p, "train"), {}, progress=False)
    msg = str(e.value)
    assert "truncated or corrupt trace" in msg and str(p) in msg and "\n" not in msg
    assert not (lake.raw / "kernels" / "run_id=t1").exists()
    # recorded in capture health when the run goes on without that side: truncated, no rows, never "no difference"
    lake, res = _ingest(tmp_path, explicit(p, "train"), allow_missing=True)
    assert res.captures[0].status == "evidence_missing" and res.side_evidence["train"] == "evidence_missing"
    cap = _dicts(lake, "captures")[0]
    assert cap["truncated"] is True and cap["kernel_count"] == 0 and "truncated or corrupt trace" in cap["reason"]
    assert json.loads(cap["table_rows"])["kernel"] > 0  # events read before the break are counted
    assert not list((lake.raw / "kernels").glob("run_id=t1/**/*.parquet"))


def test_truncated_plain_json_is_an_error(tmp_path):
    p = tmp_path / "x.pt.trace.json"
    make_trace(p, TRAIN_CUDA, gz=False)
    p.write_bytes(p.read_bytes()[:-200])
    with pytest.raises(TilakeError, match="truncated or corrupt trace"):
        _ingest(tmp_path, explicit(p, "train"))


def test_other_schema_is_evidence_missing_not_no_difference(tmp_path):
    p = tmp_path / "prof_rank-0.json.gz"
    doc = {"schemaVersion": 7, "traceEvents": [
        {"ph": "X", "cat": "torch_op_v7", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
        {"ph": "X", "cat": "device_task_v7", "name": "gemm", "pid": 0, "tid": 7, "ts": 1.5, "dur": 1.0}]}
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(TilakeError, match="train side has no device evidence"):
        _ingest(tmp_path, explicit(p, "train"))
    lake, res = _ingest(tmp_path, explicit(p, "train"), allow_missing=True)
    cap = res.captures[0]
    assert cap.status == "evidence_missing"
    assert "schemaVersion 7 is not one tilake knows" in cap.reason and "torch_op_v7=1" in cap.reason
    assert res.side_evidence == {"train": "evidence_missing", "infer": "evidence_missing"}


def test_old_category_spellings_are_read(tmp_path):
    p = tmp_path / "prof_rank-0.json"
    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 5.0,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "Kernel", "name": GEMM, "pid": 0, "tid": 7, "ts": 2.0, "dur": 1.0,
         "args": {"External id": 1, "correlation": 9, "device": 0, "stream": 7}}]}
    p.write_text(json.dumps(doc))
    lake, res = _ingest(tmp_path, explicit(p, "train") + explicit(p, "infer"))
    k = _dicts(lake, "kernels", "side = 'train'")
    assert [(x["op_type"], x["kernel_name"], x["dur_ns"]) for x in k] == [("aten::mm", GEMM, 1000)]


def test_legacy_array_trace_is_evidence_missing(tmp_path):
    p = tmp_path / "old.json"
    p.write_text(json.dumps([{"name": "mm", "ph": "X", "ts": 1, "dur": 2, "tid": 1, "pid": "CPU functions",
                              "args": {}}]))
    _, res = _ingest(tmp_path, explicit(p, "train"), allow_missing=True)
    assert res.captures[0].status == "evidence_missing" and "legacy autograd-profiler" in res.captures[0].reason


def test_not_a_trace_is_an_error(tmp_path):
    p = tmp_path / "prof_rank-0.json"
    p.write_text(json.dumps({"hello": 1}))
    with pytest.raises(TilakeError, match="not a Chrome trace: no traceEvents array"):
        _ingest(tmp_path, explicit(p, "train"))


def test_trace_with_no_ops_is_evidence_missing(tmp_path):
    p = tmp_path / "prof_rank-0.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}))
    _, res = _ingest(tmp_path, explicit(p, "train"), allow_missing=True)
    assert res.captures[0].status == "evidence_missing"
    assert "no cpu_op or kernel events" in res.captures[0].reason


def test_find_vllm_and_verl_trace_names(tmp_path):
    from tilake.ingest.torch.find import find_traces, is_trace_name

    make_trace(tmp_path / "vllm_traces" / "host_123.1764547200000.pt.trace.json.gz", INFER_CUDA)
    make_trace(tmp_path / "actor_update" / "actor_prof_rank-2.json.gz", TRAIN_CUDA)
    (tmp_path / "actor_update" / "notes.json").write_text("{}")
    found = [(p.name, r) for p, r in find_traces(tmp_path)]
    assert found == [("actor_prof_rank-2.json.gz", 2), ("host_123.1764547200000.pt.trace.json.gz", 0)]
    assert not is_trace_name("trace_view.json")  # Ascend's own Chrome trace is not a torch-profiler one
    sides = {c.path.name: c.side for c in discover(tmp_path)}
    assert sides == {"actor_prof_rank-2.json.gz": "train", "host_123.1764547200000.pt.trace.json.gz": "infer"}


def _quirk_trace(path: Path, n_events: int = 3000) -> dict:
    """A trace with the real GPU traces' quirks (../shared/fixtures/real_gpu_traces): header keys *after*
    traceEvents with distributedInfo rank 5 (HF/TraceLens exporters), 2022-Kineto links (External id =
    correlation on kernel and runtime event, the op has its own id), a hipGraphLaunch replaying 2 kernels,
    an orphan kernel before the first cpu_op, integer epoch µs, and ProfilerStep#7/#8."""
    t0 = 1661203462584767  # epoch µs as an int (2022 Kineto)
    ev = [{"ph": "X", "cat": "kernel", "name": "orphan_kernel", "pid": 0, "tid": 7, "ts": t0 - 50, "dur": 3,
           "args": {"correlation": 999999, "device": 0, "stream": 7}}]
    for step in (7, 8):
        base = t0 + (step - 7) * 1000
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                   "ts": base, "dur": 900})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": base + 10,
                   "dur": 100, "args": {"External id": step}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": base + 11,
                   "dur": 2, "args": {"External id": 100 + step}})
        corr = 5000 + step
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": base + 20,
                   "dur": 5, "args": {"External id": corr, "correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": "Cijk_Alik_Bljk_HHS_BH_MT64x64x32", "pid": 0, "tid": 7,
                   "ts": base + 30, "dur": 8, "args": {"External id": corr, "correlation": corr, "device": 0,
                                                        "stream": 7}})
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "hipGraphLaunch", "pid": 1, "tid": 1, "ts": t0 + 1500,
               "dur": 30, "args": {"correlation": 7777}})
    for i in range(2):
        ev.append({"ph": "X", "cat": "kernel", "name": f"paged_attention_ll4mi_QKV_mfma16_kernel_{i}", "pid": 0,
                   "tid": 7, "ts": t0 + 1540 + i * 10, "dur": 5, "args": {"correlation": 7777, "device": 0}})
    # padding python_function events so the file spans several 64 KiB read chunks
    for i in range(n_events):
        ev.append({"ph": "X", "cat": "python_function", "name": f"model.py({i}): forward", "pid": 1, "tid": 1,
                   "ts": t0 + 950 + (i % 40), "dur": 0, "args": {"Python id": i + 1}})
    doc_text = json.dumps({"traceEvents": ev})[:-1] + (
        ', "schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X"}], '
        '"distributedInfo": {"backend": "nccl", "rank": 5, "world_size": 8}, '
        '"baseTimeNanoseconds": 0, "traceName": "x"}')
    path.write_bytes(gzip.compress(doc_text.encode()))
    return {"start_ns": (t0 - 50) * 1000}


def test_real_trace_quirks_links_steps_rank_and_trailing_header(tmp_path):
    """Generated with the quirks of the real GPU traces (see _quirk_trace); runs without ../shared."""
    p = tmp_path / "host_123.1764547200000.pt.trace.json.gz"  # no rank in the name
    exp = _quirk_trace(p)
    assert len(gzip.decompress(p.read_bytes())) > 3 * 65536
    lake, res = _ingest(tmp_path, explicit(p, "train") + explicit(p, "infer"))
    cap = res.captures[0]
    assert cap.capture.rank == 5 and cap.capture.rank_source == "distributedInfo"
    k = {x["kernel_name"]: x for x in _dicts(lake, "kernels", "side = 'train'")}
    assert len(k) == 4  # 4 names, 5 kernels
    gemm = [x for x in _dicts(lake, "kernels", "side = 'train'") if x["kernel_name"].startswith("Cijk_")]
    assert [(x["match_confidence"], x["host_op_name"], x["step"]) for x in sorted(gemm, key=lambda x: x["start_ns"])] == [
        ("launch_enclosing", "aten::addmm", 7), ("launch_enclosing", "aten::addmm", 8)]
    assert k["orphan_kernel"]["match_confidence"] == "orphan" and k["orphan_kernel"]["step"] is None
    replay = [x for x in k.values() if x["match_confidence"] == "graph_replay"]
    assert len(replay) == 2 and {x["cann_api_name"] for x in replay} == {"hipGraphLaunch"}
    assert all(x["op_type"] == x["kernel_name"] and x["op_type_derived"] for x in replay)
    row = _dicts(lake, "captures", "side = 'train'")[0]
    assert row["rank"] == 5 and row["schema_version"] == "1" and row["session_start_ns"] == exp["start_ns"]
    assert json.loads(row["table_rows"])["keys_after_traceEvents"] == 5
    assert json.loads(row["steps"]) == {"7": 1, "8": 3}  # the graph launch is inside step 8
    assert "graph replay 2 (40.0 %)" in row["reason"] and "orphans (before the CPU window) 1 (20.0 %)" in row["reason"]
    # --profiler-step 8 keeps that step's kernels only (the orphan, with no launch, is in no step)
    lake2 = Lake(tmp_path / "lake2")
    ingest_profile(lake2, "t1", explicit(p, "train"), {}, allow_missing=True, progress=False, profiler_step=8)
    kept = _dicts(lake2, "kernels")
    assert sorted((x["kernel_name"][:4], x["step"]) for x in kept) == [("Cijk", 8), ("page", 8), ("page", 8)]
