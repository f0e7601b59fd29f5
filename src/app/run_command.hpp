// `evalrun run CONFIG`: the whole data flow of one run on every MPI rank.
#pragma once

#include "config/run_spec.hpp"
#include "dist/mpi_world.hpp"

namespace evalrun {

// Returns the process exit status (0 ok). Errors on any rank stop all ranks (MpiWorld::collective_step).
// resume: continue an interrupted run from its journal (resume/run_journal.hpp).
int run_command(const MpiWorld& world, const RunSpec& spec, bool resume = false);

}  // namespace evalrun
