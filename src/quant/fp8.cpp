#include "quant/fp8.hpp"

#include "common/errors.hpp"

namespace evalrun::quant {

std::string Fp8Settings::describe() const { return "fp8"; }

Fp8Settings parse_fp8_settings(const nlohmann::json& settings, const std::string& where) {
  throw InputError(where, "fp8 checkpoints are not supported yet");
}

LinearPtr load_fp8_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                         const Fp8Settings& settings, std::set<std::string>& used) {
  throw InputError(ckpt.dir() + ": " + prefix, "fp8 layers are not supported yet");
}

}  // namespace evalrun::quant
