// lm-evaluation-harness's aggregations and their standard errors (lm_eval/api/metrics.py): the mean
// with mean_stderr, the perplexity aggregation (exp of minus the mean log-likelihood) with the bootstrap
// standard error lm-eval gives it, resampled exactly as lm-eval resamples (CPython's random.choices
// from Random(i), i = 0, 1, ... for each chunk of 1000 resamples).
#pragma once

#include <cstddef>
#include <vector>

namespace evalrun {

// lm-eval's default --bootstrap_iters.
inline constexpr std::size_t kLmEvalBootstrapIters = 100000;

// lm-eval's mean and mean_stderr (sample standard deviation / sqrt(n)); the stderr is NaN for n < 2,
// where lm-eval reports "N/A". Empty: both NaN.
struct MeanWithStderr {
  double mean = 0.0;
  double standard_error = 0.0;
};
MeanWithStderr mean_with_stderr(const std::vector<double>& values);

// The "perplexity" aggregation of loglikelihood tasks (LAMBADA): exp(-mean(log-likelihoods)), and its
// bootstrap standard error over `iters` resamples (lm-eval's bootstrap_stderr: iters / 1000 chunks, chunk
// i drawn from Random(i); the sample standard deviation of the resampled perplexities). NaN for an empty
// set, for iters < 2, and for fewer than 2 values. Python's sum is left to right (CPython 3.11; 3.12's
// compensated sum can differ in the last digits).
double perplexity_aggregate(const std::vector<double>& loglikelihoods);
double perplexity_bootstrap_stderr(const std::vector<double>& loglikelihoods, std::size_t iters = kLmEvalBootstrapIters);

}  // namespace evalrun
