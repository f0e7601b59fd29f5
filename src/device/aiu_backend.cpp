// model.device = "aiu": the projections run through a backend plugin (aiu_plugin.h) loaded with dlopen.
#include <dlfcn.h>

#include <cstddef>
#include <stdexcept>

#include "common/errors.hpp"
#include "task/registry.hpp"
#include "common/logging.hpp"
#include "device/aiu_plugin.h"
#include "device/backends.hpp"

namespace evalrun::device {
namespace {

const char* dtype_option(DType d) { return d == DType::fp16 ? "fp16" : d == DType::bf16 ? "bf16" : "fp32"; }

// An opened plugin library whose API table passed the checks; closed when the last user goes.
class Plugin {
 public:
  static std::shared_ptr<Plugin> open(const std::string& path, const std::string& where) {
    auto fail = [&](const std::string& what) { return InputError(where, "AIU plugin '" + path + "': " + what); };
    ::dlerror();
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = ::dlerror();
      throw fail(std::string("cannot be loaded: ") + (e != nullptr ? e : "dlopen failed"));
    }
    auto plugin = std::shared_ptr<Plugin>(new Plugin(handle, path));
    void* sym = ::dlsym(handle, EVALRUN_AIU_PLUGIN_ENTRY);
    if (sym == nullptr) {
      throw fail(std::string("has no symbol ") + EVALRUN_AIU_PLUGIN_ENTRY + ": not an evalrun AIU plugin");
    }
    auto entry = reinterpret_cast<evalrun_aiu_plugin_entry_fn>(sym);
    const evalrun_aiu_plugin_api* api = entry();
    if (api == nullptr) throw fail(std::string(EVALRUN_AIU_PLUGIN_ENTRY) + "() returned no API table");
    if (api->abi_version != EVALRUN_AIU_PLUGIN_ABI_VERSION) {
      throw fail("implements plugin ABI version " + std::to_string(api->abi_version) + ", this evalrun needs version " +
                 std::to_string(EVALRUN_AIU_PLUGIN_ABI_VERSION) + " (rebuild the plugin against src/device/aiu_plugin.h)");
    }
    if (api->struct_size < sizeof(evalrun_aiu_plugin_api)) {
      throw fail("its API table has " + std::to_string(api->struct_size) + " bytes, ABI version 1 has " +
                 std::to_string(sizeof(evalrun_aiu_plugin_api)));
    }
    const std::pair<const char*, const void*> members[] = {
        {"name", api->name},
        {"version", api->version},
        {"compute_dtype", reinterpret_cast<const void*>(api->compute_dtype)},
        {"init", reinterpret_cast<const void*>(api->init)},
        {"linear_create", reinterpret_cast<const void*>(api->linear_create)},
        {"linear_forward", reinterpret_cast<const void*>(api->linear_forward)},
        {"linear_destroy", reinterpret_cast<const void*>(api->linear_destroy)},
        {"report", reinterpret_cast<const void*>(api->report)},
        {"shutdown", reinterpret_cast<const void*>(api->shutdown)},
    };
    for (const auto& [name, value] : members)
      if (value == nullptr) throw fail(std::string("its API table has no ") + name);
    plugin->api_ = api;
    return plugin;
  }

  ~Plugin() { ::dlclose(handle_); }
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const evalrun_aiu_plugin_api& api() const { return *api_; }
  const std::string& path() const { return path_; }
  std::string identity() const {
    return std::string(api_->name) + " " + api_->version + ", ABI " + std::to_string(api_->abi_version);
  }
  std::string compute_dtype(DType d) const {
    const char* s = api_->compute_dtype(dtype_option(d));
    return s != nullptr && *s != '\0' ? s : "unknown";
  }

 private:
  Plugin(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void* handle_;
  std::string path_;
  const evalrun_aiu_plugin_api* api_ = nullptr;
};

// One plugin session per process (this rank's card). Layers hold it, so it outlives them.
class Session {
 public:
  Session(std::shared_ptr<Plugin> plugin, void* handle) : plugin_(std::move(plugin)), handle_(handle) {}
  ~Session() { plugin_->api().shutdown(handle_); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  const evalrun_aiu_plugin_api& api() const { return plugin_->api(); }
  const Plugin& plugin() const { return *plugin_; }
  void* handle() const { return handle_; }

 private:
  std::shared_ptr<Plugin> plugin_;
  void* handle_;
};

constexpr std::size_t kErrSize = 1024;

class AiuLinear final : public DeviceLinear {
 public:
  AiuLinear(quant::LinearPtr host_layer, const std::string& name, std::shared_ptr<Session> session)
      : DeviceLinear(std::move(host_layer), "aiu"), session_(std::move(session)) {
    const auto w = host().weight_f32();
    const auto b = host().bias_f32();
    char err[kErrSize] = {0};
    if (session_->api().linear_create(session_->handle(), name.c_str(), in_features(), out_features(), w.data(),
                                      b.empty() ? nullptr : b.data(), &layer_, err, sizeof err) != 0) {
      throw std::runtime_error("AIU plugin '" + session_->plugin().path() + "': linear_create(" + name +
                               ") failed: " + err);
    }
    name_ = name;
  }
  ~AiuLinear() override { session_->api().linear_destroy(layer_); }

 protected:
  void compute(const float* x, std::int64_t M, float* y) override {
    char err[kErrSize] = {0};
    if (session_->api().linear_forward(layer_, x, M, y, err, sizeof err) != 0) {
      throw std::runtime_error("AIU plugin '" + session_->plugin().path() + "': linear_forward(" + name_ +
                               ", rows " + std::to_string(M) + ") failed: " + err);
    }
  }

 private:
  std::shared_ptr<Session> session_;
  void* layer_ = nullptr;
  std::string name_;
};

class AiuBackend final : public Backend {
 public:
  AiuBackend(std::shared_ptr<Session> session, std::string card, std::string compute)
      : session_(std::move(session)), card_(std::move(card)), compute_(std::move(compute)) {}

  std::string device() const override { return "aiu"; }
  std::string describe() const override {
    return "aiu card " + card_ + ", plugin " + session_->plugin().identity() + " (" + session_->plugin().path() +
           "), projections in " + compute_;
  }
  std::string compute_dtype(const std::string& host) const override {
    return compute_ == host ? host : host + " (projections " + compute_ + ")";
  }
  std::string usage() const override {
    const char* r = session_->api().report(session_->handle());
    return std::string("plugin: ") + (r != nullptr ? r : "");
  }
  std::string model_device() const override { return "cpu"; }  // the plugin takes the projections
  bool takes_projections() const override { return true; }
  quant::LinearPtr adopt(quant::LinearPtr host, const std::string& name) override {
    return std::make_unique<AiuLinear>(std::move(host), name, session_);
  }

 private:
  std::shared_ptr<Session> session_;
  std::string card_, compute_;
};

}  // namespace

PluginProbe probe_aiu_plugin(const std::string& path, const std::string& where, DType dtype) {
  auto plugin = Plugin::open(path, where);
  return {plugin->identity(), plugin->compute_dtype(dtype)};
}

std::shared_ptr<Backend> make_aiu_backend(const RunSpec& spec, const RankPlan& plan) {
  auto plugin = Plugin::open(plan.plugin, plan.plugin_from);
  const std::string kind = to_string(task_info(spec.task.kind).role);
  const std::vector<std::pair<std::string, std::string>> kv = {
      {"rank", std::to_string(plan.place.rank)},
      {"world_size", std::to_string(plan.place.world_size)},
      {"local_rank", std::to_string(plan.place.local_rank)},
      {"card", plan.card},
      {"vfio_mode", spec.aiu.vfio_mode},
      {"compile_dynamic", spec.aiu.compile_dynamic},
      {"dtype", dtype_option(spec.model.dtype)},
      {"model_kind", kind},
  };
  std::vector<evalrun_aiu_option> options;
  for (const auto& [k, v] : kv) options.push_back({k.c_str(), v.c_str()});
  void* handle = nullptr;
  char err[kErrSize] = {0};
  if (plugin->api().init(options.data(), options.size(), &handle, err, sizeof err) != 0) {
    throw InputError(plan.plugin_from, "AIU plugin '" + plan.plugin + "': init failed on card " + plan.card + ": " + err);
  }
  const std::string compute = plugin->compute_dtype(spec.model.dtype);
  return std::make_shared<AiuBackend>(std::make_shared<Session>(std::move(plugin), handle), plan.card, compute);
}

}  // namespace evalrun::device
