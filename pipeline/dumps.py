"""Implementation of the ``tilake dumps`` commands (the CLI bodies stay thin).

* :func:`run_probe` — naming patterns of each side (``dumps probe``).
* :func:`run_analyze` — round 0 (+ stub rounds) → output files, optionally the lake and marts.
* :func:`run_stub_prepare` — write the tensors a stub instruction needs where msprobe ``load`` reads them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tilake.errors import TilakeError
from tilake.diagnosis import analyze as A
from tilake.diagnosis import maps as M
from tilake.diagnosis import outputs as O
from tilake.diagnosis.outputs import UNKNOWN
from tilake.diagnosis.logprob import read_logprob
from tilake.diagnosis.suggest import exit_status

DUMP_MODELS = ["stg_lake__runs", "int_runs_versioned", "stg_lake_dumps__dump_runs", "stg_lake_dumps__tensor_stats", "stg_lake_dumps__boundary_results",
               "stg_lake_dumps__stub_rounds", "int_boundaries_ordered", "fct_boundary_diffs",
               "int_boundary_inputs_joined", "fct_difference_points", "fct_dump_tensor_stats"]


def parse_card(items: Sequence[str]) -> Dict[str, Any]:
    """``["model=Qwen3-8B", "train_tp=2"]`` → dict (values stay strings; ints where they parse).

    Raises:
        TilakeError: an item without ``=``.
    """
    out: Dict[str, Any] = {}
    for it in items or []:
        if "=" not in it:
            raise TilakeError(f"--card expects key=value, got {it!r}")
        k, v = it.split("=", 1)
        v = v.strip()
        out[k.strip()] = int(v) if v.isdigit() else v
    return out


def _progress():
    """A rich progress bar (on stderr) and its callback ``(label, done, total)``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)
    tasks: Dict[str, int] = {}

    def cb(label: str, done: int, total: int) -> None:
        key = label.split(":")[0]
        if key not in tasks:
            tasks[key] = prog.add_task(label[:48], total=total)
        prog.update(tasks[key], completed=done + 1, total=total, description=label[:48])

    return prog, cb


def write_dump_outputs(an: "A.Analysis", card: Dict[str, Any], out_dir: Path,
                       charts: bool = True) -> Dict[str, Path]:
    """Write the analysis' JSON outputs, then render the reports from ``report_source.json``.

    Returns:
        output name → path (``task_card``, ``boundary_results``, ``stub_instruction``,
        ``report_source`` and the rendered ``alignment_report.{md,html}`` with charts).

    Raises:
        TilakeError: the report templates are missing (install problem).
    """
    from tilake.reports.dumps_report import render_reports

    src = O.report_source(an, card)
    paths = O.write_outputs(an, card, Path(out_dir), src=src)
    paths.update(render_reports(src, Path(out_dir), charts=charts))
    return paths


def run_probe(train: Optional[Path], infer: Optional[Path], out: Optional[Path] = None) -> Dict[str, Any]:
    """Probe the given sides; writes JSON to ``out`` when given. Returns the probe dict."""
    from tilake.ingest.msprobe.probe import probe

    if train is None and infer is None:
        raise TilakeError("give --train and/or --infer")
    res = probe(train, infer)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return res


def run_analyze(train: Path, infer: Path, out_dir: Path, map_name: str = "qwen3_hf_vllm",
                rounds: Sequence[Tuple[Path, Path]] = (), card_items: Sequence[str] = (),
                request_index: Optional[int] = None, cu_seqlens: Optional[str] = None,
                logprob_json: Optional[Path] = None, lake_path: Optional[Path] = None,
                run_id: Optional[str] = None, build: bool = False, charts: bool = True,
                show_progress: bool = True, request_tokens: Optional[str] = None) -> Dict[str, Any]:
    """Analyse a pair (+ stub rounds) and write every output. Returns a summary dict.

    Raises:
        TilakeError: bad dumps, bad map, bad options, lake busy, dbt failure.
    """
    bmap = M.load_map(map_name)
    pairing: Dict[str, Any] = {}
    if request_index is not None:
        pairing["request_index"] = int(request_index)
    if request_tokens:
        try:
            a, b = (int(x) for x in str(request_tokens).split(":"))
        except ValueError:
            raise TilakeError(f"--request-tokens must be START:END, got {request_tokens!r}")
        pairing["request_tokens"] = [a, b]
    if cu_seqlens:
        try:
            pairing["cu_seqlens"] = [int(x) for x in str(cu_seqlens).split(",")]
        except ValueError:
            raise TilakeError(f"--cu-seqlens must be comma-separated integers, got {cu_seqlens!r}")
    logprob = read_logprob(Path(logprob_json)) if logprob_json else None
    rins = [A.RoundInput(Path(train), Path(infer))] + [A.RoundInput(Path(a), Path(b)) for a, b in rounds]
    card_given = parse_card(card_items)
    pair0 = A.Pair(rins[0].train, rins[0].infer, bmap, pairing)
    card = O.task_card(pair0.dumps["train"], pair0.dumps["infer"], card_given)
    prog, cb = _progress() if show_progress else (None, None)
    if prog:
        prog.start()
    try:
        an = A.analyze_pair(rins, bmap, pairing, card, cb, logprob)
        written = {}
        if run_id:
            from tilake.lake.store import Lake
            from tilake.diagnosis.lake_rows import write_lake

            lake = Lake(lake_path)
            written = write_lake(lake, run_id, an, rins, card, cb)
    finally:
        if prog:
            prog.stop()
    first = next((r for r in an.boundary_rows if r["round"] == 0 and r.get("train_shape")), None)
    card["observed"] = {
        "token_rows": ({s: (first.get(f"{s}_shape") or [None])[0] for s in ("train", "infer")} if first else UNKNOWN),
        "source": (f"dim 0 of boundary {first['boundary']} after the map's transforms" if first else
                   "no boundary could be read"),
        "layers": {s: an.sides.get(s, {}).get("layers", UNKNOWN) for s in ("train", "infer")},
    }
    paths = write_dump_outputs(an, card, Path(out_dir), charts=charts)
    built = None
    if build:
        if not run_id:
            raise TilakeError("--build needs --run-id (the marts are built from the lake)")
        from tilake.lake.warehouse import dbt_build
        from tilake.lake.store import Lake

        res = dbt_build(Lake(lake_path), select=DUMP_MODELS)
        if not res.success:
            bad = "; ".join(f"{n}: {m}" for n, _t, _s, m in res.failures[:3])
            raise TilakeError(f"dbt build of the dump marts failed: {bad}")
        built = len(res.nodes)
    fd = an.rounds[0]["first_divergence"] if an.rounds else {}
    return {"verdict": an.verdict, "consistency": an.consistency, "reason": an.verdict_reason,
            "first_divergence": fd.get("boundary") or fd.get("reason"),
            "points": [(p["round"], p["boundary"], p["class"]) for p in an.points],
            "stub_needed": bool((an.stub_instruction or {}).get("needed")),
            "outputs": {k: str(v) for k, v in paths.items()}, "lake_rows": written, "dbt_nodes": built,
            "suggestions": [x["text"] for x in an.suggestions],
            "exit_code": exit_status(an)}


def run_stub_prepare(train: Path, infer: Path, instruction: Path, out_dir: Path,
                     map_name: str = "qwen3_hf_vllm") -> Dict[str, Any]:
    """Write the stub's source tensors + an msprobe ``config.json`` whose ``load.path`` points at them.

    Raises:
        TilakeError: unreadable instruction, instruction not applicable, unreadable source tensors.
    """
    try:
        instr = json.loads(Path(instruction).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TilakeError(f"cannot read stub instruction: {exc}", path=instruction)
    if not instr.get("needed"):
        raise TilakeError("the stub instruction says no further round is needed: " + str(instr.get("reason")),
                          path=instruction)
    pair = A.Pair(Path(train), Path(infer), M.load_map(map_name))
    out_dir = Path(out_dir).resolve()
    files = A.prepare_stub_source(pair, instr, out_dir / "load_source")
    cfg = dict(instr["msprobe_config"])
    cfg["load"] = dict(cfg["load"], path=str(out_dir / "load_source"))
    cfg["dump_path"] = str(out_dir / f"round{instr['round']}_dump")
    (out_dir / "msprobe_config.json").write_text(json.dumps(cfg, indent=1) + "\n", encoding="utf-8")
    return {"files": [str(f) for f in files], "config": str(out_dir / "msprobe_config.json")}
