"""The one labels file of the outputs: ``reports/templates/labels.yaml`` (package data).

Every user-visible zh/en word that is not a row of a seed is an entry ``key: {zh, en}`` there; the
Markdown and HTML reports, the xlsx and the console read it through :func:`label`. The grade words
(emoji, label, report colour) are the grade seed's (:func:`tilake.vocab.grade_looks`); this file adds
what a grade looks like where the seed says nothing: the chart's bar colour and the xlsx fill
(:func:`grade_palette`).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Dict, Tuple

LABELS_YAML = Path(__file__).resolve().parent / "templates" / "labels.yaml"


@functools.lru_cache(maxsize=None)
def _labels() -> Dict[str, Any]:
    import yaml

    with LABELS_YAML.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def label(key: str, lang: str = "zh", **fields: Any) -> str:
    """The ``lang`` text (``zh``; anything else reads ``en``) of ``key``, its ``{name}`` fields filled
    from ``fields`` (:meth:`str.format`).

    Raises:
        KeyError: ``key`` is not in the labels file (a programming error, never user input).
    """
    text = _labels()["labels"][key]["zh" if lang == "zh" else "en"]
    return text.format(**fields) if fields else text


def both(key: str) -> Tuple[str, str]:
    """``(zh, en)`` of ``key``."""
    return label(key, "zh"), label(key, "en")


def grade_palette() -> Dict[str, Dict[str, str]]:
    """``{grade: {"chart": "#rrggbb", "fill": "RRGGBB"}}`` in severity order (the seed's)."""
    return {g: {k: str(v) for k, v in p.items()} for g, p in _labels()["grade_palette"].items()}
