#include "app/run_command.hpp"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "app/result_file.hpp"
#include "app/task_flow.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "device/backend.hpp"
#include "dist/stall_watchdog.hpp"
#include "io/text_file.hpp"
#include "model/roberta.hpp"
#include "resume/run_journal.hpp"

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

namespace {

namespace fs = std::filesystem;

// rank 0, before any rank runs: the run's rows file in the journal directory with the row datasets of
// `plan` laid out, or, resuming, the interrupted run's, which holds the rows of the items its journal
// records (they carry none themselves).
RowsLayout rows_file_before_run(const RunSpec& spec, const RunJournal& journal, const RowsPlan& plan) {
  const std::string path = journal.rows_file();
  if (journal.resuming() && !journal.finished().empty()) {
    if (!fs::exists(path)) {
      throw InputError(path, "the rows of the " + std::to_string(journal.finished().size()) +
                                 " work items the interrupted run finished were written here, and the file is gone: "
                                 "remove " + journal.dir() + " to run everything again");
    }
    H5Writer file = H5Writer::reopen(spec.output.path, path, plan.paths());
    RowsLayout layout = RowsLayout::existing(file, plan);
    file.close();
    return layout;
  }
  H5Writer file(spec.output.path, path);
  file.keep_on_failure();  // a failed run leaves it for --resume (the journal's records need it)
  RowsLayout layout = RowsLayout::lay_out(file, plan);
  file.close();
  sync_file(path, "the rows file of " + spec.output.path);  // the layout is on disk before any row
  return layout;
}

}  // namespace

int run_command(const MpiWorld& world, const RunSpec& spec, bool resume) {
  RunTimes times;
  Provenance prov;
  prov.start_time = utc_now_iso8601();
  prov.world_size = world.size();
  // Ranks r*tp .. r*tp + tp-1 form tensor-parallel group r (neighbours, so a group shares a node
  // when ranks are placed by node); each group is one data-parallel replica.
  const int tp = spec.parallel.tensor_parallel;
  if (world.size() % tp != 0) {
    throw InputError(spec.config_path, "parallel.tensor_parallel = " + std::to_string(tp) + " but the job has " +
                                           std::to_string(world.size()) +
                                           " rank(s): the number of ranks must be a multiple of it");
  }
  const int dp = world.size() / tp, tp_rank = world.rank() % tp, replica = world.rank() / tp;
  // From here on a rank that stops answering ends the job (exit 1) instead of hanging it.
  StallWatchdog watchdog(world, spec.run.stall_timeout,
                         "the journal " + RunJournal::dir_for(spec.output.path) +
                             " keeps the finished work items: run again with --resume");
  const int threads = choose_threads(spec, world);
  set_compute_threads(threads);
  prov.threads_per_rank = threads;
  log().info("run '{}': task {}, {} rank(s) = {} replica(s) x {} tensor-parallel, {} thread(s) each, dtype {}, model {}",
             spec.run.name, to_string(spec.task.kind), world.size(), dp, tp, threads, to_string(spec.model.dtype),
             spec.model.path);
  std::unique_ptr<TaskFlow> flow = make_flow(spec.task.kind);
  // The device each rank runs on (environment, plugin session, GPU), before any data is read.
  std::shared_ptr<device::Backend> backend;
  world.collective_step([&] { backend = device::open_backend(spec, rank_place(world)); });
  flow->set_backend(backend);
  prov.device = backend->device();
  std::unique_ptr<Communicator> group;
  if (tp > 1) group = world.split(replica, tp_rank);

  // 1. rank 0 reads and tokenizes the data set and splits the work, one shard per replica, leaving
  // out what the journal of an interrupted run holds when resuming (and refusing to if the run
  // changed since).
  PreparedWork work;
  std::vector<std::string> per_rank;
  std::optional<RunJournal> journal;  // rank 0
  world.collective_step([&] {
    if (!world.is_root()) return;
    auto t0 = Clock::now();
    journal.emplace(spec.output.path, resume);
    work = flow->prepare(spec, dp, journal->finished_indices());
    prov.model_sha256 = checkpoint_sha256(spec.model.path);
    journal->check(run_fingerprint(spec, prov.model_sha256, work.inputs_sha256), work.items,
                   [&](std::uint64_t index, const std::string& payload) { flow->check_record(index, payload); });
    times.prepare = seconds_since(t0);
    times.resumed_items = journal->finished().size();
    log().info("prepared {} samples -> {} work items in {:.2f} s", work.samples, work.items, times.prepare);
    if (journal->resuming()) {
      log().info("resuming: {} work items done before, {} to run", times.resumed_items, work.items - times.resumed_items);
    }
    for (int r = 0; r < world.size(); ++r) per_rank.push_back(work.shards[static_cast<std::size_t>(r / tp)]);
  });
  const std::string shard = world.scatter(per_rank);
  world.broadcast(work.shared);
  work.shards.clear();
  per_rank.clear();

  // 2. every rank loads the model (its part of it) and checks it fits the task and its shard; at
  // most parallel.concurrent_loads ranks at a time.
  const int wave_size = spec.parallel.concurrent_loads > 0 ? spec.parallel.concurrent_loads : world.size();
  const int waves = (world.size() + wave_size - 1) / wave_size;
  for (int wave = 0; wave < waves; ++wave) {
    world.collective_step([&] {
      if (world.rank() / wave_size != wave) return;
      auto t0 = Clock::now();
      flow->load(spec, shard, work.shared, prov, group.get());
      times.load = seconds_since(t0);
    });
  }
  // Before any rank finishes an item: the journal, and the row datasets when their sizes are known
  // now (io/rank_rows.hpp: the ranks then write their rows as they finish them).
  std::string rows_bytes;
  world.collective_step([&] {
    if (!world.is_root()) return;
    journal->start();
    const RowsPlan plan = flow->plan_rows(spec);
    if (!plan.empty()) rows_bytes = rows_file_before_run(spec, *journal, plan).to_bytes();
  });
  work.shared.clear();
  std::string run_id = world.is_root() ? journal->run_id() : std::string();
  world.broadcast(run_id);
  world.broadcast(rows_bytes);
  if (!rows_bytes.empty()) flow->set_rows_before_run(RowsLayout::from_bytes(rows_bytes));

  // 3. every rank runs its shard; the first rank of each group journals each finished batch and
  // returns the group's results (the other ranks of a group compute the same items); rank 0 gathers.
  // A rank that fails inside a group's all-reduce leaves its partners waiting there, out of reach of
  // collective_step: with tensor parallelism a failure other than bad input (which every rank of a
  // group meets alike) ends the whole job at once; the journal keeps what was finished.
  std::string mine;
  world.collective_step([&] {
    auto t0 = Clock::now();
    RankRows& rows = flow->rank_rows();
    if (tp_rank != 0) {
      rows.drop_all();  // the group's first rank writes what the group computed
    } else if (!rows_bytes.empty()) {
      rows.write_as_added(RowsLayout::from_bytes(rows_bytes));
    } else {  // rows kept until the end wait on disk, not in memory
      rows.spill_to(RunJournal::kept_rows_file(spec.output.path, run_id, world.rank()));
    }
    std::optional<JournalAppender> appender;
    if (tp_rank == 0) appender.emplace(spec.output.path, run_id, world.rank());
    // Rows written as items finish: the rows' writer thread journals a batch once its rows are on
    // disk (so the rank computes on meanwhile, and a record on disk means its rows are).
    struct StopRows {  // a failed run: the writer thread ends before the appender it journals into
      RankRows& rows;
      ~StopRows() { rows.stop(); }
    } stop_rows{rows};
    auto sink = [&](const FinishedItems& items) {
      if (appender && rows.writes_as_added()) {
        rows.then([&appender, items] { appender->add(items); });  // records without rows: small
      } else if (appender) {
        appender->add(items);
      }
      watchdog.progress();
    };
    try {
      WatchedWork working(watchdog);  // waiting for the other ranks after it
      mine = flow->run(spec, world.is_root(), sink);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      if (tp == 1) throw;
      log().error("rank {}: {}", world.rank(), e.what());
      world.abort(kExitFailed);
    }
    rows.close();  // the last batches journaled
    if (appender) appender->close();
    if (tp_rank != 0) mine = no_results();  // the group's first rank returns what the group computed
    times.inference = seconds_since(t0);
    if (group) times.allreduce = group->allreduce_seconds();
    prov.peak_rss_bytes = peak_rss_bytes();
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
  // every rank's peak after its shard ran (and was sent): what a node must hold per rank
  for (const auto& s : world.gather(std::to_string(peak_rss_bytes()))) {
    prov.peak_rss_bytes_max = std::max<std::size_t>(prov.peak_rss_bytes_max, std::stoull(s));
  }

  // 4. rank 0 post-processes and writes the file, laying out its vocabulary-wide datasets; every rank
  // writes its own rows of those into it; rank 0 renames it into place, and the journal has served
  // its purpose then.
  std::optional<H5Writer> out;  // rank 0
  std::string layout_bytes;
  double rank0_seconds = 0, rows_seconds = 0;
  world.collective_step([&] {
    if (!world.is_root()) return;
    const auto t0 = Clock::now();
    if (journal->resuming()) gathered.push_back(records_buffer(journal->take_finished()));
    FinishedFile file = flow->finish(spec, gathered, times, prov);
    gathered.clear();
    if (file.out && !file.rows.empty()) file.out->close();
    layout_bytes = file.rows.to_bytes();
    if (file.out) out.emplace(std::move(*file.out));
    rank0_seconds = seconds_since(t0);
  });
  world.broadcast(layout_bytes);
  const RowsLayout layout = RowsLayout::from_bytes(layout_bytes);
  if (!layout.empty()) {
    world.collective_step([&] {
      flow->rank_rows().write(layout);
      flow->rank_rows().clear();
    });
  }
  // The longest any rank spent on its rows (waiting for its writer thread during the run, or writing
  // after it), and the longest a writer thread wrote meanwhile.
  double background_seconds = 0;
  for (const auto& s : world.gather(std::to_string(flow->rank_rows().write_seconds()))) {
    rows_seconds = std::max(rows_seconds, std::stod(s));
  }
  for (const auto& s : world.gather(std::to_string(flow->rank_rows().background_seconds()))) {
    background_seconds = std::max(background_seconds, std::stod(s));
  }
  const bool direct_io = flow->rank_rows().direct_io();
  world.collective_step([&] {
    if (!world.is_root()) return;
    if (out) out->commit();
    log().info("wrote {}: rank 0's part in {:.2f} s, every rank's rows in {:.2f} s{}{}", spec.output.path, rank0_seconds,
               rows_seconds,
               rows_bytes.empty() ? "" : fmt::format(" (waiting for the writer threads, which wrote them in {:.2f} s during the run)", background_seconds),
               direct_io ? ", rank 0 by direct I/O" : "");
    journal->remove();
  });
  return kExitOk;
}

}  // namespace evalrun
