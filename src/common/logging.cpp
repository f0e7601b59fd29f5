#include "common/logging.hpp"

#include <spdlog/sinks/stdout_sinks.h>

namespace evalrun {
namespace {
std::shared_ptr<spdlog::logger>& logger_slot() {
  static std::shared_ptr<spdlog::logger> logger;
  return logger;
}
}  // namespace

void init_logging(int rank, int world_size, bool verbose) {
  auto logger = std::make_shared<spdlog::logger>("evalrun", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("[%H:%M:%S evalrun r" + std::to_string(rank) + "/" + std::to_string(world_size) +
                      "] %^%l%$: %v");
  if (rank == 0) {
    logger->set_level(verbose ? spdlog::level::debug : spdlog::level::info);
  } else {
    logger->set_level(verbose ? spdlog::level::debug : spdlog::level::warn);
  }
  logger->flush_on(spdlog::level::info);
  logger_slot() = logger;
}

spdlog::logger& log() {
  auto& slot = logger_slot();
  if (!slot) init_logging(0, 1);
  return *slot;
}

const char* version() { return EVALRUN_VERSION; }
// git_revision() is generated at build time (cmake/git_revision.cmake).

}  // namespace evalrun
