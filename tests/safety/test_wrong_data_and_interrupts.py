"""Silent wrong data, one error line, Ctrl-C during a build (a real SIGINT), small things (issue 19, items
5-8). Items 1-4 and the shared helpers: test_bad_values_and_targets.py."""
from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from hostile import one_error_line, tree_digest
from test_bad_values_and_targets import _invoke, _parquet, _train_db

from tilake.cli import main
from tilake.errors import TilakeError

# ------------------------------------------------------------------ 5. silent wrong data is counted and said

@pytest.mark.parametrize("column", ["opType", "name", "both"])
def test_dangling_string_ids_are_counted_invalid(built, tmp_path, column):
    po = tmp_path / "po"
    shutil.copytree(built["po"], po)
    c = sqlite3.connect(_train_db(po))
    cols = ["opType", "name"] if column == "both" else [column]
    ids = set()
    for col in cols:
        ids |= {r[0] for r in c.execute(f"SELECT {col} FROM COMPUTE_TASK_INFO GROUP BY {col} ORDER BY count(*) DESC LIMIT 2")}
    want = {col: c.execute(f"SELECT count(*) FROM COMPUTE_TASK_INFO WHERE {col} IN ({','.join(map(str, ids))})")
            .fetchone()[0] for col in cols}
    c.executemany("DELETE FROM STRING_IDS WHERE id = ?", [(i,) for i in ids])
    c.commit()
    c.close()
    lake = tmp_path / "lake"
    r = _invoke("ingest", po, "--run-id", "d", "--lake", lake)
    assert r.exit_code == 0, r.output
    assert "name a STRING_IDS id that does not exist" in r.output, r.output
    inv = [json.loads(v) for (v,) in _parquet(lake, "captures", "d", "invalid_rows") if v]
    assert inv, "dangling ids not counted in captures.invalid_rows"
    for col, n in want.items():
        assert inv[0][f"COMPUTE_TASK_INFO.{col} id not in STRING_IDS"] == n


@pytest.mark.parametrize("declared", ["torch.float16", "torch.bfloat16", "torch.int8"])
def test_pt_dtype_other_than_dump_json_is_said(pair, tmp_path, declared):
    train, infer, mp = pair
    p = train / "dump.json"
    d = json.loads(p.read_text())
    d["data"]["Module.m.B.Lin.forward.0"]["output"][0]["dtype"] = declared
    p.write_text(json.dumps(d))
    out = tmp_path / "out"
    r = _invoke("dumps", "analyze", "--train", train.parents[1], "--infer", infer.parents[1], "--map", mp,
                "--out", out, "--no-charts")
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "warning: train: 1 .pt file(s) hold another dtype than dump.json declares" in flat, r.output
    assert f"dump.json {declared}, file torch.float32" in flat
    assert "than dump.json declares" in (out / "alignment_report.md").read_text(encoding="utf-8")


def test_dumps_analyze_build_leaves_runs_and_trends_current(pair, lake_copy, tmp_path):
    train, infer, mp = pair
    r = _invoke("runs", "--json", "--lake", lake_copy)   # the warehouse is current and read
    assert r.exit_code == 0 and [x["run_id"] for x in json.loads(r.output)["runs"]] == ["r1"], r.output
    r = _invoke("dumps", "analyze", "--train", train.parents[1], "--infer", infer.parents[1], "--map", mp,
                "--out", tmp_path / "out", "--no-charts", "--run-id", "d2", "--lake", lake_copy, "--build")
    assert r.exit_code == 0, r.output
    from tilake.lake.registry import warehouse_is_current
    from tilake.lake.store import Lake
    assert warehouse_is_current(Lake(lake_copy))
    assert "lake rows: tensor_stats " in r.output and "{'" not in r.output, r.output   # text, not a dict
    r = _invoke("runs", "--json", "--lake", lake_copy)
    assert r.exit_code == 0 and [x["run_id"] for x in json.loads(r.output)["runs"]] == ["r1", "d2"], r.output
    r = _invoke("trend", "-m", "difference_points", "--by", "none", "--no-chart", "--json", "--lake", lake_copy)
    assert r.exit_code == 0 and [p["last_run_id"] for s in json.loads(r.output)["series"] for p in s["points"]] == ["d2"], r.output


# ------------------------------------------------------------------ 6. one error line, naming the file and where

def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("command", ["ingest", "build", "rm"])
def test_disk_full_while_taking_the_lock(built, lake_copy, monkeypatch, command):
    before = tree_digest(lake_copy, skip=(".lock",))
    monkeypatch.setattr(os, "pwrite", _enospc)
    args = {"ingest": ["ingest", built["po"], "--run-id", "r2"], "build": ["build"], "rm": ["runs", "rm", "r1"]}[command]
    r = _invoke(*args, "--lake", lake_copy)
    line = one_error_line(r.output)
    assert r.exit_code == 2 and "writer lock" in line and "no space left on device" in line and str(lake_copy) in line
    monkeypatch.undo()
    assert tree_digest(lake_copy, skip=(".lock",)) == before
    r = _invoke("runs", "--lake", lake_copy)   # the lock was released: the lake still works
    assert r.exit_code == 0 and "r1" in r.output


def test_disk_full_in_atomic_write_bytes(built, tmp_path, monkeypatch):
    from pathlib import Path as P

    from tilake.files import atomic_write_bytes

    real = P.write_bytes

    def full(self, data):
        if ".tmp" in self.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, data)

    monkeypatch.setattr(P, "write_bytes", full)
    target = tmp_path / "keep.json"
    target.write_text("old")
    with pytest.raises(TilakeError, match="No space left on device") as e:
        atomic_write_bytes(target, b"new")
    assert str(target) in str(e.value) and target.read_text() == "old"
    assert [x.name for x in tmp_path.iterdir()] == ["keep.json"]
    out = tmp_path / "out"
    r = _invoke("report", "r1", "--out", out, "--lang", "en", "--lake", built["lake"])
    line = one_error_line(r.output)
    assert r.exit_code == 2 and "No space left on device" in line and str(out) in line, line


def _one_rank_dump(tmp_path: Path, data: bytes) -> Path:
    d = tmp_path / "bad" / "step0" / "rank0"
    d.mkdir(parents=True)
    (d / "dump.json").write_bytes(data)
    return d.parents[1]


@pytest.mark.parametrize("kind", ["random", "bad_utf8_line", "deep_list", "deep_object"])
def test_dump_json_of_random_bytes_or_deep_nesting_ends_in_one_line(pair, tmp_path, kind):
    train, infer, mp = pair
    data = {"random": bytes(range(128, 256)) * 40,
            "bad_utf8_line": b'{"task": "tensor",\n "level": "L0",\n "data": {"x\xff": {}}}',
            "deep_list": b'{"data": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
            "deep_object": b'{"data": ' + b'{"a":' * 200_000 + b"1" + b"}" * 200_000 + b"}"}[kind]
    bad = _one_rank_dump(tmp_path, data)
    r = _invoke("dumps", "analyze", "--train", bad, "--infer", infer.parents[1], "--map", mp,
                "--out", tmp_path / "out", "--no-charts")
    line = one_error_line(r.output)
    assert r.exit_code == 2 and str(bad / "step0" / "rank0" / "dump.json") in line, line
    if kind == "bad_utf8_line":
        assert "not UTF-8" in line and "line 3" in line, line
    elif kind.startswith("deep"):
        assert "nests too deeply" in line, line
    r = _invoke("dumps", "probe", "--train", bad)
    assert r.exit_code == 2 and one_error_line(r.output)


@pytest.mark.parametrize("value", ["1e300", "-1e300", "4.7e15", "\"abc\""])
def test_torch_trace_with_an_impossible_time_names_the_event(tmp_path, value):
    import gzip
    src = Path(__file__).resolve().parents[1] / "data" / "torch_cpu_trace" / "prof_rank-0.json.gz"
    text = gzip.open(src).read().decode("utf-8")
    d = json.loads(text)
    ev = [i for i, e in enumerate(d["traceEvents"]) if e.get("ph") == "X"]
    k = ev[len(ev) // 2]
    name = d["traceEvents"][k]["name"]
    d["traceEvents"][k]["dur"] = "@@DUR@@"
    p = tmp_path / "prof_rank-0.json"
    p.write_text(json.dumps(d).replace('"@@DUR@@"', value))
    r = _invoke("ingest", "--train", p, "--infer", p, "--run-id", "t", "--lake", tmp_path / "lake")
    line = one_error_line(r.output)
    assert r.exit_code == 2 and str(p) in line and f"traceEvents[{k}]" in line and repr(name)[:40] in line, line
    assert "temp" not in line and "line 3" not in line
    assert not (tmp_path / "lake" / "raw").exists() or not list((tmp_path / "lake" / "raw").rglob("run_id=t"))


# ------------------------------------------------------------------ 7. Ctrl-C during tilake build: a real SIGINT

_CHILD = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)\n"   # own handler: the
          "from tilake.cli import main; sys.argv = ['tilake'] + sys.argv[1:]; main()\n")      # suite may run under nohup


def _wh_digest(lake: Path) -> str:
    import hashlib
    return hashlib.sha256((lake / "warehouse.duckdb").read_bytes()).hexdigest()


@pytest.mark.parametrize("at", ["start", "1", "third", "two_thirds", "last_but_one", "last"])
def test_real_sigint_during_build_never_swaps_a_half_build(lake_copy, at):
    import re
    import signal
    import subprocess
    import sys
    import time

    before = _wh_digest(lake_copy)
    env = {**os.environ, "TILAKE_DBT_PROGRESS": "verbose"}
    p = subprocess.Popen([sys.executable, "-c", _CHILD, "build", "--full-refresh", "--lake", str(lake_copy)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out, sent_at = [], None
    if at == "start":   # while the warehouse is copied / dbt loads the project: before any node
        deadline = time.monotonic() + 120
        while not (lake_copy / ".build").exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        p.send_signal(signal.SIGINT)
        sent_at = (0, 0)
    for line in p.stdout:
        out.append(line)
        m = re.match(r"dbt build: (\d+) of (\d+) nodes", line)
        if m and sent_at is None:
            n, total = int(m.group(1)), int(m.group(2))
            goal = {"1": 1, "third": total // 3, "two_thirds": 2 * total // 3, "last_but_one": total - 1,
                    "last": total}[at]
            if n >= goal:
                p.send_signal(signal.SIGINT)
                sent_at = (n, total)
    rc = p.wait(timeout=300)
    text = "".join(out)
    assert sent_at is not None, text
    swapped = _wh_digest(lake_copy) != before
    assert "Traceback" not in text
    if rc == 0:   # only a signal after dbt's last node may miss the build: then it is whole and swapped
        assert at == "last" and swapped, (sent_at, text[-2000:])
    else:
        assert rc == 2 and not swapped, (sent_at, text[-2000:])
        assert text.strip().splitlines()[-1] == f"error: {lake_copy}: interrupted during dbt build; the lake is unchanged"
        assert not (lake_copy / ".build").exists()
    r = _invoke("build", "--lake", lake_copy)   # the lake builds again afterwards
    assert r.exit_code == 0, r.output


def test_interrupt_guard_records_what_dbt_swallows(tmp_path, monkeypatch):
    """The guard's flag, not the exception, decides: a Ctrl-C that dbt or DuckDB turned into a
    success (or into another error) still stops the swap."""
    import signal

    from dbt.cli.main import dbtRunner, dbtRunnerResult

    from tilake.lake.store import Lake
    from tilake.lake.warehouse import DbtInterrupted, build_swapped

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        monkeypatch.setattr(signal, "getsignal", lambda s: signal.default_int_handler)   # nohup: test the guard anyway

    def swallowing(self, args):
        try:
            os.kill(os.getpid(), signal.SIGINT)   # a real signal, delivered to this (main) thread
            for _ in range(1000):
                pass
        except KeyboardInterrupt:
            pass                                  # what a broad except in a library does
        return dbtRunnerResult(success=True, result=None)

    monkeypatch.setattr(dbtRunner, "invoke", swallowing)
    lake = Lake(tmp_path / "lake")
    with pytest.raises(DbtInterrupted):
        build_swapped(lake)
    assert not lake.warehouse.exists() and not (lake.root / ".build").exists()
    assert signal.getsignal(signal.SIGINT) is not None


# ------------------------------------------------------------------ 8. small things a user hits

@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
@pytest.mark.parametrize("q", ["DESCRIBE fct_side_ops", "SHOW TABLES", "-- saved query\nSUMMARIZE dim_runs", "desc dim_runs"])
def test_describe_and_show_export_in_every_format(lake_copy, tmp_path, fmt, q):
    out = tmp_path / f"x.{fmt}"
    r = _invoke("sql", q, "--format", fmt, "-o", out, "--lake", lake_copy)
    assert r.exit_code == 0 and out.stat().st_size > 0, r.output
    if fmt != "parquet":
        r = _invoke("sql", q, "--format", fmt, "--lake", lake_copy)
        assert r.exit_code == 0 and r.output.strip(), r.output


def test_report_out_is_not_created_for_an_unknown_run(built, tmp_path):
    out = tmp_path / "new" / "out"
    r = _invoke("report", "no_such_run", "--out", out, "--lake", built["lake"])
    assert r.exit_code == 2 and "no_such_run" in one_error_line(r.output)
    assert not (tmp_path / "new").exists()


def test_dumps_analyze_says_read_only_lake_before_analysing(pair, tmp_path, monkeypatch):
    import tilake.diagnosis.analyze as A
    from tilake.lake.store import Lake

    train, infer, mp = pair
    called = []
    monkeypatch.setattr(A, "analyze_pair", lambda *a, **k: called.append(1) or (_ for _ in ()).throw(AssertionError))
    lake = Lake(tmp_path / "lake")

    def refuse(self):
        raise TilakeError("lake is read-only (cannot take the writer lock)", path=self.root)

    monkeypatch.setattr(Lake, "locked", refuse)
    r = _invoke("dumps", "analyze", "--train", train.parents[1], "--infer", infer.parents[1], "--map", mp,
                "--out", tmp_path / "out", "--no-charts", "--run-id", "d", "--lake", lake.root)
    assert r.exit_code == 2 and "read-only" in one_error_line(r.output)
    assert called == []   # refused before the analysis ran


def test_count_cells_are_numbers_and_footnote_only_for_the_example(built, tmp_path):
    import csv

    from tilake.reports.op_diff import load_facts, render_markdown

    out = tmp_path / "out"
    r = _invoke("report", "r1", "--out", out, "--lang", "en", "--lake", built["lake"])
    assert r.exit_code == 0, r.output
    rows = list(csv.reader(open(out / "operator_diff_table.csv", encoding="utf-8-sig")))
    for row in rows[1:]:
        assert row[3].isdigit() and row[4].isdigit(), row   # train / infer call counts: one number each
    facts = load_facts(built["lake"] / "warehouse.duckdb", "r1")
    facts["comparison"][0]["differs_from_seed_table"] = True
    facts["comparison"][0]["seed_table_grade"] = "green"
    assert "‡" not in render_markdown(facts, "en")   # a user's own run
    facts["run"]["collection_method"] = "bundled synthetic example generated by tilake.synth"
    assert "‡" in render_markdown(facts, "en")


def test_source_notes_only_for_a_known_backend(built, monkeypatch):
    import tilake.reports.op_diff as od

    wh = built["lake"] / "warehouse.duckdb"
    facts = od.load_facts(wh, "r1")   # the synthetic capture is detected as Megatron + vLLM
    assert any(r["train_code_path"] or r["infer_code_path"] for r in facts["comparison"])
    real = od.run_query

    def unknown(con, name, run_id):
        rows = real(con, name, run_id)
        if name == "op_diff_run":
            rows = [{**x, "train_backend": "unknown", "infer_backend": "unknown", "train_backend_detected": None,
                     "infer_backend_detected": "unknown"} for x in rows]
        return rows

    monkeypatch.setattr(od, "run_query", unknown)
    facts = od.load_facts(wh, "r1")   # a plain job (a CNN) whose framework nobody named or detected
    assert not any(r["train_code_path"] or r["infer_code_path"] or r["train_code_function"] for r in facts["comparison"])
    assert "(source note)" not in " ".join(" ".join(x) for x in od.csv_rows(facts, "en"))


def test_disk_full_build_leaves_no_dbt_target(lake_copy, monkeypatch):
    import tilake.lake.warehouse as wh

    monkeypatch.setattr(wh, "_disk_failure", lambda lake, res: TilakeError(
        "cannot write to the lake: no space left on device; the lake was left as it was", path=lake.root))
    before = (lake_copy / "warehouse.duckdb").read_bytes()
    r = _invoke("build", "--lake", lake_copy)
    lines = [x for x in r.output.splitlines() if x.strip() and not x.startswith("dbt build: ")]   # progress is fine
    assert r.exit_code == 2 and len(lines) == 1 and "no space left on device" in lines[0], r.output
    assert not (lake_copy / ".dbt" / "target").exists() and not (lake_copy / ".build").exists()
    assert (lake_copy / "warehouse.duckdb").read_bytes() == before


def test_scan_from_output_lists_every_output_without_a_python_dict(built, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["scan", "--from-output", str(built["po"]), "--run-id", "s1", "--lake",
                                  str(tmp_path / "lake"), "--out", str(out), "--lang", "en"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "{'" not in r.output and "evidence: infer: device kernels, train: device kernels" in r.output, r.output
    for name in ("train_infer_op_diff_report.md", "operator_diff_table.csv", "train_infer_op_diff_report.html",
                 "operator_diff_table_numeric.csv", "operator_diff.xlsx", "op_diff_overview.png"):
        assert name in r.output and (out / name).exists(), (name, r.output)
