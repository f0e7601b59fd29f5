#include "model/weights.hpp"

#include "dist/communicator.hpp"
#include "model/loader_util.hpp"
#include "ops/gemm.hpp"

namespace evalrun::model {

void Weights::begin_load(const ModelLoad& how) {
  tune_malloc_once();
  dir = how.dir;
  dtype = how.dtype;
  tp = how.tp;
  quant = quant::read_quant_config(how.dir);
  check_quantization(quant, how.quantization_method, how.dtype);
  st = how.dtype == DType::bf16 ? at::kBFloat16 : at::kFloat;
  use_sgemm = st == at::kFloat && (ops::have_onednn_sgemm() || quant.method != quant::Method::none);
}

bool Weights::split() const { return tp != nullptr && tp->size() > 1; }

}  // namespace evalrun::model
