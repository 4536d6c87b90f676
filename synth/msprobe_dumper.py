"""The msprobe-format writer of synthetic dumps: the run config (:class:`Cfg`), the hook-driven
:class:`Dumper` and the math both model styles share. Format facts: see :mod:`tilake.synth.msprobe_step`.

Needs PyTorch (imported here at the top: import this module only where torch is required).
Used by ``tilake example --with-dump`` and by the tests (``tests/fixtures/msprobe_dumper.py`` is this module)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Cfg:
    """Model/run config (defaults = the shared pairs' tiny Qwen3: vocab 128, hidden 32, 2 layers, GQA 4/2, seq 8)."""

    vocab: int = 128
    hidden: int = 32
    inter: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 8
    theta: float = 1e6
    eps: float = 1e-6
    seq: int = 8
    dtype: torch.dtype = torch.bfloat16
    seed: int = 1234
    # "eager" = HF eager attention on the training side (matmul + softmax): a rounding-level difference
    # against the inference side's SDPA, as in the shared pairs
    train_attn: str = "sdpa"
    # inference norm with the fused residual add: "rounded" normalises the bf16-rounded sum (bitwise the
    # HF order); "fp32" normalises the unrounded fp32 sum (a fused add+RMSNorm kernel, e.g. torch_npu's
    # npu_add_rms_norm as vllm-ascend calls it) while the residual it returns is still rounded: a
    # rounding-level independent point at every fused norm (L>0 input norms, post-attention norms, final norm)
    infer_add_norm: str = "rounded"


# ------------------------------------------------------------------------------ dumper
class Dumper:
    """msprobe-format writer driven by module hooks plus explicit API records.

    Args:
        root: dump root (``step0/rank0`` is created below it).
        load: msprobe ``load`` config ``{"path": ..., "modules": [entry names]}`` or None.
        save_params: write parameter tensors (msprobe does in mix/L0).
    """

    def __init__(self, root: Path, load: Optional[dict] = None, save_params: bool = True) -> None:
        self.dir = Path(root) / "step0" / "rank0"
        self.data_dir = self.dir / "dump_tensor_data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data: Dict[str, dict] = {}
        self.construct: Dict[str, Optional[str]] = {}
        self.stack: List[str] = []
        self.calls: Dict[str, int] = {}
        self.api_counts: Dict[str, int] = {}
        self.load = load
        self.save_params = save_params
        self.handles = []
        self.active = False
        self._pending: Dict[int, List[str]] = {}

    # -- tensors
    def _tensor(self, t: torch.Tensor, name: str) -> dict:
        t = t.detach()
        d: Dict[str, Any] = {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape)}
        if t.is_floating_point() and t.numel():
            d.update(Max=float(t.max()), Min=float(t.min()), Mean=float(t.mean()), Norm=float(t.norm()))
        elif t.numel():
            d.update(Max=int(t.max()), Min=int(t.min()), Mean=None, Norm=None)
        d["requires_grad"] = bool(t.requires_grad)
        fn = name + ".pt"
        torch.save(t.cpu().clone(), str(self.data_dir / fn))
        d["data_name"] = fn
        return d

    def _value(self, v: Any, name: str) -> Any:
        if isinstance(v, torch.Tensor):
            return self._tensor(v, name)
        if isinstance(v, (tuple, list)):
            return [self._value(x, f"{name}.{i}") for i, x in enumerate(v)]
        if isinstance(v, bool):
            return {"type": "bool", "value": v}
        if isinstance(v, int):
            return {"type": "int", "value": v}
        if isinstance(v, float):
            return {"type": "float", "value": v}
        return None

    def _record(self, entry: str, args, kwargs, out, params: Optional[dict]) -> None:
        rec = {"input_args": [self._value(a, f"{entry}.input.{i}") for i, a in enumerate(args)],
               "input_kwargs": {k: self._value(v, f"{entry}.kwargs.{k}") for k, v in (kwargs or {}).items()},
               "output": [self._value(o, f"{entry}.output.{i}") for i, o in
                          enumerate(out if isinstance(out, (tuple, list)) else [out])]}
        if params is not None:
            rec["parameters"] = {k: self._tensor(p, f"{entry}.parameters.{k}") for k, p in params.items()} \
                if self.save_params else {}
        self.data[entry] = rec

    # -- modules
    def attach(self, model: nn.Module) -> None:
        """Hook every submodule (not the root, as msprobe does): call order, parents, I/O, ``load``."""
        for name, mod in model.named_modules():
            if not name:
                continue  # msprobe does not dump the model object itself
            self.handles.append(mod.register_forward_pre_hook(self._pre(name), with_kwargs=True))
            self.handles.append(mod.register_forward_hook(self._post(name), with_kwargs=True))

    def _pre(self, name):
        def hook(mod, args, kwargs):
            if not self.active:
                return None
            cls = type(mod).__name__
            key = f"Module.{name}.{cls}.forward"
            n = self.calls.get(key, 0)
            self.calls[key] = n + 1
            entry = f"{key}.{n}"
            self.construct[entry] = self.stack[-1] if self.stack else None
            self.stack.append(entry)
            if self.load and entry in self.load.get("modules", []):
                src = Path(self.load["path"]) / "step0" / "rank0" / "dump_tensor_data"
                new = list(args)
                for i, a in enumerate(args):
                    f = src / f"{entry}.input.{i}.pt"
                    if isinstance(a, torch.Tensor) and f.is_file():
                        new[i] = torch.load(str(f), weights_only=True)
                return tuple(new), kwargs
            return None
        return hook

    def _post(self, name):
        def hook(mod, args, kwargs, out):
            if not self.active:
                return None
            entry = self.stack.pop()
            params = {k: p for k, p in mod.named_parameters(recurse=False)}
            self._record(entry, args, kwargs, out, params)
            return None
        return hook

    # -- APIs
    def api(self, api: str, fn, *args):
        """Run ``fn(*args)`` and record it as the API entry ``<api>.<counter>.forward``."""
        out = fn(*args)
        if self.active:
            n = self.api_counts.get(api, 0)
            self.api_counts[api] = n + 1
            entry = f"{api}.{n}.forward"
            self.construct[entry] = self.stack[-1] if self.stack else None
            self._record(entry, args, {}, out, None)
        return out

    def write(self, shuffle_dump_json: bool = False) -> Path:
        """Write dump.json (completion order; reversed when ``shuffle_dump_json``), construct.json, stack.json."""
        keys = list(self.data)
        if shuffle_dump_json:
            keys = keys[::-1]
        dj = {"task": "tensor", "level": "mix", "framework": "pytorch", "dump_data_dir": str(self.data_dir),
              "data": {k: self.data[k] for k in keys}}
        (self.dir / "dump.json").write_text(json.dumps(dj, indent=1))
        (self.dir / "construct.json").write_text(json.dumps(self.construct, indent=1))
        (self.dir / "stack.json").write_text(json.dumps(
            {"0": [list(self.construct)[:1], ["File dumps_gen.py, line 1, in forward, \n y = m(x)"]]}, indent=1))
        for h in self.handles:
            h.remove()
        return self.dir


_D: Optional[Dumper] = None


def _api(name, fn, *args):
    """Run ``fn(*args)``, recorded as an API entry when a :class:`Dumper` is active."""
    return _D.api(name, fn, *args) if _D is not None else fn(*args)


def run_dumped(model: nn.Module, root: Path, call: Callable[[nn.Module], Any], load: Optional[dict] = None,
               shuffle_dump_json: bool = False) -> Path:
    """Run ``call(model)`` under a :class:`Dumper` writing into ``root``; returns the rank folder."""
    global _D
    d = Dumper(root, load=load)
    d.attach(model)
    _D = d
    d.active = True
    try:
        with torch.no_grad():
            call(model)
    finally:
        d.active = False
        _D = None
    return d.write(shuffle_dump_json=shuffle_dump_json)


# ------------------------------------------------------------------------------ shared math
def rope_cos_sin(cfg: Cfg, positions: torch.Tensor, theta: Optional[float] = None):
    """Neox-style RoPE tables ``[S, head_dim/2]`` in the model dtype (identical on both sides)."""
    half = cfg.head_dim // 2
    inv = 1.0 / ((theta or cfg.theta) ** (torch.arange(0, half, dtype=torch.float32) / half))
    f = positions.float()[:, None] * inv[None, :]
    return f.cos().to(cfg.dtype), f.sin().to(cfg.dtype)  # [S, half]


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in fp32, rounded back to the input dtype, then scaled (HF Qwen3RMSNorm order)."""
    h = x.float()
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return w * h.to(x.dtype)


def sdpa(q, k, v, kv_rep: int, scale: float):
    """q [1,H,S,d], k/v [1,KV,S,d] → [1,H,S,d] (causal), same call on both sides."""
    k = k.repeat_interleave(kv_rep, dim=1).contiguous()
    v = v.repeat_interleave(kv_rep, dim=1).contiguous()
    return F.scaled_dot_product_attention(q.contiguous(), k, v, is_causal=True, scale=scale)


def eager_attention(q, k, v, kv_rep: int, scale: float):
    """HF eager attention: matmul, causal mask, softmax in fp32, matmul (bf16 rounding differs from SDPA)."""
    k = k.repeat_interleave(kv_rep, dim=1)
    v = v.repeat_interleave(kv_rep, dim=1)
    w = torch.matmul(q, k.transpose(2, 3)) * scale
    s = q.shape[2]
    w = w.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, v)
