#include "app/run_command.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "app/result_file.hpp"
#include "app/task_flow.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "device/backend.hpp"
#include "model/roberta.hpp"

namespace evalrun {

// SLURM_CPUS_PER_TASK inside a Slurm job; mpirun binds a rank to one core unless --bind-to none.
int choose_threads(const RunSpec& spec, const MpiWorld& world) {
  cpu_set_t set;
  int allowed = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = CPU_COUNT(&set);
  if (spec.run.threads > 0) {
    if (spec.run.threads > allowed) {
      log().warn("run.threads = {} but this rank may only use {} core(s); launch mpirun with --bind-to none",
                 spec.run.threads, allowed);
    }
    return spec.run.threads;
  }
  if (const char* slurm = std::getenv("SLURM_CPUS_PER_TASK"); slurm != nullptr && std::atoi(slurm) > 0) {
    return std::min(std::atoi(slurm), allowed);
  }
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int share = std::max(1, cores / std::max(1, world.local_size()));
  return std::max(1, std::min(share, allowed));
}

device::RankPlace rank_place(const MpiWorld& world) {
  return {world.rank(), world.size(), device::resolve_local_rank(device::process_env(), world.local_rank()),
          world.local_size()};
}

int run_command(const MpiWorld& world, const RunSpec& spec) {
  RunTimes times;
  Provenance prov;
  prov.start_time = utc_now_iso8601();
  prov.world_size = world.size();
  if (spec.parallel.tensor_parallel != 1) {
    throw InputError(spec.config_path, "parallel.tensor_parallel = " + std::to_string(spec.parallel.tensor_parallel) +
                                           ": tensor parallelism is not implemented yet (use 1)");
  }
  const int threads = choose_threads(spec, world);
  set_compute_threads(threads);
  prov.threads_per_rank = threads;
  log().info("run '{}': task {}, {} rank(s) x {} thread(s), dtype {}, model {}", spec.run.name,
             to_string(spec.task.kind), world.size(), threads, to_string(spec.model.dtype), spec.model.path);
  const bool encoder = spec.task.kind == TaskKind::qa || spec.task.kind == TaskKind::mlm;
  std::unique_ptr<TaskFlow> flow = encoder ? make_encoder_flow() : make_decoder_flow();
  // The device each rank runs on (environment, plugin session, GPU), before any data is read.
  std::shared_ptr<device::Backend> backend;
  world.collective_step([&] { backend = device::open_backend(spec, rank_place(world)); });
  flow->set_backend(backend);
  prov.device = backend->device();

  // 1. rank 0 reads and tokenizes the data set and splits the work.
  PreparedWork work;
  world.collective_step([&] {
    if (!world.is_root()) return;
    auto t0 = Clock::now();
    work = flow->prepare(spec, world.size());
    times.prepare = seconds_since(t0);
    log().info("prepared {} samples -> {} work items in {:.2f} s", work.samples, work.items, times.prepare);
  });
  const std::string shard = world.scatter(work.shards);
  world.broadcast(work.shared);
  work.shards.clear();

  // 2. every rank loads the model and checks it fits the task and its shard.
  world.collective_step([&] {
    auto t0 = Clock::now();
    flow->load(spec, shard, work.shared, prov);
    times.load = seconds_since(t0);
    if (world.is_root()) prov.model_sha256 = checkpoint_sha256(spec.model.path);
  });
  work.shared.clear();

  // 3. every rank runs its shard; rank 0 gathers.
  std::string mine;
  world.collective_step([&] {
    auto t0 = Clock::now();
    mine = flow->run(spec, world.is_root());
    times.inference = seconds_since(t0);
  });
  auto gathered = world.gather(mine);
  mine.clear();
  const std::string usage = backend->usage();
  prov.device_detail = backend->describe() + (usage.empty() ? "" : "; " + usage);
  if (!usage.empty()) log().info("{}: {}", backend->device(), usage);
  // wall time of the slowest rank, as the job sees it
  for (const auto& s : world.gather(std::to_string(times.inference))) {
    times.inference = std::max(times.inference, std::stod(s));
  }

  // 4. rank 0 post-processes and writes the file.
  world.collective_step([&] {
    if (!world.is_root()) return;
    flow->finish(spec, gathered, times, prov);
    log().info("wrote {}", spec.output.path);
  });
  return kExitOk;
}

}  // namespace evalrun
