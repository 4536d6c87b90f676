"""What a launch script states about a run beyond its switches: the ``runs`` values the report header shows
(training backend, inference engine, model id and family, RL config) and the model's decoder layers, merged
under what the command line gave (:func:`merge_facts`). Used by ``tilake run`` / ``ingest`` (``--script``,
:func:`tilake.pipeline.profile.facts_meta`) and ``tilake scan``."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from tilake.ingest.model_facts import layers_setting_from_script
from tilake.ingest.run_facts import Setting


def script_settings(parsed) -> Dict[str, Setting]:
    """``settings`` a parsed launch script adds beyond :func:`tilake.ingest.run_facts.settings_from_script`:
    ``num_layers`` (the model's decoder layers: a verl override or the HF ``config.json`` beside the model path,
    :mod:`tilake.ingest.model_facts`), when the script states it."""
    layers = layers_setting_from_script(parsed)
    return {"num_layers": layers} if layers else {}


SCRIPT_DEFAULTS = "_script_defaults"
"""Key of :func:`tilake.pipeline.profile.facts_meta`'s result holding the ``runs`` values a launch script states (backends, model id and
family, RL config): they fill what the command line left unset (:func:`merge_facts`), never override it."""


def script_run_facts(parsed) -> Dict[str, Any]:
    """``runs`` values a parsed launch script states (:class:`tilake.ingest.scan.script.ParsedScript`): training
    backend and inference engine (``fsdp2`` / ``vllm`` …), model id and family (``config.json`` ``model_type``
    beside the model path, else the id), the RL config the report header shows (algorithm, batch sizes, rollout n,
    lengths, decoder layers); values the script does not state are left out."""
    from tilake.ingest.scan.script import UNKNOWN
    from tilake.lake.registry import model_family_for

    c = parsed.config
    known = {k: c.get(k) for k in ("train_backend", "infer_backend", "model_id")
             if c.get(k) not in (None, UNKNOWN, "")}
    if c.get("model_path") not in (None, UNKNOWN, ""):
        p = Path(str(c["model_path"])).expanduser()
        fam = model_family_for(p if p.is_absolute() else parsed.path.parent / p, known.get("model_id"))[0]
    else:
        fam = model_family_for(None, known.get("model_id"))[0]
    if fam and fam != UNKNOWN:
        known["model_family"] = fam
    rl = {k: c.get(k) for k in ("adv_estimator", "train_batch_size", "rollout_n", "max_prompt_length",
                                "max_response_length", "total_training_steps") if c.get(k) not in (None, UNKNOWN)}
    if rl.get("adv_estimator"):
        rl["algorithm"] = rl.pop("adv_estimator")
    if rl:
        known["rl_config"] = rl
    return known


def merge_facts(meta: Dict[str, Any], facts: Dict[str, Any]) -> Dict[str, Any]:
    """``meta`` updated with :func:`tilake.pipeline.profile.facts_meta`'s ``facts``; the launch script's own values
    (:data:`SCRIPT_DEFAULTS`) only fill keys ``meta`` does not set (the command line wins)."""
    facts = dict(facts)
    for k, v in (facts.pop(SCRIPT_DEFAULTS, None) or {}).items():
        if k == "rl_config" and isinstance(meta.get("rl_config"), dict):
            meta["rl_config"] = {**v, **meta["rl_config"]}
        else:
            meta.setdefault(k, v)
    meta.update(facts)
    return meta
