#include "model/linear_slots.hpp"

#include <stdexcept>
#include <utility>

namespace evalrun::model {

std::vector<quant::LinearSite> sites_of(const std::vector<LinearSlot>& slots) {
  std::vector<quant::LinearSite> sites;
  sites.reserve(slots.size());
  for (const auto& s : slots) sites.push_back({s.prefixes, s.part_out, s.layer->get()});
  return sites;
}

quant::LinearPtr replace_slot(std::vector<LinearSlot>& slots, std::size_t site, quant::LinearPtr layer,
                              bool sgemm_path, const char* model) {
  const std::string who = std::string(model) + "::replace_linear";
  if (site >= slots.size()) throw std::out_of_range(who + ": no site " + std::to_string(site));
  quant::LinearPtr& slot = *slots[site].layer;
  if (layer->in_features() != slot->in_features() || layer->out_features() != slot->out_features()) {
    throw std::invalid_argument(who + ": features differ from the layer replaced");
  }
  if (!sgemm_path) throw std::logic_error(who + " needs the float32 sgemm path");
  std::swap(slot, layer);
  return layer;
}

}  // namespace evalrun::model
