#include "app/flows/flows.hpp"

#include <stdexcept>

#include "task/registry.hpp"

namespace evalrun {
namespace {

// The flow of each task of the registry, in TaskKind order. References, not pointers: a row cannot
// lack a function (and gcc cannot compare an external function's address with nullptr in a constant
// expression under -fsanitize=undefined).
struct FlowRow {
  TaskKind kind;
  std::unique_ptr<TaskFlow> (&make)();
  CalibrationSet (&calibration)(const RunSpec&);
  constexpr bool complete() const { return true; }
};
constexpr FlowRow kFlows[] = {
    {TaskKind::qa, make_qa_flow, qa_calibration},
    {TaskKind::mlm, make_mlm_flow, mlm_calibration},
    {TaskKind::generate, make_generate_flow, generate_calibration},
    {TaskKind::perplexity, make_perplexity_flow, perplexity_calibration},
    {TaskKind::loglikelihood, make_loglikelihood_flow, loglikelihood_calibration},
    {TaskKind::multiple_choice, make_multiple_choice_flow, multiple_choice_calibration},
    {TaskKind::generate_until, make_generate_until_flow, generate_until_calibration},
};
static_assert(rows_cover_every_task(kFlows), "kFlows needs one row per TaskKind, in TaskKind order");

const FlowRow& row_of(TaskKind kind) { return kFlows[static_cast<std::size_t>(kind)]; }

}  // namespace

std::unique_ptr<TaskFlow> make_flow(TaskKind kind) { return row_of(kind).make(); }

CalibrationSet task_calibration(const RunSpec& spec) { return row_of(spec.task.kind).calibration(spec); }

}  // namespace evalrun
