// KV eviction for contexts longer than the cache should hold (StreamingLLM, Xiao et al. 2023):
// a sequence keeps its first tokens (the attention sinks, which soak up the attention no other
// token wants) and its most recent ones, at most `budget` tokens in all; the blocks in between
// go back to the pool whole. Generation then runs past the budget, and past the model's
// trained context, in flat memory, at the quality that what falls out of the window costs.
//
// Positions. The cache stays one contiguous table (sink blocks, then the window), so the
// attention and kv_write kernels index slots as they always do, and each token keeps its own
// position for RoPE (BatchSeq::rope_offset: the tokens evicted so far), so the window's
// distances to the query are the true ones. The sinks, computed at positions 0.., are moved up
// to sit just before the window (a KeyMove: RoPE is a rotation, so turning a key by d moves it d
// positions), so every distance the query sees is less than the cache's length, as
// StreamingLLM's "positions within the cache" make it. The sinks' original blocks stay held (and
// shared through the prefix cache); each eviction copies them into private blocks and turns
// those once, so a sink key is rounded once, not once per eviction.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/status.h"
#include "quant/kv_format.h"

namespace ferry::engine {

// Streaming: the sinks and the latest tokens, the sinks moved up to the window, so a sequence
// runs past the trained context. H2O (Zhang et al., 2023, "Heavy-Hitter Oracle"): the sinks,
// the latest budget / 2 tokens, and of the blocks between them those that have drawn the most
// attention (summed over heads and layers, from each step's last token); kept blocks keep their
// positions, as in the paper, so a sequence stays within the trained context.
enum class KvEvictionKind { None, Streaming, H2O };

struct KvEvictionConfig {
    KvEvictionKind kind = KvEvictionKind::None;
    int budget = 0;       // tokens a sequence's cache keeps at most before a step's new ones
    int sink_tokens = 4;  // the attention sinks, rounded up to whole blocks; 0: a plain window
    bool on() const { return kind != KvEvictionKind::None; }
    // Whether a sequence may run past the model's context (its positions stay within the cache).
    bool past_context() const { return kind == KvEvictionKind::Streaming; }
    int recent_tokens() const { return budget / 2; }  // H2O's recent window
    int sink_blocks(int block_size) const {           // the sinks in whole blocks
        return (sink_tokens + block_size - 1) / block_size;
    }
};

const char* kv_eviction_name(KvEvictionKind k);  // "none", "streaming", "h2o"
std::optional<KvEvictionKind> parse_kv_eviction(std::string_view name);  // the same names

// What a runner of `e` must hold, the rules the engine and the single stream share: not int8
// keys under streaming (their fixed per-channel scales cannot follow a move), not a model with
// sliding-window layers, a budget of the sinks and two blocks at least, and the budget, one step's
// tokens and the sinks' originals within `context` positions (`context_name` says whose; `remedy`
// says how to take a step's tokens down). Ok when it can run, or when e is off.
Status check_kv_eviction(const KvEvictionConfig& e, quant::KvDType kv, bool sliding_window,
                         int block_size, int step_tokens, const char* remedy, int64_t context,
                         const char* context_name);

}  // namespace ferry::engine
