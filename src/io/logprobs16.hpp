// output.logits = "logprobs16": logits rows stored as log-probabilities quantized to 16 bits, as
// llama.cpp's --kl-divergence-base file stores them, at half the bytes of float32 logits. Per row:
//   scale = (max_logit - min_logit) / 65534 over the row's finite logits,
//   q_j = round((logit_j - min_logit) / scale) in 0..65534, 65535 marking a non-finite logit,
//   log_prob_j = min_log_prob + scale * q_j, within scale / 2 of the exact log-prob (plus float
//   rounding of the two stored floats, ~1e-7 relative).
// Beside each row the exact argmax (first maximum: top-1 agreement does not depend on the rounding) and
// the exact log-prob of the token fed (generate) or scored (perplexity), from the float logits in double.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/serialize.hpp"

namespace evalrun {

class H5Writer;
class H5Reader;

inline constexpr std::uint16_t kLogProb16NotFinite = 65535;

// The keep_logits codes of GenerationOptions / PerplexityOptions besides 0 (none) and k > 0 (top-k).
inline constexpr int kKeepFullLogits = -1;
inline constexpr int kKeepLogProbs16 = -2;
inline constexpr const char* kLogProbs16Group = "/logits/logprobs16";
inline constexpr const char* kLogProbs16Values = "/logits/logprobs16/values";  // written by the ranks

struct LogProbRows16 {
  std::vector<std::uint16_t> values;   // [rows, vocab]
  std::vector<float> scale;            // [rows]
  std::vector<float> min_log_prob;     // [rows]
  std::vector<std::int64_t> top_id;    // [rows]; -1 when no logit is finite
  std::vector<double> token_log_prob;  // [rows]

  std::size_t rows() const { return scale.size(); }
  // Quantizes one row of `vocab` logits; `token` is the row's fed or scored id.
  void append(const float* logits, std::int64_t vocab, std::int64_t token);
  void append(const LogProbRows16& other);  // its rows after these
  // Sizes agree with `vocab` (a record read back from a journal or another rank): every per-row
  // array has rows() entries, and `values` rows() rows of `vocab` (with_values) or none (a journaled
  // record whose values the rank wrote into the result file during the run).
  bool consistent(std::int64_t vocab, bool with_values = true) const;
  // The record part ranks send rank 0 and journal (dist/serialize.hpp).
  void put(ByteWriter& w) const {
    w.put_vector(values);
    w.put_vector(scale);
    w.put_vector(min_log_prob);
    w.put_vector(top_id);
    w.put_vector(token_log_prob);
  }
  static LogProbRows16 get(ByteReader& r) {
    LogProbRows16 l;
    l.values = r.get_vector<std::uint16_t>();
    l.scale = r.get_vector<float>();
    l.min_log_prob = r.get_vector<float>();
    l.top_id = r.get_vector<std::int64_t>();
    l.token_log_prob = r.get_vector<double>();
    return l;
  }
  // The group kLogProbs16Group: scale, min_log_prob, top_id, token_log_prob [rows] and an `encoding`
  // attribute saying the formula. Its values [rows, vocab] (uint16, chunked by 4 rows, raw) are the
  // ranks' to write (kLogProbs16Values, io/rank_rows.hpp): every rank holds its own.
  void write(H5Writer& out) const;
};

// Row `q` of `vocab` entries decoded to log-probabilities (NaN where q is kLogProb16NotFinite).
void decode_log_probs16(const std::uint16_t* q, std::int64_t vocab, float scale, float min_log_prob, float* out);

}  // namespace evalrun
