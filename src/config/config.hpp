// Loading a run description: a TOML file (plus `--set section.key=value` overrides) -> RunSpec.
//
// Validation is strict so a typo never silently falls back to a default: unknown sections and keys,
// wrong types, out-of-range values, missing required keys and options that do not apply to the run
// (a QA-only key on an MLM run, output.top_k without output.logits = "topk", ...) are each reported
// as one evalrun::InputError naming the file, the line (when the key is in the file, or the
// "--set section.key" override it came from) and the full key.
#pragma once

#include <string>
#include <vector>

#include "config/run_spec.hpp"

namespace evalrun {

// Reads and validates the config file at `path`. `overrides` are "section.key=value" strings whose
// value is a TOML value (a bare word that is not valid TOML is taken as a string); they replace or
// add keys before validation. RunSpec.config_path = path.
RunSpec load_run_spec(const std::string& path, const std::vector<std::string>& overrides = {});

// Same on TOML text already in memory; `origin` names it in messages and becomes config_path.
RunSpec parse_run_spec(const std::string& toml_text, const std::string& origin,
                       const std::vector<std::string>& overrides = {});

// A Markdown table of every key (section.key, type, default, allowed values, help), for
// `evalrun --help-config` and the README.
std::string describe_config_keys();

}  // namespace evalrun
