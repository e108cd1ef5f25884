// A safetensors file (Hugging Face's weight format): an 8-byte little-endian header length, a
// JSON header naming every tensor's dtype, shape and byte range, then the data. Memory-mapped
// and validated on open as strictly as the reference implementation: the header must be a JSON
// object of well-formed entries, every range must hold exactly its shape's bytes, and the
// ranges must tile the data without gaps or overlaps. Tensor data stays in the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace ferry::hf {

struct SafeTensor {
    std::string name;
    std::string dtype;           // as the file spells it: "BF16", "F32", "F8_E4M3", ...
    DType type = DType::F32;     // ferry's id where it has one (see `known`)
    bool known = false;          // F32, F16, BF16, F64, I8, I16, I32, I64
    std::vector<int64_t> shape;  // outermost first (row-major), as PyTorch has it
    int64_t n_elements = 0;
    size_t n_bytes = 0;
    const uint8_t* data = nullptr;  // in the mapping
};

class SafetensorsFile {
  public:
    static Expected<std::shared_ptr<SafetensorsFile>> open(const std::string& path);
    // From memory the caller keeps alive (tests, the fuzz harness).
    static Expected<std::shared_ptr<SafetensorsFile>> parse(std::span<const uint8_t> bytes,
                                                            std::string name = "<memory>");

    const std::string& path() const { return path_; }
    const std::vector<SafeTensor>& tensors() const { return tensors_; }  // in file order
    const SafeTensor* tensor(std::string_view name) const;
    // The header's "__metadata__" (string to string), if any.
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // As gguf::File::release: the pages of [p, p + n) leave the resident set.
    void release(const void* p, size_t n) const;

  private:
    SafetensorsFile() = default;
    Status parse_all();

    std::string path_;
    std::span<const uint8_t> bytes_;
    std::unique_ptr<MappedFile> map_;
    std::vector<SafeTensor> tensors_;
    std::map<std::string, size_t, std::less<>> index_;
    std::map<std::string, std::string> metadata_;
};

// Bytes of one element of a safetensors dtype; 0 for a name the format does not define.
size_t safetensors_elem_bytes(std::string_view dtype);

}  // namespace ferry::hf
