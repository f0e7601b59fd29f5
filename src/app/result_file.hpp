// The parts of a result file that every task shares: provenance attributes on the root group and the
// /samples index. The task-specific groups are written by run_command.cpp; README.md documents the
// whole schema.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_spec.hpp"
#include "io/hdf5_file.hpp"

namespace evalrun {

inline constexpr const char* kResultFormatVersion = "1";

struct Provenance {
  std::string model_sha256;
  std::string tokenizer_sha256;
  std::string architecture;
  std::string compute_dtype;  // what the arithmetic ran in (fp16 runs compute in float32 on CPU)
  std::string quantization = "none";  // how the linear layers are stored (model quantization())
  std::string device;         // what rank 0 ran on ("cpu", "cuda:0", "aiu"); "" = model.device
  std::string device_detail;  // rank 0's device backend: name, plugin and card, work done
  int world_size = 1;
  std::size_t weight_bytes = 0;  // weights rank 0 holds (its part of the model with tensor parallelism)
  std::size_t peak_rss_bytes = 0;  // rank 0's peak resident set after its shard ran (VmHWM)
  std::size_t peak_rss_bytes_max = 0;  // the largest of every rank's, each after its shard ran
  int threads_per_rank = 1;
  std::string start_time;  // ISO 8601 UTC
  std::string end_time;
};

// Root attributes. Rank 0's peak resident set is read again here: by then it holds every gathered record.
void write_provenance(H5Writer& out, const RunSpec& spec, const Provenance& provenance);
// This process's peak resident set (VmHWM), 0 where /proc is not there.
std::size_t peak_rss_bytes();
void write_sample_index(H5Writer& out, const std::vector<std::string>& ids);
std::string utc_now_iso8601();

}  // namespace evalrun
