"""How prof_rank-0.json.gz here was made (torch 2.13.0+cpu, 2 CPU cores): eager attention
(matmul + softmax + matmul) and fused SDPA on the same tensors, one profiler step, record_shapes and
with_stack on, exported by export_chrome_trace (gzip by the .gz suffix). Run: python make_trace.py"""
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

torch.manual_seed(0)
x = torch.randn(2, 4, 8, 16)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
             schedule=schedule(wait=0, warmup=0, active=1, repeat=1),
             on_trace_ready=lambda p: p.export_chrome_trace("prof_rank-0.json.gz")) as prof:
    with record_function("actor_update"):
        eager = (x @ x.transpose(-1, -2) / 4.0).softmax(-1) @ x
    with record_function("rollout_generate"):
        fused = F.scaled_dot_product_attention(x, x, x)
    prof.step()
