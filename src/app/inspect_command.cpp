#include "app/inspect_command.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <string>

#include "app/command_line.hpp"
#include "common/errors.hpp"
#include "io/hdf5_file.hpp"
#include "io/hdf5_probe.hpp"

namespace evalrun {
namespace {

void print_attrs(const H5Reader& in, const std::string& object, const char* indent) {
  for (const auto& name : in.attr_names(object)) {
    if (name == "config") continue;  // printed separately, it is long
    std::string value;
    try {
      value = in.attr_string(object, name);
    } catch (const InputError&) {
      try {
        value = std::to_string(in.attr_int(object, name));
      } catch (const InputError&) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.6g", in.attr_double(object, name));
        value = buf;
      }
    }
    std::printf("%s%-26s %s\n", indent, name.c_str(), value.c_str());
  }
}

void print_tree(const H5Reader& in, const std::string& group, int depth) {
  for (const auto& name : in.children(group)) {
    const std::string path = (group == "/" ? "" : group) + "/" + name;
    bool is_group = true;
    std::vector<std::int64_t> shape;
    try {
      shape = in.shape(path);
      is_group = false;
    } catch (const InputError&) {
    }
    std::printf("  %*s%s", depth * 2, "", name.c_str());
    if (is_group) {
      std::printf("/\n");
      print_tree(in, path, depth + 1);
    } else {
      std::printf("  [");
      for (std::size_t i = 0; i < shape.size(); ++i) std::printf(i ? ", %lld" : "%lld", static_cast<long long>(shape[i]));
      std::printf("]\n");
    }
  }
}

}  // namespace

int inspect_command(int argc, char** argv) {
  CLI::App app{"Print a summary of an evalrun result file", "evalrun inspect"};
  std::string path;
  bool show_config = false;
  app.add_option("file", path, "result file (.h5)")->required();
  app.add_flag("--config", show_config, "also print the config the run used");
  if (auto stop = parse_command_line(app, argc, argv)) return *stop;
  probe_hdf5_file(path);  // a malformed file must not crash evalrun inside HDF5
  H5Reader in(path);
  if (!in.has_attr("/", "format_version")) throw InputError(path, "not an evalrun result file (no format_version)");
  std::printf("%s\n", path.c_str());
  print_attrs(in, "/", "  ");
  if (in.exists("/metrics")) {
    std::printf("metrics:\n");
    print_attrs(in, "/metrics", "  ");
  }
  if (in.exists("/timing")) {
    std::printf("timing:\n");
    print_attrs(in, "/timing", "  ");
  }
  std::printf("datasets:\n");
  print_tree(in, "/", 0);
  if (show_config) std::printf("config:\n%s\n", in.attr_string("/", "config").c_str());
  return 0;
}

}  // namespace evalrun
