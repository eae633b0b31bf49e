// Parity cases for the attention kernels (src/cuda/attention.cu) against the CPU reference:
// prefill tiles (causal GQA, L = S = 129), decode tiles with split keys over a narrowed KV cache,
// masks with partial broadcast (PR #184180's decode-kernel bug), E = 256, odd head dims that
// take the unvectorised loads, strided views, fully masked rows, float64.
//
// Tolerances: f16/bf16 calls with more than 16 query rows per group of q heads sharing a kv head
// take the tensor-core kernel, which rounds the probabilities to the input type before P V (as FlashAttention does);
// against the CPU's f32 probabilities that costs up to ~2 ulps of the output plus an absolute
// error of ~1e-3 (bf16) / ~1e-4 (f16) on outputs that cancel, hence kBf16Atol / kF16Atol. The f32
// cases allow for exp2 in base-2 units and another summation order.
#include <limits>

#include "parity/harness.h"

namespace ember::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kBf16Rtol = 1e-2, kBf16Atol = 5e-3, kF16Rtol = 2e-3, kF16Atol = 5e-4;

/// A bool mask (true = attend) with about `keep` of the elements set, made on the CPU.
Tensor bool_mask_on(Device d, std::vector<int64_t> shape, double keep, uint64_t seed) {
  return lt(rand_on(Device::cpu(), shape, kFloat32, seed), Scalar(keep)).to(d);
}

/// An additive float mask: normal values, -inf where a random bool mask says so.
Tensor float_mask_on(Device d, std::vector<int64_t> shape, DType dtype, uint64_t seed) {
  const Tensor keep = bool_mask_on(Device::cpu(), shape, 0.7, seed);
  const Tensor values = randn_on(Device::cpu(), shape, kFloat32, seed + 1);
  return where(keep, values, full({1}, -kInf, kFloat32)).to(dtype).to(d);
}

/// The first `s` positions of a KV cache [B, H, s_max, E]: a view, not contiguous.
Tensor cache_view(Device d, int64_t b, int64_t h, int64_t s_max, int64_t s, int64_t e, DType dtype, uint64_t seed) {
  return randn_on(d, {b, h, s_max, e}, dtype, seed).narrow(2, 0, s);
}

}  // namespace

// ---- prefill tiles --------------------------------------------------------------------------------
EMBER_PARITY_CASE_TOL(attention_prefill_causal_gqa_bf16, kBf16Rtol, kBf16Atol, {
  Tensor q = randn_on(d, {2, 8, 129, 128}, kBFloat16, 1), k = randn_on(d, {2, 2, 129, 128}, kBFloat16, 2);
  Tensor v = randn_on(d, {2, 2, 129, 128}, kBFloat16, 3);
  return {scaled_dot_product_attention(q, k, v, {}, true, {}, true)};
});
EMBER_PARITY_CASE_TOL(attention_prefill_causal_gqa_f32, 1e-4, 1e-5, {
  Tensor q = randn_on(d, {2, 8, 129, 128}, kFloat32, 4), k = randn_on(d, {2, 2, 129, 128}, kFloat32, 5);
  Tensor v = randn_on(d, {2, 2, 129, 128}, kFloat32, 6);
  return {scaled_dot_product_attention(q, k, v, {}, true, {}, true), scaled_dot_product_attention(q, k, v, {}, false, 0.05, true)};
});
EMBER_PARITY_CASE_TOL(attention_prefill_f16_long_keys, kF16Rtol, kF16Atol, {
  // L = 300 over S = 1000 keys, causal top-left (most rows see a prefix of the keys).
  Tensor q = randn_on(d, {1, 4, 300, 64}, kFloat16, 7), k = randn_on(d, {1, 4, 1000, 64}, kFloat16, 8);
  Tensor v = randn_on(d, {1, 4, 1000, 64}, kFloat16, 9);
  return {scaled_dot_product_attention(q, k, v, {}, true), scaled_dot_product_attention(q, k, v)};
});

EMBER_PARITY_CASE_TOL(attention_prefill_many_blocks_bf16, kBf16Rtol, kBf16Atol, {
  // Enough row tiles to fill the GPU: one pass over the keys, no split and no combine.
  Tensor q = randn_on(d, {8, 16, 320, 64}, kBFloat16, 80), k = randn_on(d, {8, 16, 320, 64}, kBFloat16, 81);
  Tensor v = randn_on(d, {8, 16, 320, 64}, kBFloat16, 82);
  return {scaled_dot_product_attention(q, k, v, {}, true)};
});
EMBER_PARITY_CASE_TOL(attention_prefill_many_blocks_f32, 1e-4, 1e-5, {
  Tensor q = randn_on(d, {4, 8, 640, 64}, kFloat32, 83), k = randn_on(d, {4, 8, 640, 64}, kFloat32, 84);
  Tensor v = randn_on(d, {4, 8, 640, 64}, kFloat32, 85);
  return {scaled_dot_product_attention(q, k, v, {}, true)};
});

// ---- decode tiles and split keys -------------------------------------------------------------------
EMBER_PARITY_CASE(attention_decode_gqa_kv_cache_bf16, {
  // B = 1, Hq = 32, Hkv = 4, L = 1, S = 4097 as the first positions of a 4600-long cache.
  Tensor q = randn_on(d, {1, 32, 1, 128}, kBFloat16, 10);
  Tensor k = cache_view(d, 1, 4, 4600, 4097, 128, kBFloat16, 11), v = cache_view(d, 1, 4, 4600, 4097, 128, kBFloat16, 12);
  return {scaled_dot_product_attention(q, k, v, {}, false, {}, true)};
});
EMBER_PARITY_CASE_TOL(attention_decode_gqa_kv_cache_f32, 1e-4, 1e-5, {
  Tensor q = randn_on(d, {1, 32, 1, 128}, kFloat32, 13);
  Tensor k = cache_view(d, 1, 4, 4600, 4097, 128, kFloat32, 14), v = cache_view(d, 1, 4, 4600, 4097, 128, kFloat32, 15);
  // Also a transposed q ([B, L, H, E] projection layout) and four query rows (speculative decode).
  Tensor q4 = randn_on(d, {1, 4, 32, 128}, kFloat32, 16).transpose(1, 2);
  return {scaled_dot_product_attention(q, k, v, {}, false, {}, true), scaled_dot_product_attention(q4, k, v, {}, true, {}, true)};
});
EMBER_PARITY_CASE_TOL(attention_decode_mha_and_mqa_bf16, kBf16Rtol, kBf16Atol, {
  // One head per kv head (group 1) and one kv head for 32 q heads (a 32-row tile of one position).
  Tensor q = randn_on(d, {2, 32, 1, 128}, kBFloat16, 17);
  Tensor k = randn_on(d, {2, 32, 777, 128}, kBFloat16, 18), v = randn_on(d, {2, 32, 777, 128}, kBFloat16, 19);
  Tensor k1 = randn_on(d, {2, 1, 2000, 128}, kBFloat16, 20), v1 = randn_on(d, {2, 1, 2000, 128}, kBFloat16, 21);
  return {scaled_dot_product_attention(q, k, v), scaled_dot_product_attention(q, k1, v1, {}, false, {}, true),
          scaled_dot_product_attention(q, k1, v1)};
});

// ---- masks -------------------------------------------------------------------------------------------
EMBER_PARITY_CASE_TOL(attention_masks_partial_broadcast_f32, 1e-4, 1e-5, {
  // The spec's case: q (2,4,8,64) with a mask (2,1,8,8); bool and float; and the decode shape of
  // PR #184180 (a few query rows, long keys) with a (2,1,4,S) mask and a 2-D one.
  Tensor q = randn_on(d, {2, 4, 8, 64}, kFloat32, 22), k = randn_on(d, {2, 4, 8, 64}, kFloat32, 23);
  Tensor v = randn_on(d, {2, 4, 8, 64}, kFloat32, 24);
  Tensor qd = randn_on(d, {2, 8, 4, 64}, kFloat32, 25), kd = randn_on(d, {2, 2, 3000, 64}, kFloat32, 26);
  Tensor vd = randn_on(d, {2, 2, 3000, 64}, kFloat32, 27);
  return {scaled_dot_product_attention(q, k, v, float_mask_on(d, {2, 1, 8, 8}, kFloat32, 28)),
          scaled_dot_product_attention(q, k, v, bool_mask_on(d, {2, 1, 8, 8}, 0.6, 30)),
          scaled_dot_product_attention(qd, kd, vd, bool_mask_on(d, {2, 1, 4, 3000}, 0.5, 31), false, {}, true),
          scaled_dot_product_attention(qd, kd, vd, float_mask_on(d, {4, 3000}, kFloat32, 32), false, {}, true)};
});
EMBER_PARITY_CASE_TOL(attention_masks_bf16_native_and_f32, kBf16Rtol, kBf16Atol, {
  Tensor q = randn_on(d, {2, 4, 70, 64}, kBFloat16, 34), k = randn_on(d, {2, 4, 90, 64}, kBFloat16, 35);
  Tensor v = randn_on(d, {2, 4, 90, 64}, kBFloat16, 36);
  return {scaled_dot_product_attention(q, k, v, float_mask_on(d, {1, 4, 70, 90}, kBFloat16, 37)),
          scaled_dot_product_attention(q, k, v, float_mask_on(d, {2, 1, 1, 90}, kFloat32, 39))};
});
EMBER_PARITY_CASE(attention_fully_masked_rows_are_zeros, {
  // Row 3 (both batches) and row 5 of batch 1 attend nothing: zeros on both devices, through the
  // prefill tiles and through the decode tiles with split keys.
  Tensor q = randn_on(d, {2, 4, 8, 64}, kFloat32, 41), k = randn_on(d, {2, 4, 2000, 64}, kFloat32, 42);
  Tensor v = randn_on(d, {2, 4, 2000, 64}, kFloat32, 43);
  std::vector<bool> keep = bool_mask_on(Device::cpu(), {2, 1, 8, 2000}, 0.5, 44).to_vector<bool>();
  for (int64_t j = 0; j < 2000; ++j) keep[3 * 2000 + j] = keep[(8 + 3) * 2000 + j] = keep[(8 + 5) * 2000 + j] = false;
  const Tensor mask = tensor<bool>(keep, {2, 1, 8, 2000}).to(d);
  const Tensor out = scaled_dot_product_attention(q, k, v, mask);
  return {out, scaled_dot_product_attention(q.narrow(2, 3, 3), k, v, mask.narrow(2, 3, 3)), out.narrow(2, 3, 1),
          out.narrow(0, 1, 1).narrow(2, 5, 1)};
});

// ---- head dims, odd sizes, strides, dtypes -----------------------------------------------------------
EMBER_PARITY_CASE_TOL(attention_head_dim_256_bf16, kBf16Rtol, kBf16Atol, {
  Tensor q = randn_on(d, {1, 4, 70, 256}, kBFloat16, 46), k = randn_on(d, {1, 4, 90, 256}, kBFloat16, 47);
  Tensor v = randn_on(d, {1, 4, 90, 256}, kBFloat16, 48);
  return {scaled_dot_product_attention(q, k, v, {}, true), scaled_dot_product_attention(q.narrow(2, 0, 1), k, v)};
});
EMBER_PARITY_CASE_TOL(attention_head_dim_256_f32, 1e-4, 1e-5, {
  Tensor q = randn_on(d, {1, 4, 70, 256}, kFloat32, 49), k = randn_on(d, {1, 4, 90, 256}, kFloat32, 50);
  Tensor v = randn_on(d, {1, 4, 90, 256}, kFloat32, 51);
  return {scaled_dot_product_attention(q, k, v, {}, true), scaled_dot_product_attention(q.narrow(2, 0, 2), k, v)};
});
EMBER_PARITY_CASE_TOL(attention_odd_sizes_f32, 1e-4, 1e-5, {
  // L = 7, S = 13, E = 80 (GQA, causal); E = 72 with Ev = 40; E = 3, Ev = 5 (padded dims,
  // unvectorised loads); E = Ev = 96.
  Tensor q = randn_on(d, {1, 4, 7, 80}, kFloat32, 52), k = randn_on(d, {1, 2, 13, 80}, kFloat32, 53);
  Tensor v = randn_on(d, {1, 2, 13, 80}, kFloat32, 54);
  Tensor q2 = randn_on(d, {3, 2, 33, 72}, kFloat32, 55), k2 = randn_on(d, {3, 2, 65, 72}, kFloat32, 56);
  Tensor v2 = randn_on(d, {3, 2, 65, 40}, kFloat32, 57);
  Tensor q3 = randn_on(d, {2, 3, 5, 3}, kFloat32, 58), k3 = randn_on(d, {2, 3, 130, 3}, kFloat32, 59);
  Tensor v3 = randn_on(d, {2, 3, 130, 5}, kFloat32, 60);
  Tensor q4 = randn_on(d, {1, 2, 65, 96}, kFloat32, 61), k4 = randn_on(d, {1, 2, 65, 96}, kFloat32, 62);
  return {scaled_dot_product_attention(q, k, v, {}, true, {}, true), scaled_dot_product_attention(q2, k2, v2, {}, true),
          scaled_dot_product_attention(q3, k3, v3), scaled_dot_product_attention(q4, k4, k4, {}, true)};
});
EMBER_PARITY_CASE_TOL(attention_odd_sizes_bf16, kBf16Rtol, kBf16Atol, {
  // E = 72, Ev = 40: 16-byte bf16 rows need multiples of 8, 72 and 40 are; E = 20, Ev = 12 are not.
  Tensor q = randn_on(d, {3, 2, 33, 72}, kBFloat16, 63), k = randn_on(d, {3, 2, 65, 72}, kBFloat16, 64);
  Tensor v = randn_on(d, {3, 2, 65, 40}, kBFloat16, 65);
  Tensor q2 = randn_on(d, {2, 6, 3, 20}, kBFloat16, 66), k2 = randn_on(d, {2, 2, 513, 20}, kBFloat16, 67);
  Tensor v2 = randn_on(d, {2, 2, 513, 12}, kBFloat16, 68);
  return {scaled_dot_product_attention(q, k, v, {}, true), scaled_dot_product_attention(q2, k2, v2, {}, false, {}, true)};
});
EMBER_PARITY_CASE_TOL(attention_strided_views_f32, 1e-4, 1e-5, {
  // q from a [B, L, H, E] projection, k stored transposed (unit stride along S), v with element
  // stride 2, a mask expanded from [L, S] (stride 0 over batch and heads), batch broadcast of q.
  Tensor q = randn_on(d, {2, 40, 4, 64}, kFloat32, 69).transpose(1, 2);
  Tensor k = randn_on(d, {2, 4, 64, 50}, kFloat32, 70).transpose(2, 3);
  Tensor v = randn_on(d, {2, 4, 50, 128}, kFloat32, 71).slice(3, 0, 128, 2);
  Tensor mask = bool_mask_on(d, {40, 50}, 0.8, 72).expand({2, 4, 40, 50});
  Tensor q1 = randn_on(d, {1, 1, 64}, kFloat32, 73), kv = randn_on(d, {2, 1, 1, 64}, kFloat32, 74);
  return {scaled_dot_product_attention(q, k, v, mask), scaled_dot_product_attention(q1, kv, kv)};
});
EMBER_PARITY_CASE(attention_float64, {
  Tensor q = randn_on(d, {2, 4, 20, 64}, kFloat64, 75), k = randn_on(d, {2, 2, 300, 64}, kFloat64, 76);
  Tensor v = randn_on(d, {2, 2, 300, 256}, kFloat64, 77);
  return {scaled_dot_product_attention(q, k, v, {}, true, {}, true),
          scaled_dot_product_attention(q.narrow(2, 0, 1), k, v, float_mask_on(d, {300}, kFloat64, 78), false, {}, true)};
});

}  // namespace ember::test
