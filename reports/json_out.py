"""The one JSON emitter of every ``--json`` / ``--format json`` (the CLI, ``tilake run``/``example``, ``scan``)."""
from __future__ import annotations

import json
import sys
from typing import Any, Optional, TextIO


def json_text(obj: Any) -> str:
    """``obj`` as the JSON document tilake prints: indented by 2, paths and datetimes as strings, CJK kept."""
    return json.dumps(obj, ensure_ascii=False, indent=2, default=str)


def emit_json(obj: Any, out: Optional[TextIO] = None) -> None:
    """Write :func:`json_text` of ``obj`` and a newline to ``out`` (default stdout); nothing else goes there."""
    out = out or sys.stdout
    out.write(json_text(obj) + "\n")
    out.flush()
