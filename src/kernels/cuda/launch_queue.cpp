#include "kernels/cuda/launch_queue.h"

#include <bit>

namespace ferry::kernels::cuda {

size_t LaunchQueue::size_class(size_t bytes) {
    if (bytes <= 256) return (bytes + 63) / 64 * 64;
    return std::bit_ceil(bytes);
}

uint64_t LaunchQueue::reserve(size_t bytes) {
    const size_t at = staged_.size();
    // Zeroed: the padding is copied to the device too, and a signature's staged size must not
    // depend on what an earlier step left there.
    staged_.resize(at + size_class(bytes), std::byte{0});
    return at;
}

size_t LaunchQueue::reserve_args(size_t bytes) {
    const size_t at = args_.size();
    args_.resize(at + (bytes + kAlign - 1) / kAlign * kAlign, std::byte{0});
    return at;
}

void LaunchQueue::append_signature(std::string& s) const {
    s.reserve(s.size() + args_.size() + entries_.size() * sizeof(void (*)()) + sizeof(size_t));
    for (const Entry& e : entries_) {
        s.append(reinterpret_cast<const char*>(&e.fn), sizeof e.fn);
        s.append(reinterpret_cast<const char*>(args_.data() + e.at), e.size);
    }
    const size_t staged = staged_.size();
    s.append(reinterpret_cast<const char*>(&staged), sizeof staged);
}

void LaunchQueue::run(const LaunchEnv& env) const {
    for (const Entry& e : entries_) e.thunk(e.fn, args_.data() + e.at, env);
}

void LaunchQueue::clear() {
    entries_.clear();
    args_.clear();
    staged_.clear();
    kept_.clear();
}

}  // namespace ferry::kernels::cuda
