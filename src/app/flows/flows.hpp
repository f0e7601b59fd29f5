// Each task's flow, one file per task in this folder: a factory and the calibration inputs of direct
// INT8 quantization (prepared with the task's own preprocessing). flows.cpp keys them by TaskKind.
#pragma once

#include <memory>

#include "app/direct_quant.hpp"
#include "app/task_flow.hpp"

namespace evalrun {

std::unique_ptr<TaskFlow> make_qa_flow();  // qa_flow.cpp
CalibrationSet qa_calibration(const RunSpec& spec);
std::unique_ptr<TaskFlow> make_mlm_flow();  // mlm_flow.cpp
CalibrationSet mlm_calibration(const RunSpec& spec);
std::unique_ptr<TaskFlow> make_generate_flow();  // generate_flow.cpp
CalibrationSet generate_calibration(const RunSpec& spec);
std::unique_ptr<TaskFlow> make_perplexity_flow();  // perplexity_flow.cpp
CalibrationSet perplexity_calibration(const RunSpec& spec);
std::unique_ptr<TaskFlow> make_loglikelihood_flow();  // loglikelihood_flow.cpp
CalibrationSet loglikelihood_calibration(const RunSpec& spec);
std::unique_ptr<TaskFlow> make_multiple_choice_flow();  // multiple_choice_flow.cpp
CalibrationSet multiple_choice_calibration(const RunSpec& spec);
std::unique_ptr<TaskFlow> make_generate_until_flow();  // generate_until_flow.cpp
CalibrationSet generate_until_calibration(const RunSpec& spec);

// The calibration inputs of a run's task (rank 0; empty when the settings need none).
CalibrationSet task_calibration(const RunSpec& spec);

}  // namespace evalrun
