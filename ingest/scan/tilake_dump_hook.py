"""tilake's rollout dump hook: msprobe around the rollout engine's real prefill, inside the rollout process.

A vLLM general plugin (entry point group ``vllm.general_plugins``; vLLM calls every entry point of that group in
each of its processes: the API server, the engine core and the workers, ``vllm/plugins/__init__.py``).
``tilake scan --dump`` copies this file next to the run output as ``hook/tilake_dump_hook.py`` with a
``hook/tilake_dump_hook-1.0.dist-info/entry_points.txt`` that registers :func:`register`, and puts ``hook/`` on
``PYTHONPATH`` in its injected block. It is standalone on purpose: tilake is not installed in the RL venv, so this
module imports nothing from tilake (only the standard library, then vLLM and msprobe when a dump is asked for).

Environment (set by the injected block; nothing happens without the first):

* ``TILAKE_ROLLOUT_DUMP_DIR`` — the msprobe dump path of the rollout side (msprobe writes ``step0/rank0/`` under it);
* ``TILAKE_ROLLOUT_MSPROBE_CONFIG`` — the msprobe ``config.json`` (task, level; on a stub round also ``load``:
  msprobe replaces the named modules' inputs by the ``.pt`` files under ``load.path``);
* ``TILAKE_ROLLOUT_DUMP_PREFILL`` — which real prefill to dump, 1-based (default 1: the step's first request).

What is dumped: the model forward of the first ``execute_model`` call of the worker's model runner whose scheduler
output schedules a new request (a prefill), logits included (vLLM computes them inside ``execute_model``). vLLM's
memory-profile and warm-up forwards go through ``_dummy_run``, never through ``execute_model``, so they are not
dumped. Once that prefill is dumped the hook is inert for the rest of the process.

Record: ``<dump dir>/tilake_rollout_dump.json`` (written atomically by the process that dumped): status
``dumped`` | ``error``, the request ids and prompt lengths of that prefill, a sha256 of its prompt token ids (the
training side's ids are compared with the dumped ones by ``tilake dumps analyze``), the pid, the msprobe config
used and, on an error, its reason. A dump that did not happen leaves no record with status ``dumped``: the scan
reports it as an error, never as an empty success.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import traceback

ENV_DIR = "TILAKE_ROLLOUT_DUMP_DIR"
ENV_CONFIG = "TILAKE_ROLLOUT_MSPROBE_CONFIG"
ENV_NTH = "TILAKE_ROLLOUT_DUMP_PREFILL"
RECORD = "tilake_rollout_dump.json"

_STATE = {"seen": 0, "done": False, "patched": False}


def _write_record(dump_dir: str, rec: dict) -> None:
    """Write ``rec`` to ``<dump_dir>/RECORD`` atomically (temp file + rename)."""
    os.makedirs(dump_dir, exist_ok=True)
    path = os.path.join(dump_dir, RECORD)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(rec, f, indent=1)
    os.replace(tmp, path)


def _new_requests(scheduler_output) -> list:
    """``[{req_id, prompt_tokens, computed_tokens, ids}]`` of the requests this step schedules for the first time
    (vLLM V1 ``SchedulerOutput.scheduled_new_reqs`` of ``NewRequestData``)."""
    out = []
    for r in getattr(scheduler_output, "scheduled_new_reqs", None) or []:
        ids = list(getattr(r, "prompt_token_ids", None) or [])
        out.append({"req_id": str(getattr(r, "req_id", "")), "prompt_tokens": len(ids),
                    "computed_tokens": int(getattr(r, "num_computed_tokens", 0) or 0), "ids": ids})
    return out


def _dump_prefill(runner, orig, dump_dir: str, config: str, reqs: list, args, kwargs):
    """Run ``orig`` (the model runner's ``execute_model``) under msprobe and write the record. A debugger that
    cannot start is recorded (status ``error``) and the step runs undumped; an error of the forward itself is
    recorded and raised."""
    rec = {"format": "tilake-rollout-dump/1", "pid": os.getpid(), "config": config, "dump_path": dump_dir,
           "prefill": _STATE["seen"],
           "requests": [{k: v for k, v in r.items() if k != "ids"} for r in reqs],
           "prompt_ids_sha256": [hashlib.sha256(json.dumps(r["ids"]).encode()).hexdigest() for r in reqs],
           "scheduled_tokens": int(getattr(args[0], "total_num_scheduled_tokens", 0) or 0),
           "started": time.time()}
    try:
        from msprobe.pytorch import PrecisionDebugger

        dbg = PrecisionDebugger(config_path=config or None, dump_path=dump_dir)
        dbg.start(model=runner.model)
    except Exception as exc:
        _write_record(dump_dir, dict(rec, status="error", reason=f"msprobe did not start: {type(exc).__name__}: "
                                     f"{exc}", traceback=traceback.format_exc()[-4000:]))
        return orig(runner, *args, **kwargs)
    try:
        out = orig(runner, *args, **kwargs)
    except Exception as exc:
        _write_record(dump_dir, dict(rec, status="error", reason=f"the dumped forward failed: {type(exc).__name__}: "
                                     f"{exc}", traceback=traceback.format_exc()[-4000:]))
        raise
    finally:
        dbg.stop()
    try:
        dbg.step()
    except Exception as exc:
        _write_record(dump_dir, dict(rec, status="error", reason=f"msprobe did not write the step: "
                                     f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-4000:]))
        return out
    rec.update(status="dumped", finished=time.time())
    _write_record(dump_dir, rec)
    return out


def register() -> None:
    """The ``vllm.general_plugins`` entry point: wrap ``GPUModelRunner.execute_model`` (the CPU, XPU and GPU
    runners of vLLM V1 inherit it) when ``TILAKE_ROLLOUT_DUMP_DIR`` is set; idempotent (vLLM may call plugins
    more than once in a process). An import failure is recorded, never raised into vLLM."""
    dump_dir = os.environ.get(ENV_DIR)
    if not dump_dir or _STATE["patched"]:
        return
    config = os.environ.get(ENV_CONFIG, "")
    try:
        nth = int(os.environ.get(ENV_NTH, "1") or 1)
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except Exception as exc:  # recorded for the scan: the dump cannot happen in this process
        _write_record(dump_dir, {"format": "tilake-rollout-dump/1", "status": "error", "pid": os.getpid(),
                                 "reason": f"cannot set up the hook: {type(exc).__name__}: {exc}"})
        return
    orig = GPUModelRunner.execute_model
    if getattr(orig, "_tilake_dump_hook", False):
        _STATE["patched"] = True
        return

    def execute_model(self, *args, **kwargs):
        if _STATE["done"] or not args:
            return orig(self, *args, **kwargs)
        reqs = _new_requests(args[0])
        if not reqs:
            return orig(self, *args, **kwargs)
        _STATE["seen"] += 1
        if _STATE["seen"] != nth:
            return orig(self, *args, **kwargs)
        _STATE["done"] = True
        return _dump_prefill(self, orig, dump_dir, config, reqs, args, kwargs)

    execute_model._tilake_dump_hook = True
    GPUModelRunner.execute_model = execute_model
    _STATE["patched"] = True
