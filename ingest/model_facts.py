"""The model's decoder-layer count, from what a run records beside its captures: a launch-script override, the
Hugging Face ``config.json`` beside the model path (or in the HF cache for a hub id). The kernel alignment rejects a
layer split that contradicts it (:func:`tilake.diagnosis.kernel_layers.check_model_layers`).

Format facts:

* HF ``config.json`` (transformers ``PretrainedConfig.to_json_string``): ``num_hidden_layers`` (Llama, Qwen2/3,
  Mistral …; real: the tiny Qwen2 of ``shared/verl-cpu/make_assets.py``, ``"num_hidden_layers": 2``), or inside
  ``text_config`` for multimodal models; ``num_layers`` (ChatGLM), ``n_layer`` (GPT-2) in older families;
* verl overrides: ``actor_rollout_ref.model.override_config.num_hidden_layers`` (HF config override, FSDP) and
  ``actor_rollout_ref.actor.megatron.override_transformer_config.num_layers`` (Megatron), with or without ``+``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional

from tilake.ingest.run_facts import Setting

LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer")
OVERRIDE_SUFFIXES = ("override_config.num_hidden_layers", "override_transformer_config.num_layers")


def _positive_int(v: Any) -> Optional[int]:
    try:
        n = int(str(v).strip())
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def layers_from_config(config_json: Path) -> Optional[int]:
    """``num_hidden_layers`` (else ``text_config.num_hidden_layers``, ``num_layers``, ``n_layer``) of an HF
    ``config.json``; None when the file is unreadable or holds none (never raises: a fact, not an input)."""
    try:
        data = json.loads(Path(config_json).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    for d in (data, data.get("text_config") if isinstance(data.get("text_config"), dict) else {}):
        for k in LAYER_KEYS:
            n = _positive_int(d.get(k))
            if n:
                return n
    return None


def layers_setting_from_path(model_path: Optional[str], base: Path,
                             env: Optional[Mapping[str, str]] = None) -> Optional[Setting]:
    """``{"value": n, "source": "HF config <file> (num_hidden_layers)"}`` from the ``config.json`` of a model
    path (relative paths from ``base``) or hub id (HF cache), else None."""
    if not model_path or str(model_path) == "unknown":
        return None
    from tilake.ingest.scan.env import model_config_json

    cfg = model_config_json(str(model_path), Path(base), env if env is not None else os.environ)
    n = layers_from_config(cfg) if cfg else None
    return {"value": n, "source": f"HF config {cfg} (num_hidden_layers)"} if n else None


def layers_setting_from_script(parsed) -> Optional[Setting]:
    """The model's layers a parsed launch script states (:class:`tilake.ingest.scan.script.ParsedScript`): a verl
    override (:data:`OVERRIDE_SUFFIXES`), else the HF ``config.json`` of its model path; None when neither."""
    for key, v in (parsed.config.get("hydra_overrides") or {}).items():
        if key.lstrip("+").endswith(OVERRIDE_SUFFIXES) and _positive_int(v):
            return {"value": _positive_int(v), "source": f"launch script: override {key}"}
    return layers_setting_from_path(parsed.config.get("model_path"), parsed.path.parent)
