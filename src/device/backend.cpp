#include "device/backend.hpp"

#include <filesystem>
#include <stdexcept>

#include "common/errors.hpp"
#include "common/logging.hpp"
#include "device/backends.hpp"
#include "task/registry.hpp"

namespace evalrun::device {
namespace {

// What the host part of a model computes in (src/model: fp16 keeps float16-rounded weights but
// computes in float32, as this libtorch has no float16 matrix product on the CPU).
std::string host_compute(DType d) {
  switch (d) {
    case DType::bf16:
      return "bfloat16";
    case DType::fp16:
      return "float32 (weights rounded to float16)";
    case DType::fp32:
      break;
  }
  return "float32";
}

// The integer and fp8 kernels (src/quant) compute on the host. CUDA runs float checkpoints in fp32,
// fp16 or bf16, and GPTQ ones dequantized at load (W4A16 as dequantize-then-matmul; the loader refuses
// an INT8 or FP8 checkpoint that "auto" finds). The AIU's projections take float32 rows through the
// plugin: float checkpoints only, no bf16.
void check_formats(const RunSpec& spec, const std::string& device, std::vector<Problem>& problems) {
  const bool aiu = spec.model.device == Device::aiu;
  if (aiu && spec.model.dtype == DType::bf16) {
    problems.push_back({"model.dtype", "\"bf16\" is not available with model.device = \"" + device +
                                           "\": use \"fp16\" or \"fp32\" (README \"Devices\")"});
  }
  const auto& q = spec.quantization;
  const bool runs = q.method == "auto" || q.method == "none" || (!aiu && q.method == "gptq");
  if (q.direct || !runs) {
    problems.push_back({"quantization.method", "\"" + q.method + "\"" + (q.direct ? " with direct = true" : "") +
                                                   ": model.device = \"" + device + "\" runs float checkpoints" +
                                                   (aiu ? "" : " and GPTQ ones") +
                                                   " only (the integer and fp8 kernels run on the host)"});
  }
  if (q.lm_head != "float") {
    problems.push_back({"quantization.lm_head", "\"" + q.lm_head + "\" is not available with model.device = \"" +
                                                    device + "\" (the INT8 kernel runs on the host)"});
  }
}

// A model's compute dtype on a device that runs the whole model (CUDA): what model.dtype says.
std::string device_compute(DType d) {
  switch (d) {
    case DType::bf16: return "bfloat16";
    case DType::fp16: return "float16";
    case DType::fp32: break;
  }
  return "float32";
}

class CpuBackend final : public Backend {
 public:
  std::string device() const override { return "cpu"; }
  std::string describe() const override { return "cpu"; }
  std::string compute_dtype(const std::string& host) const override { return host; }
  std::string usage() const override { return ""; }
  std::string model_device() const override { return "cpu"; }
  bool takes_projections() const override { return false; }
  quant::LinearPtr adopt(quant::LinearPtr host, const std::string&) override { return host; }
};

// Holds a site while its layer is being moved to the device (replace_linear checks the features).
class Vacant final : public quant::Linear {
 public:
  using quant::Linear::Linear;
  void forward(const float*, std::int64_t, std::int64_t, float*, std::int64_t, float, float) override { fail(); }
  std::vector<float> weight_f32() const override { fail(); }
  std::vector<float> bias_f32() const override { fail(); }
  std::size_t resident_bytes() const override { return 0; }
  std::string describe() const override { return "vacant"; }
  void export_tensors(const std::string&, std::vector<TensorToWrite>&) const override { fail(); }

 private:
  [[noreturn]] static void fail() { throw std::logic_error("a projection was used while moving to its device"); }
};

}  // namespace

DeviceLinear::DeviceLinear(quant::LinearPtr host, std::string where)
    : quant::Linear(host->in_features(), host->out_features()), host_(std::move(host)), where_(std::move(where)) {}

void DeviceLinear::forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
                           float beta) {
  const std::int64_t in = in_features(), out = out_features();
  if (M <= 0) return;
  const float* xc = x;
  if (ldx != in) {  // pack the rows
    x_.resize(static_cast<std::size_t>(M * in));
    for (std::int64_t m = 0; m < M; ++m) std::copy(x + m * ldx, x + m * ldx + in, x_.data() + m * in);
    xc = x_.data();
  }
  if (ldy == out && alpha == 1.0f && beta == 0.0f) {
    compute(xc, M, y);
    return;
  }
  y_.resize(static_cast<std::size_t>(M * out));
  compute(xc, M, y_.data());
  for (std::int64_t m = 0; m < M; ++m) {
    float* row = y + m * ldy;
    const float* r = y_.data() + m * out;
    if (beta == 0.0f) {
      for (std::int64_t o = 0; o < out; ++o) row[o] = alpha * r[o];
    } else {
      for (std::int64_t o = 0; o < out; ++o) row[o] += alpha * r[o];
    }
  }
}

std::shared_ptr<Backend> make_cpu_backend() { return std::make_shared<CpuBackend>(); }

bool built_with_cuda() {
#ifdef EVALRUN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

RankPlan plan_rank(const RunSpec& spec, const RankPlace& place, const EnvLookup& env, bool probe_plugin) {
  RankPlan p;
  p.place = place;
  const std::string host = host_compute(spec.model.dtype);
  switch (spec.model.device) {
    case Device::cpu:
      p.device = "cpu";
      p.compute = host;
      break;
    case Device::cuda: {
      p.device = "cuda";
      if (!built_with_cuda()) {
        p.problems.push_back(
            {"model.device", "\"cuda\" is not available: this evalrun was built against a CPU-only libtorch. Build "
                             "it against a CUDA-enabled one, e.g. cmake -S . -B build -DCMAKE_PREFIX_PATH=\"$(python3 "
                             "-c 'import torch; print(torch.utils.cmake_prefix_path)')\" (README \"Devices\")"});
      } else {
        try {
          p.cuda_index = cuda_device_index(place.local_rank, place.local_size, cuda_device_count());
          p.device = "cuda:" + std::to_string(p.cuda_index);
        } catch (const InputError& e) {
          p.problems.push_back({e.where(), e.detail()});
        }
      }
      check_formats(spec, "cuda", p.problems);
      p.compute = "the whole model " + device_compute(spec.model.dtype) + " on " + p.device +
                  " (weights, activations, attention, norms, KV cache); logits and results copied to the host";
      break;
    }
    case Device::aiu: {
      p.device = "aiu";
      AiuEnvPlan e = plan_aiu_env(spec, place, env);
      p.env = e.vars;
      p.card = e.card;
      p.notes = e.notes;
      p.problems = e.problems;
      check_formats(spec, "aiu", p.problems);
      if (!spec.aiu.plugin.empty()) {
        p.plugin = spec.aiu.plugin;
        p.plugin_from = "aiu.plugin";
      } else if (auto v = env("EVALRUN_AIU_PLUGIN"); v && !v->empty()) {
        p.plugin = *v;
        p.plugin_from = "EVALRUN_AIU_PLUGIN";
      } else {
        p.problems.push_back({"aiu.plugin", "model.device = \"aiu\" runs its projections through a backend plugin: "
                                            "set aiu.plugin or the environment variable EVALRUN_AIU_PLUGIN to its "
                                            "path (README \"Devices\")"});
      }
      if (!p.plugin.empty()) p.plugin = std::filesystem::absolute(p.plugin).lexically_normal().string();
      std::string proj = "(the plugin's)";
      if (probe_plugin && !p.plugin.empty()) {
        try {
          const auto probe = probe_aiu_plugin(p.plugin, p.plugin_from, spec.model.dtype);
          p.plugin_identity = probe.identity;
          proj = probe.compute_dtype;
        } catch (const InputError& err) {
          p.problems.push_back({err.where(), err.detail()});
        }
      }
      p.compute = "projections " + proj + " through the plugin; embeddings, norms, attention and heads " + host +
                  " on the host";
      if (spec.aiu.compile_dynamic == "static") {
        const TaskInfo& task = task_info(spec.task.kind);
        if (task.shapes_fixed != nullptr && !task.shapes_fixed(spec)) {
          p.notes.push_back(std::string("aiu.compile_dynamic = \"static\" compiles every input shape once; ") +
                            task.fixed_shape_option + " keeps the shapes few (or use compile_dynamic = \"symbolic\")");
        }
      }
      break;
    }
  }
  return p;
}

std::shared_ptr<Backend> open_backend(const RunSpec& spec, const RankPlace& place) {
  RankPlan plan = plan_rank(spec, place, process_env(), false);
  if (!plan.problems.empty()) throw InputError(plan.problems.front().where, plan.problems.front().what);
  // The notes are the same on every rank of a usual launch: rank 0 says them.
  for (const auto& n : plan.notes) {
    if (place.rank == 0) log().warn("{}: {}", plan.device, n);
  }
  std::shared_ptr<Backend> backend;
  switch (spec.model.device) {
    case Device::cpu:
      backend = make_cpu_backend();
      break;
    case Device::cuda:
      backend = make_cuda_backend(spec, plan.cuda_index);
      break;
    case Device::aiu: {
      apply_aiu_env(plan.env);
      std::string set, kept;
      for (const auto& v : plan.env) (v.from_user ? kept : set) += " " + v.name + "=" + v.value;
      log().info("aiu: environment set by evalrun:{}", set.empty() ? " (none)" : set);
      log().info("aiu: environment kept as the user set it:{}", kept.empty() ? " (none)" : kept);
      backend = make_aiu_backend(spec, plan);
      break;
    }
  }
  log().info("device: {}", backend->describe());
  return backend;
}

void take_over_projections(Backend& backend, const std::vector<quant::LinearSite>& sites,
                           const ReplaceLinear& replace, const std::string& quantization) {
  if (!backend.takes_projections()) return;
  if (quantization != "none") {
    throw InputError("quantization.method", "the checkpoint is quantized (" + quantization + "): model.device = \"" +
                                                backend.device() + "\" runs float checkpoints only");
  }
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const auto& site = sites[i];
    std::string name;
    for (const auto& prefix : site.prefixes) name += (name.empty() ? "" : "|") + prefix;
    auto host = replace(i, std::make_unique<Vacant>(site.layer->in_features(), site.layer->out_features()));
    replace(i, backend.adopt(std::move(host), name));
  }
}

}  // namespace evalrun::device
