// Runs encoder work items through an encoder model in padded batches on one rank. Items are grouped by
// length (longest first) so padding stays small; outputs are cut back to each item's own length, so
// they do not depend on the batch size, on padding or on which rank ran them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dist/serialize.hpp"
#include "task/batch_done.hpp"

namespace evalrun {

class EncoderModel;

// A work item; a shard is put_records() of them.
struct EncoderItem {
  std::uint64_t index = 0;                  // global feature index
  std::vector<std::int64_t> input_ids;      // unpadded
  std::vector<std::int64_t> mask_positions; // mlm only
  // One per input id (BERT: 0 for [CLS] question [SEP], 1 for context [SEP]), or empty for all 0.
  // Part of the serialized item, so of the inputs digest --resume journals check.
  std::vector<std::int64_t> type_ids;

  void write(ByteWriter& w) const {
    w.put<std::uint64_t>(index);
    w.put_vector(input_ids);
    w.put_vector(mask_positions);
    w.put_vector(type_ids);
  }
  static EncoderItem read(ByteReader& r) {
    EncoderItem it;
    it.index = r.get<std::uint64_t>();
    it.input_ids = r.get_vector<std::int64_t>();
    it.mask_positions = r.get_vector<std::int64_t>();
    it.type_ids = r.get_vector<std::int64_t>();
    return it;
  }
};

struct EncoderBatchOptions {
  int batch_size = 8;
  int pad_to_length = 0;      // 0: pad each batch to its longest item; >0: to this length (pad_to_max_length)
  std::int64_t pad_id = 1;
  // Called after each batch with (items done, items total, seconds spent in the model so far).
  std::function<void(std::size_t, std::size_t, double)> progress;
};

// One feature's result; its record (write/read) is what a rank journals and sends to rank 0. The
// index travels beside the record (task flows' gathered buffers, the journal), not in it.
struct QaItemResult {
  std::uint64_t index = 0;
  std::vector<float> start_logits, end_logits;  // one per input id
  double seconds = 0.0;                         // this item's share of its batch's model time

  void write(ByteWriter& w) const {
    w.put<double>(seconds);
    w.put_vector(start_logits);
    w.put_vector(end_logits);
  }
  static QaItemResult read(ByteReader& r) {
    QaItemResult q;
    q.seconds = r.get<double>();
    q.start_logits = r.get_vector<float>();
    q.end_logits = r.get_vector<float>();
    return q;
  }
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
