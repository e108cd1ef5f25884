// Writes GGUF v3 files: metadata of every value type, tensor infos, aligned tensor data.
// Tensor data is produced on demand while the file is written, so quantizing a model holds
// one tensor in memory at a time rather than the whole output.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "gguf/gguf_file.h"

namespace ferry::gguf {

// Builders for metadata values, so call sites name the exact GGUF type they write.
Value make_u8(uint8_t x);
Value make_i8(int8_t x);
Value make_u16(uint16_t x);
Value make_i16(int16_t x);
Value make_u32(uint32_t x);
Value make_i32(int32_t x);
Value make_u64(uint64_t x);
Value make_i64(int64_t x);
Value make_f32(float x);
Value make_f64(double x);
Value make_bool(bool x);
Value make_string(std::string s);
Value make_array(ValueType elem_type, std::vector<Value> items);

// Whether `path` can take a written file: it must not be something other than a regular file
// (a device, a directory, a FIFO), which the write's final rename would replace (run as root,
// `synth ... /dev/full` replaced the device node), and its directory must exist.
Status check_output_path(const std::string& path);

class Writer {
  public:
    // Fills `out` with exactly the tensor's byte size; called once, in tensor order.
    using Producer = std::function<Status(std::vector<uint8_t>& out)>;

    // Sets a key, replacing an existing one in place (so key order survives a rewrite).
    void set(const std::string& key, Value v);
    void remove(const std::string& key);
    const Value* find(const std::string& key) const;
    // Copies every key of a file (general.alignment included).
    void copy_metadata(const File& f);

    // shape in GGUF order (shape[0] is the row). Fails if shape[0] is not a multiple of the
    // type's block size or the name is taken.
    Status add_tensor(const std::string& name, std::vector<int64_t> shape, DType type,
                      Producer produce);
    Status add_tensor(const std::string& name, std::vector<int64_t> shape, DType type,
                      std::vector<uint8_t> data);

    size_t n_tensors() const { return tensors_.size(); }
    // The alignment from general.alignment when set, else GGUF's default of 32.
    uint64_t alignment() const;

    // Writes to path.tmp and renames, so a failed run never leaves a truncated file behind;
    // check_output_path first.
    // on_tensor(i) is called after tensor i is written (progress reporting).
    Status write(const std::string& path,
                 const std::function<void(size_t)>& on_tensor = nullptr) const;
    // The whole file in memory (tests).
    Expected<std::vector<uint8_t>> write_to_memory() const;

  private:
    struct Pending {
        std::string name;
        std::vector<int64_t> shape;
        DType type;
        size_t n_bytes;
        Producer produce;
    };
    Status write_stream(std::FILE* f, std::vector<uint8_t>* mem,
                        const std::function<void(size_t)>& on_tensor) const;

    std::vector<std::pair<std::string, Value>> kv_;
    std::vector<Pending> tensors_;
};

}  // namespace ferry::gguf
