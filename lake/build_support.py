"""What a build does beside dbt itself: the progress line (:class:`DbtProgress`), the Ctrl-C guard
(:class:`InterruptGuard`) and, after a failed build, the runs whose data it failed on
(:func:`suspect_runs`). Used by :mod:`tilake.lake.warehouse` (which re-exports them).
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from tilake.lake.duck import connect, sql_str
from tilake.lake.store import Lake


class DbtProgress:
    """dbt's node events (a ``dbtRunner`` callback) as "dbt build: N of M nodes" on a stream (stderr).

    M comes from dbt's ``LogStartLine`` events (``total``: the nodes dbt queued, tests included), N
    counts ``NodeFinished`` events. Levels (:func:`tilake.settings.dbt_progress`): ``quiet`` prints
    nothing; ``normal`` rewrites one line on a terminal (``\\r``) and, when the stream is not a
    terminal (logs, CI), prints a plain line each tenth of the nodes and at the end; ``verbose``
    prints a line per node: ``dbt build: 12 of 93 nodes  model fct_op_comparison success 0.41 s``.
    """

    def __init__(self, command: str, level: str = "normal", stream=None) -> None:
        self.command, self.level = command, level
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.total, self.done, self._tenth, self._open = 0, 0, 0, False

    def __call__(self, ev) -> None:
        name = ev.info.name
        if name == "LogStartLine":
            self.total = max(self.total, int(ev.data.total or 0))
        elif name == "NodeFinished" and self.level != "quiet":
            self.done += 1
            total = max(self.total, self.done)
            line = f"dbt {self.command}: {self.done} of {total} nodes"
            if self.level == "verbose":
                ni, rr = ev.data.node_info, ev.data.run_result
                self._write(f"{line}  {ni.resource_type} {ni.node_name} {rr.status or ni.node_status} "
                            f"{rr.execution_time:.2f} s\n")
            elif self.tty:
                self._write(f"\r{line}")
                self._open = True
            elif self.done * 10 // total > self._tenth or self.done == total:
                self._tenth = self.done * 10 // total
                self._write(line + "\n")

    def close(self) -> None:
        """End an open terminal line."""
        if self._open:
            self._write("\n")
            self._open = False

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(text)
            self.stream.flush()


class InterruptGuard:
    """Record every Ctrl-C (SIGINT, and SIGTERM where the CLI maps it to Ctrl-C) while a build runs.

    dbt runs nodes on worker threads, and the ``KeyboardInterrupt`` Python raises in the main
    thread can be lost on the way: DuckDB turns it into its own ``InterruptException`` inside a
    query (dbt then records one failed or even ignored statement), dbt's result classes turned it
    into a "Compilation Error … quote_policy" once, and in 2 of 8 tries the build finished and was
    swapped in. The guard's handler sets :attr:`hit` before raising, so :func:`build_swapped` checks
    the flag, not the exception, before it swaps; inside :meth:`deferred` (checkpoint + swap) the
    handler only records. SIGINT left ignored (``nohup``, a background job) stays ignored; off the
    main thread the guard does nothing.
    """

    _active: List["InterruptGuard"] = []

    def __init__(self) -> None:
        self.hit = False
        self._defer = False
        self._old: Dict[int, object] = {}

    @classmethod
    def any_hit(cls) -> bool:
        """True when a guard now entered has recorded a Ctrl-C."""
        return any(g.hit for g in cls._active)

    def _handler(self, signum, frame) -> None:
        self.hit = True
        if not self._defer:
            raise KeyboardInterrupt

    def __enter__(self) -> "InterruptGuard":
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old = signal.getsignal(sig)
                # SIG_IGN: the user asked to ignore it; SIG_DFL SIGTERM: the process dies, nothing to swap
                if callable(old) and old not in (signal.SIG_IGN, signal.SIG_DFL):
                    self._old[sig] = old
                    signal.signal(sig, self._handler)
        InterruptGuard._active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}
        if self in InterruptGuard._active:
            InterruptGuard._active.remove(self)

    @contextlib.contextmanager
    def deferred(self):
        """Within the block a Ctrl-C sets :attr:`hit` and raises nothing."""
        self._defer = True
        try:
            yield
        finally:
            self._defer = False


def suspect_runs(lake: Lake, built: Optional[Path], res) -> List[Tuple[str, str]]:
    """The runs a failed build failed on: ``[(run_id, why)]``, best first, at most 5.

    1. each failed dbt test's compiled query, re-run on the failed copy ``built``: the ``run_id``
       values of its failing rows;
    2. raw kernels with values no profiler writes (``dur_ns`` < 0 or over 1 h per call, times past
       2**62 ns, call counts past 2**53: an older ingest, or a hand-made file, let them in);
    3. when neither names one: the runs ingested since the warehouse was last built (raw ``runs``
       rows not in ``dim_runs`` with that ``created_at``), the only new data a failure can come from.

    Never raises: a lookup that fails is skipped.
    """
    from tilake.lake.schema import KERNEL_MAX_NS, TIME_MAX_NS
    from tilake.lake.store import raw_source

    out: List[Tuple[str, str]] = []

    def add(rid, why):
        if rid is not None and all(r != str(rid) for r, _w in out) and len(out) < 5:
            out.append((str(rid), why))

    with contextlib.suppress(Exception):
        have = built is not None and built.exists()
        con = connect(built if have else None, read_only=have)
        try:
            for name, sql in res.compiled.items():
                with contextlib.suppress(Exception):
                    for (rid,) in con.execute(f"SELECT DISTINCT CAST(run_id AS VARCHAR) FROM ({sql}) t "
                                              "ORDER BY 1 LIMIT 5").fetchall():
                        add(rid, f"its rows fail the dbt test {name}")
            with contextlib.suppress(Exception):
                k = raw_source(lake, "kernels")
                for rid, n in con.execute(
                        f"SELECT run_id, count(*) FROM {k} WHERE dur_ns < 0 OR CAST(dur_ns AS HUGEINT) > "
                        f"{KERNEL_MAX_NS} * CAST(coalesce(call_count, 1) AS HUGEINT) OR start_ns > {TIME_MAX_NS} "
                        f"OR end_ns > {TIME_MAX_NS} OR start_ns < 0 OR call_count < 0 OR call_count > {2 ** 53} "
                        "GROUP BY run_id ORDER BY 2 DESC").fetchall():
                    add(rid, f"{n} kernels with impossible values (times negative, over 1 h or past 2**62 ns; "
                             "call counts negative or past 2**53)")
            if not out and res.failures:
                with contextlib.suppress(Exception):
                    known = ""
                    if lake.warehouse.exists():
                        con.execute(f"ATTACH {sql_str(str(lake.warehouse))} AS cur (READ_ONLY)")
                        known = ("WHERE (run_id, created_at) NOT IN (SELECT (run_id, created_at) FROM cur.main.dim_runs)")
                    for (rid,) in con.execute(f"SELECT DISTINCT run_id FROM {raw_source(lake, 'runs')} {known} "
                                              "ORDER BY 1 LIMIT 5").fetchall():
                        add(rid, "the only data new since the last good build (what failed ran on it)")
        finally:
            con.close()
    return out
