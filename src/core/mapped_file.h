// A file mapped read-only into memory: model files (GGUF, safetensors) are read where they lie,
// and the pages of data that a resident copy serves instead can be handed back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"

namespace ferry {

class MappedFile {
  public:
    // Fails with the path and the reason (missing, a directory, empty, cannot be mapped).
    static Expected<std::unique_ptr<MappedFile>> open(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::string& path() const { return path_; }
    std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(map_), len_}; }
    // Says the mapped bytes [p, p + n) are not needed for now: the whole pages inside leave the
    // resident set and are read back from the file if touched again, so the data stays valid.
    // Bytes outside the mapping are ignored.
    void release(const void* p, size_t n) const;

  private:
    MappedFile() = default;
    std::string path_;
    void* map_ = nullptr;
    size_t len_ = 0;
};

}  // namespace ferry
