"""Run the bundled dbt project against a lake, in-process (``dbtRunner``).

The project folder ships inside the package (``tilake/dbt_project``); dbt's ``target/`` and
logs go to ``<lake>/.dbt/`` so an installed package is never written to. ``TILAKE_LAKE`` is set
for the profile and the sources. Plain ``dbt build`` from a shell works too::

    cd dbt_project && TILAKE_LAKE=/abs/lake dbt build --profiles-dir .
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .ingest.errors import TilakeError
from .ingest.lake import Lake

PROJECT_DIR = Path(__file__).resolve().parent / "dbt_project"


@contextlib.contextmanager
def _env(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class BuildResult:
    """Outcome of one dbt invocation.

    Attributes:
        success: dbt's own verdict. nodes: list of (node name, resource type, status, message).
        failures: the nodes whose status is error/fail. warnings: nodes with status warn.
    """

    def __init__(self, success: bool, nodes: List[tuple]) -> None:
        self.success = success
        self.nodes = nodes
        self.failures = [n for n in nodes if n[2] in ("error", "fail", "runtime error")]
        self.warnings = [n for n in nodes if n[2] == "warn"]


def dbt_build(lake: Lake, command: str = "build", select: Optional[Sequence[str]] = None,
              full_refresh: bool = False, extra: Optional[Sequence[str]] = None,
              hold_lock: bool = True, progress: bool = True) -> BuildResult:
    """Run ``dbt <command>`` (build by default) on ``lake``; returns a :class:`BuildResult`.

    Args:
        lake: the lake (its warehouse.duckdb is written; the writer lock is held).
        command: dbt sub-command (build, run, test, seed).
        select: optional ``--select`` arguments.
        full_refresh: rebuild incremental models from scratch.
    Raises:
        TilakeError: dbt could not start (bad project or profile); LakeBusyError.
    """
    from dbt.cli.main import dbtRunner

    dbt_dir = lake.root / ".dbt"
    args = [command, "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR),
            "--target-path", str(dbt_dir / "target"), "--log-path", str(dbt_dir / "logs"),
            "--quiet", "--no-use-colors", "--no-send-anonymous-usage-stats"
            ]
    if select:
        args += ["--select", *select]
    if full_refresh:
        args.append("--full-refresh")
    args += list(extra or [])
    ctx = lake.locked() if hold_lock else contextlib.nullcontext()
    from rich.console import Console

    console = Console(stderr=True)
    status = (console.status(f"dbt {command}: seeds, models and tests of {lake.root.name} …")
              if progress and console.is_terminal else contextlib.nullcontext())
    with ctx, status, _env(TILAKE_LAKE=str(lake.root), DBT_SEND_ANONYMOUS_USAGE_STATS="false",
                           DO_NOT_TRACK="1"):
        lake.ensure()   # under the writer lock: may migrate old partitions (see Lake.ensure)
        res = dbtRunner().invoke(args)
    if res.exception is not None:
        raise TilakeError(f"dbt {command} could not run: {res.exception}", path=PROJECT_DIR)
    nodes = []
    for r in getattr(res.result, "results", None) or []:
        node = getattr(r, "node", None)
        nodes.append((getattr(node, "name", "?"), getattr(node, "resource_type", "?"),
                      str(getattr(r, "status", "")).lower(), getattr(r, "message", None) or ""))
    return BuildResult(bool(res.success), nodes)
