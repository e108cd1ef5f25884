#include "gguf/gguf_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

namespace ferry::gguf {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

// Serialises to a FILE or into memory; a short write is remembered and reported once.
class Sink {
  public:
    Sink(std::FILE* f, std::vector<uint8_t>* mem) : f_(f), mem_(mem) {}
    void bytes(const void* p, size_t n) {
        if (n == 0) return;
        if (mem_) {
            const auto* b = static_cast<const uint8_t*>(p);
            mem_->insert(mem_->end(), b, b + n);
        } else if (std::fwrite(p, 1, n, f_) != n) {
            ok_ = false;
        }
        pos_ += n;
    }
    template <class T>
    void pod(T x) {
        bytes(&x, sizeof(T));
    }
    void str(const std::string& s) {
        pod<uint64_t>(s.size());
        bytes(s.data(), s.size());
    }
    void pad_to(uint64_t align) {
        static const uint8_t zeros[256] = {};
        while (pos_ % align != 0) bytes(zeros, std::min<uint64_t>(align - pos_ % align, 256));
    }
    bool ok() const { return ok_; }

  private:
    std::FILE* f_;
    std::vector<uint8_t>* mem_;
    uint64_t pos_ = 0;
    bool ok_ = true;
};

Status write_value(Sink& s, const Value& v) {
    auto u = [&]() { return std::get<uint64_t>(v.v); };
    auto i = [&]() { return std::get<int64_t>(v.v); };
    switch (v.type) {
        case ValueType::UINT8:
            s.pod(static_cast<uint8_t>(u()));
            break;
        case ValueType::UINT16:
            s.pod(static_cast<uint16_t>(u()));
            break;
        case ValueType::UINT32:
            s.pod(static_cast<uint32_t>(u()));
            break;
        case ValueType::UINT64:
            s.pod(u());
            break;
        case ValueType::INT8:
            s.pod(static_cast<int8_t>(i()));
            break;
        case ValueType::INT16:
            s.pod(static_cast<int16_t>(i()));
            break;
        case ValueType::INT32:
            s.pod(static_cast<int32_t>(i()));
            break;
        case ValueType::INT64:
            s.pod(i());
            break;
        case ValueType::FLOAT32:
            s.pod(static_cast<float>(std::get<double>(v.v)));
            break;
        case ValueType::FLOAT64:
            s.pod(std::get<double>(v.v));
            break;
        case ValueType::BOOL:
            s.pod<uint8_t>(std::get<bool>(v.v) ? 1 : 0);
            break;
        case ValueType::STRING:
            s.str(std::get<std::string>(v.v));
            break;
        case ValueType::ARRAY: {
            const Array& a = std::get<Array>(v.v);
            s.pod(static_cast<uint32_t>(a.elem_type));
            s.pod<uint64_t>(a.items.size());
            for (const Value& item : a.items) {
                if (item.type != a.elem_type)
                    return make_error("array of {} holds a {}", value_type_name(a.elem_type),
                                      value_type_name(item.type));
                if (Status st = write_value(s, item); !st) return st;
            }
            break;
        }
        default:
            return make_error("unknown metadata value type {}", static_cast<uint32_t>(v.type));
    }
    return Status::Ok();
}

// A Value whose variant does not match its declared type would be written as garbage (or
// throw bad_variant_access), so it is rejected up front with the key's name.
bool holds_right_kind(const Value& v) {
    switch (v.type) {
        case ValueType::UINT8:
        case ValueType::UINT16:
        case ValueType::UINT32:
        case ValueType::UINT64:
            return std::holds_alternative<uint64_t>(v.v);
        case ValueType::INT8:
        case ValueType::INT16:
        case ValueType::INT32:
        case ValueType::INT64:
            return std::holds_alternative<int64_t>(v.v);
        case ValueType::FLOAT32:
        case ValueType::FLOAT64:
            return std::holds_alternative<double>(v.v);
        case ValueType::BOOL:
            return std::holds_alternative<bool>(v.v);
        case ValueType::STRING:
            return std::holds_alternative<std::string>(v.v);
        case ValueType::ARRAY: {
            const Array* a = std::get_if<Array>(&v.v);
            if (!a) return false;
            for (const Value& item : a->items)
                if (!holds_right_kind(item)) return false;
            return true;
        }
    }
    return false;
}

Value scalar(ValueType t, decltype(Value::v) x) {
    Value v;
    v.type = t;
    v.v = std::move(x);
    return v;
}

}  // namespace

Value make_u8(uint8_t x) {
    return scalar(ValueType::UINT8, uint64_t{x});
}
Value make_i8(int8_t x) {
    return scalar(ValueType::INT8, int64_t{x});
}
Value make_u16(uint16_t x) {
    return scalar(ValueType::UINT16, uint64_t{x});
}
Value make_i16(int16_t x) {
    return scalar(ValueType::INT16, int64_t{x});
}
Value make_u32(uint32_t x) {
    return scalar(ValueType::UINT32, uint64_t{x});
}
Value make_i32(int32_t x) {
    return scalar(ValueType::INT32, int64_t{x});
}
Value make_u64(uint64_t x) {
    return scalar(ValueType::UINT64, x);
}
Value make_i64(int64_t x) {
    return scalar(ValueType::INT64, x);
}
Value make_f32(float x) {
    return scalar(ValueType::FLOAT32, double{x});
}
Value make_f64(double x) {
    return scalar(ValueType::FLOAT64, x);
}
Value make_bool(bool x) {
    return scalar(ValueType::BOOL, x);
}
Value make_string(std::string s) {
    return scalar(ValueType::STRING, std::move(s));
}
Value make_array(ValueType elem_type, std::vector<Value> items) {
    return scalar(ValueType::ARRAY, Array{elem_type, std::move(items)});
}

void Writer::set(const std::string& key, Value v) {
    for (auto& [k, val] : kv_)
        if (k == key) {
            val = std::move(v);
            return;
        }
    kv_.emplace_back(key, std::move(v));
}

void Writer::remove(const std::string& key) {
    std::erase_if(kv_, [&](const auto& p) { return p.first == key; });
}

const Value* Writer::find(const std::string& key) const {
    for (const auto& [k, v] : kv_)
        if (k == key) return &v;
    return nullptr;
}

void Writer::copy_metadata(const File& f) {
    for (const auto& [k, v] : f.metadata()) set(k, v);
}

uint64_t Writer::alignment() const {
    if (const Value* v = find("general.alignment"))
        if (auto n = v->as_int(); n && *n > 0 && (*n & (*n - 1)) == 0)
            return static_cast<uint64_t>(*n);
    return kDefaultAlignment;
}

Status Writer::add_tensor(const std::string& name, std::vector<int64_t> shape, DType type,
                          Producer produce) {
    const DTypeInfo& info = dtype_info(type);
    if (shape.empty() || shape.size() > 4)
        return make_error("tensor '{}': {} dimensions (GGUF allows 1..4)", name, shape.size());
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d <= 0) return make_error("tensor '{}': dimension {} is not positive", name, d);
        n *= d;
    }
    if (shape[0] % info.block_size != 0)
        return make_error("tensor '{}': row of {} elements is not a multiple of {}'s block size {}",
                          name, shape[0], info.name, info.block_size);
    for (const auto& t : tensors_)
        if (t.name == name) return make_error("tensor '{}' added twice", name);
    const size_t n_bytes = row_bytes(info, shape[0]) * static_cast<size_t>(n / shape[0]);
    tensors_.push_back({name, std::move(shape), type, n_bytes, std::move(produce)});
    return Status::Ok();
}

Status Writer::add_tensor(const std::string& name, std::vector<int64_t> shape, DType type,
                          std::vector<uint8_t> data) {
    auto shared = std::make_shared<std::vector<uint8_t>>(std::move(data));
    return add_tensor(name, std::move(shape), type, [shared](std::vector<uint8_t>& out) {
        out = *shared;
        return Status::Ok();
    });
}

Status Writer::write_stream(std::FILE* f, std::vector<uint8_t>* mem,
                            const std::function<void(size_t)>& on_tensor) const {
    for (const auto& [k, v] : kv_)
        if (!holds_right_kind(v))
            return make_error("metadata key '{}': value does not match its type {}", k,
                              value_type_name(v.type));
    const uint64_t align = alignment();
    Sink s(f, mem);
    s.bytes("GGUF", 4);
    s.pod(kVersion);
    s.pod<uint64_t>(tensors_.size());
    s.pod<uint64_t>(kv_.size());
    for (const auto& [k, v] : kv_) {
        s.str(k);
        s.pod(static_cast<uint32_t>(v.type));
        if (Status st = write_value(s, v); !st)
            return make_error("metadata key '{}': {}", k, st.error().message);
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        s.str(t.name);
        s.pod<uint32_t>(static_cast<uint32_t>(t.shape.size()));
        for (int64_t d : t.shape) s.pod<uint64_t>(static_cast<uint64_t>(d));
        s.pod(static_cast<uint32_t>(t.type));
        s.pod<uint64_t>(offset);
        offset += (t.n_bytes + align - 1) / align * align;
    }
    s.pad_to(align);
    std::vector<uint8_t> buf;
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const auto& t = tensors_[i];
        buf.clear();
        if (Status st = t.produce(buf); !st)
            return make_error("tensor '{}': {}", t.name, st.error().message);
        if (buf.size() != t.n_bytes)
            return make_error("tensor '{}': produced {} bytes, {} expected", t.name, buf.size(),
                              t.n_bytes);
        s.bytes(buf.data(), buf.size());
        s.pad_to(align);
        if (!s.ok()) return make_error("write failed: {}", std::strerror(errno));
        if (on_tensor) on_tensor(i);
    }
    if (!s.ok()) return make_error("write failed: {}", std::strerror(errno));
    return Status::Ok();
}

Status check_output_path(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (fs::is_directory(st)) return make_error("{}: is a directory; give a file's path", path);
    if (fs::exists(st) && !fs::is_regular_file(st))
        return make_error("{}: exists and is not a regular file (a device, FIFO or socket)", path);
    const fs::path dir = fs::path(path).parent_path();
    if (!dir.empty() && !fs::is_directory(dir, ec))
        return make_error("{}: the directory {} does not exist", path, dir.string());
    return Status::Ok();
}

Status Writer::write(const std::string& path, const std::function<void(size_t)>& on_tensor) const {
    if (Status st = check_output_path(path); !st) return st;
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) return make_error("{}: cannot create: {}", tmp, std::strerror(errno));
    Status st = write_stream(f, nullptr, on_tensor);
    if (std::fclose(f) != 0 && st)
        st = make_error("{}: close failed: {}", tmp, std::strerror(errno));
    std::error_code ec;
    if (!st) {
        std::filesystem::remove(tmp, ec);
        return make_error("{}: {}", path, st.error().message);
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::error_code ignored;
        std::filesystem::remove(tmp, ignored);  // a model-sized file nobody asked for
        return make_error("{}: cannot rename from {}: {}", path, tmp, ec.message());
    }
    return Status::Ok();
}

Expected<std::vector<uint8_t>> Writer::write_to_memory() const {
    std::vector<uint8_t> out;
    if (Status st = write_stream(nullptr, &out, nullptr); !st) return st.error();
    return out;
}

}  // namespace ferry::gguf
