// The OpenAI wire format: request bodies parsed and validated into engine::RequestParams, and
// responses, stream chunks and errors rendered in the shapes the official clients expect.
// Validation is strict on types and ranges (a wrong type is a 400 naming the field) and lax
// on unknown fields, which clients send freely.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/service.h"
#include "server/tool_calls.h"

namespace ferry::server {

using json = nlohmann::ordered_json;

struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // the offending field, when there is one
    std::string code;
};
ApiError bad_request(std::string message, std::string param = {});
// {"error": {"message", "type", "param", "code"}} as OpenAI sends it.
std::string error_body(const ApiError& e);

// Nesting deeper than this is refused before the JSON parser sees it, so no hostile body can
// make parsing, copying or destroying a document recurse deeply.
constexpr int kMaxJsonDepth = 64;
// Parses a request body; errors are 400s that say what is wrong with the JSON.
std::optional<json> parse_body(const std::string& body, ApiError& err);

enum class Endpoint { Completions, Chat };

struct GenRequest {
    Endpoint kind = Endpoint::Completions;
    std::string model;
    std::vector<std::vector<int32_t>> prompts;  // token ids, one entry per prompt
    std::vector<std::string> prompt_texts;      // for echo
    engine::RequestParams params;
    bool stream = false;
    bool include_usage = false;
    bool logprobs = false;
    bool echo = false;  // with logprobs: the prompt's tokens lead the logprobs, first one null
    int prompt_logprobs = -1;  // vLLM's field: each choice's (chat: the response's) own list
    // Tool calling (chat only): the request's tools, when a call may come back, and the format
    // the output is parsed in.
    std::optional<ToolRequest> tools;
    ToolFormat tool_format = ToolFormat::Hermes;
    bool parses_tool_calls() const { return tools && tools->choice != ToolRequest::Choice::None; }
};

// Validates a /v1/completions or /v1/chat/completions body against the served model and the
// context length. `model_names`: every name the served model answers to (the first is its id).
std::optional<GenRequest> parse_generation(const json& body, Endpoint kind, const Service& service,
                                           const std::vector<std::string>& model_names,
                                           ApiError& err);

// The state of one choice while its tokens arrive.
struct Choice {
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    std::vector<std::vector<engine::TokenLogprob>> top_logprobs;
    std::shared_ptr<const engine::PromptLogprobs> prompt_lp;  // from the first event, if asked
    engine::FinishReason finish = engine::FinishReason::None;
    std::string error;  // with FinishReason::Error, the engine's message
    int completion_tokens = 0;
    bool started = false;  // chat streams send the assistant role once
};

struct Usage {
    int prompt_tokens = 0;
    int completion_tokens = 0;
    int cached_tokens = 0;
};
json usage_json(const Usage& u);

// Logprobs of tokens [from, to) of a choice in the endpoint's shape; text_offset starts at
// `offset` (completions only). A NaN logprob is a token nothing was predicted for (an echoed
// prompt's first): its logprob and top_logprobs are null, as OpenAI sends them.
json logprobs_json(Endpoint kind, const Service& b, const Choice& c, size_t from, size_t to,
                   size_t offset);

// A choice's prompt tokens as OpenAI's echo with logprobs lists them, ahead of its own tokens.
void prepend_prompt_logprobs(Choice& c, const std::vector<int32_t>& prompt,
                             const engine::PromptLogprobs& lp);
// vLLM's prompt_logprobs: null for the first token, then per token {id: {logprob, rank,
// decoded_token}} for the prompt's own token and the best alternatives.
json prompt_logprobs_json(const Service& b, const std::vector<int32_t>& prompt,
                          const engine::PromptLogprobs& lp);

// A whole non-streaming response.
json full_response(const GenRequest& r, const Service& b, const std::string& id, int64_t created,
                   const std::string& model, const std::vector<Choice>& choices, const Usage& u);

// One streamed chunk for choice `index` carrying `text` (and, when set, its logprobs and
// finish reason); `first` adds the assistant role to a chat delta.
json stream_chunk(const GenRequest& r, const std::string& id, int64_t created,
                  const std::string& model, int index, const std::string& text, bool first,
                  const json& logprobs, engine::FinishReason finish);
// A chat chunk carrying a choice's tool calls (whole, one entry each) as OpenAI streams them.
json tool_calls_chunk(const GenRequest& r, const std::string& id, int64_t created,
                      const std::string& model, int index,
                      const std::vector<tokenizer::ToolCall>& calls, bool first);
// OpenAI's shape of an assistant's tool_calls list.
json tool_calls_json(const std::vector<tokenizer::ToolCall>& calls, bool with_index);

// The closing chunk of include_usage: no choices, only usage.
json usage_chunk(const GenRequest& r, const std::string& id, int64_t created,
                 const std::string& model, const Usage& u);

// json::dump that never throws on invalid UTF-8 (token pieces can split a character).
std::string dump(const json& j);
// The string with any invalid UTF-8 replaced by U+FFFD, safe as a JSON object key.
std::string valid_utf8(const std::string& s);

}  // namespace ferry::server
