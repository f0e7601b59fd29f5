#include "quant/int8.hpp"

#include "common/errors.hpp"

namespace evalrun::quant {

std::string Int8Settings::describe() const { return "int8"; }

Int8Settings parse_int8_settings(const nlohmann::json& settings, const std::string& where) {
  throw InputError(where, "int8 checkpoints are not supported yet");
}

LinearPtr load_int8_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                         const Int8Settings& settings, std::set<std::string>& used) {
  throw InputError(ckpt.dir() + ": " + prefix, "int8 layers are not supported yet");
}

}  // namespace evalrun::quant
