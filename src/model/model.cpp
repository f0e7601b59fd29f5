#include "model/model.hpp"

#include <ATen/Parallel.h>

namespace evalrun {

// The projections' inputs are the same whether or not a head runs after the layers.
void EncoderModel::calibration_pass(const std::int64_t* ids, std::int64_t batch, std::int64_t seq) {
  const std::vector<std::int64_t> mask(static_cast<std::size_t>(batch * seq), 1);
  hidden_states(ids, mask.data(), batch, seq);
}

void CausalLM::calibration_pass(const std::int64_t* ids, std::int64_t batch, std::int64_t seq) {
  hidden_states(ids, batch, seq);
}

void set_compute_threads(int n) {
  if (n > 0) at::set_num_threads(n);
}

int compute_threads() { return at::get_num_threads(); }

}  // namespace evalrun
