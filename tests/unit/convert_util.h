// A Hugging Face directory written out as a float32 GGUF, as `ferry quantize DIR OUT.gguf
// --type f32` writes it (convert/hf_to_gguf), for tests that read both forms; `edit` may change
// the metadata first.
#pragma once

#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "convert/hf_to_gguf.h"
#include "gguf/gguf_writer.h"
#include "hf/model_dir.h"
#include "model/llama_config.h"

namespace ferry::testing {

inline void write_f32_gguf(const std::string& dir_path, const std::string& out,
                           const std::function<void(gguf::Writer&)>& edit = {}) {
    auto dir = hf::ModelDir::open(dir_path);
    ASSERT_TRUE(dir.ok()) << dir.error().message;
    auto cfg = model::read_llama_config((*dir)->config(), dir_path + "/config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    gguf::Writer w;
    const Status meta = convert::write_metadata(**dir, *cfg, w);
    ASSERT_TRUE(meta.ok()) << meta.error().message;
    if (edit) edit(w);
    auto sources = convert::source_tensors(**dir, *cfg);
    ASSERT_TRUE(sources.ok()) << sources.error().message;
    for (const auto& t : *sources) {
        const convert::SourceTensor* s = &t;
        ASSERT_TRUE(w.add_tensor(t.name, t.shape, DType::F32, [s](std::vector<uint8_t>& o) {
                         o.resize(row_bytes(DType::F32, s->row()) *
                                  static_cast<size_t>(s->n_rows()));
                         return convert::rows_as(*s, DType::F32, 0, s->n_rows(), o.data());
                     }).ok());
    }
    const Status written = w.write(out);
    ASSERT_TRUE(written.ok()) << written.error().message;
}

}  // namespace ferry::testing
