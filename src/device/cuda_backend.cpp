// model.device = "cuda": the whole model on this rank's GPU. The model loads on the host and moves its
// tensors to cuda:<index> once (ModelLoad::device, model::Weights::finish_load); its torch path then
// computes there in float32 (TF32 off), float16 or bfloat16, the KV cache included, and only logits,
// hidden states and results come back. Tensor-parallel sums are handed device memory when this MPI
// takes it (a CUDA-aware Open MPI), else staged through the host.
// It needs a CUDA-enabled libtorch (EVALRUN_HAVE_CUDA) and has NOT been run on a GPU yet
// (scripts/gpu_check.sh is the check). The code compiles against any libtorch, so a CPU-only build
// keeps it compiling; open_backend never reaches it there.
#include <torch/cuda.h>
#include <torch/torch.h>

#include "device/backends.hpp"
#include "dist/mpi_world.hpp"

#ifdef EVALRUN_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace evalrun::device {
namespace {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::bf16: return "bfloat16";
    case DType::fp16: return "float16";
    case DType::fp32: break;
  }
  return "float32";
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int index, DType dtype, bool mpi_device_memory)
      : device_(torch::kCUDA, static_cast<torch::DeviceIndex>(index)), dtype_(dtype),
        mpi_device_memory_(mpi_device_memory) {}

  std::string device() const override { return device_.str(); }
  std::string describe() const override {
    std::string name;
#ifdef EVALRUN_HAVE_CUDA
    name = std::string(" (") + at::cuda::getDeviceProperties(device_.index())->name + ")";
#endif
    return device_.str() + name + ", whole model in " + dtype_name(dtype_) + "; tensor-parallel sums " +
           (mpi_device_memory_ ? "in device memory (CUDA-aware MPI)" : "staged through host memory (MPI not CUDA-aware)");
  }
  std::string compute_dtype(const std::string& model) const override { return model; }
  std::string usage() const override { return ""; }
  std::string model_device() const override { return device_.str(); }
  std::function<void()> device_sync() const override {
    if (!mpi_device_memory_) return {};
    const auto index = static_cast<std::int64_t>(device_.index());
    return [index] { torch::cuda::synchronize(index); };
  }
  bool takes_projections() const override { return false; }
  quant::LinearPtr adopt(quant::LinearPtr host, const std::string&) override { return host; }

 private:
  torch::Device device_;
  DType dtype_;
  bool mpi_device_memory_;
};

}  // namespace

int cuda_device_count() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

std::shared_ptr<Backend> make_cuda_backend(const RunSpec& spec, int device_index) {
  // float32 means float32: no TF32 and no reduced-precision float16 reductions in cuBLAS.
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowFP16ReductionCuBLAS(false);
  return std::make_shared<CudaBackend>(device_index, spec.model.dtype, mpi_takes_cuda_memory());
}

}  // namespace evalrun::device
