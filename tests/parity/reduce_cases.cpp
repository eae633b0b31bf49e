// Parity cases for the reduction, sort, index and softmax kernels: odd sizes (1, 7, 4097),
// strided inputs, vocab-sized softmax rows and rows starting with or made entirely of -inf.
#include <limits>

#include "parity/harness.h"

namespace ember::test {
namespace {

Tensor with_neg_inf(Device d, std::vector<int64_t> shape, int64_t leading, int64_t full_row, uint64_t seed) {
  Tensor x = randn_on(Device::cpu(), shape, kFloat32, seed);
  const float ninf = -std::numeric_limits<float>::infinity();
  Tensor lead = full({shape[0], leading}, ninf, kFloat32);
  x = cat({lead, x.slice(1, leading, shape[1])}, 1);
  if (full_row >= 0) x = cat({x.slice(0, 0, full_row), full({1, shape[1]}, ninf, kFloat32), x.slice(0, full_row + 1, shape[0])}, 0);
  return x.to(d);
}

}  // namespace

EMBER_PARITY_CASE(reduce_sum_f32_odd, {
  Tensor x = randn_on(d, {7, 4097}, kFloat32, 1);
  return {sum(x), sum(x, {1}), sum(x, {0}, true), sum(x.t(), {0}), sum(randn_on(d, {1}, kFloat32, 2))};
});
EMBER_PARITY_CASE_TOL(reduce_sum_half, 1e-2, 0.5, {
  Tensor x = randn_on(d, {7, 4097}, kFloat16, 3);
  Tensor y = randn_on(d, {4097, 7}, kBFloat16, 4);
  return {sum(x, {1}).to(kFloat32), mean(x, {0}).to(kFloat32), sum(y, {0}).to(kFloat32)};
});
EMBER_PARITY_CASE(reduce_sum_int_and_bool, {
  Tensor x = randint_on(d, -100, 100, {7, 4097}, kInt32, 5);
  return {sum(x, {1}), sum(x.t(), {1}), sum(randint_on(d, 0, 2, {7, 4097}, kInt32, 33).to(kBool), {0}), prod(randint_on(d, -2, 3, {7, 9}, kInt64, 6), {1}),
          cumsum(x, 1), cumsum(x.t(), 1, kInt32)};
});
EMBER_PARITY_CASE(reduce_mean_prod_f64_multi_dim, {
  Tensor x = randn_on(d, {5, 7, 9}, kFloat64, 7);
  return {mean(x, {0, 2}), mean(x.permute({2, 0, 1}), {1, 2}, true), prod(x, {1}), sum(x.slice(1, 0, 7, 2), {0, 1})};
});
EMBER_PARITY_CASE(reduce_amax_amin_any_all, {
  Tensor x = randn_on(d, {7, 4097}, kFloat32, 8);
  Tensor b = randint_on(d, 0, 2, {7, 4097}, kInt32, 34).to(kBool);
  return {amax(x, {1}), amin(x, {0}), amax(x.t(), {0}, true), any(b, {1}), all(b, {0}), amax(randint_on(d, -9, 9, {1, 7}, kInt8, 9), {1})};
});
// Shapes for the vectorised schedules: few long dense rows (split into chunks), many short
// rows (several rows per block), dense columns with the reduced dim split over blocks, and
// misaligned starts (a view from element 1) for the vector head/tail handling.
EMBER_PARITY_CASE(reduce_dense_rows_vectorised, {
  Tensor x = randn_on(d, {3, 300001}, kFloat32, 40);
  Tensor h = randn_on(d, {4099, 33}, kBFloat16, 41);
  Tensor i = randint_on(d, -50, 50, {5, 70001}, kInt32, 42);
  return {sum(x, {1}), sum(x), amax(x.slice(1, 1, 300001), {1}), argmax(x, 1), sum(h, {1}).to(kFloat32),
          amin(h.slice(1, 1, 33), {1}).to(kFloat32), sum(i, {1}), amax(i, {1}), mean(x.slice(1, 3, 299999), {1})};
});
EMBER_PARITY_CASE(reduce_dense_columns_vectorised, {
  Tensor x = randn_on(d, {4096, 512}, kFloat32, 43);
  Tensor h = randn_on(d, {20001, 24}, kFloat16, 44);
  Tensor b = randint_on(d, 0, 2, {999, 77}, kInt32, 45).to(kBool);
  return {sum(x, {0}), amax(x, {0}), argmin(x, 0), sum(x.slice(1, 1, 512), {0}), sum(x.t(), {1}), mean(h, {0}).to(kFloat32),
          any(b, {0}), all(b.slice(1, 3, 77), {0}), sum(randn_on(d, {64, 3, 1000}, kFloat64, 46), {0, 1})};
});
EMBER_PARITY_CASE(reduce_argmax_argmin, {
  Tensor x = randn_on(d, {7, 4097}, kFloat32, 10);
  return {argmax(x, 1), argmin(x, 0), argmax(x.t(), 0, true), argmin(randint_on(d, 0, 3, {4097, 7}, kInt64, 11), 0)};
});
EMBER_PARITY_CASE(reduce_cumsum_f32, {
  Tensor x = randn_on(d, {7, 4097}, kFloat32, 12);
  return {cumsum(x, 1), cumsum(x, 0), cumsum(x.t(), 0), cumsum(randn_on(d, {1}, kFloat32, 13), 0)};
});
EMBER_PARITY_CASE(reduce_histc, {
  Tensor x = randn_on(d, {4097}, kFloat32, 14);
  return {histc(x, 7), histc(x, 100, -1, 1), histc(x.to(kFloat64), 1), histc(randn_on(d, {7, 3}, kFloat32, 15).t(), 5, -2, 2)};
});
EMBER_PARITY_CASE(reduce_sort_topk, {
  Tensor x = randn_on(d, {7, 4097}, kFloat32, 16);
  auto [sv, si] = sort(x, 1, false, true);
  auto [dv, di] = sort(x.t(), 0, true, true);
  auto [tv, ti] = topk(x, 7, 1);
  auto [bv, bi] = topk(x, 1, 0, false);
  return {sv, si, dv, di, tv, ti, bv, bi, argsort(randint_on(d, 0, 5, {4097}, kInt32, 17), 0, false, true)};
});
EMBER_PARITY_CASE(reduce_index_ops, {
  Tensor x = randn_on(d, {7, 4097}, kFloat32, 18);
  Tensor rows = randint_on(d, 0, 7, {9}, kInt64, 19), cols = randint_on(d, 0, 4097, {4097}, kInt32, 20);
  Tensor g = randint_on(d, 0, 7, {5, 4097}, kInt64, 21);
  Tensor src = randn_on(d, {9, 4097}, kFloat32, 22);
  Tensor flat = randint_on(d, -7 * 4097, 7 * 4097, {1, 4097}, kInt64, 23);
  return {index_select(x, 0, rows), index_select(x.t(), 0, cols), gather(x, 0, g), index_add(x, 0, rows, src, 0.5),
          take(x.t(), flat)};
});
EMBER_PARITY_CASE(reduce_cat_stack, {
  Tensor a = randn_on(d, {7, 4097}, kFloat32, 24), b = randint_on(d, 0, 9, {1, 4097}, kInt64, 25);
  return {cat({a, b, zeros({0}, kFloat16, d)}, 0), cat({a.t(), a.t()}, 1), stack({a, a}, 1), stack({a.select(0, 1), b.select(0, 0)}, -1)};
});
EMBER_PARITY_CASE(reduce_softmax_vocab_row, {
  Tensor x = randn_on(d, {1, 128256}, kFloat32, 26);
  return {softmax(x, -1), log_softmax(x, -1)};
});
EMBER_PARITY_CASE(reduce_softmax_neg_inf_rows, {
  Tensor x = with_neg_inf(d, {7, 4097}, 300, 3, 27);  // every row starts with -inf, row 3 is all -inf
  return {softmax(x, -1), log_softmax(x, -1), softmax(x.t(), 0), softmax(with_neg_inf(d, {2, 128256}, 5000, -1, 28), 1)};
});
EMBER_PARITY_CASE(reduce_softmax_strided_and_half, {
  Tensor x = randn_on(d, {7, 33, 5}, kFloat32, 29);
  return {softmax(x, 1), log_softmax(x.permute({2, 0, 1}), 0), softmax(randn_on(d, {1, 7}, kFloat32, 30), 0),
          // half inputs compared at their own precision (the CPU rounds log_softmax's row sum to the
          // input type like torch's CPU kernel; the GPU keeps it in f32 like torch's CUDA kernel)
          softmax(randn_on(d, {7, 4097}, kFloat16, 31), 1), log_softmax(randn_on(d, {7, 4097}, kBFloat16, 32), 1)};
});

}  // namespace ember::test
