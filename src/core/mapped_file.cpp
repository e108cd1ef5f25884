#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry {

Expected<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer that never comes, before
    // fstat could say it is not a regular file. A regular file ignores the flag.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return make_error("{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        return make_error("{}: cannot stat: {}", path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return make_error("{}: not a regular file", path);
    }
    if (st.st_size == 0) {
        ::close(fd);
        return make_error("{}: the file is empty", path);
    }
    const auto len = static_cast<size_t>(st.st_size);
    void* map = mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (map == MAP_FAILED) return make_error("{}: cannot mmap: {}", path, std::strerror(err));
    std::unique_ptr<MappedFile> f(new MappedFile());
    f->path_ = path;
    f->map_ = map;
    f->len_ = len;
    return f;
}

MappedFile::~MappedFile() {
    if (map_) munmap(map_, len_);
}

void MappedFile::release(const void* p, size_t n) const {
    if (!map_ || n == 0) return;
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + n;
    const auto base = reinterpret_cast<uintptr_t>(map_);
    if (lo < base || hi > base + len_) return;
    const uintptr_t first = (lo + page - 1) / page * page, last = hi / page * page;
    if (first < last) (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace ferry
