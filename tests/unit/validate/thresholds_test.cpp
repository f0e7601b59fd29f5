#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/errors.hpp"
#include "test_util.hpp"
#include "task/registry.hpp"
#include "validate/thresholds.hpp"

using namespace evalrun;

namespace {

std::string write(const std::string& name, const std::string& text) {
  static const auto dir = evalrun::testing::make_temp_dir("evalrun-thr");
  const auto p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

std::string error_of(const std::string& path) {
  try {
    Thresholds::load(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Thresholds, DefaultsAndOverrides) {
  Thresholds d;
  EXPECT_DOUBLE_EQ(d.get("generate", "failure_rate"), 0.01);
  EXPECT_DOUBLE_EQ(d.get("perplexity", "ratio_max"), 1.01);
  const auto t = Thresholds::load(write("ok.toml", "[qa]\nmax_logit_diff = 1e-3\nanswer_agreement_min = 1\n[generate]\nce_per_token = 0.25\n"));
  EXPECT_DOUBLE_EQ(t.get("qa", "max_logit_diff"), 1e-3);
  EXPECT_DOUBLE_EQ(t.get("qa", "answer_agreement_min"), 1.0);
  EXPECT_DOUBLE_EQ(t.get("generate", "ce_per_token"), 0.25);
  EXPECT_DOUBLE_EQ(t.get("qa", "f1_delta"), d.get("qa", "f1_delta"));  // untouched keys keep defaults
}

TEST(Thresholds, UnknownKeyNamesFileAndLine) {
  const auto p = write("typo.toml", "[qa]\nf1_delta = 0.5\nmax_logit_dif = 1e-3\n");
  const auto msg = error_of(p);
  EXPECT_NE(msg.find("typo.toml:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("qa.max_logit_dif"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_logit_diff"), std::string::npos) << msg;  // lists the known keys
}

TEST(Thresholds, BadSectionValueAndSyntax) {
  EXPECT_NE(error_of(write("sec.toml", "[qaa]\nf1_delta = 1\n")).find("qaa"), std::string::npos);
  EXPECT_NE(error_of(write("str.toml", "[mlm]\ntop1_agreement_min = \"all\"\n")).find("str.toml:2"), std::string::npos);
  EXPECT_NE(error_of(write("neg.toml", "[mlm]\n\nmax_logit_diff = -1\n")).find("neg.toml:3"), std::string::npos);
  EXPECT_NE(error_of(write("syn.toml", "[mlm\nmax_logit_diff = 1\n")).find("syn.toml:1"), std::string::npos);
  // toml11 read past its buffer on invalid UTF-8 in a literal string (found by fuzz_config); refused first.
  EXPECT_NE(error_of(write("utf8.toml", "[mlm]\n# x\nname = 'a\xff'\n")).find("utf8.toml:3"), std::string::npos);
  EXPECT_NE(error_of("/nonexistent/t.toml").find("/nonexistent/t.toml"), std::string::npos);
}

// Every task of the registry has a thresholds section with limits, and every limit belongs to one;
// a section that is no task's is refused, listing the registry's sections.
TEST(Thresholds, SectionsAreTheTaskRegistrysSections) {
  std::set<std::string> sections;
  for (const auto& t : task_registry()) sections.insert(t.thresholds_section);
  std::set<std::string> used;
  for (const auto& s : threshold_specs()) {
    EXPECT_TRUE(sections.count(s.task)) << s.task << "." << s.key << " is in no task's section";
    used.insert(s.task);
  }
  EXPECT_EQ(used, sections);
  const std::string m = error_of(write("other.toml", "[summarize]\nx = 1\n"));
  EXPECT_NE(m.find("unknown section 'summarize'; sections are qa, mlm, generate, perplexity, loglikelihood"), std::string::npos) << m;
}
