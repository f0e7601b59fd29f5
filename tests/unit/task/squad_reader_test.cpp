// io/squad: SQuAD JSON and jsonl reading, and the errors for bad input.
#include <filesystem>
#include <fstream>
#include <set>

#include "common/errors.hpp"
#include "io/squad.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

class SquadReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("evalrun-squad"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

  // The InputError message read_squad throws for `text`, or "" if it does not throw.
  std::string error_of(const std::string& name, const std::string& text) {
    const std::string path = write(name, text);
    try {
      read_squad(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
};

// "Köln" starts at code point 8 but at byte 9; "Rhine" at code point 23, byte 25.
const std::string kContext = "Caf\u00e9 in K\u00f6ln, near the Rhine.";

std::string v1_doc(int koeln_start, const std::string& second_id = "q2") {
  return R"({"version": "1.1", "data": [{"title": "Cologne", "paragraphs": [{"context": ")" + kContext +
         R"(", "qas": [{"id": "q1", "question": " Where is the caf\u00e9?", "answers": [{"text": "K\u00f6ln", "answer_start": )" +
         std::to_string(koeln_start) + R"(}, {"text": "K\u00f6ln,", "answer_start": 8}]}, {"id": ")" + second_id +
         R"(", "question": "Which river?", "answers": [{"text": "Rhine", "answer_start": 23}]}]}]}]})";
}

TEST_F(SquadReaderTest, ReadsV1JsonWithCodePointOffsets) {
  const auto ex = read_squad(write("dev.json", v1_doc(8)));
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].id, "q1");
  EXPECT_EQ(ex[0].title, "Cologne");
  EXPECT_EQ(ex[0].question, " Where is the caf\u00e9?");  // kept as in the file
  EXPECT_EQ(ex[0].context, kContext);
  ASSERT_EQ(ex[0].answers.size(), 2u);
  EXPECT_EQ(ex[0].answers[0].text, "K\u00f6ln");
  EXPECT_EQ(ex[0].answers[0].answer_start, 8);
  EXPECT_FALSE(ex[0].is_impossible);
  EXPECT_EQ(ex[1].id, "q2");
  EXPECT_EQ(ex[1].answers[0].answer_start, 23);
}

TEST_F(SquadReaderTest, ReadsV2UnanswerableQuestions) {
  const std::string doc =
      R"({"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "abc def", "qas": [
        {"id": "a", "question": "q?", "answers": [], "plausible_answers": [{"text": "def", "answer_start": 4}], "is_impossible": true},
        {"id": "b", "question": "q?", "answers": [{"text": "def", "answer_start": 4}], "is_impossible": false}]}]}]})";
  const auto ex = read_squad(write("v2.json", doc));
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_TRUE(ex[0].is_impossible);
  EXPECT_TRUE(ex[0].answers.empty());
  EXPECT_FALSE(ex[1].is_impossible);
  EXPECT_EQ(ex[1].answers.size(), 1u);
}

TEST_F(SquadReaderTest, ReadsJsonLinesInOrder) {
  const std::string text =
      R"({"id": "z", "question": "Q1", "context": "K\u00f6ln x", "answers": [{"text": "x", "answer_start": 5}]})"
      "\n\n"
      R"({"id": "a", "title": "T", "question": "Q2", "context": "none", "answers": [], "is_impossible": true})"
      "\r\n";
  const auto ex = read_squad(write("d.jsonl", text));
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].id, "z");
  EXPECT_EQ(ex[0].title, "");
  EXPECT_EQ(ex[0].answers[0].answer_start, 5);
  EXPECT_EQ(ex[1].id, "a");
  EXPECT_EQ(ex[1].title, "T");
  EXPECT_TRUE(ex[1].is_impossible);
}

TEST_F(SquadReaderTest, MalformedJsonNamesTheFile) {
  const std::string msg = error_of("bad.json", "{\"data\": [\n{\"title\": }\n]}");
  EXPECT_NE(msg.find("bad.json:2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed JSON"), std::string::npos) << msg;
}

TEST_F(SquadReaderTest, ByteOffsetInsteadOfCodePointIsRejected) {
  // 9 is the byte offset of "Köln"; SQuAD counts characters.
  const std::string msg = error_of("off.json", v1_doc(9));
  EXPECT_NE(msg.find("question 'q1'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("answer_start 9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("off.json"), std::string::npos) << msg;
}

TEST_F(SquadReaderTest, AnswerStartOutsideContextIsRejected) {
  EXPECT_NE(error_of("o1.json", v1_doc(500)).find("outside the context"), std::string::npos);
  EXPECT_NE(error_of("o2.json", v1_doc(-1)).find("outside the context"), std::string::npos);
}

TEST_F(SquadReaderTest, DuplicateIdIsRejected) {
  const std::string msg = error_of("dup.json", v1_doc(8, "q1"));
  EXPECT_NE(msg.find("duplicate question id 'q1'"), std::string::npos) << msg;
}

TEST_F(SquadReaderTest, MissingAndMistypedFieldsAreRejected) {
  EXPECT_NE(error_of("m1.json", R"({"version": "1"})").find("missing field 'data'"), std::string::npos);
  const std::string no_question =
      R"({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": "x7", "answers": []}]}]}]})";
  const std::string m2 = error_of("m2.json", no_question);
  EXPECT_NE(m2.find("question 'x7'"), std::string::npos) << m2;
  EXPECT_NE(m2.find("missing field 'question'"), std::string::npos) << m2;
  const std::string answers_string =
      R"({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": "x8", "question": "q", "answers": "c"}]}]}]})";
  EXPECT_NE(error_of("m3.json", answers_string).find("'answers' must be a list"), std::string::npos);
  const std::string start_string =
      R"({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": "x9", "question": "q", "answers": [{"text": "c", "answer_start": "0"}]}]}]}]})";
  EXPECT_NE(error_of("m4.json", start_string).find("'answer_start' must be an integer"), std::string::npos);
  const std::string impossible_string =
      R"({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": "y", "question": "q", "answers": [], "is_impossible": "no"}]}]}]})";
  EXPECT_NE(error_of("m5.json", impossible_string).find("is_impossible"), std::string::npos);
  const std::string id_number =
      R"({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": 5, "question": "q", "answers": []}]}]}]})";
  const std::string m6 = error_of("m6.json", id_number);
  EXPECT_NE(m6.find("data[0].paragraphs[0].qas[0]"), std::string::npos) << m6;
  EXPECT_NE(m6.find("'id' must be a string"), std::string::npos) << m6;
}

TEST_F(SquadReaderTest, JsonLinesErrorsNameTheLine) {
  const std::string good = R"({"id": "a", "question": "q", "context": "abc", "answers": [{"text": "b", "answer_start": 1}]})";
  const std::string bad_answer = R"({"id": "b", "question": "q", "context": "abc", "answers": [{"text": "b", "answer_start": 2}]})";
  const std::string m1 = error_of("e1.jsonl", good + "\n\n" + bad_answer + "\n");
  EXPECT_NE(m1.find("e1.jsonl:3: question 'b'"), std::string::npos) << m1;
  const std::string m2 = error_of("e2.jsonl", good + "\n{\"id\": \n");
  EXPECT_NE(m2.find("e2.jsonl:2"), std::string::npos) << m2;
  EXPECT_NE(m2.find("malformed JSON"), std::string::npos) << m2;
  const std::string m3 = error_of("e3.jsonl", good + "\n" + good + "\n");
  EXPECT_NE(m3.find("e3.jsonl:2: question 'a'"), std::string::npos) << m3;
  EXPECT_NE(m3.find("duplicate"), std::string::npos) << m3;
  const std::string m4 = error_of("e4.jsonl", "[1, 2]\n");
  EXPECT_NE(m4.find("e4.jsonl:1"), std::string::npos) << m4;
}

TEST_F(SquadReaderTest, MissingFileIsAnInputError) {
  EXPECT_THROW(read_squad((dir_ / "nope.json").string()), InputError);
}

TEST(SquadDevSet, ReadsAllQuestions) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const auto ex = read_squad(data + "/squad/dev-v1.1.json");
  ASSERT_EQ(ex.size(), 10570u);
  std::set<std::string> titles;
  std::size_t with_answers = 0;
  for (const auto& e : ex) {
    titles.insert(e.title);
    if (!e.answers.empty()) ++with_answers;
  }
  EXPECT_EQ(titles.size(), 48u);
  EXPECT_EQ(with_answers, 10570u);
  EXPECT_EQ(ex.front().id, "56be4db0acb8001400a502ec");
}

}  // namespace
}  // namespace evalrun
