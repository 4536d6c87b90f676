"""Issue 36: the operator diff report reads verdict-first (MD, HTML, console), its grades read without emoji or
CJK fonts, its English table fits 1,400 px with long GPU kernel names, the layer is drawn side by side, long
lists fold to counts, and the uncatalogued-kernel warning names --rules and the backend's seed file."""
from __future__ import annotations

import copy
import io
import json
import re
import shutil
import subprocess

import pytest

from tilake.reports.captures import catalog_hint
from tilake.reports.layer_picture import layer_geometry, layer_svg
from tilake.reports.op_diff import csv_rows, load_facts, render_markdown
from tilake.reports.op_diff_html import render_html
from tilake.reports.op_diff_verdict import op_diff_verdict, verdict_lines
from tilake.reports.tables import comparison_records, mart_extras

# a real CUDA kernel name of the shared H100 trace (fixtures/real_gpu_traces), 270 characters
GPU_KERNEL = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
              "false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> "
              ">, false, true, false, false, false, true, false>(pytorch_flash::Flash_fwd_params)")


@pytest.fixture(scope="module")
def facts(example_run):
    out, res = example_run
    return load_facts(out / "lake" / "warehouse.duckdb", res.run_id)


def page(example_run, facts, lang):
    wh = example_run[0] / "lake" / "warehouse.duckdb"
    ex = mart_extras(wh, example_run[1].run_id)
    return render_html(facts, comparison_records(facts, ex, csv_rows(facts, lang), lang), ex["grades"], lang)


def test_markdown_opens_with_the_verdict(example_run):
    out, _ = example_run
    md = (out / "train_infer_op_diff_report.md").read_text(encoding="utf-8")
    heads = re.findall(r"^## (.+)$", md, flags=re.M)
    assert heads[:2] == ["结论", "1. 元信息"]
    top = md.split("## 1. 元信息")[0]
    # the example grades the log-prob forward against the prefill (its default phases), as a user's own run does
    assert "9 行中：1 HIGH, 2 MEDIUM, 2 LOW（训练 megatron vs 推理 vllm）" in top
    lines = [ln for ln in top.splitlines() if ln.startswith("- **")]
    assert [ln.split("**")[1] for ln in lines] == ["HIGH", "MEDIUM", "MEDIUM"]     # the grade word, ASCII
    assert lines[0].startswith('- **HIGH** <span style="color:red">🔴 高差异</span> **注意力**: 训练 FlashAttentionScore，'
                               "推理 FusedInferAttentionScore（算子不同；规则 different_fused_kernel） **P0**:")


def test_english_markdown_verdict_and_folded_lists(facts, monkeypatch):
    md = render_markdown(facts, "en", layer_png={0: "layer_0_side_by_side.png"})
    # the forward-only example lists at most 20 op types a side: nothing folds
    assert "op types, " not in md.split("## 4.")[0]
    top = md.split("## 1. Metadata")[0]
    assert top.splitlines()[2] == "## Verdict"
    assert ("- **HIGH** <span style=\"color:red\">🔴 high</span> **Attention**: training runs FlashAttentionScore, "
            "inference FusedInferAttentionScore (different fused kernels; rule different_fused_kernel) **P0**: ") in top
    # kernel lists longer than the fold limit fold into <details> whose summary counts them
    monkeypatch.setattr("tilake.reports.op_diff.COLLAPSE_AT", 3)
    md = render_markdown(facts, "en", layer_png={0: "layer_0_side_by_side.png"})
    assert re.search(r"<details><summary>\d+ op types, \d+ calls — top 3: MatMulV2 \(", md)
    # the layer picture stands where the table of rows stood; the table folds under it
    assert "![Layer 0 side by side](layer_0_side_by_side.png)\n\n<details><summary>table of the 13 aligned groups" in md


def test_html_verdict_on_top_with_links_and_readable_grades(example_run, facts):
    html = (example_run[0] / "train_infer_op_diff_report.html").read_text(encoding="utf-8")
    assert html.index('<section id="verdict">') < html.index("<h2>1.")
    v = re.search(r'<section id="verdict">(.*?)</section>', html, re.S).group(1)
    assert '<a href="#m-attention">注意力</a>: 训练 FlashAttentionScore' in v
    assert '<span class="gk">HIGH</span>' in v and v.count("<li>") == 3
    # the zh page's badges carry the English word (a font without CJK glyphs still reads the grade)
    assert html.count('<span class="gk">') >= 15
    assert "Noto Sans CJK SC" in html and "Microsoft YaHei" in html and "Noto Color Emoji" in html
    en = page(example_run, facts, "en")
    assert '<span class="gk">' not in en and "<h2>Verdict</h2>" in en


def test_layer_drawn_side_by_side(example_run, facts):
    out, _ = example_run
    groups = facts["alignment"]["groups"][0]
    geo = layer_geometry(groups)
    kernels = sum(len([k for k in (g[s] or "").split("→") if k.strip()]) for g in groups
                  for s in ("train_kernels", "infer_kernels"))
    assert len(geo.boxes) == kernels
    rel = {g["relation"] for g in groups}
    assert {"same", "fused", "split", "different_impl"} <= rel
    # a fused group: two training boxes, one inference box, two lines; a kernel on one side only: no line
    fused = next(g for g in groups if g["relation"] == "fused")
    assert sum(1 for ln in geo.links if ln.relation == "fused") == 2 and fused["train_kernels"] == "Add → RmsNorm"
    assert not [ln for ln in geo.links if ln.relation.startswith("only_")]
    svg = layer_svg(groups, 0, "en")
    assert svg.count("<rect") == kernels + 5 and svg.count("<line") == len(geo.links)   # + 5 legend swatches
    assert 'stroke="#ff7f0e"' in svg and 'stroke="#9467bd"' in svg and 'stroke="#d62728"' in svg
    html = (out / "train_infer_op_diff_report.html").read_text(encoding="utf-8")
    assert '<svg class="layer"' in html and html.index('<svg class="layer"') < html.index("对齐组表（13 组）")
    png = out / "layer_0_side_by_side.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![第 0 层并排图](layer_0_side_by_side.png)" in (out / "train_infer_op_diff_report.md").read_text(encoding="utf-8")


def test_long_kernel_names_are_cut_with_the_whole_name_on_hover(example_run, facts):
    f = long_names(facts)
    en = page(example_run, f, "en")
    short = GPU_KERNEL[:47] + "…" + GPU_KERNEL[-12:]
    assert f'title="{GPU_KERNEL.replace("<", "&lt;").replace(">", "&gt;")}"' in en
    assert short.replace("<", "&lt;").replace(">", "&gt;") in en
    svg = layer_svg(f["alignment"]["groups"][0], 0, "en")
    assert f"<title>{GPU_KERNEL.replace('<', '&lt;').replace('>', '&gt;')} (different implementation)</title>" in svg


def long_names(facts):
    """The example's facts with the attention kernels renamed to a real 270-character CUDA kernel name."""
    f = copy.deepcopy(facts)
    r = next(r for r in f["comparison"] if r["module"] == "attention")
    r["train_ops"] = [GPU_KERNEL]
    for o in f["side_ops"]:
        if o["op_type"] == "FlashAttentionScore":
            o["op_type"] = o["example_kernel"] = GPU_KERNEL
    for g in f["alignment"]["groups"][0]:
        if g["relation"] == "different_impl":
            g["train_kernels"] = GPU_KERNEL
    return f


def test_verdict_never_says_no_difference_without_evidence(facts):
    f = copy.deepcopy(facts)
    f["run"]["infer_evidence"] = "evidence_missing"
    f["run"]["infer_reasons"] = "no device rows in the rollout capture"
    v = op_diff_verdict(f, "en")
    assert v["status"] == "evidence_missing" and v["rows"] == []
    assert v["headline"] == ('No verdict: inference has no device kernel evidence (no device rows in the rollout '
                             'capture); no row below means "no difference"')
    f = copy.deepcopy(facts)
    for r in f["comparison"]:
        r["grade"], r["severity_rank"] = "green", 4
    v = op_diff_verdict(f, "en")
    assert v["status"] == "none_differ" and v["rows"] == [] and "None of the 9 rows is high, medium or low" in v["headline"]
    lines = verdict_lines(op_diff_verdict(facts, "en", most=1))
    assert lines[1].startswith("[HIGH] Attention: training runs FlashAttentionScore")
    assert lines[2:] == ["2 more MEDIUM row(s) in the table below"]


def test_console_summary_starts_with_the_verdict(example_run):
    from rich.console import Console

    from tilake.reports.run_console import print_run_summary

    _, res = example_run
    buf = io.StringIO()
    print_run_summary(res, Console(file=buf, width=200, color_system=None))
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("verdict: 1 HIGH, 2 MEDIUM, 2 LOW of 9 rows (training megatron vs inference vllm)")
    assert lines[1].startswith("  [HIGH] Attention: training runs FlashAttentionScore, inference FusedInferAttentionScore")
    assert lines[2].startswith("  [MEDIUM] Residual + norm:") and lines[4].startswith("run example-qwen3-0.6b-grpo:")


def test_catalog_hint_names_rules_and_the_backends_seed():
    assert catalog_hint(["trace"], "en") == ("add them to op_catalog_torch.csv in a rules folder (--rules DIR, "
                                            "$TILAKE_RULES or <lake>/rules/; copy the header of "
                                            "dbt_project/seeds/op_catalog_torch.csv), then tilake build")
    assert "op_catalog.csv in a rules folder" in catalog_hint(["db", None], "en")
    assert "op_catalog.csv / op_catalog_torch.csv" in catalog_hint(["text", "trace"], "en")


def _chromium():
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


PROBE = """<script>window.addEventListener('load', function () {
  var d = document.documentElement, cmp = document.getElementById('cmp'), out = {scroll: d.scrollWidth, cols: [],
      tables: [], tops: []};
  Array.prototype.forEach.call(cmp.tHead.rows[0].cells, function (th) { var r = th.getBoundingClientRect();
    out.cols.push([th.textContent.trim(), Math.round(r.left), Math.round(r.right)]); });
  document.querySelectorAll('table').forEach(function (t) { out.tables.push(Math.round(t.getBoundingClientRect().right)); });
  document.querySelectorAll('h2, section#verdict').forEach(function (e) { out.tops.push([e.id || e.tagName, e.offsetTop]); });
  var p = document.createElement('pre'); p.id = 'probe'; p.textContent = JSON.stringify(out); document.body.appendChild(p);
});</script>"""


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium here (apt-get install chromium to run it)")
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_browser_1400px_verdict_on_top_and_every_column_visible(example_run, facts, lang, tmp_path):
    """Both report languages, with a 270-character GPU kernel name in the table, at 1,400 px in headless Chromium:
    no horizontal scroll, every column of the comparison table inside the window, the verdict above every section;
    a screenshot is taken."""
    html = page(example_run, long_names(facts), lang)
    f = tmp_path / f"report_{lang}.html"
    f.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    args = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1000"]
    dom = subprocess.run(args + ["--virtual-time-budget=3000", "--dump-dom", f.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom)
    assert m, dom[-2000:]
    got = json.loads(m.group(1).replace("&quot;", '"'))
    assert got["scroll"] <= 1400, got
    assert all(right <= 1400 for right in got["tables"]), got["tables"]
    assert len(got["cols"]) == 11 and all(0 <= left and right <= 1400 and right - left >= 40
                                           for _t, left, right in got["cols"]), got["cols"]
    tops = sorted(got["tops"], key=lambda t: t[1])
    assert tops[0][0] == "verdict", tops
    shot = tmp_path / f"shot_{lang}.png"
    subprocess.run(args + [f"--screenshot={shot}", f.as_uri()], capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(data[16:20], "big") == 1400
