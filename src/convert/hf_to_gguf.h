// A Hugging Face directory as a GGUF file llama.cpp loads: config.json's hyper-parameters in
// the architecture's keys, tokenizer.json's vocabulary in tokenizer.ggml.* (byte-level BPE as
// "gpt2" with its merges and pre-tokenizer name, SentencePiece-style BPE as "llama" with scores
// that rank tokens as the merges do), the chat template, and the tensors under GGUF's names with
// q and k rows permuted to the adjacent-pair order GGUF's llama architecture rotates.
// The tensors are described, not copied: `ferry quantize` writes them row by row in any type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "convert/source_tensor.h"
#include "core/status.h"
#include "gguf/gguf_writer.h"
#include "hf/model_dir.h"
#include "model/llama_config.h"

namespace ferry::convert {

// The GGUF architecture a directory is written as: "llama" for llama, mistral and mixtral
// (llama.cpp's own converter does the same), the arch's own name for the others.
std::string gguf_arch(const model::LlamaConfig& c);

// Sets general.*, the architecture's keys, tokenizer.ggml.* and tokenizer.chat_template.
// Fails naming what has no GGUF spelling (a pre-tokenizer llama.cpp has no name for, a
// tokenizer model other than BPE, a vocabulary larger than config.json's vocab_size).
Status write_metadata(const hf::ModelDir& dir, const model::LlamaConfig& c, gguf::Writer& w);

// Every tensor of the directory under its GGUF name, in GGUF's order (embedding, layers, norm,
// head). Fails on a tensor ferry has no GGUF name for, or one of another type or rank.
Expected<std::vector<SourceTensor>> source_tensors(const hf::ModelDir& dir,
                                                   const model::LlamaConfig& c);

// The tokenizer.ggml.* keys alone, from tokenizer.json and tokenizer_config.json (tests).
// n_vocab: the model's vocabulary; ids the tokenizer lacks are padded as llama.cpp does.
Status write_tokenizer(const nlohmann::json& tokenizer, const nlohmann::json& config, int n_vocab,
                       gguf::Writer& w);

}  // namespace ferry::convert
