// output.logits = "logprobs16": every decoded log-prob within the documented bound of the exact
// log-softmax (computed here in long double), the exact argmax and token log-prob beside each row,
// non-finite logits marked, and the record and the HDF5 group read back as written.
#include "io/logprobs16.hpp"
#include "io/rank_rows.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <vector>

#include "io/hdf5_file.hpp"
#include "test_util.hpp"

using namespace evalrun;

namespace {

std::vector<long double> exact_log_softmax(const std::vector<float>& row) {
  long double mx = -INFINITY, sum = 0;
  for (float x : row)
    if (std::isfinite(x)) mx = std::max<long double>(mx, x);
  for (float x : row)
    if (std::isfinite(x)) sum += std::exp(static_cast<long double>(x) - mx);
  std::vector<long double> out;
  for (float x : row) out.push_back(static_cast<long double>(x) - mx - std::log(sum));
  return out;
}

std::vector<float> decoded_row(const LogProbRows16& l, std::size_t r, std::int64_t vocab) {
  std::vector<float> out(static_cast<std::size_t>(vocab));
  decode_log_probs16(l.values.data() + r * static_cast<std::size_t>(vocab), vocab, l.scale[r], l.min_log_prob[r],
                     out.data());
  return out;
}

}  // namespace

TEST(LogProbs16, DecodedLogProbsAreWithinHalfAStepOfTheExactOnes) {
  const std::int64_t vocab = 32000;
  std::mt19937 rng(5);
  LogProbRows16 l;
  std::vector<std::vector<float>> rows;
  for (float spread : {0.5f, 4.0f, 30.0f}) {
    std::normal_distribution<float> d(1.0f, spread);
    std::vector<float> row(static_cast<std::size_t>(vocab));
    for (auto& x : row) x = d(rng);
    rows.push_back(row);
    l.append(row.data(), vocab, 17);
  }
  ASSERT_EQ(l.rows(), 3u);
  ASSERT_TRUE(l.consistent(vocab));
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto exact = exact_log_softmax(rows[r]);
    const auto got = decoded_row(l, r, vocab);
    float lo = rows[r][0], hi = rows[r][0];
    std::int64_t best = 0;
    for (std::int64_t j = 0; j < vocab; ++j) {
      lo = std::min(lo, rows[r][static_cast<std::size_t>(j)]);
      if (rows[r][static_cast<std::size_t>(j)] > hi) {
        hi = rows[r][static_cast<std::size_t>(j)];
        best = j;
      }
    }
    EXPECT_NEAR(l.scale[r], (static_cast<double>(hi) - lo) / 65534.0, 1e-7 * (hi - lo));
    // the bound the docs give: scale / 2, plus float rounding of min_log_prob + scale * q
    const double bound = l.scale[r] / 2.0 + 4e-7 * std::fabs(static_cast<double>(l.min_log_prob[r]));
    double worst = 0;
    for (std::int64_t j = 0; j < vocab; ++j)
      worst = std::max<double>(worst, std::fabs(static_cast<long double>(got[static_cast<std::size_t>(j)]) - exact[static_cast<std::size_t>(j)]));
    EXPECT_LE(worst, bound) << "row " << r;
    EXPECT_GT(worst, l.scale[r] / 8.0) << "row " << r << ": the rounding is really there";
    EXPECT_EQ(l.top_id[r], best);
    EXPECT_NEAR(l.token_log_prob[r], static_cast<double>(exact[17]), 1e-9);
  }
}

TEST(LogProbs16, NonFiniteLogitsAreMarkedAndTheArgmaxIsTheFirstMaximum) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  LogProbRows16 l;
  const std::vector<float> row = {1.0f, 3.0f, -inf, 3.0f, nan, -2.0f};
  l.append(row.data(), 6, 4);  // the token's logit is NaN
  const std::vector<float> same = {2.5f, 2.5f, 2.5f};
  l.append(same.data(), 3, 9);  // out of the vocabulary
  EXPECT_EQ(l.values[2], kLogProb16NotFinite);
  EXPECT_EQ(l.values[4], kLogProb16NotFinite);
  EXPECT_EQ(l.values[5], 0);      // the smallest finite logit
  EXPECT_EQ(l.values[1], 65534);  // the largest
  EXPECT_EQ(l.top_id[0], 1);      // first of the two maxima
  EXPECT_TRUE(std::isnan(l.token_log_prob[0]));
  const auto d = decoded_row(l, 0, 6);
  EXPECT_TRUE(std::isnan(d[2]) && std::isnan(d[4]));
  const auto exact = exact_log_softmax(row);
  EXPECT_NEAR(d[1], static_cast<double>(exact[1]), 1e-4);
  // all logits equal: scale 0, every entry log(1/3)
  EXPECT_EQ(l.scale[1], 0.0f);
  EXPECT_EQ(l.top_id[1], 0);
  EXPECT_NEAR(l.min_log_prob[1], -std::log(3.0), 1e-6);
  EXPECT_TRUE(std::isnan(l.token_log_prob[1]));
  // nothing finite at all
  const std::vector<float> none = {nan, inf};
  l.append(none.data(), 2, 0);
  EXPECT_EQ(l.top_id[2], -1);
  EXPECT_EQ(l.values[9], kLogProb16NotFinite);
  EXPECT_EQ(l.values[10], kLogProb16NotFinite);
}

TEST(LogProbs16, RecordAndResultFileReadBackAsWritten) {
  const std::int64_t vocab = 700;
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 3.0f);
  LogProbRows16 a, b;
  for (int r = 0; r < 9; ++r) {
    std::vector<float> row(static_cast<std::size_t>(vocab));
    for (auto& x : row) x = d(rng);
    (r < 5 ? a : b).append(row.data(), vocab, r);
  }
  ByteWriter w;
  b.put(w);
  const std::string bytes = w.take();
  ByteReader rd(bytes);
  const LogProbRows16 back = LogProbRows16::get(rd);
  EXPECT_EQ(back.values, b.values);
  EXPECT_EQ(back.token_log_prob, b.token_log_prob);
  LogProbRows16 all = a;
  all.append(back);
  ASSERT_EQ(all.rows(), 9u);
  EXPECT_FALSE(all.consistent(vocab + 1));

  const auto dir = evalrun::testing::make_temp_dir("logprobs16");
  const auto path = (dir / "r.h5").string();
  {
    // as a run writes it: the small arrays by rank 0, the values rows of each item by its rank
    H5Writer out(path);
    all.write(out);
    RowsLayout layout;
    layout.create(out, kLogProbs16Values, RowType::u16, vocab, {5, 4});
    out.close();
    RankRows rows;
    rows.add(kLogProbs16Values, 1, b.values);
    rows.add(kLogProbs16Values, 0, a.values);
    rows.write(RowsLayout::from_bytes(layout.to_bytes()));
    out.commit();
  }
  H5Reader f(path);
  const std::string g = kLogProbs16Group;
  H5Rows<std::uint16_t> q(f, g + "/values");
  EXPECT_EQ(q.rows(), 9);
  EXPECT_EQ(q.cols(), vocab);
  for (std::int64_t r = 0; r < 9; ++r)
    for (std::int64_t j = 0; j < vocab; j += 97)
      EXPECT_EQ(q.row(r)[j], all.values[static_cast<std::size_t>(r * vocab + j)]);
  EXPECT_EQ(f.read_f32(g + "/scale"), all.scale);
  EXPECT_EQ(f.read_f32(g + "/min_log_prob"), all.min_log_prob);
  EXPECT_EQ(f.read_i64(g + "/top_id"), all.top_id);
  EXPECT_EQ(f.read_f64(g + "/token_log_prob"), all.token_log_prob);
  EXPECT_NE(f.attr_string(g, "encoding").find("min_log_prob + scale * values"), std::string::npos);
  std::filesystem::remove_all(dir);
}
