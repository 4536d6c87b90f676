"""A dbt-duckdb plugin that stops a plain ``dbt build`` with one clear line when the lake does not exist.

The README's ``cd dbt_project && TILAKE_LAKE=/abs/lake dbt build --profiles-dir .`` used to end, when
the folder was wrong, in DuckDB's "Cannot open file …/warehouse.duckdb" followed by three Python
tracebacks. The profile (``dbt_project/profiles.yml``) loads this plugin with ``config.lake`` =
``TILAKE_LAKE``; dbt-duckdb creates plugins while it opens its first connection and turns a
``RuntimeError`` raised there into dbt's own one-message "Could not connect" error.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from dbt.adapters.duckdb.plugins import BasePlugin


def lake_problem(lake: str) -> str:
    """The one-line problem with ``lake`` as a dbt target, or ``""`` when it holds a ``raw/`` folder."""
    root = Path(lake).expanduser().resolve()
    if (root / "raw").is_dir():
        return ""
    what = "does not exist" if not root.exists() else "is not a tilake lake (no raw/ folder)"
    return (f"TILAKE_LAKE={root} {what}: set TILAKE_LAKE to a lake written by tilake (tilake example / run / "
            "ingest create one), or run dbt through `tilake dbt -- <args>` / `tilake build`")


class Plugin(BasePlugin):
    """Checks ``config["lake"]`` before dbt-duckdb opens ``<lake>/warehouse.duckdb``."""

    def initialize(self, plugin_config: Dict[str, Any]) -> None:
        problem = lake_problem(str(plugin_config.get("lake") or "../tilake-lake"))
        if problem:
            raise RuntimeError(problem)
