// Devices behind one interface. The models (src/model) build themselves on the host and compute on
// the torch device they are given (ModelLoad::device); a Backend says which one that is and takes over
// whatever else its device needs. Flows and commands ask the backend, never the device kind:
//   cpu   the model on the host (fp32, bf16, or fp16 weights computed in float32);
//   cuda  the whole model on cuda:<local rank> through a CUDA-enabled libtorch (built only when CMake
//         finds one; EVALRUN_HAVE_CUDA): weights, activations, attention, norms and the KV cache stay
//         there, only logits and results come back to the host;
//   aiu   the model on the host, the AIU environment set up per rank (aiu_env.hpp) and its
//         projections (q|k|v, attention output, MLP) run through a backend plugin loaded at run time
//         (aiu_plugin.h), via the models' projection hook (linear_sites / replace_linear).
// Plain C++: no torch in this header.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/run_spec.hpp"
#include "device/aiu_env.hpp"
#include "device/placement.hpp"
#include "quant/linear.hpp"

namespace evalrun::device {

// What a rank's device set-up resolves to, before anything is loaded (evalrun --dry-run, the log).
struct RankPlan {
  RankPlace place;
  std::string device;           // "cpu", "cuda:1", "aiu"
  int cuda_index = -1;          // cuda: the device index
  std::string compute;          // what computes in which precision
  std::vector<EnvSetting> env;  // aiu: the environment (set by evalrun or kept from the user)
  std::string card;             // aiu: this rank's card
  std::string plugin;           // aiu: the plugin's path ("" when none is configured)
  std::string plugin_from;      // "aiu.plugin" or "EVALRUN_AIU_PLUGIN"
  std::string plugin_identity;  // when probed: "evalrun-cpu-reference 1.0, ABI 1"
  std::vector<std::string> notes;
  std::vector<Problem> problems;  // any one stops the run
};

// Resolves a rank's plan. probe_plugin: also opens the AIU plugin and checks its ABI (no init, no card).
RankPlan plan_rank(const RunSpec& spec, const RankPlace& place, const EnvLookup& env, bool probe_plugin);

// Whether this build can run model.device = "cuda" (CMake found a CUDA-enabled libtorch).
bool built_with_cuda();

class Backend {
 public:
  virtual ~Backend() = default;
  // What was used, for the result file's device attribute: "cpu", "cuda:0", "aiu".
  virtual std::string device() const = 0;
  // One line for the log and the result file (device name, plugin and card, ...).
  virtual std::string describe() const = 0;
  // The precision a model runs in on this device, given what its host part computes in ("float32" /
  // "bfloat16"): the host's when the projections compute alike, else "float32 (projections float16)".
  virtual std::string compute_dtype(const std::string& host) const = 0;
  // Work done so far (plugin calls, ...), "" when there is nothing to say.
  virtual std::string usage() const = 0;

  // Where the model's tensors live and compute, as a torch device string ("cpu", "cuda:1"):
  // ModelLoad::device.
  virtual std::string model_device() const = 0;
  // For ModelLoad::device_sync: set when the model sits on a device whose memory this MPI takes in
  // its collectives (a CUDA-aware Open MPI); empty: tensor-parallel sums are staged through the host.
  virtual std::function<void()> device_sync() const { return {}; }

  // Whether the backend takes the projections over (false: the model's layers stay).
  virtual bool takes_projections() const = 0;
  // The layer the model calls instead of `host` (which it keeps for weight_f32() and export).
  // `name`: the checkpoint layers the site holds.
  virtual quant::LinearPtr adopt(quant::LinearPtr host, const std::string& name) = 0;
};

// Sets the device up for this rank (plan, environment, plugin session, CUDA device) and returns its
// backend. Every problem of the plan is an InputError naming the key or environment variable.
std::shared_ptr<Backend> open_backend(const RunSpec& spec, const RankPlace& place);

// Hands every projection of a model to the backend: `replace(i, layer)` installs `layer` at site i and
// returns the one it held (RobertaModel / LlamaModel::replace_linear). `quantization` is how the
// layers are stored ("none" for float); a backend that takes projections over needs float layers
// (InputError naming quantization.method otherwise).
using ReplaceLinear = std::function<quant::LinearPtr(std::size_t, quant::LinearPtr)>;
void take_over_projections(Backend& backend, const std::vector<quant::LinearSite>& sites,
                           const ReplaceLinear& replace, const std::string& quantization);

}  // namespace evalrun::device
