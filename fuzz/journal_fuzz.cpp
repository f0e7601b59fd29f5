// Fuzz target: the run journal (src/io/journal.hpp read_journal, src/resume/run_journal.hpp). A raw
// input is one rank's journal file; a container input ("@@ fingerprint.json", "@@ <id>.rank0.evj",
// ...) is a whole journal directory, read as `--resume` reads it and checked against a run of
// 1000 work items. What is accepted must be consistent: the valid prefix and the torn tail add up to
// the file, every record's offset lies inside it, and a writer reopening the file appends a record
// that reads back after the ones kept.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.hpp"
#include "io/journal.hpp"
#include "resume/run_journal.hpp"
#include "task/encoder_runner.hpp"

using namespace evalrun;

namespace {

void check_file(const std::string& path, std::size_t size) {
  JournalContents c;
  if (!fuzz::expect_clean([&] { c = read_journal(path); })) return;
  FUZZ_CHECK(c.good_bytes + c.torn_bytes == size);
  FUZZ_CHECK(c.items.size() == c.offsets.size());
  for (const auto& [index, offset] : c.offsets) FUZZ_CHECK(offset < c.good_bytes);
  const std::size_t kept = c.items.size();
  fuzz::expect_clean([&] {
    {
      JournalWriter w(path);  // cuts a torn tail, then appends
      w.add(1u << 31, "fuzz");
      w.flush();
    }
    const JournalContents again = read_journal(path);
    FUZZ_CHECK(again.torn_bytes == 0);
    FUZZ_CHECK(again.items.count(1u << 31) == 1 && again.items.at(1u << 31) == "fuzz");
    FUZZ_CHECK(again.items.size() >= kept);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto& scratch = fuzz::Scratch::get();
  scratch.reset();
  const auto sections = fuzz::split_sections(in);
  if (!sections.container) {
    check_file(scratch.write("0123456789abcdef.rank0.evj", in), size);
    return 0;
  }
  const std::string out = (scratch.dir() / "out.h5").string();
  std::filesystem::create_directories(RunJournal::dir_for(out));
  for (const auto& [name, body] : sections.files) {
    std::ofstream(std::filesystem::path(RunJournal::dir_for(out)) / name, std::ios::binary) << body;
  }
  fuzz::expect_clean([&] {
    RunJournal j(out, /*resume=*/true);
    // The resumed run is the interrupted one (its fingerprint as stored), so the records' checks run.
    RunFingerprint now;
    try {
      const auto fp = nlohmann::json::parse(sections.files.at("fingerprint.json"));
      now.model_sha256 = fp.at("model_sha256").get<std::string>();
      now.inputs_sha256 = fp.at("inputs_sha256").get<std::string>();
      now.config = fp.at("config").get<std::map<std::string, std::string>>();
    } catch (const std::exception&) {
      FUZZ_CHECK(!j.resuming());  // RunJournal read it, so it must parse
      return;
    }
    // Records are checked as a task would: parsed as a QA feature's result, every byte used.
    j.check(now, 1000, [](std::uint64_t, const std::string& payload) { (void)from_bytes<QaItemResult>(payload); });
    for (const auto& [index, record] : j.finished()) FUZZ_CHECK(index < 1000);
    j.remove();  // removes only its own files
  });
  return 0;
}
