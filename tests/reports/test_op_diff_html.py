"""``train_infer_op_diff_report.html``: structure, device time, escaping, and a real browser at 1,400 px."""
from __future__ import annotations

import copy
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from report_helpers import raw_device_ns

from tilake.reports.op_diff import csv_rows, load_facts
from tilake.reports.op_diff_html import render_html
from tilake.reports.tables import comparison_records, mart_extras


class _Rows(HTMLParser):
    """Cells of ``<table id="cmp">``'s body rows as text, and every ``<script src>`` / ``<link href>``."""

    def __init__(self):
        super().__init__()
        self.rows, self.external, self._in, self._cell = [], [], False, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id") == "cmp":
            self._in = True
        if tag in ("script", "img", "link") and (a.get("src") or a.get("href") or "").startswith(("http", "//")):
            self.external.append(a)
        if self._in and tag == "tr":
            self.rows.append([])
        if self._in and tag == "td":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._in = False
        if self._in and tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def html(example_run):
    out, _res = example_run
    return (out / "train_infer_op_diff_report.html").read_text(encoding="utf-8")


def _row(html, label):
    p = _Rows()
    p.feed(html)
    assert not p.external, p.external  # self-contained: no CDN
    return next(r for r in p.rows if r and r[0] == label)


def test_html_written_beside_the_markdown(example_run):
    out, res = example_run
    assert res.report_path.parent == out
    assert (out / "train_infer_op_diff_report.html").stat().st_size > 10_000


def test_comparison_table_has_grade_rule_and_device_time(example_run, html):
    out, _ = example_run
    att = _row(html, "注意力")
    # the default phases: the actor's log-prob forward (224 FlashAttentionScore) vs the rollout prefill
    assert att[1:5] == ["FlashAttentionScore", "FusedInferAttentionScore", "224", "224"]
    t_ns = raw_device_ns(out / "lake", "train", ["FlashAttentionScore"], phase="actor_compute_log_prob")
    i_ns = raw_device_ns(out / "lake", "infer", ["FusedInferAttentionScore"], phase="execute_context_%_generation_0(0)")
    assert att[5] == f"{t_ns / 1000:,.1f} / {t_ns / 1000 / 224:,.1f}"
    assert att[6] == f"{i_ns / 1000:,.1f} / {i_ns / 1000 / 224:,.1f}"
    assert att[7] == f"{i_ns / t_ns:.2f}×"
    # the grade reads without emoji or CJK fonts: the English word beside the zh label (and the badge's colour)
    assert att[9] == "🔴 高差异 HIGH" and att[10].startswith("different_fused_kernel")
    # a one-side-only row says so, with its grade; never "none"
    kv = _row(html, "KV Cache")
    # the grade reads without emoji or CJK fonts: the English word beside the zh label (and the badge's colour)
    assert kv[8] == "推理独有" and kv[9] == "🟢 推理独有 INFERENCE ONLY" and kv[5] == "— / —" and kv[7] == "—"
    assert _row(html, "采样")[9] == "🟡 低差异 · 推理独有 LOW · INFERENCE ONLY"
    assert _row(html, "激活函数")[9] == "🟢 无差异 NONE"
    # the key counts them apart: 3 identical and 1 inference-only of the 4 green rows, 1 of the 2 yellow rows
    # inference-only (sampling, equivalent in training)
    key = re.search(r'<p class="key">(.*?)</p>', html, re.S).group(1)
    pairs = re.findall(r"(\S+ \S+) × (\d+)", re.sub(r"<[^>]+>", "", re.sub(r' <span class="gk">.*?</span>', "", key)))
    assert pairs[2:6] == [("🟡 低差异", "1"), ("· 推理独有", "1"), ("🟢 无差异", "3"), ("🟢 推理独有", "1")], pairs


def test_long_sequences_fold_into_details(html):
    samp = _row(html, "采样")
    assert samp[2].startswith("ApplyTopKTopP(8)+… (7 种)")     # summary line, the rest inside <details>
    assert re.search(r"<details><summary>ApplyTopKTopP\(8\)\+… \(7 种\)</summary><div class=\"seq\">ApplyTopKTopP\(8\)\n",
                     html)


def test_key_filters_sections_stacks_and_inline_chart(example_run, html):
    _out, res = example_run
    for g in ("g-red", "g-orange", "g-yellow", "g-green", "g-evidence_missing"):
        assert f'class="g {g}"' in html  # grade key
    assert 'id="flt"' in html and html.count('class="gf"') == 4    # text filter + one box per present grade
    assert "addEventListener('click'" in html                     # sortable headers
    sections = re.findall(r'<section class="mod" id="m-([a-z_]+)">', html)
    assert len(sections) == sum(res.grade_counts.values()) == 9
    assert html.count("<details><summary>调用栈") >= 3 and "flash_attention.py" in html
    assert re.search(r'src="data:image/png;base64,[A-Za-z0-9+/]{1000,}', html)


def _page(wh, facts, lang):
    ex = mart_extras(wh, facts["run"]["run_id"])
    return render_html(facts, comparison_records(facts, ex, csv_rows(facts, lang), lang), ex["grades"], lang)


def test_english_page(example_run):
    out, res = example_run
    page = _page(out / "lake" / "warehouse.duckdb", load_facts(out / "lake" / "warehouse.duckdb", res.run_id), "en")
    assert "Core comparison: training vs inference" in page
    assert _row(page, "KV cache")[8] == "inference only"


def test_values_from_the_marts_are_escaped(example_run):
    out, res = example_run
    wh = out / "lake" / "warehouse.duckdb"
    facts = copy.deepcopy(load_facts(wh, res.run_id))
    evil = '<script>alert("x")</script>&'
    facts["comparison"][0]["module_label_zh"] = evil
    facts["comparison"][0]["rule_zh"] = evil
    facts["call_stacks"][0]["stack"] = evil
    facts["run"]["script_path"] = evil
    page = _page(wh, facts, "zh")
    assert evil not in page
    assert page.count("&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;") >= 4
    assert page.count("<script>") == 1  # only the page's own sorter


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    return None


PROBE = """<script>
window.addEventListener('load', function () {
  var ths = document.querySelectorAll('#cmp th');
  ths[3].click(); ths[3].click();                       /* train calls, descending */
  var first = document.querySelector('#cmp tbody tr td').textContent;
  document.getElementById('flt').value = 'rope'; document.getElementById('flt').dispatchEvent(new Event('input'));
  var probe = document.createElement('pre'); probe.id = 'probe';
  probe.textContent = JSON.stringify({scroll: document.documentElement.scrollWidth, first: first,
                                      shown: document.getElementById('shown').textContent});
  document.body.appendChild(probe);
});
</script>"""


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium here (apt-get install chromium to run it)")
def test_headless_chromium_1400px(example_run, html, tmp_path):
    """The page at 1,400 px: no horizontal scroll, sorting and filtering work, a screenshot renders."""
    import json

    exe = _chromium()
    page = tmp_path / "probe.html"
    page.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1000"]
    dom = subprocess.run(args + ["--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom)
    assert m, dom[-2000:]
    got = json.loads(m.group(1).replace("&quot;", '"'))
    assert got["scroll"] <= 1400, got                     # readable at 1,400 px without scrolling sideways
    assert got["first"] == "残差+归一化"                   # most training calls (1,352: RmsNorm + Add)
    assert got["shown"] == "1 / 9"                         # the text filter
    shot = tmp_path / "shot.png"
    subprocess.run(args + [f"--screenshot={shot}", (example_run[0] / "train_infer_op_diff_report.html").as_uri()],
                   capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(data[16:20], "big") == 1400


def test_fallback_label_derived_mark_and_uncategorized_share(example_run):
    """As the Markdown report: ``(fallback)`` after a fallback category, ``†`` on an op type derived from
    the kernel name (level-0 capture) with its legend, and the uncategorized / fallback share per side."""
    out, res = example_run
    wh = out / "lake" / "warehouse.duckdb"
    facts = copy.deepcopy(load_facts(wh, res.run_id))
    shares = {c["side"]: c for c in facts["categorisation"]}
    assert set(shares) == {"train", "infer"}
    plain = _page(wh, facts, "en")
    assert "(fallback)" not in plain and "derived from kernel name" not in plain
    o = next(o for o in facts["side_ops"] if o["side"] == "train")
    o.update(op_type_derived=True, category_source="fallback")
    page = _page(wh, facts, "en")
    assert f"<td>{o['op_type']}<sup title=\"derived from kernel name\">†</sup></td>" in page
    assert f"<td>{o['category']} (fallback)</td>" in page
    assert "† derived from kernel name (level-0 capture records no op type)" in page
    t = shares["train"]
    assert (f"training — Uncategorized: {100 * t['uncategorized_share']:.1f}% of calls "
            f"({t['uncategorized_op_types']} op types); fallback category (kernel-name family / task type): "
            f"{100 * t['fallback_share']:.1f}% ({t['fallback_op_types']}).") in page
