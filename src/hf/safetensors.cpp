#include "hf/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

namespace ferry::hf {
namespace {

// The reference implementation refuses headers above 100 MB: nothing real comes close (a 70 B
// model's header is ~100 KB), and a bigger one is an attack on the parser.
constexpr uint64_t kMaxHeader = 100'000'000;

struct DtypeInfo {
    std::string_view name;
    size_t bytes;
    bool known;
    DType type;
};
// Every dtype the format defines; `known` ones have a ferry DType.
constexpr DtypeInfo kDtypes[] = {
    {"F64", 8, true, DType::F64},      {"F32", 4, true, DType::F32},
    {"F16", 2, true, DType::F16},      {"BF16", 2, true, DType::BF16},
    {"I64", 8, true, DType::I64},      {"I32", 4, true, DType::I32},
    {"I16", 2, true, DType::I16},      {"I8", 1, true, DType::I8},
    {"U64", 8, false, DType::F32},     {"U32", 4, false, DType::F32},
    {"U16", 2, false, DType::F32},     {"U8", 1, false, DType::F32},
    {"BOOL", 1, false, DType::F32},    {"F8_E4M3", 1, false, DType::F32},
    {"F8_E5M2", 1, false, DType::F32}, {"F8_E8M0", 1, false, DType::F32},
};

const DtypeInfo* find_dtype(std::string_view name) {
    for (const auto& d : kDtypes)
        if (d.name == name) return &d;
    return nullptr;
}

}  // namespace

size_t safetensors_elem_bytes(std::string_view dtype) {
    const DtypeInfo* d = find_dtype(dtype);
    return d ? d->bytes : 0;
}

Expected<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
    auto map = MappedFile::open(path);
    if (!map) return map.error();
    std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    f->bytes_ = (*map)->bytes();
    f->map_ = std::move(*map);
    if (Status s = f->parse_all(); !s) return s.error();
    return f;
}

Expected<std::shared_ptr<SafetensorsFile>> SafetensorsFile::parse(std::span<const uint8_t> bytes,
                                                                  std::string name) {
    std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = std::move(name);
    f->bytes_ = bytes;
    if (Status s = f->parse_all(); !s) return s.error();
    return f;
}

const SafeTensor* SafetensorsFile::tensor(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::release(const void* p, size_t n) const {
    if (map_) map_->release(p, n);
}

Status SafetensorsFile::parse_all() {
    const std::string& p = path_;
    if (bytes_.size() < 8)
        return make_error("{}: not a safetensors file ({} bytes, shorter than its header length)",
                          p, bytes_.size());
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes_[static_cast<size_t>(i)];
    if (header_len > kMaxHeader)
        return make_error("{}: safetensors header of {} bytes (more than {} is refused)", p,
                          header_len, kMaxHeader);
    if (header_len > bytes_.size() - 8)
        return make_error("{}: truncated: the header says {} bytes but the file has {} after it", p,
                          header_len, bytes_.size() - 8);
    const auto* hb = reinterpret_cast<const char*>(bytes_.data() + 8);
    const nlohmann::json h = nlohmann::json::parse(hb, hb + header_len, nullptr, false);
    if (h.is_discarded() || !h.is_object())
        return make_error("{}: the safetensors header is not a JSON object", p);
    const uint8_t* data = bytes_.data() + 8 + header_len;
    const size_t data_len = bytes_.size() - 8 - header_len;

    struct Range {
        uint64_t begin, end;
        size_t index;
    };
    std::vector<Range> ranges;
    for (auto it = h.begin(); it != h.end(); ++it) {
        const std::string& name = it.key();
        const nlohmann::json& e = it.value();
        if (name == "__metadata__") {
            if (!e.is_object())
                return make_error("{}: __metadata__ is not an object of strings", p);
            for (auto m = e.begin(); m != e.end(); ++m) {
                if (!m.value().is_string())
                    return make_error("{}: __metadata__ '{}' is not a string", p, m.key());
                metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        if (!e.is_object()) return make_error("{}: tensor '{}' is not an object", p, name);
        auto dt = e.find("dtype");
        auto sh = e.find("shape");
        auto off = e.find("data_offsets");
        if (dt == e.end() || !dt->is_string() || sh == e.end() || !sh->is_array() ||
            off == e.end() || !off->is_array() || off->size() != 2)
            return make_error("{}: tensor '{}' needs a string dtype, a shape and two data_offsets",
                              p, name);
        SafeTensor t;
        t.name = name;
        t.dtype = dt->get<std::string>();
        const DtypeInfo* info = find_dtype(t.dtype);
        if (!info) return make_error("{}: tensor '{}' has unknown dtype '{}'", p, name, t.dtype);
        t.known = info->known;
        t.type = info->type;
        uint64_t n = 1;
        for (const auto& d : *sh) {
            if (!d.is_number_unsigned())
                return make_error("{}: tensor '{}' has a shape entry that is not a size", p, name);
            const auto v = d.get<uint64_t>();
            if (v != 0 && n > std::numeric_limits<int64_t>::max() / v)
                return make_error("{}: tensor '{}' has an overflowing shape", p, name);
            n *= v;
            t.shape.push_back(static_cast<int64_t>(v));
        }
        if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
            return make_error("{}: tensor '{}' has data_offsets that are not sizes", p, name);
        const auto begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
        if (begin > end || end > data_len)
            return make_error("{}: tensor '{}' lies at [{}, {}) outside the {} data bytes", p, name,
                              begin, end, data_len);
        if (n > std::numeric_limits<uint64_t>::max() / info->bytes ||
            n * info->bytes != end - begin)
            return make_error("{}: tensor '{}' ({} {} elements) spans {} bytes, not {}", p, name, n,
                              t.dtype, end - begin, n * info->bytes);
        t.n_elements = static_cast<int64_t>(n);
        t.n_bytes = static_cast<size_t>(end - begin);
        t.data = data + begin;
        ranges.push_back({begin, end, tensors_.size()});
        index_[name] = tensors_.size();
        tensors_.push_back(std::move(t));
    }
    // The ranges tile the data: no tensor overlaps another, no byte belongs to none.
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t at = 0;
    for (const Range& r : ranges) {
        if (r.begin != at)
            return make_error("{}: tensor '{}' starts at byte {} but the one before ends at {}", p,
                              tensors_[r.index].name, r.begin, at);
        at = r.end;
    }
    if (at != data_len)
        return make_error("{}: the tensors cover {} of the {} data bytes", p, at, data_len);
    // File order (by offset), as the writers lay them out.
    std::vector<SafeTensor> ordered;
    ordered.reserve(tensors_.size());
    index_.clear();
    for (const Range& r : ranges) {
        index_[tensors_[r.index].name] = ordered.size();
        ordered.push_back(std::move(tensors_[r.index]));
    }
    tensors_ = std::move(ordered);
    return Status::Ok();
}

}  // namespace ferry::hf
