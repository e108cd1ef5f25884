#include "comm/mpi_communicator.h"

#include <cstdlib>

#ifdef FERRY_HAVE_MPI
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#endif

namespace ferry::comm {

bool mpi_built_in() {
#ifdef FERRY_HAVE_MPI
    return true;
#else
    return false;
#endif
}

bool launched_by_mpi() {
    // Open MPI's launcher sets the first, MPICH's Hydra and Slurm's PMI the others.
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

#ifndef FERRY_HAVE_MPI

Expected<std::shared_ptr<Communicator>> mpi_split(Communicator&, int, int) {
    return make_error("this ferry was built without MPI");
}

Expected<std::shared_ptr<Communicator>> mpi_world(int, double, const std::string&) {
    return make_error(
        "tensor parallelism needs MPI, and this ferry was built without it (install Debian's "
        "libopenmpi-dev and openmpi-bin, then rebuild)");
}

#else

namespace {

using Clock = std::chrono::steady_clock;

// Why the job's group failed, shared by the world and the groups split from it: a rank that
// dies mid-sum in a tensor-parallel group fails the world's next step message too, and the
// server, which asks the world, sees it.
struct Failure {
    std::optional<std::string> message;  // written by the collectives' thread only
    std::atomic<bool> flag{false};
};

class MpiCommunicator final : public Communicator {
  public:
    MpiCommunicator(MPI_Comm comm, int rank, int size, double timeout_s,
                    std::shared_ptr<Failure> failure, bool world)
        : comm_(comm),
          rank_(rank),
          size_(size),
          timeout_(timeout_s),
          fail_(std::move(failure)),
          world_(world) {}

    double timeout() const { return timeout_; }
    MPI_Comm handle() const { return comm_; }
    const std::shared_ptr<Failure>& failure_state() const { return fail_; }

    int rank() const override { return rank_; }
    int size() const override { return size_; }

    // Every rank's partial sums gathered and added in rank order, rather than MPI_Allreduce:
    // the result is then the same bits on every rank and in every run whatever algorithm MPI
    // picks, so the ranks' copies of the residual stream never drift apart.
    void all_reduce_sum(std::span<float> data) override {
        check();
        const Counted counted(stats_.sums, data.size_bytes());
        const auto n = static_cast<int>(data.size());
        gathered_.resize(data.size() * static_cast<size_t>(size_));
        MPI_Request req;
        MPI_Iallgather(data.data(), n, MPI_FLOAT, gathered_.data(), n, MPI_FLOAT, comm_, &req);
        wait(req, false, "a sum over the ranks");
        for (size_t i = 0; i < data.size(); ++i) {
            float s = gathered_[i];
            for (int r = 1; r < size_; ++r)
                s += gathered_[static_cast<size_t>(r) * data.size() + i];
            data[i] = s;
        }
    }

    void gather(std::span<const float> mine, std::span<float> all,
                std::span<const int> counts) override {
        check();
        const Counted counted(stats_.gathers, mine.size_bytes());
        displs_.resize(static_cast<size_t>(size_));
        int at = 0;
        for (int r = 0; r < size_; ++r) {
            displs_[static_cast<size_t>(r)] = at;
            at += counts[static_cast<size_t>(r)];
        }
        MPI_Request req;
        MPI_Igatherv(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT,
                     rank_ == 0 ? all.data() : nullptr, counts.data(), displs_.data(), MPI_FLOAT, 0,
                     comm_, &req);
        wait(req, false, "gathering the logits");
    }

    void send(std::span<const float> data, int to) override {
        check();
        const Counted counted(stats_.stages, data.size_bytes());
        MPI_Request req;
        MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_FLOAT, to, kStageTag, comm_,
                  &req);
        wait(req, false, "the next pipeline stage to take its input");
    }

    void post_send(std::span<const float> data, int to) override {
        check();
        const Counted counted(stats_.stages, data.size_bytes());
        pending_.emplace_back();
        MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_FLOAT, to, kStageTag, comm_,
                  &pending_.back());
    }

    void wait_sends() override {
        const Counted counted(stats_.stages, 0, 0);
        for (MPI_Request& req : pending_) wait(req, false, "rank 0 to take the logits");
        pending_.clear();
    }

    void recv(std::span<float> data, int from) override {
        check();
        const Counted counted(stats_.stages, data.size_bytes());
        MPI_Request req;
        MPI_Irecv(data.data(), static_cast<int>(data.size()), MPI_FLOAT, from, kStageTag, comm_,
                  &req);
        wait(req, false, "the previous pipeline stage's output");
    }

    void broadcast(std::vector<std::byte>& message, bool idle_ok) override {
        check();
        // A worker's wait for the next step is idle time, not communication: only rank 0's
        // sends and the message bytes a worker takes once it has begun to arrive are counted.
        uint64_t n = rank_ == 0 ? message.size() : 0;
        MPI_Request req;
        MPI_Ibcast(&n, 1, MPI_UINT64_T, 0, comm_, &req);
        wait(req, idle_ok && rank_ != 0, "the next step from rank 0");
        if (rank_ != 0) message.resize(n);
        if (n == 0) return;
        const Counted counted(stats_.steps, n);
        MPI_Ibcast(message.data(), static_cast<int>(n), MPI_BYTE, 0, comm_, &req);
        wait(req, false, "a step's message");
    }

    CommStats stats() const override { return stats_; }

    // Read from any thread (the server asks while the engine thread runs the collectives): the
    // message is written once, before the flag.
    std::optional<std::string> failure() const override {
        if (!fail_->flag.load(std::memory_order_acquire)) return std::nullopt;
        return fail_->message;
    }

    void finish() override {
        if (finished_) return;
        if (!world_) {  // a split group: the world finishes the job
            finished_ = true;
            return;
        }
        if (fail_->message) {
            finished_ = true;
            // A collective is still pending on a rank that will not answer: MPI_Finalize would
            // wait for it, so the job ends here (mpirun stops the other ranks).
            MPI_Abort(MPI_COMM_WORLD, 1);
            return;
        }
        if (rank_ == 0) {
            std::vector<std::byte> stop;
            try {
                broadcast(stop, false);
            } catch (const CommError&) {
                finished_ = true;
                MPI_Abort(MPI_COMM_WORLD, 1);
                return;
            }
        }
        finished_ = true;
        MPI_Finalize();
    }

  private:
    static constexpr int kStageTag = 7;

    // Adds one call, its bytes and its time to a kind of stats_.
    class Counted {
      public:
        Counted(CommStats::Kind& k, size_t bytes, int calls = 1) : k_(k), t0_(Clock::now()) {
            k_.calls += calls;
            k_.bytes += static_cast<int64_t>(bytes);
        }
        ~Counted() { k_.seconds += std::chrono::duration<double>(Clock::now() - t0_).count(); }
        Counted(const Counted&) = delete;
        Counted& operator=(const Counted&) = delete;

      private:
        CommStats::Kind& k_;
        Clock::time_point t0_;
    };

    void check() const {
        if (fail_->message) throw CommError(*fail_->message);
        if (finished_) throw CommError("the tensor-parallel group has finished");
    }

    // Polls until `req` completes. Mid-step the other ranks are at most a layer behind, so a
    // wait past the timeout means one of them died or hangs; between steps a worker waits as
    // long as rank 0 has nothing to run, sleeping a little once it is clearly idle.
    void wait(MPI_Request& req, bool idle_ok, const char* what) {
        const auto t0 = Clock::now();
        for (;;) {
            int done = 0;
            if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                fail(fmt::format(
                    "parallel group: rank {} lost a rank during {} (it died); the group is stopped",
                    rank_, what));
            }
            if (done) return;
            const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
            if (!idle_ok && waited > timeout_) {
                fail(fmt::format(
                    "parallel group: rank {} waited {:.0f} s for {} (a rank died or hangs; "
                    "--tp-timeout sets the limit); the group is stopped",
                    rank_, waited, what));
            }
            if (waited > 0.05 && idle_ok)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            else if (waited > 0.002)
                std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }

    [[noreturn]] void fail(std::string message) {
        fail_->message = std::move(message);
        fail_->flag.store(true, std::memory_order_release);
        throw CommError(*fail_->message);
    }

    MPI_Comm comm_;
    int rank_, size_;
    double timeout_;
    std::shared_ptr<Failure> fail_;
    bool world_;
    bool finished_ = false;
    std::vector<float> gathered_;
    std::vector<int> displs_;
    std::vector<MPI_Request> pending_;
    CommStats stats_;
};

std::shared_ptr<Communicator>& world() {
    static std::shared_ptr<Communicator> w;
    return w;
}

}  // namespace

Expected<std::shared_ptr<Communicator>> mpi_world(int expected, double timeout_s,
                                                  const std::string& asked) {
    if (world()) {
        if (world()->size() != expected)
            return make_error("{}: the MPI job has {} ranks", asked, world()->size());
        return world();
    }
    int provided = 0;
    // The engine thread runs the collectives after the main thread set the group up: one
    // thread at a time, never two at once.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return make_error("MPI_Init_thread failed");
    if (provided < MPI_THREAD_SERIALIZED)
        return make_error(
            "this MPI cannot be called from more than one thread "
            "(MPI_THREAD_SERIALIZED)");
    // A failed operation (a peer that died) returns its error to the wait that polls it, which
    // stops the group with a message, instead of MPI aborting this process.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != expected) {
        MPI_Finalize();
        return make_error("{} but this MPI job has {} rank{} (mpirun -np {})", asked, size,
                          size == 1 ? "" : "s", expected);
    }
    world() = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, rank, size, timeout_s,
                                                std::make_shared<Failure>(), true);
    std::atexit([] {
        if (world()) world()->finish();
    });
    return world();
}

Expected<std::shared_ptr<Communicator>> mpi_split(Communicator& world, int color, int key) {
    auto* w = dynamic_cast<MpiCommunicator*>(&world);
    if (!w) return make_error("mpi_split: not an MPI communicator");
    MPI_Comm sub;
    if (MPI_Comm_split(w->handle(), color, key, &sub) != MPI_SUCCESS)
        return make_error("MPI_Comm_split failed");
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    MPI_Comm_rank(sub, &rank);
    MPI_Comm_size(sub, &size);
    return std::shared_ptr<Communicator>(std::make_shared<MpiCommunicator>(
        sub, rank, size, w->timeout(), w->failure_state(), false));
}

#endif

}  // namespace ferry::comm
