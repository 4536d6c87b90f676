"""PyTorch-profiler backend: Chrome traces (``*.pt.trace.json[.gz]``, verl's ``prof_rank-*.json.gz``)
read into the same raw tables as the Ascend readers (``captures.backend = 'torch_trace'``)."""
