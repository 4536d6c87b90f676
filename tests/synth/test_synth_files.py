"""Tests of the synthetic text exports and profiler_output folders (tilake.synth): headers equal the
real files, folders hold exactly the expected files, text and DB share one clock, the generator's
CLI and big-DB writer. The DB writer's own tests: test_synth.py."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from synth_helpers import FIX_TEXT, ro, table_info

from tilake import synth
from tilake.synth import (
    JobConfig,
    infer_population,
    make_profiler_output,
    train_population,
    write_analysed,
    write_big_db,
    write_profiler_db,
    write_text_export,
)
from tilake.synth import db as synth_db

SMALL = JobConfig(layers=2)


# --- text exports -------------------------------------------------------------------------------------
def read_header(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return next(csv.reader(fh))


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_text_headers_equal_real_fixture(tmp_path, level):
    s = write_text_export(tmp_path, infer_population(SMALL), level=level)
    real = FIX_TEXT / level / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
    if not real.exists():
        pytest.skip(f"real text fixture not available: {real}")
    for name in s["files"]:
        assert read_header(tmp_path / name) == read_header(real / name), name
    expected = {"kernel_details.csv", "operator_details.csv"} | (set() if level == "level0" else
                                                                 {"op_statistic.csv", "api_statistic.csv"})
    assert set(s["files"]) == expected == {p.name for p in tmp_path.iterdir()}


def test_text_quirks_and_counts(tmp_path):
    pop = train_population(SMALL)
    s = write_text_export(tmp_path, pop, level="level1")
    with open(tmp_path / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == s["kernel_rows"] == pop.compute_kernel_count() + pop.communication_op_count()
    assert all(r["Start Time(us)"].endswith("\t") for r in rows)
    mm = next(r for r in rows if r["Type"] == "MatMulV2")
    assert mm["Input Shapes"].startswith('"') and mm["Input Shapes"].endswith('"') and mm["Model ID"] == "4294967295"
    hcom = next(r for r in rows if r["Type"] == "hcom_allReduce_")
    assert (hcom["Task ID"], hcom["Accelerator Core"], hcom["Input Shapes"]) == ("N/A", "HCCL", "N/A")
    raw = (tmp_path / "kernel_details.csv").read_bytes()
    assert b'"""513,1024;1024,4096"""' in raw and b"\r\n" in raw
    with open(tmp_path / "op_statistic.csv", newline="", encoding="utf-8") as fh:
        stat = {r["OP Type"]: int(r["Count"]) for r in csv.DictReader(fh)}
    assert stat == dict(pop.op_type_counts(include_communication=False))
    with open(tmp_path / "api_statistic.csv", newline="", encoding="utf-8") as fh:
        api = {(r["Level"], r["API Name"]): int(r["Count"]) for r in csv.DictReader(fh)}
    assert api[("acl", "aclnnFlashAttentionScore")] == pop.op_type_counts()["FlashAttentionScore"]
    assert api[("node", "launch")] == len(pop.kernels())


# --- folder layouts -----------------------------------------------------------------------------------
def rel_files(root: Path):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


RAW_FILES = ["FRAMEWORK/torch.op_mark", "FRAMEWORK/torch.op_range", "profiler_metadata.json"]


def test_profiler_output_layout_8_ranks_2_unparsed(tmp_path):
    out = tmp_path / "profiler_output"
    r = make_profiler_output(out, train_ranks=8, unparsed_train_ranks=[3, 6], infer_form="raw", job=JobConfig(layers=1))
    assert sorted(p.name for p in out.iterdir()) == ["agent_loop_rollout_replica_0", "e2e"]
    e2e = sorted((out / "e2e").iterdir())
    assert len(e2e) == 8 and all(p.name.endswith("_ascend_pt") for p in e2e)
    assert r["expected"]["parsed_train_ranks"] == [0, 1, 2, 4, 5, 7]
    for entry in r["train"]:
        d = Path(entry["dir"])
        rank = entry["rank"]
        files = rel_files(d)
        prof = [f for f in files if f.startswith("PROF_")]
        assert {f.split("/", 1)[1] for f in prof} == {"host/info.json", "host/data/api_event.data.slice_0",
                                                     f"device_{rank}/data/ts_track.data.0.slice_0",
                                                     f"device_{rank}/start_info.{rank}"}
        rest = sorted(set(files) - set(prof))
        db = [f"ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db"] if rank not in (3, 6) else []
        assert rest == sorted(db + RAW_FILES + [f"profiler_info_{rank}.json"])
        meta = json.loads((d / "profiler_metadata.json").read_text())
        assert meta["parallel_group_info"][synth_db.HCCL_GROUP]["global_ranks"] == list(range(8))
        info = json.loads((d / f"profiler_info_{rank}.json").read_text())
        assert info["config"]["experimental_config"]["_profiler_level"] == "Level1"
        if db:
            con = ro(d / db[0])
            assert con.execute("SELECT rankId FROM RANK_DEVICE_MAP").fetchone()[0] == rank
            assert con.execute("SELECT COUNT(*) FROM COMPUTE_TASK_INFO").fetchone()[0] == \
                r["expected"]["train_compute_kernels"] == entry["summary"]["compute_kernels"]
    infer = Path(r["infer"][0]["dir"])
    assert infer.parent.name == "agent_loop_rollout_replica_0"
    assert not (infer / "ASCEND_PROFILER_OUTPUT").exists()
    assert json.loads((infer / "profiler_info_0.json").read_text())["config"]["experimental_config"][
        "_export_type"] == "text"
    # the analyse() stand-in parses it, then refuses to parse twice
    a = write_analysed(infer, "db")
    assert a["db"]["compute_kernels"] == r["expected"]["infer_kernels"]
    assert a["db"]["unlinked_kernels"] == 8       # _triton_rope: 1 layer × 8 steps
    with pytest.raises(ValueError, match="already parsed"):
        write_analysed(infer, "db")


@pytest.mark.parametrize("form", ["db", "text"])
def test_infer_forms(tmp_path, form):
    r = make_profiler_output(tmp_path / "po", infer_form=form, job=JobConfig(layers=1), level="level0")
    d = Path(r["infer"][0]["dir"])
    outs = sorted(p.name for p in (d / "ASCEND_PROFILER_OUTPUT").iterdir())
    csvs = ["api_statistic.csv", "kernel_details.csv", "op_statistic.csv", "operator_details.csv"]
    assert outs == (sorted(csvs + ["ascend_pytorch_profiler_0.db"]) if form == "db" else csvs)
    assert r["infer"][0]["summary"]["op_type_counts"] == r["expected"]["infer_op_types"]
    # the training side was written at level0, inference stays level1 (vllm-ascend)
    tdb = ro(r["train"][0]["db"])
    assert tdb.execute("SELECT DISTINCT s.value FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.opType"
                       ).fetchall() == [("N/A",)]


def test_raw_writer_refuses_foreign_folder(tmp_path):
    with pytest.raises(ValueError, match="no synthetic raw profiler data"):
        write_analysed(tmp_path, "db")
    with pytest.raises(FileExistsError):
        (tmp_path / "x").mkdir()
        (tmp_path / "x" / "f").write_text("")
        make_profiler_output(tmp_path / "x")


def test_cli_and_big_db(tmp_path):
    out = tmp_path / "po"
    p = subprocess.run([sys.executable, "-m", "tilake.synth", "profiler-output", str(out), "--layers", "1",
                        "--infer-form", "text", "--seed", "3"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["infer"][0]["form"] == "text"
    for engine in ("duckdb", "sqlite"):
        s = write_big_db(tmp_path / f"big_{engine}.db", 5000, engine=engine)
        con = ro(s["path"])
        assert con.execute("SELECT (SELECT COUNT(*) FROM TASK), (SELECT COUNT(*) FROM COMPUTE_TASK_INFO)"
                           ).fetchone() == (5000, 5000)
        assert table_info(con, "TASK") == [(n, "INTEGER", 0) for n in synth.columns_of(synth.ddl()["TASK"])]
        assert con.execute("SELECT COUNT(*) FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.opType "
                           "WHERE s.value = 'FlashAttentionScore'").fetchone()[0] == 714   # i % 7 == 2, i < 5000
    p = subprocess.run([sys.executable, "-m", "tilake.synth", "big-db", str(tmp_path / "big_sqlite.db"),
                        "--rows", "10"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("error: ")


def test_text_export_and_db_share_one_clock(tmp_path):
    pop = infer_population(SMALL)
    write_profiler_db(tmp_path / "x.db", pop, seed=5)
    write_text_export(tmp_path / "out", pop, seed=5)
    db_starts = sorted(r[0] for r in ro(tmp_path / "x.db").execute(
        "SELECT t.startNs FROM TASK t JOIN COMPUTE_TASK_INFO c USING (globalTaskId)"))
    with open(tmp_path / "out" / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        csv_starts = sorted(int(Decimal(r["Start Time(us)"].strip()) * 1000) for r in csv.DictReader(fh))
    assert len(csv_starts) == len(db_starts)
    assert max(abs(a - b) for a, b in zip(csv_starts, db_starts)) <= 1     # µs with 3 decimals


def test_insert_after_models_a_version_change(tmp_path):
    pop = infer_population(SMALL)
    assert pop.insert_after("FusedInferAttentionScore", "Cast") == 16      # e.g. a newer kernel adds a cast
    s = write_profiler_db(tmp_path / "v.db", pop)
    assert s["op_type_counts"]["Cast"] == 16 + 8
    ops = [op for op in pop.ops if op.kernels and op.kernels[0].op_type == "Cast" and op.layer >= 0]
    assert len(ops) == 16 and all(op.module == "attention" for op in ops)


def test_text_header_variants(tmp_path):
    write_text_export(tmp_path, infer_population(SMALL), schema="8.5", block_columns="blockNum", rank=3)
    h = read_header(tmp_path / "kernel_details.csv")
    assert h[:2] == ["Step Id", "Device_id"] and "Block Num" in h and "Mix Block Num" in h and "Block Dim" not in h
    assert read_header(tmp_path / "op_statistic.csv")[:2] == ["Device_id", "OP Type"]
    assert read_header(tmp_path / "api_statistic.csv")[:2] == ["Device_id", "Level"]
    with open(tmp_path / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        assert {r["Device_id"] for r in csv.DictReader(fh)} == {"3"}
