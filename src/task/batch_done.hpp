// A runner's report after each batch, so a caller can keep finished results durable as the run goes
// (the run journal, resume/run_journal.hpp) instead of only when the whole shard is done.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace evalrun {

// Called with the results vector (as the runner will return it) and the positions in it that this
// batch finished; only those positions are complete. An empty function is not called.
template <class Result>
using BatchDone = std::function<void(const std::vector<Result>& results, const std::vector<std::size_t>& finished)>;

}  // namespace evalrun
