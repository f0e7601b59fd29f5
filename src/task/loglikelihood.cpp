#include "task/loglikelihood.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/errors.hpp"
#include "model/model.hpp"

namespace evalrun {

LoglikPair move_trailing_whitespace(std::string_view context, std::string_view continuation) {
  std::size_t keep = context.size();
  while (keep > 0 && std::string_view(" \t\n\r\v\f").find(context[keep - 1]) != std::string_view::npos) --keep;
  LoglikPair p;
  p.context = std::string(context.substr(0, keep));
  p.continuation = std::string(context.substr(keep)) + std::string(continuation);
  return p;
}

LoglikTokens encode_loglik_pair(std::string_view context, std::string_view continuation, const Encode& encode,
                                const Encode& encode_plain, std::int64_t prefix_id) {
  LoglikTokens t;
  if (context.empty()) {
    // lm-eval: context_enc = [prefix_token_id], continuation_enc = tok_encode(continuation)
    t.context = {prefix_id};
    t.continuation = encode_plain(continuation);
    return t;
  }
  const LoglikPair p = move_trailing_whitespace(context, continuation);
  const std::vector<std::int64_t> whole = encode(p.context + p.continuation);
  t.context = encode(p.context);
  // whole[len(context_enc):], as lm-eval slices (it does not check that context_enc is a prefix)
  const std::size_t n = std::min(t.context.size(), whole.size());
  t.continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(n), whole.end());
  return t;
}

LoglikRequest make_loglik_request(std::uint64_t index, const LoglikTokens& tokens, std::int64_t max_length,
                                  const std::string& where) {
  if (tokens.continuation.empty()) throw InputError(where, "the continuation has no tokens of its own to score");
  if (static_cast<std::int64_t>(tokens.continuation.size()) > max_length) {
    throw InputError(where, "the continuation has " + std::to_string(tokens.continuation.size()) +
                                " tokens, more than the model's " + std::to_string(max_length) + " positions");
  }
  std::vector<std::int64_t> all = tokens.context;
  all.insert(all.end(), tokens.continuation.begin(), tokens.continuation.end());
  LoglikRequest q;
  q.index = index;
  const auto total = static_cast<std::int64_t>(all.size());
  q.truncated = std::max<std::int64_t>(0, total - (max_length + 1));
  q.input.assign(all.begin() + q.truncated, all.end() - 1);
  q.target = tokens.continuation;
  return q;
}

TokenScore score_token(const float* row, std::int64_t vocab, std::int64_t token) {
  std::int64_t best = 0;
  for (std::int64_t v = 1; v < vocab; ++v)
    if (row[v] > row[best]) best = v;
  const double mx = row[best];
  double sum = 0.0;
  for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
  return {static_cast<double>(row[token]) - mx - std::log(sum), best == token};
}

std::vector<LoglikScore> score_loglik_requests(CausalLM& model, const std::vector<LoglikRequest>& requests,
                                               const LoglikOptions& options,
                                               const BatchDone<LoglikScore>& batch_done) {
  if (options.batch_size < 1) throw InputError("loglikelihood: batch_size", "must be at least 1");
  const std::int64_t vocab = model.vocab_size();
  for (const auto& q : requests) {
    if (q.target.empty() || q.target.size() > q.input.size()) {
      throw InputError("loglikelihood: request " + std::to_string(q.index), "its continuation does not fit its input");
    }
    for (const auto* ids : {&q.input, &q.target})
      for (auto id : *ids)
        if (id < 0 || id >= vocab) {
          throw InputError("loglikelihood: request " + std::to_string(q.index),
                           "token id " + std::to_string(id) + " is outside the model's vocabulary");
        }
  }
  // Longest first (as lm-eval's Collator orders them), so a batch holds inputs of similar length and
  // little padding; results stay in the order of `requests`.
  std::vector<std::size_t> order(requests.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return requests[a].input.size() > requests[b].input.size(); });
  std::vector<LoglikScore> out(requests.size());
  std::vector<float> logits;
  double total_seconds = 0.0;
  std::size_t batch = 0;
  for (std::size_t i = 0; i < order.size(); i += static_cast<std::size_t>(options.batch_size)) {
    const std::size_t j = std::min(order.size(), i + static_cast<std::size_t>(options.batch_size));
    const auto rows = static_cast<std::int64_t>(j - i);
    std::int64_t len = 0, real = 0;
    for (std::size_t k = i; k < j; ++k) {
      len = std::max<std::int64_t>(len, static_cast<std::int64_t>(requests[order[k]].input.size()));
      real += static_cast<std::int64_t>(requests[order[k]].input.size());
    }
    std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * len), options.pad_id), pos(ids.size(), 0),
        mask(ids.size(), 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& in = requests[order[i + static_cast<std::size_t>(r)]].input;
      for (std::size_t k = 0; k < in.size(); ++k) {
        const auto at = static_cast<std::size_t>(r * len) + k;
        ids[at] = in[k];
        pos[at] = static_cast<std::int64_t>(k);
        mask[at] = 1;
      }
    }
    auto cache = model.new_cache(rows, len);
    const auto t0 = std::chrono::steady_clock::now();
    model.forward(ids.data(), pos.data(), mask.data(), rows, len, *cache, true, logits);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_seconds += dt;
    log_batch("loglikelihood", batch++, rows, len, real, dt);

    std::vector<std::size_t> members;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::size_t m = order[i + static_cast<std::size_t>(r)];
      const LoglikRequest& q = requests[m];
      LoglikScore& s = out[m];
      s.index = q.index;
      s.num_tokens = static_cast<std::int64_t>(q.target.size());
      s.seconds = dt / static_cast<double>(rows);
      s.is_greedy = true;
      // input position p predicts input[p + 1]; the last target.size() inputs predict the target
      const auto first = static_cast<std::int64_t>(q.input.size() - q.target.size());
      for (std::size_t t = 0; t < q.target.size(); ++t) {
        const float* row = logits.data() + (r * len + first + static_cast<std::int64_t>(t)) * vocab;
        const TokenScore ts = score_token(row, vocab, q.target[t]);
        s.loglikelihood += ts.log_prob;
        s.is_greedy = s.is_greedy && ts.is_argmax;
      }
      members.push_back(m);
    }
    if (batch_done) batch_done(out, members);
    if (options.progress) options.progress(j, requests.size(), total_seconds);
  }
  return out;
}

}  // namespace evalrun
