/* The AIU backend plugin ABI, version 1: a shared library that evalrun loads at run time (dlopen) for
 * [model] device = "aiu" and through which every projection (linear layer) of the model runs.
 *
 * Plain C so a plugin can be written against any runtime (a torch_sendnn / Spyre runtime, a simulator,
 * the CPU reference in src/device/plugins/). The plugin exports one symbol, EVALRUN_AIU_PLUGIN_ENTRY,
 * returning a table of functions. evalrun checks, before it calls anything else:
 *   - the symbol exists,
 *   - abi_version == EVALRUN_AIU_PLUGIN_ABI_VERSION (a plugin built for another version is refused),
 *   - struct_size >= the size of version 1's table and no function pointer is NULL.
 * Any failure is one error naming the plugin's path (exit status 2).
 *
 * Calls and threads: evalrun calls a plugin from one thread per process (one MPI rank = one process =
 * one session = one card). Functions that can fail return 0 on success and otherwise non-zero with a
 * NUL-terminated message in err (at most err_size bytes, including the NUL).
 *
 * Numbers: float32 in and out, row-major. What the plugin computes in (float16 on an AIU) is its
 * business; compute_dtype() says what, and the result file records it.
 */
#ifndef EVALRUN_AIU_PLUGIN_H
#define EVALRUN_AIU_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EVALRUN_AIU_PLUGIN_ABI_VERSION 1u
#define EVALRUN_AIU_PLUGIN_ENTRY "evalrun_aiu_get_api"

/* One option passed to init (strings owned by evalrun, valid during the call). Keys evalrun passes in
 * version 1 (a plugin ignores keys it does not know):
 *   "rank", "world_size", "local_rank"  the MPI rank, world size and rank on the node
 *   "card"              the PCI address of this rank's card (AIU_WORLD_RANK_<local_rank>)
 *   "vfio_mode"         "PF" or "VF" (aiu.vfio_mode; also exported as FLEX_DEVICE)
 *   "compile_dynamic"   "static" (compile per input shape) or "symbolic" (symbolic batch/sequence dims)
 *   "dtype"             "fp32" or "fp16" (model.dtype)
 *   "model_kind"        "encoder" or "decoder"
 * The AIU environment variables (FLEX_COMPUTE, FLEX_DEVICE, ...) are already set when init runs. */
typedef struct evalrun_aiu_option {
  const char* key;
  const char* value;
} evalrun_aiu_option;

typedef struct evalrun_aiu_plugin_api {
  uint32_t abi_version; /* EVALRUN_AIU_PLUGIN_ABI_VERSION the plugin was built against */
  uint32_t struct_size; /* sizeof(evalrun_aiu_plugin_api) as the plugin was built */
  const char* name;     /* e.g. "evalrun-cpu-reference" */
  const char* version;  /* the plugin's own version, e.g. "1.0" */

  /* What the projections compute in for a requested model.dtype ("fp32" / "fp16"): "float32",
   * "float16", ... Static: no session needed (evalrun --dry-run asks it). */
  const char* (*compute_dtype)(const char* requested_dtype);

  /* Opens a session (the card, the compiler settings). */
  int (*init)(const evalrun_aiu_option* options, size_t n_options, void** session, char* err, size_t err_size);

  /* A projection y = x W^T + b. weight: float32 [out_features, in_features] row-major; bias: float32
   * [out_features] or NULL. The plugin copies what it needs; the arrays are freed after the call.
   * name: the checkpoint layers it holds (e.g. "model.layers.0.self_attn.q_proj|k_proj|v_proj"). */
  int (*linear_create)(void* session, const char* name, int64_t in_features, int64_t out_features,
                       const float* weight, const float* bias, void** layer, char* err, size_t err_size);

  /* y[rows, out_features] = x[rows, in_features] W^T + b; x and y contiguous float32, not aliased.
   * rows >= 1 varies from call to call (batch x sequence positions). */
  int (*linear_forward)(void* layer, const float* x, int64_t rows, float* y, char* err, size_t err_size);

  void (*linear_destroy)(void* layer);

  /* One line about the work done so far (calls, rows), for the log and the result file; the string
   * stays valid until the next call into the session or shutdown. */
  const char* (*report)(void* session);

  /* Closes the session; every layer has been destroyed before. */
  void (*shutdown)(void* session);
} evalrun_aiu_plugin_api;

/* The one symbol a plugin exports (EVALRUN_AIU_PLUGIN_ENTRY), and its type. */
const evalrun_aiu_plugin_api* evalrun_aiu_get_api(void);
typedef const evalrun_aiu_plugin_api* (*evalrun_aiu_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* EVALRUN_AIU_PLUGIN_H */
