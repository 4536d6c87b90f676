"""The tiny Qwen3 of the synthetic dumps (:mod:`tilake.synth.msprobe_step`) in HuggingFace style (train)
and vLLM style (infer), with the deterministic weights and the injectable inference faults. Class
names are the ones msprobe records (renamed at the end of the HF/vLLM section). Needs PyTorch."""
from __future__ import annotations

import math
import operator
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from tilake.synth.msprobe_dumper import Cfg, _api, eager_attention, rms, rope_cos_sin, sdpa


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

    def __init__(self, n, eps, add_norm: str = "rounded"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n), requires_grad=False)
        self.eps = eps
        self.add_norm = add_norm   # Cfg.infer_add_norm

    def forward(self, x, residual=None):
        if residual is None:
            return rms(x, self.weight, self.eps)
        total = x.float() + residual.float()
        residual = total.to(x.dtype)
        if self.add_norm == "fp32":   # normalise the unrounded fp32 sum, round once at the end
            h = total * torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * h.to(x.dtype), residual
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
        self.input_layernorm = VRMSNorm(cfg.hidden, cfg.eps, cfg.infer_add_norm)
        self.post_attention_layernorm = VRMSNorm(cfg.hidden, cfg.eps, cfg.infer_add_norm)

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
        self.norm = VRMSNorm(cfg.hidden, cfg.eps, cfg.infer_add_norm)
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
