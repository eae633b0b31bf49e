"""PyTorch side of the linear algebra benchmark: the cases and timing method of
bench/linalg_bench.cpp (inputs rotated through copies covering more than 4x the L2, a warm-up
pass, 15 timed passes between CUDA events, median per call; no CUDA graphs since svd synchronises
for its convergence check). Prints one JSON object per case (impl, op, case, us, gbps)."""
import json
import statistics

import torch

L2_BYTES = 60 * 2**20
PASSES = 15
SHORT = {torch.float32: "f32", torch.float64: "f64", torch.complex64: "c64", torch.complex128: "c128"}


def copies_for(nbytes):
    return max(1, min(16, -(-4 * L2_BYTES // max(nbytes, 1))))


def time_calls(copies, call):
    for i in range(copies):
        call(i)
    torch.cuda.synchronize()
    times = []
    for _ in range(PASSES):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(copies):
            call(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / copies)
    return statistics.median(times)


def well_conditioned(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    n = shape[-1]
    a = torch.randn(*shape, generator=gen) + n * torch.eye(n)
    return a.to(dtype).cuda()


def emit(op, case, us, nbytes):
    print(json.dumps({"impl": "torch", "op": op, "case": case, "us": us, "gbps": nbytes / us / 1e3}), flush=True)


def itemsize(dtype):
    return torch.empty((), dtype=dtype).element_size()


def bench_inv(n, batch, dtype):
    nbytes = 2 * batch * n * n * itemsize(dtype)
    c = copies_for(nbytes)
    xs = [well_conditioned((batch, n, n), dtype, 10 + i) for i in range(c)]
    emit("inv", f"{SHORT[dtype]} {n}x{n} x{batch}", time_calls(c, lambda i: torch.linalg.inv_ex(xs[i])), nbytes)


def bench_lu(n, batch, k, dtype):
    nbytes = 2 * batch * n * n * itemsize(dtype)
    c = copies_for(nbytes)
    gen = torch.Generator().manual_seed(40)
    xs = [well_conditioned((batch, n, n), dtype, 20 + i) for i in range(c)]
    lus = [torch.linalg.lu_factor_ex(x)[:2] for x in xs]
    bs = [torch.randn(batch, n, k, generator=gen).to(dtype).cuda() for _ in range(c)]
    name = f"{SHORT[dtype]} {n}x{n} x{batch} k{k}"
    emit("lu_factor", name, time_calls(c, lambda i: torch.linalg.lu_factor_ex(xs[i])), nbytes)
    solve_bytes = batch * (n * n + 2 * n * k) * itemsize(dtype)
    emit("lu_solve", name, time_calls(c, lambda i: torch.linalg.lu_solve(lus[i][0], lus[i][1], bs[i])), solve_bytes)
    emit("solve_triangular", name,
         time_calls(c, lambda i: torch.linalg.solve_triangular(lus[i][0], bs[i], upper=True)), solve_bytes)


def bench_qr_svd(n, batch, dtype):
    gen = torch.Generator().manual_seed(60)
    a = torch.randn(batch, n, n, generator=gen).to(dtype).cuda()
    nbytes = 3 * batch * n * n * itemsize(dtype)
    name = f"{SHORT[dtype]} {n}x{n} x{batch}"
    emit("qr", name, time_calls(1, lambda i: torch.linalg.qr(a)), nbytes)
    emit("svd", name, time_calls(1, lambda i: torch.linalg.svd(a, full_matrices=False)), nbytes)


def main():
    cases = [
        lambda: bench_inv(2, 1 << 20, torch.float32),
        lambda: bench_inv(3, 1 << 20, torch.float32),
        lambda: bench_inv(4, 1 << 20, torch.float32),
        lambda: bench_lu(4, 1 << 20, 1, torch.complex64),
        lambda: bench_lu(64, 4096, 1, torch.complex64),
        lambda: bench_lu(64, 4096, 64, torch.complex64),
        lambda: bench_lu(2048, 1, 1, torch.complex64),
        lambda: bench_lu(2048, 1, 2048, torch.complex64),
        lambda: bench_qr_svd(512, 16, torch.float32),
        lambda: bench_qr_svd(2048, 1, torch.float32),
    ]
    for case in cases:
        try:
            case()
        except Exception as e:  # report and go on, like the ember side
            print(json.dumps({"impl": "torch", "op": "error", "case": "", "error": str(e)}), flush=True)


if __name__ == "__main__":
    main()
