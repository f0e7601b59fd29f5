// The multiple_choice output type of EleutherAI's lm-evaluation-harness (lm_eval/api/task.py,
// ConfigurableTask.process_results): a document sends one loglikelihood request per choice
// (task/loglikelihood.hpp: the same encoding, truncation and double accumulation) and is scored by
//   acc       argmax_i ll_i == gold                         (np.argmax: the first maximum wins ties)
//   acc_norm  argmax_i ll_i / len(choice_i) == gold         (len of the Python str: Unicode code points
//                                                            of the choice text without the delimiter)
// aggregated by mean with lm-eval's mean_stderr (sample standard deviation / sqrt(n)).
//
// A document is one work item (all its choices on one rank). With share_context its choices' common
// context runs through the model once: one forward of the context fills a KV cache, then each choice's
// continuation is appended to that cache with the keys of the earlier choices masked out and its own
// positions (context length + k), so every choice sees exactly the keys and positions of its own
// per-request forward. Documents whose requests do not share one untruncated context (partial scoring
// as Winogrande, a left-truncated request), or whose cache would not fit in the model's sliding
// window (ModelDims::sliding_window counts cache slots, and the shared layout leaves gaps), are
// scored per request.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dist/serialize.hpp"
#include "task/batch_done.hpp"
#include "task/loglikelihood.hpp"
#include "task/task_document.hpp"

namespace evalrun {

class CausalLM;

// One document's requests, in choice order.
struct McDocWork {
  std::uint64_t index = 0;  // the document's position in the run
  std::vector<LoglikRequest> requests;

  void write(ByteWriter& w) const {
    w.put<std::uint64_t>(index);
    w.put<std::uint64_t>(requests.size());
    for (const auto& q : requests) q.write(w);
  }
  static McDocWork read(ByteReader& r) {
    McDocWork d;
    d.index = r.get<std::uint64_t>();
    const auto n = r.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < n; ++i) d.requests.push_back(LoglikRequest::read(r));
    return d;
  }
  // Tokens the document feeds when each request runs on its own (the sharding cost).
  std::int64_t cost() const {
    std::int64_t c = 0;
    for (const auto& q : requests) c += static_cast<std::int64_t>(q.input.size());
    return c;
  }
};

// The work item of `doc` (run position `index`): each request encoded as the loglikelihood task does
// (encode_loglik_pair, make_loglik_request: trailing context spaces move to the continuation, left
// truncation to max_length); request indices first_request, first_request + 1, ... InputError naming
// doc.where for a document without requests, an empty context without a prefix token, an empty or
// too long continuation.
McDocWork make_mc_work(std::uint64_t index, const TaskDocument& doc, std::uint64_t first_request, const Encode& encode,
                       const Encode& encode_plain, std::int64_t prefix_id, std::int64_t max_length);

// One document's scores, one per choice (the journal and gather record).
struct McDocScores {
  std::uint64_t index = 0;
  std::vector<LoglikScore> choices;

  void write(ByteWriter& w) const {
    w.put<std::uint64_t>(choices.size());
    for (const auto& s : choices) s.write(w);
  }
  static McDocScores read(ByteReader& r) {
    McDocScores d;
    const auto n = r.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < n; ++i) d.choices.push_back(LoglikScore::read(r));
    return d;
  }
};

// The length of the context the requests of `doc` share (input = context + target[:-1] for every
// request, none truncated), or 0 when they do not share one.
std::size_t shared_context_length(const McDocWork& doc);

struct McOptions {
  int batch_size = 1;        // documents per batch with share_context; requests per batch without
  std::int64_t pad_id = 0;   // any vocabulary id: padding is masked and never scored
  bool share_context = true; // run each document's context once (above); false: every request alone
  std::function<void(std::size_t, std::size_t, double)> progress;  // (documents done, total, model s)
};

// Scores `docs`; results in the order of `docs`, scores in choice order. The log-likelihoods equal
// score_loglik_requests on the same requests to float rounding, whichever share_context.
std::vector<McDocScores> score_mc_documents(CausalLM& model, const std::vector<McDocWork>& docs,
                                            const McOptions& options, const BatchDone<McDocScores>& batch_done = {});

// One document's decisions.
struct McDecision {
  std::int64_t pred = 0;       // argmax ll (first maximum)
  std::int64_t pred_norm = 0;  // argmax ll / utf8_code_point_count(choice) (first maximum)
  bool acc = false, acc_norm = false;
};
// InputError naming `where` for a count mismatch, a gold outside the choices, an empty choice.
McDecision decide_multiple_choice(const std::vector<double>& loglikelihoods, const std::vector<std::string>& choices,
                                  std::int64_t gold, const std::string& where);

}  // namespace evalrun
