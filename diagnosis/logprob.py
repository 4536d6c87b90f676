"""The measured prefill log-prob diff a user supplies (``--logprob-json``): read it failing closed, and
check it against what the dumps show.

Format: a JSON object ``{"mean": number, "max": number, "std": number (optional), "source": text
(optional)}``; mean / max / std are absolute log-prob differences, so finite and ≥ 0, and
``max >= mean``. Anything else is refused with one line naming the file — never half-used.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from tilake.errors import TilakeError
from tilake.lake.dump_records import MeasuredLogprob
from tilake.vocab import BoundaryStatus


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (use a number or null)")


def check_logprob(obj: Any, where: Optional[Union[str, Path]] = None) -> MeasuredLogprob:
    """Validate a measured log-prob diff object; returns ``{"mean", "max", "std", "source"}``.

    Raises:
        TilakeError: not an object, a missing / non-numeric / non-finite / negative figure, max < mean,
            a non-text source.
    """
    def bad(msg: str) -> TilakeError:
        return TilakeError(f"measured log-prob diff: {msg}", path=where,
                           hint='expected {"mean": number >= 0, "max": number >= mean, "std": number, "source": text}')

    if not isinstance(obj, dict):
        raise bad(f"expected a JSON object, got {type(obj).__name__}")
    out: Dict[str, Any] = {}
    for key in ("mean", "max", "std"):
        v = obj.get(key)
        if v is None:
            if key == "std":
                out[key] = None
                continue
            raise bad(f"'{key}' is missing")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise bad(f"'{key}' must be a number, got {type(v).__name__} {v!r}"[:200])
        if not math.isfinite(v):
            raise bad(f"'{key}' is not finite ({v})")
        if v < 0:
            raise bad(f"'{key}' is negative ({v}); the diff is an absolute value")
        out[key] = float(v)
    if out["max"] < out["mean"]:
        raise bad(f"max {out['max']} < mean {out['mean']}")
    src = obj.get("source", "user-supplied")
    if not isinstance(src, str):
        raise bad(f"'source' must be text, got {type(src).__name__}")
    out["source"] = src
    return out


def read_logprob(path: Path) -> MeasuredLogprob:
    """Read and validate ``--logprob-json`` (strict JSON: ``NaN`` / ``Infinity`` refused).

    Raises:
        TilakeError: unreadable file, invalid JSON, or a value :func:`check_logprob` refuses.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TilakeError(f"cannot read measured log-prob JSON: {getattr(exc, 'strerror', None) or exc}", path=path) from exc
    try:
        obj = json.loads(text, parse_constant=_no_constants)
    except (json.JSONDecodeError, ValueError) as exc:
        raise TilakeError(f"measured log-prob JSON is invalid: {str(exc).splitlines()[0]}", path=path) from exc
    return check_logprob(obj, path)


def logprob_findings(logprob: Dict[str, Any], rows: List[dict]) -> List[str]:
    """Inconsistencies between a measured log-prob diff and the compared boundaries.

    A measured max of 0 while a logits boundary differs at logic level cannot both be right (the
    log-probs are a function of the logits): one of the measurements is not of this pair. Nor can a
    nonzero measured diff while every compared boundary is bitwise EXACT: a contradiction, said with the
    boundaries that could not be compared (where the difference may hide).
    """
    out = []
    if (logprob.get("max") or 0) > 0 and rows and all(r.get("status") == BoundaryStatus.EXACT for r in rows):
        rest = [r["boundary"] for r in rows if r.get("round", 0) == 0]
        out.append(f"contradiction: the measured log-prob diff is nonzero (max {logprob['max']:.4g}, source "
                   f"{logprob.get('source', 'user-supplied')}) but all {len(rows)} compared boundaries are bitwise "
                   f"EXACT (last compared: {rest[-1] if rest else rows[-1]['boundary']}); the dumps do not hold the "
                   "difference the log-probs show: another request, another forward, or a step after the last "
                   "compared boundary")
    if logprob.get("max") == 0:
        bad = [r["boundary"] for r in rows if r.get("class") == "logic-level"
               and (r["boundary"] == "logits" or str(r["boundary"]).endswith(".logits"))]
        if bad:
            out.append(f"inconsistent: the measured prefill log-prob max diff is 0 but {bad[0]} differs at logic "
                       "level; the log-prob measurement and the dumps cannot both be of this pair")
    return out


def strict_json(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None, so ``json.dumps(allow_nan=False)`` holds."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj
