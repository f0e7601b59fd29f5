#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/hdf5_file.hpp"
#include "io/safetensors.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-cli");
    auto r = run_process(kBin + " make-model --head qa --preset tiny --seed 3 --out " + (dir_ / "qa").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // A valid QA config; `extra` lines are appended to [task].
  static std::string write_config(const std::string& name, const std::string& model, const std::string& dataset,
                                  const std::string& extra = "") {
    const auto path = dir_ / (name + ".toml");
    std::ofstream(path) << "[run]\nname = \"" << name << "\"\nthreads = 1\n[model]\npath = \"" << model
                        << "\"\n[task]\nkind = \"qa\"\ndataset = \"" << dataset << "\"\nmax_seq_length = 128\ndoc_stride = 32\n"
                        << extra << "[output]\npath = \"" << (dir_ / (name + ".h5")).string() << "\"\n";
    return path.string();
  }
  static std::string model() { return (dir_ / "qa").string(); }
  static std::string demo_data() { return kSrc + "/data/demo_squad.json"; }

  // Copies the tiny model so a test can damage it.
  static fs::path copy_model(const std::string& name) {
    const auto to = dir_ / name;
    fs::copy(dir_ / "qa", to, fs::copy_options::recursive);
    return to;
  }

  static void expect_bad_input(const std::string& config, const std::vector<std::string>& must_mention) {
    auto r = run_process(kBin + " " + config);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    for (const auto& s : must_mention) EXPECT_NE(r.output.find(s), std::string::npos) << "'" << s << "' in: " << r.output;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  }

  static inline fs::path dir_;
};

}  // namespace

TEST_F(Cli, HelpAndUsage) {
  auto r = run_process(kBin + " --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("make-model"), std::string::npos);
  EXPECT_EQ(run_process(kBin).exit_code, 2);
  auto run_help = run_process(kBin + " run --help");
  EXPECT_EQ(run_help.exit_code, 0) << run_help.output;
  EXPECT_NE(run_help.output.find("--set"), std::string::npos);
  auto keys = run_process(kBin + " help-config");
  EXPECT_EQ(keys.exit_code, 0);
  EXPECT_NE(keys.output.find("task.doc_stride"), std::string::npos);
}

TEST_F(Cli, RunWritesResultThatInspectSummarises) {
  const auto cfg = write_config("ok", model(), demo_data(), "batch_size = 3\n");
  auto r = run_process(kBin + " " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  H5Reader h((dir_ / "ok.h5").string());
  EXPECT_EQ(h.attr_string("/", "task"), "qa");
  EXPECT_EQ(h.read_strings("/samples/id").size(), 14u);
  EXPECT_EQ(h.read_strings("/predictions/text").size(), 14u);
  const double f1 = h.attr_double("/metrics", "f1");
  EXPECT_GE(f1, 0.0);
  EXPECT_LE(f1, 100.0);
  EXPECT_EQ(h.attr_string("/", "model_sha256").size(), 64u);
  auto inspect = run_process(kBin + " inspect " + (dir_ / "ok.h5").string());
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("exact_match"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("start_logits"), std::string::npos) << inspect.output;
}

TEST_F(Cli, MissingConfigFile) { expect_bad_input((dir_ / "nope.toml").string(), {"nope.toml"}); }

TEST_F(Cli, MalformedToml) {
  const auto p = dir_ / "broken.toml";
  std::ofstream(p) << "[run]\nname = \"x\"\n[model\npath = 3\n";
  expect_bad_input(p.string(), {"broken.toml", "3"});
}

TEST_F(Cli, UnknownKeySuggestsTheRightOne) {
  expect_bad_input(write_config("typo", model(), demo_data(), "batchsize = 4\n"), {"typo.toml", "task.batch_size"});
}

TEST_F(Cli, MissingModelDirectory) {
  expect_bad_input(write_config("nomodel", (dir_ / "absent").string(), demo_data()), {"absent"});
}

TEST_F(Cli, TruncatedSafetensors) {
  const auto m = copy_model("truncated");
  fs::resize_file(m / "model.safetensors", fs::file_size(m / "model.safetensors") / 2);
  expect_bad_input(write_config("trunc", m.string(), demo_data()), {"model.safetensors"});
}

TEST_F(Cli, WrongTensorShapeNamesTheTensor) {
  const auto m = copy_model("wrongshape");
  std::vector<TensorToWrite> tensors;
  {
    Checkpoint ck(m.string());
    for (const auto& name : ck.names()) {
      const auto& t = ck.get(name);
      TensorToWrite w{name, t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.nbytes)};
      if (name.find("qa_outputs.weight") != std::string::npos) {
        w.shape = {t.shape[1], t.shape[0]};  // transposed
      }
      tensors.push_back(std::move(w));
    }
  }
  write_safetensors((m / "model.safetensors").string(), tensors);
  expect_bad_input(write_config("shape", m.string(), demo_data()), {"qa_outputs.weight"});
}

TEST_F(Cli, MalformedSquadJson) {
  const auto p = dir_ / "bad.json";
  std::ofstream(p) << "{\"data\": [ {\"title\": \"x\", \"paragraphs\": [ }";
  expect_bad_input(write_config("badjson", model(), p.string()), {"bad.json"});
}

TEST_F(Cli, AnswerOutsideContextNamesTheQuestion) {
  const auto p = dir_ / "offsets.json";
  std::ofstream(p) << R"({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Short text.",
    "qas": [{"id": "q-out-of-range", "question": "What?", "answers": [{"text": "text", "answer_start": 99}]}]}]}]})";
  expect_bad_input(write_config("offsets", model(), p.string()), {"offsets.json", "q-out-of-range"});
}

TEST_F(Cli, MlmOnQaCheckpointIsRefused) {
  const auto p = dir_ / "mlm.toml";
  std::ofstream(p) << "[run]\nname = \"m\"\n[model]\npath = \"" << model() << "\"\n[task]\nkind = \"mlm\"\ndataset = \""
                   << kSrc << "/data/demo_mlm.jsonl\"\n[output]\npath = \"" << (dir_ / "m.h5").string() << "\"\n";
  expect_bad_input(p.string(), {"config.json", "mlm"});
}

TEST_F(Cli, InspectRejectsNonResultFile) {
  const auto p = dir_ / "not.h5";
  std::ofstream(p) << "plain text";
  auto r = run_process(kBin + " inspect " + p.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not.h5"), std::string::npos) << r.output;
}

TEST_F(Cli, SetOverrideIsValidated) {
  const auto cfg = write_config("ovr", model(), demo_data());
  auto r = run_process(kBin + " " + cfg + " --set task.batch_size=0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("task.batch_size"), std::string::npos) << r.output;
}
