"""Issue 19, item 8: `tilake sql` results never cut a word mid-way at 80 columns.

A table whose longest words do not fit the console is printed in line mode (``column = value``) instead
of rich folding a kernel name across lines; a table that fits stays a table."""
from __future__ import annotations

import io

from rich.console import Console

from tilake.reports.sql_console import print_result

LONG = "aclnnFlashAttentionScoreGradV2_FlashAttentionScoreGradV2_kernel_bf16"


def _out(cols, rows, width=80, terminal=True):
    buf = io.StringIO()
    print_result(cols, rows, console=Console(file=buf, width=width, force_terminal=terminal, color_system=None))
    return buf.getvalue()


COLS = ["run_id", "side", "op_type", "kernel_name", "calls", "device_time_us"]
ROWS = [("run-1", "train", "FlashAttentionScoreGrad", LONG, 48, 1234.5),
        ("run-1", "infer", "FusedInferAttentionScore", LONG + "_infer", 24, None)]


def test_long_names_at_80_columns_are_never_cut():
    text = _out(COLS, ROWS)
    assert LONG in text and LONG + "_infer" in text          # whole, on one line
    assert all(len(line) <= 80 or LONG in line for line in text.splitlines())
    assert "-- row 2 --" in text and "device_time_us = NULL" in text and "2 row(s)" in text


def test_piped_output_stays_a_whole_table():
    """Issue 36: `tilake sql … | grep` gets a table (as wide as its words, nothing cut), not line mode."""
    text = _out(COLS, ROWS, terminal=False)
    assert "-- row" not in text and "2 row(s)" in text
    lines = text.splitlines()
    head = next(ln for ln in lines if "kernel_name" in ln)
    assert all(c in head for c in COLS) and any(ch in head for ch in "┃│|")
    row = next(ln for ln in lines if LONG + "_infer" in ln)
    assert "FusedInferAttentionScore" in row and "NULL" in row   # one row, one line, every column


def test_a_table_that_fits_stays_a_table():
    text = _out(["op_type", "calls"], [("MatMulV2", 3), ("Add", 7)])
    assert "-- row" not in text and "MatMulV2" in text and "2 row(s)" in text
    assert any(ch in text for ch in "┃│|")                     # drawn as a table
