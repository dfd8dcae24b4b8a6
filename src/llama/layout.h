/* The Llama MLX checkpoint layout, written once: which tensors a
 * configuration and the quantization of each linear imply (names, dtypes,
 * shapes, decoder layer) and which field of the loaded weights each one
 * fills. The loader's validation, the make-model writer and the graph
 * builder all enumerate it.
 *
 * Order: the embedding; then per decoder layer the tensors of one streamable
 * unit, in the order the layer uses them (input norm, q, k, v, the biases
 * of q, k and v where the family has them (qwen2), the norms of q and k
 * where it has them (qwen3), o, post norm, gate, up, down; a quantized linear
 * contributes its packed weight, scales and biases, an unquantized one its
 * weight); then the final norm and, when the embeddings are untied, the LM
 * head. Private to src/llama. */
#ifndef FOUNDRY_LLAMA_LAYOUT_H
#define FOUNDRY_LLAMA_LAYOUT_H

#include "foundry/llama.h"

/* Room for any tensor name the layout produces, NUL included. */
#define FDY_LLAMA_NAME_MAX 96

/* The modules of a checkpoint in layout order. INPUT_NORM to DOWN_PROJ
 * repeat once per decoder layer; the others occur once. */
typedef enum fdy_llama_module {
  FDY_LLAMA_EMBED,      /* model.embed_tokens: linear (vocab, hidden) */
  FDY_LLAMA_INPUT_NORM, /* model.layers.N.input_layernorm: norm (hidden) */
  FDY_LLAMA_Q_PROJ,     /* ...self_attn.q_proj: (heads * head_dim, hidden) */
  FDY_LLAMA_K_PROJ,     /* ...self_attn.k_proj: (kv_heads * head_dim, hidden) */
  FDY_LLAMA_V_PROJ,     /* ...self_attn.v_proj: (kv_heads * head_dim, hidden) */
  FDY_LLAMA_Q_BIAS,     /* ...self_attn.q_proj.bias: (heads * head_dim),
                           qkv_bias only */
  FDY_LLAMA_K_BIAS,     /* ...self_attn.k_proj.bias: (kv_heads * head_dim) */
  FDY_LLAMA_V_BIAS,     /* ...self_attn.v_proj.bias: (kv_heads * head_dim) */
  FDY_LLAMA_Q_NORM,     /* ...self_attn.q_norm: norm (head_dim), qk_norm only */
  FDY_LLAMA_K_NORM,     /* ...self_attn.k_norm: norm (head_dim) */
  FDY_LLAMA_O_PROJ,     /* ...self_attn.o_proj: (hidden, heads * head_dim) */
  FDY_LLAMA_POST_NORM,  /* ...post_attention_layernorm: norm (hidden) */
  FDY_LLAMA_GATE_PROJ,  /* ...mlp.gate_proj: (intermediate, hidden) */
  FDY_LLAMA_UP_PROJ,    /* ...mlp.up_proj: (intermediate, hidden) */
  FDY_LLAMA_DOWN_PROJ,  /* ...mlp.down_proj: (hidden, intermediate) */
  FDY_LLAMA_FINAL_NORM, /* model.norm: norm (hidden) */
  FDY_LLAMA_LM_HEAD,    /* lm_head: linear (vocab, hidden), untied only */
  FDY_LLAMA_MODULE_COUNT
} fdy_llama_module;

/* What one tensor holds. A quantized linear W (out, in) is three tensors,
 * an unquantized one a single tensor. The dtype is the config's (its
 * dtype field) except for packed words. */
typedef enum fdy_llama_part {
  FDY_LLAMA_PART_PACKED, /* NAME.weight: U32 (out, in * bits / 32) */
  FDY_LLAMA_PART_SCALES, /* NAME.scales: (out, in / group_size) */
  FDY_LLAMA_PART_BIASES, /* NAME.biases: (out, in / group_size) */
  FDY_LLAMA_PART_NORM,   /* NAME.weight: (hidden), (head_dim) for q and k */
  FDY_LLAMA_PART_BIAS,   /* NAME.bias: (out), a linear's bias (qwen2) */
  FDY_LLAMA_PART_DENSE,  /* NAME.weight: (out, in), an unquantized linear */
} fdy_llama_part;

/* A linear's quantization as config.json gives it: `given` when the module
 * has its own entry in "quantization" (a mixed-precision override), else
 * the default. */
typedef struct fdy_llama_module_quant {
  fdy_llama_quant quant;
  bool given;
} fdy_llama_module_quant;

/* Entries of a quantization table of config: one per (module, layer)
 * pair, layer -1 for the modules outside the layers; only the linear
 * modules' entries are read. */
size_t fdy_llama_quant_count(const fdy_llama_config *config);
/* The entry of module m in layer `layer` (-1 outside the layers). */
size_t fdy_llama_quant_index(fdy_llama_module m, int64_t layer);
/* Whether path names a linear module of config as MLX does
 * ("model.embed_tokens", "lm_head" when untied,
 * "model.layers.N.self_attn.q_proj", ...): then *m and *layer (-1
 * outside the layers) are set. */
bool fdy_llama_linear_of(const fdy_llama_config *config, const char *path,
                         fdy_llama_module *m, int64_t *layer);
/* The name of module m in layer `layer` (-1 outside the layers) into
 * buf, without a suffix: "model.layers.3.mlp.down_proj". */
void fdy_llama_module_name(fdy_llama_module m, int64_t layer, char *buf,
                           size_t cap);

/* One tensor a configuration implies. */
typedef struct fdy_llama_tensor_spec {
  char name[FDY_LLAMA_NAME_MAX]; /* "model.layers.3.self_attn.q_proj.scales" */
  size_t module_len; /* name[0, module_len) is the module's name, without the
                        ".weight"/".scales"/".biases" suffix */
  fdy_llama_module module;
  fdy_llama_part part;
  fdy_dtype dtype; /* U32 for PACKED, else the config's dtype */
  fdy_shape shape;
  int64_t layer;         /* decoder layer, or -1 outside the layers */
  uint32_t out_features; /* of the linear (0 for a norm or bias) */
  uint32_t in_features;  /* of the linear (0 for a norm or bias) */
  fdy_llama_quant quant; /* of the linear (zero for a norm or bias) */
} fdy_llama_tensor_spec;

/* A checkpoint's tensors as the loader holds them. Every tensor pointer
 * borrows from the open safetensors files; layers is owned by whoever
 * holds the struct. */
typedef struct fdy_llama_weights {
  fdy_llama_linear embed;
  fdy_llama_layer_weights *layers; /* num_layers */
  const fdy_st_tensor *final_norm; /* (hidden) */
  fdy_llama_linear lm_head;        /* untied only; the loader copies the
                                      embedding here when tied */
} fdy_llama_weights;

/* The number of tensors a checkpoint of config with the quantization
 * table quant (fdy_llama_quant_count entries; NULL: every linear at the
 * config's default) holds: per decoder layer 2 norms, 3 tensors per
 * quantized linear, 1 per unquantized one, and the family's vectors (3
 * biases for qwen2, 2 norms for qwen3); the final norm, the embedding
 * and, when untied, the LM head. config must be one fdy_llama_config_parse
 * accepted (its limits keep every count, name and dimension in range). */
size_t fdy_llama_layout_count(const fdy_llama_config *config,
                              const fdy_llama_module_quant *quant);

/* Writes the fdy_llama_layout_count(config, quant) tensors into
 * out[0 .. count), in layout order (see the top of this file). Cannot
 * fail; config and quant as for fdy_llama_layout_count. */
void fdy_llama_layout(const fdy_llama_config *config,
                      const fdy_llama_module_quant *quant,
                      fdy_llama_tensor_spec *out);

/* fdy_llama_layout into a new array: *out (calloc'd; the caller frees it)
 * of *count tensors. FDY_ERR_OUT_OF_MEMORY leaves *out NULL. */
fdy_status fdy_llama_layout_new(const fdy_llama_config *config,
                                const fdy_llama_module_quant *quant,
                                fdy_llama_tensor_spec **out, size_t *count,
                                fdy_error *err);

/* fdy_llama_config_parse (config.c), and when quant is not NULL the
 * quantization of every linear as config.json gives it: *quant is malloc'd
 * with fdy_llama_quant_count(out) entries (the caller frees it; NULL on
 * failure). */
fdy_status fdy_llama_config_parse_quant(const char *json, size_t len,
                                        const char *path, fdy_llama_config *out,
                                        fdy_llama_module_quant **quant,
                                        fdy_error *err);

/* The linear that spec is part of in w (&w->layers[spec->layer].q for a
 * q_proj tensor, &w->embed, ...), or NULL for a norm or a bias. spec->layer
 * must be below the number of layers w->layers holds. */
fdy_llama_linear *fdy_llama_weights_linear(fdy_llama_weights *w,
                                           const fdy_llama_tensor_spec *spec);

/* The tensor pointer in w that spec fills (w->layers[spec->layer].q.scales,
 * w->final_norm, ...); never NULL. Same precondition. */
const fdy_st_tensor **fdy_llama_weights_slot(fdy_llama_weights *w,
                                             const fdy_llama_tensor_spec *spec);

/* The quantization table of an open model (fdy_llama_quant_count entries):
 * what it was loaded with. */
const fdy_llama_module_quant *
fdy_llama_model_quant(const fdy_llama_model *model);

/* The loaded tensor of an open model that spec names (the embedding's for
 * the LM head of a tied model); spec from fdy_llama_layout of the model's
 * config. */
const fdy_st_tensor *fdy_llama_model_tensor(const fdy_llama_model *model,
                                            const fdy_llama_tensor_spec *spec);

#endif
