"""Run facts in report words: the settings, tool versions and verl mismatch metrics of a run
(``dim_runs`` / ``fct_run_metrics`` rows; docs/phases.md), shared by the Markdown and HTML reports."""
from __future__ import annotations

import json
from typing import Any, Dict, List


def run_settings(run: Dict[str, Any]) -> Dict[str, Any]:
    """``runs.settings`` JSON of a ``dim_runs`` row as ``{name: {value, source}}`` ({} when none or unreadable)."""
    try:
        v = json.loads(run.get("settings") or "{}")
    except ValueError:
        return {}
    return {k: x for k, x in v.items() if isinstance(x, dict)} if isinstance(v, dict) else {}


def run_tools(run: Dict[str, Any]) -> Dict[str, Any]:
    """Recorded tool versions of a ``dim_runs`` row (``unknown`` and non-scalar entries left out)."""
    try:
        v = json.loads(run.get("tool_versions") or "{}")
    except ValueError:
        return {}
    if not isinstance(v, dict):
        return {}
    return {k: x for k, x in v.items() if isinstance(x, (str, int, float)) and str(x) not in ("", "unknown")}


def metrics_text(rows: List[Dict[str, Any]], lang: str = "zh") -> str:
    """One line of verl's mismatch metrics (``fct_run_metrics`` rows of the seed's metrics):
    ``probs diff mean 0.000787, probs diff max 0.00278, …``; ``evidence_missing (<reason>)`` when none."""
    known = [r for r in rows if r.get("display_order") is not None]
    ok = [r for r in known if r.get("value") is not None]
    if not ok:
        why = next((r["reason"] for r in known if r.get("reason")), "no metrics")
        return f"evidence_missing ({why})"
    label = "label_zh" if lang == "zh" else "label_en"
    parts = [f"{r.get(label) or r['metric']} {r['value']:.4g}" for r in ok]
    missing = [r.get(label) or r["metric"] for r in known if r.get("value") is None]
    if missing:
        parts.append(f"evidence_missing: {', '.join(missing)}")
    return ", ".join(parts)
