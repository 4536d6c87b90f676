"""A tiny Qwen3-style decoder (a few hundred thousand parameters) for real runtime evidence on any machine.

The layer shape follows Qwen3 (Hugging Face ``transformers`` ``modeling_qwen3.py``): token
embedding, per layer RMSNorm → attention with grouped KV heads, per-head RMSNorm on q and k
(``q_norm``/``k_norm``), rotary position embedding (rotate-half form), RMSNorm → SwiGLU MLP
(``down(silu(gate(x)) * up(x))``), final RMSNorm and an untied LM head. Sizes are tiny so a profiled
training step plus a prefill and a few decode steps run in seconds on two CPU cores.

Attention has the two implementations the train–infer diff is about:

* ``eager`` (training path, as in verl's FSDP/Megatron actor without flash-attention):
  ``softmax(q @ kᵀ · scale + causal mask) @ v`` — matmul, softmax, matmul as separate ops;
* ``sdpa`` (inference path, as vLLM's fused attention): one
  ``torch.nn.functional.scaled_dot_product_attention`` call over the KV cache.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TinyQwen3Config:
    """Model sizes. Defaults: vocab 256, hidden 64, 2 layers, 4 query heads / 2 KV heads of 16, MLP 128."""

    vocab_size: int = 256
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) * weight`` over the last dimension (unfused: pow, mean, rsqrt, mul)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[..., dim]`` → same shape."""
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.weight


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE. x: ``[batch, heads, seq, head_dim]``; pos: ``[seq]`` absolute positions."""
    half = x.shape[-1] // 2
    inv = 1.0 / (theta ** (torch.arange(0, half, device=x.device, dtype=torch.float32) / half))
    ang = pos.to(torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos.to(x.dtype) + rot * sin.to(x.dtype)


KV = Tuple[torch.Tensor, torch.Tensor]


class Attention(nn.Module):
    """Grouped-query attention with q/k RMSNorm and RoPE; ``impl`` is ``eager`` or ``sdpa``."""

    def __init__(self, c: TinyQwen3Config) -> None:
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_eps)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, impl: str,
                cache: Optional[KV] = None) -> Tuple[torch.Tensor, KV]:
        """x: ``[batch, seq, hidden]``; pos: ``[seq]``; cache: earlier ``(k, v)`` ``[batch, kv_heads, past, head_dim]``.

        Returns the output ``[batch, seq, hidden]`` and the updated cache.
        """
        c, (b, s, _) = self.c, x.shape
        q = self.q_norm(self.q_proj(x).view(b, s, c.num_heads, c.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, s, c.num_kv_heads, c.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, s, c.num_kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, pos, c.rope_theta), rope(k, pos, c.rope_theta)
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        rep = c.num_heads // c.num_kv_heads
        kr, vr = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        if impl == "sdpa":
            # causal only when the queries are the whole sequence (prefill); a decode query sees all keys
            out = F.scaled_dot_product_attention(q, kr, vr, is_causal=cache is None and s > 1)
        elif impl == "eager":
            scores = torch.matmul(q, kr.transpose(-1, -2)) / math.sqrt(c.head_dim)
            total = kr.shape[2]
            mask = torch.ones(s, total, dtype=torch.bool, device=x.device).tril(total - s)
            probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
            out = torch.matmul(probs, vr)
        else:
            raise ValueError(f"attention impl must be eager or sdpa, not {impl!r}")
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1)), (k, v)


class Block(nn.Module):
    """Pre-norm decoder layer: ``x + attn(norm(x))`` then ``x + mlp(norm(x))`` (SwiGLU MLP)."""

    def __init__(self, c: TinyQwen3Config) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_eps)
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x, pos, impl, cache=None):
        """See :meth:`Attention.forward`."""
        h, cache = self.self_attn(self.input_layernorm(x), pos, impl, cache)
        x = x + h
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y)), cache


class TinyQwen3(nn.Module):
    """The whole decoder: ``forward(ids [batch, seq]) → logits [batch, seq, vocab]``."""

    def __init__(self, c: TinyQwen3Config) -> None:
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor, impl: str = "eager", caches: Optional[List[KV]] = None,
                start: int = 0) -> Tuple[torch.Tensor, List[KV]]:
        """ids: ``[batch, seq]`` int64; ``start``: position of ``ids[:, 0]`` (the cache length).

        Returns logits ``[batch, seq, vocab]`` and the per-layer KV caches.
        """
        pos = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.embed_tokens(ids)
        new = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, pos, impl, caches[i] if caches else None)
            new.append(kv)
        return self.lm_head(self.norm(x)), new
