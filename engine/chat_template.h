// Qwen's ChatML chat template (the Qwen3 family's template without tools), in C++ so that no Jinja
// engine is needed: `<|im_start|>{role}\n{content}<|im_end|>\n` per message, `<think>` blocks kept
// only for assistant turns after the last user query, and the generation prompt
// `<|im_start|>assistant\n`, followed by an empty think block when thinking is off.
#pragma once
#include <string>
#include <vector>

namespace ember::engine {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

/// The prompt text transformers' apply_chat_template(messages, tokenize=False,
/// add_generation_prompt, enable_thinking) renders with Qwen3's template. A role other than
/// system, user or assistant is an ember::Error (the template would drop the message silently).
std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                         bool enable_thinking = true);

}  // namespace ember::engine
