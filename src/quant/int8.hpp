// INT8 W8A8: 8-bit weights and activations, integer matrix products (oneDNN, int32 accumulation),
// the result dequantized with the activation and weight scales. Optional SmoothQuant: a per-input-
// channel scale s divides the activations before they are quantized and multiplied into the weight
// columns before the weights are quantized, moving activation outliers into the weights.
//
// Checkpoint format (one layer stored under `prefix`, e.g. "roberta.encoder.layer.0.attention.self.query"):
//   prefix.weight             I8  [out, in]   round(W' / weight_scale), in [-127, 127]
//   prefix.weight_scale       F32 [out] (weights = per_channel) or [1] (per_tensor)
//   prefix.input_scale        F32 [1]         static activations only (per_tensor_symm / _asymm)
//   prefix.input_zero_point   I32 [1]         per_tensor_asymm only, in [0, 255]
//   prefix.smooth_scale       F32 [in]        layers listed in smoothquant_layers only
//   prefix.bias               F32 [out]       when the layer has one
// where W' = W * smooth_scale (column j times s_j) for a smoothed layer, W otherwise. config.json
// "quantization_config" holds the settings (Int8Settings::to_json); every key is validated at load.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "ops/gemm.hpp"
#include "quant/linear.hpp"

namespace evalrun::quant {

enum class Int8Weights { per_channel, per_tensor };
// per_token: dynamic, one symmetric int8 scale per row (max |x| / 127), computed in forward().
// per_tensor_symm: one static int8 scale per layer from calibration (max |x| / 127), values clamped.
// per_tensor_asymm: one static uint8 scale and zero point per layer from calibration (min .. max).
enum class Int8Activations { per_token, per_tensor_symm, per_tensor_asymm };
const char* to_string(Int8Weights);
const char* to_string(Int8Activations);

struct Int8Settings {
  Int8Weights weights = Int8Weights::per_channel;
  Int8Activations activations = Int8Activations::per_token;
  bool smoothquant = false;
  double smoothquant_alpha = 0.5;
  std::vector<std::string> smoothquant_layers;  // checkpoint prefixes that carry a smooth_scale
  // Recorded for provenance: the data set the statistics came from ("" = none was needed) and the
  // number of its examples that were run.
  std::string calibration_dataset;
  std::int64_t calibration_samples = 0;

  // Static activation scales or SmoothQuant scales need activation statistics.
  bool needs_calibration() const { return smoothquant || activations != Int8Activations::per_token; }
  // "int8 w8a8 weights per_channel, activations per_token, smoothquant alpha 0.5 (72 layers)"
  std::string describe() const;
  // config.json "quantization_config", quant_method "int8"; parse_int8_settings reads it back.
  nlohmann::json to_json() const;
};

// Validates the checkpoint's quantization settings (`where` names the file and key for errors):
// required keys quant_method, weights, activations, smoothquant; smoothquant_alpha (0..1) and
// smoothquant_layers when smoothquant is true; optional calibration_dataset, calibration_samples.
// Unknown keys are errors (a misspelt key must not fall back to a default silently).
Int8Settings parse_int8_settings(const nlohmann::json& settings, const std::string& where);

// Loads the layer stored under `prefix` (format above), checking every tensor's dtype, shape and
// values (finite positive scales, zero point in range) against in / out and the settings
// (InputError naming the tensor); adds the names it read to `used`.
LinearPtr load_int8_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                           const Int8Settings& settings, std::set<std::string>& used,
                           const Shard& shard = Shard::whole());

// The activation side of a layer: how forward() quantizes x.
struct Int8ActivationParams {
  Int8Activations mode = Int8Activations::per_token;
  float input_scale = 0.0f;         // static modes
  std::int32_t zero_point = 0;      // per_tensor_asymm
  std::vector<float> smooth_scale;  // [in] or empty

  bool operator==(const Int8ActivationParams&) const = default;
};

class Int8Linear final : public Linear {
 public:
  // weight: int8 [out, in] row-major; weight_scale: [out] or [1] (one for all rows); bias: [out] or
  // empty. Checked (std::invalid_argument): sizes, positive finite scales.
  Int8Linear(std::int64_t in, std::int64_t out, std::vector<std::int8_t> weight, std::vector<float> weight_scale,
             Int8ActivationParams act, std::vector<float> bias);

  // Quantizes x (divided by the smooth scale) per the activation mode, runs the int8 product with
  // int32 accumulation (up to ops::int8_rows_limit() rows on the VNNI row kernel, ops/int8_rows, where the
  // CPU has it; more through ops::PackedS8Weights: oneDNN's matmul), and writes
  // y = beta * y + alpha * (acc * x_scale[row] * w_scale[col] + bias). Rows are independent: the
  // result does not depend on M or on the other rows. Scratch buffers are shared by all layers of a
  // thread and reused (grown, never shrunk).
  void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
               float beta) override;
  // q * weight_scale[row] / smooth_scale[col]: the float weight the layer applies to x.
  std::vector<float> weight_f32() const override;
  std::vector<float> bias_f32() const override { return bias_; }
  std::size_t resident_bytes() const override;
  std::string describe() const override;
  // The tensors of the checkpoint format above; a layer made by concat_int8 holds several
  // checkpoint layers and cannot be exported (std::logic_error): export the parts.
  void export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const override;
  void set_row_group(Communicator* group) override { group_ = group; }

  const std::vector<std::int8_t>& weight() const { return weight_; }
  const std::vector<float>& weight_scale() const { return weight_scale_; }  // as stored: [out] or [1]
  const Int8ActivationParams& activation() const { return act_; }
  bool per_tensor_weights() const { return per_tensor_; }

  // Several layers over the same input with the same activation parameters, side by side (q | k | v):
  // one product instead of one per part, and the input quantized once. Identical results to the
  // parts run one by one (the integer products are exact). Null when the parts are not all
  // Int8Linear or their activation parameters differ.
  static LinearPtr concat(std::vector<LinearPtr>& parts);

 private:
  // forward() on rows that one product covers (parallel inside unless called from a parallel region).
  // group_amax: per_token rows' max |x / smooth| over the tensor-parallel group (null: this rank's).
  void forward_rows(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
                    float beta, const float* group_amax);

  std::vector<std::int8_t> weight_;
  std::vector<float> weight_scale_;  // as given
  std::vector<float> row_scale_;     // [out]: weight_scale_ expanded (per-tensor parts of a concat)
  std::vector<float> inv_smooth_;    // 1 / smooth_scale, [in] or empty
  Int8ActivationParams act_;
  std::vector<float> bias_;
  std::unique_ptr<ops::PackedS8Weights> packed_;  // weight_ in the product's layout (made at the first forward)
  std::vector<std::int32_t> row_sums_;  // [out]: each weight row's sum, for the decode-step row kernel (ops/int8_rows)
  bool per_tensor_ = false;  // one weight scale per checkpoint layer (for describe())
  bool exportable_ = true;   // false for a concatenation of several checkpoint layers
  Communicator* group_ = nullptr;  // row-parallel part: per_token scales over the group (set_row_group)
  std::vector<float> group_amax_;
};

// ---- direct quantization of float layers --------------------------------------------------------

// Per-input-channel minimum and maximum of every row a layer saw.
struct ChannelStats {
  std::vector<float> min, max;  // [in]
  std::int64_t rows = 0;
  void merge(const ChannelStats& other);  // element-wise min / max (the order does not matter)
};

// SmoothQuant: s_j = max|X_j|^alpha / max|W_j|^(1-alpha), with max|W_j| over all rows of `weight`
// ([out, in]; every part of a fused site, as they share the input). Channels with a zero activation
// or weight maximum get 1. Computed in double, rounded to float.
std::vector<float> smoothquant_scales(const ChannelStats& stats, const std::vector<float>& weight, std::int64_t in,
                                      std::int64_t out, double alpha);

// Quantizes the float layer `site.layer` (its weight_f32 / bias_f32) into one Int8Linear per part of
// the site (site.prefixes / part_out: q | k | v parts are quantized separately, as a checkpoint
// stores them). `stats` (the layer's input statistics from calibration) is needed when the settings
// need calibration (std::invalid_argument otherwise); `smooth` says whether this site is smoothed.
std::vector<LinearPtr> quantize_site_int8(const LinearSite& site, const Int8Settings& settings,
                                          const ChannelStats* stats, bool smooth);

// Calibration: wraps every site's layer in an observer, calls `run` (forward passes on calibration
// inputs), restores the layers and returns each site's input statistics. `replace` swaps the layer
// of a site and returns the one it replaced (the models' replace_linear).
std::vector<ChannelStats> observe_sites(const std::vector<LinearSite>& sites,
                                        const std::function<LinearPtr(std::size_t, LinearPtr)>& replace,
                                        const std::function<void()>& run);

// The Int8Linear of a site as quantize_site_int8 made it, one per part, with the checkpoint prefixes.
struct QuantizedSite {
  std::vector<std::string> prefixes;
  std::vector<LinearPtr> parts;  // Int8Linear each
};

// The whole model: calibrates when the settings need it (`run_calibration` is called once inside
// observe_sites), quantizes every site, and returns the parts (not yet installed). With smoothquant,
// every site is smoothed and settings.smoothquant_layers is filled in with their prefixes.
std::vector<QuantizedSite> quantize_sites_int8(const std::vector<LinearSite>& sites,
                                               const std::function<LinearPtr(std::size_t, LinearPtr)>& replace,
                                               const std::function<void()>& run_calibration, Int8Settings& settings);

}  // namespace evalrun::quant
