// How the ranks of a parallel group talk: the collectives a sharded forward pass needs (tensor
// parallelism: a sum over ranks after each block whose matrices are split by input, the output
// head's logits gathered to rank 0), the hidden states a pipeline stage hands the next, and the
// one message rank 0 sends every step (what to run). One
// interface, implemented over MPI between processes today (comm/mpi_communicator.h) and over
// NCCL for GPU ranks next, so another transport is one more implementation.
//
// Every collective is called by every rank in the same order. None waits forever for a rank
// mid-step: past the group's timeout the communicator fails (a rank died or hangs), throws
// CommError, and every later call throws at once, so the engine fails what is in flight and
// refuses new work instead of hanging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry::comm {

class CommError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// What one rank has exchanged since the group began, by kind: calls, its own payload bytes (the
// floats it contributed or sent, the step messages it broadcast or took) and the seconds spent
// in them, waits for slower ranks included. For the benchmarks, which report a decode step's
// time in communication and its volume.
struct CommStats {
    struct Kind {
        int64_t calls = 0;
        int64_t bytes = 0;
        double seconds = 0;
        Kind& operator+=(const Kind& o) {
            calls += o.calls;
            bytes += o.bytes;
            seconds += o.seconds;
            return *this;
        }
        Kind operator-(const Kind& o) const {
            return {calls - o.calls, bytes - o.bytes, seconds - o.seconds};
        }
    };
    Kind sums;     // all_reduce_sum
    Kind gathers;  // gather
    Kind stages;   // send, recv, post_send and wait_sends
    Kind steps;    // broadcast
    double seconds() const {
        return sums.seconds + gathers.seconds + stages.seconds + steps.seconds;
    }
    // Kind by kind: the totals of two groups, or what a stretch of work added (later - earlier).
    CommStats& operator+=(const CommStats& o) {
        sums += o.sums;
        gathers += o.gathers;
        stages += o.stages;
        steps += o.steps;
        return *this;
    }
    CommStats operator-(const CommStats& o) const {
        return {sums - o.sums, gathers - o.gathers, stages - o.stages, steps - o.steps};
    }
};

class Communicator {
  public:
    virtual ~Communicator() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;

    // data = the sum of every rank's data, on every rank.
    virtual void all_reduce_sum(std::span<float> data) = 0;
    // Rank r's `mine` (counts[r] floats) into rank 0's `all`, in rank order; `all` is ignored
    // on the other ranks.
    virtual void gather(std::span<const float> mine, std::span<float> all,
                        std::span<const int> counts) = 0;
    // Point to point, between neighbouring pipeline stages: `data` to rank `to`, and from rank
    // `from` into `data` (exactly data.size() floats). A receive between steps is not an idle
    // wait: the sender is mid-step too.
    virtual void send(std::span<const float> data, int to) = 0;
    virtual void recv(std::span<float> data, int from) = 0;
    // A send only posted: it completes by the next wait_sends(), and `data` must stay as it is
    // until then (a last stage's logits, so that it can take the next micro-batch at once).
    virtual void post_send(std::span<const float> data, int to) = 0;
    virtual void wait_sends() = 0;
    // Rank 0 sends `message`; the others receive it into `message`. A receiver waiting between
    // steps waits as long as rank 0 is idle (`idle_ok`; once rank 0 keeps sending while idle, a
    // receiver asks for no more), a rank mid-step no longer than the timeout. An empty message
    // from rank 0 means the group is over.
    virtual void broadcast(std::vector<std::byte>& message, bool idle_ok) = 0;

    // Counted by the implementation over MPI; a test's in-process group counts nothing.
    virtual CommStats stats() const { return {}; }

    // Why the group failed, once it has; every collective throws after that. Safe to ask from
    // any thread.
    virtual std::optional<std::string> failure() const = 0;
    // Rank 0, leaving: the other ranks are told the group is over (an empty message) unless the
    // group already failed. Called once, at exit; later collectives throw.
    virtual void finish() = 0;
};

}  // namespace ferry::comm
