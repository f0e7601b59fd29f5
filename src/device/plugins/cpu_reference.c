/* evalrun-cpu-reference: an AIU backend plugin (src/device/aiu_plugin.h) that computes on the host
 * with plain loops. It stands in for a real AIU runtime where there is none: the tests run QA and
 * generation with model.device = "aiu" through it and check the results equal the CPU run's, and
 * `evalrun --dry-run` can be tried with it. Products accumulate in double, so they are at least as
 * exact as the host's float32 GEMM.
 *
 * It counts its work; report() returns the counts, and when EVALRUN_CPU_PLUGIN_TRACE names a directory
 * shutdown() writes them to DIR/rank<rank>.txt, so a test sees that each rank's projections really
 * ran here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/aiu_plugin.h"

typedef struct session {
  char rank[32];
  char card[64];
  char compile_dynamic[16];
  long long layers_created;
  long long live_layers;
  long long calls;
  long long rows;
  char line[256];
} session;

typedef struct layer {
  session* s;
  int64_t in, out;
  float* w;    /* [out, in] */
  float* bias; /* [out] or NULL */
} layer;

static void set_err(char* err, size_t size, const char* msg) {
  if (err == NULL || size == 0) return;
  snprintf(err, size, "%s", msg);
}

static void copy_opt(char* dst, size_t size, const char* value) { snprintf(dst, size, "%s", value); }

static const char* compute_dtype(const char* requested) {
  (void)requested;
  return "float32";
}

static int init(const evalrun_aiu_option* options, size_t n, void** out, char* err, size_t err_size) {
  session* s = (session*)calloc(1, sizeof(session));
  if (s == NULL) {
    set_err(err, err_size, "out of memory");
    return 1;
  }
  copy_opt(s->rank, sizeof s->rank, "0");
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(options[i].key, "rank") == 0) copy_opt(s->rank, sizeof s->rank, options[i].value);
    if (strcmp(options[i].key, "card") == 0) copy_opt(s->card, sizeof s->card, options[i].value);
    if (strcmp(options[i].key, "compile_dynamic") == 0)
      copy_opt(s->compile_dynamic, sizeof s->compile_dynamic, options[i].value);
  }
  if (strcmp(s->compile_dynamic, "static") != 0 && strcmp(s->compile_dynamic, "symbolic") != 0) {
    set_err(err, err_size, "option compile_dynamic must be \"static\" or \"symbolic\"");
    free(s);
    return 1;
  }
  *out = s;
  return 0;
}

static int linear_create(void* sp, const char* name, int64_t in, int64_t out, const float* w, const float* bias,
                         void** result, char* err, size_t err_size) {
  (void)name;
  session* s = (session*)sp;
  if (in <= 0 || out <= 0) {
    set_err(err, err_size, "linear_create: features must be positive");
    return 1;
  }
  layer* l = (layer*)calloc(1, sizeof(layer));
  if (l == NULL) {
    set_err(err, err_size, "out of memory");
    return 1;
  }
  l->s = s;
  l->in = in;
  l->out = out;
  l->w = (float*)malloc((size_t)(in * out) * sizeof(float));
  if (l->w == NULL) {
    free(l);
    set_err(err, err_size, "out of memory");
    return 1;
  }
  memcpy(l->w, w, (size_t)(in * out) * sizeof(float));
  if (bias != NULL) {
    l->bias = (float*)malloc((size_t)out * sizeof(float));
    if (l->bias == NULL) {
      free(l->w);
      free(l);
      set_err(err, err_size, "out of memory");
      return 1;
    }
    memcpy(l->bias, bias, (size_t)out * sizeof(float));
  }
  s->layers_created++;
  s->live_layers++;
  *result = l;
  return 0;
}

static int linear_forward(void* lp, const float* x, int64_t rows, float* y, char* err, size_t err_size) {
  layer* l = (layer*)lp;
  if (rows <= 0) {
    set_err(err, err_size, "linear_forward: rows must be positive");
    return 1;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * l->in;
    for (int64_t o = 0; o < l->out; ++o) {
      const float* wr = l->w + o * l->in;
      double acc = 0.0;
      for (int64_t k = 0; k < l->in; ++k) acc += (double)xr[k] * (double)wr[k];
      if (l->bias != NULL) acc += (double)l->bias[o];
      y[r * l->out + o] = (float)acc;
    }
  }
  l->s->calls++;
  l->s->rows += rows;
  return 0;
}

static void linear_destroy(void* lp) {
  layer* l = (layer*)lp;
  if (l == NULL) return;
  l->s->live_layers--;
  free(l->w);
  free(l->bias);
  free(l);
}

static const char* report(void* sp) {
  session* s = (session*)sp;
  snprintf(s->line, sizeof s->line, "%lld layers, %lld forward calls, %lld rows (card %s, compile_dynamic %s)",
           s->layers_created, s->calls, s->rows, s->card[0] ? s->card : "-", s->compile_dynamic);
  return s->line;
}

static void shutdown_session(void* sp) {
  session* s = (session*)sp;
  if (s == NULL) return;
  const char* dir = getenv("EVALRUN_CPU_PLUGIN_TRACE");
  if (dir != NULL && dir[0] != '\0') {
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%s.txt", dir, s->rank);
    FILE* f = fopen(path, "w");
    if (f != NULL) {
      fprintf(f, "layers %lld\ncalls %lld\nrows %lld\nlive_layers %lld\ncard %s\n", s->layers_created, s->calls,
              s->rows, s->live_layers, s->card);
      fclose(f);
    }
  }
  free(s);
}

static const evalrun_aiu_plugin_api kApi = {
    EVALRUN_AIU_PLUGIN_ABI_VERSION,
    (uint32_t)sizeof(evalrun_aiu_plugin_api),
    "evalrun-cpu-reference",
    "1.0",
    compute_dtype,
    init,
    linear_create,
    linear_forward,
    linear_destroy,
    report,
    shutdown_session,
};

__attribute__((visibility("default"))) const evalrun_aiu_plugin_api* evalrun_aiu_get_api(void) { return &kApi; }
