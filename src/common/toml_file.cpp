#include "common/toml_file.hpp"

#include <filesystem>
#include <sstream>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"

namespace evalrun {

toml::value read_toml_file(const std::string& path, const char* what) {
  refuse_directory(path);
  if (!std::filesystem::is_regular_file(path)) throw InputError(path, std::string(what) + " not found");
  const std::string text = read_file(path);
  check_toml_limits(text, path);  // before toml11 sees it: UTF-8, size, nesting
  std::istringstream in(text);
  try {
    return toml::parse(in, kTomlFileSource);
  } catch (const toml::syntax_error& e) {
    const std::string first = e.what();
    throw InputError(path + ":" + std::to_string(e.location().line()),
                     "TOML syntax error: " + clip_text(first.substr(0, first.find('\n'))));
  } catch (const std::exception& e) {
    const std::string first = e.what();
    throw InputError(path, "cannot parse TOML: " + clip_text(first.substr(0, first.find('\n'))));
  }
}

}  // namespace evalrun
