#include "engine/kv_cache.h"

namespace ember::engine {

KvCache::KvCache(const KvCacheShape& shape, DType dtype, Device device) : shape_(shape) {
  const std::vector<int64_t> sizes = {shape.max_batch, shape.num_kv_heads, shape.max_seq_len, shape.head_dim};
  for (int64_t layer = 0; layer < shape.num_layers; ++layer) {
    keys_.push_back(zeros(sizes, dtype, device));
    values_.push_back(zeros(sizes, dtype, device));
  }
}

uint64_t KvCache::bytes(const KvCacheShape& shape, DType dtype) {
  return 2 * static_cast<uint64_t>(shape.num_layers * shape.max_batch * shape.num_kv_heads * shape.max_seq_len *
                                   shape.head_dim) *
         itemsize(dtype);
}

void KvCache::check_forward(int64_t batch, int64_t start_pos, int64_t length) const {
  const char* op = "KvCache";
  EMBER_CHECK(batch >= 1 && batch <= shape_.max_batch, op, "batch size: expected 1 to {}, got {}", shape_.max_batch, batch);
  EMBER_CHECK(length >= 1, op, "tokens in a forward: expected at least 1, got {}", length);
  EMBER_CHECK(start_pos >= 0 && start_pos <= filled_, op,
              "start position: expected 0 to {} (the positions already in the cache), got {}", filled_, start_pos);
  EMBER_CHECK(start_pos + length <= shape_.max_seq_len, op,
              "sequence length: expected at most max_seq_len = {} positions, got {} + {} = {}", shape_.max_seq_len,
              start_pos, length, start_pos + length);
}

std::pair<Tensor, Tensor> KvCache::update(int64_t layer, const Tensor& k, const Tensor& v, int64_t start_pos) {
  const int64_t batch = k.size(0), length = k.size(2), end = start_pos + length;
  const Tensor keys = keys_.at(layer).narrow(0, 0, batch), values = values_.at(layer).narrow(0, 0, batch);
  keys.narrow(2, start_pos, length).copy_(k);    // [B, Hkv, L, D] written in place
  values.narrow(2, start_pos, length).copy_(v);  // [B, Hkv, L, D]
  return {keys.narrow(2, 0, end), values.narrow(2, 0, end)};  // [B, Hkv, start_pos + L, D] each
}

}  // namespace ember::engine
