"""Malformed text-export rows and op_statistic-only ranks (issue #12 items 5 and 7).

Inputs: ``tilake.synth`` text exports (the CSV layout of ``../shared/fixtures/profiler/msinsight``
``ASCEND_PROFILER_OUTPUT/*.csv``: tab after Start Time, tripled quotes around shapes), edited as
``../shared/fixtures/reliability/csv-malformed-rows-silent/run.sh`` edits them, plus that real file.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from profiler_helpers import llm_pair

from tilake.errors import TilakeError
from tilake.ingest.profiler.discover import explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.ingest.profiler.text import kernel_rows, read_csv
from tilake.lake.store import Lake
from tilake.synth.population import JobConfig, infer_population
from tilake.synth.text import write_text_export

REAL = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "profiler" / "msinsight" / "server" / \
    "src" / "test" / "test_data" / "test_rank_0" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"


@pytest.fixture()
def export(tmp_path):
    folder = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    info = write_text_export(folder, infer_population(JobConfig(layers=1)))
    return folder, info


def _edit(path: Path, fn):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(fn(lines)) + "\n")


def test_every_line_cut_to_a_third(export):
    folder, _ = export
    _edit(folder / "kernel_details.csv", lambda ls: [l[:len(l) // 3] for l in ls])
    with pytest.raises(TilakeError, match=r"kernel_details.csv: malformed CSV at line \d+ .*unterminated quote"):
        kernel_rows(folder)


def test_one_row_cut_in_half(export):
    folder, _ = export

    def cut(ls):
        ls[5] = ls[5][: len(ls[5]) // 2]
        return ls
    _edit(folder / "kernel_details.csv", cut)
    with pytest.raises(TilakeError) as ei:
        kernel_rows(folder)
    assert "1 of" in str(ei.value) and "rows are cut or overlong" in str(ei.value) and "(lines 6 (" in str(ei.value)


def test_unterminated_quote_at_the_end(export):
    folder, info = export
    with open(folder / "kernel_details.csv", "a") as f:
        f.write('1,2,3,"unterminated\n')
    n = len((folder / "kernel_details.csv").read_text().splitlines())
    with pytest.raises(TilakeError, match=rf"malformed CSV at line {n} \(unexpected end of data"):
        kernel_rows(folder)


@pytest.mark.skipif(not REAL.exists(), reason="needs ../shared/fixtures/profiler/msinsight")
def test_real_row_one_field_short_is_kept():
    header, rows = read_csv(REAL, (("Name",), ("Start Time(us)",), ("Duration(us)",)))
    assert len(header) == 32 and len(rows) == 21
    assert rows[15]["Name"] == "FlashAttentionScore" and rows[15]["Duration(us)"] == "1.8414"


def test_op_statistic_only_rank_counts_kernels(tmp_path):
    """Item 7: only op_statistic.csv → the kernel count is the sum of Count, and names are said to be missing."""
    llm_pair(tmp_path / "cap", infer_pop=infer_population(JobConfig(layers=1)))
    folder = tmp_path / "infer" / "node_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    write_text_export(folder, infer_population(JobConfig(layers=1)))
    for name in ("kernel_details.csv", "api_statistic.csv"):
        (folder / name).unlink()
    counts = [int(line.split(",")[2]) for line in (folder / "op_statistic.csv").read_text().splitlines()[1:]]
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "r", explicit(tmp_path / "cap" / "train", "train")
                         + explicit(folder.parent, "infer"), progress=False)
    inf = [c for c in res.captures if c.capture.side == "infer"][0]
    assert inf.kernels == sum(counts) == 184 and len(counts) == 16
    assert inf.reason == ("device rows from op_statistic.csv: 184 kernels in 16 op-type rows (sum of Count); "
                          "kernel names are not available at that level; no step markers (STEP_TIME, "
                          "ProfilerStep#N, kernel_details Step Id): all kernels counted, not restricted to common steps")
