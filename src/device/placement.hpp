// Where one MPI rank runs: its place among the ranks, the rank on its node, and the CUDA device that
// follows from it. Plain functions over an environment lookup so they can be tested without a launcher.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace evalrun::device {

struct RankPlace {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among the ranks on this node
  int local_size = 1;  // ranks on this node
};

// Reads one environment variable (nullopt when unset).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// The rank's index on its node, as the launcher numbered it: OMPI_COMM_WORLD_LOCAL_RANK (mpirun),
// else SLURM_LOCALID (srun), else `mpi_local_rank` (its rank in MPI's shared-memory split of the
// world). A set but malformed variable is an InputError naming it.
int resolve_local_rank(const EnvLookup& env, int mpi_local_rank);

// The CUDA device a rank uses: cuda:<local rank> when the node shows at least one device per local
// rank; device 0 when each rank sees exactly one (the launcher gave every rank its own GPU through
// CUDA_VISIBLE_DEVICES); otherwise an InputError naming model.device (more ranks than devices, or none).
int cuda_device_index(int local_rank, int local_size, int device_count);

}  // namespace evalrun::device
