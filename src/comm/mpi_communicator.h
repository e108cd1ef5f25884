// The Communicator over MPI (Open MPI from Debian: openmpi-bin, libopenmpi-dev): the ranks of
// MPI_COMM_WORLD, one process each, launched by mpirun. Every collective is MPI's non-blocking
// one, polled until it completes or the timeout passes, so a rank that hangs or dies makes the
// others fail with a message naming the wait instead of blocking in MPI forever.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/status.h"

namespace ferry::comm {

// Whether this ferry was built with MPI.
bool mpi_built_in();

// True when this process was started by mpirun (or another MPI launcher) as one rank of a job.
bool launched_by_mpi();

// Initialises MPI (once per process) and returns the world as a communicator of `expected`
// ranks, or an error that says what is missing: a ferry built without MPI, a job of another
// size. `timeout_s` bounds every wait mid-step.
// `asked` names what asked for that many ("--tp 2") in the error.
Expected<std::shared_ptr<Communicator>> mpi_world(int expected, double timeout_s,
                                                  const std::string& asked);

// The ranks of `world` (mpi_world's) of the same `color`, ordered by `key`: a tensor-parallel
// group within a pipeline stage, or the stages' peers. It shares the world's timeout and its
// failure (a failed split group fails the world's next call too); the world ends the job.
Expected<std::shared_ptr<Communicator>> mpi_split(Communicator& world, int color, int key);

}  // namespace ferry::comm
