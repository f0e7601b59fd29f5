// Task files (task/task_file.hpp): the TOML format, the template syntax, lm-eval's few-shot sampler and
// the shipped tasks/*.toml on their samples, each compared with the prompt lm-evaluation-harness builds
// from its YAML (written out by hand here).
#include "task/task_file.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/errors.hpp"
#include "task/lm_eval_stats.hpp"
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


// Expected values from CPython 3.11:
//   python3 -c "import random; r=random.Random(1234); print([r.getrandbits(32) for _ in range(3)])"
//   python3 -c "import random; r=random.Random(1234); print(r.sample(range(10),3), r.sample(range(100),7), r.sample(range(5),5))"
//   python3 -c "import random; r=random.Random(0); print(r.getrandbits(32), r.getrandbits(5))"
//   python3 -c "import random; r=random.Random(2**40+5); print(r.getrandbits(32))"
TEST(PyRandomTest, MatchesCPython) {
  PyRandom a(1234);
  EXPECT_EQ(a.getrandbits(32), 4150886329U);
  EXPECT_EQ(a.getrandbits(32), 3342196574U);
  EXPECT_EQ(a.getrandbits(32), 1892932127U);
  PyRandom b(1234);
  EXPECT_EQ(b.sample(10, 3), (std::vector<std::size_t>{7, 1, 0}));              // pool path
  EXPECT_EQ(b.sample(100, 7), (std::vector<std::size_t>{11, 74, 4, 85, 88, 10, 12}));  // set path
  EXPECT_EQ(b.sample(5, 5), (std::vector<std::size_t>{2, 1, 0, 4, 3}));
  PyRandom c(0);
  EXPECT_EQ(c.getrandbits(32), 3626764237U);
  EXPECT_EQ(c.getrandbits(5), 12U);
  PyRandom d((1ULL << 40) + 5);  // two key words
  EXPECT_EQ(d.getrandbits(32), 2166296868U);
  // random.Random(1234).random() three times, Random(0).random(): bit-exact doubles.
  PyRandom e(1234);
  EXPECT_EQ(e.random(), 0.9664535356921388);
  EXPECT_EQ(e.random(), 0.4407325991753527);
  EXPECT_EQ(e.random(), 0.007491470058587191);
  EXPECT_EQ(PyRandom(0).random(), 0.8444218515250481);
}

// lm-eval's perplexity aggregation and bootstrap_stderr, against the values python3 (3.11) gives for
// lm_eval.api.metrics' algorithm: chunks of min(1000, iters) resamples, chunk i from Random(i),
// random.choices(xs, k=len(xs)), exp(-mean), the sample stddev of the replicates.
TEST(LmEvalStatsTest, PerplexityAndItsBootstrapStderrMatchPython) {
  const std::vector<double> xs{-1.5, -0.25, -3.0, -0.75, -2.125};
  EXPECT_DOUBLE_EQ(perplexity_aggregate(xs), 4.595143569306688);
  EXPECT_DOUBLE_EQ(perplexity_bootstrap_stderr(xs, 2000), 2.3746092897921645);
  EXPECT_DOUBLE_EQ(perplexity_bootstrap_stderr(xs), 2.3271393850703075);  // lm-eval's default 100000
  EXPECT_DOUBLE_EQ(perplexity_bootstrap_stderr({-0.5, -4.0}, 1000), 20.364412071480984);
  EXPECT_TRUE(std::isnan(perplexity_bootstrap_stderr({-0.5})));
  EXPECT_TRUE(std::isnan(perplexity_aggregate({})));
  const MeanWithStderr m = mean_with_stderr({1.0, 0.0, 1.0, 1.0});
  EXPECT_DOUBLE_EQ(m.mean, 0.75);
  EXPECT_DOUBLE_EQ(m.standard_error, 0.25);  // sample stddev sqrt(0.75 / 3) = 0.5, over sqrt(4)
}

TEST(TemplateTest, PathsIndexingAndFilters) {
  const json doc = json::parse(R"({"a": {"b": "x"}, "l": ["p", "q", "r"], "n": 7, "k": "q",
      "s": "  Hello World  ", "u": "the _ sat", "w": "one two three", "sub": "high_school_math"})");
  EXPECT_EQ(Template("lit {{a.b}} {{ l[0] }}{{l[-1]}} {{n}}").render(doc), "lit x pr 7");
  EXPECT_EQ(Template("{{l.index(k)}}").evaluate(doc), json(1));
  EXPECT_EQ(Template("{{l.index(\"r\")}}").evaluate(doc), json(2));
  EXPECT_EQ(Template("{{l}}").evaluate(doc), doc["l"]);  // a lone expression keeps its list value
  EXPECT_EQ(Template("[{{s|trim}}] {{s|trim|lower}} {{s|upper|trim}}").render(doc), "[Hello World] hello world HELLO WORLD");
  EXPECT_EQ(Template("{{a.b|capitalize}} {{s|trim|capitalize}}").render(doc), "X Hello world");
  EXPECT_EQ(Template("{{u|before(\"_\")}}|{{u|after(\"_\")|trim}}").render(doc), "the |sat");
  EXPECT_EQ(Template("{{w|before_last(\" \")}}/{{w|after_last(\" \")}}").render(doc), "one two/three");
  EXPECT_EQ(Template("{{sub|replace(\"_\", \" \")}}").render(doc), "high school math");
  EXPECT_EQ(Template("{{n|minus(1)}}").evaluate(doc), json(6));
  EXPECT_EQ(Template("no holes").render(doc), "no holes");
}

TEST(TemplateTest, ErrorsSayWhat) {
  const json doc = json::parse(R"({"a": {"b": "x"}, "l": ["p"], "f": 1.5})");
  const auto msg = [&](const std::string& t) -> std::string {
    try {
      (void)Template(t).render(doc);
    } catch (const TemplateError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg("{{a.c}}").find("field 'a.c' is missing"), std::string::npos) << msg("{{a.c}}");
  EXPECT_NE(msg("{{l[1]}}").find("index 1 out of range"), std::string::npos) << msg("{{l[1]}}");
  EXPECT_NE(msg("{{l[-2]}}").find("out of range"), std::string::npos);
  EXPECT_NE(msg("{{a[0]}}").find("not a list"), std::string::npos) << msg("{{a[0]}}");
  EXPECT_NE(msg("{{l.index(a.b)}}").find("is not in"), std::string::npos) << msg("{{l.index(a.b)}}");
  EXPECT_NE(msg("{{f}}").find("a number, expected a string or an integer"), std::string::npos) << msg("{{f}}");
  EXPECT_NE(msg("{{a}}").find("an object"), std::string::npos);
  EXPECT_NE(msg("{{l[0]|after(\"z\")}}").find("\"z\" is not in the text"), std::string::npos);
  EXPECT_NE(msg("{{a.b").find("unclosed"), std::string::npos);
  EXPECT_NE(msg("{{a|shout}}").find("unknown filter 'shout'"), std::string::npos);
  EXPECT_NE(msg("{{a|replace(\"x\")}}").find("two"), std::string::npos);
  EXPECT_NE(msg("{{a b}}").find("unexpected"), std::string::npos);
  EXPECT_NE(msg("x }}").find("without"), std::string::npos);
}

TEST_F(TaskFileTest, UnknownKeyWrongTypeAndBadTemplateAreInputErrors) {
  const std::string base = "name = \"t\"\noutput_type = \"multiple_choice\"\ndoc_to_text = \"{{q}}\"\n"
                           "doc_to_choice = [\"a\", \"b\"]\ndoc_to_target = \"0\"\n";
  const auto err = [&](const std::string& extra) {
    const std::string p = write("t.toml", base + extra);
    return error_of([&] { read_task_file(p); });
  };
  EXPECT_EQ(err(""), "");
  const std::string unknown = err("num_shots = 3\n");
  EXPECT_NE(unknown.find("t.toml:6: num_shots"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("unknown key"), std::string::npos) << unknown;
  const std::string type = err("target_delimiter = 1\n");
  EXPECT_NE(type.find("target_delimiter"), std::string::npos) << type;
  EXPECT_NE(type.find("must be a string, got an integer"), std::string::npos) << type;
  EXPECT_NE(err("multiple_inputs = \"yes\"\n").find("must be a boolean"), std::string::npos);
  EXPECT_NE(err("until = [\"x\"]\n").find("only for output_type generate_until"), std::string::npos);
  EXPECT_NE(err("[[filter]]\nname = \"f\"\nregex = \"x\"\n").find("only for output_type generate_until"),
            std::string::npos);
  EXPECT_NE(err("[[preprocess]]\nfield = \"q\"\nstrip = true\nset = \"x\"\n").find("exactly one"), std::string::npos);
  EXPECT_NE(err("[[preprocess]]\nfield = \"q\"\nregex = [\"(\", \"\"]\n").find("bad regular expression"), std::string::npos);
  EXPECT_NE(err("[[preprocess]]\nfield = \"q\"\nlower = true\n").find("preprocess[0].lower"), std::string::npos);
  const std::string bad = write("b.toml", "name = \"t\"\noutput_type = \"multiple_choice\"\ndoc_to_text = \"{{q\"\n"
                                          "doc_to_choice = [\"a\"]\ndoc_to_target = \"0\"\n");
  EXPECT_NE(error_of([&] { read_task_file(bad); }).find("b.toml:3: doc_to_text"), std::string::npos);
  const std::string no_choice = write("c.toml", "name = \"t\"\noutput_type = \"multiple_choice\"\n"
                                                "doc_to_text = \"{{q}}\"\ndoc_to_target = \"0\"\n");
  EXPECT_NE(error_of([&] { read_task_file(no_choice); }).find("doc_to_choice"), std::string::npos);
  const std::string kind = write("k.toml", "name = \"t\"\noutput_type = \"ranking\"\ndoc_to_text = \"x\"\ndoc_to_target = \"0\"\n");
  EXPECT_NE(error_of([&] { read_task_file(kind); }).find("output_type"), std::string::npos);
  EXPECT_NE(error_of([&] { read_task_file((dir_ / "none.toml").string()); }).find("none.toml"), std::string::npos);
}

TEST_F(TaskFileTest, DataSetErrors) {
  const std::string task = write("t.toml", "name = \"t\"\noutput_type = \"multiple_choice\"\ndoc_to_text = \"{{q}}\"\n"
                                           "doc_to_choice = [\"a\", \"b\"]\ndoc_to_target = \"0\"\n");
  const TaskFile t = read_task_file(task);
  EXPECT_NE(error_of([&] { build_task_documents(t, "", {}, 0); }).find("dataset"), std::string::npos);
  const std::string bad = write("bad.jsonl", "{\"q\": \"x\"}\n{\"q\": \n");
  EXPECT_NE(error_of([&] { build_task_documents(t, bad, {}, 0); }).find("bad.jsonl:2"), std::string::npos);
  const std::string arr = write("arr.jsonl", "[1]\n");
  EXPECT_NE(error_of([&] { build_task_documents(t, arr, {}, 0); }).find("JSON object"), std::string::npos);
  const std::string empty = write("empty.jsonl", "\n  \n");
  EXPECT_NE(error_of([&] { build_task_documents(t, empty, {}, 0); }).find("no documents"), std::string::npos);
  const std::string one = write("one.jsonl", "{\"q\": \"x\"}\n");
  EXPECT_NE(error_of([&] { build_task_documents(t, one, {1, 1234}, 0); }).find("num_fewshot 1 needs 2"),
            std::string::npos);
}

// Six documents, two shots each, drawn as lm-eval's ContextSampler does (one Random(1234) over the
// documents in order, sample(docs, 3), drop the document itself, keep 2):
//   python3 -c "import random; r=random.Random(1234); print([[x for x in r.sample(range(6),3) if x!=i][:2] for i in range(6)])"
//   -> [[3, 4], [0, 4], [5, 0], [2, 1], [0, 5], [4, 3]]
TEST_F(TaskFileTest, FewShotFromTheDocumentsMatchesLmEvalsSampler) {
  std::string jsonl;
  for (int i = 0; i < 6; ++i) jsonl += "{\"q\": \"q" + std::to_string(i) + "\", \"a\": " + std::to_string(i % 2) + "}\n";
  write("d.jsonl", jsonl);
  const TaskFile t = read_task_file(write("t.toml", "name = \"t\"\noutput_type = \"multiple_choice\"\ndataset = \"d.jsonl\"\n"
                                                    "description = \"About {{q}}.\\n\\n\"\n"
                                                    "doc_to_text = \"Q: {{q}}\\nA:\"\ndoc_to_choice = [\"no\", \"yes\"]\n"
                                                    "doc_to_target = \"{{a}}\"\n"));
  const std::vector<std::vector<int>> shots = {{3, 4}, {0, 4}, {5, 0}, {2, 1}, {0, 5}, {4, 3}};
  const auto docs = build_task_documents(t, "", {2, 1234}, 0);
  ASSERT_EQ(docs.size(), 6u);
  const auto example = [](int i) { return "Q: q" + std::to_string(i) + "\nA: " + (i % 2 ? "yes" : "no"); };
  for (int i = 0; i < 6; ++i) {
    const std::string want = "About q" + std::to_string(i) + ".\n\n" + example(shots[i][0]) + "\n\n" +
                             example(shots[i][1]) + "\n\nQ: q" + std::to_string(i) + "\nA:";
    EXPECT_EQ(docs[i].requests[0].context, want) << i;
    EXPECT_EQ(docs[i].requests[1].context, want) << i;
    EXPECT_EQ(docs[i].requests[1].continuation, " yes");
  }
  // Deterministic; another seed draws other examples; max_docs does not change the first documents.
  const auto again = build_task_documents(t, "", {2, 1234}, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(again[i].requests[0].context, docs[i].requests[0].context);
  const auto other = build_task_documents(t, "", {2, 7}, 0);
  bool differs = false;
  for (int i = 0; i < 6; ++i) differs = differs || other[i].requests[0].context != docs[i].requests[0].context;
  EXPECT_TRUE(differs);
}

// lm-eval drops the document by content (`x != doc`), so a duplicate of it is dropped too:
//   python3 -c "import random; print(random.Random(1).sample(range(4), 2))"  -> [1, 2]
// Document 0 ("a") draws [1, 2]; document 1 is also "a", so the shot is document 2 ("b").
TEST_F(TaskFileTest, FewShotDropsDuplicatesOfTheDocumentAndNamesABadExample) {
  write("d.jsonl", "{\"q\": \"a\"}\n{\"q\": \"a\"}\n{\"q\": \"b\"}\n{\"q\": \"c\"}\n");
  const TaskFile t = read_task_file(write("t.toml", "name = \"t\"\noutput_type = \"generate_until\"\ndataset = \"d.jsonl\"\n"
                                                    "doc_to_text = \"{{q}}?\"\ndoc_to_target = \"{{q}}!\"\n"));
  const auto docs = build_task_documents(t, "", {1, 1}, 1);
  EXPECT_EQ(docs[0].requests[0].context, "b? b!\n\na?");
  EXPECT_EQ(docs[0].target, "a!");
  // An example the templates do not fit is named by its own line.
  const std::string bad = write("bad.jsonl", "{\"q\": \"a\"}\n{\"x\": 1}\n");
  const std::string e = error_of([&] { build_task_documents(t, bad, {1, 1234}, 1); });
  EXPECT_NE(e.find("bad.jsonl:2"), std::string::npos) << e;
  EXPECT_NE(e.find("field 'q' is missing"), std::string::npos) << e;
}

// A separate few-shot file: sample(n) without the extra draw (lm-eval: fewshot_split != test_split).
//   python3 -c "import random; r=random.Random(1234); print([r.sample(range(4),1) for _ in range(2)])"
TEST_F(TaskFileTest, FewShotFromAFewshotFileAndCustomDelimiters) {
  write("d.jsonl", "{\"q\": \"x\", \"a\": 0}\n{\"q\": \"y\", \"a\": 1}\n");
  write("train.jsonl", "{\"q\": \"t0\", \"a\": 0}\n{\"q\": \"t1\", \"a\": 1}\n{\"q\": \"t2\", \"a\": 0}\n{\"q\": \"t3\", \"a\": 1}\n");
  const TaskFile t = read_task_file(write("t.toml", "name = \"t\"\noutput_type = \"multiple_choice\"\ndataset = \"d.jsonl\"\n"
                                                    "fewshot_dataset = \"train.jsonl\"\ntarget_delimiter = \"=\"\n"
                                                    "fewshot_delimiter = \"|\"\ndoc_to_text = \"{{q}}\"\n"
                                                    "doc_to_choice = [\"n\", \"y\"]\ndoc_to_target = \"{{a}}\"\n"));
  EXPECT_EQ(t.fewshot_dataset, (dir_ / "train.jsonl").string());
  const auto docs = build_task_documents(t, "", {1, 1234}, 0);
  PyRandom rnd(1234);
  for (int i = 0; i < 2; ++i) {
    const std::size_t j = rnd.sample(4, 1)[0];
    std::string want = "t";
    want += std::to_string(j);
    want += j % 2 ? "=y|" : "=n|";
    want += i ? "y" : "x";
    EXPECT_EQ(docs[i].requests[0].context, want);
    EXPECT_EQ(docs[i].requests[0].continuation, "=n");
  }
}

// Winogrande-style partial scoring: the contexts differ per choice, the continuation is shared.
TEST_F(TaskFileTest, MultipleInputPartialScoring) {
  write("d.jsonl", "{\"sentence\": \"Ann gave Bo a gift because _ was kind.\", \"option1\": \"Ann\", \"option2\": \"Bo\", \"answer\": \"2\"}\n"
                   "{\"sentence\": \"The cup fell off the shelf since _ was tilted.\", \"option1\": \"cup\", \"option2\": \"shelf\", \"answer\": \"1\"}\n");
  const TaskFile t = read_task_file(write("t.toml", "name = \"w\"\noutput_type = \"multiple_choice\"\ndataset = \"d.jsonl\"\n"
                                                    "multiple_inputs = true\ndoc_to_text = \"{{answer|minus(1)}}\"\n"
                                                    "doc_to_choice = [\"{{sentence|before(\\\"_\\\")}}{{option1}}\", "
                                                    "\"{{sentence|before(\\\"_\\\")}}{{option2}}\"]\n"
                                                    "doc_to_target = \"{{sentence|after(\\\"_\\\")|trim}}\"\n"));
  const auto docs = build_task_documents(t, "", {}, 0);
  ASSERT_EQ(docs[0].requests.size(), 2u);
  EXPECT_EQ(docs[0].gold, 1);
  EXPECT_EQ(docs[0].requests[0].context, "Ann gave Bo a gift because Ann");
  EXPECT_EQ(docs[0].requests[1].context, "Ann gave Bo a gift because Bo");
  EXPECT_EQ(docs[0].requests[0].continuation, " was kind.");
  EXPECT_EQ(docs[0].requests[1].continuation, " was kind.");
  EXPECT_EQ(docs[0].target, "was kind.");
  EXPECT_EQ(docs[1].gold, 0);
  // Few-shot examples use the gold context: doc 0 gets doc 1 as its only possible example.
  const auto shot = build_task_documents(t, "", {1, 1234}, 1);
  EXPECT_EQ(shot[0].requests[1].context, "The cup fell off the shelf since cup was tilted.\n\nAnn gave Bo a gift because Bo");
}

TEST_F(TaskFileTest, PreprocessRulesApplyToFieldsAndLists) {
  write("d.jsonl", R"({"t": "  Cut [title] the wood [step]  now ", "e": ["a [x] b", " c "], "l": 0})" "\n");
  const TaskFile t = read_task_file(write("t.toml", R"(name = "p"
output_type = "multiple_choice"
dataset = "d.jsonl"
doc_to_text = "{{q}}"
doc_to_choice = "{{e}}"
doc_to_target = "{{l}}"
[[preprocess]]
field = "q"
set = "{{t|trim}}"
[[preprocess]]
field = "q"
replace = [" [title]", ". "]
[[preprocess]]
field = "q"
regex = ["\\[.*?\\]", ""]
[[preprocess]]
field = "q"
replace = ["  ", " "]
[[preprocess]]
field = "e"
regex = ["\\[.*?\\]", ""]
[[preprocess]]
field = "e"
strip = true
)"));
  const auto docs = build_task_documents(t, "", {}, 0);
  // python3 -c "import re; t='  Cut [title] the wood [step]  now '.strip().replace(' [title]', '. ');
  //             print(repr(re.sub('\\[.*?\\]', '', t).replace('  ', ' ')))"  -> 'Cut. the wood  now'
  EXPECT_EQ(docs[0].requests[0].context, "Cut. the wood  now");
  EXPECT_EQ(docs[0].choices, (std::vector<std::string>{"a  b", "c"}));
  const std::string miss = write("m.jsonl", R"({"e": ["x"], "l": 0})" "\n");
  const std::string e = error_of([&] { build_task_documents(t, miss, {}, 0); });
  EXPECT_NE(e.find("m.jsonl:1"), std::string::npos) << e;
  EXPECT_NE(e.find("preprocess[0]"), std::string::npos) << e;
}

// ---- the shipped task files on their samples, against the strings lm-eval's YAMLs build ----

std::string task_path(const std::string& name) { return std::string(EVALRUN_SOURCE_DIR) + "/tasks/" + name + ".toml"; }

std::vector<TaskDocument> shipped(const std::string& name, const FewshotSpec& fs = {}) {
  const TaskFile t = read_task_file(task_path(name));
  EXPECT_EQ(t.name, name);
  return build_task_documents(t, "", fs, 0);
}

void expect_mc(const TaskDocument& d, const std::string& context, const std::vector<std::string>& choices,
               std::int64_t gold) {
  EXPECT_EQ(d.choices, choices);
  EXPECT_EQ(d.gold, gold);
  ASSERT_EQ(d.requests.size(), choices.size());
  for (std::size_t i = 0; i < choices.size(); ++i) {
    EXPECT_EQ(d.requests[i].context, context);
    EXPECT_EQ(d.requests[i].continuation, " " + choices[i]);
  }
}

TEST(ShippedTasks, Arc) {
  const auto easy = shipped("arc_easy");
  ASSERT_EQ(easy.size(), 3u);
  expect_mc(easy[0], "Question: Which of these do plants need to make their own food?\nAnswer:",
            {"sunlight", "sand", "plastic", "noise"}, 0);
  expect_mc(easy[2], "Question: Which tool is best for measuring the length of a table?\nAnswer:",
            {"a thermometer", "a scale", "a measuring tape", "a clock"}, 2);  // answerKey "3" in labels 1..4
  const auto ch = shipped("arc_challenge");
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch[1].gold, 2);
  EXPECT_EQ(ch[1].requests[2].continuation, " Different amounts of its lit side face Earth.");
}

TEST(ShippedTasks, HellaSwag) {
  const auto d = shipped("hellaswag");
  ASSERT_EQ(d.size(), 3u);
  expect_mc(d[0], "Making tea: A man fills a kettle with water. He",
            {"puts the kettle on the stove.", "throws the kettle out of the window.", "paints the kettle green.",
             "reads the kettle a story."},
            0);
  expect_mc(d[1], "Home and Garden: How to water a plant. Check the soil. You",
            {"should sing to the soil loudly.", "should pour water slowly at the base. Stop when it drips.",
             "should bury the plant in sand.", "should put the plant in the freezer."},
            1);
  EXPECT_EQ(d[2].requests[0].context, "Riding a bike: A girl sits on a bike. She");  // "SHE".capitalize()
}

TEST(ShippedTasks, PiqaAndBoolq) {
  const auto p = shipped("piqa");
  expect_mc(p[0], "Question: How do you keep bread from going stale quickly?\nAnswer:",
            {"Leave it open on the counter.", "Store it in a closed bag."}, 1);
  const auto b = shipped("boolq");
  expect_mc(b[1],
            "Penguins are birds that cannot fly; their wings have become flippers for swimming.\n"
            "Question: can penguins fly?\nAnswer:",
            {"no", "yes"}, 0);
}

TEST(ShippedTasks, WinograndePartialScoring) {
  const auto d = shipped("winogrande");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].gold, 1);
  ASSERT_EQ(d[0].requests.size(), 2u);
  EXPECT_EQ(d[0].requests[0].context, "The trophy did not fit in the suitcase because the trophy");
  EXPECT_EQ(d[0].requests[1].context, "The trophy did not fit in the suitcase because the suitcase");
  EXPECT_EQ(d[0].requests[0].continuation, " was too small.");
  EXPECT_EQ(d[0].requests[1].continuation, " was too small.");
  EXPECT_EQ(d[2].gold, 0);
}

TEST(ShippedTasks, MmluWithFirstNFewShot) {
  const auto zero = shipped("mmlu");
  expect_mc(zero[0],
            "The following are multiple choice questions (with answers) about elementary mathematics.\n\n"
            "What is 7 times 8?\nA. 54\nB. 56\nC. 58\nD. 64\nAnswer:",
            {"A", "B", "C", "D"}, 1);
  const auto two = shipped("mmlu", {2, 1234});
  EXPECT_EQ(two[1].requests[0].context,
            "The following are multiple choice questions (with answers) about high school biology.\n\n"
            "What is 2 plus 3?\nA. 4\nB. 5\nC. 6\nD. 7\nAnswer: B\n\n"
            "What is 10 minus 4?\nA. 5\nB. 7\nC. 6\nD. 4\nAnswer: C\n\n"
            "Which gas do plants take in from the air?\nA. oxygen\nB. nitrogen\nC. carbon dioxide\nD. helium\nAnswer:");
}

TEST(ShippedTasks, LambadaLoglikelihood) {
  const auto d = shipped("lambada_openai");
  ASSERT_EQ(d.size(), 3u);
  ASSERT_EQ(d[0].requests.size(), 1u);
  EXPECT_EQ(d[0].requests[0].context, "She opened the old box and found a letter from her grandmother. She read the");
  EXPECT_EQ(d[0].requests[0].continuation, " letter");
  EXPECT_TRUE(d[0].choices.empty());
  EXPECT_EQ(d[0].gold, -1);
}

TEST_F(TaskFileTest, GenerateUntilFilterErrors) {
  const std::string base = "name = \"g\"\noutput_type = \"generate_until\"\ndoc_to_text = \"{{q}}\"\ndoc_to_target = \"{{a}}\"\n";
  const auto err = [&](const std::string& extra) {
    const std::string p = write("g.toml", base + extra);
    return error_of([&] { read_task_file(p); });
  };
  EXPECT_EQ(err("[[filter]]\nname = \"f\"\nregex = \"(x)\"\n"), "");
  EXPECT_NE(err("[[filter]]\nname = \"f\"\n").find("needs name and regex"), std::string::npos);
  EXPECT_NE(err("[[filter]]\nname = \"f\"\nregex = \"x\"\ntake = 1\n").find("filter[0].take"), std::string::npos);
  EXPECT_NE(err("[[filter]]\nname = \"f\"\nregex = \"x\"\ngroup_select = \"last\"\n").find("must be an integer"),
            std::string::npos);
  EXPECT_NE(err("max_gen_toks = 0\n").find("must be in 1.."), std::string::npos);
  EXPECT_NE(err("doc_to_choice = [\"a\"]\n").find("only for output_type multiple_choice"), std::string::npos);
}

TEST(ShippedTasks, Gsm8kGenerateUntil) {
  const TaskFile t = read_task_file(task_path("gsm8k"));
  EXPECT_EQ(t.until, (std::vector<std::string>{"Question:", "</s>", "<|im_end|>"}));
  EXPECT_EQ(t.max_gen_toks, 256);
  ASSERT_EQ(t.filters.size(), 2u);
  EXPECT_EQ(t.filters[0].name, "strict-match");
  EXPECT_EQ(t.filters[0].regex, "#### (\\-?[0-9\\.\\,]+)");
  EXPECT_EQ(t.filters[0].group_select, 0);
  EXPECT_EQ(t.filters[1].name, "flexible-extract");
  EXPECT_EQ(t.filters[1].regex, "(-?[$0-9.,]{2,})|(-?[0-9]+)");
  EXPECT_EQ(t.filters[1].group_select, -1);
  EXPECT_EQ(t.filters[1].fallback, "[invalid]");
  EXPECT_TRUE(t.ignore_case);
  EXPECT_FALSE(t.ignore_punctuation);
  EXPECT_FALSE(t.strip);
  EXPECT_EQ(t.regexes_to_ignore, (std::vector<std::string>{",", "\\$", "(?s).*#### ", "\\.$"}));
  const auto d = build_task_documents(t, "", {1, 1234}, 0);
  ASSERT_EQ(d.size(), 3u);
  ASSERT_EQ(d[2].requests.size(), 1u);
  EXPECT_EQ(d[2].requests[0].continuation, "");
  EXPECT_EQ(d[2].target, "15 - 6 = <<15-6=9>>9 birds are left.\n#### 9");
  // One shot (another document, drawn by the seeded sampler), then the question.
  const std::string& c = d[2].requests[0].context;
  const std::string tail = "\n\nQuestion: There are 15 birds on a tree. 6 fly away. How many are left?\nAnswer:";
  ASSERT_GT(c.size(), tail.size());
  EXPECT_EQ(c.substr(c.size() - tail.size()), tail);
  EXPECT_EQ(c.rfind("Question: ", 0), 0u);
  EXPECT_NE(c.find("\nAnswer: "), std::string::npos);
}

}  // namespace
}  // namespace evalrun
