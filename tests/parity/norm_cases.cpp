// Parity cases for the CUDA rms_norm kernels (warp per row up to 2048 wide, block per row above)
// and the rotary embedding kernel.
#include "parity/harness.h"

using namespace ember;
using test::randn_on;

EMBER_PARITY_CASE(rms_norm_head_dim_rows_bf16, {
  const Tensor x = randn_on(d, {3, 37, 128}, kBFloat16, 1);  // [tokens, heads, head_dim]: the q/k norms
  return {rms_norm(x, {128}, randn_on(d, {128}, kBFloat16, 2), 1e-6)};
});
EMBER_PARITY_CASE(rms_norm_hidden_rows_f32_f16_f64, {
  return {rms_norm(randn_on(d, {2, 4096}, kFloat32, 3), {4096}, randn_on(d, {4096}, kFloat32, 4), 1e-5),
          rms_norm(randn_on(d, {1, 2048}, kFloat16, 5), {2048}, randn_on(d, {2048}, kFloat16, 6), 1e-6),
          rms_norm(randn_on(d, {5, 7}, kFloat64, 7), {7})};
});
EMBER_PARITY_CASE(rms_norm_odd_widths_no_weight_two_dims, {
  return {rms_norm(randn_on(d, {7, 4097}, kBFloat16, 8), {4097}), rms_norm(randn_on(d, {3, 1}, kFloat32, 9), {1}),
          rms_norm(randn_on(d, {2, 5, 33}, kFloat16, 10), {5, 33}), rms_norm(randn_on(d, {600, 2049}, kFloat32, 11), {2049}),
          rms_norm(randn_on(d, {4, 16}, kFloat32, 12).t(), {4})};
});

// Rotary embedding (one thread per element).
EMBER_PARITY_CASE(rotary_emb_bf16_f32_f16, {
  return {apply_rotary_emb(randn_on(d, {2, 8, 5, 128}, kBFloat16, 20), randn_on(d, {5, 128}, kBFloat16, 21),
                           randn_on(d, {5, 128}, kBFloat16, 22)),
          apply_rotary_emb(randn_on(d, {3, 7, 64}, kFloat32, 23).transpose(0, 1), randn_on(d, {3, 64}, kFloat32, 24),
                           randn_on(d, {3, 64}, kFloat32, 25)),
          apply_rotary_emb(randn_on(d, {1, 1, 2}, kFloat16, 26), randn_on(d, {1, 2}, kFloat16, 27), randn_on(d, {1, 2}, kFloat16, 28))};
});
