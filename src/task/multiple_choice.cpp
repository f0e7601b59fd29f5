#include "task/multiple_choice.hpp"

#include "common/utf8.hpp"

#include <algorithm>
#include <chrono>

#include "common/errors.hpp"
#include "model/model.hpp"

namespace evalrun {

std::size_t shared_context_length(const McDocWork& doc) {
  if (doc.requests.empty()) return 0;
  const LoglikRequest& first = doc.requests.front();
  const std::size_t n = first.input.size() + 1 - first.target.size();  // input = context + target[:-1]
  for (const auto& q : doc.requests) {
    if (q.truncated != 0 || q.target.empty() || q.input.size() + 1 - q.target.size() != n) return 0;
    if (!std::equal(first.input.begin(), first.input.begin() + static_cast<std::ptrdiff_t>(n), q.input.begin())) return 0;
  }
  return n;
}

McDocWork make_mc_work(std::uint64_t index, const TaskDocument& doc, std::uint64_t first_request, const Encode& encode,
                       const Encode& encode_plain, std::int64_t prefix_id, std::int64_t max_length) {
  if (doc.requests.empty()) throw InputError(doc.where, "the document has no choices to score");
  McDocWork w;
  w.index = index;
  for (std::size_t i = 0; i < doc.requests.size(); ++i) {
    const TaskRequestText& r = doc.requests[i];
    if (r.context.empty() && prefix_id < 0) {
      throw InputError(doc.where, "the context is empty and the tokenizer has neither a BOS nor an EOS token to use instead");
    }
    const LoglikTokens t = encode_loglik_pair(r.context, r.continuation, encode, encode_plain, prefix_id);
    w.requests.push_back(make_loglik_request(first_request + i, t, max_length,
                                             doc.where + " (choice " + std::to_string(i) + ")"));
  }
  return w;
}

namespace {

void check_ids(const LoglikRequest& q, std::int64_t vocab) {
  for (const auto* ids : {&q.input, &q.target})
    for (auto id : *ids)
      if (id < 0 || id >= vocab) {
        throw InputError("multiple_choice: request " + std::to_string(q.index),
                         "token id " + std::to_string(id) + " is outside the model's vocabulary");
      }
}

// The cache a set of shared-context documents needs: the longest context, then per step k the
// longest choice k (its target[:-1], the tokens appended).
struct Extent {
  std::int64_t context = 0;
  std::vector<std::int64_t> steps;
  void add(const McDocWork& d) {
    context = std::max<std::int64_t>(context, static_cast<std::int64_t>(shared_context_length(d)));
    if (steps.size() < d.requests.size()) steps.resize(d.requests.size(), 0);
    for (std::size_t k = 0; k < d.requests.size(); ++k)
      steps[k] = std::max<std::int64_t>(steps[k], static_cast<std::int64_t>(d.requests[k].target.size()) - 1);
  }
  std::int64_t capacity() const {
    std::int64_t c = context;
    for (auto s : steps) c += s;
    return c;
  }
};

// The documents `rows` (positions in docs, each with a shared context) in one batch: the contexts
// right-padded in one forward, then step k appends every document's choice k (its target[:-1]) with
// the keys of steps < k masked out, at positions context_length + t.
void score_shared_batch(CausalLM& model, const std::vector<McDocWork>& docs, const std::vector<std::size_t>& rows,
                        std::int64_t pad_id, std::vector<McDocScores>& out, double& seconds) {
  const std::int64_t vocab = model.vocab_size();
  const auto B = static_cast<std::int64_t>(rows.size());
  std::vector<std::int64_t> ctx_len(rows.size());
  Extent extent;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    ctx_len[r] = static_cast<std::int64_t>(shared_context_length(docs[rows[r]]));
    extent.add(docs[rows[r]]);
  }
  const std::int64_t Lc = extent.context, capacity = extent.capacity();
  const std::vector<std::int64_t>& step_len = extent.steps;  // per step k the longest target[:-1]
  const auto steps = static_cast<std::int64_t>(step_len.size());

  // The key mask of everything in the cache so far, [B, capacity] (only the first `filled` columns used).
  std::vector<std::int64_t> keys(static_cast<std::size_t>(B * capacity), 0);
  auto cache = model.new_cache(B, capacity);
  std::vector<float> logits;
  const auto run = [&](const std::vector<std::int64_t>& ids, const std::vector<std::int64_t>& pos, std::int64_t filled,
                       std::int64_t seq) {
    std::vector<std::int64_t> mask(static_cast<std::size_t>(B * (filled + seq)));
    for (std::int64_t b = 0; b < B; ++b)
      std::copy_n(keys.begin() + b * capacity, filled + seq, mask.begin() + b * (filled + seq));
    const auto t0 = std::chrono::steady_clock::now();
    model.forward(ids.data(), pos.data(), mask.data(), B, seq, *cache, true, logits);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  for (std::size_t r = 0; r < rows.size(); ++r) {
    McDocScores& s = out[rows[r]];
    s.index = docs[rows[r]].index;
    s.choices.assign(docs[rows[r]].requests.size(), LoglikScore{});
    for (std::size_t k = 0; k < s.choices.size(); ++k) {
      s.choices[k].index = docs[rows[r]].requests[k].index;
      s.choices[k].num_tokens = static_cast<std::int64_t>(docs[rows[r]].requests[k].target.size());
      s.choices[k].is_greedy = true;
    }
  }

  // The contexts: the last context row predicts every choice's first target token.
  {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(B * Lc), pad_id), pos(ids.size(), 0);
    for (std::int64_t b = 0; b < B; ++b) {
      const auto& in = docs[rows[static_cast<std::size_t>(b)]].requests.front().input;
      for (std::int64_t t = 0; t < ctx_len[static_cast<std::size_t>(b)]; ++t) {
        ids[static_cast<std::size_t>(b * Lc + t)] = in[static_cast<std::size_t>(t)];
        pos[static_cast<std::size_t>(b * Lc + t)] = t;
        keys[static_cast<std::size_t>(b * capacity + t)] = 1;
      }
    }
    run(ids, pos, 0, Lc);
    for (std::int64_t b = 0; b < B; ++b) {
      const float* row = logits.data() + (b * Lc + ctx_len[static_cast<std::size_t>(b)] - 1) * vocab;
      const auto& reqs = docs[rows[static_cast<std::size_t>(b)]].requests;
      for (std::size_t k = 0; k < reqs.size(); ++k) {
        const TokenScore ts = score_token(row, vocab, reqs[k].target.front());
        LoglikScore& sc = out[rows[static_cast<std::size_t>(b)]].choices[k];
        sc.loglikelihood += ts.log_prob;
        sc.is_greedy = sc.is_greedy && ts.is_argmax;
      }
    }
  }
  std::int64_t filled = Lc;
  for (std::int64_t k = 0; k < steps; ++k) {
    const std::int64_t S = step_len[static_cast<std::size_t>(k)];
    if (S == 0) continue;  // every choice k is one token: scored from the context's last row
    std::vector<std::int64_t> ids(static_cast<std::size_t>(B * S), pad_id), pos(ids.size(), 0);
    for (std::int64_t b = 0; b < B; ++b) {
      // the previous choices' keys are no part of this choice's context
      std::fill_n(keys.begin() + b * capacity + Lc, filled - Lc, 0);
      const auto& reqs = docs[rows[static_cast<std::size_t>(b)]].requests;
      if (static_cast<std::size_t>(k) >= reqs.size()) continue;
      const auto& target = reqs[static_cast<std::size_t>(k)].target;
      for (std::size_t t = 0; t + 1 < target.size(); ++t) {
        const auto at = static_cast<std::size_t>(b * S) + t;
        ids[at] = target[t];
        pos[at] = ctx_len[static_cast<std::size_t>(b)] + static_cast<std::int64_t>(t);
        keys[static_cast<std::size_t>(b * capacity + filled) + t] = 1;
      }
    }
    run(ids, pos, filled, S);
    for (std::int64_t b = 0; b < B; ++b) {
      const auto& reqs = docs[rows[static_cast<std::size_t>(b)]].requests;
      if (static_cast<std::size_t>(k) >= reqs.size()) continue;
      const auto& target = reqs[static_cast<std::size_t>(k)].target;
      LoglikScore& sc = out[rows[static_cast<std::size_t>(b)]].choices[static_cast<std::size_t>(k)];
      for (std::size_t t = 0; t + 1 < target.size(); ++t) {  // input target[t] predicts target[t + 1]
        const float* row = logits.data() + (b * S + static_cast<std::int64_t>(t)) * vocab;
        const TokenScore ts = score_token(row, vocab, target[t + 1]);
        sc.loglikelihood += ts.log_prob;
        sc.is_greedy = sc.is_greedy && ts.is_argmax;
      }
    }
    filled += S;
  }
}

}  // namespace

std::vector<McDocScores> score_mc_documents(CausalLM& model, const std::vector<McDocWork>& docs,
                                            const McOptions& options, const BatchDone<McDocScores>& batch_done) {
  if (options.batch_size < 1) throw InputError("multiple_choice: batch_size", "must be at least 1");
  const std::int64_t vocab = model.vocab_size();
  for (const auto& d : docs) {
    if (d.requests.empty()) throw InputError("multiple_choice: document " + std::to_string(d.index), "has no choices");
    for (const auto& q : d.requests) {
      if (q.target.empty() || q.target.size() > q.input.size()) {
        throw InputError("multiple_choice: request " + std::to_string(q.index),
                         "its continuation does not fit its input");
      }
      check_ids(q, vocab);
    }
  }
  std::vector<McDocScores> out(docs.size());
  const auto B = static_cast<std::size_t>(options.batch_size);
  double seconds = 0.0;
  std::size_t done = 0;
  const auto finished = [&](const std::vector<std::size_t>& members) {
    done += members.size();
    if (batch_done) batch_done(out, members);
    if (options.progress) options.progress(done, docs.size(), seconds);
  };

  // A sliding window counts cache slots, and a shared-context row leaves gaps (context padding, the
  // earlier choices): only a batch whose cache fits in the window (where the window cuts nothing, in
  // either layout) may share; a document that cannot fit alone is scored per request.
  const std::int64_t window = model.dims().sliding_window;
  const auto fits = [&](std::int64_t capacity) { return window <= 0 || capacity <= window + 1; };
  std::vector<std::size_t> shared, separate;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    Extent alone;
    alone.add(docs[i]);
    const bool share = options.share_context && shared_context_length(docs[i]) > 0 && fits(alone.capacity());
    (share ? shared : separate).push_back(i);
  }

  // Shared contexts: longest documents first, up to batch_size documents a batch (fewer where the
  // batch would outgrow a sliding window).
  std::stable_sort(shared.begin(), shared.end(),
                   [&](std::size_t a, std::size_t b) { return docs[a].cost() > docs[b].cost(); });
  for (std::size_t i = 0; i < shared.size();) {
    std::vector<std::size_t> rows = {shared[i++]};
    Extent extent;
    extent.add(docs[rows.front()]);
    while (i < shared.size() && rows.size() < B) {
      Extent more = extent;
      more.add(docs[shared[i]]);
      if (!fits(more.capacity())) break;
      extent = std::move(more);
      rows.push_back(shared[i++]);
    }
    const double before = seconds;
    score_shared_batch(model, docs, rows, options.pad_id, out, seconds);
    std::size_t n = 0;
    for (auto r : rows) n += docs[r].requests.size();
    for (auto r : rows)
      for (auto& sc : out[r].choices) sc.seconds = (seconds - before) / static_cast<double>(n);
    log().debug("multiple_choice shared-context batch: {} documents, {} requests", rows.size(), n);
    finished(rows);
  }

  // Every request alone: batch_size documents' requests a call, in batches of batch_size requests.
  LoglikOptions lo;
  lo.batch_size = options.batch_size;
  lo.pad_id = options.pad_id;
  for (std::size_t i = 0; i < separate.size(); i += B) {
    const std::vector<std::size_t> members(
        separate.begin() + static_cast<std::ptrdiff_t>(i),
        separate.begin() + static_cast<std::ptrdiff_t>(std::min(separate.size(), i + B)));
    std::vector<LoglikRequest> requests;
    for (auto m : members) requests.insert(requests.end(), docs[m].requests.begin(), docs[m].requests.end());
    const auto scores = score_loglik_requests(model, requests, lo);
    std::size_t at = 0;
    for (auto m : members) {
      out[m].index = docs[m].index;
      out[m].choices.assign(scores.begin() + static_cast<std::ptrdiff_t>(at),
                            scores.begin() + static_cast<std::ptrdiff_t>(at + docs[m].requests.size()));
      at += docs[m].requests.size();
    }
    for (const auto& s : scores) seconds += s.seconds;
    finished(members);
  }
  return out;
}

McDecision decide_multiple_choice(const std::vector<double>& loglikelihoods, const std::vector<std::string>& choices,
                                  std::int64_t gold, const std::string& where) {
  if (loglikelihoods.size() != choices.size() || choices.empty()) {
    throw InputError(where, std::to_string(loglikelihoods.size()) + " log-likelihoods for " +
                                std::to_string(choices.size()) + " choices");
  }
  if (gold < 0 || gold >= static_cast<std::int64_t>(choices.size())) {
    throw InputError(where, "gold " + std::to_string(gold) + " is not the index of one of its " +
                                std::to_string(choices.size()) + " choices");
  }
  McDecision d;
  double best = loglikelihoods[0], best_norm = 0.0;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const std::size_t len = utf8_code_point_count(choices[i]);
    if (len == 0) throw InputError(where, "choice " + std::to_string(i) + " is empty (acc_norm divides by its length)");
    const double norm = loglikelihoods[i] / static_cast<double>(len);
    if (loglikelihoods[i] > best) best = loglikelihoods[i], d.pred = static_cast<std::int64_t>(i);  // strict: first max
    if (i == 0 || norm > best_norm) best_norm = norm, d.pred_norm = static_cast<std::int64_t>(i);
  }
  d.acc = d.pred == gold;
  d.acc_norm = d.pred_norm == gold;
  return d;
}

}  // namespace evalrun
