/* The Llama MLX layout table (see layout.h): one row per module, in layout
 * order, with its name, where it occurs, its dimensions in terms of the
 * configuration and the field of the loaded weights it fills. Every
 * expected tensor is derived from these rows and the quantization of each
 * linear. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"

/* A dimension taken from the configuration. */
typedef enum dim {
  DIM_NONE, /* a norm has no input dimension */
  DIM_HIDDEN,
  DIM_FFN,   /* intermediate_size */
  DIM_Q,     /* num_heads * head_dim */
  DIM_KV,    /* num_kv_heads * head_dim */
  DIM_VOCAB, /* vocab_size */
  DIM_HEAD,  /* head_dim */
} dim;

/* Where a module occurs. */
typedef enum scope {
  GLOBAL,    /* once */
  PER_LAYER, /* once per decoder layer, named model.layers.N.NAME */
  UNTIED,    /* once, only when the embeddings are untied */
  QKV_BIAS,  /* per layer, a bias vector, when config->qkv_bias */
  QK_NORM,   /* per layer, a norm, when config->qk_norm */
} scope;

typedef struct module_row {
  const char *name;
  scope scope;
  dim out, in;  /* a linear (out, in); a norm or bias (out) when in is
                   DIM_NONE */
  size_t field; /* offset of the fdy_llama_linear (linear) or of the tensor
                   pointer (norm) in fdy_llama_layer_weights (PER_LAYER)
                   or fdy_llama_weights */
} module_row;

#define IN_LAYER(f) offsetof(fdy_llama_layer_weights, f)
#define IN_MODEL(f) offsetof(fdy_llama_weights, f)

static const module_row rows[FDY_LLAMA_MODULE_COUNT] = {
    [FDY_LLAMA_EMBED] = {"model.embed_tokens", GLOBAL, DIM_VOCAB, DIM_HIDDEN,
                         IN_MODEL(embed)},
    [FDY_LLAMA_INPUT_NORM] = {"input_layernorm", PER_LAYER, DIM_HIDDEN,
                              DIM_NONE, IN_LAYER(input_norm)},
    [FDY_LLAMA_Q_PROJ] = {"self_attn.q_proj", PER_LAYER, DIM_Q, DIM_HIDDEN,
                          IN_LAYER(q)},
    [FDY_LLAMA_K_PROJ] = {"self_attn.k_proj", PER_LAYER, DIM_KV, DIM_HIDDEN,
                          IN_LAYER(k)},
    [FDY_LLAMA_V_PROJ] = {"self_attn.v_proj", PER_LAYER, DIM_KV, DIM_HIDDEN,
                          IN_LAYER(v)},
    [FDY_LLAMA_Q_BIAS] = {"self_attn.q_proj", QKV_BIAS, DIM_Q, DIM_NONE,
                          IN_LAYER(q_bias)},
    [FDY_LLAMA_K_BIAS] = {"self_attn.k_proj", QKV_BIAS, DIM_KV, DIM_NONE,
                          IN_LAYER(k_bias)},
    [FDY_LLAMA_V_BIAS] = {"self_attn.v_proj", QKV_BIAS, DIM_KV, DIM_NONE,
                          IN_LAYER(v_bias)},
    [FDY_LLAMA_Q_NORM] = {"self_attn.q_norm", QK_NORM, DIM_HEAD, DIM_NONE,
                          IN_LAYER(q_norm)},
    [FDY_LLAMA_K_NORM] = {"self_attn.k_norm", QK_NORM, DIM_HEAD, DIM_NONE,
                          IN_LAYER(k_norm)},
    [FDY_LLAMA_O_PROJ] = {"self_attn.o_proj", PER_LAYER, DIM_HIDDEN, DIM_Q,
                          IN_LAYER(o)},
    [FDY_LLAMA_POST_NORM] = {"post_attention_layernorm", PER_LAYER, DIM_HIDDEN,
                             DIM_NONE, IN_LAYER(post_norm)},
    [FDY_LLAMA_GATE_PROJ] = {"mlp.gate_proj", PER_LAYER, DIM_FFN, DIM_HIDDEN,
                             IN_LAYER(gate)},
    [FDY_LLAMA_UP_PROJ] = {"mlp.up_proj", PER_LAYER, DIM_FFN, DIM_HIDDEN,
                           IN_LAYER(up)},
    [FDY_LLAMA_DOWN_PROJ] = {"mlp.down_proj", PER_LAYER, DIM_HIDDEN, DIM_FFN,
                             IN_LAYER(down)},
    [FDY_LLAMA_FINAL_NORM] = {"model.norm", GLOBAL, DIM_HIDDEN, DIM_NONE,
                              IN_MODEL(final_norm)},
    [FDY_LLAMA_LM_HEAD] = {"lm_head", UNTIED, DIM_VOCAB, DIM_HIDDEN,
                           IN_MODEL(lm_head)},
};

static uint32_t dim_of(const fdy_llama_config *c, dim d) {
  switch (d) {
  case DIM_HIDDEN:
    return c->hidden_size;
  case DIM_FFN:
    return c->intermediate_size;
  case DIM_Q:
    return c->num_heads * c->head_dim;
  case DIM_KV:
    return c->num_kv_heads * c->head_dim;
  case DIM_VOCAB:
    return c->vocab_size;
  case DIM_HEAD:
    return c->head_dim;
  case DIM_NONE:
    break;
  }
  return 0;
}

/* Whether the row's module is named model.layers.N.NAME. */
static bool per_layer(const module_row *r) {
  return r->scope == PER_LAYER || r->scope == QKV_BIAS || r->scope == QK_NORM;
}

static bool present(const fdy_llama_config *c, const module_row *r) {
  switch (r->scope) {
  case UNTIED:
    return !c->tie_word_embeddings;
  case QKV_BIAS:
    return c->qkv_bias;
  case QK_NORM:
    return c->qk_norm;
  default:
    return true;
  }
}

/* The quantization of module m in layer (-1 outside the layers). */
static fdy_llama_quant quant_of(const fdy_llama_config *c,
                                const fdy_llama_module_quant *quant,
                                fdy_llama_module m, int64_t layer) {
  if (quant != NULL) {
    return quant[fdy_llama_quant_index(m, layer)].quant;
  }
  return (fdy_llama_quant){c->bits, c->group_size};
}

/* Tensors of one occurrence: a norm vector, a quantized linear's three
 * parts or an unquantized linear's weight. */
static size_t part_count(const fdy_llama_config *c,
                         const fdy_llama_module_quant *quant,
                         fdy_llama_module m, int64_t layer) {
  if (rows[m].in == DIM_NONE) {
    return 1;
  }
  return quant_of(c, quant, m, layer).bits != 0 ? 3 : 1;
}

size_t fdy_llama_quant_count(const fdy_llama_config *config) {
  return ((size_t)config->num_layers + 1) * FDY_LLAMA_MODULE_COUNT;
}

size_t fdy_llama_quant_index(fdy_llama_module m, int64_t layer) {
  return (size_t)(layer + 1) * FDY_LLAMA_MODULE_COUNT + m;
}

void fdy_llama_module_name(fdy_llama_module m, int64_t layer, char *buf,
                           size_t cap) {
  if (layer >= 0) {
    snprintf(buf, cap, "model.layers.%lld.%s", (long long)layer, rows[m].name);
  } else {
    snprintf(buf, cap, "%s", rows[m].name);
  }
}

bool fdy_llama_linear_of(const fdy_llama_config *config, const char *path,
                         fdy_llama_module *m, int64_t *layer) {
  static const char prefix[] = "model.layers.";
  int64_t l = -1;
  const char *rest = path;
  if (strncmp(path, prefix, sizeof prefix - 1) == 0) {
    const char *p = path + sizeof prefix - 1;
    uint64_t n = 0;
    size_t digits = 0;
    while (p[digits] >= '0' && p[digits] <= '9' && digits < 10) {
      n = n * 10 + (uint64_t)(p[digits] - '0');
      digits++;
    }
    if (digits == 0 || (digits > 1 && p[0] == '0') || p[digits] != '.' ||
        n >= config->num_layers) {
      return false;
    }
    l = (int64_t)n;
    rest = p + digits + 1;
  }
  for (size_t k = 0; k < FDY_LLAMA_MODULE_COUNT; k++) {
    const module_row *r = &rows[k];
    if (r->in != DIM_NONE && per_layer(r) == (l >= 0) && present(config, r) &&
        strcmp(rest, r->name) == 0) {
      *m = (fdy_llama_module)k;
      *layer = l;
      return true;
    }
  }
  return false;
}

/* Fills s as part `part` of module m in layer (-1 outside the layers); a
 * norm's or bias's features stay 0. */
static void set_spec(fdy_llama_tensor_spec *s, fdy_llama_module m,
                     int64_t layer, fdy_llama_part part, fdy_dtype dtype,
                     fdy_shape shape) {
  static const char *const suffix[] = {
      [FDY_LLAMA_PART_PACKED] = "weight", [FDY_LLAMA_PART_SCALES] = "scales",
      [FDY_LLAMA_PART_BIASES] = "biases", [FDY_LLAMA_PART_NORM] = "weight",
      [FDY_LLAMA_PART_BIAS] = "bias",     [FDY_LLAMA_PART_DENSE] = "weight"};
  char module[FDY_LLAMA_NAME_MAX - 8]; /* room for ".weight" */
  fdy_llama_module_name(m, layer, module, sizeof module);
  snprintf(s->name, sizeof s->name, "%s.%s", module, suffix[part]);
  s->module_len = strlen(module);
  s->module = m;
  s->part = part;
  s->dtype = dtype;
  s->shape = shape;
  s->layer = layer;
  s->out_features = 0;
  s->in_features = 0;
  s->quant = (fdy_llama_quant){0, 0};
}

/* Writes the tensors of module m in layer (or -1) to out; returns how
 * many. */
static size_t emit(const fdy_llama_config *c,
                   const fdy_llama_module_quant *quant, fdy_llama_module m,
                   int64_t layer, fdy_llama_tensor_spec *out) {
  const module_row *r = &rows[m];
  uint32_t out_dim = dim_of(c, r->out);
  if (r->in == DIM_NONE) {
    set_spec(out, m, layer,
             r->scope == QKV_BIAS ? FDY_LLAMA_PART_BIAS : FDY_LLAMA_PART_NORM,
             c->dtype, FDY_SHAPE(out_dim));
    return 1;
  }
  uint32_t in_dim = dim_of(c, r->in);
  fdy_llama_quant q = quant_of(c, quant, m, layer);
  size_t n = 1;
  if (q.bits == 0) {
    set_spec(&out[0], m, layer, FDY_LLAMA_PART_DENSE, c->dtype,
             FDY_SHAPE(out_dim, in_dim));
  } else {
    uint64_t packed = (uint64_t)in_dim * q.bits / 32;
    uint64_t groups = in_dim / q.group_size;
    set_spec(&out[0], m, layer, FDY_LLAMA_PART_PACKED, FDY_DTYPE_U32,
             FDY_SHAPE(out_dim, packed));
    set_spec(&out[1], m, layer, FDY_LLAMA_PART_SCALES, c->dtype,
             FDY_SHAPE(out_dim, groups));
    set_spec(&out[2], m, layer, FDY_LLAMA_PART_BIASES, c->dtype,
             FDY_SHAPE(out_dim, groups));
    n = 3;
  }
  for (size_t k = 0; k < n; k++) {
    out[k].out_features = out_dim;
    out[k].in_features = in_dim;
    out[k].quant = q;
  }
  return n;
}

size_t fdy_llama_layout_count(const fdy_llama_config *config,
                              const fdy_llama_module_quant *quant) {
  size_t n = 0;
  for (size_t m = 0; m < FDY_LLAMA_MODULE_COUNT; m++) {
    const module_row *r = &rows[m];
    if (!present(config, r)) {
      continue;
    }
    if (!per_layer(r)) {
      n += part_count(config, quant, (fdy_llama_module)m, -1);
      continue;
    }
    for (uint32_t l = 0; l < config->num_layers; l++) {
      n += part_count(config, quant, (fdy_llama_module)m, l);
    }
  }
  return n;
}

void fdy_llama_layout(const fdy_llama_config *config,
                      const fdy_llama_module_quant *quant,
                      fdy_llama_tensor_spec *out) {
  size_t n = 0;
  for (size_t m = 0; m < FDY_LLAMA_MODULE_COUNT; m++) {
    if (!per_layer(&rows[m])) {
      if (present(config, &rows[m])) {
        n += emit(config, quant, (fdy_llama_module)m, -1, out + n);
      }
      continue;
    }
    /* a run of per-layer rows is one layer's unit, repeated per layer */
    size_t end = m;
    while (end < FDY_LLAMA_MODULE_COUNT && per_layer(&rows[end])) {
      end++;
    }
    for (uint32_t l = 0; l < config->num_layers; l++) {
      for (size_t k = m; k < end; k++) {
        if (present(config, &rows[k])) {
          n += emit(config, quant, (fdy_llama_module)k, l, out + n);
        }
      }
    }
    m = end - 1;
  }
}

/* The field spec's module fills: a linear or a norm's tensor pointer. */
static void *field(fdy_llama_weights *w, const fdy_llama_tensor_spec *spec) {
  const module_row *r = &rows[spec->module];
  char *base = per_layer(r) ? (char *)&w->layers[spec->layer] : (char *)w;
  return base + r->field;
}

fdy_llama_linear *fdy_llama_weights_linear(fdy_llama_weights *w,
                                           const fdy_llama_tensor_spec *spec) {
  return spec->part == FDY_LLAMA_PART_NORM || spec->part == FDY_LLAMA_PART_BIAS
             ? NULL
             : field(w, spec);
}

const fdy_st_tensor **
fdy_llama_weights_slot(fdy_llama_weights *w,
                       const fdy_llama_tensor_spec *spec) {
  fdy_llama_linear *q = fdy_llama_weights_linear(w, spec);
  switch (spec->part) {
  case FDY_LLAMA_PART_PACKED:
  case FDY_LLAMA_PART_DENSE:
    return &q->weight;
  case FDY_LLAMA_PART_SCALES:
    return &q->scales;
  case FDY_LLAMA_PART_BIASES:
    return &q->biases;
  case FDY_LLAMA_PART_NORM:
  case FDY_LLAMA_PART_BIAS:
    break;
  }
  return field(w, spec);
}

fdy_status fdy_llama_layout_new(const fdy_llama_config *config,
                                const fdy_llama_module_quant *quant,
                                fdy_llama_tensor_spec **out, size_t *count,
                                fdy_error *err) {
  size_t n = fdy_llama_layout_count(config, quant);
  *out = calloc(n, sizeof **out);
  if (!*out) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_llama_layout(config, quant, *out);
  *count = n;
  return FDY_OK;
}
