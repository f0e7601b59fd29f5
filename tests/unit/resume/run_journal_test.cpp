// The run journal (resume/run_journal.hpp): which config changes block a resume and how they are
// named, what a journal directory left by an interrupted run gives back, and when a record is durable.
#include "resume/run_journal.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "common/errors.hpp"
#include "config/config.hpp"
#include "io/journal.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;

namespace {

constexpr std::uint64_t kItems = 100;  // work items of the runs these tests journal
// A task whose every record fits (the flows' own checks are tested with real runs in tests/mpi).
void any_record(std::uint64_t, const std::string&) {}

#define EXPECT_HAS(text, part)                               \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "message: " << (text) << "\n   lacks: " << (part)

const std::string kGenerate =
    "[run]\nname = \"g\"\n[model]\npath = \"models/m\"\n[task]\nkind = \"generate\"\ndataset = \"p.jsonl\"\n"
    "max_new_tokens = 4\n";

RunFingerprint fingerprint_of(const std::vector<std::string>& overrides, const std::string& model = "m1",
                              const std::string& inputs = "i1") {
  return run_fingerprint(parse_run_spec(kGenerate, "g.toml", overrides), model, inputs);
}

TEST(RunFingerprint, ConfigEntriesAreTheKeysSetWithTheirValues) {
  const RunSpec spec = parse_run_spec(kGenerate, "g.toml", {"task.batch_size=3", "output.logits=topk"});
  const auto e = config_entries(spec.config_text);
  EXPECT_EQ(e.at("task.kind"), "\"generate\"");
  EXPECT_EQ(e.at("task.max_new_tokens"), "4");
  EXPECT_EQ(e.at("task.batch_size"), "3");
  EXPECT_EQ(e.at("output.logits"), "\"topk\"");
  EXPECT_EQ(e.at("model.path"), "\"models/m\"");
  EXPECT_EQ(e.count("task.max_prompt_length"), 0u);  // not set
}

TEST(RunFingerprint, ThreadsBatchSizeAndTensorParallelMayChange) {
  const auto then = fingerprint_of({"task.batch_size=2", "run.threads=1"});
  const auto now = fingerprint_of({"task.batch_size=16", "run.threads=4", "parallel.tensor_parallel=2"});
  EXPECT_TRUE(fingerprint_changes(then, now).empty());
  EXPECT_EQ(then.config.count("task.batch_size"), 0u);
}

TEST(RunFingerprint, EveryOtherChangeIsNamed) {
  const auto then = fingerprint_of({});
  auto changes = fingerprint_changes(then, fingerprint_of({"task.max_new_tokens=8"}));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0], "task.max_new_tokens = 8 (was 4)");
  // Set now, not before; even to its default value (the journal cannot know what a default was then).
  changes = fingerprint_changes(then, fingerprint_of({"task.max_prompt_length=0"}));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0], "task.max_prompt_length = 0 (was not set)");
  changes = fingerprint_changes(fingerprint_of({"output.logits=none"}), then);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0], "output.logits not set (was \"none\")");
  // Model and inputs, with the config unchanged.
  changes = fingerprint_changes(then, fingerprint_of({}, "m2", "i1"));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_HAS(changes[0], "the model's config.json or weights");
  changes = fingerprint_changes(then, fingerprint_of({}, "m1", "i2"));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_HAS(changes[0], "data set, tokenizer or preprocessing");
  EXPECT_EQ(fingerprint_changes(then, fingerprint_of({"model.dtype=bf16"}, "m2", "i2")).size(), 3u);
}

class RunJournalDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = evalrun::testing::make_temp_dir("evalrun-runjournal");
    out_ = (dir_ / "out.h5").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A fresh run that journals `items` for each rank, then "dies" (the journal is left behind).
  std::string interrupted_run(const RunFingerprint& f, const std::vector<FinishedItems>& per_rank) {
    RunJournal j(out_, /*resume=*/false);
    EXPECT_FALSE(j.resuming());
    j.check(f, kItems, any_record);
    j.start();
    for (std::size_t r = 0; r < per_rank.size(); ++r) {
      JournalAppender a(out_, j.run_id(), static_cast<int>(r));
      a.add(per_rank[r]);
      a.close();
    }
    return j.run_id();
  }

  fs::path dir_;
  std::string out_;
};

TEST_F(RunJournalDir, ResumeGetsEveryRanksItemsAndRefusesAChangedRun) {
  const auto f = fingerprint_of({});
  const std::string id = interrupted_run(f, {{{0, "a"}, {3, "d"}}, {{1, "b"}}});
  EXPECT_TRUE(fs::exists(RunJournal::dir_for(out_) + "/fingerprint.json"));

  // Without --resume: refused, naming the directory and the way out.
  try {
    RunJournal j(out_, false);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), RunJournal::dir_for(out_));
    EXPECT_HAS(e.what(), "3 finished work items");
    EXPECT_HAS(e.what(), "--resume");
  }

  RunJournal j(out_, true);
  ASSERT_TRUE(j.resuming());
  EXPECT_EQ(j.run_id(), id);
  EXPECT_EQ(j.finished(), (std::map<std::uint64_t, std::string>{{0, "a"}, {1, "b"}, {3, "d"}}));
  EXPECT_EQ(j.finished_indices(), (std::set<std::uint64_t>{0, 1, 3}));
  try {
    j.check(fingerprint_of({"task.max_new_tokens=5"}), kItems, any_record);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), RunJournal::dir_for(out_) + "/fingerprint.json");
    EXPECT_HAS(e.what(), "task.max_new_tokens = 5 (was 4)");
  }
  j.check(fingerprint_of({"task.batch_size=7"}), kItems, any_record);  // allowed
  j.start();                                        // resuming: keeps the directory and its files
  EXPECT_EQ(RunJournal(out_, true).finished().size(), 3u);
  j.remove();
  EXPECT_FALSE(fs::exists(RunJournal::dir_for(out_)));
}

TEST_F(RunJournalDir, AResumedRunAppendsAndOnlyItsOwnRunsFilesCount) {
  const std::string id = interrupted_run(fingerprint_of({}), {{{0, "a"}}});
  {
    // The resumed run, on 3 ranks, finishes more and is interrupted again.
    RunJournal j(out_, true);
    j.check(fingerprint_of({}), kItems, any_record);
    j.start();
    JournalAppender(out_, id, 0).add({{5, "f"}});
    JournalAppender(out_, id, 2).add({{6, "g"}});
  }
  // A file of another run in the same directory (e.g. left on a node-local disk) is not read.
  JournalAppender(out_, "0123456789abcdef", 1).add({{7, "stale"}});
  // A torn last record (a rank killed mid-write) is dropped.
  std::ofstream(RunJournal::rank_file(out_, id, 2), std::ios::binary | std::ios::app) << std::string("\x08\0\0", 3);
  RunJournal j(out_, true);
  EXPECT_EQ(j.finished(), (std::map<std::uint64_t, std::string>{{0, "a"}, {5, "f"}, {6, "g"}}));
}

TEST_F(RunJournalDir, NothingToResumeIsAFreshRun) {
  {
    RunJournal j(out_, true);  // no journal at all
    EXPECT_FALSE(j.resuming());
    EXPECT_TRUE(j.finished().empty());
  }
  // A run that stopped before any item was finished: no refusal without --resume, and start()
  // replaces it with a new run id.
  const std::string old_id = interrupted_run(fingerprint_of({"task.max_new_tokens=9"}), {{}});
  RunJournal j(out_, false);
  EXPECT_FALSE(j.resuming());
  j.check(fingerprint_of({}), kItems, any_record);
  j.start();
  EXPECT_NE(j.run_id(), old_id);
  EXPECT_FALSE(fs::exists(RunJournal::rank_file(out_, old_id, 0)));
}

TEST_F(RunJournalDir, DamagedFingerprintIsAnInputErrorNamingIt) {
  fs::create_directories(RunJournal::dir_for(out_));
  const std::string fp = RunJournal::dir_for(out_) + "/fingerprint.json";
  std::ofstream(fp) << "{\"format\": 1, \"run_id\": ";
  try {
    RunJournal j(out_, true);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), fp);
    EXPECT_HAS(e.what(), "remove the directory");
  }
}

TEST_F(RunJournalDir, AnOutputPathThatCannotHoldADirectoryIsAnInputError) {
  std::ofstream(dir_ / "file") << "x";
  const std::string out = (dir_ / "file" / "out.h5").string();
  RunJournal j(out, true);
  EXPECT_FALSE(j.resuming());
  j.check(fingerprint_of({}), kItems, any_record);
  EXPECT_THROW(j.start(), InputError);
  EXPECT_THROW(JournalAppender(out, "00000000000000aa", 1), InputError);
}

TEST_F(RunJournalDir, TheFirstBatchIsOnDiskAtOnceLaterOnesAfterTheSyncIntervalOrAtClose) {
  fs::create_directories(RunJournal::dir_for(out_));
  const std::string file = RunJournal::rank_file(out_, "00000000000000aa", 0);
  {
    JournalAppender slow(out_, "00000000000000aa", 0, std::chrono::hours(1));
    slow.add({{1, "x"}});
    EXPECT_EQ(read_journal(file).items.size(), 1u);  // the first batch at once
    slow.add({{2, "y"}});
    EXPECT_EQ(read_journal(file).items.size(), 1u);  // the next one waits for the interval
    slow.close();
    EXPECT_EQ(read_journal(file).items.size(), 2u);
  }
  JournalAppender every(out_, "00000000000000aa", 0, std::chrono::milliseconds(0));
  every.add({{3, "z"}});
  every.add({{4, "w"}});
  EXPECT_EQ(read_journal(file).items.size(), 4u);  // each batch written and synced with it
}

TEST_F(RunJournalDir, ARecordWithAnIndexOutsideTheRunIsNamedWhenTheJournalIsRead) {
  const std::string id = interrupted_run(fingerprint_of({}), {{{0, "a"}, {kItems + 5, "hostile"}}});
  RunJournal j(out_, true);
  try {
    j.check(fingerprint_of({}), kItems, any_record);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), RunJournal::rank_file(out_, id, 0));
    EXPECT_HAS(e.what(), "record at byte 25");  // magic (4) + the first record (16 + 1 + 4)
    EXPECT_HAS(e.what(), "work item index 105 is out of range: the run has 100 work items");
  }
}

TEST_F(RunJournalDir, ARecordTheTaskCannotReadIsNamedWhenTheJournalIsRead) {
  const std::string id = interrupted_run(fingerprint_of({}), {{{0, "a"}, {1, "bad"}}});
  RunJournal j(out_, true);
  const auto refuse_bad = [](std::uint64_t, const std::string& payload) {
    if (payload == "bad") throw std::runtime_error("cut short");
  };
  try {
    j.check(fingerprint_of({}), kItems, refuse_bad);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), RunJournal::rank_file(out_, id, 0));
    EXPECT_HAS(e.what(), "record at byte 25");
    EXPECT_HAS(e.what(), "work item 1: the payload is not this task's result record (cut short)");
  }
}

TEST_F(RunJournalDir, ARepeatedIndexWithAnotherResultIsADamagedJournal) {
  fs::create_directories(RunJournal::dir_for(out_));
  const std::string file = RunJournal::rank_file(out_, "00000000000000aa", 0);
  {
    JournalWriter w(file);
    w.add(3, "first");
    w.add(4, "x");
    w.add(3, "other");
    w.flush();
  }
  try {
    read_journal(file);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), file);
    EXPECT_HAS(e.what(), "record #3 at byte 50: work item 3 again, with another result than the record at byte 4");
  }
  // The same result twice is harmless (the work is deterministic).
  {
    JournalWriter w(file + "2");
    w.add(3, "same");
    w.add(3, "same");
    w.flush();
  }
  EXPECT_EQ(read_journal(file + "2").items.size(), 1u);
}

TEST_F(RunJournalDir, ANonDirectoryAtTheJournalPathIsRefusedAndKept) {
  const std::string path = RunJournal::dir_for(out_);
  std::ofstream(path) << "my notes";
  for (bool resume : {false, true}) {
    try {
      RunJournal j(out_, resume);
      FAIL() << "no error";
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), path);
      EXPECT_HAS(e.what(), "exists and is not a directory");
    }
  }
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "my notes");
}

TEST_F(RunJournalDir, OnlyTheFilesEvalrunWroteAreRemoved) {
  const std::string dir = RunJournal::dir_for(out_);
  const std::string id = interrupted_run(fingerprint_of({"task.max_new_tokens=9"}), {{}});  // nothing finished
  std::ofstream(fs::path(dir) / "notes.txt") << "mine";
  fs::create_directories(fs::path(dir) / "sub");
  std::ofstream(fs::path(dir) / "0123.rank0.evj") << "not a run id of ours";
  // A fresh run replaces the journal's own files only.
  RunJournal j(out_, false);
  j.check(fingerprint_of({}), kItems, any_record);
  j.start();
  EXPECT_FALSE(fs::exists(RunJournal::rank_file(out_, id, 0)));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "fingerprint.json"));
  JournalAppender(out_, j.run_id(), 0).add({{1, "b"}});
  std::ofstream(RunJournal::kept_rows_file(out_, j.run_id(), 12)) << "a rank's kept rows, left by a failed run";
  std::ofstream(fs::path(dir) / (j.run_id() + ".rank1.rowsx")) << "not ours";
  // At the end: evalrun's files go, the others stay with the directory.
  j.remove();
  EXPECT_FALSE(fs::exists(fs::path(dir) / "fingerprint.json"));
  EXPECT_FALSE(fs::exists(RunJournal::rank_file(out_, j.run_id(), 0)));
  EXPECT_FALSE(fs::exists(RunJournal::kept_rows_file(out_, j.run_id(), 12)));
  EXPECT_TRUE(fs::exists(fs::path(dir) / (j.run_id() + ".rank1.rowsx")));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "notes.txt"));
  EXPECT_TRUE(fs::is_directory(fs::path(dir) / "sub"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "0123.rank0.evj"));
}

}  // namespace
