// Byte-level BPE following the `tokenizers` library step by step, so that ids match it exactly:
// AddedVocabulary::extract_and_normalize (raw-text added tokens, normalizer, normalized added
// tokens), the pre-tokenizer's splits, BPE Word::merge_all (lowest rank first, leftmost on ties)
// and the ByteLevel decoder with String::from_utf8_lossy.
#include "engine/tokenizer.h"

#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "ember/error.h"

namespace ember::engine {
namespace {

using json = nlohmann::json;
constexpr const char* kOp = "tokenizer";

// ---- UTF-8 ------------------------------------------------------------------------------------

size_t utf8_char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  return 2;
}

/// The code point starting at s[i] (s is valid UTF-8).
char32_t decode_char(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k])); };
  switch (utf8_char_length(static_cast<unsigned char>(s[i]))) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void append_char(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

/// The valid range of the second byte after `lead`, and the sequence length (0: invalid lead).
struct LeadInfo {
  size_t length;
  unsigned char lo, hi;
};
LeadInfo lead_info(unsigned char lead) {
  if (lead < 0x80) return {1, 0, 0};
  if (lead >= 0xC2 && lead <= 0xDF) return {2, 0x80, 0xBF};
  if (lead == 0xE0) return {3, 0xA0, 0xBF};
  if (lead == 0xED) return {3, 0x80, 0x9F};
  if (lead >= 0xE1 && lead <= 0xEF) return {3, 0x80, 0xBF};
  if (lead == 0xF0) return {4, 0x90, 0xBF};
  if (lead >= 0xF1 && lead <= 0xF3) return {4, 0x80, 0xBF};
  if (lead == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

/// Appends `bytes` to `out` as String::from_utf8_lossy does (each maximal invalid subpart becomes
/// one U+FFFD). When !final, an unfinished but so far valid character at the end is left alone;
/// returns how many bytes were consumed.
size_t append_utf8_lossy(std::string& out, std::string_view bytes, bool final) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    const LeadInfo info = lead_info(lead);
    if (info.length == 1) {
      out += bytes[i++];
      continue;
    }
    if (info.length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t k = 1;
    bool broken = false;
    for (; k < info.length; ++k) {
      if (i + k == bytes.size()) break;
      const auto c = static_cast<unsigned char>(bytes[i + k]);
      const unsigned char lo = k == 1 ? info.lo : 0x80, hi = k == 1 ? info.hi : 0xBF;
      if (c < lo || c > hi) {
        broken = true;
        break;
      }
    }
    if (!broken && k == info.length) {
      out.append(bytes.substr(i, k));
    } else if (!broken && !final) {
      return i;  // the character may be completed by later bytes
    } else {
      out += kReplacement;
    }
    i += k;
  }
  return i;
}

/// The offset of the first byte that is not part of valid UTF-8, or npos.
size_t first_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const LeadInfo info = lead_info(static_cast<unsigned char>(s[i]));
    if (info.length == 0 || i + info.length > s.size()) return i;
    for (size_t k = 1; k < info.length; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < (k == 1 ? info.lo : 0x80) || c > (k == 1 ? info.hi : 0xBF)) return i;
    }
    i += info.length;
  }
  return std::string_view::npos;
}

/// Unicode White_Space (what Rust's char::is_whitespace and regex \s match).
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

/// Rust regex's Unicode \w: letters, marks, decimal digits, connector punctuation, joiners.
bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

/// The start of the character that ends at `end` (exclusive) in valid UTF-8.
size_t previous_char_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// ---- GPT-2's byte <-> unicode table -----------------------------------------------------------

struct ByteTable {
  std::array<std::string, 256> byte_to_utf8;      // byte -> the UTF-8 of its printable stand-in
  std::unordered_map<char32_t, uint8_t> char_to_byte;
  ByteTable() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      append_char(byte_to_utf8[b], c);
      char_to_byte[c] = static_cast<uint8_t>(b);
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

/// The ByteLevel decoder on one token: every character mapped back to its byte, or the token's
/// own bytes when some character is not in the table (added tokens such as "<think>\n").
std::string byte_level_decode(std::string_view token) {
  const ByteTable& table = byte_table();
  std::string bytes;
  for (size_t i = 0; i < token.size(); i += utf8_char_length(static_cast<unsigned char>(token[i]))) {
    const auto it = table.char_to_byte.find(decode_char(token, i));
    if (it == table.char_to_byte.end()) return std::string(token);
    bytes += static_cast<char>(it->second);
  }
  return bytes;
}

// ---- JSON helpers -----------------------------------------------------------------------------

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>>;

std::string type_of(const json& value) {
  if (!value.is_object()) return value.is_null() ? "null" : value.dump();
  const auto it = value.find("type");
  return it != value.end() && it->is_string() ? it->get<std::string>() : std::string("(no type)");
}

bool flag(const json& obj, const char* key, bool fallback) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  return it->is_boolean() ? it->get<bool>() : fallback;
}

// ---- PCRE2 ------------------------------------------------------------------------------------

class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                                     &error, &offset, nullptr);
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      fail(kOp, "{}: pattern {}: {} at offset {}", where, json(pattern).dump(),
           reinterpret_cast<const char*>(message.data()), offset);
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // the interpreter runs when JIT is unavailable
    code_.reset(code, pcre2_code_free);
  }

  /// Calls emit(start, end) for each match in `s` in the order of the Rust regex/onig find_iter:
  /// an empty match right where the previous match ended is skipped.
  template <class Emit>
  void for_each_match(std::string_view s, pcre2_match_data* data, Emit&& emit) const {
    size_t search_from = 0;
    std::optional<size_t> last_match_end;
    while (search_from <= s.size()) {
      const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), search_from,
                                 PCRE2_NO_UTF_CHECK, data, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        std::array<PCRE2_UCHAR, 256> message{};
        pcre2_get_error_message(rc, message.data(), message.size());
        fail(kOp, "regex match failed: {}", reinterpret_cast<const char*>(message.data()));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
      const size_t start = ovector[0], end = ovector[1];
      if (start == end && last_match_end == end) {
        search_from += search_from < s.size() ? utf8_char_length(static_cast<unsigned char>(s[search_from])) : 1;
        continue;
      }
      search_from = end;
      last_match_end = end;
      emit(start, end);
    }
  }

  using MatchData = std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)>;
  MatchData make_match_data() const {
    return {pcre2_match_data_create_from_pattern(code_.get(), nullptr), pcre2_match_data_free};
  }

 private:
  std::shared_ptr<pcre2_code> code_;
};

// GPT-2's pre-tokenization regex, which ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---- Normalizer -------------------------------------------------------------------------------

class Normalizer {
 public:
  Normalizer() = default;
  Normalizer(const json& config, const std::string& where) { add(config, where); }

  bool empty() const { return forms_.empty(); }

  std::string apply(std::string_view text) const {
    std::string out(text);
    if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
      return out;  // ASCII is invariant under every Unicode normalization form
    }
    for (const int options : forms_) {
      utf8proc_uint8_t* mapped = nullptr;
      const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(out.data()),
                                              static_cast<utf8proc_ssize_t>(out.size()), &mapped,
                                              static_cast<utf8proc_option_t>(options));
      if (n < 0) fail(kOp, "normalizer: {}", utf8proc_errmsg(n));
      out.assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
      std::free(mapped);
    }
    return out;
  }

 private:
  void add(const json& config, const std::string& where) {
    if (config.is_null()) return;
    const std::string type = type_of(config);
    if (type == "Sequence") {
      const auto it = config.find("normalizers");
      if (it == config.end() || !it->is_array()) fail(kOp, "{}: Sequence: expected a list \"normalizers\"", where);
      for (const json& item : *it) add(item, where);
      return;
    }
    const int stable = UTF8PROC_STABLE;
    if (type == "NFC") forms_.push_back(stable | UTF8PROC_COMPOSE);
    else if (type == "NFD") forms_.push_back(stable | UTF8PROC_DECOMPOSE);
    else if (type == "NFKC") forms_.push_back(stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    else if (type == "NFKD") forms_.push_back(stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    else fail(kOp, "{}: expected NFC, NFD, NFKC, NFKD, Sequence or null, got {}", where, type);
  }

  std::vector<int> forms_;  // utf8proc options, applied in order
};

// ---- Pre-tokenizer ----------------------------------------------------------------------------

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel } kind;
  std::shared_ptr<Regex> regex;  // Split's pattern, or GPT-2's for ByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;
};

/// NormalizedString::split: the pieces of `s` (empty ones dropped) for one Split step.
void split_pieces(std::string_view s, const Regex& regex, pcre2_match_data* data, SplitBehavior behavior,
                  bool invert, std::vector<std::string>& out) {
  struct Span {
    size_t start, end;
    bool is_match;
  };
  std::vector<Span> spans;
  size_t previous = 0;
  regex.for_each_match(s, data, [&](size_t start, size_t end) {
    if (previous != start) spans.push_back({previous, start, invert});
    spans.push_back({start, end, !invert});
    previous = end;
  });
  if (previous != s.size()) spans.push_back({previous, s.size(), invert});

  std::vector<std::pair<size_t, size_t>> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Span& span : spans) kept.emplace_back(span.start, span.end);
      break;
    case SplitBehavior::Removed:
      for (const Span& span : spans)
        if (!span.is_match) kept.emplace_back(span.start, span.end);
      break;
    case SplitBehavior::Contiguous:
      for (const Span& span : spans) {
        if (span.is_match == previous_match && !kept.empty()) kept.back().second = span.end;
        else kept.emplace_back(span.start, span.end);
        previous_match = span.is_match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Span& span : spans) {
        if (span.is_match && !previous_match && !kept.empty()) kept.back().second = span.end;
        else kept.emplace_back(span.start, span.end);
        previous_match = span.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) kept.back().first = it->start;
        else kept.emplace_back(it->start, it->end);
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const auto& [start, end] : kept)
    if (end > start) out.emplace_back(s.substr(start, end - start));
}

class PreTokenizer {
 public:
  PreTokenizer() = default;
  PreTokenizer(const json& config, const std::string& where) { add(config, where); }

  /// The pre-tokens of `text`, each in the byte-level alphabet once a ByteLevel step has run.
  std::vector<std::string> apply(std::string_view text) const {
    std::vector<std::string> pieces;
    if (!text.empty()) pieces.emplace_back(text);
    for (const PreTokenizerStep& step : steps_) {
      std::vector<std::string> next;
      next.reserve(pieces.size());
      if (step.kind == PreTokenizerStep::Kind::Split) {
        const auto data = step.regex->make_match_data();
        for (const std::string& piece : pieces) split_pieces(piece, *step.regex, data.get(), step.behavior, step.invert, next);
      } else {
        const Regex::MatchData data =
            step.regex ? step.regex->make_match_data() : Regex::MatchData(nullptr, pcre2_match_data_free);
        std::vector<std::string> words;
        for (std::string& piece : pieces) {
          if (step.add_prefix_space && piece.front() != ' ') piece.insert(piece.begin(), ' ');
          words.clear();
          if (step.regex) split_pieces(piece, *step.regex, data.get(), SplitBehavior::Isolated, false, words);
          else words.push_back(std::move(piece));
          for (const std::string& word : words) {
            std::string mapped;
            mapped.reserve(word.size() * 2);
            for (const char c : word) mapped += byte_table().byte_to_utf8[static_cast<unsigned char>(c)];
            next.push_back(std::move(mapped));
          }
        }
      }
      pieces = std::move(next);
    }
    return pieces;
  }

 private:
  void add(const json& config, const std::string& where) {
    if (config.is_null()) return;
    const std::string type = type_of(config);
    if (type == "Sequence") {
      const auto it = config.find("pretokenizers");
      if (it == config.end() || !it->is_array()) fail(kOp, "{}: Sequence: expected a list \"pretokenizers\"", where);
      for (const json& item : *it) add(item, where);
    } else if (type == "Split") {
      add_split(config, where);
    } else if (type == "ByteLevel") {
      PreTokenizerStep step{PreTokenizerStep::Kind::ByteLevel, nullptr};
      step.add_prefix_space = flag(config, "add_prefix_space", true);
      if (flag(config, "use_regex", true)) step.regex = std::make_shared<Regex>(kGpt2Pattern, false, where + ": ByteLevel");
      steps_.push_back(std::move(step));
    } else {
      fail(kOp, "{}: expected Split, ByteLevel, Sequence or null, got {}", where, type);
    }
  }

  void add_split(const json& config, const std::string& where) {
    const auto pattern = config.find("pattern");
    if (pattern == config.end() || !pattern->is_object()) fail(kOp, "{}: Split: expected a \"pattern\" object", where);
    bool literal = false;
    std::string text;
    if (const auto it = pattern->find("Regex"); it != pattern->end() && it->is_string()) {
      text = it->get<std::string>();
    } else if (const auto it2 = pattern->find("String"); it2 != pattern->end() && it2->is_string()) {
      text = it2->get<std::string>();
      literal = true;
    } else {
      fail(kOp, "{}: Split pattern: expected {{\"Regex\": ...}} or {{\"String\": ...}}, got {}", where, pattern->dump());
    }
    static const std::vector<std::pair<std::string, SplitBehavior>> kBehaviors = {
        {"Removed", SplitBehavior::Removed}, {"Isolated", SplitBehavior::Isolated},
        {"MergedWithPrevious", SplitBehavior::MergedWithPrevious}, {"MergedWithNext", SplitBehavior::MergedWithNext},
        {"Contiguous", SplitBehavior::Contiguous}};
    const auto behavior_it = config.find("behavior");
    const std::string behavior = behavior_it != config.end() && behavior_it->is_string() ? behavior_it->get<std::string>() : "";
    const auto found = std::find_if(kBehaviors.begin(), kBehaviors.end(), [&](const auto& b) { return b.first == behavior; });
    if (found == kBehaviors.end())
      fail(kOp, "{}: Split behavior: expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous, got {}",
           where, behavior.empty() ? std::string("nothing") : behavior);
    PreTokenizerStep step{PreTokenizerStep::Kind::Split, std::make_shared<Regex>(text, literal, where + ": Split")};
    step.behavior = found->second;
    step.invert = flag(config, "invert", false);
    steps_.push_back(std::move(step));
  }

  std::vector<PreTokenizerStep> steps_;
};

// ---- Added tokens -----------------------------------------------------------------------------

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

/// Leftmost-longest, non-overlapping matching of a set of strings (aho-corasick's
/// MatchKind::LeftmostLongest), then HF's single_word / lstrip / rstrip rules.
class AddedTokenMatcher {
 public:
  void add(std::string pattern, const AddedToken* token) {
    if (pattern.empty()) return;
    by_first_byte_[static_cast<unsigned char>(pattern[0])].push_back({std::move(pattern), token});
  }
  void finish() {
    for (auto& list : by_first_byte_)
      std::stable_sort(list.begin(), list.end(), [](const Entry& a, const Entry& b) { return a.pattern.size() > b.pattern.size(); });
  }
  bool empty() const {
    return std::all_of(by_first_byte_.begin(), by_first_byte_.end(), [](const auto& l) { return l.empty(); });
  }

  struct Segment {
    size_t start, end;
    const AddedToken* token;  // null: text to tokenize
  };

  /// AddedVocabulary::find_matches: segments covering `s`.
  std::vector<Segment> find(std::string_view s, bool allow_special) const {
    std::vector<Segment> segments;
    size_t start_offset = 0, pos = 0;
    while (pos < s.size()) {
      const Entry* match = nullptr;
      for (const Entry& entry : by_first_byte_[static_cast<unsigned char>(s[pos])]) {
        if (s.compare(pos, entry.pattern.size(), entry.pattern) == 0) {
          match = &entry;
          break;
        }
      }
      if (match == nullptr) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + match->pattern.size();
      pos = stop;
      const AddedToken& token = *match->token;
      if (!allow_special && token.special) continue;
      if (token.single_word) {
        const bool space_before = start == 0 || !is_word_char(decode_char(s, previous_char_start(s, start)));
        const bool space_after = stop == s.size() || !is_word_char(decode_char(s, stop));
        if (!space_before || !space_after) continue;
      }
      if (token.lstrip) {
        size_t new_start = start;
        while (new_start > 0) {
          const size_t prev = previous_char_start(s, new_start);
          if (!is_whitespace(decode_char(s, prev))) break;
          new_start = prev;
        }
        start = std::max(new_start, start_offset);
      }
      if (token.rstrip) {
        while (stop < s.size() && is_whitespace(decode_char(s, stop)))
          stop += utf8_char_length(static_cast<unsigned char>(s[stop]));
      }
      if (start_offset < start) segments.push_back({start_offset, start, nullptr});
      segments.push_back({start, stop, &token});
      start_offset = stop;
    }
    if (start_offset < s.size()) segments.push_back({start_offset, s.size(), nullptr});
    return segments;
  }

 private:
  struct Entry {
    std::string pattern;
    const AddedToken* token;
  };
  std::array<std::vector<Entry>, 256> by_first_byte_;
};

// ---- BPE --------------------------------------------------------------------------------------

struct MergeResult {
  int64_t rank;
  int64_t id;
};

uint64_t pair_key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b); }

}  // namespace

struct Tokenizer::Impl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;

  StringMap vocab;                                     // model vocabulary
  std::unordered_map<uint64_t, MergeResult> merges;    // (left id, right id) -> rank, merged id
  std::optional<int64_t> unk_id;
  bool fuse_unk = false;
  bool ignore_merges = false;

  std::vector<AddedToken> added;                       // in file order
  StringMap added_ids;                                 // content -> id
  AddedTokenMatcher raw_matcher, normalized_matcher;

  std::vector<std::string> tokens;                     // id -> spelling ("" and !has_token: none)
  std::vector<bool> has_token, special;
  std::vector<std::string> decoded;                    // id -> bytes through the ByteLevel decoder

  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kCacheMaxWordBytes = 256;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int64_t>, StringHash, std::equal_to<>> cache;

  void bpe(const std::string& word, std::vector<int64_t>& out) const;
  void merge_word(const std::string& word, std::vector<int64_t>& out) const;
};

void Tokenizer::Impl::bpe(const std::string& word, std::vector<int64_t>& out) const {
  if (ignore_merges) {
    if (const auto it = vocab.find(word); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (const auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cache.size() < kCacheCapacity) cache.emplace(word, std::vector<int64_t>(out.begin() + first, out.end()));
  }
}

void Tokenizer::Impl::merge_word(const std::string& word, std::vector<int64_t>& out) const {
  struct Symbol {
    int64_t id;
    int64_t prev, next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  bool previous_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t n = utf8_char_length(static_cast<unsigned char>(word[i]));
    const auto it = vocab.find(std::string_view(word).substr(i, n));
    i += n;
    if (it != vocab.end()) {
      symbols.push_back({it->second, 0, 0, false});
      previous_unk = false;
    } else if (unk_id) {
      if (!(fuse_unk && previous_unk)) symbols.push_back({*unk_id, 0, 0, false});
      previous_unk = true;
    }  // neither in the vocabulary nor an unknown token: the character is dropped, as in HF
  }
  const auto count = static_cast<int64_t>(symbols.size());
  for (int64_t i = 0; i < count; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < count ? i + 1 : -1;
  }

  struct Candidate {
    int64_t rank, pos, id;
    bool operator<(const Candidate& o) const {  // priority_queue top = lowest rank, then leftmost
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const auto lookup = [&](int64_t a, int64_t b) -> const MergeResult* {
    const auto it = merges.find(pair_key(a, b));
    return it == merges.end() ? nullptr : &it->second;
  };
  std::priority_queue<Candidate> queue;
  for (int64_t i = 0; i + 1 < count; ++i)
    if (const MergeResult* m = lookup(symbols[i].id, symbols[i + 1].id)) queue.push({m->rank, i, m->id});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next == -1) continue;
    const Symbol right = symbols[left.next];
    const MergeResult* current = lookup(left.id, right.id);
    if (current == nullptr || current->id != top.id) continue;  // stale entry
    symbols[left.next].removed = true;
    left.id = top.id;
    left.next = right.next;
    if (right.next != -1) symbols[right.next].prev = top.pos;
    if (left.prev != -1)
      if (const MergeResult* m = lookup(symbols[left.prev].id, left.id)) queue.push({m->rank, left.prev, m->id});
    if (left.next != -1)
      if (const MergeResult* m = lookup(left.id, symbols[left.next].id)) queue.push({m->rank, top.pos, m->id});
  }
  for (const Symbol& s : symbols)
    if (!s.removed) out.push_back(s.id);
}

namespace {

void load_model(Tokenizer::Impl& impl, const json& model, const std::string& origin) {
  if (!model.is_object()) fail(kOp, "{}: model: expected an object, got {}", origin, type_of(model));
  const auto type_it = model.find("type");
  const std::string type = type_it != model.end() && type_it->is_string() ? type_it->get<std::string>() : "BPE";
  if (type != "BPE") fail(kOp, "{}: model.type: expected BPE, got {}", origin, type);
  if (flag(model, "byte_fallback", false))
    fail(kOp, "{}: model.byte_fallback: expected false (byte-level BPE), got true", origin);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      fail(kOp, "{}: model.{}: expected null, got {}", origin, key, it->dump());
  }
  if (const auto it = model.find("dropout"); it != model.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0))
    fail(kOp, "{}: model.dropout: expected null (deterministic BPE), got {}", origin, it->dump());
  impl.ignore_merges = flag(model, "ignore_merges", false);
  impl.fuse_unk = flag(model, "fuse_unk", false);

  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) fail(kOp, "{}: model.vocab: expected an object of token -> id", origin);
  impl.vocab.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 31))
      fail(kOp, "{}: model.vocab[{}]: expected an id in [0, 2^31), got {}", origin, json(token).dump(), id.dump());
    impl.vocab.emplace(token, id.get<int64_t>());
  }

  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) fail(kOp, "{}: model.merges: expected a list", origin);
  impl.merges.reserve(merges->size());
  int64_t rank = 0;
  for (const json& merge : *merges) {
    std::string a, b;
    if (merge.is_string()) {  // "a b"
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        fail(kOp, "{}: model.merges[{}]: expected \"a b\", got {}", origin, rank, merge.dump());
      a = text.substr(0, space);
      b = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {  // [a, b]
      a = merge[0].get<std::string>();
      b = merge[1].get<std::string>();
    } else {
      fail(kOp, "{}: model.merges[{}]: expected \"a b\" or [a, b], got {}", origin, rank, merge.dump());
    }
    const auto ia = impl.vocab.find(a), ib = impl.vocab.find(b), ic = impl.vocab.find(a + b);
    if (ia == impl.vocab.end() || ib == impl.vocab.end() || ic == impl.vocab.end())
      fail(kOp, "{}: model.merges[{}]: expected tokens of the vocabulary, got {} (merging into {})", origin, rank,
           merge.dump(), json(a + b).dump());
    impl.merges[pair_key(ia->second, ib->second)] = {rank, ic->second};  // a repeated pair: the last rank wins, as in HF
    ++rank;
  }

  if (const auto it = model.find("unk_token"); it != model.end() && it->is_string()) {
    const auto unk = impl.vocab.find(it->get<std::string>());
    if (unk == impl.vocab.end()) fail(kOp, "{}: model.unk_token: expected a token of the vocabulary, got {}", origin, it->dump());
    impl.unk_id = unk->second;
  }
}

void load_added_tokens(Tokenizer::Impl& impl, const json& root, const std::string& origin) {
  const auto list = root.find("added_tokens");
  if (list == root.end() || list->is_null()) return;
  if (!list->is_array()) fail(kOp, "{}: added_tokens: expected a list", origin);
  for (const json& entry : *list) {
    if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string() || !entry.contains("id") ||
        !entry["id"].is_number_integer() || entry["id"].get<int64_t>() < 0 || entry["id"].get<int64_t>() >= (int64_t{1} << 31))
      fail(kOp, "{}: added_tokens: expected {{\"id\": id, \"content\": text, ...}}, got {}", origin, entry.dump());
    AddedToken token;
    token.content = entry["content"].get<std::string>();
    token.id = entry["id"].get<int64_t>();
    token.special = flag(entry, "special", false);
    token.lstrip = flag(entry, "lstrip", false);
    token.rstrip = flag(entry, "rstrip", false);
    token.single_word = flag(entry, "single_word", false);
    token.normalized = flag(entry, "normalized", !token.special);
    if (first_invalid_utf8(token.content) != std::string_view::npos)
      fail(kOp, "{}: added_tokens: expected UTF-8 content, got {}", origin, entry.dump());
    impl.added.push_back(std::move(token));
  }
  for (const AddedToken& token : impl.added) {
    impl.added_ids[token.content] = token.id;
    if (token.normalized) impl.normalized_matcher.add(impl.normalizer.apply(token.content), &token);
    else impl.raw_matcher.add(token.content, &token);
  }
  impl.raw_matcher.finish();
  impl.normalized_matcher.finish();
}

void build_id_tables(Tokenizer::Impl& impl) {
  int64_t size = 0;
  for (const auto& [token, id] : impl.vocab) size = std::max(size, id + 1);
  for (const AddedToken& token : impl.added) size = std::max(size, token.id + 1);
  impl.tokens.assign(static_cast<size_t>(size), std::string());
  impl.has_token.assign(static_cast<size_t>(size), false);
  impl.special.assign(static_cast<size_t>(size), false);
  for (const auto& [token, id] : impl.vocab) {
    impl.tokens[id] = token;
    impl.has_token[id] = true;
  }
  for (const AddedToken& token : impl.added) {  // an added token's spelling wins over the model's
    impl.tokens[token.id] = token.content;
    impl.has_token[token.id] = true;
    impl.special[token.id] = token.special;
  }
  impl.decoded.resize(static_cast<size_t>(size));
  for (int64_t id = 0; id < size; ++id)
    if (impl.has_token[id]) impl.decoded[id] = byte_level_decode(impl.tokens[id]);
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail(kOp, "{}: cannot open the file (missing or unreadable)", path);
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) fail(kOp, "{}: read error", path);
  return from_json(text.str(), path);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& origin) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    fail(kOp, "{}: malformed JSON: {}", origin, e.what());
  }
  if (!root.is_object()) fail(kOp, "{}: expected a JSON object, got {}", origin, root.type_name());
  auto impl = std::make_unique<Impl>();
  const auto section = [&](const char* key) -> json { return root.contains(key) ? root[key] : json(); };
  const json model = section("model");
  if (model.is_null()) fail(kOp, "{}: expected a \"model\" object, got none", origin);
  load_model(*impl, model, origin);
  impl->normalizer = Normalizer(section("normalizer"), origin + ": normalizer");
  impl->pre_tokenizer = PreTokenizer(section("pre_tokenizer"), origin + ": pre_tokenizer");
  const json decoder = section("decoder");
  if (type_of(decoder) != "ByteLevel") fail(kOp, "{}: decoder: expected ByteLevel, got {}", origin, type_of(decoder));
  load_added_tokens(*impl, root, origin);
  build_id_tables(*impl);
  return Tokenizer(std::move(impl));
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  const Impl& impl = *impl_;
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
    fail(kOp, "encode: text: expected valid UTF-8, got byte 0x{:02X} at offset {}", static_cast<unsigned char>(text[bad]), bad);
  std::vector<int64_t> ids;
  const auto encode_normalized = [&](std::string_view piece) {
    const std::string normalized = impl.normalizer.apply(piece);
    for (const auto& segment : impl.normalized_matcher.find(normalized, allow_special)) {
      if (segment.token != nullptr) {
        ids.push_back(segment.token->id);
        continue;
      }
      const std::string_view part = std::string_view(normalized).substr(segment.start, segment.end - segment.start);
      for (const std::string& word : impl.pre_tokenizer.apply(part)) impl.bpe(word, ids);
    }
  };
  for (const auto& segment : impl.raw_matcher.find(text, allow_special)) {
    if (segment.token != nullptr) ids.push_back(segment.token->id);
    else encode_normalized(text.substr(segment.start, segment.end - segment.start));
  }
  return ids;
}

std::string Tokenizer::token_bytes(int64_t id, bool skip_special) const {
  const Impl& impl = *impl_;
  if (id < 0 || id >= static_cast<int64_t>(impl.decoded.size()) || !impl.has_token[id]) return {};
  if (skip_special && impl.special[id]) return {};
  return impl.decoded[id];
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::string bytes;
  for (const int64_t id : ids) bytes += token_bytes(id, skip_special);
  std::string text;
  append_utf8_lossy(text, bytes, true);
  return text;
}

std::optional<int64_t> Tokenizer::token_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
  if (const auto it = impl_->vocab.find(token); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int64_t id) const {
  const Impl& impl = *impl_;
  EMBER_CHECK(id >= 0 && id < static_cast<int64_t>(impl.tokens.size()) && impl.has_token[id], kOp,
              "id_to_token: id: expected a token id in [0, {}), got {}", impl.tokens.size(), id);
  return impl.tokens[id];
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }

bool Tokenizer::is_special(int64_t id) const {
  return id >= 0 && id < static_cast<int64_t>(impl_->special.size()) && impl_->special[id];
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int64_t id) {
  pending_ += tokenizer_->token_bytes(id, skip_special_);
  std::string text;
  pending_.erase(0, append_utf8_lossy(text, pending_, false));
  return text;
}

std::string StreamDecoder::flush() {
  std::string text;
  append_utf8_lossy(text, pending_, true);
  pending_.clear();
  return text;
}

}  // namespace ember::engine
