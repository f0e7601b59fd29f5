#include "task/generate_until.hpp"

#include <cmath>
#include <limits>

namespace evalrun {

ScoredResponse score_response(const std::string& generated_text, const std::string& target,
                              const GenerateUntilScoring& scoring) {
  ScoredResponse s;
  s.response = cut_at_stop_strings(generated_text, scoring.until);
  for (const auto& f : scoring.filters) {
    std::string answer = f.regex ? extract_answer(s.response, *f.regex, f.group_select, f.fallback) : s.response;
    s.exact.push_back(exact_match(answer, target, scoring.exact_match));
    s.answers.push_back(std::move(answer));
  }
  return s;
}

MeanWithStderr mean_with_stderr(const std::vector<double>& values) {
  MeanWithStderr m;
  const auto n = static_cast<double>(values.size());
  if (values.empty()) return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  for (double v : values) m.mean += v;
  m.mean /= n;
  if (values.size() < 2) {
    m.standard_error = std::numeric_limits<double>::quiet_NaN();
    return m;
  }
  double ss = 0.0;
  for (double v : values) ss += (v - m.mean) * (v - m.mean);
  m.standard_error = std::sqrt(ss / (n - 1.0)) / std::sqrt(n);
  return m;
}

}  // namespace evalrun
