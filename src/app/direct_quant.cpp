#include "app/direct_quant.hpp"

#include "common/errors.hpp"
#include "common/logging.hpp"
#include "dist/serialize.hpp"
#include "model/model.hpp"
#include "quant/quant_config.hpp"

namespace evalrun {

std::string CalibrationSet::serialize() const {
  ByteWriter w;
  w.put_string(dataset);
  w.put<std::int64_t>(examples);
  w.put<std::uint64_t>(sequences.size());
  for (const auto& s : sequences) w.put_vector(s);
  w.put<std::uint64_t>(type_ids.size());
  for (const auto& t : type_ids) w.put_vector(t);
  return w.take();
}

CalibrationSet CalibrationSet::deserialize(const std::string& bytes) {
  CalibrationSet c;
  if (bytes.empty()) return c;
  ByteReader r(bytes);
  c.dataset = r.get_string();
  c.examples = r.get<std::int64_t>();
  c.sequences.resize(r.get<std::uint64_t>());
  for (auto& s : c.sequences) s = r.get_vector<std::int64_t>();
  c.type_ids.resize(r.get<std::uint64_t>());
  for (auto& t : c.type_ids) t = r.get_vector<std::int64_t>();
  return c;
}

quant::Int8Settings direct_int8_settings(const RunSpec& spec) {
  const auto& q = spec.quantization;
  quant::Int8Settings s;
  s.weights = q.weights == "per_tensor" ? quant::Int8Weights::per_tensor : quant::Int8Weights::per_channel;
  s.activations = q.activations == "per_tensor_symm"    ? quant::Int8Activations::per_tensor_symm
                  : q.activations == "per_tensor_asymm" ? quant::Int8Activations::per_tensor_asymm
                                                        : quant::Int8Activations::per_token;
  s.smoothquant = q.smoothquant;
  s.smoothquant_alpha = q.smoothquant_alpha;
  return s;
}

void require_float_checkpoint(const RunSpec& spec) {
  const auto found = quant::read_quant_config(spec.model.path);
  if (found.method == quant::Method::none) return;
  throw InputError("quantization.direct", "direct quantization takes a float checkpoint, but model.path '" +
                                              spec.model.path + "' is already quantized (" + found.describe() + ", " +
                                              found.where + "): run it with direct = false");
}

std::string calibration_dataset(const RunSpec& spec) {
  return spec.quantization.calibration_dataset.empty() ? spec.task.dataset : spec.quantization.calibration_dataset;
}

std::vector<quant::QuantizedSite> quantize_int8(Model& model, const CalibrationSet& calibration,
                                                quant::Int8Settings& settings) {
  const auto sites = model.linear_sites();
  auto replace = [&](std::size_t i, quant::LinearPtr layer) { return model.replace_linear(i, std::move(layer)); };
  auto calibrate = [&] {
    if (calibration.sequences.empty()) {
      throw InputError("quantization.calibration_dataset",
                       "no calibration inputs: the data set '" + calibration.dataset + "' gave no sequences");
    }
    std::size_t tokens = 0;
    for (std::size_t i = 0; i < calibration.sequences.size(); ++i) {
      const auto& s = calibration.sequences[i];
      const bool typed = i < calibration.type_ids.size() && !calibration.type_ids[i].empty();
      // One sequence at a time, unpadded: the statistics do not depend on batch size or padding.
      model.calibration_pass(s.data(), typed ? calibration.type_ids[i].data() : nullptr, 1,
                             static_cast<std::int64_t>(s.size()));
      tokens += s.size();
    }
    log().info("int8: calibrated on {} examples of {} ({} sequences, {} tokens)", calibration.examples,
               calibration.dataset, calibration.sequences.size(), tokens);
  };
  settings.calibration_dataset = settings.needs_calibration() ? calibration.dataset : "";
  settings.calibration_samples = settings.needs_calibration() ? calibration.examples : 0;
  return quant::quantize_sites_int8(sites, replace, calibrate, settings);
}

void install_int8(Model& model, std::vector<quant::QuantizedSite>& sites) {
  for (std::size_t i = 0; i < sites.size(); ++i) model.replace_linear(i, quant::concat_outputs(std::move(sites[i].parts)));
  sites.clear();
}

}  // namespace evalrun
