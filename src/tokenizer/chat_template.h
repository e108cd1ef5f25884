// Renders a conversation into the prompt text a model was trained on, by running the model's
// own Jinja2 chat template (tokenizer.chat_template) the way Hugging Face transformers'
// apply_chat_template does, so any model's template gives the same bytes as in Python.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/jinja/template.h"

namespace ferry::tokenizer {

// One function call an assistant turn made, in OpenAI's shape.
struct ToolCall {
    std::string id;
    std::string type = "function";
    std::string name;
    // What the call passed: an object, or the JSON text of one as OpenAI's API sends it.
    // Templates see it as given (transformers does not parse it either).
    nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

struct ChatMessage {
    ChatMessage() = default;
    ChatMessage(std::string r, std::optional<std::string> c)
        : role(std::move(r)), content(std::move(c)) {}

    std::string role;                    // "system", "user", "assistant", "tool", ...
    std::optional<std::string> content;  // absent: e.g. an assistant turn that only calls tools
    std::vector<ToolCall> tool_calls;    // empty: the message has no tool_calls key
    std::optional<std::string> tool_call_id;  // a tool result: the call it answers
    std::optional<std::string> name;          // a tool result: the tool that produced it

    // From OpenAI's message JSON (role, content string or null, tool_calls, tool_call_id,
    // name); content given as parts is not read here.
    static Expected<ChatMessage> from_json(const nlohmann::ordered_json& m);
};

class ChatTemplate {
  public:
    // source: the model's tokenizer.chat_template, parsed once; an empty one, a syntax error
    // or an unsupported construct is an error naming the line.
    static Expected<ChatTemplate> from_source(const std::string& source, std::string bos_text,
                                              std::string eos_text);
    static Expected<ChatTemplate> from_file(const std::string& path, std::string bos_text,
                                            std::string eos_text);

    // The template sees `messages` (as OpenAI-shaped dicts; absent fields are absent keys, as
    // transformers drops None values), `tools` (an OpenAI tools list, or none), `documents`
    // (none), `add_generation_prompt`, `bos_token`, `eos_token` and every key of `extra`
    // (e.g. enable_thinking). Fails when the template does: raise_exception (a Llama-2
    // conversation whose roles do not alternate), an undefined value used, a runaway loop.
    Expected<std::string> apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt = true,
                                const nlohmann::ordered_json& tools = nullptr,
                                const nlohmann::ordered_json& extra = nullptr) const;

    // strftime_now() returns this moment instead of the clock's: reproducible renders for
    // tests and golden files (Llama 3.2 prints today's date).
    void fix_time(std::tm now) { now_ = now; }

    // The template's Jinja text (what tool calling reads the model's call format from).
    const std::string& source() const { return source_; }

  private:
    jinja::Template tmpl_;
    std::string bos_, eos_;
    std::string source_;
    std::optional<std::tm> now_;
};

}  // namespace ferry::tokenizer
