// One process-wide spdlog logger tagged with the MPI rank: "[evalrun r0/4] message".
// info goes out on rank 0 only; warnings and errors from every rank.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace evalrun {

void init_logging(int rank, int world_size, bool verbose = false);
spdlog::logger& log();

// Version strings compiled in by CMake.
const char* version();
const char* git_revision();

}  // namespace evalrun
