"""Run ids: the one rule for the folder name of a run inside the lake, importable without DuckDB (the CLI checks
``--run-id`` before a command loads it)."""
from __future__ import annotations

import re

from tilake.errors import TilakeError

RUN_ID_RE = re.compile(r"^[A-Za-z0-9._-]+$")


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` if it matches ``[A-Za-z0-9._-]+``, is not all dots and does not start with ``-``.

    Raises:
        TilakeError: the id could escape the lake folder, be read as an option (``-x``,
            ``--lake``) or as a relative folder (``.``, ``..``, ``...``), or is empty / over 200 chars.
    """
    if (not run_id or not RUN_ID_RE.match(run_id) or set(run_id) == {"."} or run_id.startswith("-")
            or len(run_id) > 200):
        raise TilakeError(f"invalid run id {run_id!r}: use letters, digits, '.', '_' or '-', not starting "
                          "with '-' and not only dots (it names a folder inside the lake)")
    return run_id
