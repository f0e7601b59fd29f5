// task/qa_features: windows, question stripping, and features built with the real roberta-base tokenizer.
#include "common/errors.hpp"
#include "task/qa_features.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

using Windows = std::vector<std::pair<int, int>>;

TEST(QaContextWindows, MatchTheOracleWindows) {
  // budget 380 minus the question tokens; the windows of oracle/README.md's table.
  EXPECT_EQ(qa_context_windows(783, 380 - 27, 128), (Windows{{0, 353}, {225, 578}, {450, 783}}));
  EXPECT_EQ(qa_context_windows(727, 380 - 11, 128), (Windows{{0, 369}, {241, 610}, {482, 727}}));
  EXPECT_EQ(qa_context_windows(413, 380 - 13, 128), (Windows{{0, 367}, {239, 413}}));
  EXPECT_EQ(qa_context_windows(249, 380 - 13, 128), (Windows{{0, 249}}));
}

TEST(QaContextWindows, EdgeCases) {
  EXPECT_EQ(qa_context_windows(0, 10, 3), (Windows{{0, 0}}));
  EXPECT_EQ(qa_context_windows(10, 10, 3), (Windows{{0, 10}}));
  // 11 tokens, 10 per window, step 7: the second window reaches the end.
  EXPECT_EQ(qa_context_windows(11, 10, 3), (Windows{{0, 10}, {7, 11}}));
  // No overlap requested: consecutive windows.
  EXPECT_EQ(qa_context_windows(7, 3, 0), (Windows{{0, 3}, {3, 6}, {6, 7}}));
  // A window that ends exactly at the end stops the walk (no empty tail window).
  EXPECT_EQ(qa_context_windows(17, 10, 3), (Windows{{0, 10}, {7, 17}}));
  // Overlap of doc_stride tokens between neighbours.
  const Windows w = qa_context_windows(1000, 100, 40);
  for (std::size_t i = 1; i < w.size(); ++i) EXPECT_EQ(w[i - 1].second - w[i].first, 40) << i;
  EXPECT_EQ(w.back().second, 1000);
}

TEST(PythonLstrip, StripsUnicodeWhitespaceOnly) {
  EXPECT_EQ(python_lstrip(" \t\n\u3000\u00a0\u2009Where? "), "Where? ");
  EXPECT_EQ(python_lstrip("\u200bx"), "\u200bx");  // zero-width space is not whitespace in Python
  EXPECT_EQ(python_lstrip("\x1c\x1fx"), "x");       // ASCII separators are
  EXPECT_EQ(python_lstrip("   "), "");
  EXPECT_EQ(python_lstrip(""), "");
}

// --- with the real tokenizer ------------------------------------------------------------------------

SquadExample example(const std::string& id, const std::string& question, const std::string& context) {
  SquadExample e;
  e.id = id;
  e.question = question;
  e.context = context;
  return e;
}

TEST(QaFeatures, LayoutPaddingAndOffsets) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(data + "/oracle/roberta-qa");
  // "Hello world" encodes to [31414, 232] without specials.
  const std::vector<SquadExample> ex = {example("e0", "  Hello world", "Hello world")};
  QaFeatureOptions opt;
  opt.max_seq_length = 16;
  opt.doc_stride = 4;
  auto f = make_qa_features(ex, tok, opt);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].input_ids, (std::vector<std::int64_t>{0, 31414, 232, 2, 2, 31414, 232, 2}));
  EXPECT_EQ(f[0].attention_mask, std::vector<std::int64_t>(8, 1));
  using Off = std::vector<std::pair<int, int>>;
  EXPECT_EQ(f[0].offsets, (Off{{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {0, 5}, {6, 11}, {-1, -1}}));
  EXPECT_EQ(f[0].context_token_start, 0);
  EXPECT_EQ(f[0].context_token_stop, 2);

  opt.pad_to_max_length = true;
  f = make_qa_features(ex, tok, opt);
  ASSERT_EQ(f[0].input_ids.size(), 16u);
  EXPECT_EQ(f[0].input_ids[8], 1);  // <pad>
  EXPECT_EQ(f[0].input_ids[15], 1);
  EXPECT_EQ(f[0].attention_mask[7], 1);
  EXPECT_EQ(f[0].attention_mask[8], 0);
  EXPECT_EQ(f[0].offsets[15], (std::pair<int, int>{-1, -1}));
}

TEST(QaFeatures, SlidingWindowsOverlapByDocStride) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(data + "/oracle/roberta-qa");
  std::string context;
  for (int i = 0; i < 30; ++i) context += " Hello world";
  const std::size_t n_context = tok.encode(context).ids.size();
  const std::vector<SquadExample> ex = {example("a", "Hello", "world"), example("b", "Hello world", context)};
  QaFeatureOptions opt;
  opt.max_seq_length = 20;  // budget 16 - 2 question tokens = 14 context tokens per window
  opt.doc_stride = 5;
  const auto f = make_qa_features(ex, tok, opt);
  const Windows expect = qa_context_windows(static_cast<int>(n_context), 14, 5);
  ASSERT_EQ(f.size(), 1 + expect.size());
  EXPECT_EQ(f[0].example_index, 0u);
  for (std::size_t w = 0; w < expect.size(); ++w) {
    const QaFeature& g = f[1 + w];
    EXPECT_EQ(g.example_index, 1u);
    EXPECT_EQ(g.window, static_cast<int>(w));
    EXPECT_EQ(g.context_token_start, expect[w].first);
    EXPECT_EQ(g.context_token_stop, expect[w].second);
    EXPECT_EQ(g.input_ids.size(), static_cast<std::size_t>(2 + 4 + expect[w].second - expect[w].first));
    EXPECT_LE(g.input_ids.size(), 20u);
  }
}

TEST(QaFeatures, QuestionTooLongIsAnInputError) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(data + "/oracle/roberta-qa");
  std::string question;
  for (int i = 0; i < 20; ++i) question += " Hello";
  std::string context;
  for (int i = 0; i < 20; ++i) context += " world";
  QaFeatureOptions opt;
  opt.max_seq_length = 16;
  opt.doc_stride = 2;
  try {
    make_qa_features({example("long-q", question, context)}, tok, opt);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("long-q"), std::string::npos) << e.what();
  }
  // Room for context, but not more than doc_stride tokens per window.
  opt.max_seq_length = 4 + 20 + 2;
  opt.doc_stride = 2;
  EXPECT_THROW(make_qa_features({example("q2", question, context)}, tok, opt), InputError);
  // A short context still fits in one feature with the same question.
  EXPECT_EQ(make_qa_features({example("q3", question, " world")}, tok, opt).size(), 1u);
}


TEST(QaFeatures, WholeSquadDevSet) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(data + "/tokenizers/roberta-base");
  const std::vector<SquadExample> ex = read_squad(data + "/squad/dev-v1.1.json");
  const auto f = make_qa_features(ex, tok, QaFeatureOptions{});
  ASSERT_GE(f.size(), ex.size());
  std::size_t expect_index = 0;
  for (const QaFeature& g : f) {
    ASSERT_LE(g.input_ids.size(), 384u);
    ASSERT_EQ(g.offsets.size(), g.input_ids.size());
    // Ordered by example, every example present, windows numbered from 0.
    if (g.window == 0) {
      ASSERT_EQ(g.example_index, expect_index);
      ++expect_index;
    } else {
      ASSERT_EQ(g.example_index + 1, expect_index);
    }
  }
  EXPECT_EQ(expect_index, ex.size());
}

}  // namespace
}  // namespace evalrun
