"""Console output of ``tilake scan`` (stage tables, planned diff) and the fallback-3 report.

Everything here only renders what :mod:`tilake.pipeline.scan` decided; nothing is sequenced here.
"""
from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tilake.ingest.scan.collect import HOST_FALLBACK_LABEL, Stage3
from tilake.ingest.scan.env import Check
from tilake.ingest.scan.script import UNKNOWN, ParsedScript


def print_config(console: Console, parsed: ParsedScript) -> None:
    t = Table(title=f"stage 1 · parsed {parsed.path.name} (launch command on line {parsed.launch.line})",
              show_lines=False)
    t.add_column("item")
    t.add_column("value")
    t.add_column("from", style="dim")
    c = parsed.config
    rows = [("training backend", "train_backend"), ("inference engine", "infer_backend"),
            ("model path", "model_path"), ("model id", "model_id"), ("train TP", "train_tp"),
            ("train PP", "train_pp"), ("train EP", "train_ep"), ("rollout TP", "infer_tp"),
            ("max_prompt_length", "max_prompt_length"), ("max_response_length", "max_response_length"),
            ("train_batch_size", "train_batch_size"), ("total_training_steps", "total_training_steps"),
            ("NPU devices", "visible_devices"), ("rollout enforce_eager", "rollout_enforce_eager"),
            ("rollout calculate_log_probs", "rollout_calculate_log_probs"), ("rollout n", "rollout_n")]
    for label, key in rows:
        v = c.get(key, UNKNOWN)
        t.add_row(label, f"[yellow]{v}[/]" if v == UNKNOWN else str(v), parsed.sources.get(key, ""))
    console.print(t)
    for w in parsed.warnings + parsed.profiler.get("warnings", []):
        console.print(f"  [yellow]note:[/] {escape(w)}")


def print_diff(console: Console, diff: str) -> None:
    for line in diff.splitlines():
        style = ("green" if line.startswith("+") else "red" if line.startswith("-")
                 else "cyan" if line.startswith("@@") else "")
        console.print(Text(line, style=style), soft_wrap=True)


def print_checks(console: Console, checks: List[Check]) -> None:
    t = Table(title="stage 1 · environment check")
    t.add_column("")
    t.add_column("check")
    t.add_column("found")
    t.add_column("fix")
    for c in checks:
        mark = "[green]✓[/]" if c.ok else ("[red]✗[/]" if c.required else "[yellow]–[/]")
        t.add_row(mark, c.name, c.detail, c.fix or "")
    console.print(t)


def print_stage3(console: Console, st: Stage3) -> None:
    t = Table(title=f"stage 3 · captures and analyse() ({st.seam}{'' if st.real else ', not torch_npu'})")
    t.add_column("#")
    t.add_column("side")
    t.add_column("operation")
    t.add_column("result")
    t.add_column("detail")
    for o in st.operations:
        t.add_row(str(o["n"]), o["side"], Text(o["operation"]) + Text("  " + o["target"], style="dim"),
                  o["result"], Text((o["detail"] or "") + (f" (fallback {o['fallback']})" if o.get("fallback") else "")))
    console.print(t)
    for w in st.known_warnings:
        console.print(Text("  known warning ", style="cyan") + Text(f"“{w['pattern']}” ×{w['count']}: {w['explanation']}"))
    for s in ("train", "infer"):
        status = st.side_status(s)
        label = {"device": "device kernels", "host_fallback": HOST_FALLBACK_LABEL,
                 "failed": "no usable evidence"}[status]
        console.print(f"  {s}: [bold]{label}[/]")


def write_skipped_report(st: Stage3, out_dir: Path, run_id: str, meta: Dict[str, Any], lang: str) -> Path:
    """Seed fallback 3: the report when no comparison is possible — metadata, what was found on
    each side and every operation attempted with its result; no grade is given."""
    zh = lang == "zh"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    j = st.to_json()
    L: List[str] = []
    L.append(f"# {'训推算子一致性扫描报告' if zh else 'Train–infer operator diff report'} — {meta.get('model_id', UNKNOWN)}")
    L.append("")
    L.append("> **evidence_missing** — " + ("对比已跳过（兜底 3）：" if zh else "comparison skipped (fallback 3): ")
             + j["reason"] + ("。本报告不给出任何“无差异”结论。" if zh else ". This report draws no \"no difference\" conclusion."))
    L.append("")
    L.append(f"## 1. {'元信息' if zh else 'Metadata'}")
    L.append("")
    L.append("| 项 | 值 |" if zh else "| Item | Value |")
    L.append("|---|---|")
    for k in ("model_id", "model_family", "train_backend", "infer_backend", "script_path", "collection_method"):
        L.append(f"| {k} | {meta.get(k, UNKNOWN)} |")
    L.append(f"| run_id | `{run_id}` |")
    L.append(f"| parallel_config | {json.dumps(meta.get('parallel_config'), ensure_ascii=False)} |")
    L.append(f"| NPU seam | {st.seam}{'' if st.real else (' (不是 torch_npu)' if zh else ' (not torch_npu)')} |")
    L.append(f"| generated_at | {datetime.now().strftime('%Y-%m-%d %H:%M:%S')} |")
    L.append("")
    L.append(f"## 2. {'算子证据来源' if zh else 'Evidence sources'}")
    L.append("")
    L.append("| 路径侧 | 状态 | 目录 | DB | COMPUTE_TASK_INFO 行数 | 兜底 | 说明 |" if zh else
             "| side | status | path | DB | COMPUTE_TASK_INFO rows | fallback | note |")
    L.append("|---|---|---|---|---:|---|---|")
    for s in st.sources:
        L.append(f"| {s.side} | {s.label or s.status} | `{s.path}` | {s.db or '—'} | "
                 f"{'—' if s.compute_task_info_rows is None else s.compute_task_info_rows} | {s.fallback or '—'} | {s.note} |")
    L.append("")
    L.append(f"## 3. {'采集阶段操作记录' if zh else 'Operations attempted'}")
    L.append("")
    for line in (meta.get("stage3") or {}).get("operations") or j["operations"]:
        L.append(f"- {line}")
    if st.known_warnings:
        L.append("")
        L.append("已识别的正常告警：" if zh else "Known, normal warnings:")
        for w in st.known_warnings:
            L.append(f"- “{w['pattern']}” ×{w['count']}: {w['explanation']}")
    L.append("")
    L.append(f"## 4. {'结论与建议' if zh else 'Conclusions and recommendations'}")
    L.append("")
    L.append("- **P0** " + ("补齐证据后重新扫描：" if zh else "complete the evidence and scan again: ")
             + "; ".join(f"{s.side}: {s.note or s.status}" for s in st.sources if s.status == "failed"))
    if any(s.side == "infer" and s.status == "failed" for s in st.sources):
        L.append("- **P0** " + ("推理侧：确认 actor_rollout_ref.rollout.profiler.tool_config.npu.discrete=True，"
                                "并在 Ascend 主机上执行 torch_npu.profiler.profiler.analyse(<*_ascend_pt>)"
                                if zh else "inference side: make sure actor_rollout_ref.rollout.profiler."
                                "tool_config.npu.discrete=True and run torch_npu.profiler.profiler.analyse(<*_ascend_pt>) "
                                "on the Ascend host"))
    L.append("")
    path = out_dir / "train_infer_op_diff_report.md"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(L), encoding="utf-8")
    os.replace(tmp, path)
    return path


