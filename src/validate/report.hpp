// Renderings of a Comparison: a short stdout summary, a Markdown report, a JSON report.
#pragma once

#include <string>

#include "validate/compare.hpp"

namespace evalrun {

// A few lines: the files, every metric with its limit and PASS/FAIL, notes, the worst `worst_rows`
// rows, and a last line "RESULT: PASS" or "RESULT: FAIL (metric, ...)".
std::string render_summary(const Comparison& c, std::size_t worst_rows = 5);
// Full report; the per-sample table lists at most `max_rows` rows, worst first.
std::string render_markdown(const Comparison& c, std::size_t max_rows = 200);
// Everything, every row (non-finite numbers become null).
std::string render_json(const Comparison& c);
// One self-contained HTML page: verdict, metrics with their limits, notes, plots (failure rate and
// cross entropy by token position for generate, histograms of the differences), and the per-sample
// table (at most `max_rows`, worst first). `plotly_js` is the text of plotly.min.js, inlined so the
// page needs no network; the page sets data-plots-rendered on <body> to the number of plots drawn.
std::string render_html(const Comparison& c, const std::string& plotly_js, std::size_t max_rows = 500);

}  // namespace evalrun
