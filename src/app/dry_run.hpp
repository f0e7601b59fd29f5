// `evalrun CONFIG --dry-run`: validates the config and prints what every rank would do (layout,
// threads, device, the AIU environment and plugin) without reading the data set or loading the model.
#pragma once

#include "config/run_spec.hpp"
#include "dist/mpi_world.hpp"

namespace evalrun {

// Every rank resolves its own plan; rank 0 prints them all. Returns 0 when the run could start, 2 when
// the plan has problems (each printed, naming its key or environment variable).
int dry_run_command(const MpiWorld& world, const RunSpec& spec);

}  // namespace evalrun
