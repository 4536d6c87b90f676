"""Read torch_npu text exports (``ASCEND_PROFILER_OUTPUT/*.csv``) when a rank has no usable DB.

Order of preference (reference doc §3.3; seed stage 3.4 fallback 2):
``kernel_details.csv`` (one row per device kernel) → ``op_statistic.csv`` (device op types with
counts) → ``api_statistic.csv`` (host-side CANN API statistics: the "host-side fallback, not
device"). ``operator_details.csv`` gives framework ops with their call stacks.

Quirks handled (real files, 2025-01): ``Start Time(us)`` ends with a TAB; shapes are written
the field ``'"32,3,224,224"'`` after CSV unquoting (quotes inside the field); ``N/A`` for missing; ``Model ID`` 4294967295 =
invalid; ``Block Dim`` renamed ``Block Num`` in torch_npu ≥ 26.0.0; ``Device_id`` column only in
torch_npu ≥ 7.1.0; level-0 ``Type`` is ``N/A`` (op type derived from the name).
Times are converted from µs (decimal text) to integer ns exactly (``decimal.Decimal``).
"""
from __future__ import annotations

import csv
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from tilake.errors import TilakeError
from tilake.ingest.inputs import check_regular
from tilake.ingest.profiler.names import clean_text, is_derived, op_type_or_derived
from tilake.lake.duck import sql_str
from tilake.lake.schema import KERNEL_MAX_NS, TIME_MAX_NS
from tilake.vocab import Evidence

_TEXT_KERNEL_COLS = ["kernel_name", "raw_op", "accelerator", "start_ns", "dur_ns", "block_dim",
                     "input_shapes", "input_dtypes", "input_formats", "output_shapes", "output_dtypes",
                     "output_formats", "stream_id", "task_id", "device_id", "call_count"]


def us_to_ns(text: Optional[str], where: str = "", allow_negative: bool = False,
             limit: Optional[int] = TIME_MAX_NS) -> Optional[int]:
    """``'1736408883704643.212\t'`` (µs) → ``1736408883704643212`` (ns); ``N/A``/empty → None.

    Raises:
        TilakeError: the value is not a finite decimal number (``NaN``, ``inf``, ``abc``), is
            negative, or is beyond 2**62 ns (year 2116: no profiler time, and an INT64 sum of two
            would overflow); ``where`` (file, line, column) is named in the message.
    """
    if text is None:
        return None
    t = str(text).strip().strip('"')
    if not t or t.upper() == "N/A":
        return None
    try:
        d = Decimal(t)
    except InvalidOperation:
        d = None
    if d is None or not d.is_finite() or abs(d) > Decimal(10) ** 20:
        raise TilakeError(f"{where}: {t!r} is not a time in µs")
    if d < 0 and not allow_negative:
        raise TilakeError(f"{where}: negative time {t!r} µs")
    ns = int((d * 1000).to_integral_value())
    if limit is not None and abs(ns) > limit:
        raise TilakeError(f"{where}: {t!r} µs is out of range (beyond 2**62 ns, the year 2116)")
    return ns


def _int(text: Optional[str]) -> Optional[int]:
    t = (text or "").strip()
    if not t or t.upper() == "N/A":
        return None
    try:
        v = int(float(t))
    except ValueError:
        return None
    return None if v == 4294967295 else v


def _count(text: Optional[str], where: str) -> int:
    """A whole call count in 0 .. 2**53; raises TilakeError naming ``where`` otherwise (a larger one
    is no profiler count, and a sum of a few would overflow INT64)."""
    t = (text or "").strip()
    if not t.isdigit() or len(t) > 16 or int(t) > 2 ** 53:
        raise TilakeError(f"{where}: {t[:40]!r} is not a call count" + (" (over 2**53)" if t.isdigit() else ""))
    return int(t)


def read_csv(path: Path, required: Tuple[Tuple[str, ...], ...] = ()) -> Tuple[List[str], List[Dict[str, str]]]:
    """Rows of a profiler CSV with stripped header names (BOM tolerated).

    A row cut short (a copy taken while the file was written, a truncated transfer) or a quote left
    open (which swallows the rest of the file into one field) would otherwise become a kernel with
    NULL name, type or duration. A row whose field count differs from the header's is kept only when
    it is one field off and every ``required`` column (each a tuple of accepted names) still holds a
    value: a real
    MindStudio Insight test export (``msinsight/.../test_rank_0/kernel_details.csv`` line 17) has
    one FlashAttentionScore row one field short after ``Duration(us)``.

    Raises:
        TilakeError: unreadable, not CSV, no header, an unterminated quote (names its line), or
            rows of the wrong length that lack a required value (names how many and the first lines).
    """
    check_regular(path, "profiler CSV")            # a FIFO: never opened
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, strict=True)
            header = next(reader, None)
            if not header:
                raise TilakeError("empty CSV (no header line)", path=path)
            header = [h.strip() for h in header]
            rows, bad = [], []
            line = reader.line_num
            for r in reader:
                start, line = line + 1, reader.line_num
                if not r:
                    continue
                row = dict(zip(header, r))
                if len(r) != len(header) and (abs(len(r) - len(header)) > 1 or not all(
                        any((row.get(n) or "").strip() for n in alts) for alts in required)):
                    bad.append((start, len(r)))
                rows.append(row)
    except csv.Error as exc:
        raise TilakeError(f"malformed CSV at line {reader.line_num} ({exc}; an unterminated quote?)",
                          path=path) from exc
    except UnicodeDecodeError as exc:
        raise TilakeError(f"not UTF-8 text: {_bad_utf8(path)}", path=path) from exc
    except OSError as exc:
        raise TilakeError(f"unreadable CSV ({exc.strerror or exc})", path=path) from exc
    if bad:
        first = ", ".join(f"{ln} ({n} fields)" for ln, n in bad[:5])
        need = ", ".join(a[0] for a in required)
        raise TilakeError(f"{len(bad)} of {len(rows)} rows are cut or overlong (header: {len(header)} fields; "
                          f"required: {need}) (lines {first}{', …' if len(bad) > 5 else ''}): the file is cut or malformed; "
                          "copy or export it again", path=path)
    return header, rows


def _bad_utf8(path: Path) -> str:
    """``"line N, column C (byte offset B): b'\\xff…'"`` of the first bytes of ``path`` that are not
    UTF-8 (the decoder's own position counts from the start of its read buffer, not the file)."""
    offset = 0
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                col = len(raw[:e.start].decode("utf-8", errors="replace")) + 1
                return f"line {n}, column {col} (byte offset {offset + e.start}): {raw[e.start:e.start + 4]!r}"
            offset += len(raw)
    return "an invalid byte sequence"


def _first(row: Dict[str, str], *names: str) -> Optional[str]:
    for n in names:
        if n in row and row[n] is not None:
            return row[n]
    return None


def kernel_rows(text_dir: Path, invalid: Optional[Dict[str, int]] = None) -> Tuple[str, List[tuple], str]:
    """Kernel rows from the best available CSV.

    A ``kernel_details.csv`` kernel longer than one hour (:data:`~tilake.lake.schema.KERNEL_MAX_NS`;
    a 9e12 µs kernel is a damaged row) keeps its row for the kernel set, its duration is NULL (every
    timing sum skips it) and it is counted in ``invalid`` (``{"kernel_details.csv Duration(us) over
    1 h": rows}``), as the DB path does for invalid TASK spans.

    Returns:
        (source file name, rows in ``_TEXT_KERNEL_COLS`` order, evidence kind ``device`` or
        ``host_fallback``); ``("", [], "")`` when no usable CSV exists.
    """
    kd = text_dir / "kernel_details.csv"
    if kd.exists():
        need = [("Name",), ("Start Time(us)", "Task Start Time(us)"), ("Duration(us)", "Task Duration(us)")]
        header, rows = read_csv(kd, tuple(need))
        missing = [n[0] for n in need if not any(x in header for x in n)]
        if missing:
            raise TilakeError(f"kernel_details.csv lacks column(s) {', '.join(missing)}", path=kd)
        out, too_long = [], 0
        for line, r in enumerate(rows, start=2):
            dur = us_to_ns(_first(r, "Duration(us)", "Task Duration(us)"), f"{kd} line {line} Duration(us)", limit=None)
            if dur is not None and dur > KERNEL_MAX_NS:
                dur, too_long = None, too_long + 1
            out.append((r.get("Name"), _first(r, "Type", "OP Type"), _first(r, "Accelerator Core", "Task Type"),
                        us_to_ns(_first(r, "Start Time(us)", "Task Start Time(us)"), f"{kd} line {line} Start Time(us)"),
                        dur,
                        _int(_first(r, "Block Dim", "Block Num")),
                        r.get("Input Shapes"), r.get("Input Data Types"), r.get("Input Formats"),
                        r.get("Output Shapes"), r.get("Output Data Types"), r.get("Output Formats"),
                        _int(r.get("Stream ID")), _int(r.get("Task ID")), _int(r.get("Device_id")), 1))
        if too_long and invalid is not None:
            invalid[f"{kd.name} Duration(us) over 1 h"] = too_long
        if out:
            return kd.name, out, Evidence.DEVICE
    st = text_dir / "op_statistic.csv"
    if st.exists():
        header, rows = read_csv(st, (("OP Type",), ("Count",)))
        if "OP Type" not in header or "Count" not in header:
            raise TilakeError("op_statistic.csv lacks OP Type/Count columns", path=st)
        out = [(r["OP Type"], r["OP Type"], r.get("Core Type"), None,
                us_to_ns(r.get("Total Time(us)"), f"{st} line {i} Total Time(us)"),
                None, None, None, None, None, None, None, None, None, _int(r.get("Device_id")),
                _count(r.get("Count"), f"{st} line {i} Count")) for i, r in enumerate(rows, start=2)]
        if out:
            return st.name, out, Evidence.DEVICE
    api = text_dir / "api_statistic.csv"
    if api.exists():
        header, rows = read_csv(api, (("API Name",), ("Count",)))
        if "API Name" not in header:
            raise TilakeError("api_statistic.csv has no API Name column", path=api)
        out = []
        for r in rows:
            name = (r.get("API Name") or "").strip()
            if (r.get("Level") or "").strip() != "acl" or not name.startswith("aclnn") \
                    or name.endswith("GetWorkspaceSize"):
                continue
            op = name[len("aclnn"):]
            op = op[len("Inplace"):] if op.startswith("Inplace") else op
            out.append((name, op, "HOST_API", None, us_to_ns(r.get("Time(us)"), f"{api} Time(us) of {name}"),
                        None, None, None, None, None, None, None, None, None, _int(r.get("Device_id")),
                        _count(r.get("Count"), f"{api} Count of {name}")))
        if out:
            return api.name, out, Evidence.HOST_FALLBACK
    return "", [], ""


def host_op_rows(text_dir: Path) -> List[tuple]:
    """Framework ops from ``operator_details.csv``: (name, input shapes, call stack)."""
    od = text_dir / "operator_details.csv"
    if not od.exists():
        return []
    header, rows = read_csv(od)
    if "Name" not in header:
        raise TilakeError("operator_details.csv has no Name column", path=od)
    return [(r.get("Name"), r.get("Input Shapes"), r.get("Call Stack")) for r in rows]


def load_text(text_dir: Path, writer, partition: Dict, capture_id: str,
              invalid: Optional[Dict[str, int]] = None) -> Tuple[int, int, int, str, str, int]:
    """Write kernels (``source_kind='text'``), host ops and call stacks of one text export.

    Returns:
        (kernel rows written, host-op rows, call-stack frames, source CSV name, evidence kind,
        kernels = the sum of ``call_count``: for ``op_statistic.csv`` the sum of ``Count`` (e.g.
        1392 kernels in 15 op-type rows), for ``kernel_details.csv`` the row count).
    """
    src, rows, evidence = kernel_rows(text_dir, invalid)
    cid = sql_str(capture_id)
    nk = 0
    if rows:
        types = [(c, "VARCHAR" if c in ("kernel_name", "raw_op", "accelerator") or c.startswith(("input", "output"))
                  else "BIGINT") for c in _TEXT_KERNEL_COLS]
        tk = writer.rows_table(types, (dict(zip(_TEXT_KERNEL_COLS, r)) for r in rows))
        nk = writer.copy_query("kernels", f"""
            SELECT {cid} AS capture_id, 'text' AS source_kind, NULL AS global_task_id, device_id, stream_id,
                   task_id, start_ns, start_ns + dur_ns AS end_ns, dur_ns, kernel_name,
                   {op_type_or_derived(clean_text('raw_op'), 'kernel_name')} AS op_type,
                   {is_derived(clean_text('raw_op'))} AS op_type_derived, {clean_text('accelerator')} AS accelerator,
                   NULL AS device_task_type, block_dim,
                   {clean_text('input_shapes')} AS input_shapes, {clean_text('input_dtypes')} AS input_dtypes,
                   {clean_text('input_formats')} AS input_formats, {clean_text('output_shapes')} AS output_shapes,
                   {clean_text('output_dtypes')} AS output_dtypes, {clean_text('output_formats')} AS output_formats,
                   NULL AS connection_id, NULL AS cann_api_name, NULL AS host_op_id, NULL AS host_op_name,
                   NULL AS callchain_id, call_count, NULL AS step, NULL AS match_confidence,
                   NULL AS hf32_eligible
            FROM "{tk}" """, partition)
    ops = host_op_rows(text_dir)
    nh = ns = 0
    if ops:
        host_rows, frames = [], []
        for i, (name, shapes, stack) in enumerate(ops, start=1):
            chain = i if (stack or "").strip() else None
            host_rows.append({"capture_id": capture_id, "source_kind": "text", "host_op_id": i, "name": name,
                              "input_shapes": (shapes or "").replace('"', "") or None, "callchain_id": chain,
                              "call_count": 1})
            if chain:
                for d, fr in enumerate(x.strip() for x in stack.split(";") if x.strip()):
                    frames.append({"capture_id": capture_id, "callchain_id": chain, "depth": d, "frame": fr})
        nh = writer.write_rows("host_ops", host_rows, partition)
        ns = writer.write_rows("call_stacks", frames, partition) if frames else 0
    kernels = sum(r[-1] for r in rows) if rows else 0  # op_statistic.csv: sum of Count, not op-type rows
    return nk, nh, ns, src, evidence, kernels
