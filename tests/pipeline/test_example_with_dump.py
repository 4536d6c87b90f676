"""``tilake example --with-dump`` end to end (profile + dump of one synthetic step, one run id) and the
dump report's profile ⋈ dump section: joined (the first divergence names its kernels), refused (the dump's
step differs from the profile's), no profile in the lake, no lake; the SQL cookbook of docs/alignment.md
run through ``tilake sql --param run_id=…``; without PyTorch the command stops with one line.

Inputs: the bundled synthetic profile (``tilake.synth``, 28 layers) and the synthetic msprobe dump pair of
``tilake.synth.msprobe_step`` (train HF eager attention vs infer SDPA: first divergence L0.attn_core.out).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.pipeline.example import JOINED_RUN_ID

DOCS = Path(__file__).resolve().parents[2] / "docs" / "alignment.md"
QUERIES = Path(__file__).resolve().parents[2] / "reports" / "queries"
FIRST_ATTENTION = ("🔴 attention: FlashAttentionScore (train) vs FusedInferAttentionScore (infer), different_impl, "
                   "layer 0 positions 6 ↔ 6")


def _join_section(md: str) -> str:
    return md[md.index("## Profile ⋈ dump"):md.index("## Hypotheses")]


def _analyze(train: Path, infer: Path, out: Path, *extra: str) -> str:
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(train), "--infer", str(infer), "--out", str(out),
                                  "--card", "model=Qwen/Qwen3-0.6B", "--no-charts", "--json", *extra])
    assert r.exit_code == 0, r.output[-3000:]
    return (out / "alignment_report.md").read_text(encoding="utf-8")


def _sql(lake: Path, query: str, **params) -> list:
    args = ["sql", "--lake", str(lake), "--format", "json", query]
    for k, v in params.items():
        args += ["--param", f"{k}={v}"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, (query, r.output[-2000:])
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def ex(tmp_path_factory):
    """Everything read from one example run, before the later analyses rewrite the run's dump rows."""
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("with_dump")
    out = tmp / "ex"
    r = CliRunner().invoke(main, ["example", "--with-dump", "--out", str(out), "--lang", "en", "--json"])
    assert r.exit_code == 0, r.output[-3000:]
    got = json.loads(r.stdout)
    lake = Path(got["lake"])
    facts = {"summary": got, "lake": lake, "out": out,
             "dump_md": Path(got["outputs"]["dump_report"]).read_text(encoding="utf-8"),
             "dump_html": Path(got["outputs"]["dump_report_html"]).read_text(encoding="utf-8"),
             "op_md": Path(got["outputs"]["report"]).read_text(encoding="utf-8")}
    blocks = re.findall(r"```sql\n(.*?)```", DOCS.read_text(encoding="utf-8").split("## SQL cookbook", 1)[1], re.S)
    facts["cookbook"] = [_sql(lake, b, run_id=JOINED_RUN_ID) for b in blocks]
    facts["named"] = _sql(lake, (QUERIES / "alignment_boundary_kernels.sql").read_text(), run_id=JOINED_RUN_ID)
    tr, inf = out / "dumps" / "train" / "step0" / "rank0", out / "dumps" / "infer" / "step0" / "rank0"
    # a dump run without a profile in the same lake, and one without any lake
    facts["no_profile_md"] = _analyze(tr, inf, tmp / "dump-only", "--run-id", "dump-only", "--lake", str(lake))
    facts["no_lake_md"] = _analyze(tr, inf, tmp / "no-lake")
    # the same dumps as step 3 under the example's run id (profile step 0): the join is refused
    for side, src in (("train", tr), ("infer", inf)):
        shutil.copytree(src, tmp / "step3" / side / "step3" / "rank0")
    facts["refused_md"] = _analyze(tmp / "step3" / "train" / "step3" / "rank0", tmp / "step3" / "infer" / "step3" / "rank0",
                                   tmp / "refused", "--run-id", JOINED_RUN_ID, "--lake", str(lake))
    return facts


def test_example_with_dump_writes_profile_dump_and_both_joined_reports(ex):
    got, out = ex["summary"], ex["out"]
    assert got["run_id"] == JOINED_RUN_ID and got["status"] == "ok" and got["grade_counts"]["red"] == 1
    for side in ("train", "infer"):
        assert (out / "dumps" / side / "step0" / "rank0" / "dump.json").is_file()
    assert (out / "profiler_output").is_dir() and (out / "dump_report" / "report_source.json").is_file()
    # the operator diff report: its join section names the first divergence's kernels
    op = ex["op_md"]
    assert ("First divergence `L0.attn_core.out` (NOT_EXACT" in op
            and "🔴 attention: different_impl layer 0: FlashAttentionScore (positions 6) ↔ FusedInferAttentionScore (6)"
            in op), op[op.find("## 9"):]


def test_dump_report_lists_the_kernels_of_the_first_divergence(ex):
    sec = _join_section(ex["dump_md"])
    assert f"Joined with the profile of run `{JOINED_RUN_ID}`" in sec
    assert "- First divergence `L0.attn_core.out` (NOT_EXACT" in sec
    lines = [ln.strip() for ln in sec.splitlines() if ln.strip().startswith("- ")]
    # RoPE is not listed: its own boundaries L0.q_after_rope / L0.k_after_rope are bitwise equal (EXACT)
    assert lines[1:3] == ["- " + FIRST_ATTENTION,
                          "- 🟢 kv_cache: — (train) vs ReshapeAndCacheNdKernel (infer), only_infer, layer 0 positions — ↔ 5"]
    assert "rope" not in "\n".join(lines[:4])
    assert "- Computed by (profile of the same step): 🔴 attention (different_impl)" in ex["dump_md"]
    assert "🟠 rope (split)" not in ex["dump_md"]
    html = ex["dump_html"]
    assert 'id="profile-dump"' in html and FIRST_ATTENTION in html


def test_dump_report_without_a_profile_says_so(ex):
    sec = _join_section(ex["no_profile_md"])
    assert "No profile of run `dump-only` in this lake" in sec and "FlashAttentionScore" not in sec
    assert "tilake run PROFILER_OUTPUT --run-id dump-only" in sec
    sec = _join_section(ex["no_lake_md"])
    assert "No profile joined: this analysis was not written into a lake" in sec and "--with-dump" in sec


def test_dump_report_refuses_the_join_when_the_step_differs(ex):
    sec = _join_section(ex["refused_md"])
    assert "Not joined (refused): step differs: dump step 3, profile step 0." in sec
    assert "FlashAttentionScore" not in sec and "Computed by" not in ex["refused_md"]


def test_sql_cookbook_of_the_docs_runs_with_the_run_id_parameter(ex):
    first, confirm, relations, odd = ex["cookbook"]
    assert {(r["module"], r["relation"]) for r in first} == {("attention", "different_impl"), ("kv_cache", "only_infer")}
    att = next(r for r in first if r["module"] == "attention")
    assert (att["boundary"], att["train_kernels"], att["infer_kernels"], att["train_first"], att["infer_first"]) == (
        "L0.attn_core.out", "FlashAttentionScore", "FusedInferAttentionScore", 6, 6)
    by_mod = {r["module"]: r for r in confirm}
    assert sorted(by_mod) == ["attention", "residual_norm", "rope"] and by_mod["attention"]["grade"] == "🔴"
    assert by_mod["attention"]["dump_boundaries"] == ("L0.attn_core.out (NOT_EXACT, independent_point); "
                                                      "L1.attn_core.out (NOT_EXACT, propagated)")
    rel = {r["relation"]: r for r in relations}
    assert set(rel) == {"same", "fused", "different_impl", "split", "only_train", "only_infer"}
    assert all(r["layers"] == 28 for r in relations) and rel["different_impl"]["groups"] == 28
    assert [r["layer"] for r in odd] == [0] and "AddRmsNormBias" in odd[0]["odd_reason"]
    # a named query of the report, run as it is
    assert {r["boundary"] for r in ex["named"] if r["is_first_divergence"]} == {"L0.attn_core.out"}


def test_sql_param_is_refused_without_a_query_and_missing_values_fail_in_one_line(tmp_path):
    r = CliRunner().invoke(main, ["sql", "--lake", str(tmp_path / "lake"), "--param", "run_id=x"])
    assert r.exit_code == 2 and "--format/--output/--param need a QUERY" in r.output


def test_with_dump_without_torch_stops_with_one_line_and_writes_nothing(tmp_path):
    shim = tmp_path / "no_torch"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    here = [str(Path(p).resolve()) for p in sys.path if p and (Path(p) / "tilake" / "cli.py").is_file()]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim)] + here[:1]))
    r = subprocess.run([sys.executable, "-m", "tilake.cli", "example", "--with-dump", "--out", str(tmp_path / "ex")],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [
        "error: this command needs PyTorch: pip install '.[torch]' (in the tilake source folder)"]
    assert not (tmp_path / "ex" / "profiler_output").exists()
