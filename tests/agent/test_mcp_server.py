"""``tilake mcp`` through the MCP SDK's own client (in-process, and once over real stdio): the tools are listed,
and a dry-run scan, a run on the bundled example, a dump analysis of the shared pair, a SQL query and the gate
give the same answers as the CLI; hostile SQL is refused with the CLI's own line; nothing is written outside
the server's lake and --out."""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("mcp.server.mcpserver", reason="the MCP SDK 2.x is not installed (pip install '.[mcp]')")
import anyio  # noqa: E402
from mcp import Client  # noqa: E402

from tilake.agent.server import build_server  # noqa: E402
from tilake.agent.tools import Workspace  # noqa: E402
from tilake.cli import main  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "verl_launch"
TOOLS = {"scan_dry_run", "run_profile", "dumps_analyze", "dumps_gate", "sql", "runs", "trend", "explain"}
RUN = "mcp-example"


def call(ws: Workspace, name: str, args: dict):
    """One tool call through an in-process MCP client: ``(is_error, result or error text)``."""
    async def go():
        async with Client(build_server(ws)) as c:
            return await c.call_tool(name, args)
    r = anyio.run(go)
    if r.is_error:
        return True, r.content[0].text
    return False, r.structured_content["result"]


def cli(*args, ok=True):
    r = CliRunner().invoke(main, [str(a) for a in args])
    if ok:
        assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The bundled example's profiler_output (``tilake example``'s generator, seed 0) run through the
    ``run_profile`` tool into the server's lake; the server's cwd is a folder that must stay empty."""
    from tilake.synth import make_profiler_output

    base = tmp_path_factory.mktemp("mcp")
    po = base / "inputs" / "profiler_output"
    make_profiler_output(po, seed=0)
    ws = Workspace(base / "lake", base / "agent-out")
    cwd = base / "cwd"
    cwd.mkdir()
    mp = pytest.MonkeyPatch()
    mp.chdir(cwd)
    try:
        err, res = call(ws, "run_profile", {"profiler_output": str(po), "out": "example", "run_id": RUN,
                                            "model_id": "Qwen/Qwen3-0.6B", "phases": "all"})
    finally:
        mp.undo()
    assert not err, res
    return ws, res, base


def test_tools_are_listed_with_descriptions(tmp_path):
    async def go():
        async with Client(build_server(Workspace(tmp_path / "lake", tmp_path / "out"))) as c:
            return (await c.list_tools()).tools
    tools = anyio.run(go)
    assert {t.name for t in tools} == TOOLS
    assert all(t.description and t.input_schema["type"] == "object" for t in tools)
    sql = next(t for t in tools if t.name == "sql")
    assert sql.input_schema["required"] == ["query"] and "max_rows" in sql.input_schema["properties"]


def test_run_on_the_bundled_example_answers_as_the_cli(example):
    ws, res, base = example
    assert res["run_id"] == RUN and res["status"] == "ok" and res["exit_status"] == 0
    assert res["grade_counts"] == {"red": 1, "orange": 2, "yellow": 5, "green": 7, "evidence_missing": 0}
    assert all(Path(p).resolve().is_relative_to(base / "agent-out" / "example")
               for k, p in res["outputs"].items() if k != "runtime_ops")
    assert list((base / "cwd").iterdir()) == []               # nothing in the working folder
    assert sorted(p.name for p in base.iterdir()) == ["agent-out", "cwd", "inputs", "lake"]
    # the CLI reads the same lake and gives the same answers
    runs = json.loads(cli("runs", "--lake", ws.lake_path, "--json").stdout)
    assert call(ws, "runs", {}) == (False, runs)
    q = "select grade, count(*) as n from fct_op_comparison where run_id = $run_id group by grade order by grade"
    err, got = call(ws, "sql", {"query": q, "params": {"run_id": RUN}})
    want = json.loads(cli("sql", q, "--param", f"run_id={RUN}", "--format", "json", "--lake", ws.lake_path).stdout)
    assert not err and got["columns"] == ["grade", "n"] and got["truncated"] is False
    assert [dict(zip(got["columns"], r)) for r in got["rows"]] == want
    assert {r["grade"]: r["n"] for r in want} == {g: n for g, n in res["grade_counts"].items() if n}


def test_sql_row_limit_and_hostile_sql_refused_as_by_the_cli(example, tmp_path):
    ws, _, _ = example
    err, got = call(ws, "sql", {"query": "select * from range(50)", "max_rows": 7})
    assert not err and got["row_count"] == 7 and got["truncated"] is True and got["rows"][-1] == [6]
    assert call(ws, "sql", {"query": "select 1", "max_rows": 0})[1].endswith("error: max_rows must be 1..10000, got 0")
    victim = tmp_path / "victim.csv"
    victim.write_text("secret\n1\n")
    for q in [f"copy (select 1) to '{tmp_path / 'x.csv'}'", f"select * from read_csv('{victim}')",
              "attach ':memory:' as m", "drop table fct_op_comparison", "set enable_external_access = true",
              "install httpfs", f"explain analyze copy (select 1) to '{tmp_path / 'y.csv'}'",
              "create table t as select 1", "pragma version; delete from fct_op_comparison"]:
        r = cli("sql", q, "--lake", ws.lake_path, ok=False)
        assert r.exit_code == 2, (q, r.output)
        line = r.output.strip().splitlines()[-1]
        err, text = call(ws, "sql", {"query": q})
        assert err and text.endswith(line), (q, text, line)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.csv"]
    n = call(ws, "sql", {"query": "select count(*) from fct_op_comparison"})[1]["rows"][0][0]
    assert n == 15


def test_explain_a_graded_row(example):
    ws, _, _ = example
    err, got = call(ws, "explain", {"run_id": RUN, "row": 1})
    assert not err and got["kind"] == "op_diff_row" and got["grade"] == "red"
    assert got["sentence"].startswith("row 1 Attention: high (red) by rule different_fused_kernel")
    assert "training FlashAttentionScore×" in got["sentence"] and got["row"]["module"] == "attention"
    assert {m["fused_op"] for m in got["fused_matches"]} == {"FlashAttentionScore", "FusedInferAttentionScore"}
    assert call(ws, "explain", {"run_id": RUN, "module": "attention"})[1]["row"] == got["row"]
    err, text = call(ws, "explain", {"run_id": RUN, "row": 99})
    assert err and "has no operator diff row 99" in text


@pytest.fixture(scope="module")
def pair_a(shared_dir):
    return shared_dir / "fixtures" / "dumps" / "pairA"


def test_dump_analysis_and_gate_answer_as_the_cli(pair_a, tmp_path, example):
    ws = Workspace(tmp_path / "lake", tmp_path / "agent-out")
    args = {"train": str(pair_a / "train"), "infer": str(pair_a / "infer")}
    err, got = call(ws, "dumps_analyze", {**args, "out": "pairA"})
    assert not err, got
    r = cli("dumps", "analyze", "--train", pair_a / "train", "--infer", pair_a / "infer", "--out", tmp_path / "cli",
            "--json")
    want = json.loads(r.stdout)
    assert {k: v for k, v in got["summary"].items() if k != "outputs"} == {k: v for k, v in want.items() if k != "outputs"}
    assert got["summary"]["first_divergence"] == "L0.attn_core.out"
    src = json.loads((tmp_path / "cli" / "report_source.json").read_text(encoding="utf-8"))
    assert {k: v for k, v in got["report_source"].items() if k != "generated_at"} == \
           {k: v for k, v in src.items() if k != "generated_at"}
    assert Path(got["summary"]["outputs"]["report_source"]) == tmp_path / "agent-out" / "pairA" / "report_source.json"
    # the boundary behind the verdict, from the analysis' own file
    err, ex = call(ws, "explain", {"boundary": "L0.attn_core.out",
                                   "report_source": got["summary"]["outputs"]["report_source"]})
    assert not err and ex["is_first_divergence"] is True and ex["difference_point"]["class"] == "rounding-level"
    assert ex["sentence"].startswith("L0.attn_core.out (round 0): NOT_EXACT; 112 elements differ (43.8%)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent-out", "cli"]     # no run_id: no lake
    # the gate: the same one line as the CLI, recorded in the (built) example lake, explained from its raw tables
    ews = example[0]
    line = cli("dumps", "gate", pair_a / "train", pair_a / "infer", ok=False).stdout.strip()
    err, gate = call(ews, "dumps_gate", {**args, "run_id": "g1"})
    assert not err and gate["line"] == line and gate["passed"] is False and gate["exit_code"] == 1
    assert gate["lake_rows"]["dump_gates"] == 1
    err, ex = call(ews, "explain", {"boundary": "L0.attn_core.out", "run_id": "g1"})
    assert not err and ex["source"] == "raw_boundary_results, raw_dump_gates" and ex["gate_line"] == line
    assert ex["gate"]["check"] == "fail" and "max 50 ULP per element" in ex["gate"]["reason"]
    err, ex = call(ews, "explain", {"boundary": "embed", "run_id": "g1"})
    assert not err and ex["gate"]["check"].startswith("passed the gate") and ex["row"]["status"] == "EXACT"


def test_scan_dry_run_answers_as_the_cli_and_writes_nothing(tmp_path, monkeypatch):
    from tilake.ingest.scan import seam as npu_seam

    sys.path.insert(0, str(DATA / "standin"))
    from scan_standin import StandInSeam

    monkeypatch.setattr(npu_seam, "get_seam", lambda: StandInSeam())
    script = tmp_path / "grpo_qwen3_megatron_vllm.sh"
    shutil.copy(DATA / script.name, script)
    ws = Workspace(tmp_path / "lake", None)
    err, got = call(ws, "scan_dry_run", {"script": str(script)})
    assert not err, got
    r = CliRunner().invoke(main, ["scan", "--dry-run", "--format", "json", str(script), "--lake", str(tmp_path / "l2")])
    assert r.exit_code == 0, r.output
    want = json.loads(r.stdout)
    stamp = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d|bak_\d{8}_\d{4}")   # the planned block names the minute
    assert stamp.sub("T", got.pop("diff")) == stamp.sub("T", want.pop("diff"))
    assert got == want and got["status"] == "dry_run" and got["stage1"]["config"]
    assert sorted(tmp_path.iterdir()) == [script]          # no lake, no backup, no output folder
    err, got = call(ws, "scan_dry_run", {"script": str(script), "profiler": "torch"})   # the fixed probe: no replay
    assert not err, got
    assert sorted(tmp_path.iterdir()) == [script]


def test_writes_stay_below_out_and_the_lake(tmp_path):
    ws = Workspace(tmp_path / "lake", tmp_path / "out")
    for out in ("../escape", "/etc", str(tmp_path / "lake" / "x")):
        err, text = call(ws, "dumps_analyze", {"train": "/nope", "infer": "/nope", "out": out})
        assert err and "outside the server's --out folder" in text, text
    err, text = call(Workspace(tmp_path / "lake", None), "run_profile", {"profiler_output": "/nope", "out": "x"})
    assert err and text.endswith("error: this server writes no output files: start it with `tilake mcp --out DIR`")
    (tmp_path / "out").mkdir()
    err, text = call(Workspace(tmp_path / "out" / "lake", tmp_path / "out"), "dumps_analyze",
                     {"train": "/nope", "infer": "/nope", "out": "lake/inside"})
    assert err and "inside the lake" in text
    assert not (tmp_path / "escape").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_without_the_sdk_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)
    r = CliRunner().invoke(main, ["mcp", "--lake", str(tmp_path / "lake")])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip() == ("error: `tilake mcp` needs the MCP SDK: pip install '.[mcp]' (in the tilake source "
                                "folder; Python ≥ 3.10)")


def test_stdio_server_lists_tools_and_answers(tmp_path):
    """The real `tilake mcp` process over stdio: the protocol stream stays clean while a tool runs."""
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "tilake.cli", "mcp", "--lake",
                                                                 str(tmp_path / "lake"), "--out", str(tmp_path / "o")])

    async def go():
        async with Client(params) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            return names, await c.call_tool("trend", {"metric": "list"}), await c.call_tool("sql", {"query": "select 1"})
    names, tr, q = anyio.run(go)
    assert names == TOOLS
    assert "gate_blocking" in {t["name"] for t in tr.structured_content["result"]["trends"]}
    assert q.is_error and "no warehouse yet" in q.content[0].text
