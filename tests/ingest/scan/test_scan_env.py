"""Stage 1 environment check, the real NPU seam's honesty, and the live runner (tilake scan)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from tilake.ingest.scan import seam as npu_seam
from tilake.ingest.scan.env import check_environment, failed, tool_versions
from tilake.ingest.scan.run import expected_wait, phase_of, run_script
from tilake.ingest.scan.script import parse_script
from tilake.ingest.scan.seam import NpuProbe, TorchNpuSeam
from tilake.pipeline.scan import ScanStopped, _guard_output_dir, model_family

DATA = Path(__file__).resolve().parents[2] / "data" / "verl_launch"
FULL = {"megatron-core": "0.13.0", "vllm": "0.11.0", "vllm-ascend": "0.11.0rc1", "mbridge": "0.15.1"}


def _probe(**kw) -> NpuProbe:
    base = dict(seam="torch_npu", real=True, python="/usr/bin/python3", torch="2.7.1", torch_npu="2.7.1.post2",
                npu_count=8, msprof="/usr/local/Ascend/ascend-toolkit/latest/bin/msprof", packages=dict(FULL))
    base.update(kw)
    return NpuProbe(**base)


def _parsed(tmp_path, name="grpo_qwen3_megatron_vllm.sh", with_model=True):
    model = tmp_path / "model"
    if with_model:
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    return parse_script(DATA / name, env={"HOME": "/h", "MODEL_PATH": str(model)})


def test_all_checks_pass_on_a_complete_host(tmp_path):
    checks = check_environment(_parsed(tmp_path), _probe())
    assert failed(checks) == []
    names = [c.name for c in checks]
    assert names[:4] == ["import torch", "import torch_npu", "NPUs visible (torch.npu.device_count())", "msprof on PATH"]
    assert any(n.startswith("mbridge installed") for n in names) and names[-1] == "model config.json"


def test_each_failed_check_names_its_fix(tmp_path):
    p = _parsed(tmp_path, with_model=False)
    probe = _probe(torch_npu=None, torch_npu_error="ModuleNotFoundError: No module named 'torch_npu'", npu_count=None,
                   msprof=None, packages={"vllm": "0.11.0"})
    bad = failed(check_environment(p, probe))
    by = {c.name.split(" (")[0]: c for c in bad}
    assert set(by) == {"import torch_npu", "NPUs visible", "msprof on PATH", "megatron-core installed",
                       "vllm-ascend installed", "mbridge installed", "model config.json"}
    assert "set_env.sh" in by["msprof on PATH"].fix and "--from-output" in by["import torch_npu"].fix
    assert "pip install vllm-ascend" in by["vllm-ascend installed"].fix
    assert str(tmp_path / "model" / "config.json") in by["model config.json"].fix
    assert all(c.fix for c in bad)


def test_requirements_follow_the_backends(tmp_path):
    fsdp = parse_script(DATA / "grpo_qwen25_fsdp_vllm.sh", env={"HOME": "/h"})
    checks = check_environment(fsdp, _probe(packages={"vllm": "1", "vllm-ascend": "1"}))
    names = [c.name for c in checks]
    assert not any(n.startswith("megatron-core") for n in names)
    mb = [c for c in checks if c.name.startswith("mbridge")][0]
    assert not mb.ok and not mb.required            # only informational without use_mbridge=True
    # FSDP script asks for 4 NPUs per node
    few = check_environment(fsdp, _probe(npu_count=2, packages={"vllm": "1", "vllm-ascend": "1"}))
    assert any(c.name == "enough NPUs for trainer.n_gpus_per_node" and not c.ok for c in few)


def test_tool_versions_record_the_seam():
    tv = tool_versions(_probe())
    assert tv["torch_npu"] == "2.7.1.post2" and tv["npu_seam"] == "torch_npu" and tv["npu_seam_real"] is True
    assert tv["vllm-ascend"] == "0.11.0rc1"


def test_real_seam_says_plainly_when_torch_npu_is_absent(tmp_path):
    seam = TorchNpuSeam(python=sys.executable)
    probe = seam.probe(dict(os.environ))
    if probe.torch_npu is not None:
        pytest.skip("torch_npu importable here; this test covers hosts without it")
    assert probe.real and probe.seam == "torch_npu" and "torch_npu" in (probe.torch_npu_error or "")
    assert probe.npu_count is None
    raw = tmp_path / "x_ascend_pt"
    raw.mkdir()
    r = seam.analyse(raw, None, tmp_path / "a.log")
    assert not r.ok and r.real and r.error == "torch_npu not importable: analyse() cannot run on this machine"
    assert "No module named 'torch_npu'" in (tmp_path / "a.log").read_text()
    assert list(raw.iterdir()) == []


def test_default_seam_is_the_real_one():
    assert isinstance(npu_seam.get_seam(), TorchNpuSeam) and npu_seam.get_seam().real


def test_model_family_prefers_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    assert model_family({"model_path": str(tmp_path), "model_id": "x/Llama-3"}, tmp_path) == \
        ("qwen3", f"model_type in {tmp_path / 'config.json'}")
    assert model_family({"model_path": "/nope", "model_id": "Qwen/Qwen2.5-7B-Instruct"}, tmp_path)[0] == "qwen2.5"
    assert model_family({"model_path": "unknown", "model_id": "unknown"}, tmp_path)[0] == "unknown"


def test_output_dir_guard(tmp_path):
    script = tmp_path / "a" / "b" / "run.sh"
    script.parent.mkdir(parents=True)
    script.write_text("x")
    for bad in (Path("/"), Path.home(), script.parent, tmp_path / "a"):
        with pytest.raises(ScanStopped, match="refusing"):
            _guard_output_dir(bad, script)
    _guard_output_dir(script.parent / "profiler_output", script)


# ------------------------------------------------------------------------------ runner
def test_phases_and_expected_wait():
    assert phase_of("(WorkerDict pid=1) update_actor done") == "actor update (training path)"
    assert phase_of("(W) compute_ref_log_prob") == "ref log-prob (training path)"
    assert phase_of("(W) compute_log_prob") == "actor log-prob (training path)"
    assert phase_of("(A) generate_sequences start") == "rollout (vLLM inference)"
    assert phase_of("+ ROLLOUT=(actor_rollout_ref.rollout.name=vllm)") is None     # set -x trace
    assert phase_of("step:1 - actor/pg_loss:0.1") == "step finished"
    assert expected_wait("Qwen/Qwen3-0.6B").startswith("5-10 min")
    assert expected_wait("Qwen3-30B-A3B").startswith("30 min")
    assert expected_wait("unknown").startswith("5-15 min")


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")
def test_runner_tees_log_and_honours_timeout(tmp_path):
    s = tmp_path / "r.sh"
    s.write_text('echo "[profiler] start"\necho "$1"\nmkdir -p out && rm -rf out\nsleep 30\necho never\n')
    t = time.monotonic()
    r = run_script(s, ["arg one"], dict(os.environ), tmp_path / "out" / "run.log", timeout_s=1.0)
    assert time.monotonic() - t < 20
    assert r.interrupted and r.reason == "timed out after 1 s" and r.returncode != 0
    log = (tmp_path / "out" / "run.log").read_text()
    assert "[profiler] start\narg one\n" in log and "never" not in log and r.log_path == tmp_path / "out" / "run.log"
    assert r.tail[:2] == ["[profiler] start", "arg one"]


def test_model_config_found_in_the_hugging_face_cache(tmp_path):
    from tilake.ingest.scan.env import model_config_json

    snap = tmp_path / "hub" / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    assert model_config_json("Qwen/Qwen2.5-7B-Instruct", tmp_path, env) == snap / "config.json"
    assert model_config_json("Qwen/Qwen3-8B", tmp_path, env) is None
    p = parse_script(DATA / "grpo_qwen25_fsdp_vllm.sh", env={"HOME": "/h"})
    cj = [c for c in check_environment(p, _probe(), env) if c.name == "model config.json"][0]
    assert cj.ok and str(snap) in cj.detail


def test_probe_sees_the_devices_the_script_exports(tmp_path):
    from tilake.lake.store import Lake
    from tilake.pipeline.scan import scan

    sys.path.insert(0, str(DATA / "standin"))
    from scan_standin import StandInSeam

    seam = StandInSeam()
    scan(DATA / "grpo_qwen3_megatron_vllm.sh", Lake(tmp_path / "lake"), env={"HOME": "/h", "PATH": "/usr/bin:/bin"},
         seam=seam, dry_run=True, console=Console(quiet=True))
    assert seam.probe_envs[0]["ASCEND_RT_VISIBLE_DEVICES"] == "1"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")
def test_ctrl_c_stops_the_run_and_keeps_the_log(tmp_path):
    import signal
    import subprocess

    s = tmp_path / "r.sh"
    flag = tmp_path / "started.flag"
    s.write_text(f'echo started\ntouch {flag}\nsleep 60\n')
    # the child sets its own SIGINT handler: under nohup or a background CI runner SIGINT is inherited
    # as ignored (SIG_IGN) and Python would keep ignoring it
    prog = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "import sys, json; from pathlib import Path; from tilake.ingest.scan.run import run_script\n"
            f"r = run_script(Path({str(s)!r}), [], {{'PATH': '/usr/bin:/bin'}}, Path({str(tmp_path / 'po' / 'run.log')!r}))\n"
            "print('RESULT', json.dumps([r.interrupted, r.reason]))\n")
    p = subprocess.Popen([sys.executable, "-c", prog], stdout=subprocess.PIPE, text=True)
    log = tmp_path / "po" / "run.log"
    deadline = time.monotonic() + 30
    while not flag.exists() and time.monotonic() < deadline:      # the script is running
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
    assert 'RESULT [true, "interrupted (Ctrl-C)"]' in out
    assert "started" in log.read_text() and "interrupted (Ctrl-C)" in log.read_text()
