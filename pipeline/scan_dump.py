"""``tilake scan --dump``: msprobe dumps of one request's prefill on both sides of the real RL step, their analysis,
and the stub rounds that run themselves.

:func:`run_dump_rounds` is the round driver. It knows nothing of verl: a *collector* runs one collection (round 0
plain, round k with msprobe ``load`` on the target side) and returns where each side's dump landed; the scan's
collector (:class:`ScriptCollector`) runs the user's launch script with the dump block active, a test's collector
dumps a small model. Per round:

1. write ``msprobe_train.json`` / ``msprobe_infer.json`` into the round's folder (round k: the target side's is the
   ``tilake dumps stub-prepare`` config with ``load``, built from round k-1's ``stub_instruction.json``);
2. collect; a side that dumped nothing is an error (one line naming the folder), never a skip;
3. analyse round 0 … k (``tilake dumps analyze --round``): the analysis itself checks that the stub took effect
   (the isolated boundary's stubbed input bitwise equal to the source tensor, ``verify_stub``) before comparing
   anything downstream, and stops when it did not;
4. continue while the analysis asks for another stub that can be applied, up to ``max_rounds`` stub rounds.

The stop reason (:class:`tilake.vocab.RoundsStop`), each round's dumps, verification and outcome are written to
``<work>/tilake_dump_rounds.json``; the final analysis (every round) goes into the lake under the scan's run id
(tables ``dump_runs``, ``tensor_stats`` per round and side, ``boundary_results``, ``stub_rounds``; the task card
holds the collection facts and the stop reason) and its report into ``<report dir>``, joined with the profile of
the same step when the lake holds one. verl's logged mismatch of the dumped step (``training/rollout_probs_diff_*``,
``rollout_corr/*`` from round 0's log) is set beside the dump's verdict (:func:`logged_vs_dump`).
"""
from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from tilake.errors import TilakeError
from tilake.files import atomic_write_json
from tilake.ingest.run_facts import read_rl_metrics
from tilake.ingest.scan import dump_collect as DC
from tilake.lake.dump_records import DumpSummary
from tilake.vocab import EVIDENCE_MISSING, LoggedVsDump, RoundsStop, Verdict

if TYPE_CHECKING:
    from tilake.ingest.scan.script import ParsedScript

RECORD = "tilake_dump_rounds.json"

#: verl's logged train–rollout mismatch keys set beside the verdict (verl 0.9.1 ``utils/debug/metrics.py``:
#: ``|p_actor − p_rollout|`` over the response tokens, probability space; ``rollout_corr/*``: off-policy diagnostics)
LOGGED_KEYS = ("training/rollout_probs_diff_mean", "training/rollout_probs_diff_max", "training/rollout_probs_diff_std",
               "training/rollout_actor_probs_pearson_corr", "rollout_corr/k3_kl", "rollout_corr/log_ppl_diff")


@dataclass
class Collected:
    """What one collection run left: each side's dump folder (what ``dumps analyze`` takes), the run's log (verl's
    metrics of the dumped step; None when the collector has none), its wall time and a note (e.g. the request)."""

    train: Path
    infer: Path
    log: Optional[Path] = None
    wall_s: float = 0.0
    note: str = ""


#: ``collect(round_no, round_dir) -> Collected``; the round's msprobe configs are in ``round_dir`` when it is called
Collector = Callable[[int, Path], Collected]


@dataclass
class RoundRecord:
    """One collection round: its dumps, the stub it applied (round ≥ 1) and what the analysis said of it."""

    round: int
    dir: str
    train: str
    infer: str
    wall_s: float
    bytes: Dict[str, int]
    note: str = ""
    target_side: Optional[str] = None
    isolates: Optional[str] = None
    stub_config: Optional[str] = None
    verified: Optional[bool] = None
    verification: Optional[dict] = None
    outcome: Optional[str] = None
    first_divergence: Optional[str] = None
    points: List[list] = field(default_factory=list)
    analysis: Optional[str] = None


@dataclass
class DumpRounds:
    """The outcome of :func:`run_dump_rounds`.

    Attributes:
        rounds: one :class:`RoundRecord` per collection (round 0 first). stop / stop_reason: why the rounds ended
            (:class:`~tilake.vocab.RoundsStop` and one line). summary: the final analysis (every round; in the
            lake when a run id was given). logged: verl's logged mismatch of the dumped step (``{metric: value}``,
            with ``source``), {} when the log holds none. logged_vs_dump: :func:`logged_vs_dump`.
        record: ``tilake_dump_rounds.json``. report_dir: the final report's folder. wall_s: the whole driver.
    """

    rounds: List[RoundRecord]
    stop: str
    stop_reason: str
    summary: DumpSummary
    logged: Dict[str, Any]
    logged_vs_dump: Dict[str, Any]
    record: Path
    report_dir: Path
    wall_s: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready values (paths as strings)."""
        return {"format": "tilake-dump-rounds/1", "rounds": [asdict(r) for r in self.rounds], "stop": str(self.stop),
                "stop_reason": self.stop_reason, "verdict": self.summary.to_dict(), "logged": self.logged,
                "logged_vs_dump": self.logged_vs_dump, "report_dir": str(self.report_dir),
                "wall_s": round(self.wall_s, 1)}


# ------------------------------------------------------------------------------ verl's logged mismatch
def logged_mismatch(log: Optional[Path], rl_step: int) -> Dict[str, Any]:
    """verl's logged train–rollout mismatch of RL step ``rl_step`` (:data:`LOGGED_KEYS` found in the log, NaN
    kept as None) with ``source`` (file:line); {} when there is no log or it holds none of them.

    Raises:
        TilakeError: the log cannot be read.
    """
    if log is None or not Path(log).is_file():
        return {}
    rows = [r for r in read_rl_metrics(Path(log)) if r["step"] == rl_step and r["metric"] in LOGGED_KEYS]
    if not rows:
        return {}
    out: Dict[str, Any] = {r["metric"]: (r["value"] if math.isfinite(r["value"]) else None) for r in rows}
    out["source"] = f"{rows[0]['source_path']}:{rows[0]['line_no']} (verl console log, step {rl_step})"
    return out


def logprob_json(logged: Mapping[str, Any], dest: Path) -> Optional[Path]:
    """Write verl's ``training/rollout_probs_diff_{mean,max,std}`` as the analysis' measured log-prob diff
    (``--logprob-json``); None when mean or max is missing or not finite."""
    mean, mx = logged.get("training/rollout_probs_diff_mean"), logged.get("training/rollout_probs_diff_max")
    if mean is None or mx is None:
        return None
    return atomic_write_json(dest, {
        "mean": mean, "max": mx, "std": logged.get("training/rollout_probs_diff_std"),
        "source": ("verl training/rollout_probs_diff_{mean,max,std} of the dumped step (|p_actor - p_rollout| of "
                   f"the response token, probability space): {logged.get('source')}")})


def logged_vs_dump(logged: Mapping[str, Any], verdict: str, first_divergence: Optional[str],
                   not_compared: Sequence[str] = ()) -> Dict[str, Any]:
    """Set verl's logged mismatch beside the dump's verdict.

    Returns:
        ``{"status": LoggedVsDump, "text", "logged": {...}, "verdict"}``: ``contradiction`` when verl logged a
        nonzero mismatch (probs diff max or ``k3_kl`` > 0) while every compared boundary is bitwise EXACT (the
        dumps show no difference the log-probs could come from), or when it logged exactly 0 while the dumps
        differ; ``consistent`` when both say nonzero (or both zero); ``evidence_missing`` without a logged value or
        a comparable dump.
    """
    mx = logged.get("training/rollout_probs_diff_max")
    kl = logged.get("rollout_corr/k3_kl")
    figures = {k: v for k, v in logged.items() if k != "source"}
    base = {"logged": figures, "source": logged.get("source"), "verdict": verdict}
    if mx is None and kl is None:
        return dict(base, status=LoggedVsDump.EVIDENCE_MISSING,
                    text="the run's log holds no training/rollout_probs_diff_max or rollout_corr/k3_kl for the dumped "
                         "step: nothing to set beside the dump's verdict")
    nonzero = bool((mx or 0) > 0 or (kl or 0) > 0)
    shown = ", ".join(f"{k.split('/')[-1]} {v:.4g}" for k, v in figures.items() if isinstance(v, float))
    if verdict == Verdict.EXACT:
        if nonzero:
            miss = f" ({len(not_compared)} boundary(ies) not compared: {', '.join(not_compared[:4])})" \
                if not_compared else ""
            return dict(base, status=LoggedVsDump.CONTRADICTION,
                        text=f"contradiction: verl logged a nonzero train–rollout mismatch ({shown}) but every "
                             f"compared boundary of the dumps is bitwise EXACT{miss}: the dumps do not hold the "
                             "difference the log-probs show (another request, another forward, or a step after "
                             "the dumped boundaries)")
        return dict(base, status=LoggedVsDump.CONSISTENT,
                    text=f"consistent: verl logged no mismatch ({shown}) and every compared boundary is EXACT")
    if verdict in (Verdict.NONZERO,):
        if nonzero:
            return dict(base, status=LoggedVsDump.CONSISTENT,
                        text=f"consistent: verl logged a nonzero mismatch ({shown}) and the dumps differ from "
                             f"{first_divergence or 'a boundary'} on")
        return dict(base, status=LoggedVsDump.CONTRADICTION,
                    text=f"contradiction: verl logged exactly zero mismatch ({shown}) but the dumps differ from "
                         f"{first_divergence or 'a boundary'} on (the differences must vanish before the "
                         "log-probs, or the log is of another forward)")
    return dict(base, status=LoggedVsDump.EVIDENCE_MISSING,
                text=f"verl logged {shown}; the dump's verdict is {verdict}: nothing to compare it with")


# ------------------------------------------------------------------------------ the driver
def _source(analysis: Path) -> Dict[str, Any]:
    try:
        return json.loads((analysis / "report_source.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TilakeError(f"the analysis wrote no readable report_source.json ({exc})", path=analysis) from exc


def _checked(c: Collected, round_dir: Path) -> Tuple[Path, Path]:
    """Both sides' dumps exist and are non-empty (else one error line naming the folder)."""
    for side, p in (("train", c.train), ("infer", c.infer)):
        if not Path(p).exists():
            raise TilakeError(f"round {round_dir.name}: the {side} side dumped nothing (no folder)", path=p)
        DC.check_nonempty(Path(p), f"round {round_dir.name}: the {side} side")
    return Path(c.train), Path(c.infer)


def run_dump_rounds(collect: Collector, work: Path, report_dir: Path, *, max_rounds: int = 3,
                    map_name: str = "auto", lake_path: Optional[Path] = None, run_id: Optional[str] = None,
                    card: Optional[Mapping[str, Any]] = None, rl_step: int = 1, build: bool = False,
                    charts: bool = True, say: Callable[[str], None] = lambda s: None) -> DumpRounds:
    """Collect round 0, analyse, and run stub rounds until the analysis asks for none, the next point cannot be
    isolated, a stub did not take effect, or ``max_rounds`` stub rounds were collected (module docstring).

    Args:
        collect: the collector. work: folder of the rounds (``round<k>/``; a previous driver's rounds there are
            replaced). report_dir: the final analysis' outputs. max_rounds: stub rounds at most (0: round 0 only).
        lake_path / run_id / build: write the final analysis into the lake (and build the dump marts: the
            profile ⋈ dump join). card: task-card facts (``model`` for the join). rl_step: the RL step dumped (its
            metrics in the log; the task card's dump step for the join). say: one line per event.
    Returns:
        :class:`DumpRounds` (also written to ``<work>/tilake_dump_rounds.json``).
    Raises:
        TilakeError: a side dumped nothing, an unreadable dump or stub config, lake or dbt errors.
    """
    from tilake.pipeline.dumps import run_analyze, run_stub_prepare

    if max_rounds < 0:
        raise TilakeError(f"--max-rounds must be >= 0, not {max_rounds}")
    t0 = time.monotonic()
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("round*"):
        if old.is_dir():
            shutil.rmtree(old)
    card = dict(card or {})
    records: List[RoundRecord] = []
    pairs: List[Tuple[Path, Path]] = []
    logged: Dict[str, Any] = {}
    lp: Optional[Path] = None
    instr: Dict[str, Any] = {}
    instr_path: Optional[Path] = None
    stop, stop_reason = RoundsStop.NO_STUB_NEEDED, ""
    k = 0
    while True:
        rd = work / f"round{k}"
        rd.mkdir(parents=True)
        rec_side = rec_cfg = None
        if k:
            rec_side = instr["target_side"]
            sp = run_stub_prepare(pairs[0][0], pairs[0][1], instr_path, rd / "stub", map_name=map_name)
            rec_cfg = sp.config
            say(f"round {k}: stub on the {rec_side} side isolates {instr['isolate_boundary']['name']} "
                f"({len(sp.files)} tensor file(s); msprobe load of {', '.join(json.loads(Path(sp.config).read_text())['load']['modules'])})")
        DC.write_configs(rd, rec_side, Path(rec_cfg) if rec_cfg else None)
        say(f"round {k}: collecting" + (" (msprobe load on the " + str(rec_side) + " side)" if k else ""))
        t = time.monotonic()
        c = collect(k, rd)
        wall = c.wall_s or (time.monotonic() - t)
        tr, inf = _checked(c, rd)
        if k == 0:
            pairs.append((tr, inf))
            logged = logged_mismatch(c.log, rl_step)
            lp = logprob_json(logged, rd / "logged_mismatch.json") if logged else None
        else:   # round k: the stubbed side from this run, the other side is round 0's (the stub's source)
            pairs.append((tr, pairs[0][1]) if rec_side == "train" else (pairs[0][0], inf))
        rec = RoundRecord(k, str(rd), str(pairs[-1][0]), str(pairs[-1][1]), round(wall, 1),
                          {"train": DC.dump_size(tr), "infer": DC.dump_size(inf)}, c.note, rec_side,
                          instr.get("isolate_boundary", {}).get("name") if k else None, rec_cfg)
        out = rd / "analysis"
        summ = run_analyze(pairs[0][0], pairs[0][1], out, map_name=map_name, rounds=pairs[1:],
                           card={key: v for key, v in card.items() if key != "collection"},
                           logprob_json=lp, charts=False, show_progress=False, rl_step=rl_step)
        src = _source(out)
        rinfo = (src.get("rounds") or [{}])[-1]
        ver = rinfo.get("stub_verification") or {}
        rec.analysis, rec.outcome = str(out), rinfo.get("outcome")
        rec.verified = ver.get("effective") if k else None
        rec.verification = ver or None
        rec.first_divergence = (rinfo.get("first_divergence") or {}).get("boundary")
        rec.points = [[p["round"], p["boundary"], p["class"]] for p in rinfo.get("points") or []]
        records.append(rec)
        say(f"round {k}: {summ.verdict} ({summ.consistency}); outcome {rec.outcome}"
            + (f"; stub verified: {'yes' if rec.verified else 'NO'}" if k else "")
            + (f"; first divergence {rec.first_divergence}" if rec.first_divergence else ""))
        instr_path = out / "stub_instruction.json"
        instr = src.get("stub_instruction") or {}
        if k and not rec.verified:
            stop = RoundsStop.STUB_NOT_EFFECTIVE
            bad = [c_ for c_ in ver.get("checks") or [] if not c_.get("equal")]
            stop_reason = (f"round {k}: the stub did not take effect ({bad[0]['module'] if bad else '?'} input "
                           f"{bad[0]['input'] if bad else '?'}: {bad[0].get('reason') if bad else 'not verified'}); "
                           "downstream boundaries were not compared")
            break
        if not instr.get("needed"):
            stop = RoundsStop.NO_STUB_NEEDED
            stop_reason = f"round {k}: no further stub needed (outcome {rec.outcome})"
            break
        if not instr.get("available"):
            stop = RoundsStop.NOT_ISOLABLE
            stop_reason = (f"round {k}: the next point {instr.get('isolate_boundary', {}).get('name')} cannot be "
                           f"isolated: {instr.get('reason')}")
            break
        if k >= max_rounds:
            stop = RoundsStop.MAX_ROUNDS
            stop_reason = (f"--max-rounds {max_rounds} reached: round {k + 1} would isolate "
                           f"{instr.get('isolate_boundary', {}).get('name')} on the {instr.get('target_side')} side "
                           f"({instr_path})")
            break
        k += 1
    say(f"rounds stopped: {stop_reason}")
    how = {"method": str(card.pop("collection", "tilake scan --dump")), "rounds_collected": len(records),
           "max_rounds": max_rounds, "stop": str(stop), "stop_reason": stop_reason,
           "rounds": [{"round": r.round, "dir": r.dir, "target_side": r.target_side, "isolates": r.isolates,
                       "verified": r.verified, "outcome": r.outcome, "wall_s": r.wall_s, "note": r.note}
                      for r in records],
           "logged_mismatch": dict(logged)}
    final = run_analyze(pairs[0][0], pairs[0][1], Path(report_dir), map_name=map_name, rounds=pairs[1:], card=card,
                        logprob_json=lp, lake_path=lake_path, run_id=run_id, build=build and run_id is not None,
                        charts=charts, show_progress=False, rl_step=rl_step, collection=how)
    fsrc = _source(Path(report_dir))
    nc = [e["boundary"] for e in fsrc.get(EVIDENCE_MISSING) or [] if e.get("round") == 0]
    lvd = logged_vs_dump(logged, final.verdict, final.first_divergence, nc)
    res = DumpRounds(records, stop, stop_reason, final, logged, lvd, work / RECORD, Path(report_dir),
                     time.monotonic() - t0)
    atomic_write_json(res.record, res.to_dict())
    return res


# ------------------------------------------------------------------------------ the scan's collector
class ScriptCollector:
    """Runs the user's launch script once per round with the dump block active (``TILAKE_DUMP_DIR`` = the round's
    folder, ``PROFILER_OUTPUT_DIR`` = a scratch folder inside it, so the profiled run's output is never touched),
    after installing the rollout hook there; then finds both sides' dumps
    (:func:`tilake.ingest.scan.dump_collect.find_train_dump` / ``find_infer_dump``).

    Raises (from ``__call__``):
        TilakeError: the run failed or was killed (log kept in the round's folder), a side dumped nothing.
    """

    def __init__(self, script: Path, script_args: Sequence[str], env: Mapping[str, str], rl_step: int = 1,
                 timeout_s: Optional[float] = None, display: Any = None) -> None:
        self.script, self.args, self.env = Path(script), list(script_args), dict(env)
        self.rl_step, self.timeout_s, self.display = rl_step, timeout_s, display

    def __call__(self, round_no: int, round_dir: Path) -> Collected:
        from tilake.ingest.scan.run import run_script

        DC.install_hook(round_dir)
        env = dict(self.env, TILAKE_DUMP_DIR=str(round_dir), PROFILER_OUTPUT_DIR=str(round_dir / "profiler_scratch"))
        log = round_dir / "run.log"
        run = run_script(self.script, self.args, env, log, console=self.display, timeout_s=self.timeout_s)
        if run.returncode != 0 or run.interrupted:
            tail = " | ".join(x.strip() for x in run.tail[-3:])[:400]
            raise TilakeError(f"collection round {round_no}: the RL script failed ({run.reason or f'exit status {run.returncode}'}"
                              f"); log kept at {run.log_path}; last lines: {tail}", path=self.script)
        try:
            train = DC.find_train_dump(round_dir, self.rl_step)
            infer = DC.find_infer_dump(round_dir)
        except TilakeError as exc:
            raise TilakeError(f"collection round {round_no}: {exc} (run log: {log})") from exc
        rec = DC.read_hook_record(round_dir)
        note = ("rollout prefill of " + ", ".join(f"request {r.req_id} ({r.prompt_tokens} prompt tokens, "
                                                   f"{r.computed_tokens} cached)" for r in rec.requests)
                + f" in vLLM process {rec.pid}")
        return Collected(train, infer, log, run.elapsed_s, note)


def scan_dump_phase(parsed: "ParsedScript", script_args: Sequence[str], env: Mapping[str, str], lake_path: Path,
                    rid: str, output_dir: Path, out_dir: Path, console: Any, progress: bool,
                    timeout_s: Optional[float], max_rounds: int, profile_report: Optional[Path] = None) -> DumpRounds:
    """``tilake scan --dump`` after the profiled run: collection rounds into ``<script dir>/tilake_dump/round<k>/``
    (:class:`ScriptCollector`), the final analysis into ``<out>/dump_report`` and the lake under the scan's run id
    ``rid`` (built: the profile ⋈ dump join), a summary panel on ``console`` (a
    :class:`~tilake.reports.scan_console.ScanConsole`).

    Raises:
        TilakeError: a collection run failed, a side dumped nothing, lake or dbt errors (the message says that the
        profile report ``profile_report`` is written).
    """
    from tilake.ingest.scan.script import UNKNOWN
    from tilake.reports.scan_console import escape

    work = output_dir.parent / "tilake_dump"
    console.say(f"dumps · collection runs of one request (msprobe on both sides; up to {max_rounds} stub round(s)) "
                f"into {escape(work)}")
    collect = ScriptCollector(parsed.path, script_args, env, rl_step=1, timeout_s=timeout_s,
                              display=console if progress else None)
    cfg = parsed.config
    card = {"model": str(cfg.get("model_id", UNKNOWN)), "train_backend": str(cfg.get("train_backend", UNKNOWN)),
            "infer_backend": str(cfg.get("infer_backend", UNKNOWN)),
            "request_pairing": "one prompt (the dataset's first, no shuffle), n=1, response length 1, seed 42: the "
                               "rollout's prefill of that request and the actor's log-prob forward of the same "
                               "sample (token ids compared by the analysis)",
            "step_pairing": "RL step 1 (verl precision_debugger step_1; msprobe step 0)",
            "collection": "tilake scan --dump: verl precision_debugger (actor_compute_log_prob) + tilake's rollout "
                          "hook (vllm.general_plugins)"}
    try:
        dr = run_dump_rounds(collect, work, out_dir / "dump_report", max_rounds=max_rounds, lake_path=lake_path,
                             run_id=rid, card=card, rl_step=1, build=True,
                             say=lambda line: console.say("dumps · " + escape(line)))
    except TilakeError as exc:
        done = f" (the profile report is written: {profile_report})" if profile_report else ""
        raise TilakeError(f"dump collection stopped{done}: {exc}", path=parsed.path) from exc
    s = dr.summary
    rounds = "\n".join(f"round {r.round}: {r.outcome}" + (f", stub of {r.isolates} verified: {r.verified}"
                                                         if r.round else "") + f", {r.wall_s:.0f} s, {r.note}"
                       for r in dr.rounds)
    console.panel(f"verdict: {s.verdict} ({s.consistency}) — {s.reason}\nfirst divergence: {s.first_divergence}\n"
                  f"{rounds}\nstopped: {dr.stop_reason}\nverl's logged mismatch vs the dumps: "
                  f"{dr.logged_vs_dump['status']} — {dr.logged_vs_dump['text']}\n"
                  f"profile ⋈ dump: {(s.profile_join or {}).get('status')}\nreport: {s.outputs.get('report_md')}\n"
                  f"rounds record: {dr.record}", "dumps · verdict")
    return dr


def msprobe_fix(checks: Sequence[Any]) -> None:
    """Give a failed ``import msprobe`` check (of :func:`tilake.ingest.scan.env.check_environment_torch`) its fix."""
    for c in checks:
        if c.name == "import msprobe" and not c.ok:
            c.fix = "pip install mindstudio-probe in that environment (tilake scan --dump dumps with msprobe)"
