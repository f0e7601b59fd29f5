#include "quant/gptq.hpp"

#include "common/errors.hpp"

namespace evalrun::quant {

std::string GptqSettings::describe() const { return "gptq"; }

GptqSettings parse_gptq_settings(const nlohmann::json& settings, const std::string& where) {
  throw InputError(where, "gptq checkpoints are not supported yet");
}

LinearPtr load_gptq_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                         const GptqSettings& settings, std::set<std::string>& used) {
  throw InputError(ckpt.dir() + ": " + prefix, "gptq layers are not supported yet");
}

}  // namespace evalrun::quant
