"""PyTorch side of the decode benchmark: same cases and the same timing method as ember's
bench/decode_bench.cpp (CUDA-graph replay of a run of calls, inputs rotated through more than
4x the L2 so HBM is measured, median of replays). Prints one JSON object per case."""
import json
import sys

import torch

from shapes import LINEAR_ROWS, SCALED_MM, SCALED_MM_MODES, SOFTMAX, gemv_cases
from timing import time_graph

L2_BYTES = 60 * 2**20


def copies_for(nbytes):
    return max(1, min(64, -(-4 * L2_BYTES // max(nbytes, 1))))


def bench_gemv(orientation, k, n, dtype=torch.bfloat16):
    nbytes = k * n * 2
    c = copies_for(nbytes)
    calls = max(c, 20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    if orientation == "1xKxN":
        ws = [torch.randn(k, n, device="cuda", dtype=dtype, generator=gen) for _ in range(c)]
        x = torch.randn(1, k, device="cuda", dtype=dtype, generator=gen)
        outs = [torch.empty(1, n, device="cuda", dtype=dtype) for _ in range(c)]
        fns = [lambda i=i: torch.mm(x, ws[i % c], out=outs[i % c]) for i in range(calls)]
    else:
        ws = [torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) for _ in range(c)]
        x = torch.randn(k, 1, device="cuda", dtype=dtype, generator=gen)
        outs = [torch.empty(n, 1, device="cuda", dtype=dtype) for _ in range(c)]
        fns = [lambda i=i: torch.mm(ws[i % c], x, out=outs[i % c]) for i in range(calls)]
    us = time_graph(fns)
    return {"op": "gemv", "case": f"{orientation} {k} {n}", "us": us, "gbps": nbytes / us / 1e3}


def bench_linear(m, k, n, dtype=torch.bfloat16):
    nbytes = k * n * 2
    c = copies_for(nbytes)
    calls = max(c, 20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    ws = [torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) for _ in range(c)]
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
    fns = [lambda i=i: torch.nn.functional.linear(x, ws[i % c]) for i in range(calls)]
    us = time_graph(fns)
    return {"op": "linear", "case": f"{m} {k} {n}", "us": us, "gbps": nbytes / us / 1e3}


def bench_softmax(rows, vocab):
    nbytes = rows * vocab * 4 * 2
    c = copies_for(nbytes)
    calls = max(c, 20)
    xs = [torch.randn(rows, vocab, device="cuda") for _ in range(c)]
    outs = [torch.empty_like(xs[0]) for _ in range(c)]
    fns = [lambda i=i: torch.softmax(xs[i % c], -1, out=outs[i % c]) for i in range(calls)]
    us = time_graph(fns)
    return {"op": "softmax", "case": f"{rows} {vocab}", "us": us, "gbps": nbytes / us / 1e3}


def bench_scaled_mm(m, k, n, mode):
    f8 = torch.float8_e4m3fn
    nbytes = k * n
    c = copies_for(nbytes) if m <= 16 else 1
    calls = max(c, 20) if m <= 16 else 5
    gen = torch.Generator(device="cuda").manual_seed(0)
    ws = [torch.randn(n, k, device="cuda", generator=gen).to(f8) for _ in range(c)]
    a = torch.randn(m, k, device="cuda", generator=gen).to(f8)
    if mode.startswith("tensorwise"):
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")
    else:
        sa, sb = torch.rand(m, 1, device="cuda") + 0.1, torch.rand(1, n, device="cuda") + 0.1
    fast = mode.endswith("-fast")
    fns = [lambda i=i: torch._scaled_mm(a, ws[i % c].t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
           for i in range(calls)]
    us = time_graph(fns)
    return {"op": "scaled_mm", "case": f"{m} {k} {n} {mode}", "us": us, "gbps": (m * k + nbytes) / us / 1e3,
            "tflops": 2 * m * k * n / us / 1e6}


def main():
    which = sys.argv[1:] or ["gemv", "softmax", "scaled_mm", "linear"]
    if "gemv" in which:
        for o, k, n in gemv_cases():
            print(json.dumps({"impl": "torch", **bench_gemv(o, k, n)}), flush=True)
    if "softmax" in which:
        for r, v in SOFTMAX:
            print(json.dumps({"impl": "torch", **bench_softmax(r, v)}), flush=True)
    if "scaled_mm" in which:
        for m, k, n in SCALED_MM:
            for mode in SCALED_MM_MODES:
                print(json.dumps({"impl": "torch", **bench_scaled_mm(m, k, n, mode)}), flush=True)
    if "linear" in which:
        for m, k, n in LINEAR_ROWS:
            print(json.dumps({"impl": "torch", **bench_linear(m, k, n)}), flush=True)


if __name__ == "__main__":
    main()
