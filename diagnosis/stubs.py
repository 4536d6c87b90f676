"""Stub rounds: the instruction that isolates a difference point with msprobe ``load`` (dump after
load), the source tensors it needs, and the round-k check that the stub took effect."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from tilake.diagnosis import selectors as S
from tilake.diagnosis.pair import Pair
from tilake.diagnosis.transforms import materialise
from tilake.errors import TilakeError
from tilake.files import atomic_path
from tilake.lake.dump_records import StubInstruction


def stub_instruction(pair: Pair, rows: List[dict], point: dict, round_no: int,
                     previous: Optional[dict]) -> dict:
    """Build ``stub_instruction.json`` for isolating ``point`` (the next round = ``round_no + 1``).

    Target side = the non-reference side when the map has a stub for it, else the reference side.
    Each module item names the target entry, the target input slot and file name msprobe's
    ``load`` expects (``<entry>.input.<i>.pt``, source: msprobe-format.md §8), the source ``.pt``
    files, and the transform to apply. Previous rounds' modules stay in (``cumulative``).
    """
    b = next(x for x in pair.boundaries if x.name == point["boundary"])
    target = next((s for s in (pair.other, pair.ref) if s in (b.stub or {})), None)
    base = {"round": round_no + 1, "isolate_boundary": {"name": b.name,
            "train": next((r.get("train_source") for r in rows if r["boundary"] == b.name), None),
            "infer": next((r.get("infer_source") for r in rows if r["boundary"] == b.name), None)},
            "class": point.get("class")}
    if target is None:
        why = (f"the map says: {b.stub_none}" if b.stub_none else
               f"no module consumes {b.name} in the map's stub section (msprobe load overrides module inputs only)")
        base.update(needed=True, available=False, modules=[],
                    reason=f"{why}: this point cannot be isolated; downstream stays evidence_missing")
        return base
    source = "train" if target == "infer" else "infer"
    specs = b.stub[target] if isinstance(b.stub[target], list) else [b.stub[target]]
    tview, sview = pair.views[target], pair.views[source]
    items = []
    for spec in specs:
        items.extend(_stub_items(pair, tview, sview, spec, source, base))
    entry = ", ".join(dict.fromkeys(m["target_entry"] for m in items))
    prev_mods = (previous or {}).get("modules_all", [])
    done = {(p["target_entry"], p["target_input"]) for p in prev_mods}   # a module input is stubbed once
    all_mods = prev_mods + [m for m in items if (m["target_entry"], m["target_input"]) not in done]
    d = pair.dumps[target]
    base.update(
        needed=True, available=True, source_side=source, target_side=target, modules=items,
        modules_all=all_mods,
        dump_after_load=True,
        msprobe_config={"task": "tensor", "level": "mix", "step": [d.step or 0],
                        "load": {"path": "<stub source dir written by `tilake dumps stub-prepare`>",
                                 "modules": sorted({m["target_entry"] for m in all_mods}),
                                 "step": [], "rank": [], "dump_after_load": True}},
        expected=(f"in round {round_no + 1} the {target} side's {entry} input(s) equal the {source} side's "
                  f"{b.name} bitwise (stub took effect); boundaries after {b.name} are then compared: "
                  "all EXACT → this was the only independent difference; remaining logic-level → the next "
                  "independent point; only rounding-level → stop"))
    return base


def _stub_items(pair: Pair, tview, sview, spec: dict, source: str, base: dict) -> List[dict]:
    """The module items of one stub spec ``{module, inputs: {index: source selector}}``; a source
    that does not resolve leaves the item without files and a warning in ``base``."""
    entry = tview.module_entry(spec["module"]) or f"Module.{spec['module']}.forward.0"
    items = []
    for idx, sel in (spec.get("inputs") or {}).items():
        try:
            res = S.resolve(sview, sel, source)
            files = [str(pair.dumps[source].pt_path(s)) for s in res.slots]
        except (S.Unavailable, TilakeError) as exc:
            files, res = [], None
            base.setdefault("warnings", []).append(f"input {idx}: {exc}")
        items.append({"target_entry": entry, "target_input": int(idx),
                      "target_file": f"{entry}.input.{idx}.pt",
                      "source_pt": files, "source_selector": sel,
                      "combine": res.combine if res else None,
                      "transform": [str(t) for t in (sel.get("transforms") or [])],
                      "dump_after_load": True})
    return items


def prepare_stub_source(pair: Pair, instruction: StubInstruction, out_dir: Path) -> List[Path]:
    """Write the transformed source tensors where msprobe ``load`` looks for them.

    Layout: ``<out>/step{S}/rank{R}/dump_tensor_data/<target_entry>.input.<i>.pt`` (the target
    side's step and rank folder name; a ``proc*`` name for non-distributed runs, where msprobe takes
    the first ``proc*`` folder it finds).

    Raises:
        TilakeError: the instruction is not available or a source file cannot be read.
    """
    import torch

    if not instruction.get("available"):
        raise TilakeError("this stub instruction cannot be applied: " + str(instruction.get("reason")))
    target, source = instruction["target_side"], instruction["source_side"]
    td = pair.dumps[target]
    # msprobe load reads step{S}/rank{R}/ for distributed runs and the first proc*/ folder otherwise
    d = Path(out_dir) / f"step{td.step or 0}" / (td.proc or f"rank{td.rank or 0}") / "dump_tensor_data"
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for m in instruction.get("modules_all") or instruction["modules"]:
        res = S.resolve(pair.views[source], m["source_selector"], source)
        t, _notes = materialise(pair.views[source], res, pair.dims, dict(pair.pairing))
        p = d / m["target_file"]
        with atomic_path(p) as tmp:   # never replaces a FIFO/device named like the target
            torch.save(t.contiguous().clone(), str(tmp))
        written.append(p)
    return written


def verify_stub(pair_k: Pair, instruction: dict) -> dict:
    """Round k check: each stubbed module input on the target side equals the source tensor bitwise."""
    import torch

    target, source = instruction["target_side"], instruction["source_side"]
    checks = []
    ok = True
    for m in instruction.get("modules_all") or instruction["modules"]:
        tv = pair_k.views[target]
        # the original entry name (wrapper segments included) first; else its stripped module path
        entry = m["target_entry"] if m["target_entry"] in pair_k.dumps[target].entries else \
            tv.module_entry(m["target_entry"].split("Module.", 1)[1].rsplit(".forward.", 1)[0])
        slot = pair_k.dumps[target].slot(entry, "input", str(m["target_input"])) if entry else None
        if slot is None:
            checks.append({"module": m["target_entry"], "input": m["target_input"], "equal": False,
                           "reason": "stubbed module input not in the round's dump"})
            ok = False
            continue
        try:
            got = pair_k.dumps[target].load(slot)
            res = S.resolve(pair_k.views[source], m["source_selector"], source)
            want, _ = materialise(pair_k.views[source], res, pair_k.dims, dict(pair_k.pairing))
            eq = tuple(got.shape) == tuple(want.shape) and got.dtype == want.dtype and torch.equal(got, want)
            checks.append({"module": m["target_entry"], "input": m["target_input"], "equal": bool(eq),
                           "reason": None if eq else "loaded input differs from the source tensor"})
            ok = ok and eq
        except (TilakeError, S.Unavailable) as exc:
            checks.append({"module": m["target_entry"], "input": m["target_input"], "equal": False,
                           "reason": str(exc)})
            ok = False
    return {"effective": ok, "checks": checks}
