// Runs encoder work items through a RoBERTa model in padded batches on one rank. Items are grouped by
// length (longest first) so padding stays small; outputs are cut back to each item's own length, so
// they do not depend on the batch size, on padding or on which rank ran them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "task/batch_done.hpp"

namespace evalrun {

class EncoderModel;

struct EncoderItem {
  std::uint64_t index = 0;                  // global feature index
  std::vector<std::int64_t> input_ids;      // unpadded
  std::vector<std::int64_t> mask_positions; // mlm only
};

struct EncoderBatchOptions {
  int batch_size = 8;
  int pad_to_length = 0;      // 0: pad each batch to its longest item; >0: to this length (pad_to_max_length)
  std::int64_t pad_id = 1;
  // Called after each batch with (items done, items total, seconds spent in the model so far).
  std::function<void(std::size_t, std::size_t, double)> progress;
};

struct QaItemResult {
  std::uint64_t index = 0;
  std::vector<float> start_logits, end_logits;  // one per input id
  double seconds = 0.0;                         // this item's share of its batch's model time
};

struct MlmItemResult {
  std::uint64_t index = 0;
  std::vector<float> mask_logits;  // [mask_positions.size(), vocab] row-major
  double seconds = 0.0;
};

std::vector<QaItemResult> run_qa_items(EncoderModel& model, const std::vector<EncoderItem>& items,
                                       const EncoderBatchOptions& options, const BatchDone<QaItemResult>& batch_done = {});
std::vector<MlmItemResult> run_mlm_items(EncoderModel& model, const std::vector<EncoderItem>& items,
                                         const EncoderBatchOptions& options,
                                         const BatchDone<MlmItemResult>& batch_done = {});

}  // namespace evalrun
