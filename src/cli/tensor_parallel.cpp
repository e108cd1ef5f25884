#include "cli/tensor_parallel.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "comm/mpi_communicator.h"
#include "engine/model_runner.h"

namespace ferry::cli {
namespace {

// This process's command line, as the kernel keeps it.
std::vector<std::string> own_arguments() {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> args;
    std::string cur;
    for (char ch : all) {
        if (ch) {
            cur += ch;
            continue;
        }
        args.push_back(cur);
        cur.clear();
    }
    return args;
}

// Runs the same command line again as an MPI job of n ranks, in place of this process.
[[noreturn]] void relaunch_under_mpirun(int n) {
    std::vector<std::string> args = own_arguments();
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (args.empty() || len <= 0) throw ExitError("--tp: cannot read this process's command line");
    exe[len] = '\0';
    // One rank per process on this machine: more ranks than cores is allowed (a test on two
    // cores runs three), and no rank is pinned, since each runs its own thread pool.
    std::vector<std::string> cmd = {"mpirun",          "-np",       std::to_string(n),
                                    "--oversubscribe", "--bind-to", "none"};
    if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
    cmd.push_back(exe);
    cmd.insert(cmd.end(), args.begin() + 1, args.end());
    std::vector<char*> argv;
    for (auto& a : cmd) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(nullptr);
    execvp("mpirun", argv.data());
    throw ExitError(
        std::to_string(n) +
        " ranks: could not start mpirun (install Debian's openmpi-bin, or start ferry under "
        "mpirun -np " +
        std::to_string(n) + " yourself)");
}

}  // namespace

void TensorParallelOptions::add_to(CLI::App& cmd) {
    cmd.add_option("--tp", tp,
                   "tensor parallelism: split the model over N processes (MPI ranks; started "
                   "with mpirun when not already in an MPI job)")
        ->check(CLI::Range(1, 256))
        ->capture_default_str();
    cmd.add_option("--pp", pp,
                   "pipeline parallelism: split the model's layers over N processes (MPI ranks), "
                   "each step's sequences in micro-batches through the stages")
        ->check(CLI::Range(1, 256))
        ->capture_default_str();
    cmd.add_option("--tp-timeout", timeout_s,
                   "seconds a rank of a --tp / --pp group waits for the others mid-step before the "
                   "group is declared "
                   "failed (a rank died or hangs)")
        ->check(CLI::Range(0.1, 86400.0))
        ->capture_default_str();
}

std::shared_ptr<comm::Communicator> TensorParallelOptions::join() const {
    if (tp > 1 && pp > 1)
        throw ExitError("--tp and --pp together are not supported yet; use one of them");
    const int n = ranks();
    if (n <= 1) return nullptr;
    const std::string asked = (tp > 1 ? "--tp " : "--pp ") + std::to_string(n);
    if (!comm::mpi_built_in()) take(comm::mpi_world(n, timeout_s, asked));  // says what is missing
    if (!comm::launched_by_mpi()) relaunch_under_mpirun(n);
    return take(comm::mpi_world(n, timeout_s, asked));
}

void follow_if_not_rank0(const engine::LoadedModel& lm) {
    comm::Communicator* group = lm.model->comm();
    if (!group || group->rank() == 0) return;
    // Rank 0 says when the group ends: mpirun hands Ctrl-C and SIGTERM to every rank, and rank
    // 0 stops the others once it has finished its own work (or mpirun does, if rank 0 dies).
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    const Status s = engine::ModelRunner::follow_steps(*lm.model, lm.backend);
    if (!s) {
        std::fprintf(stderr, "ferry: rank %d: %s\n", group->rank(), s.error().message.c_str());
        std::exit(1);
    }
    std::exit(0);
}

}  // namespace ferry::cli
