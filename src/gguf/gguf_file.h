// A GGUF file (v2 and v3), memory-mapped and validated on open. Metadata values are parsed
// into owned values; tensor data stays in the mapping and is handed out as spans.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace ferry::gguf {

enum class ValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

std::string_view value_type_name(ValueType t);

struct Value;
struct Array {
    ValueType elem_type = ValueType::UINT8;
    std::vector<Value> items;
};

// Integers of every width are widened (signed into int64_t, unsigned into uint64_t); the
// original type is kept in `type` so a writer can reproduce the file exactly.
struct Value {
    ValueType type = ValueType::UINT8;
    std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;

    bool is_integer() const;
    bool is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }
    // Numeric accessors convert between integer and float kinds; nullopt if not numeric or
    // out of range for the target.
    std::optional<int64_t> as_int() const;
    std::optional<double> as_float() const;
    const std::string* as_string() const { return std::get_if<std::string>(&v); }
    const Array* as_array() const { return std::get_if<Array>(&v); }
    std::optional<bool> as_bool() const;
};

struct TensorInfo {
    std::string name;
    std::vector<int64_t> shape;  // GGUF order: shape[0] is the contiguous (row) dimension
    DType type = DType::F32;
    uint64_t offset = 0;  // relative to the start of the data section
    int64_t n_elements = 0;
    size_t n_bytes = 0;
    const uint8_t* data = nullptr;  // points into the mapping
};

// Whether `path` is a regular file that begins with GGUF's magic (a model given by a name
// without the .gguf extension is still recognised by its bytes).
bool has_gguf_magic(const std::string& path);

class File {
  public:
    // Opens, maps and validates. The error message names the file and the problem
    // (bad magic, unsupported version, truncated, offset out of range, unknown type, ...).
    static Expected<std::shared_ptr<File>> open(const std::string& path);
    // Parse from memory the caller keeps alive (used by tests and the fuzz harness).
    static Expected<std::shared_ptr<File>> parse(std::span<const uint8_t> bytes,
                                                 std::string name = "<memory>");
    ~File();
    File(const File&) = delete;
    File& operator=(const File&) = delete;

    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    const std::string& path() const { return path_; }
    size_t file_size() const { return bytes_.size(); }
    size_t data_offset() const { return data_offset_; }
    // The whole file (mapping or caller's bytes); tensor data lies at data_offset() onwards.
    std::span<const uint8_t> bytes() const { return bytes_; }

    const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
    const Value* find(std::string_view key) const;
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;
    std::optional<std::string> get_string(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    const Array* get_array(std::string_view key) const;

    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* tensor(std::string_view name) const;

    // Says the mapped bytes [p, p + n) are not needed for now (a copy in another layout serves
    // the hot path): the whole pages inside leave the resident set and are read back from the
    // file if touched again, so the data stays valid. No-op for a File parsed from memory.
    void release(const void* p, size_t n) const;

  private:
    File() = default;
    Status parse_all();
    Status validate_tensor_ranges();  // bounds and overlap, once the data offset is known

    std::string path_;
    std::span<const uint8_t> bytes_;
    std::unique_ptr<MappedFile> map_;  // null for a File parsed from memory
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    size_t data_offset_ = 0;
    std::vector<std::pair<std::string, Value>> kv_;
    std::map<std::string, size_t, std::less<>> kv_index_;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace ferry::gguf
