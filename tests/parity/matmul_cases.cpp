// Parity cases for the matrix products: CUDA against the CPU (BLAS) reference.
#include "parity/harness.h"

namespace ember::test {
namespace {

// float32 sums that cancel differ by summation order: absolute tolerance on top of relative.
EMBER_PARITY_CASE_TOL(matmul_f32_odd, 1e-5, 1e-4, {
  return {matmul(randn_on(d, {37, 129}, kFloat32, 1), randn_on(d, {129, 65}, kFloat32, 2))};
});
EMBER_PARITY_CASE_TOL(matmul_f32_transposed_views, 1e-5, 1e-4, {
  const Tensor a = randn_on(d, {3, 70, 45}, kFloat32, 3).transpose(1, 2);
  const Tensor b = randn_on(d, {33, 70}, kFloat32, 4).t();
  return {matmul(a, b)};
});
EMBER_PARITY_CASE(matmul_bf16_broadcast_batch, {
  return {matmul(randn_on(d, {2, 1, 33, 64}, kBFloat16, 5), randn_on(d, {3, 64, 17}, kBFloat16, 6))};
});
EMBER_PARITY_CASE(matmul_f16_vectors, {
  const Tensor v = randn_on(d, {96}, kFloat16, 7), m = randn_on(d, {4, 96, 24}, kFloat16, 8);
  return {matmul(v, m), matmul(m.transpose(1, 2), v), matmul(v, v)};
});
EMBER_PARITY_CASE(matmul_f64_batched_vector, {
  return {matmul(randn_on(d, {5, 7, 31}, kFloat64, 9), randn_on(d, {31}, kFloat64, 10))};
});
EMBER_PARITY_CASE_TOL(bmm_c64, 1e-5, 1e-4, {
  return {bmm(randn_on(d, {6, 19, 40}, kComplex64, 11), randn_on(d, {6, 40, 23}, kComplex64, 12))};
});
EMBER_PARITY_CASE(matmul_int32_exact, {
  return {matmul(randint_on(d, -50, 50, {4, 9, 37}, kInt32, 13), randint_on(d, -50, 50, {37, 11}, kInt32, 14))};
});
// cuBLAS may round a partial sum to bf16 before the bias (seen on the H200: one bf16 ulp at the
// operands' scale, ~4e-3), so the comparison allows that.
EMBER_PARITY_CASE_TOL(linear_bf16_bias, 1e-2, 1e-2, {
  const Tensor x = randn_on(d, {3, 5, 96}, kBFloat16, 15), w = randn_on(d, {40, 96}, kBFloat16, 16);
  return {linear(x, w, randn_on(d, {40}, kBFloat16, 17)), linear(x, w)};
});
EMBER_PARITY_CASE(linear_single_row_f16, {  // the decode GEMV shape: one row, bias fused
  const Tensor x = randn_on(d, {1, 256}, kFloat16, 18), w = randn_on(d, {130, 256}, kFloat16, 19);
  return {linear(x, w, randn_on(d, {130}, kFloat16, 20))};
});
// The small-batch GEMV path (2..8 rows against an nn.Linear weight) with and without a fused
// bias: K = 1024 bf16 on tensor cores (mma_rows.cuh), K = 33 f16 in the rows kernel (scalar
// loads), and a strided f32 x.
EMBER_PARITY_CASE_TOL(linear_small_batch_rows, 2e-2, 2e-2, {
  const Tensor w = randn_on(d, {300, 1024}, kBFloat16, 21), b = randn_on(d, {300}, kBFloat16, 22);
  const Tensor wo = randn_on(d, {70, 33}, kFloat16, 23);
  std::vector<Tensor> outs;
  for (int64_t m : {2, 3, 5, 8}) {
    const Tensor x = randn_on(d, {m, 1024}, kBFloat16, 30 + m);
    outs.push_back(linear(x, w, b).to(kFloat32));
    outs.push_back(linear(randn_on(d, {m, 33}, kFloat16, 40 + m), wo).to(kFloat32));
  }
  const Tensor wide = randn_on(d, {4, 2048}, kFloat32, 24);
  outs.push_back(linear(wide.slice(1, 0, 2048, 2), randn_on(d, {129, 1024}, kFloat32, 25)));  // strided x
  outs.push_back(linear(randn_on(d, {9, 1024}, kBFloat16, 26), w, b).to(kFloat32));  // 9 rows: cuBLAS
  return outs;
});
// The small-batch path on tensor cores (cuda/mma_rows.cuh: 2..8 rows of bf16/f16 x, K a multiple
// of 32, 16-byte aligned rows, weights up to 32 MiB and 6144 outputs), at each block size its rule
// picks: 16 warps (K = 2048: 64 steps, 63 tiles), 8 (K = 1024: 32 steps), 4 (K = 512: 16 steps);
// f16 with a bias; a weight slice (rows 1056 values apart, K = 1024) with N = 1001 (a partial last
// tile of 16 rows); matmul against W^T as a view; N = 9000 (past 6144 outputs: cuBLAS).
EMBER_PARITY_CASE_TOL(linear_small_batch_mma_rows, 2e-2, 2e-2, {
  std::vector<Tensor> outs;
  const Tensor w16 = randn_on(d, {1000, 2048}, kFloat16, 130) * Scalar(0.05), b16 = randn_on(d, {1000}, kFloat16, 131);
  outs.push_back(linear(randn_on(d, {8, 2048}, kFloat16, 132), w16, b16).to(kFloat32));
  const Tensor w_slice = (randn_on(d, {1001, 1056}, kBFloat16, 133) * Scalar(0.05)).slice(1, 0, 1024);
  outs.push_back(linear(randn_on(d, {3, 1024}, kBFloat16, 134), w_slice, randn_on(d, {1001}, kBFloat16, 135)).to(kFloat32));
  const Tensor w_tall = randn_on(d, {6000, 512}, kBFloat16, 136) * Scalar(0.05);
  outs.push_back(linear(randn_on(d, {2, 512}, kBFloat16, 137), w_tall).to(kFloat32));
  outs.push_back(matmul(randn_on(d, {5, 512}, kBFloat16, 138), w_tall.t()).to(kFloat32));
  outs.push_back(linear(randn_on(d, {4, 512}, kBFloat16, 139), randn_on(d, {9000, 512}, kBFloat16, 140) * Scalar(0.05)).to(kFloat32));
  return outs;
});
// The columns layout x[1, K] @ B[K, N] with K split over blocks (atomics + last-block finish),
// a fused bias in both orientations, and repeated calls (the accumulators must be left zero).
EMBER_PARITY_CASE_TOL(gemv_columns_split_k_bias, 2e-2, 2e-2, {
  const Tensor x = randn_on(d, {1, 4096}, kBFloat16, 27), bk = randn_on(d, {4096, 512}, kBFloat16, 28);
  const Tensor bias = randn_on(d, {512}, kBFloat16, 29);
  const Tensor first = matmul(x, bk), second = matmul(x, bk);
  const Tensor w = randn_on(d, {512, 4096}, kBFloat16, 50);
  const Tensor col = randn_on(d, {4096, 1}, kBFloat16, 51);
  return {first.to(kFloat32), second.to(kFloat32), linear(x, bk.t(), bias).to(kFloat32),
          linear(randn_on(d, {1, 777}, kFloat32, 52), randn_on(d, {777, 130}, kFloat32, 53).t(), randn_on(d, {130}, kFloat32, 54)),
          matmul(w, col).to(kFloat32), linear(col.t(), w, bias).to(kFloat32)};
});

// columns_kernel with K split over blocks, finished by columns_finalize_kernel (shapes past the
// batch and cluster kernels' rules): bf16 K 4096 x N 2056 (a partial last tile) with bias, twice
// (the accumulator must be left zero), and as A @ v (A unit-stride along M); bf16 N 2051 (one
// element per load) with bias; f32 K 5000 x N 1500; each a smaller N than the call before on the
// same stream's accumulator. And the unsplit kernel: K 31 x N 150001 (one element per load, one
// split: fewer than 32 rows of K).
EMBER_PARITY_CASE_TOL(gemv_columns_split_finalize, 2e-2, 2e-2, {
  const Tensor x = randn_on(d, {1, 4096}, kBFloat16, 180), b = randn_on(d, {4096, 2056}, kBFloat16, 181) * Scalar(0.05);
  const Tensor bias = randn_on(d, {2056}, kBFloat16, 182);
  const Tensor b2051 = randn_on(d, {3000, 2051}, kBFloat16, 183) * Scalar(0.05);
  return {linear(x, b.t(), bias).to(kFloat32), linear(x, b.t(), bias).to(kFloat32),
          matmul(b.t(), randn_on(d, {4096, 1}, kBFloat16, 184)).to(kFloat32),
          linear(randn_on(d, {1, 3000}, kBFloat16, 185), b2051.t(), randn_on(d, {2051}, kBFloat16, 186)).to(kFloat32),
          matmul(randn_on(d, {1, 5000}, kFloat32, 187), randn_on(d, {5000, 1500}, kFloat32, 188) * Scalar(0.05)),
          linear(randn_on(d, {1, 31}, kBFloat16, 189), randn_on(d, {31, 150001}, kBFloat16, 190).t(),
                 randn_on(d, {150001}, kBFloat16, 191)).to(kFloat32)};
});

// The rows layout on large matrices: bf16 K = 2048 with 6500 rows and a bias, f32 K = 16400 (one
// 64 KB row per output), f16 K = 8192 as A @ v.
EMBER_PARITY_CASE_TOL(gemv_rows_large, 2e-2, 2e-2, {
  const Tensor x = randn_on(d, {1, 2048}, kBFloat16, 90), w = randn_on(d, {6500, 2048}, kBFloat16, 91) * Scalar(0.05);
  const Tensor bias = randn_on(d, {6500}, kBFloat16, 92);
  const Tensor x32 = randn_on(d, {1, 16400}, kFloat32, 93), w32 = randn_on(d, {400, 16400}, kFloat32, 94) * Scalar(0.05);
  const Tensor a16 = randn_on(d, {1601, 8192}, kFloat16, 95) * Scalar(0.05), v16 = randn_on(d, {8192, 1}, kFloat16, 96);
  return {linear(x, w, bias).to(kFloat32), linear(x32, w32, randn_on(d, {400}, kFloat32, 97)), matmul(a16, v16).to(kFloat32)};
});

// One input row against more than 4096 rows of K a multiple of 2048 (16-bit): 2 warps per row
// (row_parts_kernel). bf16 K 4096 x 4099 rows with bias (the last block's last pair of warps past
// the rows), f16 K 2048 x 5001 rows of a wider matrix (rows 2056 values apart) as A @ v.
EMBER_PARITY_CASE_TOL(gemv_rows_parts, 2e-2, 2e-2, {
  const Tensor x = randn_on(d, {1, 4096}, kBFloat16, 192), w = randn_on(d, {4099, 4096}, kBFloat16, 193) * Scalar(0.05);
  const Tensor a16 = (randn_on(d, {5001, 2056}, kFloat16, 194) * Scalar(0.05)).slice(1, 0, 2048);
  return {linear(x, w, randn_on(d, {4099}, kBFloat16, 195)).to(kFloat32), linear(x, w).to(kFloat32),
          matmul(a16, randn_on(d, {2048, 1}, kFloat16, 196)).to(kFloat32)};
});

// The columns layout on sm_90: one thread-block cluster per tile of columns (64 bf16/f16 or 32
// f32 columns with 16-byte loads, 32 with one element per load) with K split over its blocks.
// Edges: N not a multiple of the tile, K = 1 (a cluster of one block), K not a multiple of the
// split or of the 32 slices per block, B a strided view (ldb > N: 16-byte loads with ldb 520,
// one element per load with ldb 301), the other orientation (A @ v with A unit-stride along M),
// two steps of loads per thread (K 8192), bias and none.
EMBER_PARITY_CASE_TOL(gemv_columns_cluster_bf16_edges, 2e-2, 2e-2, {
  const Tensor x = randn_on(d, {1, 2048}, kBFloat16, 60);
  const Tensor b200 = randn_on(d, {2048, 200}, kBFloat16, 61), bias200 = randn_on(d, {200}, kBFloat16, 62);
  const Tensor x_k1 = randn_on(d, {1, 1}, kBFloat16, 63);
  const Tensor x1000 = randn_on(d, {1, 1000}, kBFloat16, 66), x2047 = randn_on(d, {1, 2047}, kBFloat16, 67);
  const Tensor wide = randn_on(d, {2048, 520}, kBFloat16, 68), bias512 = randn_on(d, {512}, kBFloat16, 69);
  const Tensor odd = randn_on(d, {1500, 301}, kBFloat16, 70);
  const Tensor x8192 = randn_on(d, {1, 8192}, kBFloat16, 71), bias1024 = randn_on(d, {1024}, kBFloat16, 72);
  const Tensor b8192 = randn_on(d, {8192, 1024}, kBFloat16, 73);
  const Tensor to_f32[] = {
      matmul(x, b200),
      linear(x, b200.t(), bias200),
      matmul(x_k1, randn_on(d, {1, 256}, kBFloat16, 64)),
      matmul(x_k1, randn_on(d, {1, 300}, kBFloat16, 65)),
      matmul(x1000, randn_on(d, {1000, 256}, kBFloat16, 74)),
      matmul(x2047, randn_on(d, {2047, 64}, kBFloat16, 75)),
      linear(x, wide.slice(1, 0, 512).t(), bias512),
      matmul(randn_on(d, {1, 1500}, kBFloat16, 76), odd.slice(1, 0, 296)),
      matmul(b200.t(), randn_on(d, {2048}, kBFloat16, 77)),
      linear(x8192, b8192.t(), bias1024),
  };
  std::vector<Tensor> outs;
  for (const Tensor& t : to_f32) outs.push_back(t.to(kFloat32));
  return outs;
});
// f16: N < 8 (one element per load), N = 1 through a strided view, and long K with a tiny N where
// one cluster per tile leaves most SMs idle (the split-K kernel: 16 columns of K 16384, 3 columns
// of K 8192), called twice (it must leave its accumulators zero).
EMBER_PARITY_CASE_TOL(gemv_columns_cluster_f16_narrow, 2e-2, 2e-2, {
  const Tensor x = randn_on(d, {1, 2048}, kFloat16, 80), b5 = randn_on(d, {2048, 5}, kFloat16, 81);
  const Tensor x_long = randn_on(d, {1, 16384}, kFloat16, 82), b16 = randn_on(d, {16384, 16}, kFloat16, 83);
  const Tensor b3 = randn_on(d, {8192, 3}, kFloat16, 84), bias16 = randn_on(d, {16}, kFloat16, 85);
  const Tensor x8192 = x_long.slice(1, 0, 8192);
  const Tensor to_f32[] = {
      matmul(x, b5),
      linear(x, b5.t(), randn_on(d, {5}, kFloat16, 86)),
      matmul(randn_on(d, {1, 1800}, kFloat16, 87), randn_on(d, {1800, 4}, kFloat16, 88).slice(1, 0, 1)),
      matmul(x_long, b16),
      linear(x_long, b16.t(), bias16),
      matmul(x_long, b16),
      matmul(x8192, b3),
  };
  std::vector<Tensor> outs;
  for (const Tensor& t : to_f32) outs.push_back(t.to(kFloat32));
  return outs;
});
// f32 (16-byte loads of 4 columns, tiles of 32): N = 36 (a partial second tile) with and without
// bias, N = 40000 at K = 40 (many tiles, clusters of one block), and K = 20000 with N = 12 (the
// split-K kernel). float32 sums of 20000 terms differ by order: ~1e-3 absolute at this scale.
EMBER_PARITY_CASE_TOL(gemv_columns_cluster_f32, 1e-4, 4e-3, {
  const Tensor x = randn_on(d, {1, 1536}, kFloat32, 90), b36 = randn_on(d, {1536, 36}, kFloat32, 91);
  return {matmul(x, b36), linear(x, b36.t(), randn_on(d, {36}, kFloat32, 92)),
          matmul(randn_on(d, {1, 40}, kFloat32, 93), randn_on(d, {40, 40000}, kFloat32, 94)),
          matmul(randn_on(d, {1, 20000}, kFloat32, 95), randn_on(d, {20000, 12}, kFloat32, 96))};
});

// The rows layout's batches (v6: whole batches of 16-byte loads unpredicated, then a predicated
// tail batch), with the group widths the host picks on a 132-SM H200: bf16 N = 1100 at K = 3392
// (groups of 32, 3 whole batches of 128 chunks + 40), f16 N = 300 at K = 4800 from a wider
// matrix (ldw 4808 > K; groups of 128, one batch of 512 + 88), f32 A @ v with N = 40 at K = 4400
// (groups of 256, one batch of 1024 + 76); 2..8 input rows (2 loads per batch) at K = 1216
// (2 whole batches of 64 + 24) with x rows strided (ldx 1240 > K), f32 rows at K = 1000 (3
// batches + 58), f16 rows of a wider weight (ldw 1032); bias and none.
EMBER_PARITY_CASE_TOL(gemv_rows_batches_and_tails, 2e-2, 2e-2, {
  std::vector<Tensor> outs;
  const Tensor w = randn_on(d, {1100, 3392}, kBFloat16, 100) * Scalar(0.05);
  outs.push_back(linear(randn_on(d, {1, 3392}, kBFloat16, 101), w, randn_on(d, {1100}, kBFloat16, 102)).to(kFloat32));
  const Tensor w16 = (randn_on(d, {300, 4808}, kFloat16, 103) * Scalar(0.05)).slice(1, 0, 4800);
  outs.push_back(linear(randn_on(d, {1, 4800}, kFloat16, 104), w16).to(kFloat32));
  // A warp per row (N >= 8 warps per SM, one input row): a weight slice (ldw 1032 > K 1000), K
  // shorter than one whole batch of 4 x 32 chunks.
  const Tensor w_slice = (randn_on(d, {1200, 1032}, kBFloat16, 124) * Scalar(0.05)).slice(1, 0, 1000);
  outs.push_back(linear(randn_on(d, {1, 1000}, kBFloat16, 125), w_slice, randn_on(d, {1200}, kBFloat16, 126)).to(kFloat32));
  const Tensor a32 = randn_on(d, {40, 4400}, kFloat32, 105) * Scalar(0.05);
  outs.push_back(matmul(a32, randn_on(d, {4400, 1}, kFloat32, 106)));
  const Tensor wm = randn_on(d, {300, 1216}, kBFloat16, 107) * Scalar(0.05), bm = randn_on(d, {300}, kBFloat16, 108);
  const Tensor wm32 = randn_on(d, {200, 1000}, kFloat32, 109) * Scalar(0.05);
  const Tensor wm16 = (randn_on(d, {260, 1032}, kFloat16, 110) * Scalar(0.05)).slice(1, 0, 1000);
  for (int64_t m = 2; m <= 8; ++m) {
    const Tensor x = randn_on(d, {m, 1240}, kBFloat16, 110 + m).slice(1, 0, 1216);
    outs.push_back(linear(x, wm, bm).to(kFloat32));
  }
  outs.push_back(linear(randn_on(d, {4, 1000}, kFloat32, 120), wm32, randn_on(d, {200}, kFloat32, 121)));
  outs.push_back(linear(randn_on(d, {7, 1000}, kFloat32, 122), wm32));
  outs.push_back(linear(randn_on(d, {6, 1000}, kFloat16, 123), wm16).to(kFloat32));
  return outs;
});

// The columns layout at N >= 100000 (the lm_head kernel: 16 threads x 16 bytes per tile, x staged
// in shared memory): bf16 K = 264 (2 whole batches of 128 rows + 8) with N = 100008 (a partial
// last tile of 128) with and without bias, f16 as A @ v (A unit-stride along M), f32 K = 40 with
// N = 100000 (tiles of 64, a partial last one).
EMBER_PARITY_CASE_TOL(gemv_columns_wide_n, 2e-2, 2e-2, {
  const Tensor x = randn_on(d, {1, 264}, kBFloat16, 130), b = randn_on(d, {264, 100008}, kBFloat16, 131);
  const Tensor bias = randn_on(d, {100008}, kBFloat16, 132);
  const Tensor a16 = randn_on(d, {264, 100000}, kFloat16, 133).t();
  return {matmul(x, b).to(kFloat32), linear(x, b.t(), bias).to(kFloat32),
          matmul(a16, randn_on(d, {264, 1}, kFloat16, 134)).to(kFloat32),
          matmul(randn_on(d, {1, 40}, kFloat32, 135), randn_on(d, {40, 100000}, kFloat32, 136))};
});

// The batch kernel on mid shapes (sm_90, bf16/f16; since v9 the C16 T256 L8 configuration,
// first written for v7's): N 2056 (a last tile of 8 of 128 columns) with K 997 (ranges ending in
// a predicated batch) with and without bias; K 2047 x N 5120 (ranges of whole batches, the last
// rank's last batch predicated); K 2047 x N 4096 with bias (v7's single-wave shape); f16 K 768
// with bias, as A @ v (A unit-stride along M) and from a wider matrix (ldb 2064 > N); K 512. Each
// repeated call checks that the mbarrier and cluster barriers leave nothing behind. f32 at such a
// shape runs the older kernels (the batch kernel takes 2-byte types only).
EMBER_PARITY_CASE_TOL(gemv_columns_batch_mid, 2e-2, 2e-2, {
  std::vector<Tensor> outs;
  const Tensor x997 = randn_on(d, {1, 997}, kBFloat16, 140), b2056 = randn_on(d, {997, 2056}, kBFloat16, 141);
  const Tensor bias2056 = randn_on(d, {2056}, kBFloat16, 142);
  outs.push_back(matmul(x997, b2056).to(kFloat32));
  outs.push_back(linear(x997, b2056.t(), bias2056).to(kFloat32));
  const Tensor x2047 = randn_on(d, {1, 2047}, kBFloat16, 143);
  const Tensor b5120 = randn_on(d, {2047, 5120}, kBFloat16, 144) * Scalar(0.05);
  outs.push_back(matmul(x2047, b5120).to(kFloat32));
  outs.push_back(linear(x2047, b5120.t(), randn_on(d, {5120}, kBFloat16, 145)).to(kFloat32));
  const Tensor b4096 = randn_on(d, {2047, 4096}, kBFloat16, 146) * Scalar(0.05), bias4096 = randn_on(d, {4096}, kBFloat16, 147);
  outs.push_back(linear(x2047, b4096.t(), bias4096).to(kFloat32));
  outs.push_back(linear(x2047, b4096.t(), bias4096).to(kFloat32));
  const Tensor x768 = randn_on(d, {1, 768}, kFloat16, 148), b768 = randn_on(d, {768, 2048}, kFloat16, 149);
  const Tensor bias768 = randn_on(d, {2048}, kFloat16, 150);
  outs.push_back(linear(x768, b768.t(), bias768).to(kFloat32));
  outs.push_back(linear(x768, b768.t(), bias768).to(kFloat32));
  outs.push_back(matmul(b768.t(), randn_on(d, {768, 1}, kFloat16, 151)).to(kFloat32));
  const Tensor wider = randn_on(d, {768, 2064}, kFloat16, 152).slice(1, 0, 2048);
  outs.push_back(matmul(x768, wider).to(kFloat32));
  outs.push_back(matmul(randn_on(d, {1, 512}, kBFloat16, 153), randn_on(d, {512, 2048}, kBFloat16, 154)).to(kFloat32));
  outs.push_back(matmul(randn_on(d, {1, 768}, kFloat32, 155), randn_on(d, {768, 2048}, kFloat32, 156)));
  return outs;
});

// The batch kernel's 512-thread tiles on 96-136 MB shapes (sm_90, bf16/f16): bf16 K 3600 x N
// 14336 (ranges of the cluster ending in a partial batch) without and with bias; f16 K 14336 x N
// 3592 (a last tile of 8 of 128 columns) ran them when this case was written (ccd9206) and runs
// the split-K/cluster kernels since K 14336 left that rule.
EMBER_PARITY_CASE_TOL(gemv_columns_batch_large, 2e-2, 2e-2, {
  const Tensor x = randn_on(d, {1, 3600}, kBFloat16, 160), b = randn_on(d, {3600, 14336}, kBFloat16, 161) * Scalar(0.05);
  const Tensor x16 = randn_on(d, {1, 14336}, kFloat16, 163), b16 = randn_on(d, {14336, 3592}, kFloat16, 164) * Scalar(0.05);
  return {matmul(x, b).to(kFloat32), linear(x, b.t(), randn_on(d, {14336}, kBFloat16, 162)).to(kFloat32),
          matmul(x16, b16).to(kFloat32)};
});

// The v8 small-N configurations of the batch kernel (sm_90, bf16/f16, N <= 1024): C4 T256 L4 on
// K 2048 x N 32 (a cluster of 16, ranges of 128 rows: one predicated batch), K 2880 x N 40 with
// bias (a partial 32-column tile; ranges of 180 rows) and f16 K 8200 x N 1024 (ranges past one
// batch: whole batches then a predicated one); C16 T256 L8 on K 2047 x N 520 (a last tile of 8 of
// 128 columns) as A @ v and with bias, twice, and f16 K 1024 x N 256 from a wider matrix.
EMBER_PARITY_CASE_TOL(gemv_columns_small_v8, 2e-2, 2e-2, {
  std::vector<Tensor> outs;
  outs.push_back(matmul(randn_on(d, {1, 2048}, kBFloat16, 160), randn_on(d, {2048, 32}, kBFloat16, 161)).to(kFloat32));
  const Tensor x2880 = randn_on(d, {1, 2880}, kBFloat16, 162), b40 = randn_on(d, {2880, 40}, kBFloat16, 163) * Scalar(0.05);
  outs.push_back(linear(x2880, b40.t(), randn_on(d, {40}, kBFloat16, 164)).to(kFloat32));
  const Tensor b1024 = randn_on(d, {8200, 1024}, kFloat16, 165) * Scalar(0.02);
  outs.push_back(matmul(randn_on(d, {1, 8200}, kFloat16, 166), b1024).to(kFloat32));
  const Tensor x2047 = randn_on(d, {1, 2047}, kBFloat16, 167), b520 = randn_on(d, {2047, 520}, kBFloat16, 168) * Scalar(0.05);
  const Tensor bias520 = randn_on(d, {520}, kBFloat16, 169);
  outs.push_back(matmul(b520.t(), randn_on(d, {2047, 1}, kBFloat16, 170)).to(kFloat32));
  outs.push_back(linear(x2047, b520.t(), bias520).to(kFloat32));
  outs.push_back(linear(x2047, b520.t(), bias520).to(kFloat32));
  const Tensor wider = randn_on(d, {1024, 264}, kFloat16, 171).slice(1, 0, 256);
  outs.push_back(matmul(randn_on(d, {1, 1024}, kFloat16, 172), wider).to(kFloat32));
  return outs;
});

}  // namespace
}  // namespace ember::test
