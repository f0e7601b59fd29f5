// What the encoder tasks (qa, mlm: RoBERTa with a token-level head) share: the tokenizer on rank 0,
// the work items and their shards, loading the model (direct INT8 quantization included) and the
// checks of the items against it. Each task's flow (qa_flow.cpp, mlm_flow.cpp) prepares its items,
// runs them and writes its result file.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "app/direct_quant.hpp"
#include "app/task_flow.hpp"
#include "model/registry.hpp"
#include "task/encoder_runner.hpp"
#include "tokenizer/encoder_tokenizer.hpp"

namespace evalrun {

class EncoderFlow : public TaskFlow {
 public:
  using Calibration = CalibrationSet (*)(const RunSpec&);
  EncoderFlow(EncoderHead head, Calibration calibration) : head_(head), calibration_(calibration) {}

  void load(const RunSpec& spec, const std::string& shard, const std::string& shared, Provenance& prov,
            Communicator* tp) final;

 protected:
  // rank 0, after the task filled tokenizer_ and all_items_: the shards (balanced by tokens, without
  // the items in `skip`), the calibration inputs of direct quantization and the inputs digest.
  PreparedWork share_out(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip, std::size_t samples);
  // How this rank's items are batched; progress (rank 0's shard only) goes to `progress`.
  EncoderBatchOptions batch_options(const RunSpec& spec, bool report_progress, Progress& progress) const;
  // After run(): the model and items are not needed any more.
  void release();

  std::optional<EncoderTokenizer> tokenizer_;  // rank 0
  std::vector<EncoderItem> all_items_;     // rank 0: every item, index = position
  std::vector<EncoderItem> items_;         // this rank's shard
  std::unique_ptr<EncoderModel> model_;
  std::int64_t pad_id_ = 1;
  std::int64_t vocab_ = 0;

 private:
  EncoderHead head_;
  Calibration calibration_;
};

// A run config for preparing calibration inputs: the calibration data set and its first
// quantization.calibration_samples examples.
RunSpec calibration_spec(const RunSpec& spec);
// The calibration set of an encoder task: its items' token ids and token types.
CalibrationSet encoder_calibration(const std::vector<EncoderItem>& items, const std::string& dataset,
                                   std::size_t examples);
// The calibration set of an encoder task whose data `read` prepares (its `items` and `sample_ids`):
// the task's own preprocessing on the calibration data set's first examples; empty when direct
// quantization needs no calibration.
template <class Data>
CalibrationSet encoder_task_calibration(const RunSpec& spec, Data (*read)(const RunSpec&, const EncoderTokenizer&)) {
  if (!direct_int8_settings(spec).needs_calibration()) return {};
  const RunSpec cal = calibration_spec(spec);
  const Data d = read(cal, EncoderTokenizer::from_dir(tokenizer_dir(cal)));
  return encoder_calibration(d.items, cal.task.dataset, d.sample_ids.size());
}

}  // namespace evalrun
