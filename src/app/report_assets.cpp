#include "app/report_assets.hpp"

#include <cstdlib>
#include <filesystem>

#include "common/errors.hpp"
#include "common/text.hpp"

namespace evalrun {

std::string load_plotly_js(const std::string& option) {
  const char* env = std::getenv("EVALRUN_PLOTLY_JS");
  const std::string path = env != nullptr && *env != '\0' ? std::string(env) : std::string(EVALRUN_PLOTLY_JS_DEFAULT);
  if (!std::filesystem::is_regular_file(path)) {
    throw InputError(option, "the plotting library is missing: " + path +
                                 " not found (run scripts/setup.sh, which installs it with npm ci in tools/report, "
                                 "or point EVALRUN_PLOTLY_JS at a plotly.min.js)");
  }
  return read_file(path);
}

}  // namespace evalrun
