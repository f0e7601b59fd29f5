// Task files (task/task_file.hpp): the TOML format, the template syntax, lm-eval's few-shot sampler and
// the shipped tasks/*.toml on their samples, each compared with the prompt lm-evaluation-harness builds
// from its YAML (written out by hand here).
#include "task/task_file.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/errors.hpp"
#include "task/py_random.hpp"
#include "task/template.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TaskFileTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("evalrun-taskfile"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  // The InputError message read_task_file / build_task_documents throws ("" if none).
  template <typename F>
  static std::string error_of(F&& f) {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

const char* kArcJsonl =
    R"({"id": "q1", "question": "Which is a liquid?", "choices": {"text": ["rock", "water", "ice"], "label": ["A", "B", "C"]}, "answerKey": "B"})"
    "\n\n"
    R"({"id": "q2", "question": "What gives light?", "choices": {"text": ["sun", "moon"], "label": ["1", "2"]}, "answerKey": "1"})"
    "\n";

const char* kArcToml = R"(name = "arc_like"
output_type = "multiple_choice"
dataset = "docs.jsonl"
doc_to_text = "Question: {{question}}\nAnswer:"
doc_to_choice = "{{choices.text}}"
doc_to_target = "{{choices.label.index(answerKey)}}"
)";

TEST_F(TaskFileTest, ZeroShotListChoicesAndIndexTarget) {
  write("docs.jsonl", kArcJsonl);
  const TaskFile t = read_task_file(write("arc.toml", kArcToml));
  EXPECT_EQ(t.name, "arc_like");
  EXPECT_EQ(t.output_type, "multiple_choice");
  EXPECT_EQ(t.dataset, (dir_ / "docs.jsonl").string());
  const auto docs = build_task_documents(t, "", {}, 0);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].doc_id, 0u);
  EXPECT_EQ(docs[0].where, t.dataset + ":1");
  EXPECT_EQ(docs[1].where, t.dataset + ":3");  // blank line 2 skipped, numbering kept
  EXPECT_EQ(json::parse(docs[0].doc_json)["id"], "q1");
  ASSERT_EQ(docs[0].choices, (std::vector<std::string>{"rock", "water", "ice"}));
  EXPECT_EQ(docs[0].gold, 1);
  EXPECT_EQ(docs[0].target, "water");
  ASSERT_EQ(docs[0].requests.size(), 3u);
  EXPECT_EQ(docs[0].requests[2].context, "Question: Which is a liquid?\nAnswer:");
  EXPECT_EQ(docs[0].requests[2].continuation, " ice");
  // answerKey "1" is looked up in the labels (index 0), not taken as an index itself.
  EXPECT_EQ(docs[1].gold, 0);
  EXPECT_EQ(build_task_documents(t, "", {}, 1).size(), 1u);  // max_docs
}

TEST_F(TaskFileTest, DigitTargetIsAnIndexOtherwiseLookedUp) {
  write("d.jsonl", "{\"q\": \"x\", \"a\": \"yes\", \"n\": 1, \"s\": \"0\"}\n");
  const auto mk = [&](const std::string& target) {
    return read_task_file(write("t.toml", "name = \"t\"\noutput_type = \"multiple_choice\"\ndataset = \"d.jsonl\"\n"
                                          "doc_to_text = \"{{q}}\"\ndoc_to_choice = [\"no\", \"yes\"]\n"
                                          "doc_to_target = \"" + target + "\"\n"));
  };
  EXPECT_EQ(build_task_documents(mk("{{a}}"), "", {}, 0)[0].gold, 1);  // looked up
  EXPECT_EQ(build_task_documents(mk("{{n}}"), "", {}, 0)[0].gold, 1);  // integer field
  EXPECT_EQ(build_task_documents(mk("{{s}}"), "", {}, 0)[0].gold, 0);  // digit string
  const std::string miss = error_of([&] { build_task_documents(mk("{{q}}"), "", {}, 0); });
  EXPECT_NE(miss.find("d.jsonl:1"), std::string::npos) << miss;
  EXPECT_NE(miss.find("doc_to_target"), std::string::npos) << miss;
  EXPECT_NE(miss.find("not one of the choices"), std::string::npos) << miss;
  const std::string range = error_of([&] { build_task_documents(mk("7"), "", {}, 0); });
  EXPECT_NE(range.find("out of range"), std::string::npos) << range;
}

TEST_F(TaskFileTest, MissingFieldNamesTaskFileKeyAndDocumentLine) {
  write("docs.jsonl", std::string(kArcJsonl) + R"({"id": "q3", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "A"})" "\n");
  const std::string task = write("arc.toml", kArcToml);
  const std::string e = error_of([&] { build_task_documents(read_task_file(task), "", {}, 0); });
  EXPECT_NE(e.find("docs.jsonl:4"), std::string::npos) << e;
  EXPECT_NE(e.find(task + ": doc_to_text"), std::string::npos) << e;
  EXPECT_NE(e.find("field 'question' is missing"), std::string::npos) << e;
}

}  // namespace
}  // namespace evalrun
