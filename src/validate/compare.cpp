#include "validate/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <numeric>

#include "common/errors.hpp"
#include "io/hdf5_file.hpp"
#include "io/hdf5_probe.hpp"
#include "io/logprobs16.hpp"
#include "task/registry.hpp"
#include "validate/divergence.hpp"
#include "validate/paired.hpp"

namespace evalrun {

bool Metric::passed() const {
  if (max && !(value <= *max)) return false;
  if (min && !(value >= *min)) return false;
  return true;
}

bool Comparison::passed() const { return failed_metrics().empty(); }

std::vector<std::string> Comparison::failed_metrics() const {
  std::vector<std::string> out;
  for (const auto& m : metrics)
    if (!m.passed()) out.push_back(m.name);
  return out;
}

std::size_t DiffHistogram::total() const {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0}) + zeros + non_finite;
}

namespace {
// log10 of the smallest positive double (denormal) is about -323.3, of the largest about 308.3.
constexpr int kLowestBin = -324 * DiffHistogramBuilder::kBinsPerDecade;
constexpr int kHighestBin = 309 * DiffHistogramBuilder::kBinsPerDecade;
}  // namespace

DiffHistogramBuilder::DiffHistogramBuilder(std::string title)
    : title_(std::move(title)), counts_(static_cast<std::size_t>(kHighestBin - kLowestBin + 1), 0) {}

void DiffHistogramBuilder::add(double v) {
  if (!std::isfinite(v)) {
    ++non_finite_;
    return;
  }
  if (v == 0) {
    ++zeros_;
    return;
  }
  const int bin = static_cast<int>(std::floor(std::log10(std::fabs(v)) * kBinsPerDecade));
  ++counts_[static_cast<std::size_t>(std::clamp(bin, kLowestBin, kHighestBin) - kLowestBin)];
}

DiffHistogram DiffHistogramBuilder::histogram() const {
  DiffHistogram h;
  h.title = title_;
  h.zeros = zeros_;
  h.non_finite = non_finite_;
  const auto used = [](std::size_t n) { return n > 0; };
  const auto first = std::find_if(counts_.begin(), counts_.end(), used);
  if (first == counts_.end()) return h;  // nothing but zeros / non-finite values
  const auto last = std::find_if(counts_.rbegin(), counts_.rend(), used).base();
  h.counts.assign(first, last);
  const auto lo = static_cast<int>(first - counts_.begin()) + kLowestBin;
  for (std::size_t i = 0; i <= h.counts.size(); ++i)
    h.log10_edges.push_back(static_cast<double>(lo + static_cast<int>(i)) / kBinsPerDecade);
  return h;
}

DiffHistogram DiffHistogram::of(const std::string& title, const std::vector<double>& values) {
  DiffHistogramBuilder b(title);
  for (double v : values) b.add(v);
  return b.histogram();
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kTopK = 20;

std::string fmt(double v, const char* f = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// --- building the comparison ------------------------------------------------------------------------

struct Builder {
  Comparison& c;
  const Thresholds& t;
  std::string section;  // the task's thresholds section
  void info(const std::string& name, double value, const std::string& meaning) {
    c.metrics.push_back({name, value, std::nullopt, std::nullopt, meaning});
  }
  // A metric checked against threshold `key` of the task (its spec says whether it is a min or a max).
  void check(const std::string& name, double value, const std::string& key) {
    Metric m{name, value, std::nullopt, std::nullopt, ""};
    for (const auto& s : threshold_specs())
      if (s.task == section && s.key == key) {
        m.meaning = s.meaning;
        (s.is_minimum ? m.min : m.max) = t.get(section, key);
      }
    c.metrics.push_back(m);
  }
  void note(const std::string& s) { c.notes.push_back(s); }
};

// --- compatibility ----------------------------------------------------------------------------------

void require_result_file(const H5Reader& f) {
  if (!f.has_attr("/", "format_version") || !f.has_attr("/", "task"))
    throw InputError(f.path(), "not an evalrun result file (no format_version / task attribute)");
}

void require(const H5Reader& f, const std::string& object, const std::string& why) {
  if (!f.exists(object)) throw InputError(f.path() + ": " + object, "missing; " + why);
}

void require_same_ids(const H5Reader& ref, const H5Reader& cand, const std::vector<std::string>& ids) {
  const auto other = cand.read_strings("/samples/id");
  const std::size_t n = std::min(ids.size(), other.size());
  for (std::size_t i = 0; i < n; ++i)
    if (ids[i] != other[i])
      throw InputError(cand.path() + ": /samples/id",
                       "sample " + std::to_string(i) + " is '" + other[i] + "' where the reference " + ref.path() +
                           " has '" + ids[i] + "'; both files must hold the same samples in the same order");
  if (ids.size() != other.size()) {
    const bool ref_longer = ids.size() > other.size();
    throw InputError(cand.path() + ": /samples/id",
                     std::to_string(other.size()) + " samples, the reference has " + std::to_string(ids.size()) +
                         "; first unmatched sample '" + (ref_longer ? ids[n] : other[n]) + "'");
  }
}

// Ragged input ids per row; `sample_of_row` maps a row to its sample (qa features), identity otherwise.
void require_same_inputs(const H5Reader& ref, const H5Reader& cand, const std::string& group,
                         const std::vector<std::string>& ids, const std::vector<std::uint64_t>& sample_of_row) {
  require(ref, group, "the reference has no input ids to check");
  require(cand, group, "the candidate has no input ids to check");
  const auto a = ref.read_ragged_i64(group), b = cand.read_ragged_i64(group);
  auto name = [&](std::size_t row) {
    const std::size_t s = row < sample_of_row.size() ? sample_of_row[row] : row;
    return s < ids.size() ? ids[s] : std::to_string(s);
  };
  for (std::size_t r = 0; r < std::min(a.size(), b.size()); ++r)
    if (a[r] != b[r]) {
      const auto p = common_prefix(a[r], b[r]);
      throw InputError(cand.path() + ": " + group,
                       "sample '" + name(r) + "' was given other input ids than in the reference (first difference at "
                       "token " + std::to_string(p) + "); compare runs of the same inputs and tokenizer");
    }
  if (a.size() != b.size())
    throw InputError(cand.path() + ": " + group,
                     std::to_string(b.size()) + " rows, the reference has " + std::to_string(a.size()) +
                         " (first unmatched: sample '" + name(std::min(a.size(), b.size())) + "')");
}

// --- logits -----------------------------------------------------------------------------------------

// Logits rows as stored: whole rows [S, V] (float logits, or 16-bit log-probabilities decoded:
// io/logprobs16.hpp; softmax and KL do not see the difference, a log-softmax being shifted logits) or
// top-k [S, k] with their ids, read a block of rows at a time (H5Rows) so that compare holds a bounded
// slab of each file, not its logits.
struct LogitRows {
  bool full = false;  // a value per vocabulary entry
  std::int64_t rows = 0, cols = 0;
  std::unique_ptr<H5Rows<float>> values;
  std::unique_ptr<H5Rows<std::int64_t>> ids;  // top-k only
  std::unique_ptr<H5Rows<std::uint16_t>> q16;  // logprobs16 only, with:
  std::vector<float> scale, min_log_prob;
  std::vector<std::int64_t> top_id;
  std::vector<float> decoded;
  std::int64_t decoded_row = -1;
  bool present() const { return rows > 0 && cols > 0; }
  bool quantized() const { return q16 != nullptr; }
  // The largest error of a stored log-prob (scale / 2 of the widest row).
  double max_quantization_error() const {
    return scale.empty() ? 0.0 : *std::max_element(scale.begin(), scale.end()) / 2.0;
  }

  const float* row_values(std::int64_t row) {
    if (!q16) return values->row(row);
    if (row != decoded_row) {
      decoded.resize(static_cast<std::size_t>(cols));
      decode_log_probs16(q16->row(row), cols, scale[static_cast<std::size_t>(row)],
                         min_log_prob[static_cast<std::size_t>(row)], decoded.data());
      decoded_row = row;
    }
    return decoded.data();
  }

  // (id, logit) of the best min(k, available) entries, best first (ties: the smaller id). One pass
  // keeping the best k in order: a full row has a whole vocabulary of entries and k is small.
  std::vector<std::pair<std::int64_t, float>> top(std::int64_t row, std::size_t k) {
    using Entry = std::pair<std::int64_t, float>;
    const auto better = [](const Entry& a, const Entry& b) {
      return a.second > b.second || (a.second == b.second && a.first < b.first);
    };
    std::vector<Entry> out;
    if (k == 0) return out;
    out.reserve(k + 1);
    const float* v = row_values(row);
    const std::int64_t* id_row = full ? nullptr : ids->row(row);
    float bar = -std::numeric_limits<float>::infinity();  // once k are kept: the k-th best logit
    for (std::int64_t j = 0; j < cols; ++j) {
      if (!(v[j] >= bar)) continue;  // the common case, one compare (NaN lands here too)
      const Entry e{full ? j : id_row[j], v[j]};
      if (e.first < 0 || !std::isfinite(e.second)) continue;
      if (out.size() == k && !better(e, out.back())) continue;
      out.insert(std::upper_bound(out.begin(), out.end(), e, better), e);
      if (out.size() > k) out.pop_back();
      if (out.size() == k) bar = out.back().second;
    }
    return out;
  }
  std::optional<float> at(std::int64_t row, std::int64_t id) {
    const float* v = row_values(row);
    if (full) return id >= 0 && id < cols ? std::optional<float>(v[id]) : std::nullopt;
    const std::int64_t* id_row = ids->row(row);
    for (std::int64_t j = 0; j < cols; ++j)
      if (id_row[j] == id && std::isfinite(v[j])) return v[j];
    return std::nullopt;
  }
  // The best id; a logprobs16 file stores the exact one (16-bit rounding can tie near-equal logits).
  std::int64_t argmax(std::int64_t row) {
    if (q16) return top_id[static_cast<std::size_t>(row)];
    auto t = top(row, 1);
    return t.empty() ? -1 : t[0].first;
  }
};

LogitRows load_logits(const H5Reader& f, const std::string& full_path, const std::string& topk_group) {
  LogitRows l;
  const std::string q = kLogProbs16Group;
  if (f.exists(full_path)) {
    l.full = true;
    l.values = std::make_unique<H5Rows<float>>(f, full_path);
  } else if (f.exists(q + "/values")) {
    l.full = true;
    l.q16 = std::make_unique<H5Rows<std::uint16_t>>(f, q + "/values");
    l.scale = f.read_f32(q + "/scale");
    l.min_log_prob = f.read_f32(q + "/min_log_prob");
    l.top_id = f.read_i64(q + "/top_id");
    const auto n = static_cast<std::size_t>(l.q16->rows());
    if (l.scale.size() != n || l.min_log_prob.size() != n || l.top_id.size() != n)
      throw InputError(f.path() + ": " + q, "scale, min_log_prob and top_id must hold one entry per row of values (" +
                                                std::to_string(n) + ")");
    l.rows = l.q16->rows();
    l.cols = l.q16->cols();
    return l;
  } else if (f.exists(topk_group + "/values") && f.exists(topk_group + "/indices")) {
    l.values = std::make_unique<H5Rows<float>>(f, topk_group + "/values");
    l.ids = std::make_unique<H5Rows<std::int64_t>>(f, topk_group + "/indices");
    if (l.ids->rows() != l.values->rows() || l.ids->cols() != l.values->cols())
      throw InputError(f.path() + ": " + topk_group, "values and indices must be 2-D of the same shape");
  } else {
    return l;
  }
  l.rows = l.values->rows();
  l.cols = l.values->cols();
  return l;
}

// Says which files store 16-bit log-probabilities and how far from exact they may be.
void note_quantized(Builder& b, const LogitRows& ref, const LogitRows& cand) {
  for (const auto* l : {&ref, &cand}) {
    if (!l->quantized()) continue;
    b.note(std::string(l == &ref ? "the reference" : "the candidate") +
           " stores 16-bit log-probabilities (output.logits = \"logprobs16\"): each within " +
           fmt(l->max_quantization_error()) + " of the exact value; top-1 from the exact argmax stored beside them");
  }
}

// Reference top-k ids of `row` and both files' logits at the ids present in both (top-k candidates may
// lack some). Returns false when none is shared.
bool restricted_logits(LogitRows& ref, std::int64_t ref_row, LogitRows& cand, std::int64_t cand_row,
                       std::size_t k, std::vector<double>& r, std::vector<double>& c) {
  r.clear();
  c.clear();
  for (const auto& [id, v] : ref.top(ref_row, k)) {
    const auto cv = cand.at(cand_row, id);
    if (!cv) continue;
    r.push_back(v);
    c.push_back(*cv);
  }
  return !r.empty();
}

// --- generate ---------------------------------------------------------------------------------------

void compare_generate(const H5Reader& ref, const H5Reader& cand, const std::vector<std::string>& ids, Builder& b) {
  require_same_inputs(ref, cand, "/samples/prompt_ids", ids, {});
  require(ref, "/generated/ids", "a generate result has /generated/ids");
  require(cand, "/generated/ids", "a generate result has /generated/ids");
  const auto ga = ref.read_ragged_i64("/generated/ids"), gb = cand.read_ragged_i64("/generated/ids");
  if (ga.size() != ids.size() || gb.size() != ids.size())
    throw InputError(cand.path() + ": /generated/ids", "one row per sample expected");

  LogitRows la = load_logits(ref, "/logits/step_logits", "/logits/topk");
  LogitRows lb = load_logits(cand, "/logits/step_logits", "/logits/topk");
  const bool level1 = la.present() && lb.present();
  std::vector<std::uint64_t> oa, ob;
  if (level1) {
    oa = ref.read_u64("/logits/step_offsets");
    ob = cand.read_u64("/logits/step_offsets");
    if (oa.size() != ids.size() + 1 || ob.size() != ids.size() + 1)
      throw InputError(cand.path() + ": /logits/step_offsets", "N+1 entries expected");
  }
  const double ce_limit = b.t.get("generate", "ce_per_token");
  const double diff_limit = b.t.get("generate", "softmax_diff_per_token");

  std::size_t mismatched = 0, total = 0, identical = 0, compared = 0, failed = 0, unshared = 0;
  std::vector<double> ces, kls, diffs;
  DiffHistogramBuilder logit_diffs("|logit difference| over the reference's top-k (compared steps)");
  PositionSeries& series = b.c.by_position;
  auto at_position = [&](std::size_t s) {
    if (series.position.size() <= s) {
      for (std::size_t k = series.position.size(); k <= s; ++k) series.position.push_back(k);
      series.compared.resize(s + 1, 0);
      series.failure_rate.resize(s + 1, 0.0);  // counts until the end, then divided
      series.ce_mean.resize(s + 1, 0.0);
      series.ce_excess_mean.resize(s + 1, 0.0);
    }
  };
  b.c.sample_columns = {"first divergence", "tokens ref/cand", "compared", "failing", "max CE-H", "max |dp|"};
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto p = common_prefix(ga[i], gb[i]);
    const bool same = ga[i] == gb[i];
    const std::size_t len = std::max(ga[i].size(), gb[i].size());
    identical += same;
    total += len;
    mismatched += len - p;
    SampleRow row{ids[i], {}, {}};
    row.cells.push_back(same ? "-" : std::to_string(p));
    row.cells.push_back(std::to_string(ga[i].size()) + "/" + std::to_string(gb[i].size()));
    std::size_t n_cmp = 0, n_fail = 0;
    double worst_kl = 0, worst_diff = 0;
    if (level1) {
      // Step t's logits chose token t from the same context as long as tokens < t agree: steps 0..p.
      const std::size_t ra = oa[i + 1] - oa[i], rb = ob[i + 1] - ob[i];
      const std::size_t steps = std::min({p + 1, ra, rb});
      std::vector<double> r, c;
      for (std::size_t s = 0; s < steps; ++s) {
        ++n_cmp;
        TokenDivergence d;
        if (restricted_logits(la, static_cast<std::int64_t>(oa[i] + s), lb, static_cast<std::int64_t>(ob[i] + s),
                              kTopK, r, c)) {
          d = token_divergence(r, c);
          for (std::size_t j = 0; j < r.size(); ++j) logit_diffs.add(std::fabs(r[j] - c[j]));
        } else {
          ++unshared;
          d = token_divergence({}, {});  // infinite: no shared id
        }
        ces.push_back(d.cross_entropy);
        kls.push_back(d.kl);
        diffs.push_back(d.mean_abs_prob_diff);
        worst_kl = std::max(worst_kl, d.kl);
        worst_diff = std::max(worst_diff, d.mean_abs_prob_diff);
        const bool bad = !(d.kl <= ce_limit) || !(d.mean_abs_prob_diff <= diff_limit);
        if (bad) ++n_fail;
        at_position(s);
        ++series.compared[s];
        series.failure_rate[s] += bad;
        series.ce_mean[s] += d.cross_entropy;
        series.ce_excess_mean[s] += d.kl;
      }
    }
    compared += n_cmp;
    failed += n_fail;
    row.cells.push_back(level1 ? std::to_string(n_cmp) : "-");
    row.cells.push_back(level1 ? std::to_string(n_fail) : "-");
    row.cells.push_back(level1 ? fmt(worst_kl) : "-");
    row.cells.push_back(level1 ? fmt(worst_diff) : "-");
    // worst: diverged earliest, then most failing tokens, then largest KL
    row.badness = {same ? 0.0 : 2.0 - static_cast<double>(p) / static_cast<double>(len + 1),
                   static_cast<double>(n_fail) * 1e6 + worst_kl};
    b.c.rows.push_back(std::move(row));
  }
  b.check("token_mismatch_rate", total ? static_cast<double>(mismatched) / static_cast<double>(total) : 0.0,
          "token_mismatch_rate");
  b.info("identical_samples", ids.empty() ? 1.0 : static_cast<double>(identical) / static_cast<double>(ids.size()),
         "share of prompts whose generated ids are identical");
  if (!level1) {
    series = PositionSeries();
    if (la.present() || lb.present())
      b.note(std::string("only level 0 (token equality): the ") + (la.present() ? "candidate" : "reference") +
             " has no logits (output.logits = none)");
    else
      b.note("only level 0 (token equality): neither file has logits");
    return;
  }
  b.note("level 1 over the reference's top-" + std::to_string(std::min<std::int64_t>(kTopK, la.cols)) +
         " ids of each step, softmax over those ids in each file; steps are compared up to and including the first "
         "divergence only (later steps saw different contexts; comparing them needs teacher forcing)");
  note_quantized(b, la, lb);
  if (!lb.full)
    b.note("the candidate stores top-" + std::to_string(lb.cols) +
           " logits: only reference top-k ids also present in the candidate's top-k are compared");
  if (unshared > 0)
    b.note(std::to_string(unshared) + " step(s) had no reference top-k id in the candidate's top-k (counted as failing)");
  b.info("compared_tokens", static_cast<double>(compared), "steps compared at level 1");
  b.c.per_token["ce_per_token"] = kls;
  b.c.per_token["softmax_diff_per_token"] = diffs;
  for (std::size_t s = 0; s < series.position.size(); ++s) {
    const double n = static_cast<double>(std::max<std::size_t>(series.compared[s], 1));
    series.failure_rate[s] /= n;
    series.ce_mean[s] /= n;
    series.ce_excess_mean[s] /= n;
  }
  b.c.histograms.push_back(logit_diffs.histogram());
  b.c.histograms.push_back(DiffHistogram::of("per-token mean |softmax difference|", diffs));
  b.info("ce_mean", mean(ces), "mean cross entropy -sum p_ref log p_cand over the top-k");
  b.info("ce_excess_mean", mean(kls), "mean of CE - H(ref) (= KL over the top-k)");
  b.info("ce_excess_max", kls.empty() ? 0.0 : *std::max_element(kls.begin(), kls.end()),
         "largest per-token CE - H(ref); per-token limit generate.ce_per_token");
  b.info("softmax_diff_mean", mean(diffs), "mean |p_ref - p_cand| over the top-k");
  b.info("softmax_diff_max", diffs.empty() ? 0.0 : *std::max_element(diffs.begin(), diffs.end()),
         "largest per-token mean |p_ref - p_cand|; per-token limit generate.softmax_diff_per_token");
  b.check("failure_rate", compared ? static_cast<double>(failed) / static_cast<double>(compared) : 0.0, "failure_rate");
}

// --- qa ---------------------------------------------------------------------------------------------

void compare_qa(const H5Reader& ref, const H5Reader& cand, const std::vector<std::string>& ids, Builder& b) {
  require(ref, "/features/example_index", "a qa result has /features/example_index");
  const auto example = ref.read_u64("/features/example_index");
  require_same_inputs(ref, cand, "/features/input_ids", ids, example);
  if (cand.read_u64("/features/example_index") != example)
    throw InputError(cand.path() + ": /features/example_index", "features map to other questions than in the reference");

  b.c.sample_columns = {"same answer", "max |logit diff|", "F1 ref", "F1 cand", "answer ref", "answer cand"};
  const auto ta = ref.read_strings("/predictions/text"), tb = cand.read_strings("/predictions/text");
  if (ta.size() != ids.size() || tb.size() != ids.size())
    throw InputError(cand.path() + ": /predictions/text", "one answer per question expected");
  std::vector<double> worst(ids.size(), 0.0);
  const bool full = ref.exists("/logits/start_logits") && cand.exists("/logits/start_logits") &&
                    ref.exists("/logits/end_logits") && cand.exists("/logits/end_logits");
  if (full) {
    double sum = 0, mx = 0;
    std::size_t n = 0;
    std::vector<double> all;
    for (const char* g : {"/logits/start_logits", "/logits/end_logits"}) {
      const auto a = ref.read_ragged_f32(g), c = cand.read_ragged_f32(g);
      if (a.size() != c.size() || a.size() != example.size())
        throw InputError(cand.path() + ": " + g, "one row per feature expected");
      for (std::size_t f = 0; f < a.size(); ++f) {
        if (a[f].size() != c[f].size())
          throw InputError(cand.path() + ": " + g, "feature " + std::to_string(f) + " has another length than in the reference");
        for (std::size_t j = 0; j < a[f].size(); ++j) {
          const double d = std::fabs(static_cast<double>(a[f][j]) - c[f][j]);
          sum += d;
          mx = std::max(mx, d);
          ++n;
          all.push_back(d);
          if (example[f] < worst.size()) worst[example[f]] = std::max(worst[example[f]], d);
        }
      }
    }
    b.check("max_logit_diff", mx, "max_logit_diff");
    b.check("mean_logit_diff", n ? sum / static_cast<double>(n) : 0.0, "mean_logit_diff");
    b.c.histograms.push_back(DiffHistogram::of("|start/end logit difference| (every token of every feature)", all));
  } else {
    b.note("start/end logit differences need output.logits = \"full\" in both files; not compared");
  }
  const double em_a = ref.attr_double("/metrics", "exact_match"), em_b = cand.attr_double("/metrics", "exact_match");
  const double f1_a = ref.attr_double("/metrics", "f1"), f1_b = cand.attr_double("/metrics", "f1");
  b.info("exact_match_ref", em_a, "reference exact match");
  b.info("exact_match_cand", em_b, "candidate exact match");
  b.check("em_delta", std::fabs(em_b - em_a), "em_delta");
  b.info("f1_ref", f1_a, "reference F1");
  b.info("f1_cand", f1_b, "candidate F1");
  b.check("f1_delta", std::fabs(f1_b - f1_a), "f1_delta");
  std::size_t same = 0;
  std::vector<double> fa, fb;
  if (ref.exists("/metrics/f1_per_question") && cand.exists("/metrics/f1_per_question")) {
    fa = ref.read_f64("/metrics/f1_per_question");
    fb = cand.read_f64("/metrics/f1_per_question");
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const bool eq = ta[i] == tb[i];
    same += eq;
    SampleRow row{ids[i], {}, {eq ? 0.0 : 1.0, worst[i]}};
    row.cells = {eq ? "yes" : "NO", full ? fmt(worst[i]) : "-", i < fa.size() ? fmt(fa[i], "%.3f") : "-",
                 i < fb.size() ? fmt(fb[i], "%.3f") : "-", ta[i], tb[i]};
    b.c.rows.push_back(std::move(row));
  }
  b.check("answer_agreement", ids.empty() ? 1.0 : static_cast<double>(same) / static_cast<double>(ids.size()),
          "answer_agreement_min");
}

// --- mlm --------------------------------------------------------------------------------------------

void compare_mlm(const H5Reader& ref, const H5Reader& cand, const std::vector<std::string>& ids, Builder& b) {
  require_same_inputs(ref, cand, "/samples/input_ids", ids, {});
  const auto sample = ref.read_u64("/masks/sample_index");
  const auto sa = ref.shape("/predictions/token_ids"), sb = cand.shape("/predictions/token_ids");
  if (sa.size() != 2 || sb.size() != 2 || sa[0] != sb[0] || sa[0] != static_cast<std::int64_t>(sample.size()))
    throw InputError(cand.path() + ": /predictions/token_ids", "expected [masks, k] with as many masks as the reference");
  const auto pa = ref.read_i64("/predictions/token_ids"), pb = cand.read_i64("/predictions/token_ids");
  const std::size_t m = sample.size();

  std::vector<double> worst(ids.size(), 0.0);
  std::vector<std::size_t> agree(ids.size(), 0), masks(ids.size(), 0);
  const bool full = ref.exists("/logits/mask_logits") && cand.exists("/logits/mask_logits");
  if (full) {
    if (ref.shape("/logits/mask_logits") != cand.shape("/logits/mask_logits"))
      throw InputError(cand.path() + ": /logits/mask_logits", "shape differs from the reference's");
    H5Rows<float> a(ref, "/logits/mask_logits"), c(cand, "/logits/mask_logits");
    if (a.rows() != static_cast<std::int64_t>(m))
      throw InputError(ref.path() + ": /logits/mask_logits", "one row per mask expected");
    const auto v = static_cast<std::size_t>(a.cols());
    double sum = 0, mx = 0;
    DiffHistogramBuilder all("|logit difference| at the masks (whole vocabulary)");
    for (std::size_t j = 0; j < m; ++j) {
      const float* ra = a.row(static_cast<std::int64_t>(j));
      const float* rc = c.row(static_cast<std::int64_t>(j));
      const std::size_t s = sample[j];
      for (std::size_t x = 0; x < v; ++x) {
        const double d = std::fabs(static_cast<double>(ra[x]) - rc[x]);
        all.add(d);
        sum += d;
        mx = std::max(mx, d);
        if (s < worst.size()) worst[s] = std::max(worst[s], d);
      }
    }
    b.check("max_logit_diff", mx, "max_logit_diff");
    b.check("mean_logit_diff", m * v == 0 ? 0.0 : sum / static_cast<double>(m * v), "mean_logit_diff");
    b.c.histograms.push_back(all.histogram());
  } else {
    b.note("mask logit differences need output.logits = \"full\" in both files; not compared");
  }
  std::size_t same = 0;
  for (std::size_t j = 0; j < m; ++j) {
    const bool eq = pa[j * static_cast<std::size_t>(sa[1])] == pb[j * static_cast<std::size_t>(sb[1])];
    same += eq;
    if (sample[j] < ids.size()) {
      agree[sample[j]] += eq;
      ++masks[sample[j]];
    }
  }
  b.check("top1_agreement", m ? static_cast<double>(same) / static_cast<double>(m) : 1.0, "top1_agreement_min");
  if (ref.has_attr("/metrics", "accuracy") && cand.has_attr("/metrics", "accuracy")) {
    const double a = ref.attr_double("/metrics", "accuracy"), c = cand.attr_double("/metrics", "accuracy");
    b.info("accuracy_ref", a, "reference accuracy");
    b.info("accuracy_cand", c, "candidate accuracy");
    b.check("accuracy_delta", std::fabs(c - a), "accuracy_delta");
  }
  b.c.sample_columns = {"same top-1", "max |logit diff|"};
  for (std::size_t i = 0; i < ids.size(); ++i) {
    SampleRow row{ids[i], {}, {static_cast<double>(masks[i] - agree[i]), worst[i]}};
    row.cells = {std::to_string(agree[i]) + "/" + std::to_string(masks[i]), full ? fmt(worst[i]) : "-"};
    b.c.rows.push_back(std::move(row));
  }
}

// --- perplexity -------------------------------------------------------------------------------------

void compare_perplexity(const H5Reader& ref, const H5Reader& cand, const std::vector<std::string>& ids, Builder& b) {
  for (const auto* f : {&ref, &cand}) require(*f, "/tokens/ids", "a perplexity result has /tokens/ids");
  const auto ta = ref.read_i64("/tokens/ids"), tb = cand.read_i64("/tokens/ids");
  if (ta != tb) {
    const auto p = common_prefix(ta, tb);
    throw InputError(cand.path() + ": /tokens/ids", "sample '" + (ids.empty() ? std::string("?") : ids[0]) +
                                                        "' has other token ids than in the reference (first difference at "
                                                        "position " + std::to_string(p) + ")");
  }
  const auto pos = ref.read_i64("/scores/position");
  if (cand.read_i64("/scores/position") != pos)
    throw InputError(cand.path() + ": /scores/position",
                     "other tokens were scored than in the reference (context_length / stride differ?)");
  const auto lpa = ref.read_f64("/scores/log_prob"), lpb = cand.read_f64("/scores/log_prob");
  if (lpa.size() != pos.size() || lpb.size() != pos.size())
    throw InputError(cand.path() + ": /scores/log_prob", "one value per scored position expected");

  const double ppl_a = ref.attr_double("/metrics", "perplexity"), ppl_b = cand.attr_double("/metrics", "perplexity");
  b.info("perplexity_ref", ppl_a, "reference perplexity");
  b.info("perplexity_cand", ppl_b, "candidate perplexity");
  Metric ratio{"perplexity_ratio", ppl_b / ppl_a, std::nullopt, std::nullopt, ""};
  const double rmax = b.t.get("perplexity", "ratio_max");
  ratio.max = rmax;
  ratio.min = rmax > 0 ? 1.0 / rmax : 0.0;
  ratio.meaning = "perplexity cand / ref, within [1/ratio_max, ratio_max]";
  b.c.metrics.push_back(ratio);

  std::vector<double> dlp(pos.size());
  for (std::size_t i = 0; i < pos.size(); ++i) dlp[i] = std::fabs(lpb[i] - lpa[i]);
  b.check("logprob_diff_mean", pos.empty() ? 0.0 : mean(dlp), "logprob_diff_mean");
  b.check("logprob_diff_p99", pos.empty() ? 0.0 : percentile(dlp, 99), "logprob_diff_p99");
  b.c.histograms.push_back(DiffHistogram::of("|log-prob difference| per scored token", dlp));

  LogitRows la = load_logits(ref, "/logits/full", "/logits/topk");
  LogitRows lb = load_logits(cand, "/logits/full", "/logits/topk");
  const bool logits = la.present() && lb.present();
  std::vector<double> kl(pos.size(), kNaN);
  std::vector<char> same_top(pos.size(), 0);
  if (logits) {
    if (la.rows != static_cast<std::int64_t>(pos.size()) || lb.rows != la.rows)
      throw InputError(cand.path() + ": /logits", "one logits row per scored token expected");
    const bool both_full = la.full && lb.full && la.cols == lb.cols;
    std::size_t agree = 0;
    std::vector<double> r, c;
    for (std::size_t i = 0; i < pos.size(); ++i) {
      const auto row = static_cast<std::int64_t>(i);
      if (both_full) {
        const float* ra = la.row_values(row);
        const float* rb = lb.row_values(row);
        r.assign(ra, ra + la.cols);
        c.assign(rb, rb + lb.cols);
        kl[i] = token_divergence(r, c).kl;
      } else {
        // shared top-k: the reference's stored ids that the candidate also has (all of them when it is full)
        kl[i] = restricted_logits(la, row, lb, row, static_cast<std::size_t>(la.cols), r, c)
                    ? token_divergence(r, c).kl
                    : std::numeric_limits<double>::infinity();
      }
      same_top[i] = la.argmax(row) == lb.argmax(row);
      agree += same_top[i];
    }
    b.check("kl_mean", mean(kl), "kl_mean");
    b.c.histograms.push_back(DiffHistogram::of("KL(ref || cand) per scored token", kl));
    b.info("kl_median", percentile(kl, 50), "median per-token KL(ref || cand)");
    b.check("kl_p99", percentile(kl, 99), "kl_p99");
    b.check("top1_agreement", pos.empty() ? 1.0 : static_cast<double>(agree) / static_cast<double>(pos.size()),
            "top1_agreement_min");
    note_quantized(b, la, lb);
    if (!both_full)
      b.note("KL is over the shared top-k ids only (softmax over the ids both files store), not the whole vocabulary");
  } else {
    b.note("KL divergence and top-1 agreement need logits in both files (output.logits = \"full\" or \"topk\"); not compared");
  }
  b.c.rows_title = "tokens";
  b.c.sample_columns = {"position", "token", "log_prob ref", "log_prob cand", "|diff|", "KL", "same top-1"};
  for (std::size_t i = 0; i < pos.size(); ++i) {
    const auto p = static_cast<std::size_t>(pos[i]);
    SampleRow row{ids.empty() ? "" : ids[0], {}, {dlp[i], logits ? kl[i] : 0.0}};
    row.cells = {std::to_string(pos[i]), p < ta.size() ? std::to_string(ta[p]) : "?", fmt(lpa[i]), fmt(lpb[i]),
                 fmt(dlp[i]), logits ? fmt(kl[i]) : "-", logits ? (same_top[i] ? "yes" : "NO") : "-"};
    b.c.rows.push_back(std::move(row));
  }
}

// --- loglikelihood ----------------------------------------------------------------------------------

void compare_loglikelihood(const H5Reader& ref, const H5Reader& cand, const std::vector<std::string>& ids, Builder& b) {
  for (const auto* f : {&ref, &cand}) require(*f, "/loglikelihood/value", "a loglikelihood result has /loglikelihood/value");
  const auto ca = ref.read_ragged_i64("/requests/continuation_ids"), cb = cand.read_ragged_i64("/requests/continuation_ids");
  const auto xa = ref.read_ragged_i64("/requests/context_ids"), xb = cand.read_ragged_i64("/requests/context_ids");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i >= ca.size() || i >= cb.size() || ca[i] != cb[i] || xa.at(i) != xb.at(i))
      throw InputError(cand.path() + ": /requests", "request '" + ids[i] +
                                                        "' has other context or continuation token ids than in the reference");
  }
  const auto la = ref.read_f64("/loglikelihood/value"), lb = cand.read_f64("/loglikelihood/value");
  const auto ga = ref.read_i64("/loglikelihood/is_greedy"), gb = cand.read_i64("/loglikelihood/is_greedy");
  if (la.size() != ids.size() || lb.size() != ids.size() || ga.size() != ids.size() || gb.size() != ids.size())
    throw InputError(cand.path() + ": /loglikelihood", "one value per request expected");
  std::vector<double> diff(ids.size());
  std::size_t agree = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    diff[i] = std::fabs(lb[i] - la[i]);
    agree += ga[i] == gb[i] ? 1 : 0;
  }
  b.check("loglik_diff_max", ids.empty() ? 0.0 : *std::max_element(diff.begin(), diff.end()), "loglik_diff_max");
  b.info("loglik_diff_mean", ids.empty() ? 0.0 : mean(diff), "mean per-request |log-likelihood cand - ref| (nats)");
  b.check("greedy_agreement", ids.empty() ? 1.0 : static_cast<double>(agree) / static_cast<double>(ids.size()),
          "greedy_agreement_min");
  b.c.histograms.push_back(DiffHistogram::of("|log-likelihood difference| per request", diff));
  b.c.rows_title = "requests";
  b.c.sample_columns = {"loglik ref", "loglik cand", "|diff|", "greedy ref", "greedy cand"};
  for (std::size_t i = 0; i < ids.size(); ++i) {
    SampleRow row{ids[i], {}, {diff[i], ga[i] == gb[i] ? 0.0 : 1.0}};
    row.cells = {fmt(la[i]), fmt(lb[i]), fmt(diff[i]), ga[i] ? "yes" : "no", gb[i] ? "yes" : "no"};
    b.c.rows.push_back(std::move(row));
  }
}

// --- multiple_choice --------------------------------------------------------------------------------

// A paired accuracy as compare reports it: both shares, the candidate's drop checked against `key`,
// McNemar's p, and a note on whether the difference is more than chance.
void report_paired(Builder& b, const std::string& metric, const PairedAccuracy& a, const std::string& key) {
  b.info(metric + "_ref", a.ref, "reference's " + metric);
  b.info(metric + "_cand", a.cand, "candidate's " + metric);
  b.check(metric + "_drop", std::max(0.0, -a.delta), key);
  b.info(metric + "_mcnemar_p", a.p, "McNemar's exact two-sided p over the documents only one file got right");
  b.note(metric + ": " + std::to_string(a.ref_only) + " document(s) right only in the reference, " +
         std::to_string(a.cand_only) + " only in the candidate; the paired difference is " +
         (a.p < 0.05 ? "significant" : "not significant") + " at 5% (McNemar exact p = " + fmt(a.p) + ")");
}

// Same documents and requests (token ids equal), then acc / acc_norm as paired accuracies, the share of
// documents choosing the same answer, and per-request log-likelihood differences.
void compare_multiple_choice(const H5Reader& ref, const H5Reader& cand, const std::vector<std::string>& ids, Builder& b) {
  for (const auto* f : {&ref, &cand}) require(*f, "/documents/acc", "a multiple_choice result has /documents/acc");
  const auto ia = ref.read_ragged_i64("/requests/input_ids"), ib = cand.read_ragged_i64("/requests/input_ids");
  const auto ta = ref.read_ragged_i64("/requests/continuation_ids"), tb = cand.read_ragged_i64("/requests/continuation_ids");
  if (ia != ib || ta != tb)
    throw InputError(cand.path() + ": /requests", "other requests (token ids) than the reference: another task file, data set, "
                                                  "few-shot setting or tokenizer");
  const auto la = ref.read_f64("/loglikelihood/value"), lb = cand.read_f64("/loglikelihood/value");
  if (la.size() != ia.size() || lb.size() != ia.size())
    throw InputError(cand.path() + ": /loglikelihood/value", "one value per request expected");
  const std::string where = cand.path() + ": /documents";
  report_paired(b, "acc", paired_accuracy(ref.read_i64("/documents/acc"), cand.read_i64("/documents/acc"), where),
                "acc_drop_max");
  report_paired(b, "acc_norm",
                paired_accuracy(ref.read_i64("/documents/acc_norm"), cand.read_i64("/documents/acc_norm"), where),
                "acc_drop_max");
  const auto pa = ref.read_i64("/documents/pred"), pb = cand.read_i64("/documents/pred");
  const auto na = ref.read_i64("/documents/pred_norm"), nb = cand.read_i64("/documents/pred_norm");
  if (pa.size() != ids.size() || pb.size() != ids.size() || na.size() != ids.size() || nb.size() != ids.size())
    throw InputError(where, "one decision per document expected");
  std::size_t same = 0, same_norm = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    same += pa[i] == pb[i];
    same_norm += na[i] == nb[i];
  }
  const double n = std::max<double>(1.0, static_cast<double>(ids.size()));
  b.check("decision_agreement", static_cast<double>(same) / n, "decision_agreement_min");
  b.info("decision_agreement_norm", static_cast<double>(same_norm) / n, "share of documents with the same acc_norm choice");
  std::vector<double> diff(la.size());
  for (std::size_t i = 0; i < la.size(); ++i) diff[i] = std::fabs(lb[i] - la[i]);
  b.check("loglik_diff_max", diff.empty() ? 0.0 : *std::max_element(diff.begin(), diff.end()), "loglik_diff_max");
  b.info("loglik_diff_mean", diff.empty() ? 0.0 : mean(diff), "mean per-request |log-likelihood cand - ref| (nats)");
  b.c.histograms.push_back(DiffHistogram::of("|log-likelihood difference| per request", diff));
  // One row per document: its choices' largest difference, the answers chosen.
  const auto first = ref.read_i64("/documents/first_request"), count = ref.read_i64("/documents/n_choices");
  b.c.rows_title = "documents";
  b.c.sample_columns = {"choice ref", "choice cand", "max |ll diff|"};
  for (std::size_t i = 0; i < ids.size() && i < first.size() && i < count.size(); ++i) {
    double worst = 0.0;
    for (std::int64_t k = first[i]; k < first[i] + count[i] && static_cast<std::size_t>(k) < diff.size(); ++k)
      worst = std::max(worst, diff[static_cast<std::size_t>(k)]);
    SampleRow row{ids[i], {std::to_string(pa[i]), std::to_string(pb[i]), fmt(worst)}, {pa[i] != pb[i] ? 1.0 : 0.0, worst}};
    b.c.rows.push_back(std::move(row));
  }
}

// --- generate_until ---------------------------------------------------------------------------------

// Token level as generate at level 0 (the same prompts, generated ids equal), then per answer filter
// the exact match of both files as a paired accuracy and the documents whose extracted answers agree.
void compare_generate_until(const H5Reader& ref, const H5Reader& cand, const std::vector<std::string>& ids, Builder& b) {
  compare_generate(ref, cand, ids, b);
  require(ref, "/answers", "a generate_until result has /answers");
  require(cand, "/answers", "a generate_until result has /answers");
  const auto filters = ref.children("/answers");
  if (filters.empty()) throw InputError(ref.path() + ": /answers", "no answer filter group");
  if (cand.children("/answers") != filters)
    throw InputError(cand.path() + ": /answers", "other answer filters than the reference's (another task file)");
  for (const auto& f : filters) {
    const std::string g = "/answers/" + f;
    const auto aa = ref.read_strings(g + "/answer"), ac = cand.read_strings(g + "/answer");
    if (aa.size() != ids.size() || ac.size() != ids.size()) throw InputError(cand.path() + ": " + g, "one answer per document expected");
    report_paired(b, "exact_match," + f, paired_accuracy(ref.read_i64(g + "/exact_match"), cand.read_i64(g + "/exact_match"),
                                                         cand.path() + ": " + g),
                  "exact_match_drop_max");
    std::size_t same = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) same += aa[i] == ac[i];
    b.check("answer_agreement," + f, static_cast<double>(same) / std::max<double>(1.0, static_cast<double>(ids.size())),
            "answer_agreement_min");
  }
  // compare_generate's rows are in ids order: the first filter's answers beside them.
  const auto aa = ref.read_strings("/answers/" + filters.front() + "/answer");
  const auto ac = cand.read_strings("/answers/" + filters.front() + "/answer");
  b.c.sample_columns.push_back("answers ref / cand");
  for (std::size_t i = 0; i < b.c.rows.size() && i < ids.size(); ++i) b.c.rows[i].cells.push_back(aa[i] + " / " + ac[i]);
}

// How each task's result files are compared, keyed by the task registry's TaskKind.
using CompareFunction = void (*)(const H5Reader& ref, const H5Reader& cand, const std::vector<std::string>& ids,
                                 Builder& b);
struct CompareRow {
  TaskKind kind;
  CompareFunction function;
  constexpr bool complete() const { return function != nullptr; }
};
constexpr CompareRow kCompare[] = {
    {TaskKind::qa, compare_qa},
    {TaskKind::mlm, compare_mlm},
    {TaskKind::generate, compare_generate},
    {TaskKind::perplexity, compare_perplexity},
    {TaskKind::loglikelihood, compare_loglikelihood},
    {TaskKind::multiple_choice, compare_multiple_choice},
    {TaskKind::generate_until, compare_generate_until},
};
static_assert(rows_cover_every_task(kCompare), "kCompare needs one row per TaskKind, in TaskKind order");

}  // namespace

Comparison compare_results(const std::string& reference, const std::string& candidate, const Thresholds& thresholds) {
  probe_hdf5_file(reference);  // a malformed file must not crash evalrun inside HDF5
  probe_hdf5_file(candidate);
  H5Reader ref(reference), cand(candidate);
  require_result_file(ref);
  require_result_file(cand);
  Comparison c;
  c.reference = reference;
  c.candidate = candidate;
  c.thresholds_origin = thresholds.origin();
  c.rows_title = "samples";
  c.task = ref.attr_string("/", "task");
  const std::string other_task = cand.attr_string("/", "task");
  if (other_task != c.task)
    throw InputError(candidate, "task '" + other_task + "' differs from the reference's '" + c.task + "' (" + reference + ")");
  auto dtype = [](const H5Reader& f) { return f.has_attr("/", "dtype") ? f.attr_string("/", "dtype") : std::string("?"); };
  c.reference_dtype = dtype(ref);
  c.candidate_dtype = dtype(cand);
  const auto ids = ref.read_strings("/samples/id");
  require_same_ids(ref, cand, ids);
  c.n_samples = ids.size();
  const TaskInfo* task = find_task(c.task);
  if (task == nullptr) throw InputError(reference, "task '" + c.task + "' cannot be compared (known: " + task_names() + ")");
  Builder b{c, thresholds, task->thresholds_section};
  kCompare[static_cast<std::size_t>(task->kind)].function(ref, cand, ids, b);
  std::stable_sort(c.rows.begin(), c.rows.end(), [](const SampleRow& x, const SampleRow& y) { return x.badness > y.badness; });
  return c;
}

}  // namespace evalrun
