// One completion's state as the scheduler and the engine see it: its tokens (prompt then
// output), how many of them are already in the KV cache, its block table, and its sampler.
// A request with n > 1 becomes n sequences that share the prompt's blocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/spec_planner.h"
#include "engine/stop_text.h"

namespace ferry::engine {

using Clock = std::chrono::steady_clock;

struct Request;

enum class SeqStatus { Waiting, Running, Finished };

struct Sequence {
    uint64_t id = 0;
    Request* request = nullptr;
    int index = 0;  // which of the request's n completions
    std::vector<int32_t> tokens;
    int prompt_len = 0;
    int num_computed = 0;  // tokens whose keys and values are in the cache
    BlockTable kv;         // its KV blocks (the block manager's to change)
    BlockTable kv_window;  // a hybrid cache's: its sliding layers' blocks (their own pool)
    SeqStatus status = SeqStatus::Waiting;
    bool batch_member = false;  // static batching: chosen for the batch being run
    int output_len() const { return static_cast<int>(tokens.size()) - prompt_len; }
    int num_uncomputed() const { return static_cast<int>(tokens.size()) - num_computed; }
    // Positions its cache holds: every computed token but those KV eviction took out.
    int64_t cache_len() const { return num_computed - kv.evicted; }

    // Speculation: the method, this step's proposal (verified this step), and how much of its
    // drafts the target has been accepting (the cost policy plans with it).
    SpecMethod spec = SpecMethod::Off;
    Draft draft;
    AcceptanceStats spec_acceptance;
    ShadowDraft spec_shadow;  // a declined lookup draft, judged by the tokens that follow

    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<grammar::Matcher> matcher;  // set when the request is constrained
    // A lazy constraint still waiting for its trigger: the output's last bytes, searched for it.
    bool awaiting_trigger = false;
    std::string trigger_window;
    std::unique_ptr<StopText> text;
    Clock::time_point last_token_time{};
    std::vector<double> itl_s;
};

// A client's request: the prompt, parameters and callback its sequences share.
struct Request {
    RequestId id = 0;
    RequestParams params;
    TokenCallback on_token;
    std::vector<int32_t> prompt;
    uint64_t arrival = 0;  // admission order, for FCFS among equal priorities
    Clock::time_point arrival_time{};
    Clock::time_point scheduled_time{};  // first time any of its tokens ran
    Clock::time_point first_token_time{};
    bool started = false;
    bool forked = false;  // the n - 1 siblings exist
    bool aborted = false;
    std::string error;  // set once its processing threw: every sequence then ends with Error
    int cached_tokens = 0;
    int unfinished = 1;  // sequences still running or waiting
    int output_tokens = 0;
    PromptLogprobs prompt_lp;  // gathered chunk by chunk (kept across a preemption)
    std::shared_ptr<const PromptLogprobs> prompt_lp_done;  // once the whole prompt has run
};

}  // namespace ferry::engine
