// Turns a logit vector into the next token. The order follows common practice (llama.cpp,
// vLLM): penalties on the raw logits, then top-k, temperature, softmax, top-p and min-p
// truncation, then a draw from a seeded generator so the same seed gives the same text.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grammar/vocabulary.h"
#include "kernels/sample_args.h"

namespace ferry::engine {

struct SamplingParams {
    float temperature = 0.8f;         // <= 0 means greedy
    int top_k = 40;                   // <= 0: off
    float top_p = 0.95f;              // >= 1: off
    float min_p = 0.05f;              // <= 0: off
    float repetition_penalty = 1.0f;  // 1: off; > 1 discourages tokens already seen
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    int penalty_last_n = 64;  // how many recent tokens the penalties look at (-1: all)
    // Added to a token's logit before everything else (OpenAI's logit_bias: -100 bans a token,
    // +100 all but forces it).
    std::vector<std::pair<int32_t, float>> logit_bias;
    uint64_t seed = 0;
    bool has_seed = false;  // without a seed, one is drawn from std::random_device

    bool greedy() const { return temperature <= 0.0f || top_k == 1; }
};

// A token's log-probability under a logit vector, as OpenAI's logprobs report it.
struct TokenLogprob {
    int32_t token;
    float logprob;
};

// The log-probability of `token` in the model's own distribution (softmax of the raw logits,
// before any sampling adjustment), and the `top_n` most likely tokens' in descending order.
float token_logprobs(std::span<const float> logits, int32_t token, int top_n,
                     std::vector<TokenLogprob>* top);

// The allowed token with the highest logit (the lowest id on ties, as greedy sampling picks),
// read in place: greedy decoding under a grammar needs no masked copy of the vocabulary.
// -1: the mask allows nothing.
int32_t masked_argmax(const grammar::TokenMask& mask, const float* logits, int n_vocab);

class Sampler {
  public:
    explicit Sampler(const SamplingParams& params);

    // history: the tokens of the sequence so far (prompt and output), for the penalties.
    int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

    const SamplingParams& params() const { return params_; }
    // Greedy with nothing that changes the logits first (no bias, no penalty): the pick is the
    // argmax of the logits as they are.
    bool plain_greedy() const {
        return params_.greedy() && params_.logit_bias.empty() && !penalises();
    }
    // Whether the penalties read the history at all.
    bool penalises() const {
        return params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
               params_.frequency_penalty != 0.0f;
    }

    struct Candidate {
        int32_t id;
        float logit;
        float p;
    };
    // The candidates left after penalties and truncation, with normalised probabilities,
    // sorted by descending probability (the lowest id first on ties) — except when nothing is
    // truncated (top-k, top-p and min-p all off), where every token is kept in id order:
    // sorting the vocabulary per token would cost more than the forward pass.
    std::vector<Candidate> candidates(std::span<const float> logits,
                                      std::span<const int32_t> history) const;

    // A draw from candidates whose p sum to 1 (speculative verification draws from
    // distributions it builds itself), and a uniform number in [0, 1) from the same stream.
    // Every draw takes one number, even from a single candidate, so the stream advances the
    // same way whether the host or the device (device_row) picks.
    int32_t draw(const std::vector<Candidate>& c);
    double uniform();

    // This token's draw made where the logits are (kernels::sample_row): the parameters, a
    // uniform number from this generator (none when greedy, as sample() takes none), and the
    // biases and penalties appended to `edits` as the row's slice. The device then picks what
    // sample() would for the same generator state, up to rounding at a boundary.
    kernels::SampleRow device_row(std::span<const int32_t> history,
                                  std::vector<kernels::LogitEdit>& edits);

  private:
    // The tokens the penalties count: each id in the window and how often it occurs there.
    std::unordered_map<int32_t, int> penalty_counts(std::span<const int32_t> history) const;
    // The logits after bias and penalties: `logits` itself when neither applies, else buf.
    std::span<const float> adjusted(std::span<const float> logits, std::span<const int32_t> history,
                                    std::vector<float>& buf) const;

    SamplingParams params_;
    std::mt19937_64 rng_;
};

}  // namespace ferry::engine
