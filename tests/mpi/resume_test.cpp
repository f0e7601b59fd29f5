// `evalrun run --resume` through the real binary on 2 ranks, for every task: a run is killed with
// SIGKILL once its journal holds finished items, the resumed run computes only the rest, and its result
// file equals an uninterrupted run's (same predictions and tokens, logits within 1e-5; timing aside).
// A changed config or model is refused (exit 2) naming what changed, and so is a run without --resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include "io/hdf5_file.hpp"
#include "io/journal.hpp"
#include "task/encoder_runner.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;

#define EXPECT_HAS(text, part)                               \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "output: " << (text) << "\n   lacks: " << (part)

std::string text_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

template <class T>
void expect_close(const std::vector<T>& a, const std::vector<T>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && a[i] == b[i]) continue;  // top-k padding
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  EXPECT_LE(worst, tol) << what;
}

class Resume : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-resume");
    for (const auto& [args, name] : std::vector<std::pair<std::string, std::string>>{
             {"--preset tiny-llama --seed 2", "llama"},
             {"--preset tiny-llama --seed 3", "llama-other"},
             {"--head qa --preset tiny --seed 7", "qa-model"},
             {"--head mlm --preset tiny --seed 7", "mlm-model"}}) {
      auto r = run_process(kBin + " make-model " + args + " --out " + (dir_ / name).string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    // Data sets large enough that a tiny model needs a few seconds on 2 ranks.
    std::mt19937 rng(1);
    const std::vector<std::string> words = {"the", "river", "rose", "slowly", "through", "night", "and", "fields",
                                            "were", "under", "water", "while", "people", "watched", "from", "hills"};
    auto sentence = [&](int n) {
      std::string s;
      for (int i = 0; i < n; ++i) s += (i ? " " : "") + words[rng() % words.size()];
      return s;
    };
    {
      std::ofstream f(dir_ / "prompts.jsonl");
      for (int i = 0; i < 1500; ++i) f << "{\"id\": \"p" << i << "\", \"prompt\": \"" << sentence(3 + i % 9) << "\"}\n";
    }
    {
      std::ofstream f(dir_ / "squad.json");
      f << "{\"version\": \"1.1\", \"data\": [";
      for (int a = 0; a < 40; ++a) {
        const std::string context = sentence(400);
        f << (a ? "," : "") << "{\"title\": \"t" << a << "\", \"paragraphs\": [{\"context\": \"" << context
          << "\", \"qas\": [";
        for (int q = 0; q < 5; ++q) {
          f << (q ? "," : "") << "{\"id\": \"q" << a << "_" << q << "\", \"question\": \"what did the "
            << words[rng() % words.size()] << " do?\", \"answers\": [{\"text\": \"" << context.substr(0, 3)
            << "\", \"answer_start\": 0}]}";
        }
        f << "]}]}";
      }
      f << "]}\n";
    }
    {
      std::ofstream f(dir_ / "mlm.jsonl");
      for (int i = 0; i < 4000; ++i) {
        f << "{\"id\": \"s" << i << "\", \"text\": \"" << sentence(5 + i % 30) << " <mask> " << sentence(4) << "\"}\n";
      }
    }
    {
      std::ofstream f(dir_ / "corpus.txt");
      for (int i = 0; i < 2000; ++i) f << sentence(12) << ".\n";
    }
    {
      // Requests are fast (about 10,000/s per rank here): enough of them that the kill lands mid-run.
      std::ofstream f(dir_ / "loglik.jsonl");
      for (int i = 0; i < 20000; ++i) {
        f << "{\"context\": \"" << sentence(3 + i % 9) << "\", \"continuation\": \" " << sentence(1 + i % 4) << "\"}\n";
      }
    }
    fs::copy(dir_ / "llama", dir_ / "model", fs::copy_options::recursive);  // the generate run's model
    write_config("generate.toml", "generate", dir_ / "model",
                 "dataset = \"" + (dir_ / "prompts.jsonl").string() +
                     "\"\nmax_new_tokens = 32\nbatch_size = 2\n[output]\nlogits = \"topk\"\ntop_k = 5\n");
    write_config("qa.toml", "qa", dir_ / "qa-model",
                 "dataset = \"" + (dir_ / "squad.json").string() + "\"\nmax_seq_length = 128\ndoc_stride = 64\nbatch_size = 2\n");
    write_config("mlm.toml", "mlm", dir_ / "mlm-model",
                 "dataset = \"" + (dir_ / "mlm.jsonl").string() + "\"\nbatch_size = 2\n[output]\nlogits = \"full\"\n");
    write_config("perplexity.toml", "perplexity", dir_ / "llama",
                 "dataset = \"" + (dir_ / "corpus.txt").string() + "\"\ncontext_length = 32\nstride = 16\nbatch_size = 2\n");
    write_config("loglikelihood.toml", "loglikelihood", dir_ / "llama",
                 "dataset = \"" + (dir_ / "loglik.jsonl").string() + "\"\nbatch_size = 2\n");
    // The same run with the model split over the 2 ranks (tensor parallel): one group, whose first
    // rank journals, and writes its 16-bit log-probability rows into the run's rows file as it goes.
    write_config("perplexity_tp.toml", "perplexity", dir_ / "llama",
                 "dataset = \"" + (dir_ / "corpus.txt").string() +
                     "\"\ncontext_length = 32\nstride = 16\nbatch_size = 2\n[parallel]\ntensor_parallel = 2\n"
                     "[output]\nlogits = \"logprobs16\"\n");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static void write_config(const std::string& name, const std::string& kind, const fs::path& model,
                           const std::string& task_rest) {
    std::ofstream(dir_ / name) << "[run]\nname = \"" << kind << "\"\nthreads = 1\n[model]\npath = \"" << model.string()
                               << "\"\n[task]\nkind = \"" << kind << "\"\n" << task_rest;
  }

  static std::string run_cmd(const std::string& config, const std::string& out, const std::string& extra = "") {
    return kBin + " " + (dir_ / config).string() + " --set output.path=" + quote((dir_ / out).string()) + " " + extra;
  }

  static std::size_t journaled_items(const std::string& out) {
    const fs::path j = dir_ / (out + ".journal");
    std::size_t n = 0;
    if (!fs::exists(j)) return 0;
    for (const auto& e : fs::directory_iterator(j)) {
      if (e.path().extension() == ".evj") n += read_journal(e.path().string()).items.size();
    }
    return n;
  }

  // Starts the run on 2 ranks and kills one rank with SIGKILL as soon as a journal file holds a
  // finished item. Returns the number of items journaled.
  static std::size_t interrupted_run(const std::string& config, const std::string& out, std::size_t total) {
    const fs::path log = dir_ / (out + ".killed.log");
    const std::string journal = (dir_ / (out + ".journal")).string();
    const std::string script =
        "mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 " + run_cmd(config, out) + " > " +
        log.string() + " 2>&1 & mp=$!; "
        "for i in $(seq 1 1200); do [ -n \"$(find " + journal + " -name '*.evj' -size +4c 2>/dev/null)\" ] && break; "
        "sleep 0.05; done; "
        "kill -9 $(pgrep -P $mp | tail -1); wait $mp; echo \"exit=$?\"";
    const auto r = run_process("timeout 300 bash -c " + quote(script));
    EXPECT_EQ(r.output.find("exit=0"), std::string::npos) << r.output << text_of(log);
    EXPECT_EQ(text_of(log).find("wrote"), std::string::npos) << "the run finished before the kill\n" << text_of(log);
    EXPECT_FALSE(fs::exists(dir_ / out)) << "an interrupted run wrote a result file";
    const std::size_t n = journaled_items(out);
    EXPECT_GT(n, 0u) << text_of(log);
    EXPECT_LT(n, total) << text_of(log);
    return n;
  }

  // Uninterrupted reference run, interrupted run, resumed run (with another batch size); returns the
  // reference and resumed files, after checking what the resumed run skipped. `between` runs after
  // the interruption. The work item count comes from the reference run's log.
  static std::pair<std::string, std::string> kill_and_resume(const std::string& config,
                                                             const std::function<void(const std::string&)>& between = {}) {
    const std::string base = fs::path(config).stem().string();
    auto r = run_process(mpirun(2) + run_cmd(config, base + "-ref.h5"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / (base + "-ref.h5.journal"))) << "a finished run leaves no journal";
    // "prepared S samples -> N work items in ..."
    const auto at = r.output.find("-> ");
    EXPECT_NE(at, std::string::npos) << r.output;
    const std::size_t total = at == std::string::npos ? 0 : std::stoul(r.output.substr(at + 3));
    EXPECT_GT(total, 1000u) << "too little work to interrupt";
    const std::string out = base + ".h5";
    const std::size_t done = interrupted_run(config, out, total);
    std::printf("%s: %zu of %zu work items journaled when a rank was killed\n", base.c_str(), done, total);
    if (between) between(out);
    EXPECT_EQ(journaled_items(out), done) << "refused runs must leave the journal alone";
    r = run_process(mpirun(2) + run_cmd(config, out, "--resume --set task.batch_size=3"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_HAS(r.output, "resuming: " + std::to_string(done) + " work items done before, " +
                             std::to_string(total - done) + " to run");
    EXPECT_FALSE(fs::exists(dir_ / (out + ".journal"))) << "the journal outlived a finished run";
    H5Reader ref((dir_ / (base + "-ref.h5")).string()), got((dir_ / out).string());
    EXPECT_EQ(ref.attr_int("/timing", "resumed_items"), 0);
    EXPECT_EQ(got.attr_int("/timing", "resumed_items"), static_cast<std::int64_t>(done));
    return {ref.path(), got.path()};
  }

  // A record with a valid CRC whose payload the task cannot use, for a work item not yet done, in a
  // rank file of its own: --resume refuses it (exit 2) naming that file, and the file is then removed.
  static void hostile_record_is_refused(const std::string& config, const std::string& out, const std::string& payload,
                                        const std::string& reason) {
    const fs::path journal = dir_ / (out + ".journal");
    std::set<std::uint64_t> done;
    std::string run_id;
    for (const auto& e : fs::directory_iterator(journal)) {
      if (e.path().extension() != ".evj") continue;
      run_id = e.path().filename().string().substr(0, e.path().filename().string().find(".rank"));
      for (const auto& [index, record] : read_journal(e.path().string()).items) done.insert(index);
    }
    std::uint64_t index = 0;
    while (done.count(index)) ++index;
    const fs::path hostile = journal / (run_id + ".rank9.evj");
    {
      JournalWriter w(hostile.string());
      w.add(index, payload);
      w.flush();
    }
    const auto r = run_process(mpirun(2) + run_cmd(config, out, "--resume"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_HAS(r.output, hostile.string() + ": record at byte 4: work item " + std::to_string(index) +
                             ": the payload is not this task's result record (" + reason);
    EXPECT_FALSE(fs::exists(dir_ / out)) << "a refused run wrote a result file";
    fs::remove(hostile);
  }

  static inline fs::path dir_;
};

}  // namespace

TEST_F(Resume, GenerateKilledRankResumesToTheSameFileAndChangesAreRefused) {
  const auto [ref_path, got_path] = kill_and_resume("generate.toml", [](const std::string& out) {
    // Without --resume: refused, the journal kept.
    auto r = run_process(mpirun(2) + run_cmd("generate.toml", out));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_HAS(r.output, out + ".journal: an interrupted run of this output left");
    EXPECT_HAS(r.output, "add --resume");
    // A changed config key.
    r = run_process(mpirun(2) + run_cmd("generate.toml", out, "--resume --set task.max_new_tokens=31"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_HAS(r.output, "cannot resume: the run changed since it was interrupted: task.max_new_tokens = 31 (was 32)");
    // Other weights at the same model path.
    fs::rename(dir_ / "model", dir_ / "model-saved");
    fs::copy(dir_ / "llama-other", dir_ / "model", fs::copy_options::recursive);
    r = run_process(mpirun(2) + run_cmd("generate.toml", out, "--resume"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_HAS(r.output, "interrupted: the model's config.json or weights (sha256 ");  // the only change
    fs::remove_all(dir_ / "model");
    fs::rename(dir_ / "model-saved", dir_ / "model");
    EXPECT_FALSE(fs::exists(dir_ / out)) << "a refused run wrote a result file";
  });
  H5Reader a(ref_path), b(got_path);
  EXPECT_EQ(a.read_strings("/samples/id"), b.read_strings("/samples/id"));
  EXPECT_EQ(a.read_ragged_i64("/generated/ids"), b.read_ragged_i64("/generated/ids"));
  EXPECT_EQ(a.read_strings("/generated/text"), b.read_strings("/generated/text"));
  EXPECT_EQ(a.read_i64("/generated/stopped"), b.read_i64("/generated/stopped"));
  // Top-k indices are equal except where two logits tie within float rounding (the resumed items are
  // batched differently): there the two runs may list the tied tokens in either order.
  const auto ia = a.read_i64("/logits/topk/indices"), ib = b.read_i64("/logits/topk/indices");
  const auto va = a.read_f32("/logits/topk/values"), vb = b.read_f32("/logits/topk/values");
  ASSERT_EQ(ia.size(), ib.size());
  ASSERT_EQ(va.size(), ia.size());
  for (std::size_t i = 0; i < ia.size(); ++i) {
    if (ia[i] != ib[i]) {
      EXPECT_NEAR(va[i], vb[i], 1e-5) << "topk index " << i << " differs without a tie";
    }
  }
  expect_close(va, vb, 1e-5, "topk values");
  EXPECT_EQ(a.attr_int("/metrics", "generated_tokens"), b.attr_int("/metrics", "generated_tokens"));
}

TEST_F(Resume, QaFeaturesResumeAndPostProcessingSeesThemAll) {
  // 200 questions on 40 long contexts: several features (work items) per question.
  const auto [ref_path, got_path] = kill_and_resume("qa.toml", [](const std::string& out) {
    QaItemResult wrong;  // a well-formed record with logits for a feature of 3 tokens
    wrong.start_logits = wrong.end_logits = {0.0F, 1.0F, 2.0F};
    ByteWriter w;
    wrong.write(w);
    hostile_record_is_refused("qa.toml", out, w.take(), "3 start and 3 end logits for a feature of ");
  });
  H5Reader a(ref_path), b(got_path);
  EXPECT_EQ(a.read_u64("/features/example_index"), b.read_u64("/features/example_index"));
  EXPECT_EQ(a.read_i64("/features/input_ids/values"), b.read_i64("/features/input_ids/values"));
  EXPECT_EQ(a.read_strings("/predictions/text"), b.read_strings("/predictions/text"));
  EXPECT_EQ(a.read_strings("/predictions/nbest/text"), b.read_strings("/predictions/nbest/text"));
  EXPECT_EQ(a.read_i64("/predictions/nbest/feature"), b.read_i64("/predictions/nbest/feature"));
  expect_close(a.read_f32("/logits/start_logits/values"), b.read_f32("/logits/start_logits/values"), 1e-5, "start");
  expect_close(a.read_f32("/logits/end_logits/values"), b.read_f32("/logits/end_logits/values"), 1e-5, "end");
  EXPECT_DOUBLE_EQ(a.attr_double("/metrics", "f1"), b.attr_double("/metrics", "f1"));
}

TEST_F(Resume, MlmResumesToTheSameFile) {
  const auto [ref_path, got_path] = kill_and_resume("mlm.toml");
  H5Reader a(ref_path), b(got_path);
  EXPECT_EQ(a.read_i64("/predictions/token_ids"), b.read_i64("/predictions/token_ids"));
  EXPECT_EQ(a.read_strings("/predictions/filled_text"), b.read_strings("/predictions/filled_text"));
  // Every mask's whole row: those of journaled samples written by rank 0, the others by their ranks.
  EXPECT_EQ(a.shape("/logits/mask_logits"), b.shape("/logits/mask_logits"));
  expect_close(a.read_f32("/logits/mask_logits"), b.read_f32("/logits/mask_logits"), 1e-5, "mask logits");
  expect_close(a.read_f64("/logits/logsumexp"), b.read_f64("/logits/logsumexp"), 1e-5, "logsumexp");
}

TEST_F(Resume, PerplexityResumesToTheSameFile) {
  const auto [ref_path, got_path] = kill_and_resume("perplexity.toml", [](const std::string& out) {
    hostile_record_is_refused("perplexity.toml", out, "cut", "ByteReader: message truncated)");
  });
  H5Reader a(ref_path), b(got_path);
  EXPECT_EQ(a.read_i64("/scores/position"), b.read_i64("/scores/position"));
  expect_close(a.read_f64("/scores/log_prob"), b.read_f64("/scores/log_prob"), 1e-5, "log_prob");
  EXPECT_NEAR(a.attr_double("/metrics", "perplexity"), b.attr_double("/metrics", "perplexity"),
              1e-6 * a.attr_double("/metrics", "perplexity"));
}

TEST_F(Resume, LoglikelihoodResumesToTheSameFile) {
  const auto [ref_path, got_path] = kill_and_resume("loglikelihood.toml", [](const std::string& out) {
    hostile_record_is_refused("loglikelihood.toml", out, "cut", "ByteReader: message truncated)");
  });
  H5Reader a(ref_path), b(got_path);
  EXPECT_EQ(a.read_i64("/loglikelihood/num_tokens"), b.read_i64("/loglikelihood/num_tokens"));
  EXPECT_EQ(a.read_i64("/loglikelihood/is_greedy"), b.read_i64("/loglikelihood/is_greedy"));
  expect_close(a.read_f64("/loglikelihood/value"), b.read_f64("/loglikelihood/value"), 1e-5, "loglikelihood");
}

TEST_F(Resume, TensorParallelRunResumesToTheSameFile) {
  const auto [ref_path, got_path] = kill_and_resume("perplexity_tp.toml", [](const std::string& out) {
    // The journaled items' rows are in the interrupted run's rows file, not in their records: without
    // it --resume is refused (exit 2) naming it.
    fs::path rows;
    for (const auto& e : fs::directory_iterator(dir_ / (out + ".journal"))) {
      if (e.path().filename().string().find(".rows.h5") != std::string::npos) rows = e.path();
    }
    ASSERT_FALSE(rows.empty()) << "no rows file in the journal";
    fs::rename(rows, dir_ / "rows.h5.away");
    const auto r = run_process(mpirun(2) + run_cmd("perplexity_tp.toml", out, "--resume"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_HAS(r.output, rows.string() + ": the rows of ");
    EXPECT_HAS(r.output, "were written here, and the file is gone");
    fs::rename(dir_ / "rows.h5.away", rows);
  });
  H5Reader a(ref_path), b(got_path);
  EXPECT_EQ(b.attr_int("/", "tensor_parallel"), 2);
  EXPECT_EQ(a.read_i64("/scores/position"), b.read_i64("/scores/position"));
  expect_close(a.read_f64("/scores/log_prob"), b.read_f64("/scores/log_prob"), 1e-5, "log_prob");
  // Every scored token's row, those of the interrupted run's items included: the same codes but where
  // a logit's float rounding moves it across a code boundary.
  const std::string values = "/logits/logprobs16/values";
  ASSERT_EQ(a.shape(values), b.shape(values));
  H5Rows<std::uint16_t> ra(a, values), rb(b, values);
  std::int64_t off_by_one = 0;
  for (std::int64_t r = 0; r < ra.rows(); ++r) {
    const std::uint16_t* x = ra.row(r);
    std::vector<std::uint16_t> x_copy(x, x + ra.cols());
    const std::uint16_t* y = rb.row(r);
    for (std::int64_t j = 0; j < ra.cols(); ++j) {
      const int d = std::abs(static_cast<int>(x_copy[j]) - static_cast<int>(y[j]));
      ASSERT_LE(d, 1) << "row " << r << " column " << j;
      off_by_one += d;
    }
  }
  EXPECT_LE(off_by_one, ra.rows() * ra.cols() / 100) << "too many codes differ";
  const auto ta = a.read_i64("/logits/logprobs16/top_id"), tb = b.read_i64("/logits/logprobs16/top_id");
  ASSERT_EQ(ta.size(), tb.size());
  std::size_t other_top = 0;  // a near tie may go either way
  for (std::size_t i = 0; i < ta.size(); ++i) other_top += ta[i] != tb[i] ? 1 : 0;
  EXPECT_LE(other_top, ta.size() / 100);
}
