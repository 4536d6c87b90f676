"""The outcome of one dbt invocation as records: :class:`DbtNode` per node, :class:`DbtCounts`, :class:`BuildResult`.

Counted from dbt's result objects, never from its message text: ``dbtRunner().invoke(args)`` returns a
``dbtRunnerResult`` whose ``.result`` (a ``RunExecutionResult`` for build/run/test/seed) holds
``.results``, one ``RunResult`` per node with ``.status`` (``RunStatus`` success/error/skipped or
``TestStatus`` pass/fail/warn/error; dbt-core ``dbt/artifacts/schemas/results.py``), ``.message`` and
``.node`` (``.name``, ``.resource_type``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

from tilake.errors import TilakeError

# dbt statuses by what they count as (lower-cased ``RunResult.status`` values)
PASSED = ("success", "pass")
FAILED = ("fail",)
ERRORED = ("error", "runtime error")
SKIPPED = ("skipped",)
WARNED = ("warn",)


class DbtNode(NamedTuple):
    """One node dbt ran (a tuple, so ``node[0]`` … ``node[3]`` read as before)."""

    # the node's name (model, seed or test name)
    name: str
    # model | seed | test | snapshot … (dbt's ``NodeType``; its text value)
    resource_type: str
    # lower-cased dbt status: success, error, skipped, pass, fail, warn, runtime error
    status: str
    # dbt's message for the node ("" when none)
    message: str

    @classmethod
    def of(cls, r) -> "DbtNode":
        """The record of one dbt ``RunResult`` (``?`` for a missing node name or type)."""
        node = getattr(r, "node", None)
        return cls(getattr(node, "name", "?"), getattr(node, "resource_type", "?"),
                   str(getattr(r, "status", "")).lower(), getattr(r, "message", None) or "")


class DbtCounts(NamedTuple):
    """Nodes per outcome of one dbt invocation (from the nodes' statuses)."""

    passed: int
    failed: int
    errored: int
    skipped: int
    warned: int

    @classmethod
    def of(cls, nodes) -> "DbtCounts":
        """Count ``nodes`` (:class:`DbtNode`) by status; a status outside the known ones counts nowhere."""
        def n(states) -> int:
            return sum(1 for x in nodes if x.status in states)
        return cls(n(PASSED), n(FAILED), n(ERRORED), n(SKIPPED), n(WARNED))


@dataclass
class BuildResult:
    """Outcome of one dbt invocation (every node as a :class:`DbtNode`)."""

    # dbt's own verdict
    success: bool
    # every node dbt ran, in its order
    nodes: List[DbtNode]
    # nodes whose status is error, fail or runtime error
    failures: List[DbtNode] = field(init=False)
    # nodes whose status is warn
    warnings: List[DbtNode] = field(init=False)
    # incremental models were rebuilt from scratch (asked, or chosen because the project changed)
    full_refresh: bool = False
    # dbt's log file (``<lake>/.dbt/logs/dbt.log``): named in failure messages
    log_path: Optional[Path] = None
    # the user rules merged into the seeds ({"dir", "sha256", "files"}; tilake.lake.rules), None without
    rules: Optional[dict] = None
    # compiled SQL of each failed test ({node name: sql}): read by :func:`suspect_runs`
    compiled: Dict[str, str] = field(default_factory=dict)
    # after a failed build: the runs whose data it failed on, with why ([(run_id, why)]; :func:`suspect_runs`)
    suspects: List[Tuple[str, str]] = field(default_factory=list)
    # what ran (tilake.lake.warehouse.build_plan): "full" (every node), "fast" (the tables only: the
    # project is the one that built the warehouse), "select" (the caller's models), "rows" (a removed
    # run's rows deleted and the whole-lake tables refilled, no dbt: drop_run_rows)
    plan: str = "full"
    # data and unit tests ran (``tilake build --check``, or a whole build with user rules)
    tested: bool = True

    def __post_init__(self) -> None:
        self.nodes = [n if isinstance(n, DbtNode) else DbtNode(*n) for n in self.nodes]
        self.failures = [n for n in self.nodes if n.status in FAILED + ERRORED]
        self.warnings = [n for n in self.nodes if n.status in WARNED]

    @property
    def counts(self) -> DbtCounts:
        """Passes, failures, errors, skips and warnings among :attr:`nodes`."""
        return DbtCounts.of(self.nodes)

    def failure_summary(self, limit: int = 3) -> str:
        """``"node: first message line; …"`` for the first ``limit`` failures (status when no message;
        after dbt's ``Runtime Error in model …`` header, the line that says what went wrong)."""
        def first(msg: str) -> str:
            lines = [x.strip() for x in msg.splitlines() if x.strip()]
            return lines[1] if len(lines) > 1 and lines[0].startswith(("Runtime Error in", "Database Error in")) \
                else lines[0]
        return "; ".join(f"{n.name}: {first(n.message) if n.message and n.message.strip() else n.status}"
                         for n in self.failures[:limit])

    def suspects_text(self) -> str:
        """``"; run X: why — remove it with `tilake runs rm X` …"`` for the runs a failed build names, or ``""``."""
        if not self.suspects:
            return ""
        ids = sorted({r for r, _w in self.suspects})
        why = "; ".join(f"run {r}: {w}" for r, w in self.suspects[:3])
        rm = " / ".join(f"`tilake runs rm {r}`" for r in ids[:3])
        return f"; {why} — remove it with {rm} (then ingest it again with a fixed capture)"

    def failure_line(self, what: str = "dbt build failed") -> str:
        """``"<what> (<failure summary>)<suspects>; dbt log: <path>"``: the one line a failed build prints."""
        log = f"; dbt log: {self.log_path}" if self.log_path else ""
        return f"{what} ({self.failure_summary()}){self.suspects_text()}{log}"

    def raise_if_failed(self, what: str = "dbt build failed", path=None) -> "BuildResult":
        """Return ``self`` when dbt succeeded.

        Raises:
            TilakeError: :meth:`failure_line`, one line (names the run whose data failed, and
            ``tilake runs rm RUN``, when :func:`suspect_runs` found it).
        """
        if not self.success:
            raise TilakeError(self.failure_line(what), path=path)
        return self
