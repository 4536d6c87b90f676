"""The README / docs screenshot ``docs/op_diff_report.png`` is the example's report as it is now: the sha256 of
the report HTML it was made from (``docs/op_diff_report.png.json``, written by ``scripts/readme_screenshot.py``)
equals that of the report the example writes today. When this fails, regenerate the image:
``python scripts/readme_screenshot.py`` (needs Chromium)."""
from __future__ import annotations

import importlib.util
import json
import shutil
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "readme_screenshot.py"


def _script():
    spec = importlib.util.spec_from_file_location("readme_screenshot", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_image_was_made_from_the_report_the_example_writes(example_run):
    out, res = example_run
    rec = json.loads((ROOT / "docs" / "op_diff_report.png.json").read_text(encoding="utf-8"))
    html = res.outputs["html"].read_text(encoding="utf-8")
    assert _script().html_sha256(html, out) == rec["report_html_sha256"], (
        "docs/op_diff_report.png is stale: the example's report changed; run `python scripts/readme_screenshot.py`")
    with open(ROOT / rec["image"], "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and list(struct.unpack(">II", head[16:24])) == rec["size_px"]


def test_normalising_takes_out_only_the_folder_and_the_time(tmp_path):
    s = _script()
    html = f"<td>{tmp_path}/profiler_output</td><td>2026-12-04 02:24:33 UTC</td><td>Qwen/Qwen3-0.6B</td>"
    assert s.normalise(html, tmp_path) == "<td><out>/profiler_output</td><td><time></td><td>Qwen/Qwen3-0.6B</td>"


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="no Chromium here")
def test_the_screenshot_command_renders_the_report(example_run, tmp_path):
    out, res = example_run
    png = tmp_path / "shot.png"
    _script().screenshot(res.outputs["html"], png)
    with open(png, "rb") as f:
        head = f.read(24)
    assert list(struct.unpack(">II", head[16:24])) == [1400, 1300] and png.stat().st_size > 20_000
