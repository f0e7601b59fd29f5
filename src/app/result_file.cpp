#include "app/result_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <numeric>

#include "common/logging.hpp"

namespace evalrun {

std::string utc_now_iso8601() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_provenance(H5Writer& out, const RunSpec& spec, const Provenance& p) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  out.set_attr("/", "format_version", std::string(kResultFormatVersion));
  out.set_attr("/", "evalrun_version", std::string(version()));
  out.set_attr("/", "git_revision", std::string(git_revision()));
  out.set_attr("/", "config", spec.config_text);
  out.set_attr("/", "config_path", spec.config_path);
  out.set_attr("/", "run_name", spec.run.name);
  out.set_attr("/", "task", std::string(to_string(spec.task.kind)));
  out.set_attr("/", "dataset", spec.task.dataset);
  out.set_attr("/", "model_path", spec.model.path);
  out.set_attr("/", "model_architecture", p.architecture);
  out.set_attr("/", "model_sha256", p.model_sha256);
  out.set_attr("/", "tokenizer_sha256", p.tokenizer_sha256);
  out.set_attr("/", "dtype", std::string(to_string(spec.model.dtype)));
  out.set_attr("/", "compute_dtype", p.compute_dtype);
  out.set_attr("/", "quantization", p.quantization);
  out.set_attr("/", "device", p.device.empty() ? std::string(to_string(spec.model.device)) : p.device);
  out.set_attr("/", "device_detail", p.device_detail);
  out.set_attr("/", "world_size", static_cast<std::int64_t>(p.world_size));
  out.set_attr("/", "tensor_parallel", static_cast<std::int64_t>(spec.parallel.tensor_parallel));
  out.set_attr("/", "data_parallel", static_cast<std::int64_t>(p.world_size / spec.parallel.tensor_parallel));
  out.set_attr("/", "threads_per_rank", static_cast<std::int64_t>(p.threads_per_rank));
  out.set_attr("/", "weight_bytes_per_rank", static_cast<std::int64_t>(p.weight_bytes));
  const std::size_t rank0 = std::max(p.peak_rss_bytes, peak_rss_bytes());
  out.set_attr("/", "peak_rss_bytes_rank0", static_cast<std::int64_t>(rank0));
  out.set_attr("/", "peak_rss_bytes_max", static_cast<std::int64_t>(std::max(rank0, p.peak_rss_bytes_max)));
  out.set_attr("/", "batch_size", static_cast<std::int64_t>(spec.task.batch_size));
  out.set_attr("/", "logits", std::string(to_string(spec.output.logits)));
  out.set_attr("/", "hostname", std::string(host));
  out.set_attr("/", "start_time", p.start_time);
  out.set_attr("/", "end_time", p.end_time);
}

std::size_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return static_cast<std::size_t>(std::strtoull(line.c_str() + 6, nullptr, 10)) * 1024;
  }
  return 0;
}

void write_sample_index(H5Writer& out, const std::vector<std::string>& ids) {
  std::vector<std::uint64_t> index(ids.size());
  std::iota(index.begin(), index.end(), std::uint64_t{0});
  out.write("/samples/index", index);
  out.write_strings("/samples/id", ids);
}

}  // namespace evalrun
