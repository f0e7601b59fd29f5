#include "model/weights.hpp"

#include "common/errors.hpp"
#include "dist/communicator.hpp"
#include "model/loader_util.hpp"
#include "ops/gemm.hpp"
#include "quant/dense.hpp"

namespace evalrun::model {

void Weights::begin_load(const ModelLoad& how) {
  tune_malloc_once();
  dir = how.dir;
  dtype = how.dtype;
  tp = how.tp;
  device_sync = how.device_sync;
  try {
    device = at::Device(how.device);
  } catch (const c10::Error&) {
    throw std::invalid_argument("ModelLoad: '" + how.device + "' is not a torch device");
  }
  quant = quant::read_quant_config(how.dir);
  check_quantization(quant, how.quantization_method, how.dtype, on_host());
  switch (how.dtype) {
    case DType::bf16: st = at::kBFloat16; break;
    case DType::fp16: st = on_host() ? at::kFloat : at::kHalf; break;
    case DType::fp32: st = at::kFloat; break;
  }
  use_sgemm = on_host() && st == at::kFloat && (ops::have_onednn_sgemm() || quant.method != quant::Method::none);
}

bool Weights::split() const { return tp != nullptr && tp->size() > 1; }

at::TensorOptions Weights::on_device() const { return on_device(st); }
at::TensorOptions Weights::on_device(at::ScalarType dtype) const {
  return at::TensorOptions().dtype(dtype).device(device);
}

void Weights::finish_load(bool transposed) {
  if (on_host()) return;
  std::vector<std::pair<at::Tensor, at::Tensor>> moved;  // host tensor, its copy on the device
  for (at::Tensor* t : tensors()) {
    if (!t->defined()) continue;
    at::Tensor copy;
    for (const auto& [host, dev] : moved) {
      if (host.is_same(*t)) copy = dev;
    }
    if (!copy.defined()) {
      copy = t->to(device);
      moved.emplace_back(*t, copy);
    }
    *t = copy;
  }
  for (const auto& slot : slots()) {
    quant::LinearPtr& layer = *slot.layer;
    // GPTQ (the only quantized format check_quantization lets off the host): W4A16 as
    // dequantize-then-matmul, the weights dequantized once here.
    if (dynamic_cast<quant::DenseLinear*>(layer.get()) == nullptr) layer = quant::dequantized(*layer, st, device, transposed);
    quant::as_dense(*layer).move_to(device);
  }
}

at::Tensor Weights::summed(const at::Tensor& partial) const {
  if (!split()) return partial;
  at::Tensor f;
  if (on_host() || device_sync) {
    f = partial.to(at::kFloat).contiguous();
    if (!on_host()) device_sync();
  } else {
    f = partial.to(at::kCPU, at::kFloat).contiguous();
  }
  tp->allreduce_sum(f.data_ptr<float>(), static_cast<std::size_t>(f.numel()));
  return f.to(partial.device(), partial.scalar_type());
}

}  // namespace evalrun::model
