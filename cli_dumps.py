"""The ``tilake dumps`` commands (msprobe dump analysis), the ``dumps`` group of :data:`tilake.cli.main`
(kept out of ``cli.py``, which is at the 500-line limit). Each body parses options and
calls one function of :mod:`tilake.pipeline.dumps`.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from tilake.cli_context import JSON_OPTION, LAKE_OPTION, RUN_ID, IntList, KeyValue, TokenRange, emit_json


@click.group("dumps")
def dumps_group() -> None:
    """msprobe dump analysis: probe, analyse a train/infer pair, prepare stub rounds."""


@dumps_group.command("probe")
@click.option("--train", type=click.Path(path_type=Path), default=None, help="Training-side dump (root, step or rank folder).")
@click.option("--infer", type=click.Path(path_type=Path), default=None, help="Inference-side dump.")
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None, help="Also write the probe as JSON.")
def dumps_probe(train, infer, json_out) -> None:
    """Naming pattern of each side: prefixes, classes, fused modules, API counters, shapes."""
    from tilake.pipeline.dumps import run_probe
    from tilake.reports.dumps_console import print_probe

    print_probe(run_probe(train, infer, json_out))


@dumps_group.command("analyze")
@click.option("--train", type=click.Path(path_type=Path), required=True, help="Training-side dump of round 0.")
@click.option("--infer", type=click.Path(path_type=Path), required=True, help="Inference-side dump of round 0.")
@click.option("--map", "map_name", default="auto", show_default=True,
              help="Boundary map (models/<name>.yaml or a path); auto: the shipped map whose boundaries resolve best.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True, help="Output folder.")
@click.option("--round", "rounds", nargs=2, multiple=True, type=click.Path(path_type=Path),
              help="TRAIN INFER dumps of the next stub round (repeatable, in round order).")
@click.option("--card", "card", multiple=True, type=KeyValue(numbers=True),
              help="Task-card fact key=value (model, hardware, train_tp, goal, ...).")
@click.option("--request-index", type=int, default=None, help="Row of the request in a batched inference tensor.")
@click.option("--request-tokens", type=TokenRange(), default=None,
              help="START:END rows of the request in a token-major inference batch.")
@click.option("--cu-seqlens", type=IntList(), default=None,
              help="Packed-sequence boundaries, e.g. 0,5,13 (to unpad a padded side).")
@click.option("--logprob-json", type=click.Path(path_type=Path), default=None, help="Measured prefill log-prob diff {mean,max,std,source}.")
@click.option("--run-id", type=RUN_ID, default=None, help="Also write the analysis into the lake under this run id.")
@LAKE_OPTION
@click.option("--build/--no-build", default=False, help="Build the dump marts (dbt) after writing the lake.")
@click.option("--charts/--no-charts", default=True, help="Embed charts in the HTML report.")
@JSON_OPTION
def dumps_analyze(train, infer, map_name, out_dir, rounds, card, request_index, request_tokens, cu_seqlens,
                  logprob_json, run_id, lake_path, build, charts, as_json) -> None:
    """Compare two dumps boundary by boundary; write reports and the stub instruction.

    Exit status 3 when no boundary could be compared (the outputs are still written)."""
    from tilake.pipeline.dumps import run_analyze
    from tilake.reports.dumps_console import print_summary

    res = run_analyze(train, infer, out_dir, map_name=map_name, rounds=rounds, card=dict(card),
                      request_index=request_index, cu_seqlens=cu_seqlens, logprob_json=logprob_json,
                      lake_path=lake_path, run_id=run_id, build=build, charts=charts, request_tokens=request_tokens)
    emit_json(res.to_dict()) if as_json else print_summary(res)
    sys.exit(res.exit_code or 0)


@dumps_group.command("gate")
@click.argument("train", type=click.Path(path_type=Path))
@click.argument("infer", type=click.Path(path_type=Path))
@click.option("--map", "map_name", default="auto", show_default=True,
              help="Boundary map (models/<name>.yaml or a path); auto: the shipped map whose boundaries resolve best.")
@click.option("--budget", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="ULP budget (YAML/JSON): boundary name or glob → max ULP per element, or {max_elem_ulp, tensor_ulp}; "
                   "default: every mapped boundary bitwise equal.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write the analysis' outputs (report_source.json, reports) and gate.json here.")
@click.option("--card", "card", multiple=True, type=KeyValue(numbers=True), help="Task-card fact key=value.")
@click.option("--request-index", type=int, default=None, help="Row of the request in a batched inference tensor.")
@click.option("--request-tokens", type=TokenRange(), default=None, help="START:END rows of the request in a token-major inference batch.")
@click.option("--cu-seqlens", type=IntList(), default=None, help="Packed-sequence boundaries, e.g. 0,5,13.")
@click.option("--run-id", type=RUN_ID, default=None, help="Record the analysis and the gate in the lake under this run id.")
@LAKE_OPTION
@click.option("--build/--no-build", default=False, help="Build the dump marts (fct_dump_gates) after writing the lake.")
@JSON_OPTION
def dumps_gate(train, infer, map_name, budget, out_dir, card, request_index, request_tokens, cu_seqlens, run_id,
               lake_path, build, as_json) -> None:
    """CI gate for "true on-policy" RL: exit 0 only when every mapped boundary of TRAIN vs INFER is
    bitwise equal (or within --budget), else exit 1 with the first failing boundary in one line.

    Mapped boundaries that could not be compared make it fail too (never a pass on missing evidence)."""
    from tilake.pipeline.gate import run_gate

    res = run_gate(train, infer, map_name=map_name, budget=budget, out_dir=out_dir, lake_path=lake_path,
                   run_id=run_id, build=build, card=dict(card), request_index=request_index,
                   request_tokens=request_tokens, cu_seqlens=cu_seqlens, show_progress=not as_json)
    if as_json:
        emit_json(res.to_dict())
    else:
        click.echo(res.line)
        for note in res.notes:
            click.echo(f"note: {note}", err=True)
    sys.exit(res.exit_code)


@dumps_group.command("stub-prepare")
@click.option("--train", type=click.Path(path_type=Path), required=True, help="Training-side dump (source or target).")
@click.option("--infer", type=click.Path(path_type=Path), required=True, help="Inference-side dump.")
@click.option("--instruction", type=click.Path(path_type=Path), required=True, help="stub_instruction.json.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True, help="Folder for load_source/ and msprobe_config.json.")
@click.option("--map", "map_name", default="auto", show_default=True)
def dumps_stub_prepare(train, infer, instruction, out_dir, map_name) -> None:
    """Write the stub's source tensors where msprobe's load setting reads them."""
    from tilake.pipeline.dumps import run_stub_prepare

    res = run_stub_prepare(train, infer, instruction, out_dir, map_name=map_name)
    click.echo(f"wrote {len(res.files)} tensor file(s); msprobe config: {res.config}")


@dumps_group.command("maps")
def dumps_maps() -> None:
    """List the boundary maps shipped in models/."""
    from tilake.pipeline.dumps import map_names

    for name in map_names():
        click.echo(name)

