#include "task/qa_postprocess.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "common/utf8.hpp"

namespace evalrun {
namespace {

// numpy's pairwise summation (add.reduce over a contiguous 1-D array): plain loop below 8 values,
// 8 interleaved partial sums up to 128, halves above. Replicated so float32 probabilities round as
// numpy's do.
template <typename T>
T numpy_pairwise_sum(const T* a, std::size_t n) {
  if (n < 8) {
    T res = 0;
    for (std::size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    T r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    std::size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += a[i + static_cast<std::size_t>(j)];
    }
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  std::size_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpy_pairwise_sum(a, n2) + numpy_pairwise_sum(a + n2, n - n2);
}

// np.exp on a float32 array as numpy's AVX2/AVX-512 loop computes it (simd_exp_FLOAT in
// loops_exponent_log.dispatch.c.src): Cody-Waite reduction by ln 2, a 5th/2nd-order rational
// approximation, scaling by 2^k. It is not correctly rounded (up to ~2.5 ulp), so std::exp(float)
// differs from it in the last bit for about a third of the n-best probabilities; this reproduces
// utils_qa's float32 probabilities bit for bit. The file is built with -ffp-contract=off so only the
// explicit fma calls fuse.
float numpy_simd_expf(float x) {
  constexpr float kLog2e = 1.442695040888963407359924681001892137F;
  constexpr float kRintMagic = 0x1.8p+23F;        // adding and subtracting it rounds to an integer
  constexpr float kLn2Hi = -6.93145752e-1F;       // -ln 2, high part
  constexpr float kLn2Lo = -1.42860677e-6F;       // -ln 2, low part
  constexpr float kP[6] = {9.999999999980870924916e-01F, 7.257664613233124478488e-01F, 2.473615434895520810817e-01F,
                           5.114512081637298353406e-02F, 6.757896990527504603057e-03F, 5.082762527590693718096e-04F};
  constexpr float kQ[3] = {1.0F, -2.742335390411667452936e-01F, 2.159509375685829852307e-02F};
  if (std::isnan(x)) return x;
  if (x >= 88.72283935546875F) return std::numeric_limits<float>::infinity();
  if (x <= -103.97208404541015625F) return 0.0F;
  float k = x * kLog2e;
  k = k + kRintMagic;
  k = k - kRintMagic;
  float r = std::fma(k, kLn2Hi, x);
  r = std::fma(k, kLn2Lo, r);
  float num = std::fma(kP[5], r, kP[4]);
  num = std::fma(num, r, kP[3]);
  num = std::fma(num, r, kP[2]);
  num = std::fma(num, r, kP[1]);
  num = std::fma(num, r, kP[0]);
  float den = std::fma(kQ[2], r, kQ[1]);
  den = std::fma(den, r, kQ[0]);
  return std::ldexp(num / den, static_cast<int>(k));
}

float numpy_exp(float x) { return numpy_simd_expf(x); }
double numpy_exp(double x) { return std::exp(x); }

// probs = exp(s - max(s)) / sum(exp(s - max(s))) in the precision T numpy would use.
template <typename T>
std::vector<T> numpy_softmax(const std::vector<T>& scores) {
  std::vector<T> ex(scores.size());
  if (scores.empty()) return ex;
  const T m = *std::max_element(scores.begin(), scores.end());
  for (std::size_t i = 0; i < scores.size(); ++i) ex[i] = numpy_exp(static_cast<T>(scores[i] - m));
  const T total = numpy_pairwise_sum(ex.data(), ex.size());
  for (T& v : ex) v = v / total;
  return ex;
}

// Positions of the `k` largest values, largest first, as np.argsort(x)[-1:-k-1:-1] with the ties in
// reverse position order. NaN sorts above everything, as in numpy.
std::vector<int> top_k_positions(std::span<const float> x, int k) {
  std::vector<int> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  const auto before = [&x](int i, int j) {
    const float a = x[static_cast<std::size_t>(i)];
    const float b = x[static_cast<std::size_t>(j)];
    const bool na = std::isnan(a);
    const bool nb = std::isnan(b);
    if (na != nb) return na;
    if (!na && a != b) return a > b;
    return i > j;
  };
  const std::size_t keep = std::min(idx.size(), static_cast<std::size_t>(std::max(k, 0)));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(keep), idx.end(), before);
  idx.resize(keep);
  return idx;
}

// Sort key for Python's sorted(..., key=score, reverse=True): NaN compares false with everything there;
// here it goes last so the order stays a strict weak ordering.
float sort_key(float s) { return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s; }

}  // namespace

QaPrediction postprocess_qa_example(std::string_view context, const std::vector<QaFeatureOutput>& features,
                                    const QaPostprocessOptions& options) {
  const bool v2 = options.version_2_with_negative;
  if (v2 && features.empty()) throw std::invalid_argument("postprocess_qa_example: an example without features");

  std::vector<QaCandidate> prelim;
  QaCandidate null_answer;
  null_answer.kind = QaCandidate::Kind::null_answer;
  bool have_null = false;

  for (const QaFeatureOutput& fo : features) {
    if (fo.feature == nullptr || fo.start_logits.empty() || fo.end_logits.empty()) {
      throw std::invalid_argument("postprocess_qa_example: a feature without logits");
    }
    const auto& offsets = fo.feature->offsets;
    const std::span<const float> s = fo.start_logits;
    const std::span<const float> e = fo.end_logits;

    // The null answer is the <s> span; keep the feature where it scores lowest (first one on ties).
    const float null_score = s[0] + e[0];
    if (!have_null || null_answer.score > null_score) {
      have_null = true;
      null_answer.score = null_score;
      null_answer.start_logit = s[0];
      null_answer.end_logit = e[0];
      null_answer.char_start = 0;
      null_answer.char_end = 0;
      null_answer.feature = fo.feature_index;
      null_answer.token_start = 0;
      null_answer.token_end = 0;
    }

    const std::vector<int> starts = top_k_positions(s, options.n_best_size);
    const std::vector<int> ends = top_k_positions(e, options.n_best_size);
    const auto n_off = static_cast<int>(offsets.size());
    for (const int si : starts) {
      for (const int ei : ends) {
        if (si >= n_off || ei >= n_off) continue;
        if (offsets[static_cast<std::size_t>(si)].first < 0 || offsets[static_cast<std::size_t>(ei)].first < 0) continue;
        if (ei < si || ei - si + 1 > options.max_answer_length) continue;
        QaCandidate c;
        c.char_start = offsets[static_cast<std::size_t>(si)].first;
        c.char_end = offsets[static_cast<std::size_t>(ei)].second;
        c.start_logit = s[static_cast<std::size_t>(si)];
        c.end_logit = e[static_cast<std::size_t>(ei)];
        c.score = c.start_logit + c.end_logit;
        c.feature = fo.feature_index;
        c.token_start = si;
        c.token_end = ei;
        prelim.push_back(std::move(c));
      }
    }
  }
  if (v2) prelim.push_back(null_answer);

  std::stable_sort(prelim.begin(), prelim.end(),
                   [](const QaCandidate& a, const QaCandidate& b) { return sort_key(a.score) > sort_key(b.score); });
  if (prelim.size() > static_cast<std::size_t>(std::max(options.n_best_size, 0))) {
    prelim.resize(static_cast<std::size_t>(std::max(options.n_best_size, 0)));
  }
  // utils_qa puts the null answer back when it fell out of the n-best; it looks for offsets (0, 0), which a
  // context span can have too.
  if (v2 && std::none_of(prelim.begin(), prelim.end(),
                         [](const QaCandidate& c) { return c.char_start == 0 && c.char_end == 0; })) {
    prelim.push_back(null_answer);
  }

  // Text by code-point offsets (Python slicing: an end before the start gives "").
  const std::vector<std::size_t> cp_starts = utf8_code_point_starts(context);
  const auto n_chars = static_cast<int>(cp_starts.size() - 1);
  for (QaCandidate& c : prelim) {
    const int a = std::clamp(c.char_start, 0, n_chars);
    const int b = std::clamp(c.char_end, 0, n_chars);
    if (a < b) c.text = std::string(context.substr(cp_starts[static_cast<std::size_t>(a)],
                                                   cp_starts[static_cast<std::size_t>(b)] - cp_starts[static_cast<std::size_t>(a)]));
  }

  QaPrediction out;
  // The rare case of no real candidate: utils_qa inserts {"text": "empty"} with zero logits. Its Python
  // float score then makes numpy compute the softmax in float64.
  const bool fallback = prelim.empty() || (prelim.size() == 1 && prelim[0].text.empty());
  if (fallback) {
    QaCandidate empty;
    empty.kind = QaCandidate::Kind::empty_fallback;
    empty.text = "empty";
    empty.char_start = -1;
    empty.char_end = -1;
    prelim.insert(prelim.begin(), std::move(empty));
    std::vector<double> scores;
    for (const QaCandidate& c : prelim) scores.push_back(static_cast<double>(c.score));
    const std::vector<double> probs = numpy_softmax(scores);
    for (std::size_t i = 0; i < prelim.size(); ++i) prelim[i].probability = static_cast<float>(probs[i]);
  } else {
    std::vector<float> scores;
    for (const QaCandidate& c : prelim) scores.push_back(c.score);
    const std::vector<float> probs = numpy_softmax(scores);
    for (std::size_t i = 0; i < prelim.size(); ++i) prelim[i].probability = probs[i];
  }

  if (!v2) {
    out.text = prelim[0].text;
  } else {
    const auto best = std::find_if(prelim.begin(), prelim.end(), [](const QaCandidate& c) { return !c.text.empty(); });
    if (best == prelim.end()) {
      // utils_qa would fail with an IndexError here (only empty spans): predict no answer.
      out.text.clear();
      out.null_score_diff = std::numeric_limits<float>::infinity();
    } else {
      out.null_score_diff = null_answer.score - best->start_logit - best->end_logit;
      out.text = static_cast<double>(out.null_score_diff) > static_cast<double>(options.null_score_diff_threshold)
                     ? std::string()
                     : best->text;
    }
  }
  out.nbest = std::move(prelim);
  return out;
}

std::vector<QaPrediction> postprocess_qa_predictions(const std::vector<SquadExample>& examples,
                                                     const std::vector<QaFeature>& features,
                                                     const std::vector<std::vector<float>>& start_logits,
                                                     const std::vector<std::vector<float>>& end_logits,
                                                     const QaPostprocessOptions& options) {
  if (start_logits.size() != features.size() || end_logits.size() != features.size()) {
    throw std::invalid_argument("postprocess_qa_predictions: " + std::to_string(features.size()) + " features but " +
                                std::to_string(start_logits.size()) + " start and " +
                                std::to_string(end_logits.size()) + " end logit rows");
  }
  std::vector<std::vector<QaFeatureOutput>> per_example(examples.size());
  for (std::size_t i = 0; i < features.size(); ++i) {
    const std::size_t e = features[i].example_index;
    if (e >= examples.size()) throw std::invalid_argument("postprocess_qa_predictions: feature of an unknown example");
    per_example[e].push_back(QaFeatureOutput{&features[i], static_cast<int>(i), start_logits[i], end_logits[i]});
  }
  std::vector<QaPrediction> out;
  out.reserve(examples.size());
  for (std::size_t e = 0; e < examples.size(); ++e) {
    out.push_back(postprocess_qa_example(examples[e].context, per_example[e], options));
  }
  return out;
}

}  // namespace evalrun
