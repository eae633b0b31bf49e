// Each step mirrors a line of Qwen3's Jinja template (see QWEN3_TEMPLATE in
// scripts/fixtures/make_tokenizer_fixtures.py), Python's str.split/strip semantics included.
#include "engine/chat_template.h"

#include <string_view>

#include "ember/error.h"

namespace ember::engine {
namespace {

std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// s.split(sep)[0]
std::string_view before_first(std::string_view s, std::string_view sep) { return s.substr(0, s.find(sep)); }

/// s.split(sep)[-1]
std::string_view after_last(std::string_view s, std::string_view sep) {
  const size_t at = s.rfind(sep);
  return at == std::string_view::npos ? s : s.substr(at + sep.size());
}

}  // namespace

std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt, bool enable_thinking) {
  const auto count = static_cast<int64_t>(messages.size());
  for (int64_t i = 0; i < count; ++i) {
    const std::string& role = messages[i].role;
    EMBER_CHECK(role == "system" || role == "user" || role == "assistant", "chat_template",
                "message {} role: expected system, user or assistant, got {}", i, role);
  }
  std::string out;
  if (count > 0 && messages[0].role == "system") out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";

  // The last user message that is a real query (not a tool response wrapped as a user turn).
  int64_t last_query_index = count - 1;
  for (int64_t i = count - 1; i >= 0; --i) {
    const std::string_view content = messages[i].content;
    if (messages[i].role == "user" &&
        !(starts_with(content, "<tool_response>") && ends_with(content, "</tool_response>"))) {
      last_query_index = i;
      break;
    }
  }

  for (int64_t i = 0; i < count; ++i) {
    const ChatMessage& message = messages[i];
    if (message.role == "user" || (message.role == "system" && i > 0)) {
      out += "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>\n";
      continue;
    }
    if (message.role != "assistant") continue;  // the leading system message, rendered above
    std::string_view content = message.content;
    std::string_view reasoning;
    if (content.find("</think>") != std::string_view::npos) {
      reasoning = lstrip_newlines(after_last(rstrip_newlines(before_first(content, "</think>")), "<think>"));
      content = lstrip_newlines(after_last(content, "</think>"));
    }
    out += "<|im_start|>assistant\n";
    // Reasoning is kept only after the last query: earlier turns' thoughts are dropped.
    if (i > last_query_index && (i == count - 1 || !reasoning.empty())) {
      out += "<think>\n";
      out += rstrip_newlines(lstrip_newlines(reasoning));
      out += "\n</think>\n\n";
      out += lstrip_newlines(content);
    } else {
      out += content;
    }
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

}  // namespace ember::engine
