"""Write tiny hand-made dumps in msprobe's on-disk format (for bad-input tests)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch


def tensor_json(t: torch.Tensor, data_name: str, dtype: Optional[str] = None) -> dict:
    d = {"type": "torch.Tensor", "dtype": dtype or str(t.dtype), "shape": list(t.shape)}
    if t.is_floating_point() and t.numel():
        f = t.float()
        d.update(Max=float(f.max()), Min=float(f.min()), Mean=float(f.mean()), Norm=float(f.norm()))
    d.update(requires_grad=False, data_name=data_name)
    return d


def write_dump(root: Path, entries: Sequence[Tuple[str, Optional[str], Dict[str, List[torch.Tensor]]]],
               folder: str = "step0/rank0", dump_order: Optional[List[str]] = None, construct: str = "26.x",
               declared_dtypes: Optional[Dict[str, str]] = None) -> Path:
    """entries: (entry name, construct parent, {"input": [...], "output": [...], "parameters": {...}}).

    construct: ``26.x`` (null roots), ``8.x`` ("" roots), ``megatron`` ([parent, micro_step]) or ``none``.
    """
    d = Path(root) / folder
    (d / "dump_tensor_data").mkdir(parents=True, exist_ok=True)
    data = {}
    cons = {}
    for entry, parent, slots in entries:
        rec = {"input_args": [], "input_kwargs": {}, "output": []}
        for io, key in (("input", "input_args"), ("output", "output")):
            for i, t in enumerate(slots.get(io, [])):
                name = f"{entry}.{io}.{i}.pt"
                torch.save(t, str(d / "dump_tensor_data" / name))
                rec[key].append(tensor_json(t, name, (declared_dtypes or {}).get(name)))
        if "parameters" in slots:
            rec["parameters"] = {}
            for k, t in slots["parameters"].items():
                name = f"{entry}.parameters.{k}.pt"
                torch.save(t, str(d / "dump_tensor_data" / name))
                rec["parameters"][k] = tensor_json(t, name)
        data[entry] = rec
        if construct == "8.x":
            cons[entry] = parent if parent is not None else ""
        elif construct == "megatron":
            cons[entry] = [parent, 0] if parent is not None else None
        else:
            cons[entry] = parent
    if construct == "megatron":
        cons["megatron_micro_step_number"] = 1
    order = dump_order or list(data)
    (d / "dump.json").write_text(json.dumps({"task": "tensor", "level": "mix", "framework": "pytorch",
                                             "dump_data_dir": str(d / "dump_tensor_data"),
                                             "data": {k: data[k] for k in order}}))
    if construct != "none":
        (d / "construct.json").write_text(json.dumps(cons))
    return d


def write_map(path: Path, boundaries: list, **extra) -> Path:
    import yaml

    m = {"family": "test", "pair": "mini", "reference_side": "train", "sides": {"train": {}, "infer": {}},
         "boundaries": boundaries, **extra}
    path.write_text(yaml.safe_dump(m))
    return path
