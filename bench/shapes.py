"""The benchmark shape lists, shared by the PyTorch script and (as emitted text) ember's program.

GEMV: 48 real (K, N) linear-layer shapes of decode-time models, each measured in both
orientations: 1xKxN (x[1,K] @ W[K,N]) and NxKx1 (W[N,K] @ x[K,1]) -> 96 shapes.
"""

GEMV_LAYERS = [
    # model, layer, K, N
    ("llama3-8b", "q/o", 4096, 4096), ("llama3-8b", "k/v", 4096, 1024), ("llama3-8b", "gate/up", 4096, 14336),
    ("llama3-8b", "down", 14336, 4096), ("llama3-8b", "lm_head", 4096, 128256),
    ("llama3-70b", "q/o", 8192, 8192), ("llama3-70b", "k/v", 8192, 1024), ("llama3-70b", "gate/up", 8192, 28672),
    ("llama3-70b", "down", 28672, 8192), ("llama3-70b", "lm_head", 8192, 128256),
    ("qwen3-30b-a3b", "q", 2048, 4096), ("qwen3-30b-a3b", "k/v", 2048, 512), ("qwen3-30b-a3b", "o", 4096, 2048),
    ("qwen3-30b-a3b", "router", 2048, 128), ("qwen3-30b-a3b", "expert gate/up", 2048, 768),
    ("qwen3-30b-a3b", "expert down", 768, 2048), ("qwen3-30b-a3b", "lm_head", 2048, 151936),
    ("qwen3.5-35b-a3b", "q+gate", 2048, 8192), ("qwen3.5-35b-a3b", "k/v", 2048, 512),
    ("qwen3.5-35b-a3b", "o", 4096, 2048), ("qwen3.5-35b-a3b", "router", 2048, 256),
    ("qwen3.5-35b-a3b", "expert gate/up", 2048, 512), ("qwen3.5-35b-a3b", "expert down", 512, 2048),
    ("qwen3.5-35b-a3b", "lm_head", 2048, 248320),
    ("gpt-oss-20b", "q", 2880, 4096), ("gpt-oss-20b", "k/v", 2880, 512), ("gpt-oss-20b", "router", 2880, 32),
    ("gpt-oss-20b", "expert gate_up", 2880, 5760), ("gpt-oss-20b", "expert down", 2880, 2880),
    ("gpt-oss-20b", "lm_head", 2880, 201088),
    ("lfm2-8b-a1b", "q/o", 2048, 2048), ("lfm2-8b-a1b", "k/v", 2048, 512), ("lfm2-8b-a1b", "conv in_proj", 2048, 6144),
    ("lfm2-8b-a1b", "dense gate/up", 2048, 7168), ("lfm2-8b-a1b", "dense down", 7168, 2048),
    ("lfm2-8b-a1b", "router", 2048, 32), ("lfm2-8b-a1b", "expert gate/up", 2048, 1792),
    ("lfm2-8b-a1b", "expert down", 1792, 2048), ("lfm2-8b-a1b", "lm_head", 2048, 65536),
    ("gemma2-9b", "q", 3584, 4096), ("gemma2-9b", "k/v", 3584, 2048), ("gemma2-9b", "gate/up", 3584, 14336),
    ("gemma2-9b", "down", 14336, 3584), ("gemma2-9b", "lm_head", 3584, 256000),
    ("gemma2-2b", "q", 2304, 2048), ("gemma2-2b", "gate/up", 2304, 9216), ("gemma2-2b", "down", 9216, 2304),
    ("gemma2-2b", "lm_head", 2304, 256000),
]
assert len(GEMV_LAYERS) == 48

SOFTMAX = [(1, 128256), (1, 129280), (1, 151936), (1, 201088), (1, 248320), (4, 128256), (8, 128256),
           (4, 201088), (8, 201088), (5, 51866), (64, 1000)]

# FP8 scaled_mm: (M, K, N) x {tensorwise, rowwise}; decode shapes and large-M throughput.
SCALED_MM = [(1, 4096, 14336), (2, 4096, 14336), (4, 4096, 14336), (1, 4096, 4096), (1, 2048, 768),
             (1, 8192, 28672), (4096, 4096, 4096), (8192, 8192, 8192)]
# "-fast": use_fast_accum=True (torch._scaled_mm's flag; ember's scaled_mm overload of that name).
SCALED_MM_MODES = ("tensorwise", "rowwise", "tensorwise-fast", "rowwise-fast")

# Weight-only FP8 linear (fp8_linear, 128x128 block scales; ember only: PyTorch has no such kernel,
# decode_bench prints ember's bf16 linear beside it): (M, K, N), the FP8 checkpoints' projections
# of Qwen3-30B-A3B (q, k/v, o) and Qwen3.5-35B-A3B (q+gate), a large one, and 2-8 rows (decode with a
# few sequences: mma_rows_kernel).
WEIGHT_FP8 = [(1, 2048, 4096), (1, 2048, 512), (1, 4096, 2048), (1, 2048, 8192), (1, 4096, 14336),
              (2, 2048, 4096), (4, 2048, 4096), (8, 2048, 4096), (2, 4096, 2048), (8, 4096, 2048),
              (8, 2048, 512), (8, 4096, 14336)]

# Small-batch decode (a few sequences): bf16 linear, x [M, K] @ W[N, K]^T, 2..8 rows on the
# nn.Linear weights of Qwen3-30B-A3B (q, k/v, o), Llama-3-8B (gate/up, down) and Llama-3-70B (gate/up).
LINEAR_ROWS = [(2, 2048, 4096), (4, 2048, 4096), (8, 2048, 4096), (8, 2048, 512), (8, 4096, 2048),
               (2, 4096, 14336), (4, 4096, 14336), (8, 4096, 14336), (8, 14336, 4096), (4, 8192, 28672)]


def gemv_cases():
    """(orientation, K, N) for all 96 shapes."""
    for _, _, k, n in GEMV_LAYERS:
        yield ("1xKxN", k, n)
        yield ("NxKx1", k, n)


if __name__ == "__main__":  # emits the case list for ember's C++ benchmark
    for o, k, n in gemv_cases():
        print(f"gemv {o} {k} {n}")
    for r, v in SOFTMAX:
        print(f"softmax {r} {v}")
    for m, k, n in SCALED_MM:
        for mode in SCALED_MM_MODES:
            print(f"scaled_mm {m} {k} {n} {mode}")
    for m, k, n in WEIGHT_FP8:
        print(f"weight_fp8 {m} {k} {n}")
    for m, k, n in LINEAR_ROWS:
        print(f"linear {m} {k} {n}")
