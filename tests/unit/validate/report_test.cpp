// The HTML report's data: log-scale histograms of differences, and that text from result files
// (sample ids, answers) cannot break out of the page.
#include <gtest/gtest.h>

#include <cmath>

#include "validate/compare.hpp"
#include "validate/report.hpp"

using namespace evalrun;

TEST(DiffHistogram, BinsLog10ValuesIntoEighthsOfADecadeAndCountsZerosApart) {
  // 1e-6, 1.5e-6, 1e-5 (twice), 1e-3, two zeros, one NaN, one infinity
  const std::vector<double> v = {1e-6, 1.5e-6, 1e-5, 1e-5, 1e-3, 0.0, 0.0, std::nan(""), INFINITY};
  const auto h = DiffHistogram::of("t", v);
  // bins from [-6, -5.875) to [-3, -2.875): 25 of them
  ASSERT_EQ(h.counts.size(), 25u);
  ASSERT_EQ(h.log10_edges.size(), 26u);
  EXPECT_DOUBLE_EQ(h.log10_edges.front(), -6.0);
  EXPECT_DOUBLE_EQ(h.log10_edges[1], -5.875);
  EXPECT_DOUBLE_EQ(h.log10_edges.back(), -2.875);
  EXPECT_EQ(h.counts[0], 1u);   // 1e-6
  EXPECT_EQ(h.counts[1], 1u);   // log10(1.5e-6) = -5.82
  EXPECT_EQ(h.counts[8], 2u);   // 1e-5
  EXPECT_EQ(h.counts[24], 1u);  // 1e-3
  EXPECT_EQ(h.zeros, 2u);
  EXPECT_EQ(h.non_finite, 2u);
  EXPECT_EQ(h.total(), v.size());
}

TEST(DiffHistogram, OnlyZerosGiveNoBins) {
  const auto h = DiffHistogram::of("t", {0.0, 0.0});
  EXPECT_TRUE(h.counts.empty());
  EXPECT_EQ(h.zeros, 2u);
  // a single value gets one bin of an eighth of a decade around it
  const auto one = DiffHistogram::of("t", {0.02});
  ASSERT_EQ(one.counts.size(), 1u);
  EXPECT_EQ(one.total(), 1u);
  EXPECT_LE(one.log10_edges.front(), std::log10(0.02));
  EXPECT_GT(one.log10_edges.back(), std::log10(0.02));
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
