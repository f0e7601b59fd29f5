#include "io/logprobs16.hpp"

#include <cmath>
#include <limits>

#include "io/hdf5_file.hpp"

namespace evalrun {

void LogProbRows16::append(const float* logits, std::int64_t vocab, std::int64_t token) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  std::int64_t best = -1;
  for (std::int64_t j = 0; j < vocab; ++j) {
    const float x = logits[j];
    if (!std::isfinite(x)) continue;
    lo = std::min(lo, x);
    if (best < 0 || x > hi) {
      hi = x;
      best = j;
    }
  }
  const auto first = values.size();
  values.resize(first + static_cast<std::size_t>(vocab), kLogProb16NotFinite);
  top_id.push_back(best);
  if (best < 0) {  // nothing finite: every entry stays "not finite"
    scale.push_back(0.0f);
    min_log_prob.push_back(std::numeric_limits<float>::quiet_NaN());
    token_log_prob.push_back(std::numeric_limits<double>::quiet_NaN());
    return;
  }
  double sum = 0.0;
  for (std::int64_t j = 0; j < vocab; ++j)
    if (std::isfinite(logits[j])) sum += std::exp(static_cast<double>(logits[j]) - hi);
  const double lse = static_cast<double>(hi) + std::log(sum);
  const auto s = static_cast<float>((static_cast<double>(hi) - lo) / 65534.0);
  scale.push_back(s);
  min_log_prob.push_back(static_cast<float>(static_cast<double>(lo) - lse));
  // The stored float scale, so that decoding undoes exactly this rounding.
  const double inv = s > 0 ? 1.0 / static_cast<double>(s) : 0.0;
  std::uint16_t* q = values.data() + first;
  for (std::int64_t j = 0; j < vocab; ++j) {
    if (!std::isfinite(logits[j])) continue;
    const double level = std::nearbyint((static_cast<double>(logits[j]) - lo) * inv);
    q[j] = static_cast<std::uint16_t>(std::min(level, 65534.0));
  }
  const bool in_vocab = token >= 0 && token < vocab;
  token_log_prob.push_back(in_vocab ? static_cast<double>(logits[token]) - lse
                                    : std::numeric_limits<double>::quiet_NaN());
}

void LogProbRows16::append(const LogProbRows16& o) {
  values.insert(values.end(), o.values.begin(), o.values.end());
  scale.insert(scale.end(), o.scale.begin(), o.scale.end());
  min_log_prob.insert(min_log_prob.end(), o.min_log_prob.begin(), o.min_log_prob.end());
  top_id.insert(top_id.end(), o.top_id.begin(), o.top_id.end());
  token_log_prob.insert(token_log_prob.end(), o.token_log_prob.begin(), o.token_log_prob.end());
}

bool LogProbRows16::consistent(std::int64_t vocab, bool with_values) const {
  const std::size_t n = rows();
  return min_log_prob.size() == n && top_id.size() == n && token_log_prob.size() == n && vocab >= 0 &&
         values.size() == (with_values ? n * static_cast<std::size_t>(vocab) : 0);
}

void LogProbRows16::write(H5Writer& out) const {
  const std::string g = kLogProbs16Group;
  out.write(g + "/scale", scale);
  out.write(g + "/min_log_prob", min_log_prob);
  out.write(g + "/top_id", top_id);
  out.write(g + "/token_log_prob", token_log_prob);
  out.set_attr(g, "encoding",
               std::string("log_prob = min_log_prob + scale * values (values 65535: the logit was not finite); "
                           "scale = (max - min finite logit) / 65534; top_id = exact argmax; token_log_prob = "
                           "exact log-prob of the fed / scored token"));
}

void decode_log_probs16(const std::uint16_t* q, std::int64_t vocab, float scale, float min_log_prob, float* out) {
  for (std::int64_t j = 0; j < vocab; ++j)
    out[j] = q[j] == kLogProb16NotFinite ? std::numeric_limits<float>::quiet_NaN()
                                         : min_log_prob + scale * static_cast<float>(q[j]);
}

}  // namespace evalrun
