// task.kind = "perplexity": corpus perplexity of a Llama-family decoder over sliding windows
// (task/perplexity.hpp). rank 0 tokenizes the corpus once and cuts the windows; every rank gets the
// token stream and scores its windows; rank 0 sums them up and writes the result file.
#include "app/flows/decoder_flow.hpp"
#include "app/flows/flows.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "common/text.hpp"
#include "io/hdf5_file.hpp"
#include "model/registry.hpp"
#include "task/generate.hpp"
#include "task/input_limits.hpp"
#include "task/perplexity.hpp"

namespace evalrun {
namespace {

constexpr const char* kFullLogits = "/logits/full";

int context_length_of(const RunSpec& spec) {
  int context = spec.task.context_length;
  if (context == 0) {
    context = static_cast<int>(checkpoint_dims(spec.model.path).max_positions);
  }
  return context;
}

class PerplexityFlow : public DecoderFlow {
 public:
  PerplexityFlow() : DecoderFlow(perplexity_calibration) {}

  std::string run(const RunSpec& spec, bool report_progress, const ItemSink& sink) override {
    PerplexityOptions o;
    o.context_length = context_;
    o.stride = spec.task.stride;
    o.batch_size = spec.task.batch_size;
    o.keep_logits = keep_logits(spec);
    Progress progress("windows");
    if (report_progress) o.progress = std::ref(progress);
    auto scores = score_perplexity_windows(*model_, tokens_, windows_, o,
                                           keep_and_journal<WindowScores>(sink, rows_, [this](WindowScores& s) {
                                             keep_rows(s.index, s);
                                           }));
    model_.reset();
    return records_buffer_of(scores);
  }

  // A window's rows are its scored positions: known before the run.
  RowsPlan plan_rows(const RunSpec& spec) const override {
    std::vector<std::uint64_t> rows;
    for (const auto& w : all_windows_) rows.push_back(static_cast<std::uint64_t>(w.end - w.score_from));
    return plan_of(spec, model_->vocab_size(), kFullLogits, rows);
  }

  void check_record(std::uint64_t index, const std::string& payload) const override {
    const auto s = from_bytes<WindowScores>(payload);
    const PerplexityWindow& w = all_windows_[index];
    const auto scored = static_cast<std::size_t>(w.end - w.score_from);
    bool positions_fit = s.positions.size() == scored && s.log_probs.size() == scored;
    for (std::size_t k = 0; positions_fit && k < scored; ++k) {
      positions_fit = s.positions[k] == w.score_from + static_cast<std::int64_t>(k);
    }
    if (!positions_fit) {
      throw std::runtime_error("it does not score positions " + std::to_string(w.score_from) + " to " +
                               std::to_string(w.end - 1) + " of window " + std::to_string(index));
    }
    if (s.topk_ids.size() != s.topk_logits.size()) throw std::runtime_error("top-k ids and logits differ in number");
    // the values rows were written into the result file as the window finished, not journaled
    if (s.logprobs16.rows() != 0 && (s.logprobs16.rows() != scored || !s.logprobs16.consistent(s.vocab, false)))
      throw std::runtime_error("the 16-bit log-probabilities are not one row of the vocabulary per scored token");
  }

  FinishedFile finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                      Provenance prov) override {
    const std::size_t nw = all_windows_.size();
    std::vector<WindowScores> by_window = read_gathered_records<WindowScores>(gathered, nw, "window");
    for (std::size_t i = 0; i < nw; ++i) keep_rows(i, by_window[i]);  // a journaled record's rows: rank 0 writes them
    // windows are in stream order and score disjoint ranges, so concatenation is position order
    std::vector<std::int64_t> positions;
    std::vector<double> log_probs, item_seconds;
    std::vector<std::uint64_t> rows_per_window;
    LogProbRows16 logprobs16;
    std::int64_t vocab = 0;
    for (const auto& s : by_window) {
      positions.insert(positions.end(), s.positions.begin(), s.positions.end());
      log_probs.insert(log_probs.end(), s.log_probs.begin(), s.log_probs.end());
      rows_per_window.push_back(s.positions.size());
      logprobs16.append(s.logprobs16);
      item_seconds.push_back(s.seconds);
      if (s.vocab > 0) vocab = s.vocab;
    }
    for (double s : item_seconds) times.model_total += s;
    const PerplexitySummary sum = summarize_perplexity(log_probs);

    H5Writer out = open_result(spec);
    prov.end_time = utc_now_iso8601();
    write_provenance(out, spec, prov);
    write_sample_index(out, {spec.task.dataset});
    out.write("/tokens/ids", tokens_);
    std::vector<std::int64_t> wb, we, ws;
    for (const auto& w : all_windows_) {
      wb.push_back(w.begin);
      we.push_back(w.end);
      ws.push_back(w.score_from);
    }
    out.write("/windows/begin", wb);
    out.write("/windows/end", we);
    out.write("/windows/score_from", ws);
    out.write("/scores/position", positions);
    out.write("/scores/log_prob", log_probs);
    RowsLayout layout;
    if (spec.output.logits == LogitsMode::logprobs16) logprobs16.write(out);
    for (const auto& d : row_datasets(spec, vocab, kFullLogits)) lay_out_rows(layout, out, d.path, d.type, d.cols, rows_per_window);
    out.create_group("/metrics");
    out.set_attr("/metrics", "perplexity", sum.perplexity);
    out.set_attr("/metrics", "perplexity_stderr", sum.perplexity_stderr);
    out.set_attr("/metrics", "mean_nll", sum.mean_nll);
    out.set_attr("/metrics", "n_scored_tokens", sum.n_scored);
    out.set_attr("/metrics", "n_tokens", static_cast<std::int64_t>(tokens_.size()));
    out.set_attr("/metrics", "n_windows", static_cast<std::int64_t>(nw));
    out.set_attr("/metrics", "context_length", static_cast<std::int64_t>(context_));
    out.set_attr("/metrics", "stride", static_cast<std::int64_t>(spec.task.stride == 0 ? context_ : spec.task.stride));
    write_timing(out, times, item_seconds, nw, tokens_.size(), 1);
    log().info("perplexity: {:.4f} ± {:.4f} over {} tokens ({} windows)", sum.perplexity, sum.perplexity_stderr,
               sum.n_scored, nw);
    return {std::move(out), std::move(layout)};
  }

 protected:
  PreparedWork prepare_task(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip,
                                  std::string& everything) override {
    const std::string text = read_file(spec.task.dataset);
    if (text.empty()) throw InputError(spec.task.dataset, "the corpus is empty");
    tokens_ = tokenizer_->encode(text);
    context_ = context_length_of(spec);
    if (context_ < 2) throw InputError(spec.config_path, "task.context_length must be at least 2");
    if (spec.task.stride > context_) {
      throw InputError(spec.config_path, "task.stride (" + std::to_string(spec.task.stride) +
                                             ") exceeds the context length (" + std::to_string(context_) + ")");
    }
    all_windows_ = make_perplexity_windows(static_cast<std::int64_t>(tokens_.size()), context_, spec.task.stride);
    if (spec.task.max_samples > 0 && static_cast<std::size_t>(spec.task.max_samples) < all_windows_.size()) {
      all_windows_.resize(static_cast<std::size_t>(spec.task.max_samples));  // the first N windows only
    }
    std::vector<std::size_t> all(all_windows_.size());
    std::vector<std::int64_t> cost;  // tokens a window feeds
    for (std::size_t i = 0; i < all_windows_.size(); ++i) {
      all[i] = i;
      cost.push_back(all_windows_[i].end - all_windows_[i].begin);
    }
    everything = shard_bytes(all_windows_, all);
    PreparedWork work;
    for (const auto& positions : plan_shards(all_windows_, cost, skip, ranks, "windows")) {
      work.shards.push_back(shard_bytes(all_windows_, positions));
    }
    work.shared = to_bytes(PerplexityStream{tokens_, context_});
    work.samples = 1;
    work.items = all_windows_.size();
    log().info("perplexity: {} tokens in {} windows of {} (stride {})", tokens_.size(), all_windows_.size(), context_,
               spec.task.stride == 0 ? context_ : spec.task.stride);
    return work;
  }

  std::size_t load_task(const RunSpec& spec, const std::string& shard, const std::string& shared,
                        std::int64_t vocab) override {
    PerplexityStream stream = from_bytes<PerplexityStream>(shared);
    tokens_ = std::move(stream.tokens);
    context_ = static_cast<int>(stream.context_length);
    check_ids_in_vocab(tokens_, vocab, spec.model.path, spec.task.dataset);
    ByteReader r(shard);
    windows_ = get_records<PerplexityWindow>(r);
    check_decoder_inputs(spec, model_->dims(), {}, windows_);  // positions and batch memory
    return windows_.size();
  }

 private:
  // The record's vocabulary-wide rows go to rank_rows(), out of the record.
  void keep_rows(std::uint64_t index, WindowScores& s) {
    if (!s.logits.empty()) rows_.add(kFullLogits, index, std::move(s.logits));
    if (!s.logprobs16.values.empty()) rows_.add(kLogProbs16Values, index, std::move(s.logprobs16.values));
    s.logits.clear();
    s.logprobs16.values.clear();
    keep_topk_rows(index, s.topk_logits, s.topk_ids);
  }

  // rank 0
  std::vector<PerplexityWindow> all_windows_;
  // every rank
  std::vector<std::int64_t> tokens_;  // the whole stream
  int context_ = 0;
  std::vector<PerplexityWindow> windows_;
};

}  // namespace

CalibrationSet perplexity_calibration(const RunSpec& spec) {
  CalibrationSet c;
  if (!direct_int8_settings(spec).needs_calibration()) return c;
  const auto tokenizer = DecoderTokenizer::from_dir(tokenizer_dir(spec));
  const auto n = static_cast<std::size_t>(spec.quantization.calibration_samples);
  // The first windows of the calibration text, as the run cuts its own.
  c.dataset = calibration_dataset(spec);
  const std::string text = read_file(c.dataset);
  if (text.empty()) throw InputError(c.dataset, "the calibration corpus is empty");
  const auto tokens = tokenizer.encode(text);
  auto windows = make_perplexity_windows(static_cast<std::int64_t>(tokens.size()), context_length_of(spec),
                                         spec.task.stride);
  if (windows.size() > n) windows.resize(n);
  for (const auto& w : windows) c.sequences.emplace_back(tokens.begin() + w.begin, tokens.begin() + w.end);
  c.examples = static_cast<std::int64_t>(windows.size());
  return c;
}

std::unique_ptr<TaskFlow> make_perplexity_flow() { return std::make_unique<PerplexityFlow>(); }

}  // namespace evalrun
