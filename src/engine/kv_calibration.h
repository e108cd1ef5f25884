// The KV cache format for a model: the element type, and for int8 the keys' per-channel
// scales. Those are measured once per model instance (each Engine, Generator or draft cache
// built with int8 keys): the model runs with an f32 cache over a short built-in text, and
// each channel's scale is its largest |key| times a headroom factor, over 127. Keys beyond
// that are clipped (KvStore::k_clipped counts them).
#pragma once

#include <span>
#include <vector>

#include "engine/loaded_model.h"
#include "kv/kv_store.h"

namespace ferry::engine {

class ModelRunner;

// The headroom over the calibration text's largest |key| per channel: positions and texts
// the calibration did not see reach further, and clipping an outlier channel costs more than
// a coarser step.
constexpr float kKeyScaleHeadroom = 1.5f;

// The format for `t`; int8's calibration runs on the model's backend.
kv::KvFormat kv_format_for(const LoadedModel& m, quant::KvDType t);

// Per-(layer, channel) int8 key scales from running `tokens` (layers of the cache x kv_dim
// floats). The two channels RoPE rotates into each other share the larger scale, so the scale
// does not depend on the positions the text happened to put them at. On a split model each
// rank measures its own heads and layers.
std::vector<float> calibrate_key_scales(const model::LlamaModel& m,
                                        std::shared_ptr<kernels::Backend> backend,
                                        std::span<const int32_t> tokens,
                                        float headroom = kKeyScaleHeadroom);
// The same from a runner that has just run n_tokens of text into block 0 of an f32 cache
// (the ranks of a split model that followed rank 0's calibration run).
std::vector<float> key_scales_from(const ModelRunner& runner, int n_tokens,
                                   float headroom = kKeyScaleHeadroom);

}  // namespace ferry::engine
