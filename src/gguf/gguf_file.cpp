#include "gguf/gguf_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace ferry::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr int kMaxDims = 4;
// Arrays of arrays are legal; the limit only keeps hostile input from exhausting the stack.
constexpr int kMaxArrayDepth = 16;
// Up-front reservations never exceed this many items; larger arrays grow as they are read.
constexpr uint64_t kMaxReserve = 1 << 16;

// Smallest encoding of one value of each type, used to reject counts that cannot possibly
// fit in the bytes left before allocating anything for them.
size_t min_value_bytes(ValueType t) {
    switch (t) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::BOOL:
            return 1;
        case ValueType::UINT16:
        case ValueType::INT16:
            return 2;
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::FLOAT32:
            return 4;
        case ValueType::UINT64:
        case ValueType::INT64:
        case ValueType::FLOAT64:
        case ValueType::STRING:
            return 8;  // the length prefix
        case ValueType::ARRAY:
            return 12;  // element type + count
    }
    return 1;
}

bool known_value_type(uint32_t t) {
    return t <= static_cast<uint32_t>(ValueType::FLOAT64);
}

bool mul_overflows(int64_t a, int64_t b, int64_t* out) {
    return __builtin_mul_overflow(a, b, out);
}

// Reads little-endian fields from the byte span; every read is bounds-checked, and the
// caller turns a failed read into an error naming the item it was reading.
class Reader {
  public:
    Reader(std::span<const uint8_t> bytes, const std::string& name) : b_(bytes), name_(name) {}

    size_t pos() const { return pos_; }
    size_t left() const { return b_.size() - pos_; }

    template <class T>
    bool get(T* out) {
        if (left() < sizeof(T)) return false;
        std::memcpy(out, b_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return true;
    }

    template <class... Args>
    Error fail(fmt::format_string<Args...> f, Args&&... args) const {
        return Error{name_ + ": " + fmt::format(f, std::forward<Args>(args)...)};
    }
    Error truncated(std::string_view what, std::string_view where) const {
        return fail("truncated file at offset {} while reading {} of {}", pos_, what, where);
    }

    Status read_string(std::string* out, std::string_view what, std::string_view where) {
        uint64_t len = 0;
        if (!get(&len)) return truncated(fmt::format("{} length", what), where);
        if (len > left())
            return fail("{} length {} out of range ({} bytes left in file) in {}", what, len,
                        left(), where);
        out->assign(reinterpret_cast<const char*>(b_.data() + pos_), len);
        pos_ += len;
        return {};
    }

    Status read_value(ValueType type, Value* out, int depth, std::string_view where);

  private:
    Status read_array(Array* out, int depth, std::string_view where);

    std::span<const uint8_t> b_;
    size_t pos_ = 0;
    const std::string& name_;
};

template <class Raw, class Wide>
Status read_scalar(Reader& r, Value* out, std::string_view where) {
    Raw x;
    if (!r.get(&x)) return r.truncated("a value", where);
    out->v = static_cast<Wide>(x);
    return {};
}

Status Reader::read_value(ValueType type, Value* out, int depth, std::string_view where) {
    out->type = type;
    switch (type) {
        case ValueType::UINT8:
            return read_scalar<uint8_t, uint64_t>(*this, out, where);
        case ValueType::UINT16:
            return read_scalar<uint16_t, uint64_t>(*this, out, where);
        case ValueType::UINT32:
            return read_scalar<uint32_t, uint64_t>(*this, out, where);
        case ValueType::UINT64:
            return read_scalar<uint64_t, uint64_t>(*this, out, where);
        case ValueType::INT8:
            return read_scalar<int8_t, int64_t>(*this, out, where);
        case ValueType::INT16:
            return read_scalar<int16_t, int64_t>(*this, out, where);
        case ValueType::INT32:
            return read_scalar<int32_t, int64_t>(*this, out, where);
        case ValueType::INT64:
            return read_scalar<int64_t, int64_t>(*this, out, where);
        case ValueType::FLOAT32:
            return read_scalar<float, double>(*this, out, where);
        case ValueType::FLOAT64:
            return read_scalar<double, double>(*this, out, where);
        case ValueType::BOOL: {
            uint8_t x;  // read as a byte: a bool object holding 2 would be undefined
            if (!get(&x)) return truncated("a bool", where);
            out->v = x != 0;
            return {};
        }
        case ValueType::STRING: {
            out->v = std::string();
            return read_string(&std::get<std::string>(out->v), "string", where);
        }
        case ValueType::ARRAY: {
            out->v = Array();
            return read_array(&std::get<Array>(out->v), depth + 1, where);
        }
    }
    return fail("unknown metadata value type {} in {}", static_cast<uint32_t>(type), where);
}

Status Reader::read_array(Array* out, int depth, std::string_view where) {
    if (depth > kMaxArrayDepth)
        return fail("arrays nested more than {} deep in {}", kMaxArrayDepth, where);
    uint32_t elem = 0;
    uint64_t count = 0;
    if (!get(&elem)) return truncated("array element type", where);
    if (!known_value_type(elem)) return fail("unknown array element type {} in {}", elem, where);
    if (!get(&count)) return truncated("array length", where);
    out->elem_type = static_cast<ValueType>(elem);
    if (count > left() / min_value_bytes(out->elem_type))
        return fail("array length {} out of range ({} bytes left in file) in {}", count, left(),
                    where);
    // Capped: a corrupt count in a multi-gigabyte file must not allocate before reading.
    out->items.reserve(std::min<uint64_t>(count, kMaxReserve));
    for (uint64_t i = 0; i < count; ++i) {
        Status s = read_value(out->elem_type, &out->items.emplace_back(), depth, where);
        if (!s.ok()) return Error{s.error().message + fmt::format(" (array item {})", i)};
    }
    return {};
}

std::string key_where(uint64_t i, uint64_t n, const std::string& key) {
    return fmt::format("metadata key #{} of {} '{}'", i, n, key);
}
std::string tensor_where(uint64_t i, uint64_t n, const std::string& name) {
    return fmt::format("tensor info #{} of {} '{}'", i, n, name);
}

}  // namespace

#define FERRY_TRY(expr)                  \
    do {                                 \
        Status s_ = (expr);              \
        if (!s_.ok()) return s_.error(); \
    } while (0)

std::string_view value_type_name(ValueType t) {
    switch (t) {
        case ValueType::UINT8:
            return "uint8";
        case ValueType::INT8:
            return "int8";
        case ValueType::UINT16:
            return "uint16";
        case ValueType::INT16:
            return "int16";
        case ValueType::UINT32:
            return "uint32";
        case ValueType::INT32:
            return "int32";
        case ValueType::FLOAT32:
            return "float32";
        case ValueType::BOOL:
            return "bool";
        case ValueType::STRING:
            return "string";
        case ValueType::ARRAY:
            return "array";
        case ValueType::UINT64:
            return "uint64";
        case ValueType::INT64:
            return "int64";
        case ValueType::FLOAT64:
            return "float64";
    }
    return "unknown";
}

bool Value::is_integer() const {
    return std::holds_alternative<uint64_t>(v) || std::holds_alternative<int64_t>(v);
}

std::optional<int64_t> Value::as_int() const {
    if (const auto* u = std::get_if<uint64_t>(&v)) {
        if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
        return static_cast<int64_t>(*u);
    }
    if (const auto* i = std::get_if<int64_t>(&v)) return *i;
    if (const auto* d = std::get_if<double>(&v)) {
        // 2^63 is exactly representable; anything at or above it (or NaN) does not fit.
        if (!(*d >= -9223372036854775808.0 && *d < 9223372036854775808.0)) return std::nullopt;
        return static_cast<int64_t>(*d);
    }
    return std::nullopt;
}

std::optional<double> Value::as_float() const {
    if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
    if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    if (const auto* d = std::get_if<double>(&v)) return *d;
    return std::nullopt;
}

std::optional<bool> Value::as_bool() const {
    if (const auto* b = std::get_if<bool>(&v)) return *b;
    return std::nullopt;
}

File::~File() = default;

Expected<std::shared_ptr<File>> File::open(const std::string& path) {
    auto map = MappedFile::open(path);
    if (!map) return map.error();
    std::shared_ptr<File> f(new File());
    f->path_ = path;
    f->bytes_ = (*map)->bytes();
    f->map_ = std::move(*map);
    Status s = f->parse_all();
    if (!s.ok()) return s.error();
    return f;
}

void File::release(const void* p, size_t n) const {
    if (map_) map_->release(p, n);
}

Expected<std::shared_ptr<File>> File::parse(std::span<const uint8_t> bytes, std::string name) {
    std::shared_ptr<File> f(new File());
    f->path_ = std::move(name);
    f->bytes_ = bytes;
    Status s = f->parse_all();
    if (!s.ok()) return s.error();
    return f;
}

Status File::parse_all() {
    Reader r(bytes_, path_);
    uint32_t magic = 0;
    if (!r.get(&magic))
        return r.fail("not a GGUF file (truncated: {} bytes, too short for the magic)",
                      bytes_.size());
    if (magic != kMagic) return r.fail("not a GGUF file (bad magic 0x{:08X})", magic);
    if (!r.get(&version_)) return r.truncated("the version", "the header");
    if (version_ == 1)
        return r.fail("unsupported GGUF version 1 (too old; re-convert the model to v3)");
    if (version_ != 2 && version_ != 3)
        return r.fail("unsupported GGUF version {} (ferry reads versions 2 and 3)", version_);

    uint64_t n_tensors = 0, n_kv = 0;
    if (!r.get(&n_tensors)) return r.truncated("the tensor count", "the header");
    if (!r.get(&n_kv)) return r.truncated("the metadata count", "the header");
    // The counts are only checked by reading that many items, so a truncated file is reported
    // at the item where it ends; the reservations are capped by what the bytes left could hold
    // (a key takes at least 13 bytes, a tensor info 24) so a corrupt count allocates little.
    kv_.reserve(std::min({n_kv, r.left() / 13, kMaxReserve}));
    tensors_.reserve(std::min({n_tensors, r.left() / 24, kMaxReserve}));
    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string key;
        FERRY_TRY(r.read_string(&key, "key", fmt::format("metadata key #{} of {}", i, n_kv)));
        std::string where = key_where(i, n_kv, key);
        if (kv_index_.count(key)) return r.fail("duplicate metadata key '{}'", key);
        uint32_t type = 0;
        if (!r.get(&type)) return r.truncated("value type", where);
        if (!known_value_type(type))
            return r.fail("unknown metadata value type {} for {}", type, where);
        Value value;
        FERRY_TRY(r.read_value(static_cast<ValueType>(type), &value, 0, where));
        kv_index_.emplace(key, kv_.size());
        kv_.emplace_back(std::move(key), std::move(value));
    }

    if (const Value* a = find("general.alignment")) {
        auto n = a->is_integer() ? a->as_int() : std::nullopt;
        if (!n || *n <= 0 || (*n & (*n - 1)) != 0)
            return r.fail("general.alignment must be a non-zero power of two");
        alignment_ = static_cast<uint64_t>(*n);
    }

    for (uint64_t i = 0; i < n_tensors; ++i) {
        TensorInfo t;
        FERRY_TRY(
            r.read_string(&t.name, "name", fmt::format("tensor info #{} of {}", i, n_tensors)));
        std::string where = tensor_where(i, n_tensors, t.name);
        if (tensor_index_.count(t.name)) return r.fail("duplicate tensor name '{}'", t.name);

        uint32_t n_dims = 0;
        if (!r.get(&n_dims)) return r.truncated("n_dims", where);
        if (n_dims == 0 || n_dims > kMaxDims)
            return r.fail("{}: n_dims {} out of range (1..{})", where, n_dims, kMaxDims);
        t.n_elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            uint64_t dim = 0;
            if (!r.get(&dim)) return r.truncated(fmt::format("dimension {}", d), where);
            if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                return r.fail("{}: dimension {} is {} (must be positive)", where, d,
                              static_cast<int64_t>(dim));
            t.shape.push_back(static_cast<int64_t>(dim));
            if (mul_overflows(t.n_elements, t.shape.back(), &t.n_elements))
                return r.fail("{}: shape overflows int64", where);
        }

        uint32_t type_id = 0;
        if (!r.get(&type_id)) return r.truncated("type", where);
        auto info = dtype_info(type_id);
        if (!info) return r.fail("unknown tensor type id {} for tensor '{}'", type_id, t.name);
        t.type = info->type;
        if (t.shape[0] % info->block_size != 0)
            return r.fail("{}: row length {} is not a multiple of block size {} of {}", where,
                          t.shape[0], info->block_size, info->name);
        // Sized row by row: ferry's own types carry a per-row header (their scale).
        int64_t row_size = 0, n_bytes = 0;
        if (mul_overflows(t.shape[0] / info->block_size, info->block_bytes, &row_size) ||
            __builtin_add_overflow(row_size, info->row_header, &row_size) ||
            mul_overflows(row_size, t.n_elements / t.shape[0], &n_bytes))
            return r.fail("{}: byte size of {} elements of {} overflows int64", where, t.n_elements,
                          info->name);
        if (static_cast<uint64_t>(n_bytes) > bytes_.size())
            return r.fail("{}: {} bytes of data out of range of the {}-byte file", where, n_bytes,
                          bytes_.size());
        t.n_bytes = static_cast<size_t>(n_bytes);

        if (!r.get(&t.offset)) return r.truncated("offset", where);
        if (t.offset % alignment_ != 0)
            return r.fail("{}: data offset {} not aligned to {}", where, t.offset, alignment_);
        tensor_index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }

    // The data section starts at the next multiple of the alignment after the tensor infos.
    size_t pad = (alignment_ - r.pos() % alignment_) % alignment_;
    if (pad <= r.left())
        data_offset_ = r.pos() + pad;
    else if (tensors_.empty())
        data_offset_ = bytes_.size();  // a metadata-only file need not carry trailing padding
    else
        return r.fail("truncated file: data section start is beyond the end of the file");
    return validate_tensor_ranges();
}

Status File::validate_tensor_ranges() {
    const size_t data_len = bytes_.size() - data_offset_;
    for (auto& t : tensors_) {
        if (t.offset > data_len || t.n_bytes > data_len - t.offset)
            return make_error(
                "{}: tensor '{}' data [{}, {}) out of range of the file ({} data bytes)", path_,
                t.name, t.offset, t.offset + t.n_bytes, data_len);
        t.data = bytes_.data() + data_offset_ + t.offset;
    }
    std::vector<const TensorInfo*> by_offset;
    by_offset.reserve(tensors_.size());
    for (const auto& t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const TensorInfo* prev = by_offset[i - 1];
        if (by_offset[i]->offset < prev->offset + prev->n_bytes)
            return make_error("{}: tensors '{}' and '{}' overlap", path_, prev->name,
                              by_offset[i]->name);
    }
    return {};
}

const Value* File::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
    const Value* v = find(key);
    return v && v->is_integer() ? v->as_int() : std::nullopt;
}

std::optional<double> File::get_float(std::string_view key) const {
    const Value* v = find(key);
    return v ? v->as_float() : std::nullopt;
}

std::optional<std::string> File::get_string(std::string_view key) const {
    const Value* v = find(key);
    if (!v || !v->as_string()) return std::nullopt;
    return *v->as_string();
}

std::optional<bool> File::get_bool(std::string_view key) const {
    const Value* v = find(key);
    return v ? v->as_bool() : std::nullopt;
}

const Array* File::get_array(std::string_view key) const {
    const Value* v = find(key);
    return v ? v->as_array() : nullptr;
}

const TensorInfo* File::tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

bool has_gguf_magic(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    std::ifstream f(path, std::ios::binary);
    uint32_t magic = 0;
    return f.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kMagic;
}

}  // namespace ferry::gguf
