/* Broken AIU plugins for the loader's error tests, one per compile definition:
 *   BAD_PLUGIN_NO_ENTRY     exports something, but not evalrun_aiu_get_api
 *   BAD_PLUGIN_ABI_99       an API table claiming ABI version 99
 *   BAD_PLUGIN_NULL_FORWARD version 1, but linear_forward is NULL */
#include "device/aiu_plugin.h"

#if defined(BAD_PLUGIN_NO_ENTRY)
__attribute__((visibility("default"))) int not_an_evalrun_plugin(void) { return 42; }
#else
static const char* dtype(const char* requested) {
  (void)requested;
  return "float16";
}
static int init(const evalrun_aiu_option* o, size_t n, void** s, char* err, size_t size) {
  (void)o, (void)n, (void)s, (void)err, (void)size;
  return 1;
}
static int create(void* s, const char* name, int64_t in, int64_t out, const float* w, const float* b, void** l,
                  char* err, size_t size) {
  (void)s, (void)name, (void)in, (void)out, (void)w, (void)b, (void)l, (void)err, (void)size;
  return 1;
}
static int forward(void* l, const float* x, int64_t rows, float* y, char* err, size_t size) {
  (void)l, (void)x, (void)rows, (void)y, (void)err, (void)size;
  return 1;
}
static void destroy(void* l) { (void)l; }
static const char* report(void* s) {
  (void)s;
  return "";
}
static void shutdown_session(void* s) { (void)s; }

static const evalrun_aiu_plugin_api kApi = {
#if defined(BAD_PLUGIN_ABI_99)
    99u,
#else
    EVALRUN_AIU_PLUGIN_ABI_VERSION,
#endif
    (uint32_t)sizeof(evalrun_aiu_plugin_api),
    "bad-plugin",
    "0",
    dtype,
    init,
    create,
#if defined(BAD_PLUGIN_NULL_FORWARD)
    0,
#else
    forward,
#endif
    destroy,
    report,
    shutdown_session,
};

__attribute__((visibility("default"))) const evalrun_aiu_plugin_api* evalrun_aiu_get_api(void) { return &kApi; }
#endif
