"""Generate train/infer dump pairs in msprobe's on-disk format, with injectable faults.

Why our own writer: ``mindstudio-probe`` installs from PyPI here and runs on CPU, but it pulls
pandas, scipy, scikit-learn, onnx and tensorboard into the environment and its
``PrecisionDebugger`` is a process-wide singleton (one side per process). The tests need many
small pairs quickly, so this module writes the same files msprobe 26.2.0 writes in ``tensor``
task, ``mix`` level (layout and fields copied from ``shared/reference/msprobe-format.md`` and the
real ``shared/fixtures/dumps/pairA`` dumps):

* ``<root>/step0/rank0/{dump.json, construct.json, stack.json, dump_tensor_data/*.pt}``;
* module entries ``Module.<path>.<Class>.forward.<n>`` (the root model itself is not dumped),
  API entries ``<API>.<global counter>.forward`` with their construct.json parent;
* ``dump.json`` keys in completion order, ``construct.json`` keys in call order;
* tensor slots ``{"type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad",
  "data_name"}`` with statistics in the tensor's own dtype, files ``<entry>.input.<i>.pt``,
  ``.kwargs.<name>.pt``, ``.output.<i>.pt``, ``.parameters.<name>.pt``;
* msprobe's ``load`` setting: a module listed in ``load.modules`` gets each tensor positional
  input ``i`` replaced by ``<load.path>/step<S>/rank<R>/dump_tensor_data/<entry>.input.<i>.pt``.

Models: a tiny Qwen3 in HuggingFace style (train: separate q/k/v and gate/up, RoPE in plain
tensor ops, batch-major ``[1, S, H]``) and in vLLM style (infer: fused ``qkv_proj`` /
``gate_up_proj``, per-layer rotary module, fused residual add in the norm, token-major ``[S, H]``).
Unlike the shared pairs, both sides use the same SDPA attention and the inference norm
normalises the *rounded* residual, so a clean generated pair is bitwise EXACT everywhere and
each injected fault is the only difference.
"""
from __future__ import annotations

import json
import math
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

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
    return _D.api(name, fn, *args) if _D is not None else fn(*args)


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


# ------------------------------------------------------------------------------ HF style (train)
class HFRMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        return rms(x, self.weight, self.eps)


class HFRotary(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def forward(self, x, position_ids):
        cos, sin = rope_cos_sin(self.cfg, position_ids[0])
        return torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None]  # [1,S,d]


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class HFAttention(nn.Module):
    """HF Qwen3Attention: separate q/k/v/o, q/k norm, RoPE as plain tensor ops, ``[1, S, H]`` layout."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        H, KV, d, hid = cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.hidden
        self.q_proj = nn.Linear(hid, H * d, bias=False)
        self.k_proj = nn.Linear(hid, KV * d, bias=False)
        self.v_proj = nn.Linear(hid, KV * d, bias=False)
        self.o_proj = nn.Linear(H * d, hid, bias=False)
        self.q_norm = HFRMSNorm(d, cfg.eps)
        self.k_norm = HFRMSNorm(d, cfg.eps)

    def forward(self, hidden_states, position_embeddings):
        c = self.cfg
        b, s, _ = hidden_states.shape
        q = self.q_norm(self.q_proj(hidden_states).view(b, s, c.heads, c.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(hidden_states).view(b, s, c.kv_heads, c.head_dim)).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        # operator.add → Tensor.__add__, which is what real msprobe records for HF's apply_rotary_pos_emb
        q = _api("Tensor.__add__", operator.add, q * cos, _rotate_half(q) * sin)
        k = _api("Tensor.__add__", operator.add, k * cos, _rotate_half(k) * sin)
        if c.train_attn == "eager":
            o = eager_attention(q, k, v, c.heads // c.kv_heads, c.head_dim ** -0.5)
        else:
            o = sdpa(q, k, v, c.heads // c.kv_heads, c.head_dim ** -0.5)
        o = o.transpose(1, 2).reshape(b, s, c.heads * c.head_dim)
        return self.o_proj(o), None


class HFSiLU(nn.Module):
    def forward(self, x):
        return F.silu(x)


class HFMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.inter, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.inter, bias=False)
        self.down_proj = nn.Linear(cfg.inter, cfg.hidden, bias=False)
        self.act_fn = HFSiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class HFLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = HFAttention(cfg)
        self.mlp = HFMLP(cfg)
        self.input_layernorm = HFRMSNorm(cfg.hidden, cfg.eps)
        self.post_attention_layernorm = HFRMSNorm(cfg.hidden, cfg.eps)

    def forward(self, hidden_states, position_embeddings=None):
        r = hidden_states
        h, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), position_embeddings=position_embeddings)
        h = r + h
        r = h
        return r + self.mlp(self.post_attention_layernorm(h))


class HFModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(HFLayer(cfg) for _ in range(cfg.layers))
        self.norm = HFRMSNorm(cfg.hidden, cfg.eps)
        self.rotary_emb = HFRotary(cfg)

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        pos = torch.arange(input_ids.shape[1])[None]
        pe = self.rotary_emb(h, pos)
        for layer in self.layers:
            h = layer(h, position_embeddings=pe)
        return self.norm(h)


class HFForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.model = HFModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


# ------------------------------------------------------------------------------ vLLM style (infer)
class VEmbedding(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.vocab, cfg.hidden), requires_grad=False)

    def forward(self, ids):
        return F.embedding(ids, self.weight)


class VLinear(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(o, i), requires_grad=False)

    def forward(self, x):
        return F.linear(x, self.weight), None


class QKVParallelLinear(VLinear):
    pass


class MergedColumnParallelLinear(VLinear):
    pass


class RowParallelLinear(VLinear):
    pass


class VRMSNorm(nn.Module):
    """vLLM RMSNorm with the fused residual add; normalises the rounded residual (see module docstring)."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n), requires_grad=False)
        self.eps = eps

    def forward(self, x, residual=None):
        if residual is None:
            return rms(x, self.weight, self.eps)
        residual = (x.float() + residual.float()).to(x.dtype)
        return rms(residual, self.weight, self.eps), residual


class RotaryEmbedding(nn.Module):
    def __init__(self, cfg, theta):
        super().__init__()
        self.cfg = cfg
        self.theta = theta

    def forward(self, positions, q, k):
        c = self.cfg
        cos, sin = rope_cos_sin(c, positions, self.theta)
        cos, sin = cos[:, None, :], sin[:, None, :]

        def rot(x, n):
            x = x.view(x.shape[0], n, c.head_dim)
            h = c.head_dim // 2
            x1, x2 = x[..., :h], x[..., h:]
            return torch.cat([x1 * cos + (-x2) * sin, x2 * cos + x1 * sin], -1).reshape(x.shape[0], n * c.head_dim)

        return rot(q, c.heads), rot(k, c.kv_heads)


class Attention(nn.Module):
    def __init__(self, cfg, scale):
        super().__init__()
        self.cfg = cfg
        self.scale = scale

    def forward(self, q, k, v):
        c = self.cfg
        s = q.shape[0]
        q = q.view(s, c.heads, c.head_dim).transpose(0, 1)[None]
        k = k.view(s, c.kv_heads, c.head_dim).transpose(0, 1)[None]
        v = v.view(s, c.kv_heads, c.head_dim).transpose(0, 1)[None]
        o = sdpa(q, k, v, c.heads // c.kv_heads, self.scale)
        return o[0].transpose(0, 1).reshape(s, c.heads * c.head_dim)


class VAttention(nn.Module):
    """vLLM Qwen3Attention: fused qkv_proj, per-layer rotary module, Attention module, token-major ``[S, H]``."""

    def __init__(self, cfg, theta, scale):
        super().__init__()
        self.cfg = cfg
        H, KV, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.qkv_proj = QKVParallelLinear(cfg.hidden, (H + 2 * KV) * d)
        self.o_proj = RowParallelLinear(H * d, cfg.hidden)
        self.q_norm = VRMSNorm(d, cfg.eps)
        self.k_norm = VRMSNorm(d, cfg.eps)
        self.rotary_emb = RotaryEmbedding(cfg, theta)
        self.attn = Attention(cfg, scale)

    def forward(self, positions, hidden_states):
        c = self.cfg
        qkv, _ = self.qkv_proj(hidden_states)
        qs, ks = c.heads * c.head_dim, c.kv_heads * c.head_dim
        q, k, v = qkv.split([qs, ks, ks], dim=-1)
        s = q.shape[0]
        q = self.q_norm(q.reshape(s, c.heads, c.head_dim)).reshape(s, qs)
        k = self.k_norm(k.reshape(s, c.kv_heads, c.head_dim)).reshape(s, ks)
        q, k = self.rotary_emb(positions, q, k)
        o, _ = self.o_proj(self.attn(q, k, v.contiguous()))
        return o


class SiluAndMul(nn.Module):
    def forward(self, x):
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


class VMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(cfg.hidden, 2 * cfg.inter)
        self.down_proj = RowParallelLinear(cfg.inter, cfg.hidden)
        self.act_fn = SiluAndMul()

    def forward(self, x):
        gu, _ = self.gate_up_proj(x)
        o, _ = self.down_proj(self.act_fn(gu))
        return o


class VLayer(nn.Module):
    def __init__(self, cfg, theta, scale):
        super().__init__()
        self.self_attn = VAttention(cfg, theta, scale)
        self.mlp = VMLP(cfg)
        self.input_layernorm = VRMSNorm(cfg.hidden, cfg.eps)
        self.post_attention_layernorm = VRMSNorm(cfg.hidden, cfg.eps)

    def forward(self, positions, hidden_states, residual):
        if residual is None:
            residual = hidden_states
            h = self.input_layernorm(hidden_states)
        else:
            h, residual = self.input_layernorm(hidden_states, residual)
        h = self.self_attn(positions=positions, hidden_states=h)
        h, residual = self.post_attention_layernorm(h, residual)
        return self.mlp(h), residual


class VModel(nn.Module):
    def __init__(self, cfg, theta, scale, drop_final_residual=False):
        super().__init__()
        self.embed_tokens = VEmbedding(cfg)
        self.layers = nn.ModuleList(VLayer(cfg, theta, scale) for _ in range(cfg.layers))
        self.norm = VRMSNorm(cfg.hidden, cfg.eps)
        self.drop_final_residual = drop_final_residual

    def forward(self, ids, positions):
        h = self.embed_tokens(ids)
        residual = None
        for layer in self.layers:
            h, residual = layer(positions, h, residual)
        if self.drop_final_residual:
            return self.norm(h)  # fault: the residual stream is dropped before the final norm
        h, _ = self.norm(h, residual)
        return h


class LogitsProcessor(nn.Module):
    def forward(self, lm_head, hidden):
        return F.linear(hidden, lm_head.weight)


class VLMHead(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.vocab, cfg.hidden), requires_grad=False)


class VForCausalLM(nn.Module):
    def __init__(self, cfg, theta=None, scale=None, drop_final_residual=False):
        super().__init__()
        self.model = VModel(cfg, theta or cfg.theta, scale or cfg.head_dim ** -0.5, drop_final_residual)
        self.lm_head_holder = [VLMHead(cfg)]  # not a submodule: vLLM passes lm_head as an argument
        self.logits_processor = LogitsProcessor()

    def forward(self, ids, positions):
        return self.logits_processor(self.lm_head_holder[0], self.model(ids, positions))


# class names as the real frameworks spell them (msprobe writes type(module).__name__)
for _cls, _name in ((HFRMSNorm, "Qwen3RMSNorm"), (HFRotary, "Qwen3RotaryEmbedding"), (HFAttention, "Qwen3Attention"),
                    (HFSiLU, "SiLUActivation"), (HFMLP, "Qwen3MLP"), (HFLayer, "Qwen3DecoderLayer"),
                    (HFModel, "Qwen3Model"), (HFForCausalLM, "Qwen3ForCausalLM"), (VEmbedding, "VocabParallelEmbedding"),
                    (VRMSNorm, "RMSNorm"), (VAttention, "Qwen3Attention"), (VMLP, "Qwen3MLP"), (VLayer, "Qwen3DecoderLayer"),
                    (VModel, "Qwen3Model"), (VForCausalLM, "Qwen3ForCausalLM")):
    _cls.__name__ = _name


# ------------------------------------------------------------------------------ Megatron-core style (train)
class MColumnParallelLinear(VLinear):
    """Megatron ColumnParallelLinear: returns ``(output, bias)``; activations ``[S, B, H]``."""


class MRMSNorm(nn.Module):
    """Megatron RMSNorm (no fused residual)."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        return rms(x, self.weight, self.eps)


class MCoreAttention(nn.Module):
    """DotProductAttention: q ``[S, B, np, hn]``, k/v ``[S, B, ng, hn]`` → ``[S, B, np·hn]`` (same SDPA call)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def forward(self, q, k, v):
        c = self.cfg
        s, b = q.shape[0], q.shape[1]
        q, k, v = (x.permute(1, 2, 0, 3) for x in (q, k, v))  # [B, heads, S, hn]
        o = sdpa(q, k, v, c.heads // c.kv_heads, c.head_dim ** -0.5)
        return o.permute(2, 0, 1, 3).reshape(s, b, c.heads * c.head_dim)


class MSelfAttention(nn.Module):
    """Megatron SelfAttention: linear_qkv output interleaved per query group ``[q_g; k_g; v_g]``."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        H, KV, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.linear_qkv = MColumnParallelLinear(cfg.hidden, (H + 2 * KV) * d)
        self.q_layernorm = MRMSNorm(d, cfg.eps)
        self.k_layernorm = MRMSNorm(d, cfg.eps)
        self.core_attention = MCoreAttention(cfg)
        self.linear_proj = RowParallelLinear(H * d, cfg.hidden)

    def forward(self, hidden_states, rotary_pos_emb=None):
        c = self.cfg
        s, b = hidden_states.shape[:2]
        qkv, _ = self.linear_qkv(hidden_states)
        g = qkv.view(s, b, c.kv_heads, (c.heads // c.kv_heads + 2) * c.head_dim)
        qn = c.heads // c.kv_heads * c.head_dim
        q = g[..., :qn].reshape(s, b, c.heads, c.head_dim)
        k = g[..., qn:qn + c.head_dim].reshape(s, b, c.kv_heads, c.head_dim)
        v = g[..., qn + c.head_dim:].reshape(s, b, c.kv_heads, c.head_dim)
        q, k = self.q_layernorm(q), self.k_layernorm(k)
        cos, sin = rotary_pos_emb  # [S, hn/2]
        cos, sin = cos[:, None, None, :], sin[:, None, None, :]

        def rot(x):
            h = c.head_dim // 2
            x1, x2 = x[..., :h], x[..., h:]
            return torch.cat([x1 * cos + (-x2) * sin, x2 * cos + x1 * sin], -1)

        o = self.core_attention(rot(q), rot(k), v.contiguous())
        out, _ = self.linear_proj(o)
        return out, None


class MMLP(nn.Module):
    """Megatron MLP: linear_fc1 = [gate; up], SwiGLU, linear_fc2."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.linear_fc1 = MColumnParallelLinear(cfg.hidden, 2 * cfg.inter)
        self.linear_fc2 = RowParallelLinear(cfg.inter, cfg.hidden)

    def forward(self, x):
        h, _ = self.linear_fc1(x)
        i = self.cfg.inter
        out, _ = self.linear_fc2(F.silu(h[..., :i]) * h[..., i:])
        return out, None


class MLayer(nn.Module):
    """Megatron TransformerLayer: returns ``(hidden, context)``; residual added in bf16 like HF."""

    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = MRMSNorm(cfg.hidden, cfg.eps)
        self.self_attention = MSelfAttention(cfg)
        self.pre_mlp_layernorm = MRMSNorm(cfg.hidden, cfg.eps)
        self.mlp = MMLP(cfg)

    def forward(self, hidden_states, rotary_pos_emb=None):
        a, _ = self.self_attention(self.input_layernorm(hidden_states), rotary_pos_emb=rotary_pos_emb)
        h = hidden_states + a
        m, _ = self.mlp(self.pre_mlp_layernorm(h))
        return h + m, None


class MBlock(nn.Module):
    """TransformerBlock (``decoder``)."""

    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.ModuleList(MLayer(cfg) for _ in range(cfg.layers))
        self.final_layernorm = MRMSNorm(cfg.hidden, cfg.eps)

    def forward(self, hidden_states, rotary_pos_emb=None):
        for layer in self.layers:
            hidden_states, _ = layer(hidden_states, rotary_pos_emb=rotary_pos_emb)
        return self.final_layernorm(hidden_states)


class MEmbedding(nn.Module):
    """LanguageModelEmbedding: word_embeddings ``[B, S] → [B, S, H]``, then ``[S, B, H]``."""

    def __init__(self, cfg):
        super().__init__()
        self.word_embeddings = VEmbedding(cfg)

    def forward(self, input_ids):
        return self.word_embeddings(input_ids).transpose(0, 1).contiguous()


class MGPTModel(nn.Module):
    """GPTModel: embedding → decoder → output_layer (logits ``[S, B, V]``)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embedding = MEmbedding(cfg)
        self.decoder = MBlock(cfg)
        self.output_layer = MColumnParallelLinear(cfg.hidden, cfg.vocab)

    def forward(self, input_ids):
        cos, sin = rope_cos_sin(self.cfg, torch.arange(input_ids.shape[1]))
        h = self.decoder(self.embedding(input_ids), rotary_pos_emb=(cos, sin))
        out, _ = self.output_layer(h)
        return out


class MFloat16Module(nn.Module):
    """Float16Module wrapper (``module.module.`` prefixes)."""

    def __init__(self, cfg):
        super().__init__()
        self.module = MGPTModel(cfg)

    def forward(self, input_ids):
        return self.module(input_ids)


class MDDP(nn.Module):
    """DistributedDataParallel wrapper (the root, not dumped by msprobe)."""

    def __init__(self, cfg):
        super().__init__()
        self.module = MFloat16Module(cfg)

    def forward(self, input_ids):
        return self.module(input_ids)


for _cls, _name in ((MColumnParallelLinear, "ColumnParallelLinear"), (MRMSNorm, "RMSNorm"),
                    (MCoreAttention, "DotProductAttention"), (MSelfAttention, "SelfAttention"), (MMLP, "MLP"),
                    (MLayer, "TransformerLayer"), (MBlock, "TransformerBlock"), (MEmbedding, "LanguageModelEmbedding"),
                    (MGPTModel, "GPTModel"), (MFloat16Module, "Float16Module"), (MDDP, "DistributedDataParallel")):
    _cls.__name__ = _name


def build_megatron(cfg: Cfg, w: Dict[str, torch.Tensor]) -> MDDP:
    """Megatron-core-style model from HF weights (linear_qkv rows regrouped per query group)."""
    with torch.device("meta"):
        m = MDDP(cfg)
    H, KV, d = cfg.heads, cfg.kv_heads, cfg.head_dim
    qg = H // KV
    sd = {"module.module.embedding.word_embeddings.weight": w["model.embed_tokens.weight"],
          "module.module.decoder.final_layernorm.weight": w["model.norm.weight"],
          "module.module.output_layer.weight": w["lm_head.weight"]}
    for i in range(cfg.layers):
        p, q = f"model.layers.{i}.", f"module.module.decoder.layers.{i}."
        wq = w[p + "self_attn.q_proj.weight"].view(KV, qg * d, -1)
        wk = w[p + "self_attn.k_proj.weight"].view(KV, d, -1)
        wv = w[p + "self_attn.v_proj.weight"].view(KV, d, -1)
        sd[q + "self_attention.linear_qkv.weight"] = torch.cat([wq, wk, wv], 1).reshape((H + 2 * KV) * d, -1)
        sd[q + "self_attention.q_layernorm.weight"] = w[p + "self_attn.q_norm.weight"]
        sd[q + "self_attention.k_layernorm.weight"] = w[p + "self_attn.k_norm.weight"]
        sd[q + "self_attention.linear_proj.weight"] = w[p + "self_attn.o_proj.weight"]
        sd[q + "input_layernorm.weight"] = w[p + "input_layernorm.weight"]
        sd[q + "pre_mlp_layernorm.weight"] = w[p + "post_attention_layernorm.weight"]
        sd[q + "mlp.linear_fc1.weight"] = torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]], 0)
        sd[q + "mlp.linear_fc2.weight"] = w[p + "mlp.down_proj.weight"]
    m.load_state_dict(sd, assign=True)
    for par in m.parameters():
        par.requires_grad_(False)
    return m.eval()


def dump_megatron(cfg: Cfg, root: Path, w=None) -> Path:
    """Dump the Megatron-style forward (input ``[1, S]``) into ``root``; returns the rank folder."""
    global _D
    w = w or weights(cfg)
    m = build_megatron(cfg, w)
    d = Dumper(root)
    d.attach(m)
    _D = d
    d.active = True
    try:
        with torch.no_grad():
            m(prompt(cfg)[None])
    finally:
        d.active = False
        _D = None
    return d.write()


# ------------------------------------------------------------------------------ weights & faults
def weights(cfg: Cfg) -> Dict[str, torch.Tensor]:
    """Deterministic HF-named weights (norms 1+0.1·N, embeddings N, linears N/sqrt(fan_in))."""
    g = torch.Generator().manual_seed(cfg.seed)
    with torch.device("meta"):
        ref = HFForCausalLM(cfg)
    out = {}
    for n, p in ref.named_parameters():
        if "norm" in n:
            t = 1 + 0.1 * torch.randn(p.shape, generator=g)
        elif "embed" in n:
            t = torch.randn(p.shape, generator=g)
        else:
            t = torch.randn(p.shape, generator=g).div_(math.sqrt(p.shape[1]))
        out[n] = t.to(cfg.dtype)
        del t
    return out


def build_train(cfg: Cfg, w: Dict[str, torch.Tensor]) -> HFForCausalLM:
    """HF-style model holding ``w`` (no copies: meta device + ``assign``)."""
    with torch.device("meta"):
        m = HFForCausalLM(cfg)
    m.load_state_dict(w, assign=True)
    for p in m.parameters():
        p.requires_grad_(False)
    return m.eval()


def build_infer(cfg: Cfg, w: Dict[str, torch.Tensor], fault: Optional[str] = None) -> VForCausalLM:
    """vLLM-style model from HF weights; ``fault`` ∈ {None, "weight_row", "attn_scale", "drop_residual"}."""
    scale = cfg.head_dim ** -0.5
    if fault == "attn_scale":
        scale = (cfg.head_dim * 0.64) ** -0.5  # wrong constant: softmax scale from a wrong head_dim
    with torch.device("meta"):
        m = VForCausalLM(cfg, scale=scale, drop_final_residual=(fault == "drop_residual"))
    sd = {"model.embed_tokens.weight": w["model.embed_tokens.weight"], "model.norm.weight": w["model.norm.weight"]}
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        sd[p + "self_attn.qkv_proj.weight"] = torch.cat(
            [w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"], w[p + "self_attn.v_proj.weight"]], 0)
        sd[p + "self_attn.o_proj.weight"] = w[p + "self_attn.o_proj.weight"]
        sd[p + "self_attn.q_norm.weight"] = w[p + "self_attn.q_norm.weight"]
        sd[p + "self_attn.k_norm.weight"] = w[p + "self_attn.k_norm.weight"]
        gu = torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]], 0).clone()
        if fault == "weight_row" and i == cfg.layers - 1:
            gu[3] = -gu[3]  # fault: one corrupted gate row in the last layer
        sd[p + "mlp.gate_up_proj.weight"] = gu
        sd[p + "mlp.down_proj.weight"] = w[p + "mlp.down_proj.weight"]
        sd[p + "input_layernorm.weight"] = w[p + "input_layernorm.weight"]
        sd[p + "post_attention_layernorm.weight"] = w[p + "post_attention_layernorm.weight"]
    m.load_state_dict(sd, assign=True)
    for p in m.parameters():
        p.requires_grad_(False)
    m.lm_head_holder[0].weight = nn.Parameter(w["lm_head.weight"], requires_grad=False)
    return m.eval()


def prompt(cfg: Cfg) -> torch.Tensor:
    """Deterministic token ids ``[seq]``."""
    g = torch.Generator().manual_seed(cfg.seed + 1)
    return torch.randint(0, cfg.vocab, (cfg.seq,), generator=g)


def dump_train(cfg: Cfg, root: Path, w=None) -> Path:
    """Dump the HF-style forward into ``root``; returns the rank folder."""
    global _D
    w = w or weights(cfg)
    m = build_train(cfg, w)
    d = Dumper(root)
    d.attach(m)
    _D = d
    d.active = True
    try:
        with torch.no_grad():
            m(prompt(cfg)[None])
    finally:
        d.active = False
        _D = None
    return d.write()


def dump_infer(cfg: Cfg, root: Path, fault: Optional[str] = None, load: Optional[dict] = None, w=None,
               shuffle_dump_json: bool = False) -> Path:
    """Dump the vLLM-style forward (optionally with a fault and an msprobe ``load``); returns the rank folder."""
    global _D
    w = w or weights(cfg)
    m = build_infer(cfg, w, fault)
    d = Dumper(root, load=load)
    d.attach(m)
    _D = d
    d.active = True
    try:
        with torch.no_grad():
            ids = prompt(cfg)
            m(ids, torch.arange(cfg.seq))
    finally:
        d.active = False
        _D = None
    return d.write(shuffle_dump_json=shuffle_dump_json)


def dump_with_msprobe(cfg: Cfg, side: str, out: Path, fault: Optional[str] = None,
                      config: Optional[str] = None) -> None:
    """Dump one side with the real msprobe (``mindstudio-probe``; one side per process: its debugger
    is a process-wide singleton). Same models and weights as :func:`dump_train` / :func:`dump_infer`.
    ``config``: an msprobe config.json (e.g. the one ``tilake dumps stub-prepare`` writes, with ``load``)."""
    from msprobe.pytorch import PrecisionDebugger

    w = weights(cfg)
    m = build_train(cfg, w) if side == "train" else build_infer(cfg, w, fault)
    if config:
        dbg = PrecisionDebugger(config_path=config, dump_path=str(out))
    else:
        dbg = PrecisionDebugger(task="tensor", level="mix", dump_path=str(out))
    with torch.no_grad():
        dbg.start(model=m)
        if side == "train":
            m(prompt(cfg)[None])
        else:
            m(prompt(cfg), torch.arange(cfg.seq))
        dbg.stop()


if __name__ == "__main__":  # python tests/dumps_gen.py SIDE OUT [FAULT|-] [MSPROBE_CONFIG]  (real msprobe)
    import sys

    _f = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None
    dump_with_msprobe(Cfg(), sys.argv[1], Path(sys.argv[2]), _f, sys.argv[4] if len(sys.argv) > 4 else None)
