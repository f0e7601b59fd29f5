// The task registry: one row per TaskKind, in order, with unique names; lookups by name and kind agree.
#include "task/registry.hpp"

#include <gtest/gtest.h>

#include <set>

namespace evalrun {
namespace {

TEST(TaskRegistry, OneRowPerKindInOrder) {
  const auto& rows = task_registry();
  ASSERT_EQ(rows.size(), kTaskCount);
  std::set<std::string> names, sections;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(rows[i].kind), i);
    EXPECT_EQ(&task_info(rows[i].kind), &rows[i]);
    EXPECT_TRUE(names.insert(rows[i].name).second) << "repeated task name " << rows[i].name;
    EXPECT_TRUE(sections.insert(rows[i].thresholds_section).second) << rows[i].thresholds_section;
    EXPECT_EQ(find_task(rows[i].name), &rows[i]);
    EXPECT_STREQ(to_string(rows[i].kind), rows[i].name);
    EXPECT_NE(std::string(rows[i].summary), "");
    // A row that names a shape option says how to tell it is set, and the other way round.
    EXPECT_EQ(std::string(rows[i].fixed_shape_option).empty(), rows[i].shapes_fixed == nullptr) << rows[i].name;
  }
  EXPECT_EQ(find_task("summarize"), nullptr);
  EXPECT_EQ(task_names(), "qa, mlm, generate, perplexity, loglikelihood, multiple_choice, generate_until");
}

TEST(TaskRegistry, RolesAndKeys) {
  EXPECT_EQ(task_info(TaskKind::qa).role, ModelRole::encoder);
  EXPECT_EQ(task_info(TaskKind::mlm).role, ModelRole::encoder);
  EXPECT_EQ(task_info(TaskKind::generate).role, ModelRole::decoder);
  EXPECT_EQ(task_info(TaskKind::perplexity).role, ModelRole::decoder);
  EXPECT_EQ(task_info(TaskKind::loglikelihood).role, ModelRole::decoder);
  // What each task stores of its logits rows; the first mode is the default.
  const std::vector<LogitsMode> all = {LogitsMode::full, LogitsMode::topk, LogitsMode::none};
  EXPECT_EQ(task_info(TaskKind::qa).logits_modes, all);
  EXPECT_EQ(task_info(TaskKind::mlm).logits_modes, all);
  EXPECT_EQ(task_info(TaskKind::generate).logits_modes,
            (std::vector<LogitsMode>{LogitsMode::full, LogitsMode::topk, LogitsMode::none, LogitsMode::logprobs16}));
  EXPECT_EQ(task_info(TaskKind::perplexity).logits_modes,
            (std::vector<LogitsMode>{LogitsMode::none, LogitsMode::full, LogitsMode::topk, LogitsMode::logprobs16}));
  for (auto k : {TaskKind::loglikelihood, TaskKind::multiple_choice, TaskKind::generate_until})
    EXPECT_EQ(task_info(k).logits_modes, std::vector<LogitsMode>{LogitsMode::none}) << to_string(k);
  // The benchmark tasks read a task file; loglikelihood may (LAMBADA); no other task does.
  for (const auto& t : task_registry()) {
    const bool benchmark = t.kind == TaskKind::multiple_choice || t.kind == TaskKind::generate_until;
    const bool may = t.kind == TaskKind::loglikelihood;
    EXPECT_EQ(t.task_file, benchmark ? TaskFileUse::required : may ? TaskFileUse::optional : TaskFileUse::none) << t.name;
    EXPECT_EQ(t.applies("task.task_file"), benchmark || may) << t.name;
    EXPECT_EQ(t.applies("output.lm_eval_json"), benchmark || may) << t.name;
    if (benchmark || may) {
      EXPECT_EQ(t.role, ModelRole::decoder) << t.name;
    }
  }
  EXPECT_TRUE(task_info(TaskKind::multiple_choice).applies("task.share_context"));
  EXPECT_FALSE(task_info(TaskKind::generate_until).applies("task.share_context"));
  EXPECT_TRUE(task_info(TaskKind::qa).applies("task.doc_stride"));
  EXPECT_FALSE(task_info(TaskKind::mlm).applies("task.doc_stride"));
  EXPECT_TRUE(task_info(TaskKind::generate).applies("validation.golden"));
  EXPECT_STREQ(to_string(ModelRole::decoder), "decoder");
}

}  // namespace
}  // namespace evalrun
