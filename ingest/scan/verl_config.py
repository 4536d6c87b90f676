"""Stage 1b of ``tilake scan``: the verl fields of a located launch command.

Facts about the config keys come from verl's Hydra configs (``verl/trainer/config/*.yaml``,
reference doc §4.1): ``actor_rollout_ref.actor.strategy`` (megatron | fsdp | fsdp2),
``actor_rollout_ref.rollout.name`` (vllm | sglang | hf), ``...megatron.{tensor,pipeline,
expert}_model_parallel_size``, ``data.{max_prompt_length,max_response_length,train_batch_size}``,
``trainer.total_training_steps``, ``actor_rollout_ref.rollout.{enforce_eager,
calculate_log_probs,n}``; ``ppo_megatron_trainer.yaml`` sets ``strategy: megatron`` and
``ppo_trainer.yaml`` (the default config of ``main_ppo``) sets ``strategy: fsdp``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from tilake.ingest.scan.bash_tree import Token
from tilake.ingest.scan.shell import UNKNOWN, Shell, Unknown, Value, plain
from tilake.ingest.scan.verl_defaults import (
    KNOWN_CONFIGS,
    MEGATRON_DEFAULTS,
    VERL_COMMIT,
    VERL_DEFAULTS,
    config_stem,
    find_config,
    infer_backend,
    read_config,
)


@dataclass
class LaunchCommand:
    """The located ``python -m verl...`` command.

    Attributes:
        module: e.g. ``verl.trainer.main_ppo``.
        line: 1-based line of its first word. words: its word tokens (source offsets).
        fields: expanded argument fields after the module (Unknown where not knowable).
        overrides: Hydra ``key -> value`` (leading ``+``/``++`` stripped; later wins).
        config_name: ``--config-name`` value or None. passthrough: ``$@``/``$*`` present.
        insert_at: offset where ``"${PROFILER[@]}"`` goes (after the last argument that is not
            ``$@``). insert_indent: indentation to use when the arguments are one per line, else None.
        conditional / in_function: where the command sits. config_path: ``--config-path`` value.
        program: the first word that is not an assignment (``python3``, ``ray``, ``torchrun``).
        env: assignments prefixed to the command (``ASCEND_RT_VISIBLE_DEVICES=4,5 python3 ...``):
            its own environment.
    """

    module: str
    line: int
    words: List[Token]
    fields: List[Value]
    overrides: Dict[str, Value]
    config_name: Optional[str]
    passthrough: bool
    insert_at: int
    insert_indent: Optional[str]
    conditional: bool
    in_function: bool
    config_path: Optional[str] = None
    program: str = ""
    env: Dict[str, Value] = field(default_factory=dict)


_BOOL = {"true": True, "false": False}


def _typed(v: Value) -> Any:
    if isinstance(v, Unknown):
        return UNKNOWN
    s = v.strip().strip("'\"")
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if s.lower() in _BOOL:
        return _BOOL[s.lower()]
    return s


#: config row -> Hydra key (the order of the stage-1 table)
FIELDS = {
    "infer_backend": "actor_rollout_ref.rollout.name",
    "infer_tp": "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "infer_dp": "actor_rollout_ref.rollout.data_parallel_size",
    "infer_ep": "actor_rollout_ref.rollout.expert_parallel_size",
    "infer_enable_expert_parallel": "actor_rollout_ref.rollout.enable_expert_parallel",
    "max_prompt_length": "data.max_prompt_length",
    "max_response_length": "data.max_response_length",
    "train_batch_size": "data.train_batch_size",
    "total_training_steps": "trainer.total_training_steps",
    "total_epochs": "trainer.total_epochs",
    "n_gpus_per_node": "trainer.n_gpus_per_node",
    "nnodes": "trainer.nnodes",
    "device": "trainer.device",
    "rollout_enforce_eager": "actor_rollout_ref.rollout.enforce_eager",
    "rollout_calculate_log_probs": "actor_rollout_ref.rollout.calculate_log_probs",
    "rollout_n": "actor_rollout_ref.rollout.n",
    "rollout_mode": "actor_rollout_ref.rollout.mode",
    "adv_estimator": "algorithm.adv_estimator",
}
_MEGATRON = (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"),
             ("ep", "expert_model_parallel_size"), ("cp", "context_parallel_size"))
#: every source of a value verl supplies (not the script) starts with this; shown as ``(default)``
DEFAULT_MARK = "verl default"


def is_default(source: str) -> bool:
    """Whether a config source says the value is verl's default rather than the script's."""
    return source.startswith((DEFAULT_MARK, "verl megatron default", "config default"))


def extract_config(launch: LaunchCommand, shell: Shell, script: Path,
                   cwd: Optional[Path] = None) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """The stage-1 table of the seed (训练后端, 推理引擎, 模型路径/ID, TP/PP/EP, lengths, batch, steps,
    NPU devices, rollout options) from the launch overrides and shell variables.

    Fields the script leaves unset take the value of the config ``--config-name`` selects when
    that file is on this machine, else verl's default (:data:`.verl_defaults.VERL_DEFAULTS`), with a
    source starting ``verl default``; Megatron sizes read ``n/a (<backend>)`` on FSDP scripts.

    Args:
        launch: the launch command. shell: variables at the launch. script: the script path.
        cwd: working directory for relative config paths (default: the current one).
    Returns:
        ``(config, sources)``: config values (int/bool/str or ``"unknown"``; ``hydra_overrides``
        holds every override as text) and, per key, where the value came from.
    """
    ov = launch.overrides
    cfg: Dict[str, Any] = {}
    src: Dict[str, str] = {}

    def from_key(name: str, *keys: str) -> None:
        for k in keys:
            if k in ov:
                cfg[name] = _typed(ov[k])
                src[name] = f"override {k}" + (f" ({ov[k].reason})" if isinstance(ov[k], Unknown) else "")
                return
        cfg[name] = UNKNOWN
        src[name] = "not set in the script (" + " / ".join(keys) + ")"

    cname = (launch.config_name or "").strip("'\"")
    chosen = cname or ("ppo_trainer" if launch.module == "verl.trainer.main_ppo" else "")
    found = find_config(chosen, launch.config_path, launch.module, script.parent, cwd or Path.cwd()) \
        if chosen else None
    file_values, files = read_config(found) if found else ({}, [])
    from_key("train_backend", "actor_rollout_ref.actor.strategy")
    if cfg["train_backend"] == UNKNOWN and chosen:
        _backend_from_config(cfg, src, chosen, cname, found, file_values, files, ov)
    from_key("model_path", "actor_rollout_ref.model.path")
    if cfg["model_path"] == UNKNOWN and isinstance(shell.vars.get("MODEL_PATH"), str):
        cfg["model_path"], src["model_path"] = shell.vars["MODEL_PATH"], "variable MODEL_PATH"
    mid = shell.vars.get("MODEL_ID")
    mp = cfg["model_path"]
    if isinstance(mid, str) and mid:
        cfg["model_id"], src["model_id"] = mid, "variable MODEL_ID"
    elif isinstance(mp, str) and mp != UNKNOWN and re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", mp) \
            and mp.split("/")[0] not in (".", "..") and not (script.parent / mp).exists():
        cfg["model_id"], src["model_id"] = mp, "model path is a hub id"
    elif isinstance(mp, str) and mp != UNKNOWN:
        cfg["model_id"], src["model_id"] = Path(mp.rstrip("/")).name, "last component of the model path"
    else:
        cfg["model_id"], src["model_id"] = UNKNOWN, "no MODEL_ID variable and model path unknown"
    backend = cfg["train_backend"]
    for name, leaf in _MEGATRON:
        key = f"actor_rollout_ref.actor.megatron.{leaf}"
        from_key(f"train_{name}", key)
        if key in ov:
            continue          # set by the script (perhaps to a value only known at run time)
        if backend == "megatron":
            value, where = (file_values[key], files[0]) if key in file_values else MEGATRON_DEFAULTS[key]
            cfg[f"train_{name}"], src[f"train_{name}"] = value, f"verl megatron default ({leaf}: {value}, {where})"
        elif isinstance(backend, str) and backend.startswith("fsdp"):
            cfg[f"train_{name}"], src[f"train_{name}"] = f"n/a ({backend})", \
                f"{backend} backend: Megatron parallel sizes do not apply"
    caveat = ""
    if found is None and config_stem(chosen) not in KNOWN_CONFIGS and not launch.module.startswith("verl."):
        caveat = f"; config {config_stem(chosen) or 'of ' + launch.module} not found here, it may set another value"
    for name, key in FIELDS.items():
        from_key(name, key)
        if key in ov:
            continue
        if key in file_values:
            cfg[name], src[name] = file_values[key], f"config default ({key.rsplit('.', 1)[1]} in {files[0]})"
        elif key in VERL_DEFAULTS:
            value, where = VERL_DEFAULTS[key]
            cfg[name], src[name] = value, (f"{DEFAULT_MARK} ({key.rsplit('.', 1)[1]}: {value}, {where} at verl "
                                           f"{VERL_COMMIT}{caveat})")
    if cfg["total_training_steps"] == UNKNOWN and "trainer.total_training_steps" not in ov:
        epochs = cfg["total_epochs"]
        src["total_training_steps"] = (f"not set: verl runs {epochs if epochs != UNKNOWN else 'all'} epoch(s) "
                                       "(trainer.total_epochs); the step count depends on the dataset size")
    _visible_devices(cfg, src, launch, shell)
    cfg["config_name"] = cname or UNKNOWN
    cfg["config_file"] = str(found) if found else UNKNOWN
    cfg["launch_module"] = launch.module
    cfg["passthrough_args"] = launch.passthrough
    cfg["hydra_overrides"] = {k: (UNKNOWN if isinstance(v, Unknown) else v) for k, v in ov.items()}
    return cfg, src


def _backend_from_config(cfg: Dict[str, Any], src: Dict[str, str], chosen: str, cname: str, found: Optional[Path],
                         file_values: Dict[str, Any], files: List[str], ov: Dict[str, Value]) -> None:
    """``train_backend`` when the script does not set ``actor.strategy``: the config file's, a verl
    config's known strategy, or inferred from the name and the keys set (the source says which)."""
    strategy = file_values.get("actor_rollout_ref.actor.strategy")
    label = f"--config-name {cname}" if cname else f"config {chosen} (default of main_ppo)"
    if found is not None and isinstance(strategy, str):
        cfg["train_backend"] = strategy
        src["train_backend"] = f"{label}: actor.strategy: {strategy} in " + " <- ".join(files)
    elif config_stem(chosen) in KNOWN_CONFIGS:
        strategy = KNOWN_CONFIGS[config_stem(chosen)]
        cfg["train_backend"] = strategy
        src["train_backend"] = f"{label} (verl sets actor.strategy: {strategy} there)"
    else:
        guess, why = infer_backend(chosen, ov)
        if guess is not None:
            cfg["train_backend"], src["train_backend"] = guess, f"{label}: {why}"
        else:
            src["train_backend"] = f"{label}: {why}"


def _visible_devices(cfg: Dict[str, Any], src: Dict[str, str], launch: LaunchCommand, shell: Shell) -> None:
    name = "ASCEND_RT_VISIBLE_DEVICES"
    if name in launch.env:
        cfg["visible_devices"] = plain(launch.env[name])
        src["visible_devices"] = f"{name} prefixed to the launch command (line {launch.line})"
        return
    vis = shell.vars.get(name)
    if vis is None:
        cfg["visible_devices"], src["visible_devices"] = UNKNOWN, f"{name} not set (all NPUs visible)"
    else:
        cfg["visible_devices"] = plain(vis)
        src["visible_devices"] = (f"variable {name}" if name in shell.exported else f"{name} (not exported)")


def profiler_info(text: str, launch: LaunchCommand, shell: Shell) -> Dict[str, Any]:
    ov = launch.overrides
    evidence = []
    keys = [k for k in ov if k.startswith("global_profiler.") or ".profiler." in k
            or k.startswith("profile.") or k.startswith("trainer.profile")]
    if keys:
        evidence.append(f"{len(keys)} profiler overrides on the launch command")
    if re.search(r"global_profiler", text):
        evidence.append("the text mentions global_profiler")
    if re.search(r"^\s*PROFILER\+?=\(", text, re.M):
        evidence.append("a PROFILER=( ... ) array is defined")
    warnings: List[str] = []
    save = ov.get("global_profiler.save_path")
    if re.search(r"^\s*PROFILER\+?=\(", text, re.M) and not any("PROFILER[" in w.raw for w in launch.words):
        warnings.append("a PROFILER array is defined but not passed to the launch command")
    tool = ov.get("global_profiler.tool")
    tool = None if isinstance(tool, Unknown) else (str(tool).strip("'\"") if tool is not None else None)
    if keys and tool == "torch":
        roll = [str(v) for k, v in ov.items() if k.startswith("actor_rollout_ref.rollout.profiler.tool_config.torch")]
        if not any(re.search(r"discrete['\"]?\s*[:=]\s*['\"]?true", v, re.I) or v.strip("'\"") == "True" for v in roll):
            warnings.append("rollout torch profiler discrete is not true: verl's vLLM server traces the rollout only in "
                            "discrete mode (vllm_async_server.py _should_profile)")
        if save is None:
            warnings.append("global_profiler.save_path not set on the launch command (verl then writes to "
                            "outputs/profile under the working directory)")
    elif keys:
        if tool not in (None, "npu"):
            warnings.append(f"global_profiler.tool={tool} (expected npu)")
        for role in ("actor", "ref", "rollout"):
            lvl = ov.get(f"actor_rollout_ref.{role}.profiler.tool_config.npu.level")
            if lvl is None or lvl == "level0":
                warnings.append(f"{role} profiler level is {lvl or 'the verl default level0'}: op types "
                                "are not collected at level0 (they are derived from kernel names)")
        if str(ov.get("actor_rollout_ref.rollout.profiler.tool_config.npu.discrete", "")).strip("'\"") != "True":
            warnings.append("rollout profiler discrete is not True: vLLM-side operators may not be captured")
        if save is None:
            warnings.append("global_profiler.save_path not set on the launch command (verl then writes to "
                            "outputs/profile under the working directory)")
    steps_raw = ov.get("global_profiler.steps")
    steps: Any = UNKNOWN
    if isinstance(steps_raw, str):
        steps = [int(x) for x in re.findall(r"-?\d+", steps_raw)]
    # verl profiles nothing when global_profiler.steps is null / empty (ProfilerConfig: steps=None = off)
    off = isinstance(steps_raw, str) and steps_raw.strip("'\" ").lower() in ("null", "none", "~", "[]", "")
    return {"present": bool(evidence), "evidence": evidence, "override_keys": keys, "tool": tool, "off": off,
            "save_path": UNKNOWN if save is None or isinstance(save, Unknown) else save,
            "steps": steps, "warnings": warnings}


def profiler_plan(prof: Dict[str, Any], config: Dict[str, Any]) -> Optional[str]:
    """For a script that configures its own profiler: where the captures land and which training
    steps must be reached (``global_profiler.steps``); a warning is added to ``prof["warnings"]``
    when a profiled step lies beyond ``trainer.total_training_steps``. None without a profiler."""
    if not prof["present"]:
        return None
    if prof.get("off"):
        return ("profiling off: the script's own profiler block is present but global_profiler.steps is null, so verl "
                "profiles no step; tilake adds its own block after it on the launch command (Hydra's later overrides "
                "win: global_profiler.steps=[1] and tilake's save_path), the script's own keys stay as written")
    steps = prof.get("steps", UNKNOWN)
    where = prof["save_path"] if prof["save_path"] != UNKNOWN else "an unknown folder (global_profiler.save_path)"
    if steps == UNKNOWN or not steps:
        need = "the steps in global_profiler.steps (not readable here)"
    else:
        need = f"step {max(steps)}" + (f" (profiled steps {steps})" if len(steps) > 1 else "")
    total = config.get("total_training_steps")
    if isinstance(total, int) and steps != UNKNOWN and steps and max(steps) > total:
        prof["warnings"].append(f"global_profiler.steps={steps} but trainer.total_training_steps={total}: "
                                f"step {max(steps)} is never reached, so nothing is captured")
    return f"the script's profiler writes to {where}; the run must reach {need} before the captures exist"


