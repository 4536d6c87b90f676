"""Folder layouts of a verl ``profiler_output/`` (reference doc §3.1, §4.1) built from populations.

::

    profiler_output/
      e2e/<host>_<pid>_<ts>_ascend_pt/                 one per training rank (verl, ExportType.Db, parsed)
        profiler_info_<rank>.json  profiler_metadata.json  FRAMEWORK/  PROF_<n>_<ts>_<RANDOM>/{host,device_<id>}/data/
        ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_<rank>.db
      agent_loop_rollout_replica_0/<host>_<pid>_<ts>_ascend_pt/     vllm-ascend (ExportType.Text, level1)
        form "raw":  profiler_info_0.json, profiler_metadata.json, FRAMEWORK/, PROF_*/ only (before analyse())
        form "db":   raw + ASCEND_PROFILER_OUTPUT/{ascend_pytorch_profiler_0.db, *.csv}  (CANN ≥ 8.3 text+db)
        form "text": raw + ASCEND_PROFILER_OUTPUT/*.csv only

The raw ``FRAMEWORK/`` and ``PROF_*/…/data`` files are **not** torch_npu's binary formats: they hold a
synthetic encoding (zlib-compressed JSON of the population and capture options, in
``FRAMEWORK/torch.op_range``; small deterministic filler elsewhere) that only :func:`write_analysed`
reads — the stand-in for ``torch_npu.profiler.profiler.analyse()``. Directory names follow
``{worker}_{pid}_{YYYYMMDDHHMMSSmmm}_ascend_pt`` (``_profiler_path_creator.py``) and
``PROF_\\d+_\\d+_[0-9a-zA-Z]+``.
"""
from __future__ import annotations

import datetime as _dt
import json
import zlib
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TypedDict, Union

from tilake.synth.db import HCCL_GROUP, write_profiler_db
from tilake.synth.population import PHASE_MARKS, infer_population, train_population, with_verl_marks
from tilake.synth.records import HostOp, JobConfig, Kernel, Population
from tilake.synth.text import write_text_export
from tilake.synth.timeline import DEFAULT_START_NS, build_timeline

INFER_FORMS = ("db", "raw", "text")
_LEVEL_NAME = {"level0": "Level0", "level1": "Level1", "level2": "Level2"}
_ENCODING_MAGIC = b"TILAKE-SYNTH-1\n"


_OP_FIELDS = ("name", "parent", "phase", "module", "layer", "direction", "fw_shapes", "fw_dtypes", "tag")
_K_FIELDS = tuple(f.name for f in fields(Kernel))


def population_to_json(pop: Population) -> dict:
    """Compact plain-JSON form of a population (inverse: :func:`population_from_json`).

    Stacks are stored once in a ``stacks`` table; ops and kernels as positional lists
    (``op_fields`` / ``kernel_fields`` name the positions).
    """
    stacks: dict = {}
    ops = []
    for op in pop.ops:
        sid = stacks.setdefault(op.stack, len(stacks))
        ops.append([getattr(op, f) for f in _OP_FIELDS] + [sid, [[getattr(k, f) for f in _K_FIELDS]
                                                                for k in op.kernels]])
    return {"side": pop.side, "phases": list(pop.phases), "backend": pop.backend, "job": asdict(pop.job),
            "op_fields": list(_OP_FIELDS), "kernel_fields": list(_K_FIELDS),
            "stacks": [list(st) for st in stacks], "ops": ops}


def population_from_json(data: dict) -> Population:
    """Rebuild a :class:`Population` from :func:`population_to_json` output."""
    stacks = [tuple(st) for st in data["stacks"]]
    of, kf = data["op_fields"], data["kernel_fields"]
    ops = []
    for row in data["ops"]:
        kw = dict(zip(of, row[:len(of)]))
        kw["stack"] = stacks[row[len(of)]]
        kw["kernels"] = [Kernel(**dict(zip(kf, k))) for k in row[len(of) + 1]]
        ops.append(HostOp(**kw))
    return Population(data["side"], ops, tuple(data["phases"]), JobConfig(**data["job"]), data["backend"])


def _ts(ns: int) -> str:
    d = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.timezone.utc)
    return d.strftime("%Y%m%d%H%M%S") + f"{(ns // 1_000_000) % 1000:03d}"


def _profiler_info(rank: int, level: str, export_type: str, msprof_tx: bool, with_stack: bool,
                   start_ns: int, end_ns: int) -> dict:
    """``profiler_info_{rank}.json`` as torch_npu writes it (keys from the real fixture)."""
    return {
        "config": {
            "common_config": {
                "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                "schedule": {"wait": 0, "active": 1, "warmup": 0, "repeat": 1, "skip_first": 0},
                "record_shapes": True, "profile_memory": False, "with_stack": with_stack,
                "with_flops": False, "with_modules": False},
            "experimental_config": {
                "_profiler_level": _LEVEL_NAME[level],
                "_aic_metrics": "ACL_AICORE_NONE" if level == "level0" else "ACL_AICORE_PIPE_UTILIZATION",
                "_l2_cache": False, "_msprof_tx": msprof_tx, "_data_simplification": True,
                "record_op_args": False, "_export_type": export_type, "_op_attr": False,
                "_gc_detect_threshold": None}},
        "start_info": {"syscnt_enable": True, "freq": 100, "start_cnt": 17_056_624_104_232 + rank,
                       "start_monotonic": 170_347_846_588_710 + rank},
        "end_info": {"collectionTimeEnd": end_ns, "MonotonicTimeEnd": 170_347_846_588_710 + (end_ns - start_ns)},
        "rank_id": rank,
    }


def _dump_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=4), encoding="utf-8")


def write_raw(pt_dir: Union[str, Path], population: Population, *, rank: int = 0, level: str = "level1",
              export_type: str = "text", msprof_tx: bool = False, with_stack: bool = False, seed: int = 0,
              start_ns: Optional[int] = None, db_options: Optional[dict] = None, world_size: int = 1,
              pid: Optional[int] = None, host_name: str = "node-0", timeline=None) -> dict:
    """Write an unparsed ``*_ascend_pt`` folder (what vllm-ascend leaves before ``analyse()``).

    Contents: ``profiler_info_{rank}.json`` (torch_npu keys from the real fixture; ``_profiler_level``,
    ``_export_type``, ``_msprof_tx`` set from the arguments), ``profiler_metadata.json`` (ENV_VARIABLES,
    plus ``distributed_args``/``parallel_group_info`` for training), ``FRAMEWORK/torch.op_range`` (the
    synthetic encoding :func:`write_analysed` reads), ``FRAMEWORK/torch.op_mark``,
    ``PROF_<n>_<ts>_<ID>/host/{info.json,data/…}`` and ``PROF_…/device_<rank>/{start_info.<rank>,data/…}``.

    Args:
        pt_dir: the ``*_ascend_pt`` folder to write (created).
        population: what the capture holds.
        rank, level, seed, start_ns, pid, world_size: as for :func:`write_profiler_db`.
        export_type: ``text`` (vllm-ascend) or ``db`` (verl training).
        msprof_tx / with_stack: the profiler switches (recorded; used by :func:`write_analysed`).
        db_options: extra :func:`write_profiler_db` keywords used when the folder is analysed
            (schema, block_columns, wal, session_end, device_tables).
        host_name: recorded in ``host/info.json`` and later in HOST_INFO.
        timeline: a prebuilt timeline (must match the other arguments).
    Returns:
        ``{"dir", "files": [relative paths]}``.
    """
    pt = Path(pt_dir)
    tl = timeline or build_timeline(population, rank=rank, seed=seed, start_ns=start_ns, pid=pid)
    pt.mkdir(parents=True, exist_ok=True)
    _dump_json(pt / f"profiler_info_{rank}.json",
               _profiler_info(rank, level, export_type, msprof_tx, with_stack, tl.start_ns, tl.end_ns))
    meta = {"ENV_VARIABLES": {"ASCEND_GLOBAL_LOG_LEVEL": "", "HCCL_RDMA_TC": "", "HCCL_RDMA_SL": "",
                              "ACLNN_CACHE_LIMIT": "", "HOST_CACHE_CAPACITY": "", "ASCEND_ENHANCE_ENABLE": "",
                              "PYTORCH_NPU_ALLOC_CONF": "", "ASCEND_LAUNCH_BLOCKING": ""}}
    if population.side == "train":
        j = population.job
        meta["distributed_args"] = {"tensor_model_parallel_size": j.tp, "pipeline_model_parallel_size": j.pp,
                                    "data_parallel_size": world_size, "context_parallel_size": 1,
                                    "expert_model_parallel_size": j.ep, "sequence_parallel": False,
                                    "rank": rank, "world_size": world_size}
        meta["parallel_group_info"] = {HCCL_GROUP: {"group_name": "dp", "group_rank": rank,
                                                    "global_ranks": list(range(world_size))}}
    _dump_json(pt / "profiler_metadata.json", meta)
    fw = pt / "FRAMEWORK"
    fw.mkdir(exist_ok=True)
    payload = {"population": population_to_json(population),
               "options": {"rank": rank, "level": level, "seed": seed, "start_ns": tl.start_ns,
                           "with_stack": with_stack, "msprof_tx": msprof_tx, "world_size": world_size,
                           "pid": tl.pid, "host_name": host_name,
                           "db": db_options or {}}}
    (fw / "torch.op_range").write_bytes(_ENCODING_MAGIC + zlib.compress(
        json.dumps(payload, sort_keys=True).encode("utf-8"), 6))
    (fw / "torch.op_mark").write_bytes(_ENCODING_MAGIC + len(tl.api_rows).to_bytes(8, "little"))
    prof = pt / f"PROF_{rank + 1:06d}_{_ts(tl.start_ns)}_{'SYNTHRAWDATA' + 'ABCDEFGH'[rank % 8]}"
    device = prof / f"device_{rank}"
    for d in (prof / "host" / "data", device / "data"):
        d.mkdir(parents=True, exist_ok=True)
    (prof / "host" / "data" / "api_event.data.slice_0").write_bytes(
        _ENCODING_MAGIC + len(tl.cann_rows).to_bytes(8, "little"))
    (device / "data" / "ts_track.data.0.slice_0").write_bytes(
        _ENCODING_MAGIC + len(tl.kernels).to_bytes(8, "little"))
    _dump_json(prof / "host" / "info.json", {"hostname": host_name, "rank_id": rank})
    (device / f"start_info.{rank}").write_text(json.dumps({"collectionTimeBegin": str(tl.start_ns // 1000)}),
                                               encoding="utf-8")
    files = sorted(str(p.relative_to(pt)) for p in pt.rglob("*") if p.is_file())
    return {"dir": str(pt), "files": files}


def write_analysed(raw_dir: Union[str, Path], form: str = "db") -> dict:
    """Turn an unparsed ``*_ascend_pt`` folder written by :func:`write_raw` into a parsed one.

    The stand-in for ``torch_npu.profiler.profiler.analyse()``: creates ``ASCEND_PROFILER_OUTPUT/`` with
    the DB and CSVs (``form='db'``, what CANN ≥ 8.3 does for a text export) or CSVs only (``form='text'``);
    FRAMEWORK/ and PROF_* stay, as after a real parse.

    Returns:
        summary dict: ``dir, form, db (write_profiler_db summary or None), text (write_text_export summary)``.
    Raises:
        ValueError: ``form`` unknown, the folder holds no synthetic raw data, or it is already parsed.
    """
    if form not in ("db", "text"):
        raise ValueError(f"form must be 'db' or 'text', got {form!r}")
    pt = Path(raw_dir)
    enc = pt / "FRAMEWORK" / "torch.op_range"
    if not enc.is_file() or not enc.read_bytes().startswith(_ENCODING_MAGIC):
        raise ValueError(f"{pt}: no synthetic raw profiler data (FRAMEWORK/torch.op_range)")
    out = pt / "ASCEND_PROFILER_OUTPUT"
    if out.exists():
        raise ValueError(f"{pt}: already parsed (ASCEND_PROFILER_OUTPUT exists)")
    payload = json.loads(zlib.decompress(enc.read_bytes()[len(_ENCODING_MAGIC):]))
    pop = population_from_json(payload["population"])
    o = payload["options"]
    rank = o["rank"]
    tl = build_timeline(pop, rank=rank, seed=o["seed"], start_ns=o["start_ns"], pid=o.get("pid"))
    db = None
    if form == "db":
        db = write_profiler_db(out / f"ascend_pytorch_profiler_{rank}.db", pop, rank=rank, level=o["level"],
                               seed=o["seed"], start_ns=o["start_ns"], with_stack=o["with_stack"],
                               with_mstx=o["msprof_tx"], world_size=o["world_size"], timeline=tl,
                               host_name=o.get("host_name", "node-0"), **o["db"])
    text = write_text_export(out, pop, rank=rank, level=o["level"], seed=o["seed"], start_ns=o["start_ns"],
                             with_stack=o["with_stack"], timeline=tl, schema=o["db"].get("schema", "2025-01"),
                             block_columns=o["db"].get("block_columns", "blockDim"))
    return {"dir": str(pt), "form": form, "db": db, "text": text}


def pt_dir_name(worker: str, pid: int, start_ns: int) -> str:
    """``{worker}_{pid}_{YYYYMMDDHHMMSSmmm}_ascend_pt``."""
    return f"{worker}_{pid}_{_ts(start_ns)}_ascend_pt"



class SynthOutput(TypedDict):
    """What :func:`make_profiler_output` wrote (see its Returns)."""

    # the profiler_output folder
    root: str
    # one dict per training rank / rollout replica (rank, dir, form, db, summary, raw_files | text)
    train: List[Dict[str, Any]]
    infer: List[Dict[str, Any]]
    # the figures a test expects of one rank/replica (kernels, op types, host ops, parsed ranks)
    expected: Dict[str, Any]


def make_profiler_output(root: Union[str, Path], *, train_ranks: int = 1, infer_form: str = "db",
                         infer_replicas: int = 1, level: str = "level1", infer_level: str = "level1",
                         unparsed_train_ranks: Sequence[int] = (), seed: int = 0, job: Optional[JobConfig] = None,
                         train_pop: Optional[Population] = None, infer_pop: Optional[Population] = None,
                         schema: str = "2025-01", block_columns: str = "blockDim", wal: bool = False,
                         session_end: str = "ok", with_stack: bool = True, with_mstx: bool = True,
                         infer_with_stack: bool = True, device_tables: str = "full",
                         attribution_probe: bool = True, host_name: str = "node-0",
                         start_ns: Optional[int] = None, phase_marks: str = "mstx") -> SynthOutput:
    """Write a verl ``profiler_output/`` folder for the reference job.

    Args:
        root: the ``profiler_output`` folder to create (may exist, must be empty or absent).
        train_ranks: training ranks (data parallel), one ``e2e/*_ascend_pt`` folder each.
        infer_form: ``db`` | ``raw`` | ``text`` for every rollout replica.
        infer_replicas: number of ``agent_loop_rollout_replica_<n>`` folders.
        level / infer_level: profiler level of the training / inference captures.
        unparsed_train_ranks: training ranks written raw (no ASCEND_PROFILER_OUTPUT).
        seed: jitter seed (same seed → identical files).
        job: job shape (default reference job; shrink ``layers`` for fast tests).
        train_pop / infer_pop: populations to write instead of the default ones (edited copies).
        schema, block_columns, wal, session_end, device_tables: DB variants (training DBs and the
            inference DB) — see :func:`write_profiler_db`.
        with_stack / with_mstx: training switches; infer_with_stack: inference PYTORCH_CALLCHAINS.
        attribution_probe: include the 0-kernel and 3-kernel probe host ops in the training population.
        host_name: worker name in folder names and HOST_INFO.
        start_ns: session start of rank 0 (default fixed).
        phase_marks: ``mstx`` (default: the training DBs carry verl's worker-function MSTX ranges
            ``compute_log_prob`` …, the inference DB none) or ``verl`` (the range names of a real verl +
            vLLM run on both sides, :func:`tilake.synth.population.with_verl_marks`; docs/phases.md).
    Returns:
        ``{"root", "train": [per-rank dicts], "infer": [per-replica dicts], "expected": {...}}``; each
        rank dict has ``rank, dir, form, db`` (DB path or None), ``summary`` (the writer's summary;
        for a ``text`` replica the text-export summary), ``raw_files`` (training) / ``text`` (inference);
        ``expected`` holds ``train_kernels, infer_kernels, train_op_types, infer_op_types,
        train_host_ops, infer_host_ops`` for one rank/replica.
    Raises:
        ValueError: unknown form/level/variant; FileExistsError: ``root`` is a non-empty folder.
    """
    if infer_form not in INFER_FORMS:
        raise ValueError(f"infer_form must be one of {INFER_FORMS}, got {infer_form!r}")
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} is not empty")
    j = job or JobConfig()
    if phase_marks not in PHASE_MARKS:
        raise ValueError(f"phase_marks must be one of {PHASE_MARKS}, got {phase_marks!r}")
    tpop = train_pop or train_population(j, attribution_probe=attribution_probe)
    ipop = infer_pop or infer_population(j)
    if phase_marks == "verl":
        tpop, ipop = with_verl_marks(tpop, ipop)
    t0 = start_ns if start_ns is not None else DEFAULT_START_NS
    db_opts = dict(schema=schema, block_columns=block_columns, wal=wal, session_end=session_end,
                   device_tables=device_tables)
    result: SynthOutput = {"root": str(root), "train": [], "infer": [], "expected": {}}
    for rank in range(train_ranks):
        rs = t0 + rank * 1_000_000
        pid = 3_217_657 + 97 * rank
        pt = root / "e2e" / pt_dir_name(host_name, pid, rs)
        tl = build_timeline(tpop, rank=rank, seed=seed, start_ns=rs, pid=pid)
        raw = write_raw(pt, tpop, rank=rank, level=level, export_type="db", msprof_tx=with_mstx,
                        with_stack=with_stack, seed=seed, start_ns=rs, db_options=db_opts, world_size=train_ranks,
                        pid=pid, host_name=host_name, timeline=tl)
        entry = {"rank": rank, "dir": str(pt), "form": "raw", "db": None, "summary": None}
        if rank not in set(unparsed_train_ranks):
            out = pt / "ASCEND_PROFILER_OUTPUT"
            s = write_profiler_db(out / f"ascend_pytorch_profiler_{rank}.db", tpop, rank=rank, level=level,
                                  seed=seed, start_ns=rs, with_stack=with_stack, with_mstx=with_mstx,
                                  world_size=train_ranks, host_name=host_name, pid=pid, timeline=tl,
                                  **db_opts)
            entry.update(form="db", db=s["path"], summary=s)
        entry["raw_files"] = raw["files"]
        result["train"].append(entry)
    for rep in range(infer_replicas):
        rs = t0 + 500_000_000 + rep * 1_000_000
        pid = 3_267_657 + 31 * rep
        pt = root / f"agent_loop_rollout_replica_{rep}" / pt_dir_name(host_name, pid, rs)
        write_raw(pt, ipop, rank=0, level=infer_level, export_type="text", msprof_tx=phase_marks == "verl",
                  with_stack=infer_with_stack, seed=seed + rep, start_ns=rs, db_options=db_opts, pid=pid,
                  host_name=host_name)
        entry = {"replica": rep, "rank": 0, "dir": str(pt), "form": infer_form, "db": None, "summary": None}
        if infer_form != "raw":
            a = write_analysed(pt, infer_form)
            entry["summary"] = a["db"] or a["text"]
            entry["text"] = a["text"]
            if a["db"]:
                entry["db"] = a["db"]["path"]
        result["infer"].append(entry)
    result["expected"] = {
        "train_kernels": tpop.compute_kernel_count() + tpop.communication_op_count(),
        "train_compute_kernels": tpop.compute_kernel_count(),
        "infer_kernels": ipop.compute_kernel_count() + ipop.communication_op_count(),
        "train_op_types": dict(tpop.op_type_counts()), "infer_op_types": dict(ipop.op_type_counts()),
        "train_host_ops": sum((1 if op.name else 0) + (1 if op.parent else 0) for op in tpop.ops),
        "infer_host_ops": sum((1 if op.name else 0) + (1 if op.parent else 0) for op in ipop.ops),
        "parsed_train_ranks": [e["rank"] for e in result["train"] if e["form"] == "db"],
        "unparsed_train_ranks": sorted(set(unparsed_train_ranks) & set(range(train_ranks))),
    }
    return result
