"""The answer on top of the operator diff report: a headline and the highest-risk rows, one sentence each.

Read from the same facts as the rest of the report (:func:`tilake.reports.op_diff.load_facts`): the rows graded
high and medium (🔴/🟠; low 🟡 ones when there are none), most severe first, at most :data:`MOST` of them,
each with its rule and what the two sides run; the others are counted. A side without device evidence gives
no verdict at all: the headline says which side and why, never "no difference". When the run also holds a
dump analysis joined to the profile, its first divergence is one more line. The Markdown and HTML reports
(section "Verdict", first) and the console summary of ``tilake run`` / ``example`` show it.

A grade is always written with its word (``HIGH`` / ``MEDIUM`` / ``LOW`` in :func:`grade_tag`), never by emoji or
colour alone, so it reads without an emoji or CJK font.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict

from tilake.reports.labels import label
from tilake.reports.tables import ONE_SIDE_LABEL, one_side
from tilake.vocab import Evidence, Grade, grade_look

MOST = 5
"""Rows listed in the verdict; the rest are counted."""
LISTED = (Grade.RED, Grade.ORANGE)
"""Grades listed when present (else the low ones)."""


class VerdictRow(TypedDict):
    """One listed row: its module id and label, grade, ``tag`` (``HIGH``), sentence, priority and action."""

    module: str
    label: str
    grade: str
    tag: str
    sentence: str
    priority: Optional[str]
    action: Optional[str]


class OpDiffVerdict(TypedDict):
    """The verdict: ``status`` (``evidence_missing`` | ``differ`` | ``none_differ``), the headline, the listed
    rows, ``more`` (one line per grade of rows not listed) and the dump line (None without a joined dump)."""

    status: str
    headline: str
    rows: List[VerdictRow]
    more: List[str]
    dump: Optional[str]


def grade_tag(grade: str) -> str:
    """The grade's English word in capitals (``HIGH``, ``MEDIUM``, ``LOW``, ``NONE``, ``EVIDENCE MISSING``):
    ASCII, so it reads in any font, in either report language."""
    return grade_look(grade).label_en.upper()


def _ops(names: Optional[List[str]], lang: str) -> str:
    from tilake.reports.layer_picture import short

    names = [short(str(n), 60) for n in (names or [])]
    if not names:
        return label("cell.none", lang)
    if len(names) <= 3:
        return "+".join(names)
    return label("verdict.ops_more", lang, ops="+".join(names[:2]), n=len(names) - 2)


def _sentence(r: Dict[str, Any], lang: str) -> str:
    diff = r.get("diff_type_zh") if lang == "zh" else r.get("diff_type_en")
    if r.get("rule_detail"):
        diff = f"{diff}: {r['rule_detail']}"
    return label("verdict.row", lang, train=_ops(r.get("train_ops"), lang),
                 infer=_ops(r.get("infer_ops"), lang), diff=diff or r.get("grade"), rule=r.get("rule_id"))


def _label(r: Dict[str, Any], lang: str) -> str:
    return (r.get("module_label_zh") if lang == "zh" else r.get("module_label_en")) or r["module"]


def op_diff_verdict(facts: Dict[str, Any], lang: str = "zh", most: int = MOST) -> OpDiffVerdict:
    """The verdict of one run's operator diff (see the module docstring)."""
    run = facts["run"]
    rows = facts.get("comparison") or []
    missing = [s for s in ("train", "infer") if run.get(f"{s}_evidence") == Evidence.MISSING]
    if missing:
        sides = " / ".join(label(f"side.{s}", lang) for s in missing)
        reasons = "; ".join(str(run.get(f"{s}_reasons") or "") for s in missing)
        return {"status": Grade.EVIDENCE_MISSING, "rows": [], "more": [], "dump": None,
                "headline": label("verdict.missing", lang, sides=sides, reasons=reasons)}
    ranked = sorted(rows, key=lambda r: (r.get("severity_rank") or 9, r.get("display_order") or 0))
    graded = [r for r in ranked if not (one_side(r) in ONE_SIDE_LABEL and r["grade"] == Grade.GREEN)]
    listed = [r for r in graded if r["grade"] in LISTED] or [r for r in graded if r["grade"] == Grade.YELLOW]
    counts = [(g, sum(1 for r in rows if r["grade"] == g)) for g in (Grade.RED, Grade.ORANGE, Grade.YELLOW)]
    out: OpDiffVerdict = {"status": "differ" if listed else "none_differ", "rows": [], "more": [],
                          "dump": _dump_line(facts, lang), "headline": ""}
    if listed:
        text = ", ".join(f"{n} {grade_tag(g)}" for g, n in counts if n)
        out["headline"] = label("verdict.counts", lang, counts=text, rows=len(rows),
                                train=run.get("train_backend_detected"), infer=run.get("infer_backend_detected"))
    else:
        out["headline"] = label("verdict.none_differ", lang, rows=len(rows))
    for r in listed[:most]:
        out["rows"].append({"module": r["module"], "label": _label(r, lang), "grade": r["grade"],
                            "tag": grade_tag(r["grade"]), "sentence": _sentence(r, lang),
                            "priority": r.get("priority"),
                            "action": (r.get("action_zh") if lang == "zh" else r.get("action_en")) or None})
    rest: Dict[str, int] = {}
    for r in listed[most:]:
        rest[r["grade"]] = rest.get(r["grade"], 0) + 1
    out["more"] = [label("verdict.more", lang, n=n, grade=grade_tag(g)) for g, n in rest.items()]
    return out


def _dump_line(facts: Dict[str, Any], lang: str) -> Optional[str]:
    a = facts.get("alignment") or {}
    if not a.get("join") or a["join"].get("status") != "joined" or not a.get("first_divergence"):
        return None
    b = a["first_divergence"][0]
    kernels = "; ".join(f"{g.get('module') or '—'} {g.get('relation') or ''}".strip() for g in b["groups"][:3]) or "—"
    return label("verdict.dump", lang, boundary=b["boundary"], status=b["status"], kernels=kernels)


def verdict_lines(v: OpDiffVerdict) -> List[str]:
    """The verdict as plain lines (console, logs): the headline, ``[HIGH] <module>: <sentence> — P0: <action>`` per row,
    the counted rest and the dump line."""
    out = [v["headline"]]
    for r in v["rows"]:
        act = f" — {r['priority']}: {r['action']}" if r["action"] and r["priority"] else ""
        out.append(f"[{r['tag']}] {r['label']}: {r['sentence']}{act}")
    out += v["more"] + ([v["dump"]] if v["dump"] else [])
    return out
