#include "app/dry_run.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "app/run_command.hpp"
#include "common/errors.hpp"
#include "device/backend.hpp"
#include "dist/serialize.hpp"
#include "task/registry.hpp"

namespace evalrun {
namespace {

std::string hostname() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return host;
}

// One rank's part of the printout, and how many problems it found.
std::pair<std::string, int> describe_rank(const MpiWorld& world, const RunSpec& spec) {
  std::vector<device::Problem> problems;
  device::RankPlace place;
  std::string text;
  try {
    place = rank_place(world);
  } catch (const InputError& e) {
    problems.push_back({e.where(), e.detail()});
    place = {world.rank(), world.size(), world.local_rank(), world.local_size()};
  }
  const device::RankPlan plan = device::plan_rank(spec, place, device::process_env(), true);
  problems.insert(problems.end(), plan.problems.begin(), plan.problems.end());
  auto line = [&](const char* label, const std::string& value) {
    char head[32];
    std::snprintf(head, sizeof head, "  %-9s ", label);
    text += head + value + "\n";
  };
  text += "rank " + std::to_string(place.rank) + " of " + std::to_string(place.world_size) + " on " + hostname() +
          " (local rank " + std::to_string(place.local_rank) + " of " + std::to_string(place.local_size) +
          "): " + std::to_string(choose_threads(spec, world)) + " thread(s), device " + plan.device + "\n";
  line("compute", plan.compute);
  if (spec.model.device == Device::aiu) {
    if (!plan.card.empty()) line("card", plan.card);
    if (!plan.plugin.empty()) {
      line("plugin", plan.plugin + " (" + plan.plugin_from + ")" +
                         (plan.plugin_identity.empty() ? "" : ": " + plan.plugin_identity));
    }
    line("compile", spec.aiu.compile_dynamic + " inputs (aiu.compile_dynamic)");
    for (const auto& v : plan.env) {
      char name[64];
      std::snprintf(name, sizeof name, "%-34s", (v.name + "=" + v.value).c_str());
      line("env", std::string(name) + " " + (v.from_user ? "kept from the environment" : "set by evalrun") + " (" +
                      v.reason + ")");
    }
  }
  for (const auto& n : plan.notes) line("note", n);
  for (const auto& p : problems) line("PROBLEM", p.where + ": " + p.what);
  return {text, static_cast<int>(problems.size())};
}

}  // namespace

int dry_run_command(const MpiWorld& world, const RunSpec& spec) {
  auto [mine, problems] = describe_rank(world, spec);
  ByteWriter w;
  w.put<std::int64_t>(problems);
  w.put_string(mine);
  const auto all = world.gather(w.take());
  std::string verdict(1, '0');
  if (world.is_root()) {
    std::int64_t total = 0;
    std::string out = "evalrun --dry-run: " + spec.config_path + " (nothing read, loaded or run)\n";
    // Checks of the run as a whole.
    std::vector<std::string> whole;
    const int tp = spec.parallel.tensor_parallel;
    if (world.size() % tp != 0) {
      whole.push_back("parallel.tensor_parallel: " + std::to_string(tp) + " does not divide the world size " +
                      std::to_string(world.size()));
    }
    if (!std::filesystem::is_regular_file(std::filesystem::path(spec.model.path) / "config.json")) {
      whole.push_back("model.path: '" + spec.model.path + "' has no config.json");
    }
    out += "run       " + spec.run.name + ": task " + to_string(spec.task.kind) +
           " (" + to_string(task_info(spec.task.kind).role) + ")" + ", model " + spec.model.path +
           ", dtype " + to_string(spec.model.dtype) + "\n";
    out += "layout    world " + std::to_string(world.size()) + " = " + std::to_string(world.size() / tp) +
           " data-parallel x " + std::to_string(tp) + " tensor-parallel\n";
    out += "output    " + spec.output.path + "\n";
    for (const auto& p : whole) out += "  PROBLEM   " + p + "\n";
    total += static_cast<std::int64_t>(whole.size());
    for (const auto& bytes : all) {
      ByteReader r(bytes);
      total += r.get<std::int64_t>();
      out += r.get_string();
    }
    out += total == 0 ? "plan ok: " + std::to_string(world.size()) + " rank(s) ready\n"
                      : std::to_string(total) + " problem(s): the run would stop (exit 2)\n";
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    verdict = total == 0 ? "0" : "2";
  }
  world.broadcast(verdict);
  return verdict == "0" ? kExitOk : kExitBadInput;
}

}  // namespace evalrun
