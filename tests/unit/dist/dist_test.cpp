#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "dist/serialize.hpp"
#include "dist/sharding.hpp"

using namespace evalrun;

TEST(Sharding, EveryItemExactlyOnceAndBalanced) {
  std::vector<std::int64_t> cost;
  for (int i = 0; i < 103; ++i) cost.push_back(50 + (i * 37) % 300);
  for (int parts : {1, 2, 3, 4, 8}) {
    auto shards = shard_by_cost(cost, parts);
    ASSERT_EQ(static_cast<int>(shards.size()), parts);
    std::vector<int> count(cost.size(), 0);
    std::vector<std::int64_t> load;
    for (const auto& s : shards) {
      EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
      std::int64_t l = 0;
      for (auto i : s) {
        ++count[i];
        l += cost[i];
      }
      load.push_back(l);
    }
    EXPECT_TRUE(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
    const auto total = std::accumulate(cost.begin(), cost.end(), std::int64_t{0});
    const auto biggest = *std::max_element(load.begin(), load.end());
    // LPT is within 4/3 of optimal; optimal >= total/parts
    EXPECT_LE(biggest, total / parts * 4 / 3 + 300) << parts;
  }
}

TEST(Sharding, MoreRanksThanItemsLeavesEmptyShards) {
  auto shards = shard_by_cost({5, 7}, 4);
  int nonempty = 0;
  for (const auto& s : shards) nonempty += s.empty() ? 0 : 1;
  EXPECT_EQ(nonempty, 2);
}

TEST(Sharding, DeterministicForEqualCosts) {
  std::vector<std::int64_t> cost(10, 3);
  EXPECT_EQ(shard_by_cost(cost, 3), shard_by_cost(cost, 3));
}

TEST(Batches, LongestFirstAndBounded) {
  std::vector<std::int64_t> lengths = {5, 100, 7, 80, 6, 90, 8};
  auto batches = make_batches(lengths, 3);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], (std::vector<std::size_t>{1, 5, 3}));
  EXPECT_EQ(batches[2].size(), 1u);
  EXPECT_THROW(make_batches(lengths, 0), std::invalid_argument);
}

TEST(Serialize, RoundTripAndTruncation) {
  ByteWriter w;
  w.put<std::uint64_t>(42);
  w.put_vector(std::vector<float>{1.5F, -2.0F});
  w.put_string("héllo");
  std::string bytes = w.take();
  ByteReader r(bytes);
  EXPECT_EQ(r.get<std::uint64_t>(), 42u);
  EXPECT_EQ(r.get_vector<float>(), (std::vector<float>{1.5F, -2.0F}));
  EXPECT_EQ(r.get_string(), "héllo");
  EXPECT_TRUE(r.done());
  std::string cut = bytes.substr(0, bytes.size() - 2);
  ByteReader r2(cut);
  r2.get<std::uint64_t>();
  r2.get_vector<float>();
  EXPECT_THROW(r2.get_string(), std::runtime_error);
}
