#include "task/encoder_runner.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "dist/sharding.hpp"
#include "model/model.hpp"

namespace evalrun {
namespace {

struct PaddedBatch {
  std::vector<std::int64_t> ids, mask;
  std::vector<std::int64_t> types;  // empty when no item has type ids (all 0); padding gets 0
  std::int64_t rows = 0, seq = 0;
  std::int64_t real_tokens = 0;  // not padding
};

PaddedBatch pad_batch(const std::vector<EncoderItem>& items, const std::vector<std::size_t>& members,
                      const EncoderBatchOptions& options) {
  PaddedBatch b;
  b.rows = static_cast<std::int64_t>(members.size());
  for (std::size_t m : members) b.seq = std::max<std::int64_t>(b.seq, static_cast<std::int64_t>(items[m].input_ids.size()));
  if (options.pad_to_length > 0) b.seq = std::max<std::int64_t>(b.seq, options.pad_to_length);
  b.ids.assign(static_cast<std::size_t>(b.rows * b.seq), options.pad_id);
  b.mask.assign(static_cast<std::size_t>(b.rows * b.seq), 0);
  for (std::int64_t r = 0; r < b.rows; ++r) {
    const auto& ids = items[members[r]].input_ids;
    std::copy(ids.begin(), ids.end(), b.ids.begin() + r * b.seq);
    std::fill_n(b.mask.begin() + r * b.seq, ids.size(), 1);
    b.real_tokens += static_cast<std::int64_t>(ids.size());
    const auto& types = items[members[r]].type_ids;
    if (types.empty()) continue;
    if (types.size() != ids.size()) {
      throw std::invalid_argument("encoder item " + std::to_string(items[members[r]].index) + ": " +
                                  std::to_string(types.size()) + " type ids for " + std::to_string(ids.size()) +
                                  " input ids");
    }
    if (b.types.empty()) b.types.assign(b.ids.size(), 0);
    std::copy(types.begin(), types.end(), b.types.begin() + r * b.seq);
  }
  return b;
}

std::vector<std::vector<std::size_t>> batches_of(const std::vector<EncoderItem>& items, int batch_size) {
  std::vector<std::int64_t> lengths;
  lengths.reserve(items.size());
  for (const auto& it : items) lengths.push_back(static_cast<std::int64_t>(it.input_ids.size()));
  return make_batches(lengths, batch_size);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<QaItemResult> run_qa_items(EncoderModel& model, const std::vector<EncoderItem>& items,
                                       const EncoderBatchOptions& options, const BatchDone<QaItemResult>& batch_done) {
  std::vector<QaItemResult> results(items.size());
  std::vector<float> start, end;
  std::size_t done = 0, batch = 0;
  double total_seconds = 0.0;
  for (const auto& members : batches_of(items, options.batch_size)) {
    PaddedBatch b = pad_batch(items, members, options);
    auto t0 = std::chrono::steady_clock::now();
    model.question_answering(b.ids.data(), b.mask.data(), b.types.empty() ? nullptr : b.types.data(), b.rows, b.seq, start, end);
    const double dt = seconds_since(t0);
    total_seconds += dt;
    log_batch("qa", batch++, b.rows, b.seq, b.real_tokens, dt);
    for (std::int64_t r = 0; r < b.rows; ++r) {
      const auto& item = items[members[r]];
      auto& out = results[members[r]];
      const auto n = static_cast<std::ptrdiff_t>(item.input_ids.size());
      out.index = item.index;
      out.start_logits.assign(start.begin() + r * b.seq, start.begin() + r * b.seq + n);
      out.end_logits.assign(end.begin() + r * b.seq, end.begin() + r * b.seq + n);
      out.seconds = dt / static_cast<double>(b.rows);
    }
    if (batch_done) batch_done(results, members);
    done += members.size();
    if (options.progress) options.progress(done, items.size(), total_seconds);
  }
  return results;
}

std::vector<MlmItemResult> run_mlm_items(EncoderModel& model, const std::vector<EncoderItem>& items,
                                         const EncoderBatchOptions& options,
                                         const BatchDone<MlmItemResult>& batch_done) {
  std::vector<MlmItemResult> results(items.size());
  std::vector<float> logits;
  std::size_t done = 0, batch = 0;
  double total_seconds = 0.0;
  for (const auto& members : batches_of(items, options.batch_size)) {
    PaddedBatch b = pad_batch(items, members, options);
    std::vector<std::pair<std::int64_t, std::int64_t>> positions;
    for (std::int64_t r = 0; r < b.rows; ++r) {
      for (auto p : items[members[r]].mask_positions) positions.emplace_back(r, p);
    }
    auto t0 = std::chrono::steady_clock::now();
    model.masked_lm(b.ids.data(), b.mask.data(), b.types.empty() ? nullptr : b.types.data(), b.rows, b.seq, positions, logits);
    const double dt = seconds_since(t0);
    total_seconds += dt;
    log_batch("mlm", batch++, b.rows, b.seq, b.real_tokens, dt);
    const std::size_t vocab = positions.empty() ? 0 : logits.size() / positions.size();
    std::size_t row = 0;
    for (std::int64_t r = 0; r < b.rows; ++r) {
      const auto& item = items[members[r]];
      auto& out = results[members[r]];
      out.index = item.index;
      const std::size_t n = item.mask_positions.size();
      out.mask_logits.assign(logits.begin() + row * vocab, logits.begin() + (row + n) * vocab);
      out.seconds = dt / static_cast<double>(b.rows);
      row += n;
    }
    if (batch_done) batch_done(results, members);
    done += members.size();
    if (options.progress) options.progress(done, items.size(), total_seconds);
  }
  return results;
}

}  // namespace evalrun
