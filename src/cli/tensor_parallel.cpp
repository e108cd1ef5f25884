#include "cli/tensor_parallel.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "comm/mpi_communicator.h"
#include "engine/model_runner.h"
#include "gguf/gguf_file.h"
#include "hf/model_dir.h"
#include "model/llama_config.h"
#include "model/tensor_split.h"

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

constexpr const char* kStatusEnv = "FERRY_GROUP_STATUS";
pid_t mpirun_pid = 0;

// SIGTERM and SIGHUP reach this process alone (a supervisor's stop): mpirun passes them on to
// every rank. Ctrl-C reaches the terminal's whole process group, mpirun included, already.
void forward_to_mpirun(int sig) {
    if (mpirun_pid > 0) kill(mpirun_pid, sig);
}

// Runs the same command line again as an MPI job of n ranks, and exits with rank 0's status.
[[noreturn]] void relaunch_under_mpirun(int n) {
    std::vector<std::string> args = own_arguments();
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (args.empty() || len <= 0) throw ExitError("--tp: cannot read this process's command line");
    exe[len] = '\0';
    // A rank that dies must not take rank 0 (the server) with it: mpirun's recovery mode leaves
    // the others running, and rank 0 finds the dead rank as it finds a hung one (--tp-timeout).
    // In that mode mpirun's own status is 0 whatever the ranks did, so rank 0 writes its status
    // to a file this process waits to read (report_group_status).
    char status_path[] = "/tmp/ferry-group-XXXXXX";
    const int fd = mkstemp(status_path);
    if (fd < 0) throw ExitError("--tp: cannot create a temporary file in /tmp");
    close(fd);
    setenv(kStatusEnv, status_path, 1);
    // One rank per process on this machine: more ranks than cores is allowed (a test on two
    // cores runs three), and no rank is pinned, since each runs its own thread pool.
    std::vector<std::string> cmd = {"mpirun",    "-np",  std::to_string(n), "--oversubscribe",
                                    "--bind-to", "none", "--mca",           "orte_enable_recovery",
                                    "1",         "-x",   kStatusEnv};
    if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
    cmd.push_back(exe);
    cmd.insert(cmd.end(), args.begin() + 1, args.end());
    std::vector<char*> argv;
    for (auto& a : cmd) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child == 0) {
        execvp("mpirun", argv.data());
        _exit(127);
    }
    if (child < 0) throw ExitError("--tp: cannot start mpirun: fork failed");
    mpirun_pid = child;
    std::signal(SIGTERM, forward_to_mpirun);
    std::signal(SIGHUP, forward_to_mpirun);
    std::signal(SIGINT, SIG_IGN);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::ifstream in(status_path);
    if (int rank0 = 0; in >> rank0)
        rc = rank0;
    else if (rc == 0)
        rc = 1;  // rank 0 ended without a word (it was killed)
    unlink(status_path);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        std::fprintf(stderr,
                     "ferry: error: %d ranks: could not start mpirun (install Debian's "
                     "openmpi-bin, or start ferry under mpirun -np %d yourself)\n",
                     n, n);
    std::exit(rc);
}

// What every rank would refuse once mpirun had started them all (each printing it), said once
// from the model's metadata alone: no weights are read.
void check_split_fits(const std::string& path, int tp, int pp) {
    model::LlamaConfig c;
    if (hf::is_model_dir(path)) {
        const auto dir = take(hf::ModelDir::open(path));
        c = take(model::read_llama_config(dir->config(), path + "/config.json"));
    } else {
        c = take(model::read_llama_config(*take(gguf::File::open(path))));
    }
    if (Status s = model::check_pipeline(c, pp); !s) throw ExitError(s.error().message);
    // The type-dependent checks (block-aligned column cuts) wait for the loaded weights.
    if (tp > 1) take(model::plan_split(c, DType::F32, DType::F32, 0, tp));
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

model::ParallelGroups TensorParallelOptions::join(const std::string& model_path) const {
    const int n = ranks();
    if (n <= 1) return {};
    if (!model_path.empty() && !comm::launched_by_mpi()) check_split_fits(model_path, tp, pp);
    const std::string asked = tp > 1 && pp > 1 ? fmt::format("--tp {} --pp {}", tp, pp)
                              : tp > 1         ? fmt::format("--tp {}", tp)
                                               : fmt::format("--pp {}", pp);
    if (!comm::mpi_built_in()) take(comm::mpi_world(n, timeout_s, asked));  // says what is missing
    if (!comm::launched_by_mpi()) relaunch_under_mpirun(n);
    model::ParallelGroups g;
    g.world = take(comm::mpi_world(n, timeout_s, asked));
    if (tp > 1 && pp > 1) {
        // World rank = stage x tp + t: a stage's tp ranks are consecutive, and rank 0 is
        // stage 0's tensor-parallel root.
        const int stage = g.world->rank() / tp, t = g.world->rank() % tp;
        g.tp = take(comm::mpi_split(*g.world, stage, t));
        g.pp = take(comm::mpi_split(*g.world, t, stage));
    } else {
        (tp > 1 ? g.tp : g.pp) = g.world;
    }
    return g;
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

int report_group_status(int rc) {
    const char* path = std::getenv(kStatusEnv);
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (path && rank && std::string(rank) == "0")
        if (std::FILE* f = std::fopen(path, "w")) {
            std::fprintf(f, "%d\n", rc);
            std::fclose(f);
        }
    return rc;
}

}  // namespace ferry::cli
