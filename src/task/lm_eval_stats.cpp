#include "task/lm_eval_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "task/py_random.hpp"

namespace evalrun {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Python's statistics as lm-eval writes them: mean = sum(arr) / len(arr), sample_stddev with n - 1.
double mean_of(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double sample_stddev(const std::vector<double>& v) {
  const double mu = mean_of(v);
  double ss = 0.0;
  for (double x : v) ss += (x - mu) * (x - mu);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

}  // namespace

MeanWithStderr mean_with_stderr(const std::vector<double>& values) {
  if (values.empty()) return {kNaN, kNaN};
  MeanWithStderr m;
  m.mean = mean_of(values);
  m.standard_error = values.size() < 2 ? kNaN : sample_stddev(values) / std::sqrt(static_cast<double>(values.size()));
  return m;
}

double perplexity_aggregate(const std::vector<double>& loglikelihoods) {
  return loglikelihoods.empty() ? kNaN : std::exp(-mean_of(loglikelihoods));
}

double perplexity_bootstrap_stderr(const std::vector<double>& loglikelihoods, std::size_t iters) {
  const std::size_t n = loglikelihoods.size();
  const std::size_t chunk = std::min<std::size_t>(1000, iters);
  if (n < 2 || chunk == 0 || iters / chunk * chunk < 2) return kNaN;
  std::vector<double> replicates, resample(n);
  replicates.reserve(iters / chunk * chunk);
  for (std::size_t i = 0; i < iters / chunk; ++i) {
    PyRandom rnd(i);
    for (std::size_t r = 0; r < chunk; ++r) {
      // random.choices(xs, k=len(xs)) without weights: xs[floor(random() * len(xs))], k times.
      for (std::size_t k = 0; k < n; ++k) {
        resample[k] = loglikelihoods[static_cast<std::size_t>(std::floor(rnd.random() * static_cast<double>(n)))];
      }
      replicates.push_back(perplexity_aggregate(resample));
    }
  }
  return sample_stddev(replicates);
}

}  // namespace evalrun
