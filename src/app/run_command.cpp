#include "app/run_command.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "app/result_file.hpp"
#include "app/task_flow.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "model/roberta.hpp"
#include "resume/run_journal.hpp"

namespace evalrun {
namespace {

// Threads per rank: run.threads, else Slurm's --cpus-per-task (SLURM_CPUS_PER_TASK) inside a Slurm job,
// else the node's cores shared among the ranks on the node; never more than the cores this rank may
// run on (mpirun binds a rank to one core unless --bind-to none).
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

}  // namespace

int run_command(const MpiWorld& world, const RunSpec& spec, bool resume) {
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

  // 1. rank 0 reads and tokenizes the data set and splits the work, leaving out what the journal of
  // an interrupted run holds when resuming (and refusing to if the run changed since).
  PreparedWork work;
  std::optional<RunJournal> journal;  // rank 0
  world.collective_step([&] {
    if (!world.is_root()) return;
    auto t0 = Clock::now();
    journal.emplace(spec.output.path, resume);
    work = flow->prepare(spec, world.size(), journal->finished_indices());
    prov.model_sha256 = checkpoint_sha256(spec.model.path);
    journal->check(run_fingerprint(spec, prov.model_sha256, work.inputs_sha256));
    times.prepare = seconds_since(t0);
    times.resumed_items = journal->finished().size();
    log().info("prepared {} samples -> {} work items in {:.2f} s", work.samples, work.items, times.prepare);
    if (journal->resuming()) {
      log().info("resuming: {} work items done before, {} to run", times.resumed_items, work.items - times.resumed_items);
    }
  });
  const std::string shard = world.scatter(work.shards);
  world.broadcast(work.shared);
  work.shards.clear();

  // 2. every rank loads the model and checks it fits the task and its shard.
  world.collective_step([&] {
    auto t0 = Clock::now();
    flow->load(spec, shard, work.shared, prov);
    times.load = seconds_since(t0);
    if (world.is_root()) journal->start();  // before any rank finishes an item
  });
  work.shared.clear();
  std::string run_id = world.is_root() ? journal->run_id() : std::string();
  world.broadcast(run_id);

  // 3. every rank runs its shard, journaling each finished batch; rank 0 gathers.
  std::string mine;
  world.collective_step([&] {
    auto t0 = Clock::now();
    JournalAppender appender(spec.output.path, run_id, world.rank());
    mine = flow->run(spec, world.is_root(), [&](const FinishedItems& items) { appender.add(items); });
    appender.close();
    times.inference = seconds_since(t0);
  });
  auto gathered = world.gather(mine);
  mine.clear();
  // wall time of the slowest rank, as the job sees it
  for (const auto& s : world.gather(std::to_string(times.inference))) {
    times.inference = std::max(times.inference, std::stod(s));
  }

  // 4. rank 0 post-processes and writes the file; the journal has served its purpose then.
  world.collective_step([&] {
    if (!world.is_root()) return;
    if (journal->resuming()) gathered.push_back(records_buffer(journal->take_finished()));
    flow->finish(spec, gathered, times, prov);
    log().info("wrote {}", spec.output.path);
    journal->remove();
  });
  return kExitOk;
}

}  // namespace evalrun
