/* Llama 3 from MLX 4-bit checkpoints: loader, model graph, CPU inference and
 * greedy generation, reference verification and random checkpoints.
 *
 * A checkpoint directory holds config.json and model.safetensors or the
 * shards listed in model.safetensors.index.json. Weights stay in read-only
 * file mappings; nothing is copied at open. */
#ifndef FOUNDRY_LLAMA_H
#define FOUNDRY_LLAMA_H

#include "foundry/core.h"
#include "foundry/graph.h"
#include "foundry/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FDY_LLAMA_MAX_EOS 8

typedef struct fdy_llama_config {
  uint32_t vocab_size;
  uint32_t hidden_size;
  uint32_t intermediate_size;
  uint32_t num_layers;
  uint32_t num_heads;
  uint32_t num_kv_heads;
  uint32_t head_dim; /* from config or hidden / heads */
  uint32_t max_position_embeddings;
  double rope_theta;
  bool rope_llama3;   /* rope_scaling of type llama3 */
  double rope_factor; /* llama3 scaling parameters */
  double rope_low_freq_factor;
  double rope_high_freq_factor;
  uint32_t rope_original_max_position;
  bool tie_word_embeddings;
  double rms_norm_eps;
  int32_t bos_id; /* -1 when absent */
  uint32_t eos_count;
  int32_t eos_ids[FDY_LLAMA_MAX_EOS];
  uint32_t group_size;   /* 32, 64 or 128 */
  uint32_t bits;         /* 4 */
  fdy_dtype scale_dtype; /* F16 or BF16: scales, biases and norms (MLX
                            casts them all to the model's dtype) */
} fdy_llama_config;

/* A 4-bit quantized linear layer y = x W^T, W (out, in):
 * weight U32 (out, in/8), scales and biases (out, in/group_size). */
typedef struct fdy_llama_qlinear {
  const fdy_st_tensor *weight;
  const fdy_st_tensor *scales;
  const fdy_st_tensor *biases;
  uint32_t out_features;
  uint32_t in_features;
} fdy_llama_qlinear;

typedef struct fdy_llama_layer_weights {
  fdy_llama_qlinear q, k, v, o, gate, up, down;
  const fdy_st_tensor *input_norm; /* (hidden) */
  const fdy_st_tensor *post_norm;  /* (hidden) */
} fdy_llama_layer_weights;

/* Parses and checks a config.json document of len bytes (path is used in
 * messages only): model_type "llama"; sizes; rope_theta; rope_scaling of
 * type llama3 or none; tie_word_embeddings (default false); rms_norm_eps;
 * eos_token_id as an integer or a list; quantization with mode "affine"
 * (absent or null = affine), no per-layer override (an object or boolean
 * under a module's path), group_size 32, 64 or 128 and bits 4, checked in
 * that order. A valid value Foundry does not handle (another mode such as
 * mxfp4 or nvfp4, an override, other bits or group sizes, rope scaling
 * types, model types, ...) is FDY_ERR_UNSUPPORTED with err->name the field
 * ("quantization.mode", "quantization.model.layers.0.mlp.down_proj") and a
 * message "PATH: unsupported quantization: field 'quantization.bits' is 3;
 * ...". Invalid JSON (a NUL byte included) is FDY_ERR_PARSE (line/column
 * set); a missing field, a wrong type or an
 * inconsistent value is FDY_ERR_SCHEMA with err->name the field
 * ("quantization.bits"). scale_dtype is set to F16; the loader replaces it
 * with the dtype the checkpoint's scales have. */
fdy_status fdy_llama_config_parse(const char *json, size_t len,
                                  const char *path, fdy_llama_config *out,
                                  fdy_error *err);

typedef struct fdy_llama_model fdy_llama_model;

/* Opens and fully validates a checkpoint directory: config fields and types,
 * quantization (group_size 32/64/128, bits 4, else FDY_ERR_UNSUPPORTED),
 * every expected tensor present with the right dtype and shape, nothing
 * unexpected, lm_head exactly when embeddings are untied. Scales, biases
 * and norms all have the embedding scales' dtype, F16 or BF16 (else
 * FDY_ERR_SCHEMA). Errors name the file (err->name) and the tensor. */
fdy_status fdy_llama_open(const char *dir, fdy_llama_model **out,
                          fdy_error *err);
void fdy_llama_close(fdy_llama_model *model);
const fdy_llama_config *fdy_llama_model_config(const fdy_llama_model *model);
const char *fdy_llama_model_dir(const fdy_llama_model *model);
const fdy_llama_layer_weights *fdy_llama_layer(const fdy_llama_model *model,
                                               uint32_t layer);
const fdy_llama_qlinear *fdy_llama_embedding(const fdy_llama_model *model);
/* The LM head: lm_head when untied, else the embedding. */
const fdy_llama_qlinear *fdy_llama_lm_head(const fdy_llama_model *model);
const fdy_st_tensor *fdy_llama_final_norm(const fdy_llama_model *model);
size_t fdy_llama_tensor_count(const fdy_llama_model *model);
/* Bytes of one decoder layer's tensors, and of all tensors. */
uint64_t fdy_llama_layer_bytes(const fdy_llama_model *model, uint32_t layer);
uint64_t fdy_llama_total_bytes(const fdy_llama_model *model);

/* Dequantizes row `row` of a quantized linear into out (in_features floats),
 * w = scale * q + bias per group. */
void fdy_llama_dequantize_row(const fdy_llama_qlinear *linear,
                              fdy_dtype scale_dtype, uint32_t row, float *out);

/* Op kinds of the model graph. */
#define FDY_OP_LLAMA_EMBED "llama.embed"
#define FDY_OP_LLAMA_LAYER "llama.decoder_layer"
#define FDY_OP_LLAMA_HEAD  "llama.head"

/* The model as a Foundry graph: input "tokens" (I32 [context]), op
 * "embed" reading weight "embed" (the embedding's three tensors gathered),
 * op "layer.<i>" (param i) reading weight "layer.<i>" (all of the layer's
 * tensors gathered as one streamable unit) and the previous hidden state, op
 * "head" reading weight "head" (final norm + LM head tensors) and writing
 * "logits". Every weight is a gather of file extents.
 *
 * Details: weights are U8 [bytes]; a linear contributes its weight, scales
 * and biases extents in that order. "embed" = embedding linear; "layer.<i>" =
 * input_norm, q, k, v, o, post_norm, gate, up, down (23 extents); "head" =
 * final norm, LM head linear (with tied embeddings these are the
 * embedding's file ranges again, so the weights then sum to the total bytes
 * plus the embedding's bytes). Activations "embed.out" and "layer.<i>.out"
 * are F32 [context, hidden], "logits" F32 [context, vocab]. Op reads are
 * (tokens, embed), (layer.<i>, previous hidden), (head, last hidden).
 * context must be >= 1. The graph copies the paths; the model may be closed
 * after this returns. Caller owns *out (fdy_graph_destroy). */
fdy_status fdy_llama_graph(const fdy_llama_model *model, uint32_t context,
                           fdy_graph **out, fdy_error *err);

/* ---- random checkpoints ----------------------------------------------------
 */

/* Writes a random-weight checkpoint in exactly the MLX layout (config.json,
 * model.safetensors, model.safetensors.index.json) into a new directory
 * out_dir (FDY_ERR_EXISTS if it exists, FDY_ERR_NOT_FOUND if its parent
 * does not, FDY_ERR_IO if nothing can be created there: all before any
 * work; nothing left behind on failure), deterministic for (preset, seed).
 * The directory gets mode 0777 & ~umask (and the parent's default ACL),
 * the files 0666 & ~umask. Presets: "llama-3.2-1b", "llama-3.2-3b",
 * "llama-3.1-8b" (real shapes) and "tiny", "micro" (tests). */
fdy_status fdy_llama_make_model(const char *preset, uint64_t seed,
                                const char *out_dir, fdy_error *err);
/* Progress of fdy_llama_make_model_ex: bytes of tensor data written so far
 * out of total; called from the writing thread after every chunk. */
typedef void (*fdy_llama_progress_fn)(void *ctx, uint64_t done, uint64_t total);
/* fdy_llama_make_model with an optional progress callback (may be NULL). */
fdy_status fdy_llama_make_model_ex(const char *preset, uint64_t seed,
                                   const char *out_dir,
                                   fdy_llama_progress_fn progress, void *ctx,
                                   fdy_error *err);
/* Preset names, NULL-terminated. */
const char *const *fdy_llama_presets(void);
/* What fdy_llama_make_model would write for a preset, computed without
 * writing anything: *config as fdy_llama_open reports it for the written
 * checkpoint (scale_dtype included) and, when total_bytes is not NULL, the
 * bytes of all its tensors (the index's total_size, equal to
 * fdy_llama_total_bytes of the opened checkpoint; the same for every seed).
 * An unknown preset: FDY_ERR_INVALID_ARGUMENT, *config unchanged. */
fdy_status fdy_llama_preset_config(const char *preset, fdy_llama_config *config,
                                   uint64_t *total_bytes, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
