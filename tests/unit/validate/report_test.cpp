// The HTML report's data: log-scale histograms of differences, and that text from result files
// (sample ids, answers) cannot break out of the page.
#include <gtest/gtest.h>

#include <cmath>

#include "validate/compare.hpp"
#include "validate/report.hpp"

using namespace evalrun;

TEST(DiffHistogram, BinsLog10ValuesAndCountsZerosApart) {
  // 1e-6, 1e-5 (twice), 1e-3, two zeros, one NaN: range [-6, -3] in quarter decades
  const std::vector<double> v = {1e-6, 1e-5, 1e-5, 1e-3, 0.0, 0.0, std::nan("")};
  const auto h = DiffHistogram::of("t", v, 3);
  ASSERT_EQ(h.log10_edges.size(), 4u);
  EXPECT_NEAR(h.log10_edges.front(), -6.0, 1e-12);
  EXPECT_NEAR(h.log10_edges.back(), -3.0, 1e-12);
  // bins [-6,-5), [-5,-4), [-4,-3]: 1e-6 | 1e-5 1e-5 | 1e-3 (the last edge is inside the last bin)
  EXPECT_EQ(h.counts, (std::vector<std::size_t>{1, 2, 1}));
  EXPECT_EQ(h.zeros, 2u);
  EXPECT_EQ(h.non_finite, 1u);
  EXPECT_EQ(h.total(), v.size());
}

TEST(DiffHistogram, OnlyZerosGiveNoBins) {
  const auto h = DiffHistogram::of("t", {0.0, 0.0}, 10);
  EXPECT_TRUE(h.counts.empty());
  EXPECT_EQ(h.zeros, 2u);
  // a single value still gets a bin of a quarter decade
  const auto one = DiffHistogram::of("t", {0.02}, 4);
  ASSERT_EQ(one.counts.size(), 4u);
  EXPECT_EQ(one.total(), 1u);
  EXPECT_LE(one.log10_edges.front(), std::log10(0.02));
  EXPECT_GE(one.log10_edges.back(), std::log10(0.02));
}

TEST(HtmlReport, EscapesTextFromTheFilesAndInlinesTheLibrary) {
  Comparison c;
  c.task = "qa";
  c.reference = "ref<1>.h5";
  c.candidate = "cand.h5";
  c.rows_title = "samples";
  c.sample_columns = {"answer"};
  c.rows.push_back({"q</script><b>x", {"a & \"b\""}, {0, 0}});
  c.metrics.push_back({"max_logit_diff", 0.5, 0.05, std::nullopt, "m"});
  c.histograms.push_back(DiffHistogram::of("</script>", {0.1, 0.2}));
  const std::string html = render_html(c, "/*PLOTLY*/");
  EXPECT_NE(html.find("<script>/*PLOTLY*/</script>"), std::string::npos);
  EXPECT_NE(html.find("q&lt;/script&gt;&lt;b&gt;x"), std::string::npos);
  EXPECT_NE(html.find("a &amp; &quot;b&quot;"), std::string::npos);
  EXPECT_NE(html.find("ref&lt;1&gt;.h5"), std::string::npos);
  EXPECT_EQ(html.find("q</script>"), std::string::npos);
  // inside the JSON data block "</" is written "<\/", so only the page's own script tags close
  const auto data = html.find("id=\"plot-data\">");
  ASSERT_NE(data, std::string::npos);
  const auto end = html.find("</script>", data);
  EXPECT_NE(html.substr(data, end - data).find("<\\/script>"), std::string::npos);
  EXPECT_NE(html.find(">FAIL (max_logit_diff)</span>"), std::string::npos);
}
