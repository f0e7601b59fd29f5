// The environment an AIU run needs, per rank, as the seed's aiu_setup settled it (see README "Devices"):
//   FLEX_COMPUTE=SENTIENT             compute on the card (SENULATOR would be the simulator)
//   FLEX_DEVICE=PF|VF                 how the card is attached: aiu.vfio_mode, PF by default (most cards)
//   DTCOMPILER_KEEP_EXPORT=true       decoder tasks only: it makes RoBERTa compilation fail
//   COMPILATION_MODE=offline_decoder  decoder tasks only
// A variable already in the environment wins (the user's setting is kept, as Python's
// os.environ.setdefault does) and the plan says which ones evalrun sets. The card comes from the
// environment the AIU login scripts set: AIU_WORLD_RANK_<n> holds the PCI address of the card of the
// node's rank n; each rank needs its own, and no two ranks may share one.
#pragma once

#include <string>
#include <vector>

#include "config/run_spec.hpp"
#include "device/placement.hpp"

namespace evalrun::device {

// Something that stops the run: `where` names the key or variable (InputError's where).
struct Problem {
  std::string where;
  std::string what;
};

struct EnvSetting {
  std::string name;
  std::string value;       // what the process will see
  bool from_user = false;  // already in the environment: evalrun leaves it
  std::string reason;      // why evalrun wants it
};

struct AiuEnvPlan {
  std::vector<EnvSetting> vars;
  std::string card;                // this rank's card (PCI address), "" when missing
  std::vector<std::string> notes;  // warnings: the user's environment overrides a setting, ...
  std::vector<Problem> problems;
};

// Pure: reads the environment through `env`, changes nothing.
AiuEnvPlan plan_aiu_env(const RunSpec& spec, const RankPlace& place, const EnvLookup& env);

// Exports the variables of a plan that evalrun sets (setenv without overwrite, so a user's value still wins).
void apply_aiu_env(const std::vector<EnvSetting>& vars);

// "0000:1a:00.0" or "1a:00.0" (domain:bus:device.function, hexadecimal).
bool is_pci_address(const std::string& s);

}  // namespace evalrun::device
