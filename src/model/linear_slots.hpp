// The projections a model exposes as linear sites (Model::linear_sites / replace_linear), kept as
// slots that point at the model's own layer pointers, so every architecture lists its projections
// once and shares the replace logic.
#pragma once

#include <string>
#include <vector>

#include "quant/linear.hpp"

namespace evalrun::model {

struct LinearSlot {
  std::vector<std::string> prefixes;      // the checkpoint layers held side by side (q | k | v)
  std::vector<std::int64_t> part_out;     // outputs of each
  quant::LinearPtr* layer = nullptr;      // the model's pointer
};

std::vector<quant::LinearSite> sites_of(const std::vector<LinearSlot>& slots);

// Installs `layer` at slot `site` and returns the layer it held. Its in / out features must match;
// `sgemm_path`: the model runs its projections through Linear::forward (a torch-path model reads
// dense weights directly and cannot take another layer). `model` names the caller in errors.
quant::LinearPtr replace_slot(std::vector<LinearSlot>& slots, std::size_t site, quant::LinearPtr layer,
                              bool sgemm_path, const char* model);

}  // namespace evalrun::model
