"""PyTorch side of bench/core_bench.cpp: the same cases and timing method."""
import json
import statistics

import torch


def time_calls(f):
    f()
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(10):
            f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / 10)
    return statistics.median(times)


def report(op, name, nbytes, f):
    us = time_calls(f)
    print(json.dumps({"impl": "torch", "op": op, "case": name, "us": us, "gbps": nbytes / us / 1e3}), flush=True)


def main():
    n = 8192
    f32, bf16 = n * n * 4.0, n * n * 2.0
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    ah, bh = a.bfloat16(), b.bfloat16()
    report("elementwise", "add f32 contiguous", 3 * f32, lambda: torch.add(a, b))
    report("elementwise", "add f32 transposed+contiguous", 3 * f32, lambda: torch.add(a.t(), b))
    report("elementwise", "add f32 broadcast row", 2 * f32, lambda: torch.add(a, b[0]))
    report("elementwise", "mul bf16 contiguous", 3 * bf16, lambda: torch.mul(ah, bh))
    report("elementwise", "silu bf16 contiguous", 2 * bf16, lambda: torch.nn.functional.silu(ah))
    report("elementwise", "exp f32 strided (every 2nd col)", f32, lambda: torch.exp(a[:, ::2]))
    report("copy", "cast f32->bf16 contiguous", f32 + bf16, lambda: a.to(torch.bfloat16))
    report("copy", "transpose f32 (contiguous of .t())", 2 * f32, lambda: a.t().contiguous())
    report("reduce", "sum f32 last dim", f32, lambda: a.sum(1))
    report("reduce", "sum f32 first dim", f32, lambda: a.sum(0))
    report("reduce", "sum f32 all", f32, lambda: a.sum())
    report("reduce", "amax bf16 last dim", bf16, lambda: ah.amax(1))
    report("reduce", "sum f32 last dim of transposed", f32, lambda: a.t().sum(1))
    report("reduce", "argmax f32 last dim", f32, lambda: a.argmax(1))


if __name__ == "__main__":
    main()
