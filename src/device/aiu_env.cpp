#include "device/aiu_env.hpp"

#include <cctype>
#include <cstdlib>
#include <map>

#include "task/registry.hpp"

namespace evalrun::device {
namespace {

bool hex_run(const std::string& s, std::size_t at, std::size_t n) {
  if (at + n > s.size()) return false;
  for (std::size_t i = at; i < at + n; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

}  // namespace

bool is_pci_address(const std::string& s) {
  // [dddd:]bb:dd.f
  std::size_t at = 0;
  if (s.size() == 12) {
    if (!hex_run(s, 0, 4) || s[4] != ':') return false;
    at = 5;
  } else if (s.size() != 7) {
    return false;
  }
  return hex_run(s, at, 2) && s[at + 2] == ':' && hex_run(s, at + 3, 2) && s[at + 5] == '.' && s[at + 6] >= '0' &&
         s[at + 6] <= '7';
}

AiuEnvPlan plan_aiu_env(const RunSpec& spec, const RankPlace& place, const EnvLookup& env) {
  AiuEnvPlan plan;
  auto want = [&](const std::string& name, const std::string& value, const std::string& reason) {
    EnvSetting s{name, value, false, reason};
    if (auto have = env(name)) {
      s.value = *have;
      s.from_user = true;
      if (*have != value) {
        plan.notes.push_back(name + "=" + *have + " from the environment is kept (evalrun would set " + value + ": " +
                             reason + ")");
      }
    }
    plan.vars.push_back(s);
  };
  want("FLEX_COMPUTE", "SENTIENT", "compute on the AIU card");
  want("FLEX_DEVICE", spec.aiu.vfio_mode, "aiu.vfio_mode = \"" + spec.aiu.vfio_mode + "\"");
  if (task_info(spec.task.kind).role == ModelRole::decoder) {
    want("DTCOMPILER_KEEP_EXPORT", "true", "decoder task");
    want("COMPILATION_MODE", "offline_decoder", "decoder task");
  } else {
    for (const char* name : {"DTCOMPILER_KEEP_EXPORT", "COMPILATION_MODE"}) {
      if (auto have = env(name)) {
        plan.vars.push_back({name, *have, true, "set in the environment"});
        plan.notes.push_back(std::string(name) + "=" + *have +
                             " is set in the environment: it is meant for decoders and breaks encoder (RoBERTa) "
                             "compilation; unset it for task.kind = \"" + to_string(spec.task.kind) + "\"");
      }
    }
  }

  // The node's cards: AIU_WORLD_RANK_0, _1, ... up to the first gap (and at least one per local rank).
  const std::string mine = "AIU_WORLD_RANK_" + std::to_string(place.local_rank);
  std::map<std::string, std::string> owner;  // card -> variable
  for (int n = 0;; ++n) {
    const std::string name = "AIU_WORLD_RANK_" + std::to_string(n);
    const auto card = env(name);
    if (!card) {
      if (n >= place.local_size) break;
      continue;
    }
    auto [it, fresh] = owner.emplace(*card, name);
    if (!fresh && (name == mine || it->second == mine)) {
      plan.problems.push_back({mine, it->second + " and " + name + " both name card " + *card +
                                         ": every rank on a node needs its own card"});
    }
  }
  if (auto card = env(mine)) {
    plan.card = *card;
    plan.vars.push_back({mine, *card, true, "the card of local rank " + std::to_string(place.local_rank)});
    if (!is_pci_address(*card)) {
      plan.problems.push_back({mine, "'" + *card + "' is not a PCI address (like 0000:1a:00.0)"});
    }
  } else {
    plan.problems.push_back(
        {mine, "not set: local rank " + std::to_string(place.local_rank) +
                   " has no AIU card. AIU_WORLD_RANK_<n> holds the PCI address of the card of the node's rank n "
                   "(the AIU login scripts set them); " + std::to_string(place.local_size) +
                   " rank(s) on this node need AIU_WORLD_RANK_0 .. AIU_WORLD_RANK_" +
                   std::to_string(place.local_size - 1)});
  }
  if (auto size = env("AIU_WORLD_SIZE")) {
    char* end = nullptr;
    const long n = std::strtol(size->c_str(), &end, 10);
    if (size->empty() || *end != '\0' || n < 1) {
      plan.problems.push_back({"AIU_WORLD_SIZE", "'" + *size + "' is not a number of cards"});
    } else if (n < place.local_size) {
      plan.problems.push_back({"AIU_WORLD_SIZE", "the node has " + *size + " card(s) but " +
                                                     std::to_string(place.local_size) + " ranks run on it"});
    }
  }
  return plan;
}

void apply_aiu_env(const std::vector<EnvSetting>& vars) {
  for (const auto& v : vars)
    if (!v.from_user) ::setenv(v.name.c_str(), v.value.c_str(), 0);
}

}  // namespace evalrun::device
