// task.kind = "loglikelihood": lm-evaluation-harness's loglikelihood requests (task/loglikelihood.hpp)
// with a decoder, read raw from task.dataset or made from the documents of a loglikelihood task file
// (task.task_file: LAMBADA, one request per document, scored with lm-eval's perplexity and acc). rank 0
// reads and tokenizes the requests and shards them by tokens; every rank scores its requests; rank 0
// writes one row per request in file order.
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "app/flows/decoder_flow.hpp"
#include "app/flows/flows.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "io/hdf5_file.hpp"
#include "io/jsonl.hpp"
#include "task/input_limits.hpp"
#include "task/lm_eval_stats.hpp"
#include "task/loglikelihood.hpp"

namespace evalrun {
namespace {

struct RequestText {
  std::string id;  // "id" of the line (string or integer), else "line-N"
  std::string context, continuation;
  std::string where;  // file:line
};

// One JSON object per non-blank line with string fields "context" and "continuation" ("id" optional).
// InputError naming file:line for malformed JSON, a missing or non-string field, a duplicate id.
std::vector<RequestText> read_requests(const std::string& path) {
  std::vector<RequestText> out;
  std::unordered_set<std::string> seen;
  for_each_jsonl_object(path, "data set file", [&](const JsonlLine& l) {
    const nlohmann::json& j = *l.value;
    RequestText r;
    r.where = l.where;
    for (const char* key : {"context", "continuation"}) {
      if (!j.contains(key) || !j[key].is_string()) {
        throw InputError(r.where, std::string("missing string field \"") + key + "\"");
      }
    }
    r.context = j["context"].get<std::string>();
    r.continuation = j["continuation"].get<std::string>();
    r.id = jsonl_id(l);
    if (r.id.empty()) r.id = "line-" + std::to_string(l.lineno);
    if (!seen.insert(r.id).second) throw InputError(r.where, "duplicate request id '" + r.id + "'");
    out.push_back(std::move(r));
  });
  if (out.empty()) throw InputError(path, "data set holds no requests");
  return out;
}

// A task file's documents as requests: one each, named as the document (doc-<doc_id>).
std::vector<RequestText> document_requests(const std::vector<TaskDocument>& docs) {
  std::vector<RequestText> out;
  for (const auto& d : docs) {
    const TaskRequestText& q = d.requests.front();
    out.push_back({document_sample_id(d), q.context, q.continuation, d.where});
  }
  return out;
}

// lm-eval's HFLM max_length: the model's max_position_embeddings.
std::int64_t max_length_of(const RunSpec& spec) { return checkpoint_dims(spec.model.path).max_positions; }

// The requests as the run feeds them: tokenized, left-truncated to max_length.
std::vector<LoglikRequest> tokenize_requests(const std::vector<RequestText>& texts, const DecoderTokenizer& tok,
                                             std::int64_t max_length, std::vector<LoglikTokens>* tokens_out) {
  const std::int64_t prefix = tok.bos_id() >= 0 ? tok.bos_id() : tok.eos_id();
  const Encode encode = [&](std::string_view s) { return tok.encode(s); };
  const Encode plain = [&](std::string_view s) { return tok.encode_without_bos(s); };
  std::vector<LoglikRequest> out;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].context.empty() && prefix < 0) {
      throw InputError(texts[i].where,
                       "the context is empty and the tokenizer has neither a BOS nor an EOS token to use instead");
    }
    const LoglikTokens t = encode_loglik_pair(texts[i].context, texts[i].continuation, encode, plain, prefix);
    out.push_back(make_loglik_request(i, t, max_length, texts[i].where));
    if (tokens_out) tokens_out->push_back(t);
  }
  return out;
}

class LoglikelihoodFlow : public DecoderFlow {
 public:
  LoglikelihoodFlow() : DecoderFlow(loglikelihood_calibration) {}

  std::string run(const RunSpec& spec, bool report_progress, const ItemSink& sink) override {
    LoglikOptions o;
    o.batch_size = spec.task.batch_size;
    Progress progress("requests");
    if (report_progress) o.progress = std::ref(progress);
    ResultRecords records(sink);
    score_loglik_requests(*model_, requests_, o, records.batch_done<LoglikScore>());
    model_.reset();
    return records.take();
  }

  void check_record(std::uint64_t index, const std::string& payload) const override {
    const auto s = from_bytes<LoglikScore>(payload);
    const auto n = static_cast<std::int64_t>(tokens_[index].continuation.size());
    if (s.num_tokens != n) {
      throw std::runtime_error("it scores " + std::to_string(s.num_tokens) + " tokens where the continuation has " +
                               std::to_string(n));
    }
  }

  FinishedFile finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                      Provenance prov) override {
    const std::size_t n = texts_.size();
    const std::vector<LoglikScore> res = read_gathered_records<LoglikScore>(gathered, n, "request");
    std::vector<std::string> ids;
    std::vector<double> ll, item_seconds;
    std::vector<std::int64_t> greedy;
    std::vector<std::int64_t> num_tokens, truncated;
    std::vector<std::vector<std::int64_t>> context_ids, continuation_ids;
    std::size_t tokens = 0, n_greedy = 0;
    double sum = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      ids.push_back(texts_[i].id);
      ll.push_back(res[i].loglikelihood);
      greedy.push_back(res[i].is_greedy ? 1 : 0);
      num_tokens.push_back(res[i].num_tokens);
      truncated.push_back(all_requests_[i].truncated);
      context_ids.push_back(tokens_[i].context);
      continuation_ids.push_back(tokens_[i].continuation);
      item_seconds.push_back(res[i].seconds);
      times.model_total += res[i].seconds;
      tokens += all_requests_[i].input.size();
      n_greedy += res[i].is_greedy ? 1 : 0;
      sum += res[i].loglikelihood;
    }
    H5Writer out(spec.output.path);
    prov.end_time = utc_now_iso8601();
    if (task_) {
      write_task_documents(out, spec, prov, *task_, docs_);
    } else {
      write_provenance(out, spec, prov);
      write_sample_index(out, ids);
    }
    out.write_ragged("/requests/context_ids", context_ids);
    out.write_ragged("/requests/continuation_ids", continuation_ids);
    out.write("/requests/truncated", truncated);
    out.write("/loglikelihood/value", ll);
    out.write("/loglikelihood/is_greedy", greedy);
    out.write("/loglikelihood/num_tokens", num_tokens);
    out.create_group("/metrics");
    out.set_attr("/metrics", "n_requests", static_cast<std::int64_t>(n));
    out.set_attr("/metrics", "greedy_share", static_cast<double>(n_greedy) / static_cast<double>(n));
    out.set_attr("/metrics", "mean_loglikelihood", sum / static_cast<double>(n));
    out.set_attr("/metrics", "max_length", max_length_);
    std::vector<LmEvalMetric> lm_eval;
    if (task_) {
      // lm-eval's metrics of a loglikelihood task (LAMBADA's metric_list): perplexity with its bootstrap
      // stderr, acc (the greedy share) with mean_stderr.
      std::vector<double> acc;
      for (auto g : greedy) acc.push_back(static_cast<double>(g));
      const MeanWithStderr a = mean_with_stderr(acc);
      const LmEvalMetric ppl{"perplexity", "none", perplexity_aggregate(ll), perplexity_bootstrap_stderr(ll), "perplexity", false};
      lm_eval = {ppl, {"acc", "none", a.mean, a.standard_error}};
      for (const auto& m : lm_eval) {
        out.set_attr("/metrics", m.name, m.value);
        out.set_attr("/metrics", m.name + "_stderr", m.standard_error);
      }
    }
    write_timing(out, times, item_seconds, n, tokens, n);
    out.commit();
    if (task_) {
      std::vector<std::string> samples;
      for (std::size_t i = 0; i < n; ++i) {
        samples.push_back(lm_eval_loglikelihood_sample_line(docs_[i], res[i].loglikelihood, res[i].is_greedy));
      }
      write_lm_eval_outputs(spec, lm_eval_results_json(lm_eval_run_info(spec, *task_, n_original_), "loglikelihood", n, lm_eval),
                            samples);
      log().info("loglikelihood {}: {} documents, perplexity {:.4f} +- {:.4f}, acc {:.4f} +- {:.4f}", task_->name, n,
                 lm_eval[0].value, lm_eval[0].standard_error, lm_eval[1].value, lm_eval[1].standard_error);
    } else {
      log().info("loglikelihood: {} requests, {} greedy, mean log-likelihood {:.4f}", n, n_greedy,
                 sum / static_cast<double>(n));
    }
    return {};
  }

 protected:
  PreparedWork prepare_task(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip,
                            std::string& everything) override {
    const auto max_samples = static_cast<std::size_t>(spec.task.max_samples);
    if (!spec.task.task_file.empty()) {
      task_ = task_file_for(spec);
      docs_ = task_documents(spec, *task_, 0);
      n_original_ = docs_.size();
      if (max_samples > 0 && max_samples < docs_.size()) docs_.resize(max_samples);  // the first N documents only
      texts_ = document_requests(docs_);
    } else {
      texts_ = read_requests(spec.task.dataset);
      if (max_samples > 0 && max_samples < texts_.size()) texts_.resize(max_samples);  // the first N requests only
    }
    max_length_ = max_length_of(spec);
    all_requests_ = tokenize_requests(texts_, *tokenizer_, max_length_, &tokens_);
    std::vector<std::size_t> all(all_requests_.size());
    std::vector<std::int64_t> cost;  // tokens a request feeds
    for (std::size_t i = 0; i < all_requests_.size(); ++i) {
      all[i] = i;
      cost.push_back(static_cast<std::int64_t>(all_requests_[i].input.size()));
    }
    everything = shard_bytes(all_requests_, all);
    PreparedWork work;
    for (const auto& positions : plan_shards(all_requests_, cost, skip, ranks, "requests")) {
      work.shards.push_back(shard_bytes(all_requests_, positions));
    }
    work.samples = all_requests_.size();
    work.items = all_requests_.size();
    log().info("loglikelihood: {} requests (max_length {})", all_requests_.size(), max_length_);
    return work;
  }

  std::size_t load_task(const RunSpec& spec, const std::string& shard, const std::string& /*shared*/,
                        std::int64_t vocab) override {
    ByteReader r(shard);
    requests_ = get_records<LoglikRequest>(r);
    std::vector<SequenceNeed> seqs;
    for (const auto& q : requests_) {
      const std::string& from = spec.task.task_file.empty() ? spec.task.dataset : spec.task.task_file;
      check_ids_in_vocab(q.input, vocab, spec.model.path, from);
      check_ids_in_vocab(q.target, vocab, spec.model.path, from);
      seqs.push_back({"request #" + std::to_string(q.index), static_cast<std::int64_t>(q.input.size()), 0});
    }
    check_input_limits(spec, model_->dims(), seqs);  // batch memory (positions fit by construction)
    return requests_.size();
  }

 private:
  // rank 0
  std::optional<TaskFile> task_;    // set: the requests are this task file's documents
  std::vector<TaskDocument> docs_;  // ... in order, one request each
  std::size_t n_original_ = 0;      // documents before max_samples
  std::vector<RequestText> texts_;
  std::vector<LoglikTokens> tokens_;
  std::vector<LoglikRequest> all_requests_;
  std::int64_t max_length_ = 0;
  // every rank
  std::vector<LoglikRequest> requests_;
};

}  // namespace

CalibrationSet loglikelihood_calibration(const RunSpec& spec) {
  if (!spec.task.task_file.empty()) {
    return task_file_calibration(spec, [&](const std::vector<TaskDocument>& docs, const DecoderTokenizer& tok) {
      std::vector<std::vector<std::int64_t>> out;
      for (auto& q : tokenize_requests(document_requests(docs), tok, max_length_of(spec), nullptr)) {
        out.push_back(std::move(q.input));
      }
      return out;
    });
  }
  CalibrationSet c;
  if (!direct_int8_settings(spec).needs_calibration()) return c;
  const auto tokenizer = DecoderTokenizer::from_dir(tokenizer_dir(spec));
  const auto n = static_cast<std::size_t>(spec.quantization.calibration_samples);
  // The first requests' inputs, as the run feeds them.
  c.dataset = calibration_dataset(spec);
  auto texts = read_requests(c.dataset);
  if (texts.size() > n) texts.resize(n);
  for (auto& q : tokenize_requests(texts, tokenizer, max_length_of(spec), nullptr)) {
    c.sequences.push_back(std::move(q.input));
  }
  c.examples = static_cast<std::int64_t>(texts.size());
  return c;
}

std::unique_ptr<TaskFlow> make_loglikelihood_flow() { return std::make_unique<LoglikelihoodFlow>(); }

}  // namespace evalrun
