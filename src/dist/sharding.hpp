// Splitting work over data-parallel ranks and into batches. Every item keeps its global index, so
// results can be put back in input order whatever the split: the result file never depends on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace evalrun {

// Assigns items (given their cost, e.g. token count) to `parts` shards so the largest shard's total
// cost is small: longest-processing-time-first greedy, ties broken by index so the split is
// deterministic. Returns, per shard, the item indices in ascending order.
std::vector<std::vector<std::size_t>> shard_by_cost(const std::vector<std::int64_t>& cost, int parts);

// Groups items into batches of at most `batch_size`, longest first, so items of similar length share
// a batch and padding stays small. Returns positions into `lengths`.
std::vector<std::vector<std::size_t>> make_batches(const std::vector<std::int64_t>& lengths, int batch_size);

}  // namespace evalrun
