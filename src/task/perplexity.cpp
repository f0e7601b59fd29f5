#include "task/perplexity.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/errors.hpp"
#include "model/model.hpp"
#include "task/mlm.hpp"

namespace evalrun {

std::vector<PerplexityWindow> make_perplexity_windows(std::int64_t n_tokens, int context_length, int stride) {
  if (context_length < 2) throw InputError("perplexity: context_length", "must be at least 2");
  if (stride == 0) stride = context_length;
  if (stride < 1 || stride > context_length) {
    throw InputError("perplexity: stride", "must be between 1 and context_length (" + std::to_string(context_length) + ")");
  }
  if (n_tokens < 2) throw InputError("perplexity", "the token stream has fewer than 2 tokens: nothing to score");
  std::vector<PerplexityWindow> windows;
  std::int64_t prev_end = 0;
  for (std::int64_t begin = 0; begin < n_tokens; begin += stride) {
    PerplexityWindow w;
    w.index = windows.size();
    w.begin = begin;
    w.end = std::min<std::int64_t>(begin + context_length, n_tokens);
    const std::int64_t trg_len = w.end - prev_end;
    w.score_from = std::max(w.end - trg_len, begin + 1);
    windows.push_back(w);
    prev_end = w.end;
    if (w.end == n_tokens) break;
  }
  return windows;
}

std::vector<WindowScores> score_perplexity_windows(CausalLM& model, const std::vector<std::int64_t>& tokens,
                                                   const std::vector<PerplexityWindow>& windows,
                                                   const PerplexityOptions& options,
                                                   const BatchDone<WindowScores>& batch_done) {
  if (options.batch_size < 1) throw InputError("perplexity: batch_size", "must be at least 1");
  if (options.keep_logits < kKeepLogProbs16)
    throw InputError("perplexity: keep_logits", "must be kKeepFullLogits, kKeepLogProbs16, 0 or k > 0");
  const std::int64_t vocab = model.vocab_size();
  const auto n = static_cast<std::int64_t>(tokens.size());
  for (const auto& w : windows) {
    if (w.begin < 0 || w.end > n || w.begin >= w.end || w.score_from <= w.begin || w.score_from > w.end) {
      throw InputError("perplexity: window " + std::to_string(w.index), "does not fit the token stream");
    }
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw InputError("perplexity: token " + std::to_string(i),
                       "id " + std::to_string(tokens[i]) + " is outside the model's vocabulary");
    }
  }

  std::vector<WindowScores> out(windows.size());
  std::vector<float> logits;
  double total_seconds = 0.0;
  std::size_t i = 0, batch = 0;
  while (i < windows.size()) {
    // Skip windows with nothing to score (a 1-token last window).
    if (windows[i].score_from == windows[i].end) {
      out[i].index = windows[i].index;
      out[i].vocab = vocab;
      if (batch_done) batch_done(out, {i});
      ++i;
      continue;
    }
    // A batch: consecutive windows of the same length that score something.
    const std::int64_t len = windows[i].end - windows[i].begin;
    std::size_t j = i;
    std::vector<std::size_t> members;
    while (j < windows.size() && members.size() < static_cast<std::size_t>(options.batch_size) &&
           windows[j].end - windows[j].begin == len && windows[j].score_from < windows[j].end) {
      members.push_back(j);
      ++j;
    }
    const auto rows = static_cast<std::int64_t>(members.size());
    std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * len)), pos(ids.size()), mask(ids.size(), 1);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& w = windows[members[r]];
      for (std::int64_t k = 0; k < len; ++k) {
        ids[r * len + k] = tokens[static_cast<std::size_t>(w.begin + k)];
        pos[r * len + k] = k;
      }
    }
    auto cache = model.new_cache(rows, len);
    const auto t0 = std::chrono::steady_clock::now();
    model.forward(ids.data(), pos.data(), mask.data(), rows, len, *cache, true, logits);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_seconds += dt;
    log_batch("perplexity", batch++, rows, len, rows * len, dt);  // windows of one length: no padding

    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& w = windows[members[r]];
      WindowScores& s = out[members[r]];
      s.index = w.index;
      s.vocab = vocab;
      s.seconds = dt / static_cast<double>(rows);
      for (std::int64_t p = w.score_from; p < w.end; ++p) {
        // The logits at window offset p - 1 - begin predict the token at stream position p.
        const float* row = logits.data() + (r * len + (p - 1 - w.begin)) * vocab;
        float mx = row[0];
        for (std::int64_t v = 1; v < vocab; ++v) mx = std::max(mx, row[v]);
        double sum = 0.0;
        for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
        const double lse = static_cast<double>(mx) + std::log(sum);
        s.positions.push_back(p);
        s.log_probs.push_back(static_cast<double>(row[tokens[static_cast<std::size_t>(p)]]) - lse);
        if (options.keep_logits == kKeepFullLogits) {
          s.logits.insert(s.logits.end(), row, row + vocab);
        } else if (options.keep_logits == kKeepLogProbs16) {
          s.logprobs16.append(row, vocab, tokens[static_cast<std::size_t>(p)]);
        } else if (options.keep_logits > 0) {
          const MaskTopK top = top_k_of_row(row, vocab, options.keep_logits);
          s.topk_ids.insert(s.topk_ids.end(), top.ids.begin(), top.ids.end());
          s.topk_logits.insert(s.topk_logits.end(), top.logits.begin(), top.logits.end());
        }
      }
    }
    if (batch_done) batch_done(out, members);
    i = j;
    if (options.progress) options.progress(i, windows.size(), total_seconds);
  }
  return out;
}

PerplexitySummary summarize_perplexity(const std::vector<double>& log_probs) {
  PerplexitySummary s;
  s.n_scored = static_cast<std::int64_t>(log_probs.size());
  if (log_probs.empty()) return s;
  double sum = 0.0;
  for (double lp : log_probs) sum -= lp;
  const double n = static_cast<double>(log_probs.size());
  s.mean_nll = sum / n;
  s.perplexity = std::exp(s.mean_nll);
  if (log_probs.size() >= 2) {
    double var = 0.0;
    for (double lp : log_probs) var += (-lp - s.mean_nll) * (-lp - s.mean_nll);
    const double sd = std::sqrt(var / (n - 1.0));
    s.perplexity_stderr = s.perplexity * sd / std::sqrt(n);
  }
  return s;
}

PerplexityResult run_perplexity(CausalLM& model, const std::vector<std::int64_t>& tokens,
                                const PerplexityOptions& options) {
  PerplexityResult r;
  r.windows = make_perplexity_windows(static_cast<std::int64_t>(tokens.size()), options.context_length, options.stride);
  r.scores = score_perplexity_windows(model, tokens, r.windows, options);
  std::vector<double> all;
  for (const auto& s : r.scores) all.insert(all.end(), s.log_probs.begin(), s.log_probs.end());
  r.summary = summarize_perplexity(all);
  return r;
}

}  // namespace evalrun
