"""verl's config defaults and the ``--config-name`` a launch command selects.

:data:`VERL_DEFAULTS` holds the values verl uses when a script leaves a field unset, copied from
verl at commit ``b178a3cd`` (the commit of the real scripts in ``shared/fixtures/verl_scripts``):
``verl/trainer/config/_generated_ppo_trainer.yaml`` and
``verl/trainer/config/_generated_ppo_megatron_trainer.yaml`` (the flattened configs verl generates
from ``ppo_trainer.yaml`` / ``ppo_megatron_trainer.yaml`` and their groups: ``rollout/rollout.yaml``,
``actor/megatron_actor.yaml``, ``data/legacy_data.yaml``). The report labels each such value
``(default)``, never as if the script set it.

:func:`resolve_config` finds the YAML that ``--config-name`` names — under ``--config-path``
(relative to the entry module's folder, as Hydra's ``@hydra.main(config_path=...)``), the entry
module's ``config/`` folder, or the installed verl's ``verl/trainer/config`` — and follows its
``defaults:`` list (a recipe's ``dapo_megatron_trainer.yaml`` lists ``ppo_megatron_trainer``). When
no file is found, the backend is inferred from the config's name and from the keys the script sets
(``actor_rollout_ref.actor.megatron.*`` ⇒ megatron), and the source says so.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import yaml

VERL_COMMIT = "b178a3cd"
_GEN = "verl/trainer/config/_generated_ppo_trainer.yaml"
_GEN_MEG = "verl/trainer/config/_generated_ppo_megatron_trainer.yaml"

#: Hydra key -> (default, file it is read from at verl b178a3cd). Both generated configs agree on
#: every key below except the megatron-only parallel sizes.
VERL_DEFAULTS: Dict[str, Tuple[Any, str]] = {
    "actor_rollout_ref.rollout.enforce_eager": (False, _GEN),
    "actor_rollout_ref.rollout.calculate_log_probs": (False, _GEN),
    "actor_rollout_ref.rollout.n": (1, _GEN),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": (2, _GEN),
    "actor_rollout_ref.rollout.data_parallel_size": (1, _GEN),
    "actor_rollout_ref.rollout.expert_parallel_size": (1, _GEN),
    "actor_rollout_ref.rollout.mode": ("async", _GEN),
    "data.max_prompt_length": (512, _GEN),
    "data.max_response_length": (512, _GEN),
    "data.train_batch_size": (1024, _GEN),
    "trainer.total_epochs": (30, _GEN),
    "trainer.n_gpus_per_node": (8, _GEN),
    "trainer.nnodes": (1, _GEN),
    "trainer.device": ("cuda", _GEN),
    "algorithm.adv_estimator": ("gae", _GEN),
}
#: megatron-only defaults (``actor/megatron_actor.yaml`` via ppo_megatron_trainer.yaml)
MEGATRON_DEFAULTS: Dict[str, Tuple[Any, str]] = {
    f"actor_rollout_ref.actor.megatron.{leaf}": (1, _GEN_MEG)
    for leaf in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
                 "context_parallel_size")
}
#: verl's own top-level configs and the actor strategy each sets
KNOWN_CONFIGS = {"ppo_trainer": "fsdp", "ppo_megatron_trainer": "megatron"}


def config_stem(name: str) -> str:
    """``'ppo_trainer.yaml'`` -> ``ppo_trainer`` (quotes and the YAML suffix dropped)."""
    return re.sub(r"\.ya?ml$", "", name.strip().strip("'\""))


def _module_dir(module: str, script_dir: Path, cwd: Path) -> Optional[Path]:
    """Folder of the entry module: ``<root>/recipe/x/`` next to the script or the working directory,
    or an installed package (``importlib.util.find_spec`` on the top package; nothing is imported)."""
    parts = module.split(".")
    for root in [script_dir, *script_dir.parents, cwd]:
        d = root.joinpath(*parts[:-1])
        if (d / f"{parts[-1]}.py").is_file():
            return d
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        d = Path(list(spec.submodule_search_locations)[0]).joinpath(*parts[1:-1])
        if d.is_dir():
            return d
    return None


def _installed_verl_config_dir() -> Optional[Path]:
    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"
    return d if d.is_dir() else None


def find_config(name: str, config_path: Optional[str], module: str, script_dir: Path,
                cwd: Path) -> Optional[Path]:
    """The YAML file ``--config-name name`` selects, or None when it is not on this machine."""
    stem = config_stem(name)
    mdir = _module_dir(module, script_dir, cwd)
    dirs: List[Path] = []
    if config_path:
        cp = Path(config_path.strip("'\"")).expanduser()
        dirs += [cp] if cp.is_absolute() else [d / cp for d in (mdir, script_dir, cwd) if d is not None]
    if mdir is not None:
        dirs.append(mdir / "config")
    vdir = _installed_verl_config_dir()
    if vdir is not None:
        dirs.append(vdir)
    for d in dirs:
        for ext in (".yaml", ".yml"):
            if (d / f"{stem}{ext}").is_file():
                return d / f"{stem}{ext}"
    return None


def _flatten(d: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        elif not (isinstance(v, str) and "${" in v) and v != "???":
            out[key] = v
    return out


def read_config(path: Path, depth: int = 0) -> Tuple[Dict[str, Any], List[str]]:
    """``(flat values, files read)`` of a Hydra config and the plain entries of its ``defaults:``
    list (other configs of the same folder or verl's; ``_self_`` placement respected). Group
    entries (``rollout@...: rollout``) and interpolated values are not followed.
    Unreadable or malformed files give what was read so far."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}, []
    if not isinstance(doc, dict):
        return {}, []
    own = _flatten({k: v for k, v in doc.items() if k not in ("defaults", "hydra")})
    values: Dict[str, Any] = {}
    files = [str(path)]
    defaults = doc.get("defaults") or []
    self_seen = False
    for item in defaults if isinstance(defaults, list) else []:
        if item == "_self_":
            values.update(own)
            self_seen = True
        elif isinstance(item, str) and depth < 4:
            stem = config_stem(item)
            sub = next((d / f"{stem}.yaml" for d in (path.parent, _installed_verl_config_dir())
                        if d is not None and (d / f"{stem}.yaml").is_file()), None)
            if sub is not None:
                v, f = read_config(sub, depth + 1)
                values.update(v)
                files += f
            elif stem in KNOWN_CONFIGS:
                values.setdefault("actor_rollout_ref.actor.strategy", KNOWN_CONFIGS[stem])
                files.append(f"verl {stem}.yaml (not installed here; strategy: {KNOWN_CONFIGS[stem]})")
    if not self_seen:
        values.update(own)      # Hydra appends _self_ last when the list omits it
    return values, files


def infer_backend(config_name: str, overrides: Mapping[str, Any]) -> Tuple[Optional[str], str]:
    """``(backend, reason)`` from a config name that is not on this machine and the keys set."""
    stem = config_stem(config_name)
    if any(k.startswith("actor_rollout_ref.actor.megatron.") for k in overrides):
        return "megatron", f"inferred: config {stem} not found here; the script sets actor_rollout_ref.actor.megatron.*"
    if any(k.startswith("actor_rollout_ref.actor.fsdp_config.") for k in overrides):
        return "fsdp", f"inferred: config {stem} not found here; the script sets actor_rollout_ref.actor.fsdp_config.*"
    if "megatron" in stem:
        return "megatron", f"inferred from the config name {stem} (file not found here)"
    return None, f"config {stem} not found here and no backend-specific key is set"
