// A CUDA step's launches, recorded before any of them runs (issue 18's CUDA graphs). Each op of the
// backend records a launch: a function and its arguments as plain bytes (device pointers, sizes,
// scalars, offsets into the queue's staged host data). The queue runs when the backend must (a
// result is read on the host, memory changes hands), eagerly or as a CUDA graph. A launch is its
// function and its bytes and nothing else, so two queues with the same signature launch the same
// work; only the staged bytes (tokens, positions, block tables) differ, and those reach the device
// through one copy at the queue's start that a graph replays from the same pinned buffer. That is
// what lets a graph captured from one decode step run the next.
// Plain C++ without a CUDA type, so the host tests hold it to that on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace ferry::kernels::cuda {

// What a recorded launch runs against: the stream, and the device copy of the staged bytes.
struct LaunchEnv {
    void* stream = nullptr;  // a cudaStream_t
    std::byte* args = nullptr;
    template <class T>
    T* at(uint64_t offset) const {
        return reinterpret_cast<T*>(args + offset);
    }
};

class LaunchQueue {
  public:
    // Staged arrays are padded to a size class (64 bytes up to 256, then powers of two), so a block
    // table that grows by a block keeps its place and the next step's signature.
    static size_t size_class(size_t bytes);

    // Records a launch of fn and returns its arguments to fill now (before the next record):
    // zeroed first, padding included, so equal values give equal bytes.
    template <class A>
    A& record(void (*fn)(const A&, const LaunchEnv&)) {
        static_assert(std::is_trivially_copyable_v<A> && alignof(A) <= kAlign);
        const size_t at = reserve_args(sizeof(A));
        entries_.push_back({&thunk<A>, reinterpret_cast<void (*)()>(fn), at, sizeof(A)});
        return *new (args_.data() + at) A();
    }

    // n host elements copied into the staged bytes; their offset in the device copy.
    template <class T>
    uint64_t stage(const T* host, size_t n) {
        static_assert(std::is_trivially_copyable_v<T>);
        const uint64_t off = reserve(n * sizeof(T));
        if (n) std::memcpy(staged_.data() + off, host, n * sizeof(T));
        return off;
    }
    // Zeroed staged room (an array a kernel accumulates into); its offset.
    uint64_t reserve(size_t bytes);
    std::span<const std::byte> staged() const { return staged_; }
    std::span<std::byte> staged_mut() { return staged_; }

    // Keeps the tensors' memory alive until the queue is cleared (it ran): a tensor dropped
    // between its op's record and the run must not be freed under the launch.
    template <class... Ts>
    void keep(const Ts&... ts) {
        (kept_.push_back(ts), ...);
    }

    // Every launch's function and bytes, then the staged size: equal signatures, equal work.
    // Appended to `out`, so a caller can reuse one buffer step after step.
    void append_signature(std::string& out) const;
    std::string signature() const {
        std::string s;
        append_signature(s);
        return s;
    }
    void run(const LaunchEnv& env) const;
    bool empty() const { return entries_.empty(); }
    size_t launches() const { return entries_.size(); }
    void clear();

  private:
    static constexpr size_t kAlign = 16;
    struct Entry {
        void (*thunk)(void (*)(), const std::byte*, const LaunchEnv&);
        void (*fn)();
        size_t at, size;
    };
    template <class A>
    static void thunk(void (*fn)(), const std::byte* args, const LaunchEnv& env) {
        reinterpret_cast<void (*)(const A&, const LaunchEnv&)>(fn)(
            *std::launder(reinterpret_cast<const A*>(args)), env);
    }
    size_t reserve_args(size_t bytes);

    std::vector<Entry> entries_;
    std::vector<std::byte> args_;  // operator new's alignment (16) at least
    std::vector<std::byte> staged_;
    std::vector<Tensor> kept_;
};

}  // namespace ferry::kernels::cuda
