"""Real workloads profiled on this machine (tiny models under torch.profiler)."""
