// What a client asks the engine for, and what the engine streams back. Plain values: the
// server and the CLI build them; the scheduler and the model runner never see HTTP or text.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/speculation.h"
#include "grammar/matcher.h"

namespace ferry::engine {

using RequestId = uint64_t;

struct RequestParams {
    SamplingParams sampling;
    int max_tokens = 256;           // per completion (each of the n)
    int n = 1;                      // parallel samples sharing the prompt's KV blocks
    std::vector<std::string> stop;  // stop strings; the text stops before the match
    bool include_stop_str = false;  // ... or right after it (vLLM's include_stop_str_in_output)
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    int priority = 0;       // lower value runs first (vLLM's convention); ties are FCFS
    int top_logprobs = -1;  // -1: no logprobs; 0..20: the sampled token's plus this many best
    // -1: none; 0..20: every prompt token's log-probability given the tokens before it, plus
    // this many best alternatives (OpenAI's echo with logprobs, vLLM's prompt_logprobs). Such a
    // prompt is computed in full, never taken from the prefix cache, since the logits of cached
    // positions were never kept. With max_tokens 0 the request scores the prompt and ends.
    int prompt_logprobs = -1;
    std::optional<SpecMethod> spec;  // speculation for this request; unset: the engine's
    // Constrained decoding: every token is drawn from those the grammar allows, and the output
    // ends (finish reason "stop") once the grammar is complete and nothing more may follow.
    std::shared_ptr<const grammar::CompiledGrammar> grammar;
    // Set: the output is free until this text appears in it, and from its first byte on
    // follows `grammar` (tool calling's `auto`: text, or a call that must be well-formed).
    std::string grammar_trigger;
};

// Prompt token i's (i >= 1) log-probability given tokens 0..i-1, its rank in that
// distribution (1 = the most likely), and the best alternatives there.
struct PromptLogprob {
    float logprob = 0;
    int rank = 1;
    std::vector<TokenLogprob> top;
};
using PromptLogprobs = std::vector<PromptLogprob>;  // entry i - 1 is prompt token i's

// Error: processing this request threw (its callback, its grammar, an allocation); the request
// ends with TokenEvent::error and the engine goes on serving the others.
enum class FinishReason { None, Stop, Length, Abort, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

// One event per generated token of one completion, and a last one with finished = true.
struct TokenEvent {
    RequestId request = 0;
    int index = 0;       // which of the n completions
    int32_t token = -1;  // -1 on the final event when nothing new was generated
    std::string text;    // newly completed text (UTF-8 safe, stop strings held back)
    float logprob = 0;
    std::vector<TokenLogprob> top_logprobs;
    bool finished = false;
    FinishReason finish_reason = FinishReason::None;
    std::string error;  // with FinishReason::Error: what went wrong
    int prompt_tokens = 0;
    int completion_tokens = 0;  // so far, for this completion
    int cached_tokens = 0;      // prompt tokens served from the prefix cache
    // On each completion's first event, when prompt_logprobs was asked for.
    std::shared_ptr<const PromptLogprobs> prompt_logprobs;
};

// Called on the engine thread: keep it short (copy into a queue, notify a connection).
using TokenCallback = std::function<void(const TokenEvent&)>;

}  // namespace ferry::engine
