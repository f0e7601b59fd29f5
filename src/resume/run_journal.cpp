#include "resume/run_journal.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/errors.hpp"
#include "common/logging.hpp"
#include "io/journal.hpp"
#include "io/text_file.hpp"

namespace evalrun {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFingerprintFile = "fingerprint.json";
constexpr const char* kRowsSuffix = ".rows.h5";
constexpr int kFingerprintFormat = 1;

std::string short_sha(const std::string& s) { return s.size() > 12 ? s.substr(0, 12) + "..." : s; }

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string json_of(const RunFingerprint& f, const std::string& run_id) {
  nlohmann::ordered_json j;
  j["format"] = kFingerprintFormat;
  j["run_id"] = run_id;
  j["model_sha256"] = f.model_sha256;
  j["inputs_sha256"] = f.inputs_sha256;
  j["config"] = f.config;
  return j.dump(2) + "\n";
}

RunFingerprint parse_fingerprint(const std::string& text, const std::string& where, std::string& run_id) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.at("format").get<int>() != kFingerprintFormat) {
      throw InputError(where, "journal format " + j.at("format").dump() + " is not the one this evalrun writes (" +
                                  std::to_string(kFingerprintFormat) + "); remove the directory to start over");
    }
    RunFingerprint f;
    run_id = j.at("run_id").get<std::string>();
    f.model_sha256 = j.at("model_sha256").get<std::string>();
    f.inputs_sha256 = j.at("inputs_sha256").get<std::string>();
    f.config = j.at("config").get<std::map<std::string, std::string>>();
    if (run_id.empty() || run_id.find_first_not_of("0123456789abcdef") != std::string::npos) {
      throw InputError(where, "bad run_id '" + run_id + "'");
    }
    return f;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where, std::string("not a readable journal fingerprint (") + e.what() +
                                "); remove the directory to start over");
  }
}

// Like the result file's own directory: a path that cannot be made is bad input (output.path); a full
// or read-only disk is a write error.
void make_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec) return;
  if (is_storage_errno(ec.value())) throw WriteError(dir, "the run journal directory", ec.message());
  throw InputError(dir, "cannot create the run journal directory: " + ec.message());
}

// The files evalrun writes into a journal directory: fingerprint.json (and its temporary names while
// it is written), <16 hex digits>.rank<R>.evj (journals), <16 hex digits>.rank<R>.rows (rows a rank
// keeps until the end) and <16 hex digits>.rows.h5. Nothing else there is ever removed.
bool written_by_evalrun(const std::string& name) {
  if (name == kFingerprintFile || name.rfind(std::string(kFingerprintFile) + ".tmp", 0) == 0) return true;
  if (name.size() == 16 + std::strlen(kRowsSuffix) && name.find_first_not_of("0123456789abcdef") == 16 &&
      name.compare(16, std::string::npos, kRowsSuffix) == 0)
    return true;
  const std::string rank = ".rank";
  if (name.find_first_not_of("0123456789abcdef") != 16 || name.compare(16, rank.size(), rank) != 0) return false;
  for (const std::string ext : {".evj", ".rows"}) {
    if (name.size() < 16 + rank.size() + 1 + ext.size()) continue;
    const std::string digits = name.substr(16 + rank.size(), name.size() - 16 - rank.size() - ext.size());
    if (name.compare(name.size() - ext.size(), ext.size(), ext) == 0 && !digits.empty() &&
        digits.find_first_not_of("0123456789") == std::string::npos)
      return true;
  }
  return false;
}

// Removes evalrun's files from `dir` and returns the names of the other entries left there.
std::vector<std::string> remove_own_files(const std::string& dir) {
  std::vector<std::string> others;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code type_ec;
    if (e.is_regular_file(type_ec) && !e.is_symlink(type_ec) && written_by_evalrun(name)) {
      fs::remove(e.path(), type_ec);
      if (type_ec) others.push_back(name + " (" + type_ec.message() + ")");
    } else {
      others.push_back(name);
    }
  }
  if (ec) others.push_back("(cannot list: " + ec.message() + ")");
  return others;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string new_run_id() {
  std::random_device rd;
  std::mt19937_64 g((static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
                    static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(g()));
  return buf;
}

}  // namespace

const std::vector<std::string>& resume_free_keys() {
  // run.threads and task.batch_size change how fast, not what; parallel.tensor_parallel splits the
  // same products differently (float rounding only) and parallel.concurrent_loads only orders the
  // loads; output.predictions_json is written at the end from all results; run.stall_timeout and
  // run.max_batch_bytes only guard the run (a run stopped by either may be resumed with another value).
  static const std::vector<std::string> keys = {"run.threads",          "task.batch_size",
                                                "parallel.tensor_parallel", "parallel.concurrent_loads",
                                                "output.predictions_json",  "run.stall_timeout",
                                                "run.max_batch_bytes"};
  return keys;
}

std::map<std::string, std::string> config_entries(const std::string& config_text) {
  // config_text is the loader's canonical form: "[section]" lines and "key = value" lines, one value
  // per line (config.cpp serialise()).
  std::map<std::string, std::string> out;
  std::istringstream in(config_text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    out[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

RunFingerprint run_fingerprint(const RunSpec& spec, std::string model_sha256, std::string inputs_sha256) {
  RunFingerprint f;
  f.config = config_entries(spec.config_text);
  for (const auto& k : resume_free_keys()) f.config.erase(k);
  f.model_sha256 = std::move(model_sha256);
  f.inputs_sha256 = std::move(inputs_sha256);
  return f;
}

std::vector<std::string> fingerprint_changes(const RunFingerprint& then, const RunFingerprint& now) {
  std::vector<std::string> out;
  std::set<std::string> keys;
  for (const auto& [k, v] : then.config) keys.insert(k);
  for (const auto& [k, v] : now.config) keys.insert(k);
  for (const auto& k : keys) {
    const auto a = then.config.find(k), b = now.config.find(k);
    const bool in_a = a != then.config.end(), in_b = b != now.config.end();
    if (in_a && in_b && a->second == b->second) continue;
    if (in_a && in_b) out.push_back(k + " = " + b->second + " (was " + a->second + ")");
    else if (in_b) out.push_back(k + " = " + b->second + " (was not set)");
    else out.push_back(k + " not set (was " + a->second + ")");
  }
  if (then.model_sha256 != now.model_sha256) {
    out.push_back("the model's config.json or weights (sha256 " + short_sha(now.model_sha256) + ", was " +
                  short_sha(then.model_sha256) + ")");
  }
  if (then.inputs_sha256 != now.inputs_sha256) {
    out.push_back("the prepared inputs: data set, tokenizer or preprocessing (sha256 " + short_sha(now.inputs_sha256) +
                  ", was " + short_sha(then.inputs_sha256) + ")");
  }
  return out;
}

// --- rank 0 -------------------------------------------------------------------------------------

RunJournal::RunJournal(const std::string& output_path, bool resume) : dir_(dir_for(output_path)) {
  std::error_code ec;
  const auto st = fs::status(dir_, ec);
  if (fs::exists(st) && !fs::is_directory(st)) {
    throw InputError(dir_, "exists and is not a directory: evalrun keeps the run journal of " + output_path +
                               " here; move it away or choose another output.path");
  }
  const fs::path fp = fs::path(dir_) / kFingerprintFile;
  if (!fs::exists(fp)) {
    // No journal, or one whose run stopped before any rank could write an item.
    if (resume) log().info("--resume: no journal at {}: nothing to resume, running everything", dir_);
    return;
  }
  RunFingerprint then = parse_fingerprint(read_text(fp), fp.string(), run_id_);
  const std::string prefix = run_id_ + ".rank";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.rfind(prefix, 0) == 0 && e.path().extension() == ".evj") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    JournalContents c = read_journal(f.string());
    if (c.torn_bytes > 0) log().info("journal {}: dropped a torn last record ({} bytes)", f.string(), c.torn_bytes);
    // An index in two files holds the same result twice (deterministic work); the first is kept.
    for (auto& [index, record] : c.items) {
      const auto [it, added] = finished_.emplace(index, std::move(record));
      if (added) origin_.emplace(index, f.string() + ": record at byte " + std::to_string(c.offsets[index]));
    }
  }
  if (!resume) {
    if (!finished_.empty()) {
      throw InputError(dir_, "an interrupted run of this output left " + std::to_string(finished_.size()) +
                                 " finished work items here: add --resume to continue it, or remove the directory "
                                 "to start over");
    }
    run_id_.clear();  // nothing done: start over
    return;
  }
  then_ = std::move(then);
  log().info("--resume: {} finished work items in {} ({} file(s))", finished_.size(), dir_, files.size());
}

std::set<std::uint64_t> RunJournal::finished_indices() const {
  std::set<std::uint64_t> s;
  for (const auto& [index, record] : finished_) s.insert(s.end(), index);
  return s;
}

void RunJournal::check(const RunFingerprint& now, std::uint64_t items, const RecordCheck& check_record) {
  if (then_) {
    const auto changes = fingerprint_changes(*then_, now);
    if (!changes.empty()) {
      std::string what;
      for (const auto& c : changes) what += (what.empty() ? "" : "; ") + c;
      throw InputError((fs::path(dir_) / kFingerprintFile).string(),
                       "cannot resume: the run changed since it was interrupted: " + what +
                           ". Run it as it was, or remove the directory to start over");
    }
  }
  // The same run: a record whose CRC holds but whose index or payload is not one of its work items'
  // (a hostile or hand-edited file) is named now rather than when the results are gathered.
  for (const auto& [index, payload] : finished_) {
    std::string problem;
    if (index >= items) {
      problem = "work item index " + std::to_string(index) + " is out of range: the run has " +
                std::to_string(items) + " work items";
    } else {
      try {
        check_record(index, payload);
      } catch (const std::exception& e) {
        problem = "work item " + std::to_string(index) + ": the payload is not this task's result record (" +
                  e.what() + ")";
      }
    }
    if (problem.empty()) continue;
    const std::string& at = origin_.at(index);
    const auto colon = at.find(": ");
    throw InputError(at.substr(0, colon), at.substr(colon + 2) + ": " + problem + "; remove the directory to start over");
  }
  now_ = now;
}

void RunJournal::start() {
  if (then_) return;  // resuming: directory and fingerprint are there
  if (!now_) throw std::logic_error("RunJournal::start before check");
  // A journal without finished items (the constructor refused any other) is replaced: its files go,
  // anything else a user put there stays.
  std::error_code ec;
  if (fs::is_directory(dir_, ec)) remove_own_files(dir_);
  make_dir(dir_);
  run_id_ = new_run_id();
  write_text_file((fs::path(dir_) / kFingerprintFile).string(), json_of(*now_, run_id_), "the run journal's fingerprint");
}

void RunJournal::remove() {
  const auto others = remove_own_files(dir_);
  std::error_code ec;
  if (others.empty()) fs::remove(dir_, ec);
  if (!others.empty() || ec) {
    log().warn("left the run journal directory {}: it holds what evalrun did not write there: {}", dir_,
               others.empty() ? ec.message() : joined(others));
  }
}

std::string RunJournal::rows_file() const {
  if (run_id_.empty()) throw std::logic_error("RunJournal::rows_file before start");
  return (fs::path(dir_) / (run_id_ + kRowsSuffix)).string();
}

std::string RunJournal::rank_file(const std::string& output_path, const std::string& run_id, int rank) {
  return (fs::path(dir_for(output_path)) / (run_id + ".rank" + std::to_string(rank) + ".evj")).string();
}

std::string RunJournal::kept_rows_file(const std::string& output_path, const std::string& run_id, int rank) {
  return (fs::path(dir_for(output_path)) / (run_id + ".rank" + std::to_string(rank) + ".rows")).string();
}

// --- every rank ---------------------------------------------------------------------------------

JournalAppender::JournalAppender(const std::string& output_path, const std::string& run_id, int rank,
                                 std::chrono::milliseconds sync_interval)
    : interval_(sync_interval) {
  // Rank 0 made the directory; on a filesystem this rank does not share with rank 0 it is made here.
  make_dir(RunJournal::dir_for(output_path));
  writer_ = std::make_unique<JournalWriter>(RunJournal::rank_file(output_path, run_id, rank));
}

JournalAppender::~JournalAppender() = default;

void JournalAppender::add(const FinishedItems& items) {
  for (const auto& [index, record] : items) writer_->add(index, record);
  const auto now = std::chrono::steady_clock::now();
  if (!last_sync_ || now - *last_sync_ >= interval_) {
    writer_->flush();
    last_sync_ = now;
  }
}

void JournalAppender::close() {
  writer_->flush();
}

}  // namespace evalrun
