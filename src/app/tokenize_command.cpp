#include "app/tokenize_command.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "app/command_line.hpp"
#include "app/path_guard.hpp"
#include "common/errors.hpp"
#include "tokenizer/hf_tokenizer.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string str(const json& v, const std::string& where) {
  if (!v.is_string()) throw InputError(where, "expected a string, got " + v.dump());
  return v.get<std::string>();
}

// One input line -> (text, pair text): "text", ["a", "b"], {"text": ..., "text_pair": ...}.
std::pair<std::string, std::optional<std::string>> texts(const json& j, bool pair, const std::string& where) {
  if (j.is_string() && !pair) return {j.get<std::string>(), std::nullopt};
  if (j.is_array() && pair && j.size() == 2) return {str(j[0], where + "[0]"), str(j[1], where + "[1]")};
  if (j.is_object() && j.contains("text")) {
    std::optional<std::string> b;
    if (pair) {
      if (!j.contains("text_pair")) throw InputError(where, "--pair: expected \"text_pair\" beside \"text\"");
      b = str(j["text_pair"], where + ".text_pair");
    }
    return {str(j["text"], where + ".text"), b};
  }
  throw InputError(where, pair ? "expected [\"a\", \"b\"] or {\"text\": ..., \"text_pair\": ...}"
                               : "expected a JSON string or {\"text\": ...}");
}

std::vector<std::int64_t> ids_of(const json& j, const std::string& where) {
  const json& v = j.is_object() && j.contains("ids") ? j["ids"] : j;
  if (!v.is_array()) throw InputError(where, "expected a list of ids or {\"ids\": [...]}");
  std::vector<std::int64_t> ids;
  for (const auto& x : v) {
    if (!x.is_number_integer()) throw InputError(where, "expected integer ids, got " + x.dump());
    ids.push_back(x.get<std::int64_t>());
  }
  return ids;
}

}  // namespace

int tokenize_command(int argc, char** argv) {
  CLI::App app{"Tokenize (or --decode) JSON lines with a tokenizer directory's tokenizer.json", "evalrun tokenize"};
  std::string dir, input, out;
  bool pair = false, offsets = false, decode = false, no_special = false, keep_special = false;
  app.add_option("--tokenizer", dir, "directory holding tokenizer.json (and tokenizer_config.json)")->required();
  app.add_option("input", input,
                 "JSON lines, '-' for stdin: each a string or {\"text\": ...} ([\"a\", \"b\"] or "
                 "{\"text\", \"text_pair\"} with --pair; a list of ids or {\"ids\": [...]} with --decode)")
      ->required();
  app.add_option("--out", out, "write here instead of stdout");
  app.add_flag("--pair", pair, "each line is a pair of texts (type ids are printed too)");
  app.add_flag("--offsets", offsets, "also print each token's [start, end) in code points of its text");
  app.add_flag("--no-special-tokens", no_special, "encode without the post-processor's special tokens");
  app.add_flag("--decode", decode, "lines of ids -> {\"text\": ...} (special tokens skipped)");
  app.add_flag("--keep-special-tokens", keep_special, "with --decode: write special tokens too");
  if (auto stop = parse_command_line(app, argc, argv)) return *stop;

  const fs::path tj = fs::path(dir) / "tokenizer.json";
  PathGuard guard;
  guard.input("--tokenizer", tj.string());
  guard.input("--tokenizer", (fs::path(dir) / "tokenizer_config.json").string());
  if (input != "-") guard.input("input", input);
  if (!out.empty()) guard.output("--out", out);
  guard.check();
  if (!fs::exists(tj)) throw InputError(dir, "no tokenizer.json (evalrun tokenize reads tokenizer.json files)");
  const HfTokenizer tok = HfTokenizer::from_file(tj.string());

  std::ifstream file;
  if (input != "-") {
    file.open(input, std::ios::binary);
    if (!file) throw InputError(input, "cannot open");
  }
  std::istream& in = input == "-" ? std::cin : file;
  std::ofstream file_out;
  if (!out.empty()) {
    file_out.open(out, std::ios::binary | std::ios::trunc);
    if (!file_out) throw InputError(out, "cannot write");
  }
  std::ostream& os = out.empty() ? std::cout : file_out;
  const std::string name = input == "-" ? "<stdin>" : input;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    const std::string where = name + ":" + std::to_string(n);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception&) {
      throw InputError(where, "not a JSON value");
    }
    json row;
    if (decode) {
      row["text"] = tok.decode(ids_of(j, where), !keep_special);
    } else {
      const auto [a, b] = texts(j, pair, where);
      const HfEncoding e = b ? tok.encode_pair(a, *b, !no_special) : tok.encode(a, !no_special);
      row["ids"] = e.ids;
      if (pair) row["type_ids"] = e.type_ids;
      if (offsets) {
        json o = json::array();
        for (const auto& [s, t] : e.offsets) o.push_back({s, t});
        row["offsets"] = std::move(o);
      }
    }
    os << row.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  os.flush();
  if (!os) throw InputError(out.empty() ? "stdout" : out, "write failed");
  return kExitOk;
}

}  // namespace evalrun
