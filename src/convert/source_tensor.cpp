#include "convert/source_tensor.h"

#include <cstring>

#include "quant/dequantize.h"
#include "quant/quantize.h"

namespace ferry::convert {

Status rows_as(const SourceTensor& t, DType out, int64_t r0, int64_t r1, uint8_t* dst) {
    const int64_t row = t.row();
    const size_t in_row = row_bytes(t.type, row), out_row = row_bytes(out, row);
    auto src = [&](int64_t r) {
        if (!t.row_order.empty()) r = t.row_order[static_cast<size_t>(r)];
        if (!t.parts.empty())
            return t.parts[static_cast<size_t>(r / t.part_rows)] +
                   in_row * static_cast<size_t>(r % t.part_rows);
        return t.data + in_row * static_cast<size_t>(r);
    };
    if (out == t.type) {
        for (int64_t r = r0; r < r1; ++r)
            std::memcpy(dst + out_row * static_cast<size_t>(r - r0), src(r), in_row);
        return Status::Ok();
    }
    std::vector<float> tmp(static_cast<size_t>(row));
    for (int64_t r = r0; r < r1; ++r) {
        if (Status s = quant::dequantize_row(t.type, src(r), tmp.data(), row); !s) return s;
        if (Status s = quant::quantize_row(out, tmp.data(),
                                           dst + out_row * static_cast<size_t>(r - r0), row);
            !s)
            return s;
    }
    return Status::Ok();
}

}  // namespace ferry::convert
