// --tp N and / or --pp M for the commands that run a model: the group of N x M processes (MPI
// ranks) the model is split over, within its layers (tensor parallelism), by layers (a
// pipeline), or both (M stages of N ranks each). Rank 0
// runs the command as usual (the server, the scheduler, the sampler); the others load their share
// of the weights and run each forward pass rank 0 sends them.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "comm/communicator.h"
#include "engine/loaded_model.h"

namespace ferry::cli {

struct TensorParallelOptions {
    int tp = 1;
    int pp = 1;
    double timeout_s = 60;

    void add_to(CLI::App& cmd);
    // The groups, or none for --tp 1 --pp 1. A command started outside an MPI job starts its
    // group itself: it runs again as `mpirun -np N` of the same command line, in place of this
    // process (so `ferry serve --tp 2` is all it takes). Exits with a message on failure,
    // before starting any rank where the model at `model_path` (if given) cannot be split so.
    model::ParallelGroups join(const std::string& model_path = {}) const;
    int ranks() const { return tp * pp; }
};

// Rank 0 of a group ferry started itself: leaves its exit status `rc` where the process that
// started mpirun reads it (mpirun's own is 0 in the recovery mode it runs in). Returns rc.
int report_group_status(int rc);

// On a rank other than 0: runs rank 0's forward passes on `lm` until rank 0 ends the group,
// then ends the process (0, or 1 with the group's error). On rank 0 or with no group, returns.
void follow_if_not_rank0(const engine::LoadedModel& lm);

}  // namespace ferry::cli
