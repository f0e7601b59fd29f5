// The model registry: which config.json "architectures" entry is built by which architecture file.
// Adding a model family = its file (config + forward pass composing the shared layers) + one row in
// registry.cpp. Every load goes through here, so an unknown architecture is one error listing the
// supported ones, whatever the command.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "task/registry.hpp"  // ModelRole: what a task runs

namespace evalrun {

struct Architecture {
  const char* name;        // config.json "architectures" entry, e.g. "LlamaForCausalLM"
  const char* model_type;  // the config.json "model_type" it comes with
  ModelRole role;
  std::unique_ptr<Model> (*load)(const ModelLoad&);
  // The sizes from config.json alone (no weights read): what a run must know before it loads.
  ModelDims (*dims)(const std::string& dir);
};

const std::vector<Architecture>& architectures();

// The row of the checkpoint in `dir` (reads only config.json): its one "architectures" entry must be
// a row and "model_type" that row's. Otherwise an InputError naming config.json and the key, the
// value and the supported list.
const Architecture& find_architecture(const std::string& dir);

// The checkpoint's sizes (find_architecture, then its row's dims): config.json only.
ModelDims checkpoint_dims(const std::string& dir);

// Loads the checkpoint with its architecture; `role` is what the caller runs (the task's model
// role): a checkpoint of the other role is an InputError naming config.json: architectures.
std::unique_ptr<Model> load_model(const ModelLoad& how, ModelRole role);
std::unique_ptr<EncoderModel> load_encoder(const ModelLoad& how);
std::unique_ptr<CausalLM> load_causal_lm(const ModelLoad& how);

}  // namespace evalrun
