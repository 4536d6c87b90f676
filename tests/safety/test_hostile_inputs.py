"""Hostile inputs and broken machines: each reproducer of shared/fixtures/reliability/ built here, with
exit code, the one-line message, an unchanged lake (checksum listing), byte-identical inputs and
escaped outputs asserted."""
from __future__ import annotations

import csv
import errno
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from hostile import one_error_line, tree_digest
from msprobe_mini import write_dump

from tilake.cli import main
from tilake.errors import TilakeError
from tilake.ingest.msprobe import reader
from tilake.lake.store import Lake, validate_run_id

PAYLOAD = "=cmd|' /C calc'!A0<img src=x onerror=alert(1)>|a\n|injected|"
MODEL = "<script>alert('model')</script>|x"
LAKE_SKIP = (".lock", ".dbt")   # .lock holds the writer pid; .dbt/ is dbt's log and target scratch


def _lake_digest(root: Path):
    return {k: v for k, v in tree_digest(root).items() if not k.startswith(LAKE_SKIP)}


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# ------------------------------------------------------------------ 2. reports escape what they did not write

def test_report_escapes_names_model_id_and_csv_formulas(built, tmp_path):
    po = tmp_path / "po"
    shutil.copytree(built["po"], po)
    db = next(po.glob("e2e/*/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"))
    c = sqlite3.connect(db)   # the reproducer's inject.py: payload before the top kernel names and op types
    ids = [r[0] for r in c.execute("SELECT name FROM COMPUTE_TASK_INFO GROUP BY name ORDER BY count(*) DESC LIMIT 3")]
    ids += [r[0] for r in c.execute("SELECT opType FROM COMPUTE_TASK_INFO GROUP BY opType ORDER BY count(*) DESC LIMIT 3")]
    for i in ids:
        c.execute("UPDATE STRING_IDS SET value = ? || value WHERE id = ?", (PAYLOAD, i))
    c.commit()
    c.close()
    before = tree_digest(po)
    out = tmp_path / "out"
    r = _invoke("run", po, "--run-id", "inj", "--lake", tmp_path / "lake", "--out", out, "--lang", "en",
                "--model-id", MODEL)
    assert r.exit_code == 0, r.output
    assert tree_digest(po) == before   # inputs byte-identical
    cells = [cell for row in csv.reader(open(out / "operator_diff_table.csv", encoding="utf-8-sig")) for cell in row]
    injected = [cell for cell in cells if "cmd|" in cell]
    assert injected and all(cell.startswith("'=cmd|") for cell in injected), injected
    assert not [cell for cell in cells if cell[:1] in ("=", "+", "-", "@", "\t", "\r")]
    md = (out / "train_infer_op_diff_report.md").read_text(encoding="utf-8")
    assert "<script" not in md and "<img" not in md and "onerror=alert(1)>" not in md
    assert "&lt;script&gt;alert('model')&lt;/script&gt;\\|x" in md
    assert "&lt;img src=x onerror=alert(1)&gt;\\|a \\|injected\\|" in md
    # no table row broken: every line that starts a table row has the column count of its header
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert not [line for line in md.splitlines() if line.startswith("|injected|")]
    for line in rows:
        assert line.rstrip().endswith("|"), line
    assert '<span style="color:' in md   # tilake's own markup is kept


def test_runs_shows_markup_literally(built, tmp_path):
    lake = tmp_path / "lake"
    r = _invoke("ingest", built["po"], "--run-id", "r1", "--model-id", "[bold red]X[/bold red]Y", "--lake", lake)
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["runs", "--lake", str(lake)], env={"COLUMNS": "250"})
    assert r.exit_code == 0 and "[bold red]X[/bold red]Y" in r.output, r.output


# ------------------------------------------------------------------ 3. dump files stay inside the dump

# the `pair` fixture (two-boundary msprobe dumps and their map) is in conftest.py


def _set_data_name(dump_dir: Path, entry: str, name):
    p = dump_dir / "dump.json"
    d = json.loads(p.read_text())
    d["data"][entry]["output"][0]["data_name"] = name
    p.write_text(json.dumps(d))


def _analyze(tmp_path, train, infer, mp, *extra):
    return _invoke("dumps", "analyze", "--train", train.parents[1], "--infer", infer.parents[1], "--map", mp,
                   "--out", tmp_path / "out", "--no-charts", *extra)


@pytest.mark.parametrize("name", ["../../../infer/step0/rank0/dump_tensor_data/Module.m.A.Lin.forward.0.output.0.pt",
                                  "/etc/passwd", "sub/x.pt", "..", "a\\..\\b.pt", ["x.pt"]])
def test_data_name_outside_the_dump_is_never_opened(pair, tmp_path, monkeypatch, name):
    train, infer, mp = pair
    _set_data_name(train, "Module.m.A.Lin.forward.0", name)
    opened = []
    real = reader.load_pt
    monkeypatch.setattr(reader, "load_pt", lambda p: (opened.append(Path(p)), real(p))[1])
    before = tree_digest(tmp_path / "train"), tree_digest(tmp_path / "infer")
    r = _analyze(tmp_path, train, infer, mp, "--run-id", "esc", "--lake", tmp_path / "lake", "--no-build")
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert (tree_digest(tmp_path / "train"), tree_digest(tmp_path / "infer")) == before
    assert opened and all(p.parent.name == "dump_tensor_data" and p.parents[1] in (train, infer) for p in opened)
    rows = {b["boundary"]: b for b in json.loads((tmp_path / "out" / "boundary_results.json").read_text())["boundaries"]}
    why = "is missing" if isinstance(name, list) else "not a plain file name inside dump_tensor_data/"
    assert rows["a"]["status"] == "MISSING" and why in rows["a"]["reason"], rows["a"]
    assert rows["b"]["status"] == "EXACT"


@pytest.mark.parametrize("kind", ["text", "symlink_to_text", "empty", "zeros"])
def test_pt_that_is_not_a_torch_file_marks_the_boundary(pair, tmp_path, kind):
    train, infer, mp = pair
    pt = train / "dump_tensor_data" / "Module.m.A.Lin.forward.0.output.0.pt"
    text = tmp_path / "passwd"
    text.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    pt.unlink()
    if kind == "text":
        shutil.copy(text, pt)
    elif kind == "symlink_to_text":
        pt.symlink_to(text)
    elif kind == "empty":
        pt.write_bytes(b"")
    else:
        pt.write_bytes(b"\0" * 4096)
    r = _analyze(tmp_path, train, infer, mp)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    rows = {b["boundary"]: b for b in json.loads((tmp_path / "out" / "boundary_results.json").read_text())["boundaries"]}
    # a link out of the dump is never read (issue 33); the other kinds are read and refused as not torch files
    why = "symlink that leads out of the dump" if kind == "symlink_to_text" else "cannot load tensor file"
    assert rows["a"]["status"] == "MISSING" and why in rows["a"]["reason"], rows["a"]
    assert "\n" not in rows["a"]["reason"]
    with pytest.raises(TilakeError, match="not a torch file"):
        reader.load_pt(pt)


def test_card_values_and_names_are_escaped_in_the_alignment_report(pair, tmp_path):
    train, infer, mp = pair
    r = _analyze(tmp_path, train, infer, mp, "--card", f"model={MODEL}", "--card", "goal=<img src=x onerror=alert(1)>\nx")
    assert r.exit_code == 0, r.output
    md = (tmp_path / "out" / "alignment_report.md").read_text(encoding="utf-8")
    html = (tmp_path / "out" / "alignment_report.html").read_text(encoding="utf-8")
    assert "<script" not in md and "<img" not in md and "&lt;script&gt;" in md and "\\|x" in md
    assert "<script" not in html and "<img src=x" not in html
    assert "<svg" in html or "ULP histograms" in html   # tilake's own markup still renders


# ------------------------------------------------------------------ 4. broken machines get one line

def _umount(path: Path) -> None:
    """Unmount; lazily when busy (dbt-duckdb may still hold a file of the lake in this process)."""
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _ro_lake(src: Path, tmp_path: Path):
    """A read-only view of ``src``: a read-only bind mount as root, else ``chmod -R a-w``."""
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        ok = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True).returncode == 0
        if ok and subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True).returncode == 0:
            return ro, lambda: _umount(ro)
        if ok:
            subprocess.run(["umount", str(ro)], capture_output=True)
        pytest.skip("root without mount rights: cannot make a read-only lake (chmod does not stop root)")
    for d, _dirs, files in os.walk(src):
        for f in files:
            os.chmod(Path(d) / f, 0o444)
        os.chmod(d, 0o555)
    return src, lambda: [os.chmod(d, 0o755) for d, _x, _y in os.walk(src)]


def test_read_only_lake_ends_in_one_line(built, lake_copy, tmp_path, pair):
    before = _lake_digest(lake_copy)
    lake, undo = _ro_lake(lake_copy, tmp_path)
    train, infer, mp = pair
    try:
        for args in (["ingest", built["po"], "--run-id", "r2"], ["build"], ["runs", "rm", "r1"],
                     ["dumps", "analyze", "--train", train.parents[1], "--infer", infer.parents[1], "--map", mp,
                      "--out", tmp_path / "out", "--no-charts", "--run-id", "d1"]):
            r = _invoke(*args, "--lake", lake)
            assert r.exit_code == 2, (args, r.output)
            line = one_error_line(r.output.split("report_html:")[-1] if args[0] == "dumps" else r.output)
            assert str(lake) in line and ("read-only" in line or "permission denied" in line), line
            assert _lake_digest(lake) == before
        r = _invoke("sql", "select count(*) from dim_runs", "--lake", lake)   # reads still work
        assert r.exit_code == 0, r.output
    finally:
        undo()
    assert _lake_digest(lake_copy) == before


def test_full_disk_while_copying_the_warehouse(lake_copy, monkeypatch):
    from tilake.lake import warehouse

    before = _lake_digest(lake_copy)

    def full(src, dst, *a, **k):
        Path(dst).write_bytes(b"x" * 10)
        raise OSError(errno.ENOSPC, "No space left on device", str(src), None, str(dst))

    monkeypatch.setattr(warehouse.shutil, "copy2", full)
    r = _invoke("build", "--lake", lake_copy)
    assert r.exit_code == 2
    line = one_error_line(r.output)
    assert line == (f"error: {lake_copy}: cannot write to the lake (.build/warehouse.duckdb): no space left on "
                    "device; the lake was left as it was"), line
    assert _lake_digest(lake_copy) == before


@pytest.fixture()
def tiny_fs(tmp_path):
    """A 20 MB tmpfs (root with mount rights only)."""
    m = tmp_path / "small"
    m.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(m)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root with mount rights for a small tmpfs")
    try:
        yield m
    finally:
        _umount(m)


def _fill(m: Path, leave_kb: int):
    (m / "filler").unlink(missing_ok=True)
    st = os.statvfs(m)
    free = st.f_bavail * st.f_frsize
    with open(m / "filler", "wb") as f:
        f.write(b"\0" * max(0, free - leave_kb * 1024))


def test_full_disk_build_and_ingest_end_in_one_line(built, tiny_fs):
    lake = tiny_fs / "lake"
    shutil.copytree(built["lake"], lake, symlinks=True)
    before = _lake_digest(lake)
    wh_kb = (lake / "warehouse.duckdb").stat().st_size // 1024
    cases = [(wh_kb // 2, ["build"]), (40, ["ingest", built["po"], "--run-id", "r2"]), (wh_kb + 1500, ["build"])]
    for leave, args in cases:   # A: no room for the warehouse copy; C: ingest; B: copy fits, dbt's writes do not
        _fill(tiny_fs, leave)
        r = _invoke(*args, "--lake", lake)
        assert r.exit_code == 2, (args, r.output[-2000:])
        line = one_error_line(r.output)
        assert line.startswith(f"error: {lake}: cannot write to the lake") and "no space left on device" in line, line
        assert _lake_digest(lake) == before, args
    (tiny_fs / "filler").unlink()
    r = _invoke("sql", "select run_id from dim_runs", "--lake", lake)
    assert r.exit_code == 0 and "r1" in r.output


def test_lake_path_with_question_mark_is_refused_up_front(built, tmp_path):
    lake = tmp_path / "a?b"
    r = _invoke("ingest", built["po"], "--run-id", "r1", "--lake", lake)
    assert r.exit_code == 2
    assert "contains '?'" in one_error_line(r.output) and not lake.exists()


# ------------------------------------------------------------------ 5. run ids

@pytest.mark.parametrize("rid", ["-", "--lake", "-x", ".", "..", "...", "....", "a/b", "", "a b"])
def test_unsafe_run_ids_are_refused(built, tmp_path, rid):
    with pytest.raises(TilakeError, match="invalid run id"):
        validate_run_id(rid)
    r = _invoke("ingest", built["po"], f"--run-id={rid}", "--lake", tmp_path / "lake")
    assert r.exit_code == 2 and "invalid run id" in one_error_line(r.output)
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize("rid", ["r1", "a.b", "a-", "_x", ".hidden-ok", "1..2"])
def test_safe_run_ids_pass(rid):
    assert validate_run_id(rid) == rid


def test_lake_write_error_blames_only_the_lake(tmp_path):
    from tilake.lake.store import lake_write_error

    root = tmp_path / "lake"
    assert lake_write_error(root, OSError(errno.EACCES, "Permission denied", str(tmp_path / "input.db"))) is None
    e = lake_write_error(root, OSError(errno.EROFS, "Read-only file system", str(root / ".lock")))
    assert str(e) == f"{root}: cannot write to the lake (.lock): the lake is on a read-only file system; the lake was left as it was"
    wrapped = TilakeError("input.db: cannot read profiler tables")
    wrapped.__cause__ = RuntimeError(f'IO Error: Could not write file "{root}/.staging/x": No space left on device')
    assert "no space left on device" in str(lake_write_error(root, wrapped))
    assert lake_write_error(root, ValueError("bad input")) is None
    assert Lake(root).root == root


def test_dump_names_print_literally_on_the_console(tmp_path):
    x = torch.ones(2, 2)
    ents = [("Module.m.A.Lin.forward.0", None, {"output": [x]}), ("Module.m.B.Bold.forward.0", None, {"output": [x]}),
            ("Tensor.Red.0.forward", None, {"output": [x]})]
    train, infer = write_dump(tmp_path / "train", ents), write_dump(tmp_path / "infer", ents)
    for d in (train, infer):   # names with rich closing tags (a '/' cannot be in the .pt file name itself)
        for f in ("dump.json", "construct.json"):
            t = (d / f).read_text().replace('"Module.m.B.Bold.forward.0"', '"Module.m.B.[/bold].forward.0"')
            (d / f).write_text(t.replace('"Tensor.Red.0.forward"', '"Tensor.[/red].0.forward"'))
    r = CliRunner().invoke(main, ["dumps", "probe", "--train", str(train.parents[1]), "--infer", str(infer.parents[1])],
                           env={"COLUMNS": "250"})
    assert r.exit_code == 0 and r.exception is None, r.output
    assert "[/bold]" in r.output
