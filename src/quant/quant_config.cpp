#include "quant/quant_config.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"

namespace evalrun::quant {

namespace fs = std::filesystem;

const char* to_string(Method m) {
  switch (m) {
    case Method::none: return "none";
    case Method::gptq: return "gptq";
    case Method::int8: return "int8";
    case Method::fp8: return "fp8";
  }
  return "?";
}

namespace {
nlohmann::json parse_json_file(const fs::path& path) {
  const std::string text = read_file(path.string());
  check_json_nesting(text, path.string());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
    throw InputError(path.string(), "not valid JSON: " + clip_text(e.what()));
  }
}
}  // namespace

QuantConfig read_quant_config(const std::string& checkpoint_dir) {
  QuantConfig q;
  nlohmann::json settings;
  const fs::path config = fs::path(checkpoint_dir) / "config.json";
  const fs::path autogptq = fs::path(checkpoint_dir) / "quantize_config.json";
  if (fs::exists(config)) {
    nlohmann::json c = parse_json_file(config);
    if (c.is_object() && c.contains("quantization_config") && !c["quantization_config"].is_null()) {
      settings = c["quantization_config"];
      q.where = config.string() + ": quantization_config";
    }
  }
  if (settings.is_null() && fs::exists(autogptq)) {
    settings = parse_json_file(autogptq);
    q.where = autogptq.string();
  }
  if (settings.is_null()) return q;
  if (!settings.is_object()) throw InputError(q.where, "must be a JSON object");
  // AutoGPTQ's quantize_config.json predates quant_method; its presence means GPTQ.
  std::string method = "gptq";
  if (settings.contains("quant_method")) {
    if (!settings["quant_method"].is_string()) throw InputError(q.where + ".quant_method", "must be a string");
    method = settings["quant_method"].get<std::string>();
  } else if (q.where.find("config.json: ") != std::string::npos) {
    throw InputError(q.where + ".quant_method", "missing (expected \"gptq\", \"int8\" or \"fp8\")");
  }
  if (method == "gptq") {
    q.method = Method::gptq;
    q.gptq = parse_gptq_settings(settings, q.where);
  } else if (method == "int8") {
    q.method = Method::int8;
    q.int8 = parse_int8_settings(settings, q.where);
  } else if (method == "fp8") {
    q.method = Method::fp8;
    q.fp8 = parse_fp8_settings(settings, q.where);
  } else {
    throw InputError(q.where + ".quant_method",
                     "\"" + method + "\" is not supported (supported: \"gptq\", \"int8\", \"fp8\")");
  }
  return q;
}

std::string QuantConfig::describe() const {
  switch (method) {
    case Method::none: return "none";
    case Method::gptq: return gptq.describe();
    case Method::int8: return int8.describe();
    case Method::fp8: return fp8.describe();
  }
  return "?";
}

}  // namespace evalrun::quant
