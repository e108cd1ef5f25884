// Training Medusa heads (model/medusa_heads.h) by self-distillation: the model continues pieces
// of a text greedily, and head k learns, from the hidden state at each position of those
// continuations, the token the model itself chose k + 2 places later. No data beyond the text is
// needed, and the heads learn the model's own habits, which is what verification rewards.
//
// The loss is the cross-entropy of each head's logits (through the model's own output head, kept
// frozen) against that token; the heads start at zero (each then repeats the model's next-token
// guess) and are trained with Adam. A tenth of the positions is held out: the report gives each
// head's top-1 agreement with the model there, before and after training, which is the chance
// that head's draft token is accepted once the ones before it were right.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/medusa_heads.h"

namespace ferry::engine {
struct LoadedModel;
}

namespace ferry::calibrate {

struct MedusaTrainOptions {
    int heads = 3;
    int64_t tokens = 4096;  // continuation positions to generate (training + held out)
    int prompt_len = 32;    // text tokens each continuation starts from
    // The model's chat template around each piece, as a user's request (one of a few
    // instructions: continue, summarise, explain, ...) that the model answers: a chat model then
    // learns its heads on its own answers, what it will draft in serving. False: plain text.
    bool chat = false;
    int continuation = 96;  // greedy tokens per continuation (fewer where the model ends it)
    int parallel = 8;       // continuations generated side by side
    int epochs = 3;
    int batch = 32;  // positions per Adam step
    float lr = 1e-3f;
    uint64_t seed = 1;  // the shuffling of positions between epochs
};

struct MedusaTrainReport {
    int64_t train_positions = 0, held_out_positions = 0;
    double generate_seconds = 0, train_seconds = 0;
    // Per head: held-out top-1 agreement with the model's own token before (zero heads) and
    // after training, and the mean training loss of the first and the last epoch.
    std::vector<double> top1_before, top1_after, loss_first, loss_last;
};

// Progress: (what, done, total), what being "generate" or "train".
using MedusaProgress = std::function<void(const char*, int64_t, int64_t)>;

// Trains heads for `lm` (one process: its output head whole) on continuations of `text`.
Expected<model::MedusaHeads> train_medusa(const engine::LoadedModel& lm,
                                          std::span<const int32_t> text,
                                          const MedusaTrainOptions& opt, MedusaTrainReport* report,
                                          const MedusaProgress& progress = nullptr);

}  // namespace ferry::calibrate
