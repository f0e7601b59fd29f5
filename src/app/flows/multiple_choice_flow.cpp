// task.kind = "multiple_choice": lm-evaluation-harness's multiple_choice output type over a task file's
// documents (task/task_file.hpp, task/multiple_choice.hpp). rank 0 builds the documents (few-shot
// included), encodes each choice as a loglikelihood request and shards the documents by tokens (all the
// choices of a document on one rank, so its context can run once); every rank scores its documents;
// rank 0 decides acc / acc_norm, writes the result file and, when asked, lm-eval's results JSON and
// samples JSONL.
#include <functional>

#include "app/flows/decoder_flow.hpp"
#include "app/flows/flows.hpp"
#include "app/result_file.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "io/hdf5_file.hpp"
#include "task/input_limits.hpp"
#include "task/mc_report.hpp"
#include "task/multiple_choice.hpp"

namespace evalrun {
namespace {

// The documents' work items as the run feeds them (rank 0, and the calibration inputs).
std::vector<McDocWork> encode_documents(const std::vector<TaskDocument>& docs, const DecoderTokenizer& tok,
                                        std::int64_t max_length) {
  const std::int64_t prefix = tok.bos_id() >= 0 ? tok.bos_id() : tok.eos_id();
  const Encode encode = [&](std::string_view s) { return tok.encode(s); };
  const Encode plain = [&](std::string_view s) { return tok.encode_without_bos(s); };
  std::vector<McDocWork> out;
  std::uint64_t first_request = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    out.push_back(make_mc_work(i, docs[i], first_request, encode, plain, prefix, max_length));
    first_request += out.back().requests.size();
  }
  return out;
}

class MultipleChoiceFlow : public DecoderFlow {
 public:
  MultipleChoiceFlow() : DecoderFlow(multiple_choice_calibration) {}

  std::string run(const RunSpec& spec, bool report_progress, const ItemSink& sink) override {
    McOptions o;
    o.batch_size = spec.task.batch_size;
    o.share_context = spec.task.share_context;
    Progress progress("documents");
    if (report_progress) o.progress = std::ref(progress);
    ResultRecords records(sink);
    score_mc_documents(*model_, work_, o, records.batch_done<McDocScores>());
    model_.reset();
    return records.take();
  }

  void check_record(std::uint64_t index, const std::string& payload) const override {
    const auto s = from_bytes<McDocScores>(payload);
    const auto& w = all_work_[index];
    if (s.choices.size() != w.requests.size()) {
      throw std::runtime_error(std::to_string(s.choices.size()) + " choices scored where the document has " +
                               std::to_string(w.requests.size()));
    }
    for (std::size_t i = 0; i < s.choices.size(); ++i) {
      if (s.choices[i].num_tokens != static_cast<std::int64_t>(w.requests[i].target.size())) {
        throw std::runtime_error("choice " + std::to_string(i) + " scores " + std::to_string(s.choices[i].num_tokens) +
                                 " tokens where its continuation has " + std::to_string(w.requests[i].target.size()));
      }
    }
  }

  FinishedFile finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                      Provenance prov) override {
    const std::size_t n = docs_.size();
    const auto res = read_gathered_records<McDocScores>(gathered, n, "document");
    std::vector<McDecision> decisions;
    std::vector<std::string> samples, req_context, req_continuation, req_choice;
    std::vector<std::int64_t> gold, pred, pred_norm, acc, acc_norm, first_request, n_choices;
    std::vector<std::int64_t> req_doc, req_greedy, req_tokens, req_truncated;
    std::vector<double> req_ll, item_seconds;
    std::vector<std::vector<std::int64_t>> req_input, req_target;
    std::size_t tokens = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const TaskDocument& d = docs_[i];
      std::vector<double> ll;
      double seconds = 0.0;
      for (const auto& c : res[i].choices) {
        ll.push_back(c.loglikelihood);
        seconds += c.seconds;
      }
      const McDecision dec = decide_multiple_choice(ll, d.choices, d.gold, d.where);
      decisions.push_back(dec);
      gold.push_back(d.gold);
      pred.push_back(dec.pred);
      pred_norm.push_back(dec.pred_norm);
      acc.push_back(dec.acc ? 1 : 0);
      acc_norm.push_back(dec.acc_norm ? 1 : 0);
      first_request.push_back(static_cast<std::int64_t>(req_ll.size()));
      n_choices.push_back(static_cast<std::int64_t>(d.choices.size()));
      for (std::size_t c = 0; c < res[i].choices.size(); ++c) {
        const auto& q = all_work_[i].requests[c];
        req_doc.push_back(static_cast<std::int64_t>(i));
        req_context.push_back(d.requests[c].context);
        req_continuation.push_back(d.requests[c].continuation);
        req_choice.push_back(d.choices[c]);
        req_ll.push_back(res[i].choices[c].loglikelihood);
        req_greedy.push_back(res[i].choices[c].is_greedy ? 1 : 0);
        req_tokens.push_back(res[i].choices[c].num_tokens);
        req_truncated.push_back(q.truncated);
        req_input.push_back(q.input);
        req_target.push_back(q.target);
        tokens += q.input.size();
      }
      item_seconds.push_back(seconds);
      times.model_total += seconds;
      if (!spec.output.samples_jsonl.empty()) samples.push_back(lm_eval_sample_line(d, res[i], dec));
    }
    const McMetrics m = summarize_multiple_choice(decisions);

    H5Writer out(spec.output.path);
    prov.end_time = utc_now_iso8601();
    write_task_documents(out, spec, prov, task_, docs_);
    out.write("/documents/gold", gold);
    out.write("/documents/pred", pred);
    out.write("/documents/pred_norm", pred_norm);
    out.write("/documents/acc", acc);
    out.write("/documents/acc_norm", acc_norm);
    out.write("/documents/first_request", first_request);
    out.write("/documents/n_choices", n_choices);
    out.write("/requests/document", req_doc);
    out.write_strings("/requests/choice", req_choice);
    out.write_strings("/requests/context", req_context);
    out.write_strings("/requests/continuation", req_continuation);
    out.write_ragged("/requests/input_ids", req_input);
    out.write_ragged("/requests/continuation_ids", req_target);
    out.write("/requests/truncated", req_truncated);
    out.write("/loglikelihood/value", req_ll);
    out.write("/loglikelihood/is_greedy", req_greedy);
    out.write("/loglikelihood/num_tokens", req_tokens);
    out.create_group("/metrics");
    out.set_attr("/metrics", "n_documents", static_cast<std::int64_t>(n));
    out.set_attr("/metrics", "n_requests", static_cast<std::int64_t>(req_ll.size()));
    out.set_attr("/metrics", "num_fewshot", static_cast<std::int64_t>(spec.task.num_fewshot));
    out.set_attr("/metrics", "acc", m.acc);
    out.set_attr("/metrics", "acc_stderr", m.acc_stderr);
    out.set_attr("/metrics", "acc_norm", m.acc_norm);
    out.set_attr("/metrics", "acc_norm_stderr", m.acc_norm_stderr);
    write_timing(out, times, item_seconds, n, tokens, n);
    out.commit();
    write_lm_eval_outputs(spec, lm_eval_results_json(lm_eval_run_info(spec, task_, n_original_), m), samples);
    log().info("multiple_choice {}: {} documents, acc {:.4f} +- {:.4f}, acc_norm {:.4f} +- {:.4f}", task_.name, n, m.acc,
               m.acc_stderr, m.acc_norm, m.acc_norm_stderr);
    return {};
  }

 protected:
  PreparedWork prepare_task(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip,
                            std::string& everything) override {
    task_ = task_file_for(spec);
    docs_ = task_documents(spec, task_, 0);
    n_original_ = docs_.size();
    if (spec.task.max_samples > 0 && static_cast<std::size_t>(spec.task.max_samples) < docs_.size()) {
      docs_.resize(static_cast<std::size_t>(spec.task.max_samples));  // the first N documents only
    }
    const std::int64_t max_length = checkpoint_dims(spec.model.path).max_positions;
    all_work_ = encode_documents(docs_, *tokenizer_, max_length);
    std::vector<std::size_t> all(all_work_.size());
    std::vector<std::int64_t> cost;
    for (std::size_t i = 0; i < all_work_.size(); ++i) {
      all[i] = i;
      cost.push_back(all_work_[i].cost());
    }
    everything = shard_bytes(all_work_, all);
    PreparedWork work;
    for (const auto& positions : plan_shards(all_work_, cost, skip, ranks, "documents")) {
      work.shards.push_back(shard_bytes(all_work_, positions));
    }
    work.samples = work.items = all_work_.size();
    log().info("multiple_choice {}: {} documents, {}-shot (max_length {})", task_.name, all_work_.size(),
               spec.task.num_fewshot, max_length);
    return work;
  }

  std::size_t load_task(const RunSpec& spec, const std::string& shard, const std::string& /*shared*/,
                        std::int64_t vocab) override {
    ByteReader r(shard);
    work_ = get_records<McDocWork>(r);
    std::vector<SequenceNeed> seqs;
    for (const auto& d : work_) {
      for (const auto& q : d.requests) {
        check_ids_in_vocab(q.input, vocab, spec.model.path, spec.task.task_file);
        check_ids_in_vocab(q.target, vocab, spec.model.path, spec.task.task_file);
        seqs.push_back({"request #" + std::to_string(q.index), static_cast<std::int64_t>(q.input.size()), 0});
      }
    }
    check_input_limits(spec, model_->dims(), seqs);  // batch memory (positions fit by construction)
    return work_.size();
  }

 private:
  // rank 0
  TaskFile task_;
  std::vector<TaskDocument> docs_;
  std::size_t n_original_ = 0;
  std::vector<McDocWork> all_work_;
  // every rank
  std::vector<McDocWork> work_;
};

}  // namespace

CalibrationSet multiple_choice_calibration(const RunSpec& spec) {
  // The first documents' requests, as the run feeds them.
  const std::int64_t max_length = checkpoint_dims(spec.model.path).max_positions;
  return task_file_calibration(spec, [&](const std::vector<TaskDocument>& docs, const DecoderTokenizer& tok) {
    std::vector<std::vector<std::int64_t>> out;
    for (auto& w : encode_documents(docs, tok, max_length)) {
      for (auto& q : w.requests) out.push_back(std::move(q.input));
    }
    return out;
  });
}

std::unique_ptr<TaskFlow> make_multiple_choice_flow() { return std::make_unique<MultipleChoiceFlow>(); }

}  // namespace evalrun
