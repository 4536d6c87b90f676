"""Load the per-LLM-family source-path notes (``models/callstack_notes.yaml``).

These are *not* runtime evidence: the report labels them "source path from models/ notes" and
uses them only when the profiler DB holds no call stack (PYTORCH_CALLCHAINS) for an op.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

NOTES_FILE = Path(__file__).resolve().parent / "callstack_notes.yaml"


def family_key(model_family: str) -> str:
    """Normalise a family name (``Qwen3``, ``qwen3_moe``) to a notes key (``qwen3``)."""
    return (model_family or "unknown").strip().lower()


def source_notes(model_family: str) -> List[Dict[str, Optional[str]]]:
    """Rows ``{model_family, module, side, path, function, kernel}`` for one family.

    The ``default`` section applies to every family; the family's own section overrides entries.
    """
    data = yaml.safe_load(NOTES_FILE.read_text(encoding="utf-8")) or {}
    merged: Dict[str, Dict[str, Dict[str, Any]]] = {}
    key = family_key(model_family)
    for section in ("default", key):
        for module, sides in (data.get(section) or {}).items():
            for side, note in (sides or {}).items():
                merged.setdefault(module, {})[side] = note
    return [{"model_family": key, "module": m, "side": s, "path": n.get("path"),
             "function": n.get("function"), "kernel": n.get("kernel")}
            for m, sides in sorted(merged.items()) for s, n in sorted(sides.items())]
