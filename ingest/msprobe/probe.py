"""``tilake dumps probe``: the naming pattern of a dump side — the evidence for writing a boundary map.

Reads only ``dump.json`` / ``construct.json`` (no tensor is loaded): module path prefixes,
module classes with counts, fused-module candidates, API names with their call-counter range,
slot counts by io kind, layer count, wrapper segments (FSDP / Megatron ``module.module``), a
few sampled shapes per module class, the summary mode (tensor / statistics / md5), the
``*.parameters_grad`` entries and their tensors, and a MindSpore side (``Cell.*``) named as such.
"""
from __future__ import annotations

import re
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any, Dict, List

from tilake.ingest.msprobe.reader import API_RE, MODULE_RE, DumpSide
from tilake.lake.dump_records import ProbeReport, ProbeSide

FUSED_HINTS = ("qkv", "gate_up", "linear_fc1", "merged", "fused", "packed")
WRAPPERS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "module")


def probe_side(dump: DumpSide, samples: int = 3) -> ProbeSide:
    """Summarise one side's naming. Returns a JSON-able dict (no tensor values)."""
    classes: Counter = Counter()
    prefixes: Counter = Counter()
    fused: "OrderedDict[str, List[int]]" = OrderedDict()
    apis: Dict[str, List[int]] = {}
    shapes: Dict[str, List[Any]] = {}
    layers = set()
    wrappers: Counter = Counter()
    for e in sorted(dump.entries, key=lambda k: dump.order[k]):
        m = MODULE_RE.match(e)
        if m:
            path, cls = m.group("path"), m.group("cls")
            classes[cls] += 1
            segs = path.split(".")
            for w in WRAPPERS:
                wrappers[w] += sum(1 for s in segs if s == w) if w != "module" else \
                    (1 if path.startswith("module.module.") else 0)
            lm = re.search(r"(^|\.)layers\.(\d+)(\.|$)", path)
            if lm:
                layers.add(int(lm.group(2)))
                prefixes["Module." + path[: lm.start(2)] + "{i}."] += 1
            else:
                prefixes["Module." + ".".join(segs[:-1] + ["<leaf>"]) if len(segs) > 1 else "Module.<leaf>"] += 1
            if any(h in path.lower() or h in cls.lower() for h in FUSED_HINTS):
                out = next((s for s in dump.slots if s.entry == e and s.io == "output"), None)
                key = re.sub(r"layers\.\d+\.", "layers.{i}.", path) + "." + cls
                fused.setdefault(key, out.declared_shape if out else None)
            if len(shapes.setdefault(cls, [])) < samples:
                out = next((s for s in dump.slots if s.entry == e and s.io == "output"), None)
                inp = next((s for s in dump.slots if s.entry == e and s.io in ("input", "kwarg")), None)
                shapes[cls].append({"entry": e, "input0": inp.declared_shape if inp else None,
                                    "output0": out.declared_shape if out else None,
                                    "dtype": (out or inp).declared_dtype if (out or inp) else None})
            continue
        am = API_RE.match(e)
        if am:
            apis.setdefault(am.group("api"), []).append(int(am.group("counter")))
    io = Counter(s.io for s in dump.slots)
    grads = [e for e in dump.entries if e.endswith(".parameters_grad")]
    grad_tensors = sum(_count_tensors(dump.entries[e]) for e in grads)
    cells = sum(1 for e in dump.entries if e.startswith("Cell."))
    summary = "md5" if any("md5" in (s.declared_stats or {}) for s in dump.slots) else \
        ("statistics" if dump.meta.get("task") == "statistics" else "tensor")
    pt_present = sum(1 for s in dump.slots if s.data_name and (dump.data_dir / s.data_name).is_file())
    notes = []
    if cells:
        notes.append(f"MindSpore dump ({cells} Cell.* entries): not supported — tilake reads PyTorch msprobe dumps "
                     "(Module.* / API entries); dump the PyTorch side of the comparison instead")
    if summary != "tensor":
        notes.append(f"{summary} dump: no tensors; the exact gate uses "
                     + ("md5 (EXACT / NOT_EXACT, ULP unknown)" if summary == "md5" else
                        "statistics only (candidates, never EXACT)"))
    elif dump.slots and pt_present == 0:
        notes.append("dump.json names .pt files but none is present in dump_tensor_data/")
    return {
        "path": str(dump.dir), "step": dump.step, "rank": dump.rank, "proc": dump.proc,
        "task": dump.meta.get("task"), "level": dump.meta.get("level"),
        "framework": dump.meta.get("framework", "unknown"),
        "construct_variant": dump.construct_variant, "stack_variant": dump.stack_variant,
        "entries": len(dump.entries), "module_entries": sum(classes.values()),
        "api_entries": sum(len(v) for v in apis.values()), "tensor_slots": len(dump.slots),
        "slots_by_io": dict(io), "layers": (max(layers) + 1) if layers else 0,
        "prefixes": dict(prefixes.most_common(12)),
        "wrapper_segments": {k: v for k, v in wrappers.items() if v},
        "module_classes": dict(classes.most_common()),
        "fused_modules": [{"module": k, "output0_shape": v} for k, v in fused.items()],
        "apis": {k: {"calls": len(v), "counter_min": min(v), "counter_max": max(v)}
                 for k, v in sorted(apis.items(), key=lambda kv: -len(kv[1]))},
        "sampled_shapes": shapes,
        "summary_mode": summary, "pt_files_present": pt_present,
        "parameters_grad": {"entries": len(grads), "tensors": grad_tensors},
        "framework_detected": "mindspore" if cells else "pytorch",
        "notes": notes,
        "warnings": dump.warnings,
    }


def _count_tensors(value: Any) -> int:
    """Tensor records (``{"type": "...Tensor", ...}``) anywhere in a dump.json value."""
    if isinstance(value, dict):
        if str(value.get("type", "")).endswith("Tensor"):
            return 1
        return sum(_count_tensors(v) for v in value.values())
    if isinstance(value, list):
        return sum(_count_tensors(v) for v in value)
    return 0


def probe(train: Path, infer: Path = None) -> ProbeReport:
    """Probe one or both sides. Returns ``{"train": {...}, "infer": {...}}`` (sides given only)."""
    out: ProbeReport = {}
    if train is not None:
        out["train"] = probe_side(DumpSide(Path(train), "train"))
    if infer is not None:
        out["infer"] = probe_side(DumpSide(Path(infer), "infer"))
    if "train" in out and "infer" in out:
        a, b = set(out["train"]["apis"]), set(out["infer"]["apis"])
        out["api_counter_drift"] = sorted(
            k for k in a & b if out["train"]["apis"][k]["calls"] != out["infer"]["apis"][k]["calls"])
        out["classes_only_train"] = sorted(set(out["train"]["module_classes"]) - set(out["infer"]["module_classes"]))
        out["classes_only_infer"] = sorted(set(out["infer"]["module_classes"]) - set(out["train"]["module_classes"]))
    return out
