// The key/value cache of a decoder: per layer, K and V preallocated as [batch, kv_heads,
// max_seq_len, head_dim] on the model's device. A forward writes its new positions in place and
// attends over a narrowed view of the filled part, so decoding never reallocates or copies the
// history.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "ember/tensor.h"

namespace ember::engine {

struct KvCacheShape {
  int64_t num_layers = 0, max_batch = 1, num_kv_heads = 0, max_seq_len = 0, head_dim = 0;
};

class KvCache {
 public:
  KvCache() = default;
  KvCache(const KvCacheShape& shape, DType dtype, Device device);

  /// Bytes a cache of this shape and dtype occupies (2 tensors per layer).
  static uint64_t bytes(const KvCacheShape& shape, DType dtype);

  /// Writes k, v [B, Hkv, L, D] at positions [start_pos, start_pos + L) of `layer` and returns
  /// the keys and values of positions [0, start_pos + L), views [B, Hkv, start_pos + L, D].
  std::pair<Tensor, Tensor> update(int64_t layer, const Tensor& k, const Tensor& v, int64_t start_pos);

  /// Checks that a forward of `length` tokens at `start_pos` with `batch` rows fits and reads
  /// only written positions; throws ember::Error saying which limit it breaks.
  void check_forward(int64_t batch, int64_t start_pos, int64_t length) const;
  /// Records that positions [0, end) hold valid keys and values (later ones are stale).
  void set_filled(int64_t end) { filled_ = end; }
  int64_t filled() const { return filled_; }
  const KvCacheShape& shape() const { return shape_; }

 private:
  KvCacheShape shape_;
  std::vector<Tensor> keys_, values_;  // [layers] x [max_batch, Hkv, max_seq_len, D]
  int64_t filled_ = 0;
};

}  // namespace ember::engine
