// Masked-LM data sets: .jsonl objects or one text per line; errors name file and line.
#include "io/text_dataset.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/errors.hpp"
#include "test_util.hpp"

using namespace evalrun;
namespace fs = std::filesystem;

namespace {

class TextDataset : public evalrun::testing::TempDirTest {
 protected:

  std::string write(const std::string& name, const std::string& content) {
    const auto p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }

  // The InputError message reading `path` gives ("" when it reads fine).
  static std::string error_of(const std::string& path) {
    try {
      read_text_samples(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
};

}  // namespace

TEST_F(TextDataset, JsonlWithIdsTextsAndTargets) {
  const auto path = write("a.jsonl",
                          "{\"id\": \"x1\", \"text\": \"Paris is the <mask>.\", \"targets\": \" capital\"}\n"
                          "\n"
                          "{\"text\": \"<mask> and <mask>\", \"targets\": [\" a\", \" b\"]}\r\n"
                          "{\"id\": 7, \"text\": \"Caf\xc3\xa9 <mask>\"}\n");
  auto s = read_text_samples(path);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].id, "x1");
  EXPECT_EQ(s[0].text, "Paris is the <mask>.");
  EXPECT_EQ(s[0].targets, (std::vector<std::string>{" capital"}));
  EXPECT_EQ(s[1].id, "line-3");  // 1-based line number, blank lines counted
  EXPECT_EQ(s[1].targets, (std::vector<std::string>{" a", " b"}));
  EXPECT_EQ(s[2].id, "7");
  EXPECT_EQ(s[2].text, "Caf\xc3\xa9 <mask>");
  EXPECT_TRUE(s[2].targets.empty());
}

TEST_F(TextDataset, PlainTextIsOneSamplePerNonEmptyLine) {
  const auto path = write("a.txt", "first <mask> line\n\n  \nsecond {\"not\": json} <mask>\r\nthird <mask>");
  auto s = read_text_samples(path);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].id, "line-1");
  EXPECT_EQ(s[0].text, "first <mask> line");
  EXPECT_EQ(s[1].id, "line-4");
  EXPECT_EQ(s[1].text, "second {\"not\": json} <mask>");  // the \r of a CRLF file is dropped
  EXPECT_EQ(s[2].id, "line-5");
  EXPECT_EQ(s[2].text, "third <mask>");
  for (const auto& x : s) EXPECT_TRUE(x.targets.empty());
}

TEST_F(TextDataset, MalformedJsonNamesFileAndLine) {
  const auto path = write("bad.jsonl", "{\"text\": \"ok <mask>\"}\n{\"text\": \"broken\"\n");
  const auto msg = error_of(path);
  EXPECT_NE(msg.find(path + ":2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("JSON"), std::string::npos) << msg;
}

TEST_F(TextDataset, MissingOrNonStringTextNamesFileAndLine) {
  const auto missing = write("m.jsonl", "{\"text\": \"ok <mask>\"}\n{\"id\": \"b\"}\n");
  auto msg = error_of(missing);
  EXPECT_NE(msg.find(missing + ":2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("text"), std::string::npos) << msg;
  const auto number = write("n.jsonl", "{\"text\": 5}\n");
  msg = error_of(number);
  EXPECT_NE(msg.find(number + ":1"), std::string::npos) << msg;
  const auto array = write("arr.jsonl", "[\"text\"]\n");
  msg = error_of(array);
  EXPECT_NE(msg.find(array + ":1"), std::string::npos) << msg;
}

TEST_F(TextDataset, NonStringTargetsNameFileAndLine) {
  const auto in_list = write("t.jsonl", "{\"text\": \"a <mask>\", \"targets\": [\" a\", 3]}\n");
  auto msg = error_of(in_list);
  EXPECT_NE(msg.find(in_list + ":1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("targets"), std::string::npos) << msg;
  const auto number = write("u.jsonl", "\n{\"text\": \"a <mask>\", \"targets\": 3}\n");
  msg = error_of(number);
  EXPECT_NE(msg.find(number + ":2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("targets"), std::string::npos) << msg;
}

TEST_F(TextDataset, DuplicateIdNamesFileLineAndId) {
  const auto path = write("d.jsonl",
                          "{\"id\": \"same\", \"text\": \"a <mask>\"}\n{\"id\": \"other\", \"text\": \"b <mask>\"}\n"
                          "{\"id\": \"same\", \"text\": \"c <mask>\"}\n");
  const auto msg = error_of(path);
  EXPECT_NE(msg.find(path + ":3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("same"), std::string::npos) << msg;
  // an explicit id that collides with a default "line-N" id is a duplicate too
  const auto clash = write("c.jsonl", "{\"text\": \"a <mask>\"}\n{\"id\": \"line-1\", \"text\": \"b <mask>\"}\n");
  EXPECT_NE(error_of(clash).find(clash + ":2"), std::string::npos) << error_of(clash);
}

TEST_F(TextDataset, EmptyOrMissingFileIsAnInputError) {
  const auto empty = write("e.jsonl", "\n  \n");
  auto msg = error_of(empty);
  EXPECT_NE(msg.find(empty), std::string::npos) << msg;
  EXPECT_NE(msg.find("no samples"), std::string::npos) << msg;
  EXPECT_NE(error_of(write("e.txt", "")).find("no samples"), std::string::npos);
  const auto missing = (dir_ / "nope.jsonl").string();
  EXPECT_NE(error_of(missing).find(missing), std::string::npos);
}
