// Direct INT8 quantization of a float checkpoint, shared by runs with [quantization] direct = true
// (in memory, on every rank) and `evalrun quantize` (written to a checkpoint): the same calibration
// inputs, the same statistics and the same layers, so both give the same outputs.
//
// Calibration runs the model on the first quantization.calibration_samples examples of
// quantization.calibration_dataset (default task.dataset), prepared like the task's own inputs
// (tokenizer, max_seq_length / doc_stride windows, prompt template, token types), one sequence at a time without
// padding, so the statistics do not depend on the batch size or on padding. Settings that need no
// statistics (per_token activations without SmoothQuant) skip it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_spec.hpp"
#include "quant/int8.hpp"

namespace evalrun {

class Model;

struct CalibrationSet {
  std::string dataset;           // as configured ("" when the settings need no calibration)
  std::int64_t examples = 0;     // data set examples used (each may give several sequences)
  std::vector<std::vector<std::int64_t>> sequences;  // token ids, unpadded
  // Per sequence, its token types as the task feeds them (BERT pairs: 0 question, 1 context); an
  // empty entry, or none at all (decoders), is all 0.
  std::vector<std::vector<std::int64_t>> type_ids;

  std::string serialize() const;
  static CalibrationSet deserialize(const std::string& bytes);
};

// The run's [quantization] settings as Int8Settings (calibration fields empty).
quant::Int8Settings direct_int8_settings(const RunSpec& spec);
// InputError naming quantization.direct when model.path is already quantized.
void require_float_checkpoint(const RunSpec& spec);
// The data set that calibrates: quantization.calibration_dataset, else task.dataset.
std::string calibration_dataset(const RunSpec& spec);

// The calibration inputs of a run come from its task's flow: task_calibration (app/flows/flows.hpp).

// Calibrates (when needed) and quantizes every linear layer of a float model; the returned layers
// are not installed. `settings` gets the calibration record and the smoothed layers.
std::vector<quant::QuantizedSite> quantize_int8(Model& model, const CalibrationSet& calibration,
                                                quant::Int8Settings& settings);

// Replaces the model's layers with the quantized ones (parts of a site fused, as a loaded checkpoint's).
void install_int8(Model& model, std::vector<quant::QuantizedSite>& sites);

}  // namespace evalrun
