// Tokenizer against the `tokenizers` library: ids of every fixture line for a Qwen2-style and a
// GPT-2-style tokenizer.json (scripts/fixtures/make_tokenizer_fixtures.py), pre-tokenizer and
// normalizer variants, decode, the streaming decoder, and errors.
#include "engine/tokenizer.h"

#include "engine/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "ember/error.h"

namespace ember::engine {
namespace {

using json = nlohmann::json;

std::string fixture_path(const std::string& name) { return std::string(EMBER_FIXTURES_DIR) + "/tokenizer/" + name; }

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

const json& expected() {
  static const json value = json::parse(read_text(fixture_path("expected.json")));
  return value;
}

const Tokenizer& fixture_tokenizer(const std::string& name) {
  static const Tokenizer qwen = Tokenizer::from_file(fixture_path("qwen2_style.json"));
  static const Tokenizer gpt2 = Tokenizer::from_file(fixture_path("gpt2_style.json"));
  return name == "qwen2_style" ? qwen : gpt2;
}

std::vector<int64_t> ids_of(const json& list) { return list.get<std::vector<int64_t>>(); }

/// True when `s` is valid UTF-8 (complete characters only, no surrogates or overlongs).
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t c = 0;
    if (b < 0x80) { n = 1; c = b; }
    else if ((b & 0xE0) == 0xC0) { n = 2; c = b & 0x1F; }
    else if ((b & 0xF0) == 0xE0) { n = 3; c = b & 0x0F; }
    else if ((b & 0xF8) == 0xF0) { n = 4; c = b & 0x07; }
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto cont = static_cast<unsigned char>(s[i + k]);
      if ((cont & 0xC0) != 0x80) return false;
      c = (c << 6) | (cont & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kMin[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

class TokenizerFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerFixture, IdsMatchHuggingFace) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  json lines = expected()["tokenizers"][GetParam()]["lines"];
  ASSERT_GT(lines.size(), 20u);
  for (const json& line : expected()["tokenizers"][GetParam()]["random_lines"]) lines.push_back(line);
  ASSERT_GE(lines.size(), 90u);
  for (const json& line : lines) {
    const std::string text = line["text"];
    EXPECT_EQ(tok.encode(text), ids_of(line["ids"])) << "text: " << text;
    EXPECT_EQ(tok.encode(text, /*allow_special=*/false), ids_of(line["ids_special_as_text"])) << "text: " << text;
  }
}

TEST_P(TokenizerFixture, DecodeMatchesHuggingFace) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  for (const json& line : expected()["tokenizers"][GetParam()]["lines"]) {
    const auto ids = ids_of(line["ids"]);
    EXPECT_EQ(tok.decode(ids), line["decoded"].get<std::string>()) << "text: " << line["text"];
    EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), line["decoded_skip_special"].get<std::string>());
  }
}

TEST_P(TokenizerFixture, DecodeOfEncodeGivesTheTextBack) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  for (const json& line : expected()["tokenizers"][GetParam()]["lines"]) {
    const std::string text = line["text"];
    // With special tokens read as text nothing is stripped: the text comes back (NFC'd where the
    // tokenizer normalizes), so every byte reached the BPE model and none was dropped.
    const std::string want = GetParam() == "qwen2_style" ? line["nfc"].get<std::string>() : text;
    EXPECT_EQ(tok.decode(tok.encode(text, false)), want);
  }
}

TEST_P(TokenizerFixture, VocabularyAndSpecialTokens) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  EXPECT_EQ(tok.vocab_size(), expected()["tokenizers"][GetParam()]["vocab_size"].get<int64_t>());
  for (const char* name : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    const auto id = tok.token_id(name);
    ASSERT_TRUE(id.has_value()) << name;
    EXPECT_TRUE(tok.is_special(*id));
    EXPECT_EQ(tok.id_to_token(*id), name);
    EXPECT_EQ(tok.encode(name), std::vector<int64_t>{*id});
    EXPECT_EQ(tok.decode({*id}), name);
    EXPECT_EQ(tok.decode({*id}, true), "");
  }
  const auto space = tok.token_id("\xC4\xA0");  // "Ġ", the byte-level stand-in for ' '
  ASSERT_TRUE(space.has_value());
  EXPECT_FALSE(tok.is_special(*space));
  EXPECT_EQ(tok.decode({*space}), " ");
  EXPECT_FALSE(tok.token_id("not a token").has_value());
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_FALSE(tok.is_special(tok.vocab_size()));
  EXPECT_THROW(tok.id_to_token(tok.vocab_size()), Error);
  EXPECT_THROW(tok.id_to_token(-1), Error);
  // Ids without a token decode to nothing, as in the tokenizers library.
  EXPECT_EQ(tok.decode({-5, tok.vocab_size() + 7, *space}), " ");
}

TEST_P(TokenizerFixture, StreamDecoderEmitsOnlyWholeCharacters) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  for (const bool skip : {false, true}) {
    for (const json& line : expected()["tokenizers"][GetParam()]["lines"]) {
      const auto ids = ids_of(line["ids"]);
      StreamDecoder stream(tok, skip);
      std::string joined;
      for (const int64_t id : ids) {
        const std::string chunk = stream.push(id);
        EXPECT_TRUE(valid_utf8(chunk)) << "text: " << line["text"];
        joined += chunk;
      }
      const std::string rest = stream.flush();
      EXPECT_TRUE(rest.empty());  // the ids of valid text leave nothing unfinished
      EXPECT_EQ(joined + rest, tok.decode(ids, skip));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, TokenizerFixture, ::testing::Values("qwen2_style", "gpt2_style"));

/// The Qwen2-style tokenizer.json with its pre_tokenizer or normalizer replaced, model fields set.
Tokenizer variant(const json& replacement) {
  json root = json::parse(read_text(fixture_path("qwen2_style.json")));
  for (const char* key : {"pre_tokenizer", "normalizer"})
    if (replacement.contains(key)) root[key] = replacement[key];
  if (replacement.contains("model"))
    for (const auto& [key, value] : replacement["model"].items()) root["model"][key] = value;
  return Tokenizer::from_json(root.dump(), "variant");
}

TEST(Tokenizer, PreTokenizerAndNormalizerVariantsMatchHuggingFace) {
  const json& lines = expected()["tokenizers"]["qwen2_style"]["lines"];
  const json& variants = expected()["variants"];
  ASSERT_GE(variants.size(), 15u);
  for (const auto& [name, v] : variants.items()) {
    const Tokenizer tok = variant(v);
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string text = lines[i]["text"];
      EXPECT_EQ(tok.encode(text), ids_of(v["ids"][i])) << "variant " << name << ", text: " << text;
    }
  }
}

TEST(Tokenizer, NfcMakesDecomposedAndComposedTextEqual) {
  const Tokenizer& tok = fixture_tokenizer("qwen2_style");
  EXPECT_EQ(tok.encode("cafe\xCC\x81"), tok.encode("caf\xC3\xA9"));  // e + U+0301 vs U+00E9
  EXPECT_EQ(tok.decode(tok.encode("cafe\xCC\x81")), "caf\xC3\xA9");
  const Tokenizer& gpt2 = fixture_tokenizer("gpt2_style");  // no normalizer: the bytes stay
  EXPECT_NE(gpt2.encode("cafe\xCC\x81"), gpt2.encode("caf\xC3\xA9"));
}

TEST(Tokenizer, StreamDecoderHoldsSplitCharacters) {
  const Tokenizer& tok = fixture_tokenizer("gpt2_style");
  // One token per byte of a 4-byte emoji: nothing comes out until the last byte.
  const std::string emoji = "\xF0\x9F\x98\x80";
  // The token of each single byte, found by decoding every id.
  std::array<int64_t, 256> byte_token{};
  byte_token.fill(-1);
  for (int64_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string bytes = tok.token_bytes(id);
    if (bytes.size() == 1 && !tok.is_special(id)) byte_token[static_cast<unsigned char>(bytes[0])] = id;
  }
  std::vector<int64_t> ids;
  for (const char c : emoji) ids.push_back(byte_token[static_cast<unsigned char>(c)]);
  StreamDecoder stream(tok);
  ASSERT_TRUE(std::all_of(ids.begin(), ids.end(), [](int64_t id) { return id >= 0; }));
  EXPECT_EQ(stream.push(ids[0]), "");
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.push(ids[2]), "");
  EXPECT_EQ(stream.push(ids[3]), emoji);
  EXPECT_EQ(stream.flush(), "");
  // An unfinished character at the end: U+FFFD on flush, like decode().
  EXPECT_EQ(stream.push(ids[0]), "");
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(tok.decode({ids[0], ids[1]}), "\xEF\xBF\xBD");
  // A broken sequence followed by ASCII: the replacement comes out with the ASCII.
  const int64_t a = byte_token['a'];
  EXPECT_EQ(stream.push(ids[0]), "");
  EXPECT_EQ(stream.push(a), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(tok.decode({ids[0], a}), "\xEF\xBF\xBD" "a");
  // Lone continuation bytes and invalid leads are one U+FFFD each (String::from_utf8_lossy).
  EXPECT_EQ(tok.decode({ids[3], ids[3], byte_token[0xFF], a}), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "a");
}

TEST(Tokenizer, RandomIdStreamsStayValidUtf8) {
  const Tokenizer& tok = fixture_tokenizer("qwen2_style");
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> pick(0, tok.vocab_size() - 1);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> ids(1 + rng() % 40);
    for (int64_t& id : ids) id = pick(rng);
    StreamDecoder stream(tok);
    std::string joined;
    for (const int64_t id : ids) {
      const std::string chunk = stream.push(id);
      ASSERT_TRUE(valid_utf8(chunk));
      joined += chunk;
    }
    const std::string rest = stream.flush();
    ASSERT_TRUE(valid_utf8(rest));
    EXPECT_EQ(joined + rest, tok.decode(ids));
  }
}

TEST(Tokenizer, EncodesMegabytesQuickly) {
  const Tokenizer& tok = fixture_tokenizer("qwen2_style");
  std::string text;
  const json& lines = expected()["tokenizers"]["qwen2_style"]["lines"];
  while (text.size() < (4u << 20)) {
    for (const json& line : lines) text += line["text"].get<std::string>() + "\n";
  }
  text += std::string(200000, 'x') + std::string(200000, ' ') + "end";  // one long word, one long space run
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(ids.size(), text.size() / 8);
  EXPECT_LT(seconds, 20.0) << "4 MB took " << seconds << " s";
  EXPECT_EQ(tok.decode(ids).size(), tok.decode(tok.encode(text)).size());
}

TEST(Tokenizer, RejectsInvalidUtf8Text) {
  const Tokenizer& tok = fixture_tokenizer("gpt2_style");
  try {
    tok.encode("ok\xC3(");
    FAIL() << "expected ember::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[tokenizer] encode: text: expected valid UTF-8, got byte 0xC3 at offset 2");
  }
}

/// The message of the ember::Error that `from_json` throws on the modified Qwen2-style file.
std::string load_error(const std::function<void(json&)>& edit) {
  json root = json::parse(read_text(fixture_path("qwen2_style.json")));
  edit(root);
  try {
    Tokenizer::from_json(root.dump(), "t.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Tokenizer, Errors) {
  try {
    Tokenizer::from_file("/nonexistent/tokenizer.json");
    FAIL() << "expected ember::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[tokenizer] /nonexistent/tokenizer.json: cannot open the file (missing or unreadable)");
  }
  try {
    Tokenizer::from_json("{\"model\": {\"type\": \"BPE\", ", "bad.json");
    FAIL() << "expected ember::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[tokenizer] bad.json: malformed JSON: ", 0), 0u) << e.what();
  }
  EXPECT_EQ(load_error([](json& j) { j["model"]["type"] = "Unigram"; }),
            "[tokenizer] t.json: model.type: expected BPE, got Unigram");
  EXPECT_EQ(load_error([](json& j) { j["model"]["byte_fallback"] = true; }),
            "[tokenizer] t.json: model.byte_fallback: expected false (byte-level BPE), got true");
  EXPECT_EQ(load_error([](json& j) { j.erase("model"); }), "[tokenizer] t.json: expected a \"model\" object, got none");
  EXPECT_EQ(load_error([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}"; }),
            "[tokenizer] t.json: pre_tokenizer: Split: pattern \"(\\\\p{L}\": missing closing parenthesis at offset 6");
  EXPECT_EQ(load_error([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[a-"; }),
            "[tokenizer] t.json: pre_tokenizer: Split: pattern \"[a-\": missing terminating ] for character class "
            "at offset 3");
  EXPECT_EQ(load_error([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }),
            "[tokenizer] t.json: pre_tokenizer: expected Split, ByteLevel, Sequence or null, got Metaspace");
  EXPECT_EQ(load_error([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }),
            "[tokenizer] t.json: normalizer: expected NFC, NFD, NFKC, NFKD, Sequence or null, got Lowercase");
  EXPECT_EQ(load_error([](json& j) { j["decoder"] = nullptr; }),
            "[tokenizer] t.json: decoder: expected ByteLevel, got null");
  EXPECT_EQ(load_error([](json& j) { j["model"]["merges"][0] = "a"; }),
            "[tokenizer] t.json: model.merges[0]: expected \"a b\", got \"a\"");
  EXPECT_EQ(load_error([](json& j) { j["model"]["merges"][0] = "zzz qqq"; }),
            "[tokenizer] t.json: model.merges[0]: expected tokens of the vocabulary, got \"zzz qqq\" (merging into "
            "\"zzzqqq\")");
  EXPECT_EQ(load_error([](json& j) { j["model"]["vocab"]["a"] = -1; }),
            "[tokenizer] t.json: model.vocab[\"a\"]: expected an id in [0, 2^31), got -1");
  EXPECT_EQ(load_error([](json& j) { j["added_tokens"][0].erase("id"); }).rfind(
                "[tokenizer] t.json: added_tokens: expected {\"id\": id, \"content\": text, ...}, got ", 0),
            0u);
}

TEST(Tokenizer, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  json root = json::parse(read_text(fixture_path("gpt2_style.json")));
  // A whole-word token whose merges would never build it: only ignore_merges finds it.
  const int64_t id = 100000;
  root["model"]["vocab"]["hello"] = id;
  root["model"]["ignore_merges"] = false;
  const Tokenizer plain = Tokenizer::from_json(root.dump());
  root["model"]["ignore_merges"] = true;
  const Tokenizer ignoring = Tokenizer::from_json(root.dump());
  EXPECT_NE(plain.encode("hello"), std::vector<int64_t>{id});
  EXPECT_EQ(ignoring.encode("hello"), std::vector<int64_t>{id});
  EXPECT_EQ(ignoring.encode(" hello"), plain.encode(" hello"));  // "Ġhello" is not in the vocabulary
}

TEST(ChatTemplate, MatchesTransformersWithQwen3Template) {
  const json& cases = expected()["chat"];
  ASSERT_GE(cases.size(), 20u);
  for (const json& c : cases) {
    std::vector<ChatMessage> messages;
    for (const json& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    EXPECT_EQ(apply_chatml(messages, c["add_generation_prompt"], c["enable_thinking"]), c["text"].get<std::string>())
        << c["messages"].dump() << " add_generation_prompt=" << c["add_generation_prompt"]
        << " enable_thinking=" << c["enable_thinking"];
  }
}

TEST(ChatTemplate, PromptTokenizesWithSpecialTokens) {
  const Tokenizer& tok = fixture_tokenizer("qwen2_style");
  const std::string prompt = apply_chatml({{"user", "Hi"}}, true, false);
  EXPECT_EQ(prompt, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const auto ids = tok.encode(prompt);
  EXPECT_EQ(ids.front(), tok.token_id("<|im_start|>"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok.token_id("<|im_end|>")), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok.token_id("<think>")), 1);
  EXPECT_EQ(tok.decode(ids), prompt);
}

TEST(ChatTemplate, RejectsUnknownRoles) {
  try {
    apply_chatml({{"user", "a"}, {"tool", "b"}}, true);
    FAIL() << "expected ember::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[chat_template] message 1 role: expected system, user or assistant, got tool");
  }
}

}  // namespace
}  // namespace ember::engine
