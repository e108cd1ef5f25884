// A tensor of a GGUF being written, as its source holds it: a GGUF's tensor, or a Hugging Face
// directory's with its rows possibly in another order. rows_as() turns rows of it into any type
// ferry writes, so `ferry quantize` holds one tensor's output at a time, never the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry::convert {

struct SourceTensor {
    std::string name;            // GGUF name
    std::vector<int64_t> shape;  // GGUF order (shape[0] is the row)
    DType type = DType::F32;     // as stored
    const uint8_t* data = nullptr;
    size_t n_bytes = 0;
    int64_t n_elements = 0;
    // Output row r is stored row row_order[r]; empty: rows as stored. A permuted vector (a q or
    // k bias) is permuted into `owned` instead, and data points there (so a SourceTensor is
    // moved, never copied).
    std::vector<int32_t> row_order;
    std::vector<uint8_t> owned;
    // A tensor stacked from several of the source's (a mixture's experts, one tensor each in
    // a directory): row r is row r % part_rows of parts[r / part_rows]; empty: data holds it.
    std::vector<const uint8_t*> parts;
    int64_t part_rows = 0;

    int64_t row() const { return shape.empty() ? 0 : shape[0]; }
    int64_t n_rows() const { return row() ? n_elements / row() : 0; }
};

// Output rows [r0, r1) of t as `out` (row_bytes(out, t.row()) bytes each) at dst: the stored
// bytes when the type is the same and the order too, else each row widened to floats and
// rounded to `out`.
Status rows_as(const SourceTensor& t, DType out, int64_t r0, int64_t r1, uint8_t* dst);

}  // namespace ferry::convert
