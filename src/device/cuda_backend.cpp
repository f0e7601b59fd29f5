// model.device = "cuda": the projections on this rank's GPU through libtorch's CUDA tensors; the rest of
// the model stays on the host, so activations cross PCIe around every projection and MPI collectives
// only ever see host memory. A first step that keeps the models untouched; it needs a CUDA-enabled
// libtorch (EVALRUN_HAVE_CUDA) and has NOT been run on a GPU yet (scripts/gpu_check.sh is the check).
// The code compiles against any libtorch, so a CPU-only build keeps it compiling; open_backend never
// reaches it there.
#include <torch/torch.h>

#include "common/errors.hpp"
#include "common/logging.hpp"
#include "device/backends.hpp"

#ifdef EVALRUN_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace evalrun::device {
namespace {

class CudaLinear final : public DeviceLinear {
 public:
  CudaLinear(quant::LinearPtr host_layer, torch::Device device, torch::ScalarType st)
      : DeviceLinear(std::move(host_layer), device.str()), device_(device), st_(st) {
    auto w = host().weight_f32();
    auto b = host().bias_f32();
    const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
    // W^T [in, out] so that y = x @ W^T is one addmm.
    w_t_ = torch::from_blob(w.data(), {out_features(), in_features()}, opts).t().contiguous().to(device_, st_);
    if (!b.empty()) b_ = torch::from_blob(b.data(), {out_features()}, opts).to(device_, st_);
  }

 protected:
  void compute(const float* x, std::int64_t M, float* y) override {
    auto xs = torch::from_blob(const_cast<float*>(x), {M, in_features()}, torch::kFloat32).to(device_, st_);
    auto ys = b_.defined() ? torch::addmm(b_, xs, w_t_) : torch::mm(xs, w_t_);
    auto out = torch::from_blob(y, {M, out_features()}, torch::kFloat32);
    out.copy_(ys.to(torch::kCPU, torch::kFloat32));  // synchronous: y is ready when this returns
  }

 private:
  torch::Device device_;
  torch::ScalarType st_;
  torch::Tensor w_t_, b_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int index, DType dtype)
      : device_(torch::kCUDA, static_cast<torch::DeviceIndex>(index)),
        st_(dtype == DType::fp16 ? torch::kHalf : torch::kFloat32) {}

  std::string device() const override { return device_.str(); }
  std::string describe() const override {
    std::string name;
#ifdef EVALRUN_HAVE_CUDA
    name = std::string(" (") + at::cuda::getDeviceProperties(device_.index())->name + ")";
#endif
    return device_.str() + name + ", projections in " + (st_ == torch::kHalf ? "float16" : "float32");
  }
  std::string compute_dtype(const std::string& host) const override {
    const std::string proj = st_ == torch::kHalf ? "float16" : "float32";
    return proj == host ? host : host + " (projections " + proj + ")";
  }
  std::string usage() const override { return ""; }
  bool takes_projections() const override { return true; }
  quant::LinearPtr adopt(quant::LinearPtr host, const std::string&) override {
    return std::make_unique<CudaLinear>(std::move(host), device_, st_);
  }

 private:
  torch::Device device_;
  torch::ScalarType st_;
};

}  // namespace

int cuda_device_count() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

std::shared_ptr<Backend> make_cuda_backend(const RunSpec& spec, int device_index) {
  // float32 means float32: no TF32 and no reduced-precision float16 reductions in cuBLAS.
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowFP16ReductionCuBLAS(false);
  return std::make_shared<CudaBackend>(device_index, spec.model.dtype);
}

}  // namespace evalrun::device
