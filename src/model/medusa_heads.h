// Medusa heads (Cai et al., 2024, "Medusa-1"): N small residual blocks over the model's last
// hidden state h (the output head's input, after the final norm). Head k (0-based) guesses the
// token k + 2 places after the one h was computed at, that is k + 1 places past the model's own
// next token, through the model's own output head:
//   z_k = h + SiLU(W_k h + b_k),   logits_k = output_head(z_k).
// With W_k = 0 and b_k = 0 (how training starts) a head repeats the model's next-token guess.
// They are stored beside the model as a small GGUF (`ferry train-medusa` writes it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/llama_config.h"

namespace ferry::model {

struct MedusaHeads {
    int64_t n_embd = 0;
    int64_t n_vocab = 0;                // the vocabulary of the model they were trained for
    std::vector<std::vector<float>> w;  // per head: n_embd x n_embd, row o holds output o's weights
    std::vector<std::vector<float>> b;  // per head: n_embd
    std::string trained_on;             // the model's file name, for messages

    int n_heads() const { return static_cast<int>(w.size()); }
    // n heads of zeros (training's start) for a model of this width and vocabulary.
    static MedusaHeads zeros(int n, int64_t n_embd, int64_t n_vocab);
    // z = h + SiLU(a + b_k), given a = W_k h (computed wherever the caller's products run).
    void finish(int k, const float* h, const float* a, float* z) const;

    // Reads a file save() wrote; the error names the file and what is wrong with it.
    static Expected<MedusaHeads> load(const std::string& path);
    Status save(const std::string& path) const;
    // Whether they were made for a model of this shape (width and vocabulary); the error says
    // which differs.
    Status check_fits(const LlamaConfig& c) const;
};

// Where `ferry train-medusa` puts a model's heads by default: beside it, MODEL.medusa.gguf
// (a Hugging Face directory's inside it, medusa.gguf).
std::string default_medusa_path(const std::string& model_path);

}  // namespace ferry::model
