// `evalrun compare` through the real binary: two fp32 runs of the same tiny model agree (exit 0),
// a copy with perturbed logits fails naming the metric (exit 1), files of other samples are refused
// naming the sample (exit 2).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include "io/hdf5_file.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

class Compare : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-compare");
    auto r = run_process(kBin + " make-model --head qa --preset tiny --seed 3 --out " + (dir_ / "qa").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_process(kBin + " make-model --preset tiny-llama --seed 5 --out " + (dir_ / "llama").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(dir_ / "qa.toml") << "[run]\nname = \"qa\"\nthreads = 1\n[model]\npath = \"" << (dir_ / "qa").string()
                                    << "\"\n[task]\nkind = \"qa\"\ndataset = \"" << kSrc
                                    << "/data/demo_squad.json\"\nmax_seq_length = 128\ndoc_stride = 32\n";
    std::ofstream(dir_ / "gen.toml") << "[run]\nname = \"gen\"\nthreads = 1\n[model]\npath = \"" << (dir_ / "llama").string()
                                     << "\"\n[task]\nkind = \"generate\"\ndataset = \"" << kSrc
                                     << "/tests/data/decoder_prompts.jsonl\"\nmax_new_tokens = 8\n";
    for (const auto& [config, out, extra] : std::vector<std::array<std::string, 3>>{
             {"qa.toml", "qa1.h5", "--set task.batch_size=4"},
             {"qa.toml", "qa2.h5", "--set task.batch_size=1"},
             {"gen.toml", "g1.h5", "--set task.batch_size=1"},
             {"gen.toml", "g2.h5", "--set task.batch_size=3"}}) {
      r = run_process(kBin + " " + (dir_ / config).string() + " --set output.path=" + quote((dir_ / out).string()) + " " + extra);
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static ProcessResult compare(const std::string& a, const std::string& b, const std::string& extra = "") {
    return run_process(kBin + " compare " + path(a) + " " + path(b) + " " + extra);
  }

  // A copy of a QA result holding what compare reads, with `edit` applied to the start logits / ids.
  static void copy_qa(const std::string& from, const std::string& to,
                      const std::function<void(std::vector<std::vector<float>>&)>& edit_logits,
                      const std::function<void(std::vector<std::string>&)>& edit_ids) {
    H5Reader in(path(from));
    H5Writer w(path(to));
    for (const char* a : {"format_version", "task", "dtype"}) w.set_attr("/", a, in.attr_string("/", a));
    auto ids = in.read_strings("/samples/id");
    edit_ids(ids);
    w.write_strings("/samples/id", ids);
    w.write("/features/example_index", in.read_u64("/features/example_index"));
    w.write_ragged("/features/input_ids", in.read_ragged_i64("/features/input_ids"));
    auto start = in.read_ragged_f32("/logits/start_logits");
    edit_logits(start);
    w.write_ragged("/logits/start_logits", start);
    w.write_ragged("/logits/end_logits", in.read_ragged_f32("/logits/end_logits"));
    w.write_strings("/predictions/text", in.read_strings("/predictions/text"));
    w.create_group("/metrics");
    for (const char* a : {"exact_match", "f1"}) w.set_attr("/metrics", a, in.attr_double("/metrics", a));
    w.write("/metrics/f1_per_question", in.read_f64("/metrics/f1_per_question"));
    w.commit();
  }

  // A copy of a generate result whose first step of every prompt is inverted and sharpened (the tiny
  // random model is nearly flat): the tokens are kept, the logits disagree.
  static void write_perturbed_generate(const std::string& from, const std::string& to) {
    H5Reader in(path(from));
    H5Writer w(path(to));
    for (const char* a : {"format_version", "task", "dtype"}) w.set_attr("/", a, in.attr_string("/", a));
    w.write_strings("/samples/id", in.read_strings("/samples/id"));
    w.write_ragged("/samples/prompt_ids", in.read_ragged_i64("/samples/prompt_ids"));
    w.write_ragged("/generated/ids", in.read_ragged_i64("/generated/ids"));
    const auto shape = in.shape("/logits/step_logits");
    auto logits = in.read_f32("/logits/step_logits");
    const auto offsets = in.read_u64("/logits/step_offsets");
    for (std::size_t i = 0; i + 1 < offsets.size(); ++i) {
      float* row = logits.data() + offsets[i] * shape[1];
      for (std::int64_t v = 0; v < shape[1]; ++v) row[v] *= -20.0F;
    }
    w.write(std::string("/logits/step_logits"), logits, shape);
    w.write("/logits/step_offsets", offsets);
    w.commit();
  }

  // The DOM of an HTML file after headless Chromium ran its scripts (as root it needs --no-sandbox;
  // the network flags keep it from trying to reach Google's hosts on this closed network).
  static std::string rendered_dom(const std::string& html) {
    const fs::path profile = dir_ / "chromium-profile";
    const auto r = run_process("timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                               "--disable-background-networking --disable-component-update --disable-sync "
                               "--user-data-dir=" + profile.string() + " --dump-dom file://" + path(html) + " 2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << "headless chromium failed (scripts/setup.sh installs Debian's chromium)";
    return r.output;
  }

  static std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
  }

  static inline fs::path dir_;
};

}  // namespace

TEST_F(Compare, QaSameModelTwiceAgreesAndWritesReports) {
  auto r = compare("qa1.h5", "qa2.h5", "--report " + path("qa.md") + " --json " + path("qa.json"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("RESULT: PASS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("answer_agreement"), std::string::npos) << r.output;
  std::ifstream md(path("qa.md"));
  const std::string report((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(report.find("| max_logit_diff |"), std::string::npos) << report;
  const auto j = nlohmann::json::parse(std::ifstream(path("qa.json")));
  EXPECT_EQ(j.at("passed"), true);
  EXPECT_EQ(j.at("samples").size(), 14u);
}

TEST_F(Compare, QaPerturbedLogitsFailNamingTheMetric) {
  copy_qa("qa1.h5", "qa-perturbed.h5", [](auto& rows) { rows.at(2).at(5) += 0.5F; }, [](auto&) {});
  auto r = compare("qa1.h5", "qa-perturbed.h5", "--json " + path("p.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("RESULT: FAIL (max_logit_diff"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(std::ifstream(path("p.json")));
  EXPECT_EQ(j.at("passed"), false);
  EXPECT_NEAR(j.at("metrics").at(0).at("value").get<double>(), 0.5, 1e-6);
  // a thresholds file that allows it passes
  std::ofstream(path("loose.toml")) << "[qa]\nmax_logit_diff = 1.0\nmean_logit_diff = 0.1\n";
  r = compare("qa1.h5", "qa-perturbed.h5", "--thresholds " + path("loose.toml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(Compare, OtherSampleIdsAreRefusedNamingTheSample) {
  copy_qa("qa1.h5", "qa-ids.h5", [](auto&) {}, [](auto& ids) { ids.at(3) = "renamed-question"; });
  auto r = compare("qa1.h5", "qa-ids.h5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("renamed-question"), std::string::npos) << r.output;
  r = compare("qa1.h5", "g1.h5");  // other task
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("generate"), std::string::npos) << r.output;
}

TEST_F(Compare, BadThresholdsFileNamesLine) {
  std::ofstream(path("typo.toml")) << "[qa]\nmax_logit_diff = 1.0\nf1_dleta = 0.1\n";
  auto r = compare("qa1.h5", "qa2.h5", "--thresholds " + path("typo.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("typo.toml:3"), std::string::npos) << r.output;
}

TEST_F(Compare, GenerateSameModelTwiceAgreesAndPerturbedStepFails) {
  auto r = compare("g1.h5", "g2.h5");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("failure_rate"), std::string::npos) << r.output;
  write_perturbed_generate("g1.h5", "g-perturbed.h5");
  r = compare("g1.h5", "g-perturbed.h5");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("RESULT: FAIL (failure_rate)"), std::string::npos) << r.output;
}

TEST_F(Compare, HtmlReportRendersItsPlotsInHeadlessChromium) {
  // generate: failure rate and cross entropy by position, two histograms
  write_perturbed_generate("g1.h5", "g-perturbed.h5");
  auto r = compare("g1.h5", "g-perturbed.h5", "--html " + path("g.html"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::string dom = rendered_dom("g.html");
  EXPECT_NE(dom.find("data-plots-rendered=\"4\""), std::string::npos) << dom.substr(0, 2000);
  EXPECT_GE(count(dom, "class=\"main-svg\""), 4u);  // Plotly drew SVG for each plot
  EXPECT_NE(dom.find("Failure rate by token position"), std::string::npos);
  EXPECT_NE(dom.find(">FAIL (failure_rate)</span>"), std::string::npos);

  // qa: one histogram of logit differences; the per-sample table names the questions
  copy_qa("qa1.h5", "qa-perturbed.h5", [](auto& rows) { rows.at(2).at(5) += 0.5F; }, [](auto&) {});
  r = compare("qa1.h5", "qa-perturbed.h5", "--html " + path("qa.html"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  dom = rendered_dom("qa.html");
  EXPECT_NE(dom.find("data-plots-rendered=\"1\""), std::string::npos) << dom.substr(0, 2000);
  EXPECT_NE(dom.find("start/end logit difference"), std::string::npos);
  EXPECT_NE(dom.find(">FAIL (max_logit_diff"), std::string::npos);
}

TEST_F(Compare, HtmlReportWithoutThePlottingLibraryIsBadInput) {
  auto r = run_process("EVALRUN_PLOTLY_JS=" + path("missing/plotly.min.js") + " " + kBin + " compare " + path("qa1.h5") +
                       " " + path("qa2.h5") + " --html " + path("x.html"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--html"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("missing/plotly.min.js"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(path("x.html")));
}
