// Internal to src/device: the backends behind open_backend() and the layer wrapper they share.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device/backend.hpp"

namespace evalrun::device {

// A projection that runs elsewhere: it converts the model's call (strided rows, alpha, beta) into
// compute() on contiguous rows, and keeps the host layer for weight_f32(), export and memory reports.
class DeviceLinear : public quant::Linear {
 public:
  DeviceLinear(quant::LinearPtr host, std::string where);
  void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
               float beta) final;
  std::vector<float> weight_f32() const final { return host_->weight_f32(); }
  std::vector<float> bias_f32() const final { return host_->bias_f32(); }
  std::size_t resident_bytes() const final { return host_->resident_bytes(); }
  std::string describe() const final { return host_->describe() + " on " + where_; }
  void export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const final {
    host_->export_tensors(prefix, out);
  }

 protected:
  // y[M, out] = x[M, in] W^T + b, both contiguous.
  virtual void compute(const float* x, std::int64_t M, float* y) = 0;
  const quant::Linear& host() const { return *host_; }

 private:
  quant::LinearPtr host_;
  std::string where_;
  std::vector<float> x_, y_;
};

std::shared_ptr<Backend> make_cpu_backend();

// cuda_backend.cpp (torch): devices this process sees (0 without CUDA), and the backend on one.
int cuda_device_count();
std::shared_ptr<Backend> make_cuda_backend(const RunSpec& spec, int device_index);

// aiu_backend.cpp: opens the plugin at `path` and checks its ABI without starting a session;
// returns "name version, ABI n" and what it computes in for model.dtype. InputError naming `where`
// (aiu.plugin or EVALRUN_AIU_PLUGIN) and the path when it cannot be used.
struct PluginProbe {
  std::string identity;
  std::string compute_dtype;
};
PluginProbe probe_aiu_plugin(const std::string& path, const std::string& where, DType dtype);
std::shared_ptr<Backend> make_aiu_backend(const RunSpec& spec, const RankPlan& plan);

}  // namespace evalrun::device
