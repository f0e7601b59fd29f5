#include "quant/dense.hpp"

#include <cstring>
#include <stdexcept>

#include "ops/gemm.hpp"
#include "quant/int8.hpp"

namespace evalrun::quant {

DenseLinear::DenseLinear(const torch::Tensor& weight, const torch::Tensor& bias, bool transposed)
    : Linear(weight.size(1), weight.size(0)), bias_(bias), transposed_(transposed) {
  weight_ = transposed ? weight.t().contiguous() : weight.contiguous();
  if (bias_.defined()) bias_ = bias_.contiguous();
}

void DenseLinear::forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
                          float beta) {
  if (weight_.scalar_type() != torch::kFloat32) throw std::logic_error("DenseLinear::forward needs float32 weights");
  const std::int64_t in = in_features(), out = out_features();
  if (transposed_) {
    ops::sgemm('N', 'N', M, out, in, alpha, x, ldx, weight_.data_ptr<float>(), out, beta, y, ldy);
  } else {
    ops::linear_f32(x, M, ldx, weight_.data_ptr<float>(), out, in, y, ldy, alpha, beta);
  }
  if (!bias_.defined()) return;
  const float* b = bias_.data_ptr<float>();
  for (std::int64_t m = 0; m < M; ++m) {
    float* row = y + m * ldy;
    for (std::int64_t j = 0; j < out; ++j) row[j] += alpha * b[j];
  }
}

void DenseLinear::move_to(const torch::Device& device) {
  weight_ = weight_.to(device);
  if (bias_.defined()) bias_ = bias_.to(device);
}

std::vector<float> DenseLinear::weight_f32() const {
  torch::Tensor w = (transposed_ ? weight_.t() : weight_).to(torch::kCPU, torch::kFloat32).contiguous();
  return {w.data_ptr<float>(), w.data_ptr<float>() + w.numel()};
}

std::vector<float> DenseLinear::bias_f32() const {
  if (!bias_.defined()) return {};
  torch::Tensor b = bias_.to(torch::kCPU, torch::kFloat32).contiguous();
  return {b.data_ptr<float>(), b.data_ptr<float>() + b.numel()};
}

std::size_t DenseLinear::resident_bytes() const {
  std::size_t n = weight_.numel() * weight_.element_size();
  if (bias_.defined()) n += bias_.numel() * bias_.element_size();
  return n;
}

std::string DenseLinear::describe() const {
  switch (weight_.scalar_type()) {
    case torch::kBFloat16: return "bfloat16";
    case torch::kHalf: return "float16";
    default: return "float32";
  }
}

namespace {
TensorToWrite float_tensor(const std::string& name, const std::vector<std::int64_t>& shape, const std::vector<float>& v) {
  TensorToWrite t{name, TensorDType::F32, shape, std::vector<std::byte>(v.size() * sizeof(float))};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}
}  // namespace

void DenseLinear::export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const {
  out.push_back(float_tensor(prefix + ".weight", {out_features(), in_features()}, weight_f32()));
  if (bias_.defined()) out.push_back(float_tensor(prefix + ".bias", {out_features()}, bias_f32()));
}

const DenseLinear& as_dense(const Linear& layer) {
  const auto* dense = dynamic_cast<const DenseLinear*>(&layer);
  if (dense == nullptr) throw std::logic_error("a quantized layer reached the float-only torch path");
  return *dense;
}
DenseLinear& as_dense(Linear& layer) { return const_cast<DenseLinear&>(as_dense(static_cast<const Linear&>(layer))); }

// ---- concatenation --------------------------------------------------------------------------------

namespace {

// Quantized parts side by side: each part writes its own column slice of y.
class ConcatLinear final : public Linear {
 public:
  ConcatLinear(std::vector<LinearPtr> parts, std::int64_t in, std::int64_t out)
      : Linear(in, out), parts_(std::move(parts)) {}

  void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
               float beta) override {
    std::int64_t col = 0;
    for (auto& p : parts_) {
      p->forward(x, M, ldx, y + col, ldy, alpha, beta);
      col += p->out_features();
    }
  }
  std::vector<float> weight_f32() const override {
    std::vector<float> w;
    for (const auto& p : parts_) {
      auto pw = p->weight_f32();
      w.insert(w.end(), pw.begin(), pw.end());
    }
    return w;
  }
  std::vector<float> bias_f32() const override {
    bool any = false;
    for (const auto& p : parts_) any = any || !p->bias_f32().empty();
    if (!any) return {};
    std::vector<float> b;
    for (const auto& p : parts_) {
      auto pb = p->bias_f32();
      if (pb.empty()) pb.assign(p->out_features(), 0.0f);
      b.insert(b.end(), pb.begin(), pb.end());
    }
    return b;
  }
  std::size_t resident_bytes() const override {
    std::size_t n = 0;
    for (const auto& p : parts_) n += p->resident_bytes();
    return n;
  }
  std::string describe() const override { return parts_.front()->describe(); }
  void export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const override {
    throw std::logic_error("a concatenated layer is exported part by part (" + prefix + ")");
  }

 private:
  std::vector<LinearPtr> parts_;
};

}  // namespace

LinearPtr concat_outputs(std::vector<LinearPtr> parts) {
  if (parts.empty()) throw std::logic_error("concat_outputs: no parts");
  if (parts.size() == 1) return std::move(parts.front());
  const std::int64_t in = parts.front()->in_features();
  std::int64_t out = 0;
  const auto* front = dynamic_cast<const DenseLinear*>(parts.front().get());
  bool all_dense = front != nullptr, any_bias = false;
  for (const auto& p : parts) {
    if (p->in_features() != in) throw std::logic_error("concat_outputs: parts with different in_features");
    out += p->out_features();
    const auto* d = dynamic_cast<const DenseLinear*>(p.get());
    all_dense = all_dense && d != nullptr && d->transposed() == front->transposed();
    any_bias = any_bias || (d != nullptr && d->bias().defined());
  }
  if (!all_dense) {
    // INT8 parts with the same activation parameters: one product (see Int8Linear::concat).
    if (LinearPtr fused = Int8Linear::concat(parts)) return fused;
    return std::make_unique<ConcatLinear>(std::move(parts), in, out);
  }
  // Float parts: one weight, so a layer is one GEMM.
  std::vector<torch::Tensor> ws, bs;
  for (const auto& p : parts) {
    const auto& d = as_dense(*p);
    ws.push_back(d.transposed() ? d.weight().t() : d.weight());
    if (any_bias) bs.push_back(d.bias().defined() ? d.bias() : torch::zeros({d.out_features()}, d.weight().options()));
  }
  const bool transposed = front->transposed();
  return std::make_unique<DenseLinear>(torch::cat(ws, 0), any_bias ? torch::cat(bs, 0) : torch::Tensor(), transposed);
}

LinearPtr dequantized(const Linear& layer, torch::ScalarType dtype, const torch::Device& device, bool transposed) {
  std::vector<float> w = layer.weight_f32(), b = layer.bias_f32();
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  // from_blob borrows w / b: to() with copy = true makes the one copy the layer keeps, also where
  // device and dtype are already the host's float32 (a plain to() would return the borrowed view).
  torch::Tensor wt = torch::from_blob(w.data(), {layer.out_features(), layer.in_features()}, f32)
                         .to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
  torch::Tensor bt;
  if (!b.empty()) bt = torch::from_blob(b.data(), {layer.out_features()}, f32).to(device, dtype, false, /*copy=*/true);
  return std::make_unique<DenseLinear>(wt, bt, transposed);
}

}  // namespace evalrun::quant
