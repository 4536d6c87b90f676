"""Hostile inputs (issue 33, the inputs half): nothing followed out of a dump, nothing opened that blocks,
bounded work on padded or compressed inputs, the right cause for damaged-looking but whole files, silent bad rows
counted, and control characters / formulas escaped in every output. Every input is made here under tmp_path."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.errors import TilakeError

TORCH_TRACE = Path(__file__).resolve().parents[1] / "data" / "torch_cpu_trace" / "prof_rank-0.json.gz"


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _trace_dict() -> dict:
    return json.loads(gzip.open(TORCH_TRACE).read().decode("utf-8"))


def _ingest_trace(tmp_path: Path, trace: Path):
    return _invoke("ingest", "--train", trace, "--run-id", "t", "--lake", tmp_path / "lake", "--allow-missing")


# ------------------------------------------------------------------ traces: bounded work, right causes
def test_whitespace_padded_trace_is_read(tmp_path):
    body = json.dumps(_trace_dict())
    cut = body.index('}, {"', len(body) // 2)
    p = tmp_path / "padded.json"
    with open(p, "wb") as f:      # 24 MiB of padding between two events: more than the fast cut holds
        f.write(body[:cut + 1].encode() + b",")
        for _ in range(24):
            f.write(b"\n" * (1 << 20))
        f.write(body[cut + 2:].encode())
    r = _ingest_trace(tmp_path, p)
    assert r.exit_code == 0, r.output
    assert "train rank 0: ok" in r.output and "kernels=5" in r.output


def test_gzip_bomb_trace_is_one_line(tmp_path, monkeypatch):
    from tilake.ingest import inputs

    monkeypatch.setattr(inputs, "GZIP_FREE_BYTES", 1 << 20)
    body = json.dumps(_trace_dict())
    p = tmp_path / "bomb.json.gz"
    with gzip.open(p, "wb") as f:
        f.write(body[:-2].encode())
        for _ in range(64):
            f.write(b" " * (1 << 20))
        f.write(body[-2:].encode())
    r = _ingest_trace(tmp_path, p)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "decompresses to more than" in r.output and str(p) in r.output and "gzip bomb" in r.output


def test_bom_trace_is_read(tmp_path):
    p = tmp_path / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(_trace_dict()).encode())
    r = _ingest_trace(tmp_path, p)
    assert r.exit_code == 0 and "train rank 0: ok" in r.output, r.output


def test_nan_in_a_trace_is_named_not_truncated(tmp_path):
    d = _trace_dict()
    k = [i for i, e in enumerate(d["traceEvents"]) if e.get("ph") == "X"][3]
    d["traceEvents"][k]["dur"] = float("nan")
    p = tmp_path / "nan.json"
    p.write_text(json.dumps(d))       # Python writes the literal NaN
    r = _ingest_trace(tmp_path, p)
    assert "NaN or Infinity" in r.output and "not truncated" in r.output, r.output
    assert "truncated or corrupt" not in r.output


def test_args_that_are_a_list_do_not_crash(tmp_path):
    d = _trace_dict()
    for e in d["traceEvents"][:50]:
        if e.get("ph") == "X":
            e["args"] = [1, 2]
    p = tmp_path / "args.json"
    p.write_text(json.dumps(d))
    r = _ingest_trace(tmp_path, p)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output


# ------------------------------------------------------------------ RL log (--log): bounded
def test_log_gzip_bomb_and_long_line(tmp_path, monkeypatch):
    from tilake.ingest import inputs
    from tilake.ingest.run_facts import read_rl_metrics

    long = tmp_path / "long.log"
    long.write_bytes(b"step:1 - rollout_corr/kl:0.1\n" + b"x" * (3 << 20) + b"\nstep:2 - rollout_corr/kl:0.2\n")
    got = read_rl_metrics(long)
    assert [(r["step"], r["line_no"]) for r in got] == [(1, 1), (2, 3)]
    monkeypatch.setattr(inputs, "GZIP_FREE_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.log.gz"
    with gzip.open(bomb, "wb") as f:
        for _ in range(32):
            f.write(b"A" * (1 << 20))
    with pytest.raises(TilakeError, match="decompresses to more than"):
        read_rl_metrics(bomb)


# ------------------------------------------------------------------ special files never opened
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_capture_and_sidecars_are_skipped_not_waited_on(tmp_path):
    out = tmp_path / "ASCEND_PROFILER_OUTPUT"
    pt = tmp_path / "po" / "x_1_20251129080000000_ascend_pt"
    (pt / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    os.mkfifo(pt / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db")
    os.mkfifo(pt / "profiler_info_0.json")
    os.mkfifo(pt / "profiler_metadata.json")
    del out
    code = ("import sys; from tilake.cli import main; sys.argv = ['tilake'] + sys.argv[1:]; main()")
    cp = subprocess.run([sys.executable, "-c", code, "ingest", "--train", str(tmp_path / "po"), "--run-id", "t",
                         "--lake", str(tmp_path / "lake"), "--allow-missing"], capture_output=True, text=True,
                        timeout=120)
    text = cp.stdout + cp.stderr
    assert "Traceback" not in text
    assert "is a FIFO (named pipe), not a regular file: skipped, never opened" in text, text
    cp = subprocess.run([sys.executable, "-c", code, "ingest", "--train",
                         str(pt / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"), "--run-id", "t",
                         "--lake", str(tmp_path / "lake2")], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 2 and "is a FIFO" in cp.stderr and "Traceback" not in cp.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_trace_is_refused_without_blocking(tmp_path):
    from tilake.ingest.inputs import SpecialFile
    from tilake.ingest.torch.events import open_trace

    p = tmp_path / "prof_rank-0.pt.trace.json"
    os.mkfifo(p)
    with pytest.raises(SpecialFile, match="FIFO"):
        open_trace(p)


# ------------------------------------------------------------------ dumps: links out of the dump are not read
def _swap_for_link(target: Path, outside: Path) -> None:
    shutil.copyfile(target, outside)
    target.unlink()
    target.symlink_to(outside)


def test_pt_symlink_out_of_the_dump_is_refused(pair, tmp_path):
    from tilake.ingest.msprobe.reader import DumpSide

    train, _infer, _mp = pair
    pt = next((Path(train) / "dump_tensor_data").glob("*.pt"))
    outside = tmp_path / "elsewhere.pt"
    _swap_for_link(pt, outside)
    side = DumpSide(Path(train), "train")
    slot = next(s for s in side.slots if s.data_name == pt.name)
    with pytest.raises(TilakeError, match="symlink that leads out of the dump"):
        side.load(slot)


def test_tensor_folder_symlink_out_of_the_dump_is_refused(pair, tmp_path):
    from tilake.ingest.msprobe.reader import DumpSide

    train, _infer, _mp = pair
    data = Path(train) / "dump_tensor_data"
    moved = tmp_path / "moved_data"
    shutil.move(str(data), moved)
    data.symlink_to(moved, target_is_directory=True)
    side = DumpSide(Path(train), "train")
    with pytest.raises(TilakeError, match="dump_tensor_data/ is a symlink that leads out of the dump"):
        side.load(side.slots[0])


def test_pt_symlink_inside_the_dump_is_read(pair):
    from tilake.ingest.msprobe.reader import DumpSide

    train, _infer, _mp = pair
    data = Path(train) / "dump_tensor_data"
    pt = sorted(data.glob("*.pt"))[0]
    keep = data / ("copy_" + pt.name)
    shutil.copyfile(pt, keep)
    pt.unlink()
    pt.symlink_to(keep.name)          # a relative link that stays in the dump: fine
    side = DumpSide(Path(train), "train")
    slot = next(s for s in side.slots if s.data_name == pt.name)
    assert side.load(slot).numel() == 64


# ------------------------------------------------------------------ folders: loops and non-UTF-8 names
def test_non_utf8_folder_name_is_one_line(tmp_path):
    po = tmp_path / "po"
    po.mkdir()
    (po / "self").symlink_to(".", target_is_directory=True)        # a loop: rglob does not follow it
    bad = os.path.join(os.fsencode(po), b"bad\xff\xfe")
    os.mkdir(bad)
    shutil.copyfile(TORCH_TRACE, os.path.join(bad, b"prof_rank-0.json.gz"))
    r = _invoke("ingest", "--train", po, "--run-id", "t", "--lake", tmp_path / "lake", "--allow-missing")
    assert r.exit_code == 2 and "Traceback" not in r.output
    line = r.output.strip().splitlines()[-1]
    assert "not UTF-8" in line and "bad\\xff\\xfe" in line, line


def test_symlink_loop_is_one_line(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    r = _invoke("ingest", "--train", loop, "--run-id", "t", "--lake", tmp_path / "lake", "--allow-missing")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert str(loop) in r.output


# ------------------------------------------------------------------ profiler DBs: WAL, hot journal
def _profiler_db(built) -> Path:
    return sorted(Path(built["po"]).rglob("ascend_pytorch_profiler*.db"))[0]


_MAKE = r"""
import os, sqlite3, sys
src, dst, mode = sys.argv[1:4]
con = sqlite3.connect(dst, isolation_level=None)
con.execute("PRAGMA journal_mode=" + ("DELETE" if mode == "hot" else "WAL"))
con.execute("PRAGMA wal_autocheckpoint=0")
con.execute("PRAGMA cache_size=10")
con.execute("ATTACH ? AS s", (src,))
tables = [r[0] for r in con.execute("select name from s.sqlite_master where type='table'")]
for t in tables:
    con.execute(f"CREATE TABLE main.{t} AS SELECT * FROM s.{t}")
if mode == "hot":
    con.execute("BEGIN")
    for t in tables:
        con.execute(f"DELETE FROM main.{t}")
    con.execute("CREATE TABLE junk(x)")
    con.execute("INSERT INTO junk SELECT randomblob(4000) FROM s.sqlite_master a, s.sqlite_master b LIMIT 2000")
elif mode == "walmid":
    con.execute("BEGIN")
    con.execute("CREATE TABLE junk(x)")
    con.execute("INSERT INTO junk SELECT randomblob(4000) FROM s.sqlite_master a, s.sqlite_master b LIMIT 3000")
os._exit(0)      # no checkpoint, no rollback: as a writer killed there leaves it
"""


@pytest.mark.parametrize("mode", ["walonly", "walmid", "hot"])
def test_wal_and_hot_journal_dbs_are_read_as_sqlite_would(built, tmp_path, mode):
    src = _profiler_db(built)
    out = tmp_path / "cap" / "x_1_20251129080000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    db = out / "ascend_pytorch_profiler_0.db"
    subprocess.run([sys.executable, "-c", _MAKE, str(src), str(db), mode], check=True, timeout=120)
    sides = sorted(p.name for p in out.iterdir())
    assert any(s.endswith(("-wal", "-journal")) for s in sides), sides
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = _invoke("ingest", "--train", tmp_path / "cap", "--run-id", "t", "--lake", tmp_path / "lake",
                "--allow-missing")
    assert r.exit_code == 0, r.output
    assert "train rank 0: ok" in r.output and "malformed" not in r.output and "no torch_npu" not in r.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before       # inputs untouched


def test_wal_db_without_its_wal_names_the_missing_file(built, tmp_path):
    src = _profiler_db(built)
    out = tmp_path / "cap" / "x_1_20251129080000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    db = out / "ascend_pytorch_profiler_0.db"
    subprocess.run([sys.executable, "-c", _MAKE, str(src), str(db), "walonly"], check=True, timeout=120)
    for sfx in ("-wal", "-shm"):
        Path(str(db) + sfx).unlink()
    r = _invoke("ingest", "--train", tmp_path / "cap", "--run-id", "t", "--lake", tmp_path / "lake", "--allow-missing")
    assert r.exit_code == 2 and "without its -wal file" in r.output and "-wal from the host" in r.output


# ------------------------------------------------------------------ silent bad rows: counted and named
def test_null_names_nan_host_times_and_garbage_steps_are_counted(built, tmp_path):
    cap = tmp_path / "cap" / "x_1_20251129080000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    cap.mkdir(parents=True)
    db = cap / "ascend_pytorch_profiler_0.db"
    shutil.copyfile(_profiler_db(built), db)
    con = sqlite3.connect(db)
    con.execute("UPDATE COMPUTE_TASK_INFO SET name = NULL WHERE rowid IN (SELECT rowid FROM COMPUTE_TASK_INFO LIMIT 3)")
    con.execute("UPDATE PYTORCH_API SET startNs = 'NaN' WHERE rowid IN "
                "(SELECT rowid FROM PYTORCH_API WHERE type = 50001 LIMIT 4)")
    con.execute("CREATE TABLE IF NOT EXISTS STEP_TIME(id INTEGER, startNs INTEGER, endNs INTEGER)")
    con.execute("INSERT INTO STEP_TIME VALUES ('abc', 'x', NULL), (7, 100, 50)")
    con.commit()
    con.close()
    r = _invoke("ingest", "--train", tmp_path / "cap", "--run-id", "t", "--lake", tmp_path / "lake", "--allow-missing")
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith("train rank 0"))
    assert line.startswith("train rank 0: ok with 9 invalid row(s)"), line
    assert "3 kernels with no name" in line and "4 host ops whose time is not a number" in line
    assert "2 STEP_TIME rows that are not a step range" in line
    import duckdb
    got = duckdb.sql(f"SELECT invalid_rows FROM read_parquet('{tmp_path / 'lake'}/raw/captures/**/*.parquet')").fetchall()
    d = json.loads(got[0][0])
    assert d["COMPUTE_TASK_INFO.name NULL (kernel name unknown)"] == 3
    assert d["PYTORCH_API.startNs/endNs not an integer, NULL or end < start"] == 4
    assert d["STEP_TIME rows not a step range (id, startNs, endNs)"] == 2


def test_capture_status_text_is_never_plain_ok_with_invalid_rows():
    from tilake.reports.captures import status_text

    assert status_text("ok", None) == "ok"
    assert status_text("ok", '{"COMPUTE_TASK_INFO.name NULL (kernel name unknown)":3}') == "ok, 3 rows invalid"


# ------------------------------------------------------------------ outputs: control characters and formulas
def test_sql_csv_output_neutralises_formulas_and_escapes(lake_copy, tmp_path):
    out = tmp_path / "q.csv"
    q = ("SELECT '=HYPERLINK(\"http://x\",\"y\")' AS a, '' AS b, NULL AS c, -1.5 AS d, "
         "'x' || chr(27) || '[31mred' AS e, '+1' AS f, 'l1' || chr(10) || 'l2' AS g, '@SUM(A1)' AS \"=h\"")
    r = _invoke("sql", q, "--lake", lake_copy, "--format", "csv", "-o", out)
    assert r.exit_code == 0, r.output
    text = out.read_text(encoding="utf-8")
    header, row = text.split("\n", 1)
    assert header == "a,b,c,d,e,f,g,'=h"
    # a cell that is a plain number ('+1', -1.5) stays a number: no function can hide in it
    assert row == '"\'=HYPERLINK(""http://x"",""y"")","",,-1.5,x\\x1b[31mred,+1,"l1\nl2",\'@SUM(A1)\n'
    assert "\x1b" not in text
    r = _invoke("sql", q, "--lake", lake_copy, "--format", "csv")     # stdout: the same bytes
    assert r.exit_code == 0 and r.stdout == text


def test_markdown_csv_and_xlsx_escape_control_characters(tmp_path):
    from openpyxl import load_workbook

    from tilake.reports.escape import csv_cell, md_code, md_text
    from tilake.reports.tables import write_csv_rows, write_xlsx

    name = "aten::mm\x1b]0;pwned\x07\x1b[2J\x00"
    assert "\x1b" not in md_text(name) and "\\x1b\\]0;pwned" in md_text(name)
    assert "\x1b" not in md_code(name) and "\x00" not in md_code(name)
    assert csv_cell("=1+1") == "'=1+1" and csv_cell("\x1bx") == "\\x1bx"
    p = write_csv_rows(tmp_path / "t.csv", ["k"], [[name], ["-cmd"]])
    body = p.read_text(encoding="utf-8-sig")
    assert "\x1b" not in body and "'-cmd" in body
    x = write_xlsx(tmp_path / "t.xlsx", [{"title": "t\x1b", "header": ["k\x1b"], "rows": [[name], ["=HYPERLINK(1)"]]}])
    ws = load_workbook(x).active
    assert ws["A2"].value == "aten::mm\\x1b]0;pwned\\x07\\x1b[2J\\x00" and ws["A3"].value == "=HYPERLINK(1)"
    assert ws["A3"].data_type == "s"


def test_rich_console_shows_escape_never_sends_it():
    import io

    from rich.console import Console
    from rich.table import Table

    import tilake.reports  # noqa: F401  (installs the escape)

    buf = io.StringIO()
    c = Console(file=buf, force_terminal=True, width=120)
    c.print("kernel \x1b[31mred\x1b]0;title\x07", markup=False, highlight=False)
    t = Table()
    t.add_column("name")
    t.add_row("k\x1b[2J")
    c.print(t)
    out = buf.getvalue()
    assert "\\x1b[31mred" in out and "\\x1b[2J" in out
    assert "\x1b]0;" not in out and "\x1b[2J" not in out and "\x1b[31mred" not in out


def test_error_line_escapes_a_file_name(tmp_path):
    p = tmp_path / "x\x1b[31m.db"
    p.write_bytes(b"not sqlite at all, not a header" * 10)
    r = _invoke("ingest", "--train", p, "--run-id", "t", "--lake", tmp_path / "lake", "--allow-missing")
    assert r.exit_code == 2 and "\x1b" not in r.output and "x\\x1b[31m.db" in r.output, r.output


# ------------------------------------------------------------------ memory: one line that does not overclaim
def test_memory_error_line_claims_only_what_is_true():
    from tilake.pipeline.failures import error_line

    assert error_line(MemoryError(), "sql").endswith("this command does not write the lake")
    assert error_line(MemoryError(), "ingest").endswith("the lake is unchanged")
    line = error_line(MemoryError(), "dumps")
    assert "unchanged" not in line and "`tilake runs`" in line and "ulimit -v" in line


def test_address_space_limit_gives_one_line(tmp_path):
    """``tilake scan --dry-run`` of a script that would need GBs, under a 1.5 GiB address-space limit."""
    script = tmp_path / "run.sh"
    script.write_text("A=xxxxxxxxxxxxxxxx\n" + 'A="$A$A"\n' * 40 +
                      "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=/m/Qwen2-7B a=$A\n")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "from tilake.cli import main; sys.argv = ['tilake'] + sys.argv[1:]; main()")
    cp = subprocess.run([sys.executable, "-c", code, "scan", "--dry-run", str(script), "--lake", str(tmp_path / "l")],
                        capture_output=True, text=True, timeout=300)
    assert "Traceback" not in cp.stderr, cp.stderr[-2000:]
    assert cp.returncode in (0, 2)


def test_too_long_lake_path_is_not_blamed_on_the_input():
    import duckdb

    from tilake.pipeline.failures import error_line

    exc = duckdb.IOException('IO Error: Cannot open file "/l/.staging/ab/kernels/part-0.parquet": File name too long')
    line = error_line(exc, "ingest")
    assert line.startswith("/l/.staging/ab/kernels/part-0.parquet: the path is too long")
    assert "not an input" in line and "shorter path" in line
