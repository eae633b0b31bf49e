"""The timing method shared by the PyTorch benchmark scripts (bench/graph_timer.h is ember's
side): a CUDA graph of a run of calls, captured on a side stream after a warm-up run, replayed
after one warm replay; the median replay divided by the number of calls, in microseconds."""
import statistics

import torch


def time_graph(fns, replays=15):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for fn in fns:  # warm-up (library handles, workspaces)
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for fn in fns:
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / len(fns))
    return statistics.median(times)
