"""The foundation pipeline: profiler output → lake (ingest) → marts (dbt build) → report.

Used by ``tilake ingest`` / ``build`` / ``report`` / ``run`` (one function each:
:func:`ingest_command`, :func:`build_command`, :func:`report_command`, :func:`run_command`),
``tilake example`` and stages 4–5 of ``tilake scan`` (:func:`run_profile`).

Every write command holds :meth:`tilake.lake.store.Lake.writing` once, around all its steps: one
writer lock and one ``Lake.ensure`` per command; the lake functions it calls step into the same door.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from tilake import settings
from tilake.errors import TilakeError
from tilake.files import check_out_dir
from tilake.ingest.model_facts import layers_setting_from_path
from tilake.ingest.profiler.discover import (
    Capture,
    assign_replica_ranks,
    assign_worker_ranks,
    dedupe,
    discover,
    explicit,
    select_rl_step,
)
from tilake.ingest.profiler.load import IngestResult, ingest_profile
from tilake.ingest.run_facts import RunMeta
from tilake.lake.registry import model_family_for
from tilake.lake.store import Lake, validate_run_id
from tilake.lake.warehouse import BuildResult, DbtInterrupted, build_swapped
from tilake.pipeline.script_facts import SCRIPT_DEFAULTS, merge_facts, script_run_facts, script_settings
from tilake.reports.progress_console import ingest_bar
from tilake.vocab import CaptureStatus, Evidence

if TYPE_CHECKING:   # the report module is imported when a report is written (it pulls in jinja2, matplotlib)
    from tilake.reports.op_diff import OpDiffOutputs

PathLike = Union[str, Path]
RECORDED = "recorded profiler output"
"""``runs.collection_method`` of a run ingested from files the user recorded."""


@dataclass
class ProfileResult:
    """Outcome of :func:`run_profile`.

    Attributes:
        status: ``ok`` (both sides have device evidence, or CPU ops of CPU-only torch traces:
            ``evidence`` says ``cpu_ops``), ``host_fallback`` (a side relies on
            host-side API statistics) or ``evidence_missing``.
        grade_counts: comparison rows per grade (``red``/``orange``/``yellow``/``green``/
            ``evidence_missing``).
    """

    run_id: str
    report_path: Path
    csv_path: Path
    runtime_ops: List[Path]
    chart_path: Optional[Path]
    grade_counts: Dict[str, int]
    evidence: Dict[str, str]
    status: str
    ingest: IngestResult
    warnings: List[str] = field(default_factory=list)
    # html / numeric_csv / xlsx written beside the report
    outputs: Dict[str, Path] = field(default_factory=dict)
    # one-side-only rows per "<grade>:train" / "<grade>:infer" (also in grade_counts): said "training only"
    one_side: Dict[str, int] = field(default_factory=dict)
    # the report's verdict as plain lines (tilake.reports.op_diff_verdict.verdict_lines): printed first
    verdict: List[str] = field(default_factory=list)


UNCATEGORIZED_TEST = "tilake_is_empty_fct_uncategorized_kernels"


def warning_text(node: tuple) -> str:
    """A dbt warning node ``(name, type, status, message)`` in the user's terms (lake-wide counts)."""
    name, _kind, _status, message = node
    if name.startswith(UNCATEGORIZED_TEST):
        n = "".join(ch for ch in message.split("results")[0] if ch.isdigit()) or "some"
        return (f"{n} kernel name(s) in the lake match no op_catalog entry (listed under 'uncategorized' in the report; "
                "add them to an op_catalog.csv with the shipped header in a rules folder: --rules DIR, "
                "$TILAKE_RULES or <lake>/rules/)")
    return f"dbt test {name}: {message}"


def uncategorized_warning(rows: Sequence[Dict[str, Any]], captures: Sequence[Dict[str, Any]] = ()) -> List[str]:
    """The catalog warning for one reported run: ``rows`` are its fct_uncategorized_kernels rows, ``captures``
    its captures (their ``source_kind`` picks the seed file: :func:`tilake.reports.captures.catalog_hint`)."""
    from tilake.reports.captures import catalog_hint

    if not rows:
        return []
    fb = sum(1 for r in rows if r.get("category_source") == "fallback")
    kinds = {c.get("side"): c.get("source_kind") for c in captures}
    return [f"{len(rows)} kernel name(s) match no op_catalog entry ({fb} placed by the fallback by kernel-name "
            f"family / task type; listed in the report): {catalog_hint([kinds.get(r.get('side')) for r in rows], 'en')}"]


def default_run_id(source: Path) -> str:
    """Deterministic run id from a folder: its name plus a short hash of its absolute path."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", Path(source).resolve().name) or "run"
    return f"{name[:40]}-{hashlib.sha1(str(Path(source).resolve()).encode()).hexdigest()[:8]}"


def find_captures(profiler_output: Optional[Path], train: Sequence[Path] = (), infer: Sequence[Path] = (),
                  present_only: bool = False) -> List[Capture]:
    """Every capture under ``profiler_output`` and the explicit ``train``/``infer`` paths, each path once,
    before :func:`reduce_captures` (no dedupe, no worker rank slots).

    Explicit paths replace discovery for their side. ``present_only``: skip the given paths that do not
    exist here (one node of a Ray cluster sees only its own captures, :mod:`tilake.ingest.profiler.fleet`).
    Raises:
        TilakeError: a path that exists holds no capture (or, without ``present_only``, does not exist).
    """
    def here(p) -> bool:
        return not present_only or Path(p).exists()

    caps: List[Capture] = []
    if profiler_output is not None and here(profiler_output):
        found = discover(Path(profiler_output))
        caps += [c for c in found if not ((c.side == "train" and train) or (c.side == "infer" and infer))]
    for p in train:
        caps += explicit(Path(p), "train") if here(p) else []
    for p in infer:
        caps += explicit(Path(p), "infer") if here(p) else []
    unique, seen = [], set()
    for c in caps:  # the same capture named twice (folder and DB file) is read once
        key = (c.side, c.kind, str(Path(c.path).resolve()))
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def reduce_captures(caps: Sequence[Capture], rl_step: Optional[int] = None) -> List[Capture]:
    """Duplicates of one (side, rank, role folder) reduced to one (:func:`tilake.ingest.profiler.discover.dedupe`:
    DB over text, highest level; the others are listed on it), rank-less workers given one rank slot each
    (``assign_worker_ranks``), rollout replicas that repeat engine rank 0 one rank slot each
    (``assign_replica_ranks``), captures of several profiled RL steps narrowed to ``rl_step``
    (``select_rl_step``: refused without it); sorted train first, then by rank and path.

    Raises:
        TilakeError: no capture at all; several RL steps and no ``rl_step``.
    """
    if not caps:
        raise TilakeError("give a profiler_output folder or --train/--infer paths")
    kept = assign_replica_ranks(assign_worker_ranks(dedupe(select_rl_step(list(caps), rl_step))))
    return sorted(kept, key=lambda c: (c.side != "train", c.rank, str(c.path)))


def collect_captures(profiler_output: Optional[Path], train: Sequence[Path] = (),
                     infer: Sequence[Path] = (), rl_step: Optional[int] = None) -> List[Capture]:
    """Captures from a verl ``profiler_output`` folder and/or explicit per-side paths.

    Explicit paths replace discovery for their side. Duplicate captures of one (side, rank, role folder)
    are reduced to one (:func:`tilake.ingest.profiler.discover.dedupe`: DB over text, highest level; the
    others are listed on it), rank-less workers and rollout replicas get one rank slot each, and captures of
    several profiled RL steps are narrowed to ``rl_step``: :func:`reduce_captures` of :func:`find_captures`.
    Raises:
        TilakeError: nothing given, a path holds no capture, several RL steps and no ``rl_step``.
    """
    if profiler_output is None and not train and not infer:
        raise TilakeError("give a profiler_output folder or --train/--infer paths")
    return reduce_captures(find_captures(profiler_output, train, infer), rl_step)


@contextlib.contextmanager
def captures_for(profiler_output: Optional[PathLike], train: Sequence[PathLike] = (), infer: Sequence[PathLike] = (),
                 *, ray: Optional[str] = None, rl_step: Optional[int] = None) -> Iterator[Tuple[List[Capture], Any]]:
    """``(captures, fleet)`` for one ingest: :func:`collect_captures` on this machine and ``fleet`` None,
    or with ``ray`` (``--ray auto|local|ADDRESS``; None: ``$TILAKE_RAY``) a Ray fleet held open for the block
    (:func:`tilake.ingest.profiler.fleet.ray_fleet`) whose nodes each found the captures on their own
    disks (:func:`find_captures` per node), reduced here once (:func:`reduce_captures`).

    Raises:
        TilakeError: nothing given or found; ray not installed; Ray did not start or connect.
    """
    ray = ray or settings.ray_address()
    if not ray:
        yield collect_captures(Path(profiler_output) if profiler_output else None, train, infer, rl_step), None
        return
    from tilake.ingest.profiler.fleet import check_address, ray_fleet, require_ray

    require_ray()
    check_address(ray)
    if profiler_output is None and not train and not infer:
        raise TilakeError("give a profiler_output folder or --train/--infer paths")
    po = Path(profiler_output).absolute() if profiler_output else None
    tr, inf = [Path(p).absolute() for p in train], [Path(p).absolute() for p in infer]
    with ray_fleet(ray) as fleet:
        find = functools.partial(find_captures, po, tr, inf)
        yield reduce_captures(fleet.probe(find, [str(p) for p in ([po] if po else []) + tr + inf]), rl_step), fleet


def check_sides(caps: Sequence[Capture], profiler_output: Optional[PathLike], allow_missing: bool = False) -> None:
    """Refuse, before the lake is touched, a folder where one side has no capture at all.

    Raises:
        TilakeError: naming the side, the folder searched and the layouts discovery knows
        (:mod:`tilake.ingest.profiler.discover`), unless ``allow_missing``.
    """
    for side in ("train", "infer"):
        if allow_missing or any(c.side == side for c in caps):
            continue
        where = f"in {Path(profiler_output).resolve()}" if profiler_output is not None else "among the given paths"
        raise TilakeError(
            f"no {side} capture was found {where}", hint="verl writes training captures under e2e/<host>_<pid>_<ts>_ascend_pt/ "
            "(or actor_update/) and inference captures under agent_loop_rollout_replica_*/ or rollout*/; "
            f"name a capture with --{side} PATH, or record the side as evidence_missing with --allow-missing")


def source_description(profiler_output: Optional[Path], train: Sequence[Path] = (),
                       infer: Sequence[Path] = ()) -> str:
    """Where a run's captures came from: the profiler_output folder and/or the explicit paths."""
    parts = [str(Path(profiler_output).resolve())] if profiler_output is not None else []
    parts += [f"train={Path(p).resolve()}" for p in train] + [f"infer={Path(p).resolve()}" for p in infer]
    return "; ".join(parts)


def run_profile(profiler_output: Optional[Path], lake: Lake, run_id: str, out_dir: Path, *,
                run_meta: Optional[RunMeta] = None, lang: str = "zh", train: Sequence[Path] = (),
                infer: Sequence[Path] = (), allow_missing: bool = False,
                progress: bool = True, profiler_step: Optional[int] = None,
                rl_step: Optional[int] = None, ray: Optional[str] = None) -> ProfileResult:
    """Ingest → dbt build → report for one run; returns where everything landed.

    Args:
        profiler_output: verl ``profiler_output/`` (or None with explicit ``train``/``infer``).
        lake: target lake; its door (:meth:`Lake.writing`) is held once for ingest and build.
        run_id: validated id; re-running replaces the run's partitions.
        out_dir: folder for the report, CSV, runtime-ops JSON and chart.
        run_meta: ``runs`` row values (model_id, model_family, parallel_config, rl_config, …).
        allow_missing: record sides without device evidence (the report says evidence_missing)
            instead of failing.
        profiler_step: count only profiler step N (``ProfilerStep#N``) on every rank with step markers.
        rl_step: with captures of several profiled RL steps, the one to ingest (``--rl-step``).
        ray: ingest on Ray (``auto``, ``local`` or an address; :func:`captures_for`); None: threads here.
    Raises:
        TilakeError: bad input (the lake is unchanged), dbt failure, report failure.
    """
    validate_run_id(run_id)
    check_out_dir(out_dir, lake.root)
    stack = contextlib.ExitStack()
    with stack:
        caps, fleet = stack.enter_context(captures_for(profiler_output, train, infer, ray=ray, rl_step=rl_step))
        check_sides(caps, profiler_output, allow_missing)
        meta = dict(run_meta or {})
        meta.setdefault("source_path", source_description(profiler_output, train, infer))
        with lake.writing():   # one lock, one ensure: ingest and build
            with ingest_bar(progress) as bar:
                ing = ingest_profile(lake, run_id, caps, meta, allow_missing=allow_missing, progress=bar,
                                     profiler_step=profiler_step, fleet=fleet)
            stack.close()      # Ray is left before the dbt build
            build, alignment = _build_after_ingest(lake, run_id)
    build.raise_if_failed(path=lake.root)
    return _finish_profile(lake, run_id, out_dir, lang, ing, build, alignment)


def _build_after_ingest(lake: Lake, run_id: str) -> Tuple[BuildResult, Any]:
    """dbt build (swapped in atomically), then the kernel alignment rows of ``run_id`` when it succeeded.
    The caller holds the lake's door (:meth:`Lake.writing`)."""
    try:
        build = build_swapped(lake)
    except DbtInterrupted as exc:
        raise TilakeError(f"{exc} (run `tilake build` to build run {run_id})") from None
    from tilake.pipeline.align import align_run  # numpy: imported on the build path only

    alignment = align_run(lake, run_id) if build.success else None   # rows read by the alignment views
    return build, alignment


def _finish_profile(lake: Lake, run_id: str, out_dir: Path, lang: str, ing: IngestResult,
                    build: BuildResult, alignment: Any = None) -> ProfileResult:
    from tilake.reports.op_diff import write_report

    out = write_report(lake.warehouse, run_id, out_dir, lang)
    ev = out["evidence"]
    status = (CaptureStatus.EVIDENCE_MISSING if Evidence.MISSING in ev.values()
              else CaptureStatus.HOST_FALLBACK if Evidence.HOST_FALLBACK in ev.values() else CaptureStatus.OK)
    warnings = uncategorized_warning(out["facts"]["uncategorized"], out["facts"]["captures"])   # this run only
    warnings += [warning_text(n) for n in build.warnings if not n[0].startswith(UNCATEGORIZED_TEST)]
    warnings += [f"{c.capture.side} rank {c.capture.rank} ({c.capture.path}): {c.status} — {c.reason}"
                 for c in ing.captures if c.status != CaptureStatus.OK]   # identity notes live in the health reason
    warnings += ing.notes
    if alignment and alignment["status"] != "ok":
        warnings.append(f"kernel alignment: {alignment['status']} — {alignment['reason']}")
    return ProfileResult(run_id, out["report"], out["csv"], out["runtime_ops"], out["chart"],
                         out["grade_counts"], ev, status, ing, warnings,
                         {k: out[k] for k in ("html", "numeric_csv", "xlsx") if k in out}, out.get("one_side", {}),
                         out.get("verdict", []))


# ---------------------------------------------------------------------------------- CLI commands

def resolve_run_id(run_id: Optional[str], source: Optional[PathLike], train: Sequence[PathLike] = (),
                   infer: Sequence[PathLike] = ()) -> str:
    """The given run id (validated), else :func:`default_run_id` of the folder or first capture path.

    Raises:
        TilakeError: invalid id, or no source at all.
    """
    if run_id is not None:
        return validate_run_id(run_id)
    if not (source or train or infer):
        raise TilakeError("give a profiler_output folder or --train/--infer paths")
    return default_run_id(Path(source or (list(train) + list(infer))[0]))


def run_meta(model_id: Optional[str] = None, model_family: Optional[str] = None,
             model_path: Optional[PathLike] = None, step: Optional[int] = None,
             tags: Optional[Sequence[Tuple[str, str]]] = None, **extra: Any) -> Dict[str, Any]:
    """``runs`` row values from the CLI's model options (None values left out).

    The family, when not given, is read from ``model_path``'s ``config.json``
    (:func:`tilake.lake.registry.model_family_for`), the decoder layers (``rl_config.num_layers``) from the same
    file, or from the HF cache for a hub ``model_id`` (:mod:`tilake.ingest.model_facts`); ``tags`` are
    ``(key, value)`` pairs.
    """
    meta = {k: v for k, v in extra.items() if v is not None}
    if model_id:
        meta["model_id"] = model_id
    if not model_family and model_path:
        model_family = model_family_for(model_path, model_id)[0]
    layers = layers_setting_from_path(str(model_path or model_id or ""), Path("."))
    if layers:   # the model's decoder layers: the kernel alignment rejects a split that contradicts them
        rl = dict(meta.get("rl_config") or {})
        rl.setdefault("num_layers", layers["value"])
        rl.setdefault("num_layers_source", layers["source"])
        meta["rl_config"] = rl
    if model_family:
        meta["model_family"] = model_family
    if step is not None:
        meta["step"] = step
    if tags:
        meta["tags"] = dict(tags)
    return meta


def facts_meta(phases: Optional[str] = None, log: Optional[PathLike] = None, script: Optional[PathLike] = None,
               settings: Sequence[Tuple[str, str]] = ()) -> Dict[str, Any]:
    """``runs`` values for ``--phases``, ``--log``, ``--script`` and ``--setting`` (docs/phases.md).

    Returns:
        ``phases`` (validated, None = default), ``settings`` (``{name: {value, source}}`` from the launch
        script, then ``--setting`` pairs), ``parallel_config`` from the script's TP/PP/EP, ``log_path`` and
        ``_metrics`` (the log's mismatch metric rows, written to ``run_metrics``), and under
        :data:`SCRIPT_DEFAULTS` the script's backends, model and RL config (:func:`script_run_facts`; merged by
        :func:`merge_facts`); keys without a value are left out.
    Raises:
        TilakeError: unknown phase; the log or script is missing or unreadable (names the file).
    """
    from tilake.ingest import run_facts

    out: Dict[str, Any] = {}
    ph = run_facts.parse_phases(phases)
    if ph is not None:
        out["phases"] = ph
    st: Dict[str, Any] = {}
    if script is not None:
        from tilake.ingest.scan.script import parse_script

        if not Path(script).is_file():
            raise TilakeError("launch script not found", path=Path(script))
        parsed = parse_script(Path(script))
        st.update(run_facts.settings_from_script(parsed))
        st.update(script_settings(parsed))
        out["script_path"] = str(Path(script).resolve())
        c = parsed.config
        out["parallel_config"] = {k: c.get(f"train_{k}") for k in ("tp", "pp", "ep", "cp")}
        out["parallel_config"]["infer_tp"] = c.get("infer_tp")
        out[SCRIPT_DEFAULTS] = script_run_facts(parsed)
    st.update(run_facts.parse_setting_items(settings))
    if st:
        out["settings"] = st
    if log is not None:
        if not Path(log).is_file():
            raise TilakeError("RL log not found", path=Path(log))
        out["log_path"] = str(Path(log).resolve())
        out["_metrics"] = run_facts.read_rl_metrics(Path(log))
    return out


def _facts(model: Dict[str, Any]) -> Dict[str, Any]:
    return facts_meta(**{k: model.pop(k) for k in ("phases", "log", "script", "settings") if k in model})


def ingest_command(profiler_output: Optional[PathLike], lake: Lake, run_id: Optional[str] = None, *,
                   train: Sequence[PathLike] = (), infer: Sequence[PathLike] = (),
                   allow_missing: bool = False, progress: bool = True, profiler_step: Optional[int] = None,
                   rl_step: Optional[int] = None, ray: Optional[str] = None, **model: Any) -> IngestResult:
    """``tilake ingest``: captures of ``profiler_output`` and/or ``train``/``infer`` → the lake.

    Args:
        profiler_step: count only profiler step N (``--profiler-step``; ``--step`` is the RL step label).
        ray: ``--ray``: one Ray task per capture on the node holding it (``auto``, ``local``, ``HOST:PORT``);
            None: threads on this machine (:func:`captures_for`).
        rl_step: with captures of several profiled RL steps, the one to ingest (``--rl-step``).
        model: :func:`run_meta` keyword arguments (model_id, model_family, model_path, step, tags) and
            :func:`facts_meta`'s (phases, log, script, settings).
    Raises:
        TilakeError: bad id or captures (the lake is unchanged); LakeBusyError.
    """
    rid = resolve_run_id(run_id, profiler_output, train, infer)
    facts = _facts(model)
    with captures_for(profiler_output, train, infer, ray=ray, rl_step=rl_step) as (caps, fleet):
        check_sides(caps, profiler_output, allow_missing)
        meta = merge_facts(run_meta(**model, collection_method=RECORDED,
                                    source_path=source_description(profiler_output, train, infer)), facts)
        with lake.writing(), ingest_bar(progress) as bar:
            return ingest_profile(lake, rid, caps, meta, allow_missing=allow_missing, progress=bar,
                                  profiler_step=profiler_step, fleet=fleet)


def build_command(lake: Lake, *, select: Sequence[str] = (), full_refresh: bool = False,
                  check: bool = False) -> Tuple[BuildResult, List[str]]:
    """``tilake build``: the warehouse door (:func:`tilake.lake.warehouse.build_swapped`) on an existing lake;
    ``check`` (``--check``) runs the dbt data and unit tests too.

    Returns:
        the :class:`BuildResult` and its warnings in the user's terms (:func:`warning_text`).
    Raises:
        TilakeError: no lake at ``lake.root``; files its commits recorded are missing
        (:func:`tilake.lake.check.refuse_missing`); dbt could not start. LakeBusyError.
    """
    from tilake.lake.check import refuse_missing

    if not (lake.raw.is_dir() or lake.warehouse.exists()):
        raise TilakeError("no lake here: ingest a run first (tilake ingest / run / example)", path=lake.root)
    with lake.writing():
        refuse_missing(lake)   # a lost registry or data file: one line, not a build that drops the runs
        res = build_swapped(lake, select=list(select) or None, full_refresh=full_refresh, check=check)
        if res.success:
            from tilake.pipeline.align import align_stale_runs  # numpy: imported on the build path only

            align_stale_runs(lake)   # runs ingested step by step get their kernel alignment here
    return res, [warning_text(n) for n in res.warnings]


def report_command(lake: Lake, run_id: str, out_dir: PathLike, *, lang: str = "zh") -> "OpDiffOutputs":
    """``tilake report``: the operator diff report of ``run_id`` from the marts (see ``write_report``)."""
    from tilake.reports.op_diff import write_report

    return write_report(lake.warehouse, run_id, check_out_dir(Path(out_dir), lake.root, create=False), lang)


def run_command(profiler_output: Optional[PathLike], lake: Lake, run_id: Optional[str] = None, *,
                out_dir: Optional[PathLike] = None, lang: str = "zh", train: Sequence[PathLike] = (),
                infer: Sequence[PathLike] = (), allow_missing: bool = False, progress: bool = True,
                profiler_step: Optional[int] = None, rl_step: Optional[int] = None, ray: Optional[str] = None,
                **model: Any) -> ProfileResult:
    """``tilake run``: :func:`run_profile` with the CLI's defaults (``progress=False``: no progress bars).

    The run id defaults to :func:`default_run_id`; ``out_dir`` to the profiler_output folder's parent
    (the working folder with explicit captures only).
    """
    rid = resolve_run_id(run_id, profiler_output, train, infer)
    if out_dir is None:
        out_dir = Path(profiler_output).resolve().parent if profiler_output else Path(".")
    facts = _facts(model)
    meta = merge_facts(run_meta(**model, collection_method=RECORDED), facts)
    return run_profile(Path(profiler_output) if profiler_output else None, lake, rid, Path(out_dir), run_meta=meta,
                       lang=lang, train=train, infer=infer, allow_missing=allow_missing, progress=progress,
                       profiler_step=profiler_step, rl_step=rl_step, ray=ray)
