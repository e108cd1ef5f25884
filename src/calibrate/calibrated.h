// The model-level side of GPTQ, AWQ and SmoothQuant for `ferry quantize`: which tensors share which
// calibrated input, reading them as floats, and what to write instead of plain RTN. Only the
// per-layer linear maps are touched; the token embedding (also the output head when tied)
// and output.weight stay with RTN.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "calibrate/awq.h"
#include "calibrate/calibration.h"
#include "calibrate/gptq.h"
#include "calibrate/pruning.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "model/llama_config.h"

namespace ferry::calibrate {

// What each tensor is written as, by name and row length; nullopt when it is left alone
// (--keep), in which case its layer's AWQ scales cannot be folded and the layer is skipped.
using TypeForTensor = std::function<std::optional<DType>(const std::string& name, int64_t cols)>;

// Replacements for what RTN would write: finished bytes (GPTQ) or float values to be
// quantized as usual (AWQ's rescaled matrices and norms).
struct TensorOverrides {
    std::map<std::string, std::vector<uint8_t>> bytes;
    std::map<std::string, std::vector<float>> floats;
    std::vector<std::string> notes;  // one line each, for the user
};

using LayerProgress = std::function<void(int done, int total)>;

Expected<TensorOverrides> run_gptq(const gguf::File& f, const model::LlamaConfig& c,
                                   const CalibrationStats& stats, const TypeForTensor& type_of,
                                   const GptqOptions& opt, ThreadPool& pool,
                                   const LayerProgress& progress = nullptr);

Expected<TensorOverrides> run_awq(const gguf::File& f, const model::LlamaConfig& c,
                                  const CalibrationStats& stats, const TypeForTensor& type_of,
                                  ThreadPool& pool, const LayerProgress& progress = nullptr);

// SmoothQuant (calibrate/smoothquant.h) on every layer whose tensors are all written: the rescaled
// matrices and norms go into `floats`, to be rounded to w8a8 as usual.
Expected<TensorOverrides> run_smoothquant(const gguf::File& f, const model::LlamaConfig& c,
                                          const CalibrationStats& stats,
                                          const TypeForTensor& type_of, double alpha,
                                          const LayerProgress& progress = nullptr);

// Pruning (calibrate/pruning.h) of every layer's linear maps (q, k, v, attn_output, gate, up,
// down) into `floats`; the embedding and the output head are left whole. stats: the calibration
// (per-channel mean squares for Wanda, Hessians for SparseGPT); nullptr for magnitude.
struct PruneOptions {
    SparsityPattern pattern;
    PruneMethod method = PruneMethod::Magnitude;
    double damp = 0.01;  // sparsegpt, as GPTQ's
};
// Sequential pruning (SparseGPT's order): before each layer, statistics measured on the model
// with the layers before it already pruned (their floats in `so_far`), instead of `stats`.
using LayerStats =
    std::function<Expected<CalibrationStats>(int layer, const TensorOverrides& so_far)>;
Expected<TensorOverrides> run_prune(const gguf::File& f, const model::LlamaConfig& c,
                                    const CalibrationStats* stats, const PruneOptions& opt,
                                    ThreadPool& pool, const LayerProgress& progress = nullptr,
                                    const LayerStats& stats_for_layer = nullptr);
// The names run_prune prunes in a layer ("blk.L.attn_q.weight", ...).
std::vector<std::string> prunable_tensors(int layer);

// One layer's tensors as floats, and back into `out.floats` under their names.
Expected<AwqLayer> read_awq_layer(const gguf::File& f, const model::LlamaConfig& c, int layer);
void store_awq_layer(const AwqLayer& l, int layer, TensorOverrides& out);

// A tensor dequantized to floats (rows x cols; 1-D tensors have rows = 1).
Expected<FloatMatrix> read_float_tensor(const gguf::File& f, const std::string& name);

}  // namespace ferry::calibrate
