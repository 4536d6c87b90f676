"""Regenerate the README / docs screenshot ``docs/op_diff_report.png`` from the bundled example.

    python scripts/readme_screenshot.py            # writes docs/op_diff_report.png and docs/op_diff_report.png.json
    python scripts/readme_screenshot.py --check    # exit 1 when the recorded image is stale (no Chromium needed)

1. ``tilake example`` (Chinese, the default language; the default phases: the actor's log-prob forward vs the
   rollout prefill) into a temporary folder;
2. a headless Chromium (``/usr/bin/chromium``, or ``$CHROMIUM``) screenshots the HTML report at 1,400 × 1,300 px;
3. ``docs/op_diff_report.png.json`` records the sha256 of the report HTML the image was made from, normalised
   (:func:`normalise`: the example's folder and the generation time taken out), so
   ``tests/reports/test_readme_image.py`` can tell when the report changed and the image is stale.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "docs" / "op_diff_report.png"
RECORD = ROOT / "docs" / "op_diff_report.png.json"
SIZE = (1400, 1300)
REPORT = "train_infer_op_diff_report.html"


def normalise(html: str, out_dir: Path) -> str:
    """The report HTML without what differs between two runs of the example: its folder (absolute paths) and the
    generation time (``2026-12-04 02:24:33 UTC``)."""
    html = html.replace(str(Path(out_dir).resolve()), "<out>").replace(str(out_dir), "<out>")
    return re.sub(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? UTC", "<time>", html)


def html_sha256(html: str, out_dir: Path) -> str:
    """sha256 (hex) of :func:`normalise` of the report HTML."""
    return hashlib.sha256(normalise(html, out_dir).encode("utf-8")).hexdigest()


def run_example(out_dir: Path) -> Path:
    """``tilake example --out out_dir`` (the installed package; the example's own lake inside); returns the HTML."""
    from tilake.pipeline.example import run_example as example

    example(out_dir)
    return out_dir / REPORT


def chromium() -> str:
    """The Chromium binary: ``$CHROMIUM``, else ``chromium`` / ``chromium-browser`` / ``google-chrome`` on PATH."""
    for c in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if c and shutil.which(c):
            return shutil.which(c)
    raise SystemExit("error: no Chromium found (install Debian's chromium, or set CHROMIUM)")


def screenshot(html: Path, png: Path) -> None:
    """Headless Chromium screenshot of ``html`` at :data:`SIZE` into ``png``."""
    with tempfile.TemporaryDirectory() as prof:
        subprocess.run([chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={prof}", f"--window-size={SIZE[0]},{SIZE[1]}",
                        f"--screenshot={png}", html.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only compare the report's hash with the recorded one")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ex"
        html = run_example(out)
        digest = html_sha256(html.read_text(encoding="utf-8"), out)
        if a.check:
            rec = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.is_file() else {}
            ok = rec.get("report_html_sha256") == digest
            print(("ok: " if ok else "stale: ") + f"{IMAGE.relative_to(ROOT)} (report {digest[:12]}, recorded "
                  f"{str(rec.get('report_html_sha256'))[:12]})")
            return 0 if ok else 1
        png = Path(tmp) / "shot.png"
        screenshot(html, png)
        shutil.copyfile(png, IMAGE)
    RECORD.write_text(json.dumps({"image": "docs/op_diff_report.png", "report_html_sha256": digest,
                                  "size_px": list(SIZE), "made_by": "python scripts/readme_screenshot.py",
                                  "from": "tilake example (lang zh, default phases)"}, indent=2) + "\n",
                      encoding="utf-8")
    print(f"wrote {IMAGE.relative_to(ROOT)} and {RECORD.relative_to(ROOT)} (report {digest[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
