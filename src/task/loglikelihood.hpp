// The loglikelihood request type of EleutherAI's lm-evaluation-harness (HFLM, lm_eval/models/
// huggingface.py): for a (context, continuation) pair, log p(continuation | context) under a decoder,
// and whether the continuation is the model's greedy choice token by token.
//
//   split:   trailing spaces of the context move to the front of the continuation (_encode_pair),
//            so " word" is scored as the continuation's own leading-space token;
//   encode:  whole = tok(context + continuation), context_enc = tok(context),
//            continuation_enc = whole[len(context_enc):]; an empty context is [prefix id] (BOS, else
//            EOS) and continuation_enc = tok(continuation) without BOS;
//   feed:    (context_enc + continuation_enc)[-(max_length + 1):][:-1], i.e. left-truncated to
//            max_length tokens; the logits of the last len(continuation_enc) inputs score the
//            continuation.
//
// A request is one work item with a global index; the flow (app/flows/loglikelihood_flow.cpp)
// tokenizes and shards them, score_loglik_requests runs any subset.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dist/serialize.hpp"
#include "task/batch_done.hpp"

namespace evalrun {

class CausalLM;

// _encode_pair's split: n = len(context) - len(context.rstrip()) trailing whitespace characters (the
// ASCII ones " \t\n\r\v\f"; Python's rstrip also strips Unicode spaces, which stay here), then
// context[:-n] and context[-n:] + continuation.
struct LoglikPair {
  std::string context;
  std::string continuation;
};
LoglikPair move_trailing_whitespace(std::string_view context, std::string_view continuation);

// Token ids of one request: context_enc and continuation_enc as above. `encode` is tok() (the
// tokenizer's own BOS rule), `encode_plain` the same without BOS, prefix_id BOS (else EOS) for an empty
// context. An empty continuation_enc is left to the caller to refuse.
struct LoglikTokens {
  std::vector<std::int64_t> context;
  std::vector<std::int64_t> continuation;
};
using Encode = std::function<std::vector<std::int64_t>(std::string_view)>;
LoglikTokens encode_loglik_pair(std::string_view context, std::string_view continuation, const Encode& encode,
                                const Encode& encode_plain, std::int64_t prefix_id);

// One work item: the model input and the tokens it scores.
struct LoglikRequest {
  std::uint64_t index = 0;
  std::vector<std::int64_t> input;  // (context + continuation)[-(max_length + 1):][:-1]
  std::vector<std::int64_t> target; // continuation_enc: predicted by the last target.size() inputs
  std::int64_t truncated = 0;       // tokens cut from the left

  void write(ByteWriter& w) const {
    w.put<std::uint64_t>(index);
    w.put_vector(input);
    w.put_vector(target);
    w.put<std::int64_t>(truncated);
  }
  static LoglikRequest read(ByteReader& r) {
    LoglikRequest q;
    q.index = r.get<std::uint64_t>();
    q.input = r.get_vector<std::int64_t>();
    q.target = r.get_vector<std::int64_t>();
    q.truncated = r.get<std::int64_t>();
    return q;
  }
};

// The request of `tokens` for a model of max_length positions. InputError (naming `where`) for an
// empty continuation or one longer than max_length (nothing of the context would be left).
LoglikRequest make_loglik_request(std::uint64_t index, const LoglikTokens& tokens, std::int64_t max_length,
                                  const std::string& where);

struct LoglikScore {
  std::uint64_t index = 0;
  double loglikelihood = 0.0;  // sum of log_softmax(logits)[token] over the continuation, in double
  bool is_greedy = false;      // every continuation token is its row's argmax (ties: lower id)
  std::int64_t num_tokens = 0; // continuation tokens scored
  double seconds = 0.0;        // this request's share of its batch's model time

  void write(ByteWriter& w) const {  // the journal and gather record; the index travels beside it
    w.put<double>(loglikelihood);
    w.put<std::uint8_t>(is_greedy ? 1 : 0);
    w.put<std::int64_t>(num_tokens);
    w.put<double>(seconds);
  }
  static LoglikScore read(ByteReader& r) {
    LoglikScore s;
    s.loglikelihood = r.get<double>();
    s.is_greedy = r.get<std::uint8_t>() != 0;
    s.num_tokens = r.get<std::int64_t>();
    s.seconds = r.get<double>();
    return s;
  }
};

struct LoglikOptions {
  int batch_size = 1;
  std::int64_t pad_id = 0;  // any id of the vocabulary: right padding is masked and never scored
  // Called after each batch with (requests done, requests total, seconds spent in the model so far).
  std::function<void(std::size_t, std::size_t, double)> progress;
};

// Scores `requests` in batches of batch_size, longest inputs first; results in the order of
// `requests`. A batch is right-padded to its longest input (pads masked and after every real token,
// so causal attention never sees them; positions 0.. per row), as lm-eval pads, and runs once with
// all_positions = true.
std::vector<LoglikScore> score_loglik_requests(CausalLM& model, const std::vector<LoglikRequest>& requests,
                                               const LoglikOptions& options,
                                               const BatchDone<LoglikScore>& batch_done = {});

// log_softmax(row)[token] in double, and whether token is the row's argmax (lower id wins ties).
struct TokenScore {
  double log_prob = 0.0;
  bool is_argmax = false;
};
TokenScore score_token(const float* row, std::int64_t vocab, std::int64_t token);

}  // namespace evalrun
