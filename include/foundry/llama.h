/* The Llama family from MLX checkpoints (model_type llama, mistral, qwen2,
 * qwen3; 4-bit, 8-bit, unquantized and mixed):
 * loader, the model as a graph of ops and its plan, and random checkpoints
 * (sessions, generation and verification are in llama_session.h).
 *
 * A checkpoint directory holds config.json and model.safetensors or the
 * shards listed in model.safetensors.index.json. Weights stay in read-only
 * file mappings; nothing is copied at open. */
#ifndef FOUNDRY_LLAMA_H
#define FOUNDRY_LLAMA_H

#include "foundry/core.h"
#include "foundry/graph.h"
#include "foundry/plan.h"
#include "foundry/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FDY_LLAMA_MAX_EOS 8

/* A linear's quantization: MLX affine with `bits` 4 or 8 and groups of
 * group_size (32, 64 or 128) inputs, or bits 0 (and group_size 0):
 * unquantized, the weight stored in the checkpoint's dtype. */
typedef struct fdy_llama_quant {
  uint32_t bits;
  uint32_t group_size;
} fdy_llama_quant;

/* The model family, config.json's model_type. Every family is the Llama
 * decoder (RMSNorm, rope in split halves, grouped-query attention, SwiGLU
 * MLP) with, per family: */
typedef enum fdy_llama_family {
  FDY_LLAMA_FAMILY_LLAMA = 0, /* "llama" */
  FDY_LLAMA_FAMILY_MISTRAL,   /* "mistral": as llama (no sliding window) */
  FDY_LLAMA_FAMILY_QWEN2,     /* "qwen2": biases on q, k and v */
  FDY_LLAMA_FAMILY_QWEN3,     /* "qwen3": RMSNorm of q and k per head
                                 (q_norm, k_norm) before the rope */
  FDY_LLAMA_FAMILY_COUNT
} fdy_llama_family;

/* config.json's model_type of a family ("llama"); "unknown" out of range. */
const char *fdy_llama_family_name(fdy_llama_family family);

typedef struct fdy_llama_config {
  fdy_llama_family family; /* model_type */
  bool qkv_bias;           /* q, k and v have biases (qwen2) */
  bool qk_norm;            /* q and k are normalized per head (qwen3) */
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
  /* the default quantization (quantization's group_size and bits: 4 or
   * 8); both 0 when config.json has none (an unquantized checkpoint) */
  uint32_t group_size;
  uint32_t bits;
  /* linears with their own entry in quantization (mixed precision: a
   * quantization of their own, or false for unquantized) */
  uint32_t quant_overrides;
  fdy_dtype dtype; /* the checkpoint's: of scales, biases, norms and
                      unquantized weights (MLX casts them all to the
                      model's dtype): F16 or BF16, or F32 when no linear
                      is quantized */
} fdy_llama_config;

/* A linear layer y = x W^T, W (out, in): quantized (quant.bits 4 or 8),
 * weight U32 (out, in * bits / 32), scales and biases (out, in /
 * group_size); or unquantized (quant.bits 0), weight (out, in) of the
 * config's dtype, scales and biases NULL. */
typedef struct fdy_llama_linear {
  const fdy_st_tensor *weight;
  const fdy_st_tensor *scales;
  const fdy_st_tensor *biases;
  uint32_t out_features;
  uint32_t in_features;
  fdy_llama_quant quant;
} fdy_llama_linear;

typedef struct fdy_llama_layer_weights {
  fdy_llama_linear q, k, v, o, gate, up, down;
  const fdy_st_tensor *input_norm; /* (hidden) */
  const fdy_st_tensor *post_norm;  /* (hidden) */
  /* the biases of q, k and v (qwen2: config qkv_bias), else NULL */
  const fdy_st_tensor *q_bias; /* (heads * head_dim) */
  const fdy_st_tensor *k_bias; /* (kv_heads * head_dim) */
  const fdy_st_tensor *v_bias; /* (kv_heads * head_dim) */
  /* the RMSNorm weights of q and k per head (qwen3: config qk_norm), else
   * NULL */
  const fdy_st_tensor *q_norm; /* (head_dim) */
  const fdy_st_tensor *k_norm; /* (head_dim) */
} fdy_llama_layer_weights;

/* Parses and checks a config.json document of len bytes (path is used in
 * messages only): model_type "llama", "mistral", "qwen2" or "qwen3";
 * sizes; rope_theta;
 * rope_scaling of type llama3 or none; tie_word_embeddings (default false);
 * rms_norm_eps; eos_token_id as an integer or a list; quantization absent or
 * null (an unquantized checkpoint: bits 0), or with mode "affine" (absent or
 * null = affine), group_size 32, 64 or 128 and bits 4 or 8, checked in that
 * order, and per-module entries (mixed precision, as mlx-lm writes them:
 * under a linear's path, "model.layers.0.mlp.down_proj", an object of the
 * same fields or false for a module left unquantized; true = the default)
 * whose group size divides the module's inputs. A valid value Foundry
 * does not handle (another mode such as mxfp4 or nvfp4, bits 2, 3, 5 or 6,
 * other group sizes, rope scaling types, model types, a field that would
 * change the math and is not implemented: a sliding window (mistral's
 * sliding_window not null, use_sliding_window true, layer_types other than
 * full_attention), mixture
 * of experts (num_experts, num_local_experts, num_experts_per_tok,
 * n_routed_experts, moe_intermediate_size not null or 0), ...) is
 * FDY_ERR_UNSUPPORTED with err->name the field ("quantization.mode",
 * "quantization.model.layers.0.mlp.down_proj.bits") and a message "PATH:
 * unsupported quantization: field 'quantization.bits' is 3; ...". Invalid
 * JSON (a NUL byte included) is FDY_ERR_PARSE (line/column set); a missing
 * field, a wrong type or an inconsistent value (an entry naming no linear
 * of the model) is FDY_ERR_SCHEMA with err->name the field
 * ("quantization.bits"). dtype is set to F16; the loader replaces it with
 * the checkpoint's. */
fdy_status fdy_llama_config_parse(const char *json, size_t len,
                                  const char *path, fdy_llama_config *out,
                                  fdy_error *err);

typedef struct fdy_llama_model fdy_llama_model;

/* Opens and fully validates a checkpoint directory: config fields and types,
 * quantization (group_size 32/64/128, bits 4 or 8, else
 * FDY_ERR_UNSUPPORTED), every expected tensor present with the right dtype
 * and shape, nothing unexpected, lm_head exactly when embeddings are
 * untied. A linear is quantized as its entry in quantization says, else as
 * the default; as mlx-lm loads it, a linear without an entry whose
 * NAME.scales the checkpoint lacks is unquantized. Scales, biases, norms
 * and unquantized weights all have the checkpoint's dtype, the first of
 * them (the embedding's scales or weight) fixes it: F16 or BF16, or F32
 * when no linear is quantized (else FDY_ERR_SCHEMA). Errors name the file
 * (err->name) and the tensor. */
fdy_status fdy_llama_open(const char *dir, fdy_llama_model **out,
                          fdy_error *err);
void fdy_llama_close(fdy_llama_model *model);
const fdy_llama_config *fdy_llama_model_config(const fdy_llama_model *model);
const char *fdy_llama_model_dir(const fdy_llama_model *model);
const fdy_llama_layer_weights *fdy_llama_layer(const fdy_llama_model *model,
                                               uint32_t layer);
const fdy_llama_linear *fdy_llama_embedding(const fdy_llama_model *model);
/* The LM head: lm_head when untied, else the embedding. */
const fdy_llama_linear *fdy_llama_lm_head(const fdy_llama_model *model);
const fdy_st_tensor *fdy_llama_final_norm(const fdy_llama_model *model);
size_t fdy_llama_tensor_count(const fdy_llama_model *model);
/* Bytes of one decoder layer's tensors, and of all tensors. */
uint64_t fdy_llama_layer_bytes(const fdy_llama_model *model, uint32_t layer);
uint64_t fdy_llama_total_bytes(const fdy_llama_model *model);

/* ---- the model as a graph of ops
 * ------------------------------------------------ */

typedef struct fdy_llama_graph_options {
  uint32_t context;      /* KV cache positions per sequence, >= 1 */
  uint32_t sequences;    /* sequences of the KV cache; 0 = 1 */
  uint32_t step_rows;    /* rows of the decode step (a step of the batch:
                            decode rows and prompt chunks), >= sequences;
                            0 = sequences */
  uint32_t prefill_rows; /* tokens one prefill run takes, >= 1 */
  fdy_dtype kv_dtype;    /* F32 or F16 */
  bool all_logits;       /* prefill outputs the logits of every row (verify)
                            instead of the last row's */
  bool ids_only;         /* the plan's steps copy out only the next id, the
                            logits stay on the device (generation); not
                            with all_logits */
} fdy_llama_graph_options;

/* The tensors and ops a session needs from the graph. */
typedef struct fdy_llama_graph_io {
  fdy_tensor_id prefill_step;   /* I32 [FDY_STEP_ELEMENTS(prefill_rows)] */
  fdy_tensor_id decode_step;    /* I32 [FDY_STEP_ELEMENTS(step_rows)] */
  fdy_tensor_id prefill_logits; /* F32 [prefill_rows or 1, vocab] */
  /* U32 [1, FDY_SAMPLE_FIELDS]: the last row's SAMPLE parameters */
  fdy_tensor_id prefill_sampling;
  fdy_tensor_id prefill_next;  /* I32 [1]: the id SAMPLE draws from the
                                  last row (its argmax when greedy) */
  fdy_tensor_id decode_logits; /* F32 [step_rows, vocab] */
  /* U32 [step_rows, FDY_SAMPLE_FIELDS]: each row's SAMPLE parameters */
  fdy_tensor_id decode_sampling;
  fdy_tensor_id decode_next; /* I32 [step_rows]: each row's drawn id */
  uint32_t prefill_first_op, prefill_op_count; /* ops [first, first+count) */
  uint32_t decode_first_op, decode_op_count;
  bool ids_only; /* the graph options' (fdy_llama_plan's outputs) */
} fdy_llama_graph_io;

/* The model as a Foundry graph of kernel-granular ops (include/foundry/
 * ops.h): weights "embed", "layer.<i>" (all tensors of decoder layer i: one
 * streamable unit) and "head" (the final norm, plus the LM head when
 * untied; a tied head reads the embedding's views), each a gather of file
 * extents in fdy_llama_layout order with padding so that every tensor is a
 * view at a FDY_TENSOR_ALIGNMENT offset; state "layer.<i>.k_cache" and
 * "layer.<i>.v_cache" (kv_dtype [sequences, context, kv_heads *
 * head_dim]); and two sets of ops over the same weights and state:
 * "prefill.*" over prefill_rows rows (a chunk of one sequence) and
 * "decode.*" over step_rows rows (each at its own position of its own
 * sequence: one row per decoding sequence of a batch, consecutive rows
 * for a prompt chunk). The embedding is EMBED_Q4, EMBED_Q8 or EMBED_DENSE
 * as it is quantized. Per layer, in the fused kinds where their weights
 * are all 4-bit with one group size: norm + q/k/v (NORM_MATMUL_Q4), the
 * rope of q and k and attention (appending k and v to the caches;
 * ROPE_ATTENTION in the decode step, three ops in the prefill), o +
 * residual (MATMUL_ADD_Q4), norm + gate/up + SwiGLU (NORM_SWIGLU_Q4), down
 * + residual; a fused op whose weights are not all 4-bit alike is its
 * unfused sequence instead (RMSNORM, a MATMUL_Q4, MATMUL_Q8 or
 * MATMUL_DENSE per weight, ADD, SWIGLU); then the head (last row, rmsnorm,
 * LM head matmul, argmax; the decode step's norm and a 4-bit LM head in
 * one NORM_MATMUL_Q4). Errors: a context
 * or prefill_rows of 0 or a context above max_position_embeddings, a
 * kv_dtype other than F32/F16, ids_only with all_logits, step_rows below
 * sequences (FDY_ERR_INVALID_ARGUMENT). The graph copies
 * the paths; the model may be closed after this returns. Caller owns *out
 * (fdy_graph_destroy); io may be NULL. */
fdy_status fdy_llama_graph(const fdy_llama_model *model,
                           const fdy_llama_graph_options *options,
                           fdy_graph **out, fdy_llama_graph_io *io,
                           fdy_error *err);

/* The plan of a Llama graph: steps "prefill" and "decode" (each copying out
 * its logits and next id, or only the id when io->ids_only), weights
 * resident when they fit weight_budget,
 * else streamed through `buffers` slots (fdy_plan_build). */
fdy_status fdy_llama_plan(const fdy_graph *graph, const fdy_llama_graph_io *io,
                          uint64_t weight_budget, uint32_t buffers,
                          fdy_plan **out, fdy_error *err);

/* ---- random checkpoints ----------------------------------------------------
 */

/* What a random checkpoint holds besides its preset's shapes; all zero
 * (or NULL options): the preset's own, 4-bit with groups of 64. */
typedef struct fdy_llama_make_options {
  uint32_t bits;       /* 4 or 8 (0: 4) */
  uint32_t group_size; /* 32, 64 or 128 (0: 64) */
  bool unquantized;    /* no quantization: every weight in dtype */
  /* mixed precision over the default bits: 8 bits (same groups) for
   * v_proj and down_proj of the layers mlx-lm's mixed recipes favour (the
   * first and last eighth, every third between) and for an untied
   * lm_head, and the last layer's o_proj unquantized (an entry false) */
  bool mixed;
  const char *dtype; /* NULL: the preset's; "float16", "bfloat16", or
                        "float32" (unquantized only) */
} fdy_llama_make_options;

/* Writes a random-weight checkpoint in exactly the MLX layout (config.json,
 * model.safetensors, model.safetensors.index.json) into a new directory
 * out_dir (FDY_ERR_EXISTS if it exists, FDY_ERR_NOT_FOUND if its parent
 * does not, FDY_ERR_IO if nothing can be created there: all before any
 * work; nothing left behind on failure), deterministic for (preset, seed).
 * The directory gets mode 0777 & ~umask (and the parent's default ACL),
 * the files 0666 & ~umask. Presets: "llama-3.2-1b", "llama-3.2-3b",
 * "llama-3.1-8b" (real shapes) and "tiny", "micro", "micro-untied",
 * "micro-llama3-vocab" (tests; the last has the real Llama 3 vocabulary,
 * BOS and EOS ids on 2 layers of hidden size 64). */
fdy_status fdy_llama_make_model(const char *preset, uint64_t seed,
                                const char *out_dir, fdy_error *err);
/* Progress of fdy_llama_make_model_ex: bytes of tensor data written so far
 * out of total; called from the writing thread after every chunk. */
typedef void (*fdy_llama_progress_fn)(void *ctx, uint64_t done, uint64_t total);
/* fdy_llama_make_model with options (NULL: the preset's own; a value out
 * of range, or mixed or float32 with unquantized when that cannot be, is
 * FDY_ERR_INVALID_ARGUMENT before any work) and an optional progress
 * callback (may be NULL). */
fdy_status fdy_llama_make_model_ex(const char *preset, uint64_t seed,
                                   const fdy_llama_make_options *options,
                                   const char *out_dir,
                                   fdy_llama_progress_fn progress, void *ctx,
                                   fdy_error *err);
/* Preset names, NULL-terminated. */
const char *const *fdy_llama_presets(void);
/* What fdy_llama_make_model_ex would write for a preset and options
 * (NULL: the preset's own), computed without writing anything: *config as
 * fdy_llama_open reports it for the written checkpoint (dtype included)
 * and, when total_bytes is not NULL, the bytes of all its tensors (the
 * index's total_size, equal to fdy_llama_total_bytes of the opened
 * checkpoint; the same for every seed). An unknown preset or bad options:
 * FDY_ERR_INVALID_ARGUMENT, *config unchanged. */
fdy_status fdy_llama_preset_config(const char *preset,
                                   const fdy_llama_make_options *options,
                                   fdy_llama_config *config,
                                   uint64_t *total_bytes, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
