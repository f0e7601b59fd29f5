// Perplexity of a decoder model over one token stream, with the sliding-window recipe of Hugging
// Face's guide "Perplexity of fixed-length models" (transformers docs, perplexity.md):
//
//   prev_end = 0
//   for begin in range(0, n, stride):
//       end = min(begin + context_length, n); trg_len = end - prev_end
//       feed tokens[begin:end]; score only the last trg_len tokens of the window
//       prev_end = end; if end == n: break
//
// The first token of a window has no prediction inside it, so it is never scored by that window:
// window w scores positions [max(end - trg_len, begin + 1), end). Every token is scored at most once;
// with stride == context_length the windows do not overlap and each window's first token (and the
// stream's first) goes unscored. The mean is over the scored tokens themselves (the guide's current,
// token-weighted version), not over windows.
//
// The stream is the whole text tokenized once (DecoderTokenizer::encode: BOS per the tokenizer) by
// the caller. Windows are independent work items: each has a global index, so they can be spread over
// ranks and the results put back in order; summarize_perplexity gives the totals.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dist/serialize.hpp"
#include "io/logprobs16.hpp"
#include "task/batch_done.hpp"

namespace evalrun {

class CausalLM;

struct PerplexityOptions {
  int context_length = 0;  // tokens per window (>= 2); e.g. the model's max_position_embeddings
  int stride = 0;          // 0 = context_length; 1 <= stride <= context_length
  int batch_size = 1;      // windows of equal length run together (fresh cache per batch)
  // per scored token: 0 none, kKeepFullLogits the full row that predicted it, k > 0 top-k,
  // kKeepLogProbs16 that row's 16-bit log-probabilities
  int keep_logits = 0;
  // Called after each batch with (windows done, windows total, seconds spent in the model so far).
  std::function<void(std::size_t, std::size_t, double)> progress;
};

struct PerplexityWindow {
  std::uint64_t index = 0;     // window number in the recipe's loop
  std::int64_t begin = 0;      // tokens [begin, end) are fed
  std::int64_t end = 0;
  std::int64_t score_from = 0; // tokens [score_from, end) are scored (empty when score_from == end)

  void write(ByteWriter& w) const {  // a shard is put_records() of windows
    w.put<std::uint64_t>(index);
    w.put<std::int64_t>(begin);
    w.put<std::int64_t>(end);
    w.put<std::int64_t>(score_from);
  }
  static PerplexityWindow read(ByteReader& r) {
    PerplexityWindow p;
    p.index = r.get<std::uint64_t>();
    p.begin = r.get<std::int64_t>();
    p.end = r.get<std::int64_t>();
    p.score_from = r.get<std::int64_t>();
    return p;
  }
};

// What every rank gets besides its windows: the whole token stream and the context length.
struct PerplexityStream {
  std::vector<std::int64_t> tokens;
  std::int64_t context_length = 0;

  void write(ByteWriter& w) const {
    w.put_vector(tokens);
    w.put<std::int64_t>(context_length);
  }
  static PerplexityStream read(ByteReader& r) {
    PerplexityStream s;
    s.tokens = r.get_vector<std::int64_t>();
    s.context_length = r.get<std::int64_t>();
    return s;
  }
};

// The recipe's windows over n_tokens. InputError for context_length < 2, stride outside
// [1, context_length] (after stride 0 -> context_length) or a stream of fewer than 2 tokens.
std::vector<PerplexityWindow> make_perplexity_windows(std::int64_t n_tokens, int context_length, int stride);

struct WindowScores {
  std::uint64_t index = 0;
  std::vector<std::int64_t> positions;  // stream positions of the scored tokens, ascending
  std::vector<double> log_probs;        // natural log p(tokens[pos] | tokens[begin:pos])
  std::int64_t vocab = 0;
  std::vector<float> logits;            // keep_logits -1: [positions.size(), vocab]
  std::vector<std::int64_t> topk_ids;   // keep_logits k > 0: [positions.size(), k], ties lower id first
  std::vector<float> topk_logits;
  LogProbRows16 logprobs16;             // kKeepLogProbs16: a row per scored token
  double seconds = 0.0;                 // this window's share of its batch's model time

  // The record a rank journals and sends to rank 0; the index travels beside it, not in it.
  void write(ByteWriter& w) const {
    w.put_vector(positions);
    w.put_vector(log_probs);
    w.put<std::int64_t>(vocab);
    w.put_vector(logits);
    w.put_vector(topk_ids);
    w.put_vector(topk_logits);
    logprobs16.put(w);
    w.put<double>(seconds);
  }
  static WindowScores read(ByteReader& r) {
    WindowScores s;
    s.positions = r.get_vector<std::int64_t>();
    s.log_probs = r.get_vector<double>();
    s.vocab = r.get<std::int64_t>();
    s.logits = r.get_vector<float>();
    s.topk_ids = r.get_vector<std::int64_t>();
    s.topk_logits = r.get_vector<float>();
    s.logprobs16 = LogProbRows16::get(r);
    s.seconds = r.get<double>();
    return s;
  }
};

// Runs the given windows (any subset of make_perplexity_windows' result) over `tokens`; results in
// the order of `windows`. Each batch: forward with all_positions = true on a fresh cache, positions
// 0.. within the window, no padding (a batch only holds windows of one length).
std::vector<WindowScores> score_perplexity_windows(CausalLM& model, const std::vector<std::int64_t>& tokens,
                                                   const std::vector<PerplexityWindow>& windows,
                                                   const PerplexityOptions& options,
                                                   const BatchDone<WindowScores>& batch_done = {});

struct PerplexitySummary {
  std::int64_t n_scored = 0;
  double mean_nll = 0.0;           // -mean(log_probs), nats per token
  double perplexity = 0.0;         // exp(mean_nll)
  // Delta method: perplexity * sd(nll) / sqrt(n), sd with n - 1 (sample), 0 for n < 2.
  double perplexity_stderr = 0.0;
};
PerplexitySummary summarize_perplexity(const std::vector<double>& log_probs);

// Everything on one rank: the windows, their scores in stream order, and the summary.
struct PerplexityResult {
  std::vector<PerplexityWindow> windows;
  std::vector<WindowScores> scores;  // one per window
  PerplexitySummary summary;
};
PerplexityResult run_perplexity(CausalLM& model, const std::vector<std::int64_t>& tokens,
                                const PerplexityOptions& options);

}  // namespace evalrun
