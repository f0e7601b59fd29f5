#include "dist/sharding.hpp"

#include <algorithm>
#include <numeric>
#include <queue>
#include <stdexcept>
#include <tuple>

namespace evalrun {

std::vector<std::vector<std::size_t>> shard_by_cost(const std::vector<std::int64_t>& cost, int parts) {
  if (parts < 1) throw std::invalid_argument("shard_by_cost: parts must be >= 1");
  std::vector<std::size_t> order(cost.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  // min-heap of (load, shard)
  using Slot = std::pair<std::int64_t, int>;
  std::priority_queue<Slot, std::vector<Slot>, std::greater<>> heap;
  for (int p = 0; p < parts; ++p) heap.emplace(0, p);
  std::vector<std::vector<std::size_t>> shards(parts);
  for (std::size_t i : order) {
    auto [load, p] = heap.top();
    heap.pop();
    shards[p].push_back(i);
    heap.emplace(load + std::max<std::int64_t>(cost[i], 1), p);
  }
  for (auto& s : shards) std::sort(s.begin(), s.end());
  return shards;
}

std::vector<std::vector<std::size_t>> make_batches(const std::vector<std::int64_t>& lengths, int batch_size) {
  if (batch_size < 1) throw std::invalid_argument("make_batches: batch_size must be >= 1");
  std::vector<std::size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<std::size_t>> batches;
  for (std::size_t i = 0; i < order.size(); i += batch_size) {
    batches.emplace_back(order.begin() + i, order.begin() + std::min(order.size(), i + batch_size));
  }
  return batches;
}

}  // namespace evalrun
