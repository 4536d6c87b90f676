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
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from tilake.ingest.scan.bash_tree import Token
from tilake.ingest.scan.shell import UNKNOWN, Shell, Unknown, Value, plain


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
        conditional / in_function: where the command sits.
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


def extract_config(launch: LaunchCommand, shell: Shell, script: Path) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """The stage-1 table of the seed (训练后端, 推理引擎, 模型路径/ID, TP/PP/EP, lengths, batch, steps,
    NPU devices, rollout options) from the launch overrides and shell variables.

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

    from_key("train_backend", "actor_rollout_ref.actor.strategy")
    cname = (launch.config_name or "").strip("'\"")
    if cfg["train_backend"] == UNKNOWN:
        if cname.startswith("ppo_megatron_trainer"):
            cfg["train_backend"], src["train_backend"] = "megatron", \
                f"--config-name {cname} (verl sets actor.strategy: megatron there)"
        elif cname in ("", "ppo_trainer", "ppo_trainer.yaml") and launch.module == "verl.trainer.main_ppo":
            cfg["train_backend"], src["train_backend"] = "fsdp", \
                f"config {cname or 'ppo_trainer (default of main_ppo)'} (verl sets actor.strategy: fsdp there)"
    from_key("infer_backend", "actor_rollout_ref.rollout.name")
    from_key("model_path", "actor_rollout_ref.model.path")
    if cfg["model_path"] == UNKNOWN and isinstance(shell.vars.get("MODEL_PATH"), str):
        cfg["model_path"], src["model_path"] = shell.vars["MODEL_PATH"], "variable MODEL_PATH"
    mid = shell.vars.get("MODEL_ID")
    mp = cfg["model_path"]
    if isinstance(mid, str) and mid:
        cfg["model_id"], src["model_id"] = mid, "variable MODEL_ID"
    elif isinstance(mp, str) and mp != UNKNOWN and re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", mp) \
            and not (script.parent / mp).exists():
        cfg["model_id"], src["model_id"] = mp, "model path is a hub id"
    elif isinstance(mp, str) and mp != UNKNOWN:
        cfg["model_id"], src["model_id"] = Path(mp.rstrip("/")).name, "last component of the model path"
    else:
        cfg["model_id"], src["model_id"] = UNKNOWN, "no MODEL_ID variable and model path unknown"
    is_megatron = cfg["train_backend"] == "megatron"
    for name, leaf in (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"),
                       ("ep", "expert_model_parallel_size"), ("cp", "context_parallel_size")):
        from_key(f"train_{name}", f"actor_rollout_ref.actor.megatron.{leaf}")
        if cfg[f"train_{name}"] == UNKNOWN and is_megatron:
            # ppo_megatron_trainer.yaml defaults every *_model_parallel_size to 1 (verl actor/megatron_actor.yaml)
            cfg[f"train_{name}"], src[f"train_{name}"] = 1, f"verl megatron default ({leaf}: 1)"
    from_key("infer_tp", "actor_rollout_ref.rollout.tensor_model_parallel_size")
    from_key("infer_dp", "actor_rollout_ref.rollout.data_parallel_size")
    from_key("infer_ep", "actor_rollout_ref.rollout.expert_parallel_size")
    from_key("infer_enable_expert_parallel", "actor_rollout_ref.rollout.enable_expert_parallel")
    from_key("max_prompt_length", "data.max_prompt_length")
    from_key("max_response_length", "data.max_response_length")
    from_key("train_batch_size", "data.train_batch_size")
    from_key("total_training_steps", "trainer.total_training_steps")
    from_key("total_epochs", "trainer.total_epochs")
    from_key("n_gpus_per_node", "trainer.n_gpus_per_node")
    from_key("nnodes", "trainer.nnodes")
    from_key("device", "trainer.device")
    from_key("rollout_enforce_eager", "actor_rollout_ref.rollout.enforce_eager")
    from_key("rollout_calculate_log_probs", "actor_rollout_ref.rollout.calculate_log_probs")
    from_key("rollout_n", "actor_rollout_ref.rollout.n")
    from_key("rollout_mode", "actor_rollout_ref.rollout.mode")
    from_key("adv_estimator", "algorithm.adv_estimator")
    vis = shell.vars.get("ASCEND_RT_VISIBLE_DEVICES")
    if vis is None:
        cfg["visible_devices"], src["visible_devices"] = UNKNOWN, "ASCEND_RT_VISIBLE_DEVICES not set (all NPUs visible)"
    else:
        cfg["visible_devices"] = plain(vis)
        src["visible_devices"] = ("variable ASCEND_RT_VISIBLE_DEVICES" if "ASCEND_RT_VISIBLE_DEVICES" in shell.exported
                                  else "ASCEND_RT_VISIBLE_DEVICES (not exported)")
    cfg["config_name"] = cname or UNKNOWN
    cfg["launch_module"] = launch.module
    cfg["passthrough_args"] = launch.passthrough
    cfg["hydra_overrides"] = {k: (UNKNOWN if isinstance(v, Unknown) else v) for k, v in ov.items()}
    return cfg, src


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
    if keys:
        if ov.get("global_profiler.tool") not in (None, "npu") and not isinstance(ov.get("global_profiler.tool"), Unknown):
            warnings.append(f"global_profiler.tool={ov['global_profiler.tool']} (expected npu)")
        for role in ("actor", "ref", "rollout"):
            lvl = ov.get(f"actor_rollout_ref.{role}.profiler.tool_config.npu.level")
            if lvl is None or lvl == "level0":
                warnings.append(f"{role} profiler level is {lvl or 'the verl default level0'}: op types "
                                "are not collected at level0 (they are derived from kernel names)")
        if str(ov.get("actor_rollout_ref.rollout.profiler.tool_config.npu.discrete", "")).strip("'\"") != "True":
            warnings.append("rollout profiler discrete is not True: vLLM-side operators may not be captured")
        if save is None:
            warnings.append("global_profiler.save_path not set on the launch command")
    return {"present": bool(evidence), "evidence": evidence, "override_keys": keys,
            "save_path": UNKNOWN if save is None or isinstance(save, Unknown) else save,
            "warnings": warnings}


