// A Hugging Face tokenizer.json for byte-level BPE models (GPT-2, Qwen2/Qwen3, Llama 3 style):
// added tokens matched first in the raw text, the normalizer (NFC/NFD/NFKC/NFKD via utf8proc,
// Sequence, null), the pre-tokenizer (Split with a PCRE2 regex or a literal, ByteLevel, Sequence),
// the BPE model (merges as "a b" strings or [a, b] pairs, ignore_merges) and the ByteLevel decoder.
// Token ids equal those of the `tokenizers` library with add_special_tokens=False.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ember::engine {

class Tokenizer {
 public:
  /// Reads a tokenizer.json. Throws ember::Error naming the file and what is missing, malformed
  /// or unsupported (a model other than BPE, byte_fallback, an invalid regex with PCRE2's message).
  static Tokenizer from_file(const std::string& path);
  /// The same from the JSON text; `origin` names it in error messages.
  static Tokenizer from_json(std::string_view json_text, const std::string& origin = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// The ids of `text` (no BOS/EOS added). With allow_special, special added tokens written in
  /// the text (e.g. "<|im_end|>") become their ids; without, they are tokenized as plain text.
  /// Throws ember::Error when `text` is not valid UTF-8.
  std::vector<int64_t> encode(std::string_view text, bool allow_special = true) const;
  /// The text of `ids`: token bytes through the ByteLevel decoder, invalid UTF-8 replaced by
  /// U+FFFD. Ids without a token are dropped (as the `tokenizers` library does), special tokens
  /// too when skip_special.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = false) const;

  /// The id of a token spelled as in the vocabulary ("Ġthe", "<|im_end|>"), if any.
  std::optional<int64_t> token_id(std::string_view token) const;
  /// The vocabulary spelling of `id`; throws ember::Error when no token has this id.
  std::string id_to_token(int64_t id) const;
  /// One more than the largest id (model vocabulary and added tokens).
  int64_t vocab_size() const;
  /// True for added tokens marked special.
  bool is_special(int64_t id) const;

  /// The bytes `id` decodes to (empty for an id without a token, or a skipped special token).
  std::string token_bytes(int64_t id, bool skip_special = false) const;

  struct Impl;  // opaque; defined in tokenizer.cpp

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Turns ids into text one id at a time, emitting only complete UTF-8 characters: a character
/// whose bytes span several tokens comes out with the token that completes it. The chunks
/// concatenate to Tokenizer::decode of the same ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  /// The text that `id` completes (possibly empty).
  std::string push(int64_t id);
  /// What is left: an unfinished character at the end becomes U+FFFD. Resets the decoder.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an unfinished UTF-8 character
};

}  // namespace ember::engine
