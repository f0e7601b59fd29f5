#include "model/model.hpp"

#include <ATen/Parallel.h>

#include <set>
#include <utility>

#include "model/weights.hpp"
#include "quant/dense.hpp"

namespace evalrun {

std::vector<quant::LinearSite> Model::linear_sites() { return model::sites_of(weights().slots()); }

quant::LinearPtr Model::replace_linear(std::size_t site, quant::LinearPtr layer) {
  auto slots = weights().slots();
  return model::replace_slot(slots, site, std::move(layer), weights().use_sgemm, architecture().c_str());
}

std::string Model::quantization() const {
  const model::Weights& w = weights();
  if (w.on_host() || w.quant.method == quant::Method::none) return w.quant.describe();
  return w.quant.describe() + " (dequantized to " + compute_dtype() + " on " + w.device.str() + " at load)";
}

const char* Model::compute_dtype() const {
  switch (weights().st) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: return "float32";
  }
}

std::string Model::device() const {
  model::Weights& w = weights();
  std::set<std::string> where;
  for (const at::Tensor* t : w.tensors()) {
    if (t->defined()) where.insert(t->device().str());
  }
  for (const auto& slot : w.slots()) {
    const auto* dense = dynamic_cast<const quant::DenseLinear*>(slot.layer->get());
    where.insert(dense != nullptr ? dense->weight().device().str() : "cpu");  // quantized layers: host memory
  }
  std::string all;
  for (const auto& d : where) all += (all.empty() ? "" : ", ") + d;
  return where.size() == 1 ? all : "mixed (" + all + ")";
}

std::size_t Model::weight_bytes() const {
  model::Weights& w = weights();
  std::size_t n = 0;
  for (const auto& slot : w.slots()) n += (*slot.layer)->resident_bytes();
  std::vector<const at::Tensor*> seen;
  for (const at::Tensor* t : w.tensors()) {
    if (!t->defined()) continue;
    bool tied = false;
    for (const at::Tensor* s : seen) tied = tied || s->is_same(*t);
    if (tied) continue;
    seen.push_back(t);
    n += static_cast<std::size_t>(t->nbytes());
  }
  return n + w.other_bytes();
}

// The projections' inputs are the same whether or not a head runs after the layers.
void EncoderModel::calibration_pass(const std::int64_t* ids, const std::int64_t* type_ids, std::int64_t batch,
                                    std::int64_t seq) {
  const std::vector<std::int64_t> mask(static_cast<std::size_t>(batch * seq), 1);
  hidden_states(ids, mask.data(), type_ids, batch, seq);
}

// Decoders have no token types.
void CausalLM::calibration_pass(const std::int64_t* ids, const std::int64_t* /*type_ids*/, std::int64_t batch,
                                std::int64_t seq) {
  hidden_states(ids, batch, seq);
}

void set_compute_threads(int n) {
  if (n > 0) at::set_num_threads(n);
}

int compute_threads() { return at::get_num_threads(); }

}  // namespace evalrun
