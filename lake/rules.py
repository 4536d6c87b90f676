"""User rules without editing site-packages: seed CSVs in a rules folder extend or override the shipped ones.

The folder is ``--rules DIR`` (``tilake build``/``run``/``example``), else ``$TILAKE_RULES``, else
``<lake>/rules/`` when it exists (:func:`rules_dir`). Each ``<seed>.csv`` in it must be one of the
shipped seeds of :data:`SEED_KEYS` (``op_catalog``, ``op_catalog_torch``, ``grading_rules``,
``recommendations``, ``modules``, ``grades``) with the shipped header (same column names, any order).
A row whose key (:data:`SEED_KEYS`) matches a shipped row replaces it; other rows are added. The
merged project is written to ``<lake>/.dbt/project/`` (a copy of the packaged dbt project with the
merged seeds; the package is never written to) and dbt runs there: its fingerprint
(:func:`tilake.lake.warehouse.project_fingerprint`) differs from the shipped project's, so the first
build with new or changed rules, and the first without them again, is a full refresh (no mart keeps
rows graded by other rules). The rules in force are recorded with the build
(``tilake_project_state.rules`` in the warehouse: folder, sha256 and per-file counts), and each ingest
records the rules folder in force in its ``runs`` row (``runs.rules``: folder, sha256, files;
:func:`run_record`).
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from tilake import settings
from tilake.errors import TilakeError

SEED_KEYS: Dict[str, Tuple[str, ...]] = {
    "op_catalog": ("pattern_kind", "pattern"),
    "op_catalog_torch": ("pattern_kind", "pattern"),
    "grading_rules": ("rule_id",),
    "recommendations": ("module", "grade"),
    "modules": ("module",),
    "grades": ("grade",),
}
"""The seeds a rules folder may hold, each with the columns that identify a row (override key)."""


def rules_dir(lake_root: Path, explicit: Optional[Path] = None) -> Optional[Path]:
    """The rules folder in force: ``explicit``, else ``$TILAKE_RULES``, else ``<lake>/rules/`` if it exists.

    Raises:
        TilakeError: an explicit or ``$TILAKE_RULES`` folder that does not exist.
    """
    given = explicit or settings.rules_path()
    if given:
        p = Path(given).expanduser().resolve()
        if not p.is_dir():
            raise TilakeError("rules folder not found (--rules / $TILAKE_RULES)", path=p)
        return p
    p = Path(lake_root) / "rules"
    return p if p.is_dir() else None


def _read(path: Path) -> Tuple[List[str], List[Dict[str, str]]]:
    """Header and rows of a seed CSV; each row carries its first line number under ``""``.

    Raises:
        TilakeError: unreadable file, a quote never closed, or a row with another number of
            columns than the header (the line is named).
    """
    rows, line = [], 1
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            r = csv.reader(f, strict=True)
            header = next(r, [])
            line = r.line_num + 1
            for values in r:
                if values and len(values) != len(header):
                    hint = ("a comma inside a text must be quoted" if len(values) > len(header)
                            else "write every column, an empty one as nothing between two commas")
                    raise TilakeError(f"line {line}: {len(values)} columns where the header has {len(header)} "
                                      f"({hint})", path=path)
                if values:
                    rows.append(dict(zip(header, values), **{"": str(line)}))
                line = r.line_num + 1
    except csv.Error as exc:
        raise TilakeError(f"line {line}: not valid CSV ({exc}; a quote opened on this line is never closed?)",
                          path=path) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise TilakeError(f"cannot read the rules file: {exc}", path=path) from exc
    return header, rows


def _kinds(cols: List[str], rows: List[Dict[str, str]]) -> Dict[str, Tuple[str, bool]]:
    """Per column of a shipped seed: ``(kind, required)``; kind is ``integer``/``boolean``/``text`` as the
    shipped values all are (dbt infers the seed's column types from them), required when none is empty."""
    out = {}
    for c in cols:
        vals = [r[c] for r in rows if r[c] != ""]
        kind = ("integer" if vals and all(_INT.fullmatch(v) for v in vals) else
                "boolean" if vals and all(v in ("true", "false") for v in vals) else "text")
        out[c] = (kind, len(vals) == len(rows))
    return out


_INT = re.compile(r"-?[0-9]+")
GRADE_COLUMNS = ("grade", "seed_table_grade")
"""Columns whose values must be a grade of the ``grades`` seed (shipped or user rows)."""


def check_rows(user: Path, shipped_cols: List[str], shipped_rows: List[Dict[str, str]],
               rows: List[Dict[str, str]], grades: Optional[Set[str]] = None) -> None:
    """Check ``rows`` of the rules file ``user`` against the shipped seed's column kinds and ``grades``.

    Raises:
        TilakeError: the first bad value, naming the line, column and what is expected.
    """
    kinds = _kinds(shipped_cols, shipped_rows)
    for r in rows:
        for c, (kind, required) in kinds.items():
            v, where = r[c], f"line {r['']}, column {c}"
            if v == "":
                if required:
                    raise TilakeError(f"{where}: empty, a value is required", path=user)
            elif kind == "integer" and not _INT.fullmatch(v.strip()):
                raise TilakeError(f"{where}: {v!r} is not an integer", path=user)
            elif kind == "boolean" and v.strip().lower() not in ("true", "false"):
                raise TilakeError(f"{where}: {v!r} is not true or false", path=user)
            elif grades is not None and c in GRADE_COLUMNS and v not in grades:
                raise TilakeError(f"{where}: unknown grade {v!r} (grades: {', '.join(sorted(grades))}; "
                                  "a new grade needs a row in grades.csv)", path=user)


def merge_seed(shipped: Path, user: Path, grades: Optional[Set[str]] = None) -> Tuple[str, Dict[str, int]]:
    """CSV text of ``shipped`` with the rows of ``user`` merged in (same key → replaced, else added).

    Returns:
        ``(csv text in the shipped column order, {"rows", "replaced", "added"})``.
    Raises:
        TilakeError: ``user``'s header is not the shipped one (missing or unknown columns named); a
            row of ``user`` that is not valid CSV or has a bad value (:func:`check_rows`; grade
            columns checked against ``grades`` when given).
    """
    cols, rows = _read(shipped)
    ucols, urows = _read(user)
    if set(ucols) != set(cols):
        missing, extra = [c for c in cols if c not in ucols], [c for c in ucols if c not in cols]
        raise TilakeError(f"rules file header differs from the shipped {shipped.name} (missing: "
                          f"{', '.join(missing) or '-'}; unknown: {', '.join(extra) or '-'}); copy the header of "
                          f"tilake/dbt_project/seeds/{shipped.name}", path=user)
    check_rows(user, cols, rows, urows, grades)
    key = SEED_KEYS[shipped.stem]
    index = {tuple(r[k] for k in key): i for i, r in enumerate(rows)}
    replaced = added = 0
    for r in urows:
        k = tuple(r[c] for c in key)
        if k in index:
            rows[index[k]] = r
            replaced += 1
        else:
            index[k] = len(rows)
            rows.append(r)
            added += 1
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=cols, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue(), {"rows": len(rows), "replaced": replaced, "added": added}


def project_with_rules(project: Path, rules: Optional[Path], work: Path) -> Tuple[Path, Optional[dict]]:
    """The dbt project to run: ``project`` itself without rules, else a copy in ``work`` with merged seeds.

    Returns:
        ``(project folder, record)``; the record is ``{"dir", "sha256", "files": {name: counts}}``
        (None without rules), sha256 over the rules files' names and bytes.
    Raises:
        TilakeError: a CSV in the rules folder that is not a known seed, has another header or a bad
            row (:func:`merge_seed`; grades are the shipped ones plus the folder's ``grades.csv``);
            a rules folder without any CSV. Raised before anything is written.
    """
    if rules is None:
        return project, None
    files = sorted(rules.glob("*.csv"))
    if not files:
        raise TilakeError(f"rules folder holds no seed CSV (one of {', '.join(s + '.csv' for s in SEED_KEYS)})",
                          path=rules)
    merged, counts = {}, {}
    grades = {r["grade"] for r in _read(project / "seeds" / "grades.csv")[1]}
    if (rules / "grades.csv").is_file():
        grades |= {r["grade"] for r in _read(rules / "grades.csv")[1] if "grade" in r}
    for f in files:
        if f.stem not in SEED_KEYS:
            raise TilakeError(f"not a tilake rules file: use one of {', '.join(s + '.csv' for s in SEED_KEYS)}", path=f)
        merged[f.name], counts[f.name] = merge_seed(project / "seeds" / f.name, f, grades)
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(project, work, ignore=shutil.ignore_patterns("target", "logs", "__pycache__", "dbt_packages"))
    for name, text in merged.items():
        (work / "seeds" / name).write_text(text, encoding="utf-8")
    return work, {"dir": str(rules), "sha256": _sha256(files), "files": counts}


def _sha256(files: List[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def run_record(lake_root: Path, explicit: Optional[Path] = None) -> Optional[str]:
    """JSON ``{"dir", "sha256", "files": [names]}`` of the rules folder in force (:func:`rules_dir`) for a
    run's ``runs.rules`` column, recorded at ingest (the same sha256 as the build's record in
    ``tilake_project_state.rules``); None when only the shipped rules apply or the folder holds no CSV.

    Raises:
        TilakeError: an explicit or ``$TILAKE_RULES`` folder that does not exist.
    """
    d = rules_dir(lake_root, explicit)
    files = sorted(d.glob("*.csv")) if d is not None else []
    if not files:
        return None
    try:
        sha = _sha256(files)
    except OSError as exc:
        raise TilakeError(f"cannot read the rules folder: {exc}", path=d) from exc
    return json.dumps({"dir": str(d), "sha256": sha, "files": [f.name for f in files]}, ensure_ascii=False,
                      sort_keys=True)


def record_json(record: Optional[dict]) -> str:
    """The rules record as compact JSON for dbt's ``--vars`` (``""`` without rules)."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True) if record else ""
