#include "app/flows/flows.hpp"

#include <stdexcept>

#include "task/registry.hpp"

namespace evalrun {
namespace {

// The flow of each task of the registry, in TaskKind order.
struct FlowRow {
  TaskKind kind;
  std::unique_ptr<TaskFlow> (*make)();
  CalibrationSet (*calibration)(const RunSpec&);
  constexpr bool complete() const { return make != nullptr && calibration != nullptr; }
};
constexpr FlowRow kFlows[] = {
    {TaskKind::qa, make_qa_flow, qa_calibration},
    {TaskKind::mlm, make_mlm_flow, mlm_calibration},
    {TaskKind::generate, make_generate_flow, generate_calibration},
    {TaskKind::perplexity, make_perplexity_flow, perplexity_calibration},
};
static_assert(rows_cover_every_task(kFlows), "kFlows needs one row per TaskKind, in TaskKind order");

const FlowRow& row_of(TaskKind kind) { return kFlows[static_cast<std::size_t>(kind)]; }

CalibrationSet calibration_of_role(const RunSpec& spec, ModelRole role) {
  if (task_info(spec.task.kind).role != role) {
    throw std::logic_error(std::string("calibration: task ") + to_string(spec.task.kind) + " is not an " +
                           to_string(role) + " task");
  }
  return task_calibration(spec);
}

}  // namespace

std::unique_ptr<TaskFlow> make_flow(TaskKind kind) { return row_of(kind).make(); }

CalibrationSet task_calibration(const RunSpec& spec) { return row_of(spec.task.kind).calibration(spec); }

// direct_quant.hpp's entry points (evalrun quantize): the task's own calibration inputs.
CalibrationSet prepare_encoder_calibration(const RunSpec& spec) { return calibration_of_role(spec, ModelRole::encoder); }
CalibrationSet prepare_decoder_calibration(const RunSpec& spec) { return calibration_of_role(spec, ModelRole::decoder); }

}  // namespace evalrun
