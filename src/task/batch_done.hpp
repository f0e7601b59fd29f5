// A runner's report after each batch, so a caller can keep finished results durable as the run goes
// (the run journal, resume/run_journal.hpp) instead of only when the whole shard is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/logging.hpp"

namespace evalrun {

// Called with the results vector (as the runner will return it) and the positions in it that this
// batch finished; only those positions are complete, and the caller may take parts out of them (a
// flow writes their logits rows as they finish). An empty function is not called.
template <class Result>
using BatchDone = std::function<void(std::vector<Result>& results, const std::vector<std::size_t>& finished)>;

// Debug log (-v) of one batch a runner ran: its shape (rows x padded length), the share of it that is
// padding (real_tokens of rows * length are not), and the model's time on it.
inline void log_batch(const char* runner, std::size_t batch, std::int64_t rows, std::int64_t length,
                      std::int64_t real_tokens, double seconds) {
  const double cells = static_cast<double>(rows * length);
  const double padding = cells > 0 ? 100.0 * (1.0 - static_cast<double>(real_tokens) / cells) : 0.0;
  log().debug("{} batch {}: {} x {} tokens, {:.1f}% padding, {:.3f} s", runner, batch, rows, length, padding, seconds);
}

}  // namespace evalrun
