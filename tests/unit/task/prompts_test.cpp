// io/prompts: .jsonl, single .txt file, directory, glob, built-in sets, and the errors.
#include "io/prompts.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/errors.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;

class PromptFiles : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("evalrun-prompts"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  // The InputError's message, or "" when read_prompts succeeds.
  std::string error_of(const std::string& spec) {
    try {
      read_prompts(spec);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(PromptFiles, JsonlWithAndWithoutIds) {
  const auto path = write("p.jsonl", "{\"id\": \"a\", \"prompt\": \"Once upon\"}\n\n{\"prompt\": \"The boy\"}\n"
                                     "{\"id\": 7, \"prompt\": \"x\", \"extra\": 1}\r\n");
  const auto p = read_prompts(path);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].id, "a");
  EXPECT_EQ(p[0].text, "Once upon");
  EXPECT_EQ(p[1].id, "line-3");
  EXPECT_EQ(p[1].text, "The boy");
  EXPECT_EQ(p[2].id, "7");
}

TEST_F(PromptFiles, JsonlErrorsNameFileAndLine) {
  const auto bad = write("bad.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": \n");
  EXPECT_NE(error_of(bad).find("bad.jsonl:2"), std::string::npos) << error_of(bad);
  const auto missing = write("missing.jsonl", "{\"id\": \"a\"}\n");
  EXPECT_NE(error_of(missing).find("missing.jsonl:1"), std::string::npos);
  EXPECT_NE(error_of(missing).find("\"prompt\""), std::string::npos);
  const auto empty = write("empty.jsonl", "{\"id\": \"e\", \"prompt\": \"  \"}\n");
  EXPECT_NE(error_of(empty).find("empty.jsonl:1"), std::string::npos);
  EXPECT_NE(error_of(empty).find("'e' is empty"), std::string::npos);
  const auto dup = write("dup.jsonl", "{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"a\", \"prompt\": \"y\"}\n");
  EXPECT_NE(error_of(dup).find("dup.jsonl:2"), std::string::npos);
  EXPECT_NE(error_of(dup).find("duplicate prompt id 'a'"), std::string::npos);
  EXPECT_NE(error_of(dup).find("dup.jsonl:1"), std::string::npos);  // the first place
  const auto utf = write("utf.jsonl", "{\"id\": \"u\", \"prompt\": \"caf\xe9\"}\n");  // JSON rejects bad UTF-8
  EXPECT_NE(error_of(utf).find("utf.jsonl:1"), std::string::npos) << error_of(utf);
  const auto none = write("none.jsonl", "\n\n");
  EXPECT_NE(error_of(none).find("no prompts"), std::string::npos);
}

TEST_F(PromptFiles, TxtFileIsOnePromptNamedByItsStemVerbatim) {
  const auto path = write("story.txt", "Line one.\nLine two.\n");
  const auto p = read_prompts(path);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].id, "story");
  EXPECT_EQ(p[0].text, "Line one.\nLine two.\n");
  write("blank.txt", " \n\n");
  EXPECT_NE(error_of((dir_ / "blank.txt").string()).find("'blank' is empty"), std::string::npos);
  write("latin1.txt", "caf\xe9\n");
  const std::string e = error_of((dir_ / "latin1.txt").string());
  EXPECT_NE(e.find("latin1.txt"), std::string::npos) << e;
  EXPECT_NE(e.find("'latin1' is not valid UTF-8"), std::string::npos) << e;
  EXPECT_NE(error_of((dir_ / "nope.txt").string()).find("does not exist"), std::string::npos);
}

TEST_F(PromptFiles, DirectoryTakesEveryTxtSorted) {
  write("d/b.txt", "bee");
  write("d/a.txt", "ay");
  write("d/c.md", "not a prompt");
  write("d/sub/z.txt", "not read: not directly inside");
  const auto p = read_prompts((dir_ / "d").string());
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].id, "a");
  EXPECT_EQ(p[0].text, "ay");
  EXPECT_EQ(p[1].id, "b");
  write("e/x.md", "no txt here");
  EXPECT_NE(error_of((dir_ / "e").string()).find("no *.txt"), std::string::npos);
}

TEST_F(PromptFiles, GlobMatchesSortedAndDuplicateStemsFail) {
  write("g/p2.txt", "two");
  write("g/p10.txt", "ten");
  write("g/p1.txt", "one");
  write("g/q.jsonl", "{\"id\": \"j\", \"prompt\": \"from jsonl\"}\n");
  auto p = read_prompts((dir_ / "g" / "p*.txt").string());
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].id, "p1");
  EXPECT_EQ(p[1].id, "p10");
  EXPECT_EQ(p[2].id, "p2");
  p = read_prompts((dir_ / "g" / "*").string());
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[3].id, "j");
  EXPECT_EQ(p[3].text, "from jsonl");
  EXPECT_NE(error_of((dir_ / "g" / "*.nothing").string()).find("no prompt files match"), std::string::npos);
  write("h/a.txt", "1");
  write("h/a.md", "2");
  EXPECT_NE(error_of((dir_ / "h" / "a.*").string()).find("duplicate prompt id 'a'"), std::string::npos);
}

TEST(BuiltinPrompts, ChatAndCodeWithTheirTemplates) {
  const auto chat = read_prompts("chat");
  ASSERT_GE(chat.size(), 4u);
  EXPECT_EQ(chat[0].id, "chat-1");
  const std::string& templ = builtin_prompt_template("chat");
  EXPECT_EQ(templ.rfind("Below is an instruction that describes a task.", 0), 0u);
  for (const auto& p : chat) {
    EXPECT_EQ(p.text.rfind("Below is an instruction that describes a task. Write a response that appropriately "
                           "completes the request.\n\n### Instruction:\n",
                           0),
              0u);
    const std::string tail = "\n\n### Response:";
    EXPECT_TRUE(p.text.size() > tail.size() && p.text.substr(p.text.size() - tail.size()) == tail) << p.text;
  }
  const auto code = read_prompts("code");
  ASSERT_GE(code.size(), 4u);
  EXPECT_EQ(code[1].id, "code-2");
  for (const auto& p : code) {
    EXPECT_NE(p.text.find("def "), std::string::npos);
    EXPECT_NE(p.text.find("\"\"\""), std::string::npos);
  }
  EXPECT_EQ(apply_prompt_template("<{}>", "x"), "<x>");
  EXPECT_EQ(apply_prompt_template("none", "x"), "none");
  EXPECT_THROW(builtin_prompts("poetry"), InputError);
  EXPECT_EQ(builtin_prompt_set_names(), (std::vector<std::string>{"chat", "code"}));
}

}  // namespace
}  // namespace evalrun
