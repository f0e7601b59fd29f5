// The routing of a sparse mixture-of-experts MLP (Mixtral) on raw float32 rows: which experts each
// row goes to, with which weights, and the rows each expert gets. The experts themselves are ordinary
// projections (quant::Linear) run by the model on the rows routed to them.
#pragma once

#include <cstdint>
#include <vector>

namespace evalrun::ops {

// transformers' MixtralSparseMoeBlock routing: p = softmax(router_logits) in float32 over the
// `experts` logits of each row, the k largest entries of p, renormalized to sum 1.
// Out: per row, `chosen` [rows, k] expert indices (largest p first) and `weights` [rows, k].
void moe_route_top_k(const float* router_logits, std::int64_t rows, std::int64_t experts, std::int64_t k,
                     std::int64_t* chosen, float* weights);

// The rows routed to each expert, ascending, with the row's weight for that expert.
struct ExpertRows {
  std::vector<std::int64_t> rows;
  std::vector<float> weights;
};
std::vector<ExpertRows> moe_rows_per_expert(const std::int64_t* chosen, const float* weights, std::int64_t rows,
                                            std::int64_t experts, std::int64_t k);

// acc[rows[r], :] += weights[r] * y[r, :] for the n rows of one expert's output y [n, width].
void moe_accumulate(const ExpertRows& e, const float* y, std::int64_t width, float* acc);

}  // namespace evalrun::ops
