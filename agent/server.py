"""``tilake mcp``: a Model Context Protocol server over stdio whose tools wrap tilake's commands.

The ``mcp`` SDK (``pip install '.[mcp]'``, mcp 2.x: :class:`mcp.server.mcpserver.MCPServer`) is imported only
here, when the server is built. Every tool takes and returns JSON; a :class:`~tilake.errors.TilakeError`
becomes a tool error whose text is the CLI's ``error: <line>``. While the server runs on stdio the SDK points
file descriptor 1 at stderr, so nothing a pipeline prints can reach the protocol stream.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from tilake.agent import explain as E
from tilake.agent import tools as T
from tilake.errors import TilakeError

INSTRUCTIONS = (
    "tilake answers, from runtime evidence, which operators differ between RL training and inference (profiler "
    "captures) and where their numbers part (msprobe dumps). Order: 1. runs (what the lake holds) or "
    "scan_dry_run (what a verl launch script would profile); 2. run_profile on a profiler_output folder, "
    "dumps_analyze / dumps_gate on a train/infer dump pair; 3. sql (read-only, marts such as fct_op_comparison, "
    "fct_boundary_diffs, fct_dump_gates) and trend; 4. explain one row (run_id + row) or boundary (run_id or "
    "report_source + boundary) before you state a cause. evidence_missing means nothing was compared: never "
    "read it as 'no difference'. Guide: docs/skills/tilake/SKILL.md.")

MCP_MISSING = "`tilake mcp` needs the MCP SDK: pip install '.[mcp]' (in the tilake source folder; Python ≥ 3.10)"


def _tool_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``fn``; a TilakeError becomes the SDK's ToolError carrying the CLI's ``error: …`` line."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TilakeError as exc:
            raise ToolError(f"error: {exc}") from exc
    return run


def build_server(ws: T.Workspace) -> Any:
    """The :class:`mcp.server.mcpserver.MCPServer` with tilake's tools bound to ``ws``.

    Raises:
        TilakeError: the MCP SDK is not installed (:data:`MCP_MISSING`).
    """
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:   # mcp < 2 has no mcpserver module; no mcp at all: ModuleNotFoundError
        raise TilakeError(MCP_MISSING) from exc
    from importlib.metadata import version

    srv = MCPServer("tilake", instructions=INSTRUCTIONS, version=version("tilake"), log_level="WARNING")
    tool = lambda fn: srv.tool()(_tool_errors(fn))   # noqa: E731

    @tool
    def scan_dry_run(script: str, script_args: Optional[List[str]] = None, profiler: str = "npu",
                     allow_preamble: bool = False) -> Dict[str, Any]:
        """Stages 1-2 of `tilake scan --dry-run` on a verl launch script: the parsed config (each value with its
        source), environment checks and the planned profiler block as a diff. Writes nothing and never runs the
        script; profiler='torch' checks with a fixed probe, and replays the script's preamble only with allow_preamble=true."""
        return T.scan_dry_run(script, script_args, profiler, allow_preamble)

    @tool
    def run_profile(profiler_output: str, out: str, run_id: Optional[str] = None, model_id: Optional[str] = None,
                    model_family: Optional[str] = None, lang: str = "en", allow_missing: bool = False,
                    phases: Optional[str] = None) -> Dict[str, Any]:
        """`tilake run`: ingest a verl profiler_output/ folder into the server's lake, build the marts and write
        the operator diff report into `out` (a folder below the server's --out). Returns grade counts, evidence
        per side and every output path. status evidence_missing: a side had no device evidence."""
        return T.run_profile(ws, profiler_output, out, run_id, model_id, model_family, lang, allow_missing, phases)

    @tool
    def dumps_analyze(train: str, infer: str, out: str, map_name: str = "auto",
                      run_id: Optional[str] = None, request_index: Optional[int] = None,
                      build: bool = False) -> Dict[str, Any]:
        """`tilake dumps analyze`: compare the training and inference msprobe dumps of one request boundary by
        boundary (exact gate, ULP, first divergence, independent difference points, stub instruction). Returns
        the summary and report_source.json; outputs go to `out` below --out; run_id also writes the lake
        (build=true: and builds the dump marts)."""
        return T.dumps_analyze(ws, train, infer, out, map_name, run_id, request_index, build)

    @tool
    def dumps_gate(train: str, infer: str, map_name: str = "auto", budget: Optional[str] = None,
                   run_id: Optional[str] = None, out: Optional[str] = None, build: bool = False) -> Dict[str, Any]:
        """`tilake dumps gate`: the bitwise acceptance gate ("true on-policy"). passed is true only when every
        mapped boundary is bitwise equal or within the budget file's ULP; line names the first failing boundary;
        boundaries that could not be compared fail it (outcome evidence_missing). run_id records it in the lake
        (build=true: and builds fct_dump_gates for sql/trend)."""
        return T.dumps_gate(ws, train, infer, map_name, budget, run_id, out, build)

    @tool
    def sql(query: str, max_rows: int = 200, params: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        """Read-only SQL over the lake's warehouse (marts; raw tables as raw_<table>), the guard of `tilake sql`:
        SELECT-type statements only, no file access outside the lake. $name parameters from params. At most
        max_rows rows (truncated says whether there were more)."""
        return T.sql(ws, query, max_rows, params)

    @tool
    def runs() -> Dict[str, Any]:
        """`tilake runs`: every run of the server's lake, oldest first (model, step, tools, evidence, dump verdict)."""
        return T.runs(ws)

    @tool
    def trend(metric: str, by: str = "none", x: str = "run", fail_if: Optional[str] = None,
              out: Optional[str] = None) -> Dict[str, Any]:
        """`tilake trend`: a named trend across runs (metric='list' names them). fail_if regress|increase|decrease|
        change adds the CI check against the previous run (exit_code 1: regressed; 3: fewer than two points).
        out: draw the chart there (below --out)."""
        return T.trend(ws, metric, by, x, fail_if, out)

    @tool
    def explain(run_id: Optional[str] = None, row: Optional[int] = None, module: Optional[str] = None,
                boundary: Optional[str] = None, round: int = 0, report_source: Optional[str] = None) -> Dict[str, Any]:
        """The evidence behind one grade or verdict, with one sentence on top: an operator diff row (run_id + row,
        the report's row number, or module) or a dump boundary (boundary + run_id from the lake, or boundary +
        report_source, the path of an analysis' report_source.json). Read it before stating a cause."""
        if boundary:
            return E.explain_boundary(ws, boundary, run_id, round, report_source)
        if not run_id:
            raise TilakeError("explain needs run_id (with row or module), or boundary")
        return E.explain_row(ws, run_id, row, module)

    return srv


def serve(lake_path: Optional[Path], out_root: Optional[Path]) -> None:
    """Serve the tools over stdio until the client closes the stream.

    Raises:
        TilakeError: the MCP SDK is missing; ``out_root`` is inside the lake or not writable.
    """
    from tilake.files import check_out_dir

    ws = T.Workspace(lake_path, Path(out_root).resolve() if out_root else None)
    if ws.out_root is not None:
        check_out_dir(ws.out_root, ws.lake.root)
    build_server(ws).run("stdio")
