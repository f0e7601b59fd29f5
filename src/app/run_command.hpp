// `evalrun run CONFIG`: the whole data flow of one run on every MPI rank.
#pragma once

#include "config/run_spec.hpp"
#include "device/placement.hpp"
#include "dist/mpi_world.hpp"

namespace evalrun {

// Returns the process exit status (0 ok). Errors on any rank stop all ranks (MpiWorld::collective_step).
// resume: continue an interrupted run from its journal (resume/run_journal.hpp).
int run_command(const MpiWorld& world, const RunSpec& spec, bool resume = false);

// Threads per rank: run.threads, else Slurm's --cpus-per-task, else the node's cores shared among its
// ranks; never more than the cores this rank may run on.
int choose_threads(const RunSpec& spec, const MpiWorld& world);
// This rank's place among the ranks and on its node (the launcher's local rank when it says one).
device::RankPlace rank_place(const MpiWorld& world);

}  // namespace evalrun
