// llama.cpp's "medium" k-quant files, Q4_K_M and Q5_K_M: one base type for most matrices and
// Q6_K for those that lose most to it. The rules are llama.cpp's (llama_tensor_get_type_impl in
// src/llama-quant.cpp), so ferry's Q4_K_M of a model is the file llama-quantize writes, tensor
// for tensor and byte for byte (tests/golden/quant/k_mix_*.json hold llama-quantize's choices).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ferry::quant {

enum class KMix { Q4_K_M, Q5_K_M };

// What the rules need to know of the model beside a tensor's name, read from its tensors'
// names and shapes (llama.cpp reads them from its loaded model).
struct KMixModel {
    int n_layers = 0;         // 1 + the highest blk.N
    int64_t n_experts = 0;    // a mixture's experts (0: dense)
    bool tied_output = true;  // no output.weight: the token embedding is the head
    bool llama_70b = false;   // what llama.cpp calls LLM_TYPE_70B: 80 layers with GQA
};

struct KMixTensor {
    std::string name;
    std::vector<int64_t> shape;  // GGUF order: {columns, rows[, experts]}
};
KMixModel k_mix_model(const std::vector<KMixTensor>& tensors);

// The base type of a mix (Q4_K, Q5_K) and llama_ftype's value for the file.
DType k_mix_base(KMix mix);
uint32_t k_mix_file_type(KMix mix);

// The type `name` is written as in a `mix` file: 1-D tensors and routers as in any file
// (quant::type_for_tensor), every other matrix by llama.cpp's rules, including its fallback
// where the rows do not split into the type's blocks (quant::fallback_for). A tensor's layer is
// read from its name: llama.cpp counts attn_v and ffn_down tensors in file order, the same
// number wherever every layer has one.
DType k_mix_type(KMix mix, const KMixModel& model, const std::string& name, size_t n_dims,
                 int64_t row);

}  // namespace ferry::quant
