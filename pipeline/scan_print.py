"""Console output of ``tilake scan`` (stage tables, planned diff) and the fallback-3 report.

Everything here only renders what :mod:`tilake.pipeline.scan` decided; nothing is sequenced here.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tilake.files import atomic_write_text
from tilake.ingest.scan.collect import HOST_FALLBACK_LABEL, Stage3
from tilake.ingest.scan.env import Check
from tilake.ingest.scan.script import UNKNOWN, ParsedScript
from tilake.ingest.scan.shell import plain
from tilake.ingest.scan.verl_config import is_default


#: (label, config key) rows of the stage-1 table, in order
CONFIG_ROWS = [("training backend", "train_backend"), ("inference engine", "infer_backend"),
               ("model path", "model_path"), ("model id", "model_id"), ("train TP", "train_tp"),
               ("train PP", "train_pp"), ("train EP", "train_ep"), ("rollout TP", "infer_tp"),
               ("max_prompt_length", "max_prompt_length"), ("max_response_length", "max_response_length"),
               ("train_batch_size", "train_batch_size"), ("total_training_steps", "total_training_steps"),
               ("total_epochs", "total_epochs"), ("NPU devices", "visible_devices"),
               ("rollout enforce_eager", "rollout_enforce_eager"),
               ("rollout calculate_log_probs", "rollout_calculate_log_probs"), ("rollout n", "rollout_n")]


def shown_value(parsed: ParsedScript, key: str) -> str:
    """A config value as the table shows it: ``(default)`` appended when verl, not the script, sets it."""
    v = parsed.config.get(key, UNKNOWN)
    return f"{v} (default)" if is_default(parsed.sources.get(key, "")) else str(v)


def steps_note(parsed: ParsedScript) -> Optional[str]:
    """How long the run is about to be, and how to make it one step, when no step limit is set
    (``trainer.total_training_steps`` unset or above 1). None for a one-step run."""
    c = parsed.config
    steps, epochs = c.get("total_training_steps"), c.get("total_epochs")
    if isinstance(steps, int) and steps <= 1:
        return None
    length = (f"trainer.total_training_steps={steps}" if isinstance(steps, int)
              else f"{epochs} epoch(s) (trainer.total_epochs) with no step limit")
    how = (f"`tilake scan {parsed.path.name} -- trainer.total_training_steps=1`" if parsed.launch.passthrough
           else "trainer.total_training_steps=1 on the launch command (this script does not pass \"$@\" on)")
    return f"the run trains {length}; to profile one step only, use {how}"


def stage1_json(parsed: ParsedScript) -> Dict[str, Any]:
    """Stage 1 as plain data (``tilake scan --format json``): every value and source in full."""
    return {"script": str(parsed.path), "launch": {"module": parsed.launch.module, "line": parsed.launch.line,
                                                   "program": parsed.launch.program,
                                                   "overrides": {k: plain(v) for k, v in parsed.launch.overrides.items()},
                                                   "loops": parsed.launch_loops},
            "config": parsed.config, "sources": parsed.sources,
            "defaults": sorted(k for k, v in parsed.sources.items() if is_default(v)),
            "run_warnings": parsed.run_warnings, "warnings": parsed.warnings,
            "profiler": parsed.profiler, "steps_note": steps_note(parsed)}


def print_config(console: Console, parsed: ParsedScript) -> None:
    """The stage-1 table and its notes. Cells fold instead of being cut, so at 80 columns every
    value and source is shown in full (on several lines when long)."""
    t = Table(title=f"stage 1 · parsed {parsed.path.name} (launch command on line {parsed.launch.line})",
              show_lines=False, expand=True)
    t.add_column("item", overflow="fold", ratio=2)
    t.add_column("value", overflow="fold", ratio=2)
    t.add_column("from", style="dim", overflow="fold", ratio=5)
    for label, key in CONFIG_ROWS:
        v = parsed.config.get(key, UNKNOWN)
        t.add_row(label, Text(shown_value(parsed, key), style="yellow" if v == UNKNOWN else ""),
                  Text(parsed.sources.get(key, "")))
    console.print(t)
    for w in parsed.run_warnings:
        console.print(Text("  warning: ", style="bold red") + Text(w))
    for w in parsed.warnings + parsed.profiler.get("warnings", []):
        console.print(Text("  note: ", style="yellow") + Text(w))
    for line in (parsed.profiler.get("plan"), steps_note(parsed)):
        if line:
            console.print(Text("  note: ", style="yellow") + Text(line))


def print_diff(console: Console, diff: str) -> None:
    """The planned or applied unified diff, coloured per line (long lines are not cut)."""
    for line in diff.splitlines():
        style = ("green" if line.startswith("+") else "red" if line.startswith("-")
                 else "cyan" if line.startswith("@@") else "")
        console.print(Text(line, style=style), soft_wrap=True)


def print_checks(console: Console, checks: List[Check]) -> None:
    """The stage-1 environment checks, each with what was found and its fix."""
    t = Table(title="stage 1 · environment check")
    t.add_column("")
    t.add_column("check", overflow="fold")
    t.add_column("found", overflow="fold")
    t.add_column("fix", overflow="fold")
    for c in checks:
        mark = "[green]✓[/]" if c.ok else ("[red]✗[/]" if c.required else "[yellow]–[/]")
        t.add_row(mark, Text(c.name), Text(c.detail), Text(c.fix or ""))
    console.print(t)


def print_stage3(console: Console, st: Stage3) -> None:
    """Stage 3: every capture operation with its result, known warnings, and each side's evidence."""
    what = "captures" if st.seam.startswith("torch.profiler") else "captures and analyse()"
    t = Table(title=f"stage 3 · {what} ({st.seam}{'' if st.real else ', not torch_npu'})")
    t.add_column("#")
    t.add_column("side", overflow="fold")
    t.add_column("operation", overflow="fold")
    t.add_column("result", overflow="fold")
    t.add_column("detail", overflow="fold")
    for o in st.operations:
        t.add_row(str(o["n"]), o["side"], Text(o["operation"]) + Text("  " + o["target"], style="dim"),
                  o["result"], Text((o["detail"] or "") + (f" (fallback {o['fallback']})" if o.get("fallback") else "")))
    console.print(t)
    for w in st.known_warnings:
        console.print(Text("  known warning ", style="cyan") + Text(f"“{w['pattern']}” ×{w['count']}: {w['explanation']}"))
    for s in ("train", "infer"):
        status = st.side_status(s)
        label = {"device": "device kernels", "host_fallback": HOST_FALLBACK_LABEL,
                 "trace": "PyTorch-profiler trace(s) found (kernels, or CPU ops on a CPU: decided at ingest)",
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
    return atomic_write_text(path, "\n".join(L))


