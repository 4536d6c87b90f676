"""Stage 3a of ``tilake scan``: run the whole RL script once, with live progress.

``bash <script> [args]`` runs from the script's folder in its own process group; stdout and
stderr are merged, shown live (elapsed time, current RL phase, last log line) and teed to a log
that ends up as ``<profiler_output>/run.log``. The log is written to a temporary file while the
script runs because the profiler block deletes and re-creates ``profiler_output/`` at its start;
it is copied in when the run ends — on success, failure, timeout or Ctrl-C alike.

RL phases are recognised from verl's log lines and mstx range names (reference doc §4.1:
``generate_sequences``, ``compute_log_prob``, ``compute_ref_log_prob``, ``update_actor``).
"""
from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Deque, List, Mapping, Optional, Sequence, Tuple

from tilake.errors import TilakeError
from tilake.files import atomic_path
from tilake.progress import Display, NullDisplay, Segments

#: (regex, phase label), first match wins; checked against every log line
PHASES: List[Tuple[re.Pattern, str]] = [
    (re.compile(r"analy[sz]e|Start parsing profiling data|ascend_pt", re.I), "profiler data parsing"),
    (re.compile(r"compute_ref_log_prob|ref_compute_log_prob", re.I), "ref log-prob (training path)"),
    (re.compile(r"compute_log_prob|old_log_prob", re.I), "actor log-prob (training path)"),
    (re.compile(r"update_actor|actor_update", re.I), "actor update (training path)"),
    (re.compile(r"generate_sequences|rollout_generate|agent_?loop", re.I), "rollout (vLLM inference)"),
    (re.compile(r"\bstep:\s*\d+", re.I), "step finished"),
    (re.compile(r"init_workers|Loading checkpoint|load.*model|mbridge", re.I), "loading model / workers"),
    (re.compile(r"ray\b|Started a local Ray instance", re.I), "starting Ray"),
]


def phase_of(line: str) -> Optional[str]:
    """The RL phase a log line announces, or None (bash ``set -x`` trace lines are ignored)."""
    if line.startswith("+"):
        return None
    for rx, label in PHASES:
        if rx.search(line):
            return label
    return None


def expected_wait(model_id: str) -> str:
    """Expected duration of the run, announced up front (seed: a 0.6B model takes 5-10 min)."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*[bB]\b", str(model_id).replace("-A", " A"))
    if not m:
        return "5-15 min (seed estimate; it grows with model size)"
    size = float(m.group(1))
    if size <= 2:
        return "5-10 min (seed estimate for a ~0.6B model)"
    if size <= 14:
        return "10-30 min (larger than the seed's 0.6B reference)"
    return "30 min or more (large model)"


@dataclass
class RunResult:
    """Outcome of running the RL script.

    Attributes:
        returncode: exit status (negative = killed by that signal; None = never started).
        interrupted: stopped by Ctrl-C or the timeout. elapsed_s: wall seconds.
        log_path: where the full log ended up. tail: last log lines. phases: phases seen, in order.
    """

    returncode: Optional[int]
    interrupted: bool
    elapsed_s: float
    log_path: Optional[Path]
    tail: List[str] = field(default_factory=list)
    phases: List[str] = field(default_factory=list)
    reason: str = ""


def _kill_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


def run_script(script: Path, args: Sequence[str], env: Mapping[str, str], final_log: Path,
               console: Optional[Display] = None, timeout_s: Optional[float] = None,
               tail_lines: int = 30) -> RunResult:
    """Run ``bash <script> [args]`` from the script's folder with live progress.

    Args:
        script: the (already injected) launch script. args: its ``$@``.
        env: its environment. final_log: where the log is copied when the run ends
            (``<profiler_output>/run.log``; folders are created).
        console: where the progress shows (:class:`tilake.progress.Display`; nowhere when None). timeout_s: kill after this long.
    Returns:
        :class:`RunResult`; never raises for a failing script.
    """
    console = console or NullDisplay()
    fd, tmp_name = tempfile.mkstemp(prefix="tilake-scan-run-", suffix=".log")
    tmp_log = Path(tmp_name)
    tail: Deque[str] = deque(maxlen=tail_lines)
    phases: List[str] = []
    start = time.monotonic()
    lines: "queue.Queue[Optional[str]]" = queue.Queue()
    interrupted = False
    reason = ""
    returncode: Optional[int] = None
    console.note(f"  live log: {tmp_log} (copied to {final_log} when the run ends; the profiler block "
                 "re-creates that folder at start)", "dim")
    with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as log:
        log.write(f"# tilake scan: bash {script.name} {' '.join(args)} (cwd {script.parent})\n")
        try:
            proc = subprocess.Popen(["bash", script.name, *args], cwd=str(script.parent), env=dict(env),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            return RunResult(None, False, 0.0, None, [], [], f"cannot start bash: {exc}")

        def reader() -> None:
            assert proc.stdout is not None
            for raw in iter(proc.stdout.readline, b""):
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                lines.put(text.split("\r")[-1] if "\r" in text else text)   # progress bars redraw with \r
            lines.put(None)

        th = threading.Thread(target=reader, daemon=True)
        th.start()
        phase = "starting"
        last = ""

        def view() -> Segments:
            el = time.monotonic() - start
            return [(f"  running {script.name}  ", "bold"), (f"{int(el // 60):02d}:{int(el % 60):02d} elapsed", "cyan"),
                    (f"  phase: {phase}\n", "magenta"), ("  last: " + (last[:150] if last else "(no output yet)"), "dim")]

        done = False
        try:
            with console.live(view()) as update:
                while not done:
                    try:
                        item = lines.get(timeout=0.25)
                    except queue.Empty:
                        item = ""
                        if timeout_s is not None and time.monotonic() - start > timeout_s:
                            interrupted, reason = True, f"timed out after {timeout_s:.0f} s"
                            _kill_group(proc)
                    if item is None:
                        done = True
                    elif item:
                        log.write(item + "\n")
                        log.flush()
                        tail.append(item)
                        last = item
                        ph = phase_of(item)
                        if ph:
                            phase = ph
                            if not phases or phases[-1] != ph:
                                phases.append(ph)
                    update(view())
            returncode = proc.wait()
        except KeyboardInterrupt:
            interrupted, reason = True, "interrupted (Ctrl-C)"
            _kill_group(proc)
            returncode = proc.returncode
        finally:
            th.join(timeout=5)
            if proc.stdout is not None:
                proc.stdout.close()
        log.write(f"# tilake scan: exit status {returncode}{' (' + reason + ')' if reason else ''}\n")
    elapsed = time.monotonic() - start
    dest: Optional[Path] = final_log
    try:
        final_log.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(final_log) as tmp:
            shutil.copyfile(tmp_log, tmp)
        tmp_log.unlink()
    except (OSError, TilakeError):   # a full disk, or a FIFO/device named like the log: keep the temp log
        dest = tmp_log
    if returncode is not None and returncode < 0 and not reason:
        reason = f"killed by signal {-returncode}"
    elif returncode in (137, 143) and not reason:
        reason = (f"killed by {'SIGKILL' if returncode == 137 else 'SIGTERM'} "
                  f"(exit status {returncode}, e.g. out of memory or stopped by hand)")
    return RunResult(returncode, interrupted, elapsed, dest, list(tail), phases, reason)
