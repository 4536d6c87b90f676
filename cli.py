"""tilake command line (click). Thin: each command parses options and calls one function.

Every user-input problem surfaces as ``error: <one line>`` on stderr with exit status 2
(:class:`tilake.errors.TilakeError`), never a traceback.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from tilake import settings
from tilake.cli_context import (  # noqa: F401
    JSON_OPTION,
    LAKE_OPTION,
    RUN_ID,
    DoorError,
    IntList,
    KeyValue,
    RunId,
    TokenRange,
    cli_context,
    dbt_options,
    emit_json,
)
from tilake.cli_dumps import dumps_group
from tilake.errors import TilakeError
from tilake.ingest.run_facts import FACT_OPTIONS


class _Group(click.Group):
    """A click group that turns TilakeError (and a bad value caught by a ParamType) into one clean
    line and exit status 2."""

    def invoke(self, ctx):
        try:   # the imports too: a Ctrl-C while they run is one line, not click's "Aborted!"
            from tilake.pipeline.failures import sigterm_as_interrupt
            from tilake.progress import set_notice
            from tilake.reports.progress_console import quiet_broken_pipe, rich_notice  # `… | head`: exit 0

            sigterm_as_interrupt()
            set_notice(rich_notice)   # the lower floors' notices (tilake.progress.notice) on a rich stderr console
            with quiet_broken_pipe():
                return super().invoke(ctx)
        except click.UsageError as exc:   # a missing or bad value, an unknown option or command: one line, exit 2
            _usage_line(exc, " ".join(filter(None, [ctx.command_path, ctx.invoked_subcommand])))
        except (Exception, KeyboardInterrupt) as exc:  # Ctrl-C: one line, not click's "Aborted!"
            line = __import__("tilake.pipeline.failures", fromlist=["_"]).error_line(exc, ctx.invoked_subcommand)
            if line is None:
                raise
            from tilake.files import escape_controls

            click.echo(f"error: {escape_controls(line)}", err=True)   # a file name's ESC is shown, not run
            sys.exit(2)


    def make_context(self, info_name, args, parent=None, **extra):
        try:   # the group's own options (`tilake --bogus`) are parsed here, before invoke
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            _usage_line(exc)


def _usage_line(exc: click.UsageError, where: str = "tilake") -> None:
    """Print a click usage error as one ``error:`` line naming the command's --help, and exit 2 (click's
    own output is a usage block and a capitalised ``Error:``)."""
    msg = exc.format_message().rstrip(".")
    where = exc.ctx.command_path if exc.ctx is not None and exc.ctx.parent is not None else where
    line = exc.message if isinstance(exc, DoorError) else f"{msg[:1].lower()}{msg[1:]} ({where} --help)"
    click.echo(f"error: {line}", err=True)
    sys.exit(2)


@click.group(cls=_Group, epilog="Exit status: 0 done; 1 scan skipped the comparison, a dumps gate, trend --fail-if or lake check failed; 2 bad input or a stopped step "
             "(one 'error:' line); 3 outputs written, nothing comparable (evidence_missing).")
@click.version_option(package_name="tilake")
def main() -> None:
    """tilake — the train–infer consistency lake (Ascend NPU, verl: Megatron + vLLM)."""


# --- profiler: ingest / build / report / example (foundation) -------------------------------

def _lake(lake_path):   # --lake of the command, else of its group (ctx.obj), else the default
    return cli_context().lake(lake_path)


RL_STEP_OPTION = click.option("--rl-step", type=int, help="With captures of several profiled RL steps ([1,2], <save_path>/<step>/), ingest step N (never summed).")
PROFILE_OPTIONS = [
    click.option("--run-id", type=RUN_ID, help="Run id (default: derived from the folder name and path)."),
    click.option("--train", "train", multiple=True, type=click.Path(path_type=Path),
                 help="Training capture: DB file, *_ascend_pt or folder (repeatable)."),
    click.option("--infer", "infer", multiple=True, type=click.Path(path_type=Path),
                 help="Inference capture: DB file, *_ascend_pt or folder (repeatable)."),
    click.option("--model-id", help="e.g. Qwen/Qwen3-0.6B (default: unknown)."),
    click.option("--model-family", help="e.g. qwen3 (default: from --model-path's config.json model_type, "
                                        "else from the model id, else unknown)."),
    click.option("--model-path", type=click.Path(path_type=Path),
                 help="Model folder (or its config.json): the family is read from model_type."),
    click.option("--step", type=int, help="RL step that was profiled (a label; see --profiler-step)."),
    click.option("--profiler-step", type=int, help="Count only profiler step N (ProfilerStep#N) on every rank."),
    RL_STEP_OPTION,
    click.option("--tag", "tags", multiple=True, type=KeyValue(),
                 help="key=value label stored with the run (repeatable)."),
    click.option("--allow-missing", is_flag=True, help="Record sides without device evidence as evidence_missing instead of failing."),
    *[click.option(*names, **kw) for names, kw in FACT_OPTIONS],   # --phases --log --script --setting
    click.option("--memory-limit", envvar=settings.MEMORY_LIMIT, show_envvar=True, expose_value=False,
                 callback=lambda c, p, v: v and settings.set_memory_limit(v, c.get_parameter_source(p.name).name == "ENVIRONMENT"),
                 help="DuckDB memory limit, e.g. 2GB (default: RAM/4, <= 256MiB per core, 256MiB..8GiB)."),
]


def _profile_options(f):
    for opt in reversed(PROFILE_OPTIONS):
        f = opt(f)
    return f


@main.command()
@click.argument("profiler_output", required=False, type=click.Path(path_type=Path))
@_profile_options
@LAKE_OPTION
def ingest(profiler_output, run_id, train, infer, model_id, model_family, model_path, step, profiler_step, rl_step,
           tags, allow_missing, lake_path, **facts):
    """Ingest a verl profiler_output/ folder (or explicit --train/--infer captures) into the lake."""
    settings.prime_duckdb_allocator([profiler_output, *train, *infer])   # before DuckDB loads
    from tilake.pipeline.profile import ingest_command
    from tilake.reports.run_console import print_ingest

    res = ingest_command(profiler_output, _lake(lake_path), run_id, train=train, infer=infer, allow_missing=allow_missing,
                         profiler_step=profiler_step, rl_step=rl_step, ray=cli_context().ray, model_id=model_id,
                         model_family=model_family, model_path=model_path, step=step, tags=tags, **facts)
    print_ingest(res)


@main.command("dbt", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED, required=True)
@LAKE_OPTION
def dbt_cmd(args, lake_path):
    """Run dbt on the packaged project against the lake: tilake dbt -- docs generate (or -- ls, -- test ...)."""
    sys.exit(__import__("tilake.lake.warehouse", fromlist=["_"]).dbt_passthrough(_lake(lake_path), args))


@main.command()
@click.option("--select", "select", multiple=True, help="dbt --select (repeatable); each model is built with its ancestors (+MODEL) so incremental marts never read stale tables.")
@click.option("--full-refresh", is_flag=True, help="Rebuild incremental models from scratch.")
@click.option("--check", is_flag=True, help="Also run the dbt data and unit tests (every node, as `dbt build` "
              "does); without it a lake built by this same project refreshes its tables only.")
@LAKE_OPTION
@dbt_options
def build(select, full_refresh, check, lake_path):
    """Run dbt build on the lake in-process, into a copy of the warehouse that is swapped in atomically
    (readers with the warehouse open are never blocked). Only the tables run when this project built
    the warehouse last; the first build, a changed project or --full-refresh builds every model and
    seed; --check adds the data and unit tests."""
    from tilake.pipeline.profile import build_command
    from tilake.reports.run_console import print_build

    res, warnings = build_command(_lake(lake_path), select=select, full_refresh=full_refresh, check=check)
    print_build(res, warnings)
    if not res.success:
        raise TilakeError(res.failure_line())


@main.command()
@click.argument("run_id", type=RUN_ID)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Folder for the report, CSV and JSON.")
@click.option("--lang", type=click.Choice(["zh", "en"]), default="zh", show_default=True)
@LAKE_OPTION
def report(run_id, out_dir, lang, lake_path):
    """Write the operator diff report of RUN_ID from the marts."""
    from tilake.pipeline.profile import report_command
    from tilake.reports.run_console import print_report_paths

    print_report_paths(report_command(_lake(lake_path), run_id, out_dir, lang=lang))


@main.command("run")
@click.argument("profiler_output", required=False, type=click.Path(path_type=Path))
@_profile_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the outputs (default: the profiler_output folder's parent).")
@click.option("--lang", type=click.Choice(["zh", "en"]), default="zh", show_default=True)
@LAKE_OPTION
@JSON_OPTION
@dbt_options
def run_cmd(profiler_output, run_id, train, infer, model_id, model_family, model_path, step, profiler_step, rl_step,
            tags, allow_missing, out_dir, lang, lake_path, as_json, **facts):
    """Ingest, build and report in one go (ingest → dbt build → report)."""
    from tilake.pipeline.profile import run_command
    from tilake.reports.run_console import finish

    lake = _lake(lake_path)
    res = run_command(profiler_output, lake, run_id, out_dir=out_dir, lang=lang, train=train, infer=infer,
                      allow_missing=allow_missing, progress=not as_json, profiler_step=profiler_step, rl_step=rl_step,
                      ray=cli_context().ray, model_id=model_id, model_family=model_family, model_path=model_path,
                      step=step, tags=tags, **facts)
    sys.exit(finish(res, lake.root, as_json))


@main.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("tilake-example"), show_default=True, help="Where the example capture and report go.")
@click.option("--lang", type=click.Choice(["zh", "en"]), default="zh", show_default=True)
@click.option("--lake", "lake_path", type=click.Path(file_okay=False, path_type=Path), default=None, help="Lake folder (default: <out>/lake).")
@click.option("--with-dump", is_flag=True, help="Also an msprobe dump of the same step, analysed into the same run: both reports join profile and dump (needs PyTorch; docs/alignment.md).")
@click.option("--backend", type=click.Choice(["ascend", "torch"]), default="ascend", show_default=True,
              help="ascend: synthetic torch_npu DBs; torch: profile a tiny Qwen3-style RL step here "
                   "(CUDA when present, else CPU) with torch.profiler.")
@JSON_OPTION
@dbt_options
def example(out_dir, lang, lake_path, with_dump, backend, as_json):
    """Generate the bundled example (Qwen3-0.6B GRPO, Megatron + vLLM) and run the main job on it;
    with --backend torch, make real traces of a tiny model on this machine instead."""
    from tilake.pipeline.example import example_lake, run_example
    from tilake.reports.run_console import finish

    res = run_example(out_dir, lake_path, lang=lang, backend=backend, with_dump=with_dump)
    sys.exit(finish(res, example_lake(out_dir, lake_path), as_json, example=True))


# --- scan (RL launch script → report) --------------------------------------------------------

@main.command("scan")
@click.argument("script", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--from-output", "from_output", type=click.Path(path_type=Path), default=None,
              help="Run stages 4-5 on a recorded verl profiler_output/ folder (no NPU needed); SCRIPT, if given, supplies the model id and parsed config.")
@LAKE_OPTION
@click.option("--run-id", type=RUN_ID, default=None, help="Run id (default: derived from the script path and model id).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True, help="Folder for the report, CSV and runtime-ops JSON.")
@click.option("--lang", type=click.Choice(["zh", "en"]), default="zh", show_default=True)
@click.option("--dry-run", is_flag=True, help="Stages 1-2 only: show the parsed config, checks and planned diff; write nothing.")
@click.option("--timeout", "timeout_s", type=float, default=None, help="Kill the RL run after this many seconds.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: the parsed config, checks and outcome as one JSON document on stdout (tables on stderr).")
@click.option("--profiler", type=click.Choice(["npu", "torch"]), default="npu", show_default=True, help="npu: torch_npu on an Ascend host; torch: verl's PyTorch profiler (GPU or CPU host).")
@RL_STEP_OPTION
@click.option("--dump", is_flag=True, help="Also msprobe dumps of one request's prefill on both sides (verl precision_debugger + tilake's rollout hook), analysed into the same run, with stub rounds that run themselves (docs/scan.md).")
@click.option("--max-rounds", type=click.IntRange(min=0), default=3, show_default=True, help="With --dump: stub rounds at most (each one more run of the script).")
@click.option("--allow-preamble", is_flag=True, help="--profiler torch: check the environment after replaying the script's preamble (its unconditional source / conda activate / assignment lines, $(...) included); default: a fixed probe from your PATH, nothing of the script runs.")
def scan_cmd(script, script_args, from_output, lake_path, run_id, out_dir, lang, dry_run, timeout_s, fmt, profiler, rl_step,
             dump, max_rounds, allow_preamble):
    """Run an RL launch script with the profiler on and report train-vs-infer operator differences.

    Stages: parse + environment check + backup, add the profiler block, run the whole script, find (NPU: analyse() with
    fallbacks) both sides' captures, then ingest -> dbt build -> report. After `--`: the script's $@ (docs/scan.md)."""
    from tilake.pipeline.scan import cli_scan

    sys.exit(cli_scan(script, from_output=from_output, lake=_lake(lake_path), run_id=run_id, out_dir=out_dir, lang=lang,
                      dry_run=dry_run, timeout_s=timeout_s, script_args=script_args, fmt=fmt, profiler=profiler,
                      rl_step=rl_step, ray=cli_context().ray, dump=dump, max_rounds=max_rounds,
                      allow_preamble=allow_preamble))


# --- runs / sql / trend (across runs) --------------------------------------------------------

@main.group("runs", invoke_without_command=True)
@LAKE_OPTION
@JSON_OPTION
@click.pass_context
def runs_group(ctx, lake_path, as_json) -> None:
    """List the runs of the lake (rich table); `runs rm RUN` removes one, `runs diff A B` compares two."""
    cli_context(ctx).lake_path = lake_path   # the default --lake of `runs rm/diff/compact`
    if ctx.invoked_subcommand is None:
        from tilake.lake.registry import list_runs
        from tilake.reports.run_console import print_runs

        lake = _lake(lake_path)
        runs = list_runs(lake)
        emit_json({"lake": lake.root, "runs": runs}) if as_json else print_runs(runs, lake_root=lake.root)


@runs_group.command("rm")
@click.argument("run_id", type=RUN_ID)
@click.option("--no-build", is_flag=True, help="Only remove the partitions; rebuild later with `tilake build`.")
@LAKE_OPTION
@click.pass_context
def runs_rm(ctx, run_id, no_build, lake_path) -> None:
    """Remove RUN_ID's partitions from every raw table and its rows from the warehouse's marts (swapped in
    atomically; a dbt rebuild only when the lake has no record of its tables' SQL)."""
    from tilake.lake.registry import remove_run

    tables, res = remove_run(_lake(lake_path), run_id, rebuild=not no_build)
    click.echo(f"removed run {run_id} from {len(tables)} table(s): {', '.join(tables)}")
    if res is not None:
        if res.plan == "rows":
            click.echo(f"warehouse: the run's rows removed, {len(res.nodes)} tables updated")
        else:
            click.echo(f"rebuilt: {len(res.nodes)} dbt nodes, {len(res.failures)} failed, {len(res.warnings)} warnings")
        res.raise_if_failed("dbt build failed after removing the run")


@runs_group.command("diff")
@click.argument("base_run_id", type=RUN_ID)
@click.argument("run_id", type=RUN_ID)
@LAKE_OPTION
@click.pass_context
def runs_diff(ctx, base_run_id, run_id, lake_path) -> None:
    """What changed from BASE_RUN_ID to RUN_ID: kernels added/removed, grades, first divergence."""
    from tilake.lake.registry import diff_runs
    from tilake.reports.sql_console import print_result

    out = diff_runs(_lake(lake_path), base_run_id, run_id)
    for name, (cols, rows) in out.items():
        click.echo(f"{name}: {base_run_id} -> {run_id}")
        if name == "divergence" and not rows:
            click.echo("evidence_missing: neither run has a dump analysis (tilake dumps analyze --run-id)")
            continue
        print_result(cols, rows)


# a saved query starts with a "-- comment" line: take it as the QUERY, not as an unknown option
@main.command("sql", context_settings={"ignore_unknown_options": True})
@click.argument("query", required=False)
@click.option("--format", "fmt", type=click.Choice(["table", "line", "csv", "json", "parquet"]), default="table",
              show_default=True, help="table/line (one 'column = value' line each, for wide rows) print here; "
              "csv/json go to stdout, or to --output; parquet needs --output.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File for --format csv|json|parquet (never inside the lake); '-' is stdout.")
@click.option("--max-rows", type=int, default=200, show_default=True, help="Rows shown by table/line.")
@click.option("--allow-external-access", is_flag=True,
              help="Let the query read files outside the lake (read_csv('/x.csv')); off by default.")
@click.option("--param", "params", multiple=True, type=KeyValue(), help="NAME=VALUE for the query's $NAME (repeatable), e.g. --param run_id=R for reports/queries/*.sql.")
@LAKE_OPTION
def sql_cmd(query, fmt, output, max_rows, allow_external_access, params, lake_path) -> None:
    """Read-only SQL over the warehouse marts (raw tables as raw_<table>); no QUERY opens a shell."""
    from tilake.reports.sql_console import sql_command
    sys.exit(sql_command(_lake(lake_path), query, fmt, output, max_rows, allow_external_access, dict(params)))


@main.command("trend")
@click.option("--metric", "-m", default=None, help="Trend name (reports/queries/trend_<name>.sql); --list shows them.")
@click.option("--by", "by", default="model_family", show_default=True,
              help="Series: none, model_family, model_id, host, train_backend, infer_backend, kind, tool:<name>, tag:<key>, setting:<name> (a recorded switch), or several joined by commas.")
@click.option("--x", "x", type=click.Choice(["run", "step", "created_at"]), default="run", show_default=True,
              help="x axis: registration order, training step or registration time.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the chart trend_<metric>_by_<by>.png (without --out or --output no chart file is written).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Chart path: .png, or .html for a page with the chart and its points.")
@click.option("--no-chart", is_flag=True, help="Only print the table and sparklines.")
@click.option("--fail-if", "fail_if", type=click.Choice(["regress", "increase", "decrease", "change"]), default=None,
              help="CI check: exit 1 when a series' last point moved this way against the previous one (regress: "
                   "the trend's worse direction); exit 3 when no series has two points.")
@click.option("--list", "list_only", is_flag=True, help="List the named trends.")
@LAKE_OPTION
@JSON_OPTION
def trend_cmd(metric, by, x, out_dir, output, no_chart, fail_if, list_only, lake_path, as_json) -> None:
    """A named trend across runs as a table with sparklines and a PNG line chart."""
    from tilake.pipeline.trend import check_regression, list_trends, trend_command
    from tilake.reports.trends import print_trend

    if as_json and list_only:
        emit_json({"trends": [{"name": n, "title": t, "unit": u} for n, t, u in list_trends()]})
        return
    if list_only or not metric:
        for name, title, unit in list_trends():
            click.echo(f"{name:24} {title}" + (f" [{unit}]" if unit else ""))
        if not list_only:
            raise TilakeError("give --metric NAME (one of the trends above)")
        return
    res, chart = trend_command(_lake(lake_path), metric, by=by, x=x, output=output, chart=not no_chart,
                               out_dir=out_dir)
    check = check_regression(res, fail_if) if fail_if else None
    if as_json:
        emit_json({"metric": metric, "title": res.trend.title, "unit": res.trend.unit, "by": by, "x": x,
                    "chart": chart, "series": [{"label": se.label, "points": [
                        {"x": p[0], "value": p[1], "runs": p[2], "last_run_id": p[3]} for p in se.points]}
                        for se in res.series],
                    **({"fail_if": {"check": fail_if, "lines": check.lines, "exit_code": int(check.exit_code)}}
                       if check else {})})
    else:
        print_trend(res)
        if chart is not None:
            click.echo(f"chart: {chart}")
        elif not no_chart and res.series:
            click.echo("chart: not written (give --out DIR or --output FILE)", err=True)
        for line in (check.lines if check else []):
            click.echo(line)
    if check is not None:
        sys.exit(int(check.exit_code))

@main.command("mcp")
@LAKE_OPTION
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The only folder (besides --lake) the tools write into; each tool's `out` is a folder below it. "
                   "Without it, tools that write reports refuse.")
def mcp_cmd(lake_path, out_dir) -> None:
    """Model Context Protocol server over stdio for agents: tools wrapping scan --dry-run, run, dumps analyze,
    dumps gate, read-only sql, runs, trend and explain (docs/agent.md; needs pip install '.[mcp]')."""
    from tilake.agent.server import serve

    serve(_lake(lake_path).root, out_dir)


main.add_command(dumps_group)   # `tilake dumps …` (cli_dumps.py)
__import__("tilake.cli_fleet").cli_fleet.install(main)  # --ray on ingest/run/scan, `runs compact`: docs/fleet.md
__import__("tilake.cli_lake").cli_lake.install(main)  # --wait on write commands, `check`: docs/lake.md
if __name__ == "__main__":  # pragma: no cover
    main()
