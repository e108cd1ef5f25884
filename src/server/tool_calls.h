// Tool calling as OpenAI defines it, over the formats models are trained on: the request's
// `tools` / `tool_choice` / `parallel_tool_calls`, the grammar that forces a call (`required`
// or a named function) or waits for one (`auto`: it starts constraining at the format's
// trigger, as llama.cpp's lazy grammars do), and the parser that turns an output back into
// `tool_calls`.
//
// Formats, chosen from the chat template: Hermes / Qwen (`<tool_call>{json}</tool_call>`,
// also what a template that knows no tools is taught through a system message), Llama 3
// (`{"name": ..., "parameters": ...}`) and Mistral (`[TOOL_CALLS][{...}]`; the control token is
// not text, so the output seen here starts at `[`).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/chat_template.h"

namespace ferry::server {

enum class ToolFormat { Hermes, Llama3, Mistral };
const char* tool_format_name(ToolFormat f);

struct ToolTemplate {
    ToolFormat format = ToolFormat::Hermes;
    bool renders_tools = false;       // the template reads `tools`
    bool renders_tool_calls = false;  // and assistant `tool_calls`
};
ToolTemplate tool_template_of(std::string_view template_source);

struct ToolFunction {
    std::string name;
    nlohmann::ordered_json parameters;  // a JSON Schema (an empty object schema when absent)
};

struct ToolRequest {
    enum class Choice { None, Auto, Required, Named };
    std::vector<ToolFunction> functions;
    nlohmann::ordered_json tools;  // as sent, for the chat template
    Choice choice = Choice::Auto;
    std::string named;
    bool parallel = true;
};

// nullopt with `error` empty: no tools. Errors name the field.
std::optional<ToolRequest> parse_tools(const nlohmann::ordered_json& body, std::string& error,
                                       std::string& param);

// The GBNF of one or more calls in `format` to the request's functions (only the named one
// for Choice::Named), their arguments constrained by each function's parameter schema.
Expected<std::string> tool_call_gbnf(const ToolRequest& r, ToolFormat format);
// Where a call starts in the output: `auto` constrains from here on.
std::string tool_call_trigger(ToolFormat format);

// The system text that teaches a template without tool support the Hermes format.
std::string tool_system_prompt(const ToolRequest& r);
// Messages for a template that cannot render tool_calls or tool results: calls become the
// assistant's Hermes text, results become <tool_response> blocks.
void lower_tool_messages(std::vector<tokenizer::ChatMessage>& msgs);

struct ParsedToolOutput {
    std::string content;  // text outside the calls
    std::vector<tokenizer::ToolCall> calls;
};
// How much of a growing output can be streamed as content: everything before the trigger
// (and before any tail that may be the trigger's beginning).
size_t streamable_content(const std::string& text, ToolFormat format);

// The calls in a finished output (none when it holds no well-formed call).
ParsedToolOutput parse_tool_calls(const std::string& text, ToolFormat format);

}  // namespace ferry::server
