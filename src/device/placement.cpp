#include "device/placement.hpp"

#include <cstdlib>

#include "common/errors.hpp"

namespace evalrun::device {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

int resolve_local_rank(const EnvLookup& env, int mpi_local_rank) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const auto v = env(name);
    if (!v) continue;
    char* end = nullptr;
    const long n = std::strtol(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || n < 0 || n > 1 << 20) {
      throw InputError(name, "'" + *v + "' is not a local rank (a non-negative integer)");
    }
    return static_cast<int>(n);
  }
  return mpi_local_rank;
}

int cuda_device_index(int local_rank, int local_size, int device_count) {
  if (device_count <= 0) {
    throw InputError("model.device", "\"cuda\": no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES, driver)");
  }
  if (device_count >= local_size) {
    if (local_rank >= device_count) {
      throw InputError("model.device", "\"cuda\": local rank " + std::to_string(local_rank) + " but only " +
                                           std::to_string(device_count) + " CUDA device(s) on this node");
    }
    return local_rank;
  }
  if (device_count == 1) return 0;  // one GPU per rank, chosen by the launcher
  throw InputError("model.device", "\"cuda\": " + std::to_string(local_size) + " ranks on this node but " +
                                       std::to_string(device_count) +
                                       " CUDA devices: run at most one rank per GPU (or give each rank one GPU "
                                       "through CUDA_VISIBLE_DEVICES)");
}

}  // namespace evalrun::device
