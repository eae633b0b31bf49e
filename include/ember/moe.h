// Mixture-of-experts: grouped matrix products (torch._grouped_mm rules), FP8 expert products,
// routing (scores, top-k, renormalisation), the token permutation by expert, and one fused MoE
// layer. Nothing here reads a device value on the host, so every op can be captured in a CUDA
// graph and the layer's routing may change from one replay to the next.
#pragma once
#include <cstdint>
#include <optional>
#include <tuple>

#include "ember/tensor.h"

namespace ember {

/// torch._grouped_mm / F.grouped_mm. f32, f16 or bf16 operands of one dtype; out_dtype must be
/// that dtype. offs: 1-D int32 CUMULATIVE END offsets along the jagged dim (group g spans
/// [offs[g-1], offs[g]), offs[-1] = 0), never read on the host; required iff an operand is 2-D.
/// An offset past the jagged size counts as that size and a decreasing one gives an empty group
/// (torch leaves both undefined), so nothing is read out of bounds.
///   2D x 3D  a [T, K], b [G, K, N] -> [T, N]: out[s:e] = a[s:e] @ b[g]; rows past offs[-1] unwritten.
///   3D x 2D  a [G, M, K], b [K, T] -> [M, T]: out[:, s:e] = a[g] @ b[:, s:e]; columns past offs[-1] unwritten.
///   2D x 2D  a [M, T], b [T, N] -> [G, M, N]: out[g] = a[:, s:e] @ b[s:e]; an empty group gives zeros.
///   3D x 3D  a [G, M, K], b [G, K, N] -> [G, M, N]: bmm (no offs).
/// Each operand must be row- or column-major in its last two dims with the other stride a
/// multiple of 16 bytes (torch's rule), so MoE weights pass as transposed views of [G, N, K]
/// without copies. The output's last dim is padded to 16 bytes like torch's (row stride may
/// exceed N): never assume it contiguous.
Tensor grouped_mm(const Tensor& a, const Tensor& b, std::optional<Tensor> offs = {}, std::optional<DType> out_dtype = {});
/// The full torch signature: a bias is refused ("Bias not supported yet"), like torch.
Tensor grouped_mm(const Tensor& a, const Tensor& b, std::optional<Tensor> offs, std::optional<Tensor> bias,
                  std::optional<DType> out_dtype);

/// Grouped product with FP8 expert weights (2D x 3D): out[s:e] = (a[s:e] * scale_a) @ (b[g] * scale_b[g]).
/// b [G, K, N] float8_e4m3fn, usually the transposed view of [G, N, K] weights, with fp32 decoding
/// scales as FP8 checkpoints ship them: scale_b [G] (tensorwise per expert), [G, N] (one per
/// output channel) or [G, ceil(N/128), ceil(K/128)] (128x128 blocks of the [N, K] weight).
/// a [T, K] is float8_e4m3fn with scale_a [T] or one element, or f32/f16/bf16 with no scale_a
/// (weight-only FP8, the decode path). out_dtype f32, f16 or bf16; rows past offs[-1] unwritten.
Tensor scaled_grouped_mm(const Tensor& a, const Tensor& b, std::optional<Tensor> scale_a, const Tensor& scale_b,
                         const Tensor& offs, DType out_dtype = kBFloat16);

// ---- routing -------------------------------------------------------------------------------------
enum class MoeScoring { Softmax, Sigmoid };

struct MoeRouteOptions {
  int64_t top_k = 1;
  MoeScoring scoring = MoeScoring::Softmax;
  /// Divide the k selected weights by their sum (+ norm_eps): Qwen3 norm_topk_prob (eps 0),
  /// LFM2 (eps 1e-6).
  bool norm_topk = true;
  double norm_eps = 0;
  /// Multiplies the final weights (DeepSeek/LFM2 routed_scaling_factor).
  double routed_scaling = 1;
  /// [E] float: added to the scores for SELECTION only; the weights come from the unbiased
  /// scores (LFM2 / DeepSeek-V3 expert bias).
  std::optional<Tensor> expert_bias;
};

/// logits [T, E] (any float dtype, computed in f32) -> (weights [T, k] f32, expert ids [T, k]
/// int32). Scores = softmax or sigmoid of the logits; the k largest (score + bias) are chosen in
/// descending order, ties to the lower expert id. E <= 1024, k <= min(E, 32).
std::tuple<Tensor, Tensor> moe_route(const Tensor& logits, const MoeRouteOptions& options);

/// The stable permutation of the T*k (token, slot) pairs by expert (transformers' argsort(stable)
/// + histc + cumsum, without leaving the device). Pair p = t*k + j.
struct MoePermutation {
  Tensor order;    // [T*k] int32: pair at sorted position i (perm)
  Tensor inverse;  // [T*k] int32: sorted position of pair p (inv_perm)
  Tensor tokens;   // [T*k] int32: token of sorted position i (order / k), for gathering rows
  Tensor counts;   // [E] int32: pairs routed to each expert (histc)
  Tensor offsets;  // [E] int32: cumulative end offsets (cumsum), grouped_mm's offs
};
/// expert_ids [T, k] int32 or int64 with values in [0, num_experts) (others are counted nowhere
/// and land after offsets[-1]).
MoePermutation moe_permute(const Tensor& expert_ids, int64_t num_experts);

/// The weighted un-permute (index_add of the weighted sorted rows back to their tokens):
/// out[t] = sum_j weights[t, j] * y[inverse[t*k + j]]. y [T*k, H] in sorted order, weights [T, k]
/// (any float dtype), inverse from moe_permute. Sums in f32; out [T, H] has y's dtype.
Tensor moe_unpermute(const Tensor& y, const Tensor& inverse, const Tensor& weights);

// ---- the fused layer -----------------------------------------------------------------------------
/// Expert weights in the transformers layout. Give gate_up [E, 2I, H] (gate rows first, then up)
/// or gate and up [E, I, H] separately; down [E, H, I]. bf16/f16/f32 like x, or float8_e4m3fn
/// with fp32 decoding scales per expert (see scaled_grouped_mm: [E], [E, N] or 128x128 blocks
/// [E, ceil(N/128), ceil(K/128)] of each [N, K] matrix).
struct MoeExperts {
  Tensor gate_up, gate, up, down;
  Tensor gate_up_scale, gate_scale, up_scale, down_scale;
};

/// An optional always-on expert (Qwen2-MoE / Qwen3.5 style), added as
/// sigmoid(x @ gate^T) * down(silu(x @ gate_proj^T) * (x @ up_proj^T)).
struct MoeSharedExpert {
  Tensor gate_up;  // [2Is, H] (gate rows first), like x's dtype
  Tensor down;     // [H, Is]
  Tensor gate;     // [1, H] the sigmoid gate; undefined: weight 1
};

struct MoeLayerOptions {
  MoeRouteOptions route;
  std::optional<MoeSharedExpert> shared;
};

/// One MoE block: router -> top-k experts (gate_up, SiLU(gate) * up, down) -> weighted combine
/// (+ shared expert). x [T, H] f32/f16/bf16; router_weight [E, H] (logits accumulate and stay in
/// f32). Returns [T, H] in x's dtype.
Tensor moe_layer(const Tensor& x, const Tensor& router_weight, const MoeExperts& experts, const MoeLayerOptions& options);
/// Convenience: gate_up [E, 2I, H] and down [E, H, I] in x's dtype.
Tensor moe_layer(const Tensor& x, const Tensor& router_weight, const Tensor& gate_up, const Tensor& down,
                 const MoeLayerOptions& options);

}  // namespace ember
