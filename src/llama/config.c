/* config.json of a Llama-family checkpoint (Hugging Face fields plus the MLX
 * "quantization" block, with its per-module entries) parsed into
 * fdy_llama_config and, for the loader, the quantization of every linear.
 * Unknown fields are ignored (real configs carry many); every field
 * Foundry reads is checked for presence, type and range, and errors name
 * the field in err->name. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/input.h"
#include "layout.h"
#include "loader.h"

#define MAX_DIM    (1u << 20)
#define MAX_VOCAB  (1u << 24)
#define MAX_LAYERS 4096u

typedef struct parse_ctx {
  const char *path;
  fdy_error *err;
} parse_ctx;

/* "PATH: field 'FIELD' MESSAGE", or with a topic (unsupported values)
 * "PATH: unsupported TOPIC: field 'FIELD' MESSAGE"; err->name = field. */
static fdy_status vfield_error(const parse_ctx *p, fdy_status kind,
                               const char *topic, const char *field,
                               const char *fmt, va_list args) {
  fdy_error_vsetf(p->err, kind, field, 0, 0, fmt, args);
  if (topic) {
    fdy_error_prepend(p->err, "%s: unsupported %s: field '%s' ", p->path, topic,
                      field);
  } else {
    fdy_error_prepend(p->err, "%s: field '%s' ", p->path, field);
  }
  return kind;
}

static fdy_status field_error(const parse_ctx *p, fdy_status kind,
                              const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static fdy_status field_error(const parse_ctx *p, fdy_status kind,
                              const char *field, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fdy_status s = vfield_error(p, kind, NULL, field, fmt, args);
  va_end(args);
  return s;
}

/* FDY_ERR_UNSUPPORTED for a valid value Foundry does not handle. */
static fdy_status unsupported_error(const parse_ctx *p, const char *topic,
                                    const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static fdy_status unsupported_error(const parse_ctx *p, const char *topic,
                                    const char *field, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fdy_status s = vfield_error(p, FDY_ERR_UNSUPPORTED, topic, field, fmt, args);
  va_end(args);
  return s;
}

/* An integer field in [min, max]; absent or null takes def when
 * required is false. */
static fdy_status get_uint(const parse_ctx *p, json_t *obj, const char *key,
                           const char *field, bool required, uint32_t def,
                           uint32_t min, uint32_t max, uint32_t *out) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) {
    if (required) {
      return field_error(p, FDY_ERR_SCHEMA, field, "is missing");
    }
    *out = def;
    return FDY_OK;
  }
  if (!json_is_integer(v)) {
    return field_error(p, FDY_ERR_SCHEMA, field, "must be an integer");
  }
  json_int_t x = json_integer_value(v);
  if (x < (json_int_t)min || x > (json_int_t)max) {
    return field_error(p, FDY_ERR_SCHEMA, field,
                       "must be from %u to %u, got %lld", min, max,
                       (long long)x);
  }
  *out = (uint32_t)x;
  return FDY_OK;
}

/* A required positive finite number (integer or real). */
static fdy_status get_positive(const parse_ctx *p, json_t *obj, const char *key,
                               const char *field, double *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) {
    return field_error(p, FDY_ERR_SCHEMA, field, "is missing");
  }
  if (!json_is_number(v)) {
    return field_error(p, FDY_ERR_SCHEMA, field, "must be a number");
  }
  double x = json_number_value(v);
  if (!(x > 0) || !isfinite(x)) {
    return field_error(p, FDY_ERR_SCHEMA, field, "must be positive, got %g", x);
  }
  *out = x;
  return FDY_OK;
}

static fdy_status parse_rope_scaling(const parse_ctx *p, json_t *root,
                                     fdy_llama_config *c) {
  json_t *rs = json_object_get(root, "rope_scaling");
  if (!rs || json_is_null(rs)) {
    return FDY_OK;
  }
  if (!json_is_object(rs)) {
    return field_error(p, FDY_ERR_SCHEMA, "rope_scaling",
                       "must be an object or null");
  }
  json_t *type = json_object_get(rs, "rope_type");
  const char *type_field = "rope_scaling.rope_type";
  if (!type) {
    type = json_object_get(rs, "type");
    type_field = "rope_scaling.type";
  }
  if (!type) {
    return field_error(p, FDY_ERR_SCHEMA, "rope_scaling.rope_type",
                       "is missing");
  }
  if (!json_is_string(type)) {
    return field_error(p, FDY_ERR_SCHEMA, type_field, "must be a string");
  }
  const char *name = json_string_value(type);
  if (strcmp(name, "default") == 0) {
    return FDY_OK;
  }
  if (strcmp(name, "llama3") != 0) {
    return unsupported_error(p, "rope scaling", type_field,
                             "is '%.40s'; only llama3 scaling or none is "
                             "supported",
                             name);
  }
  fdy_status s;
  c->rope_llama3 = true;
  if ((s = get_positive(p, rs, "factor", "rope_scaling.factor",
                        &c->rope_factor)) != FDY_OK ||
      (s = get_positive(p, rs, "low_freq_factor",
                        "rope_scaling.low_freq_factor",
                        &c->rope_low_freq_factor)) != FDY_OK ||
      (s = get_positive(p, rs, "high_freq_factor",
                        "rope_scaling.high_freq_factor",
                        &c->rope_high_freq_factor)) != FDY_OK ||
      (s = get_uint(p, rs, "original_max_position_embeddings",
                    "rope_scaling.original_max_position_embeddings", true, 0, 1,
                    UINT32_MAX >> 1, &c->rope_original_max_position)) !=
          FDY_OK) {
    return s;
  }
  if (c->rope_high_freq_factor <= c->rope_low_freq_factor) {
    return field_error(p, FDY_ERR_SCHEMA, "rope_scaling.high_freq_factor",
                       "must be greater than low_freq_factor");
  }
  return FDY_OK;
}

static fdy_status parse_token_ids(const parse_ctx *p, json_t *root,
                                  fdy_llama_config *c) {
  json_t *bos = json_object_get(root, "bos_token_id");
  c->bos_id = -1;
  if (bos && !json_is_null(bos)) {
    if (!json_is_integer(bos) || json_integer_value(bos) < 0 ||
        json_integer_value(bos) >= (json_int_t)c->vocab_size) {
      return field_error(p, FDY_ERR_SCHEMA, "bos_token_id",
                         "must be an integer id below vocab_size");
    }
    c->bos_id = (int32_t)json_integer_value(bos);
  }
  json_t *eos = json_object_get(root, "eos_token_id");
  c->eos_count = 0;
  if (!eos || json_is_null(eos)) {
    return FDY_OK;
  }
  size_t n = json_is_array(eos) ? json_array_size(eos) : 1;
  if (!json_is_array(eos) && !json_is_integer(eos)) {
    return field_error(p, FDY_ERR_SCHEMA, "eos_token_id",
                       "must be an integer or a list of integers");
  }
  if (n > FDY_LLAMA_MAX_EOS) {
    return unsupported_error(p, "EOS ids", "eos_token_id",
                             "lists %zu ids; at most %d are supported", n,
                             FDY_LLAMA_MAX_EOS);
  }
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_is_array(eos) ? json_array_get(eos, i) : eos;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) >= (json_int_t)c->vocab_size) {
      return field_error(p, FDY_ERR_SCHEMA, "eos_token_id",
                         "must hold integer ids below vocab_size");
    }
    c->eos_ids[c->eos_count++] = (int32_t)json_integer_value(v);
  }
  return FDY_OK;
}

/* Every linear's input width must hold whole quantization groups. */
static fdy_status check_groups(const parse_ctx *p, const fdy_llama_config *c) {
  if (c->hidden_size % c->group_size != 0) {
    return field_error(p, FDY_ERR_SCHEMA, "hidden_size",
                       "must be a multiple of quantization.group_size");
  }
  if (c->intermediate_size % c->group_size != 0) {
    return field_error(p, FDY_ERR_SCHEMA, "intermediate_size",
                       "must be a multiple of quantization.group_size");
  }
  if ((c->num_heads * c->head_dim) % c->group_size != 0) {
    return field_error(p, FDY_ERR_SCHEMA, "head_dim",
                       "times num_attention_heads must be a multiple of "
                       "quantization.group_size");
  }
  return FDY_OK;
}

/* out = "FIELD.NAME" (an error's field name; a long FIELD is cut). */
static void subfield(char out[FDY_ERROR_NAME_MAX], const char *field,
                     const char *name) {
  snprintf(out, FDY_ERROR_NAME_MAX, "%.*s.%s", FDY_ERROR_NAME_MAX / 2, field,
           name);
}

/* mode of a quantization object q (absent or null = affine, the only
 * supported mode); field is "quantization" or "quantization.MODULE". */
static fdy_status check_mode(const parse_ctx *p, json_t *q, const char *field) {
  char name[FDY_ERROR_NAME_MAX];
  subfield(name, field, "mode");
  json_t *mode = json_object_get(q, "mode");
  if (!mode || json_is_null(mode)) {
    return FDY_OK;
  }
  if (!json_is_string(mode)) {
    return field_error(p, FDY_ERR_SCHEMA, name, "must be a string");
  }
  if (strcmp(json_string_value(mode), "affine") != 0) {
    return unsupported_error(p, "quantization", name,
                             "is '%.40s'; only affine quantization is "
                             "supported",
                             json_string_value(mode));
  }
  return FDY_OK;
}

/* The mode, group_size and bits of quantization object q (field as for
 * check_mode), checked in that order, so that an error names the real
 * reason (an nvfp4 checkpoint has groups of 16). */
static fdy_status parse_quant(const parse_ctx *p, json_t *q, const char *field,
                              fdy_llama_quant *out) {
  char group_field[FDY_ERROR_NAME_MAX], bits_field[FDY_ERROR_NAME_MAX];
  subfield(group_field, field, "group_size");
  subfield(bits_field, field, "bits");
  fdy_status s;
  if ((s = check_mode(p, q, field)) != FDY_OK ||
      (s = get_uint(p, q, "group_size", group_field, true, 0, 0, UINT32_MAX,
                    &out->group_size)) != FDY_OK ||
      (s = get_uint(p, q, "bits", bits_field, true, 0, 0, UINT32_MAX,
                    &out->bits)) != FDY_OK) {
    return s;
  }
  if (out->group_size != 32 && out->group_size != 64 &&
      out->group_size != 128) {
    return unsupported_error(p, "quantization", group_field,
                             "is %u; only groups of 32, 64 or 128 are "
                             "supported",
                             out->group_size);
  }
  if (out->bits != 4 && out->bits != 8) {
    return unsupported_error(p, "quantization", bits_field,
                             "is %u; only 4-bit and 8-bit quantization is "
                             "supported",
                             out->bits);
  }
  return FDY_OK;
}

/* Input features of linear module m. */
static uint32_t in_features(const fdy_llama_config *c, fdy_llama_module m) {
  switch (m) {
  case FDY_LLAMA_O_PROJ:
    return c->num_heads * c->head_dim;
  case FDY_LLAMA_DOWN_PROJ:
    return c->intermediate_size;
  default:
    return c->hidden_size;
  }
}

/* The per-module entries of quantization q (mixed-precision recipes put an
 * object, or false for a module left unquantized, under the module's
 * path; true means the default): each must name a linear of the model and
 * hold a supported quantization whose groups divide the module's inputs.
 * Fills table (when not NULL) and counts the entries. */
static fdy_status parse_overrides(const parse_ctx *p, json_t *q,
                                  fdy_llama_config *c,
                                  fdy_llama_module_quant *table) {
  const char *key;
  json_t *value;
  json_object_foreach(q, key, value) {
    if (!json_is_object(value) && !json_is_boolean(value)) {
      continue;
    }
    char field[FDY_ERROR_NAME_MAX];
    snprintf(field, sizeof field, "quantization.%s", key);
    fdy_llama_module m;
    int64_t layer = -1;
    if (!fdy_llama_linear_of(c, key, &m, &layer)) {
      return field_error(p, FDY_ERR_SCHEMA, field,
                         "names no linear layer of this model "
                         "(model.embed_tokens, lm_head when untied, "
                         "model.layers.N.self_attn.q_proj ... "
                         "model.layers.N.mlp.down_proj with N below "
                         "num_hidden_layers)");
    }
    fdy_llama_quant quant = {c->bits, c->group_size};
    if (json_is_false(value)) {
      quant = (fdy_llama_quant){0, 0};
    } else if (json_is_object(value)) {
      fdy_status s = parse_quant(p, value, field, &quant);
      if (s != FDY_OK) {
        return s;
      }
      if (in_features(c, m) % quant.group_size != 0) {
        char group_field[FDY_ERROR_NAME_MAX];
        subfield(group_field, field, "group_size");
        return field_error(p, FDY_ERR_SCHEMA, group_field,
                           "is %u, which does not divide the module's %u "
                           "input features",
                           quant.group_size, in_features(c, m));
      }
    }
    if (table) {
      table[fdy_llama_quant_index(m, layer)] =
          (fdy_llama_module_quant){quant, true};
    }
    c->quant_overrides++;
  }
  return FDY_OK;
}

/* quantization: absent or null for an unquantized checkpoint (bits 0);
 * else its default (mode, group_size, bits) and its per-module entries. */
static fdy_status parse_quantization(const parse_ctx *p, json_t *root,
                                     fdy_llama_config *c,
                                     fdy_llama_module_quant *table) {
  json_t *q = json_object_get(root, "quantization");
  if (!q || json_is_null(q)) {
    return FDY_OK;
  }
  if (!json_is_object(q)) {
    return field_error(p, FDY_ERR_SCHEMA, "quantization",
                       "must be an object or null");
  }
  fdy_llama_quant quant = {0, 0};
  fdy_status s = parse_quant(p, q, "quantization", &quant);
  if (s != FDY_OK) {
    return s;
  }
  c->bits = quant.bits;
  c->group_size = quant.group_size;
  if ((s = check_groups(p, c)) != FDY_OK) {
    return s;
  }
  for (size_t i = 0; table && i < fdy_llama_quant_count(c); i++) {
    table[i] = (fdy_llama_module_quant){quant, false};
  }
  return parse_overrides(p, q, c, table);
}

static const char *const family_names[FDY_LLAMA_FAMILY_COUNT] = {
    [FDY_LLAMA_FAMILY_LLAMA] = "llama",
    [FDY_LLAMA_FAMILY_MISTRAL] = "mistral",
    [FDY_LLAMA_FAMILY_QWEN2] = "qwen2",
    [FDY_LLAMA_FAMILY_QWEN3] = "qwen3",
};

/* The families config.json may name (the others are not implemented). */
static const bool family_supported[FDY_LLAMA_FAMILY_COUNT] = {
    [FDY_LLAMA_FAMILY_LLAMA] = true,
    [FDY_LLAMA_FAMILY_MISTRAL] = true,
    [FDY_LLAMA_FAMILY_QWEN2] = true,
    [FDY_LLAMA_FAMILY_QWEN3] = true,
};

const char *fdy_llama_family_name(fdy_llama_family family) {
  return (unsigned)family < FDY_LLAMA_FAMILY_COUNT ? family_names[family]
                                                   : "unknown";
}

/* Whether field key is set: present and neither null, false nor the
 * integer 0 (the values that leave the math alone). */
static bool set_field(json_t *root, const char *key) {
  json_t *v = json_object_get(root, key);
  return v && !json_is_null(v) && !json_is_false(v) &&
         !(json_is_integer(v) && json_integer_value(v) == 0);
}

/* Fields of a sliding window, mixture of experts or per-layer attention
 * kinds: each would change the math, and none is implemented. */
static fdy_status check_unimplemented(const parse_ctx *p, json_t *root,
                                      fdy_llama_family family) {
  static const char *const experts[] = {
      "num_experts", "num_local_experts", "num_experts_per_tok",
      "n_routed_experts", "moe_intermediate_size"};
  for (size_t i = 0; i < sizeof experts / sizeof experts[0]; i++) {
    if (set_field(root, experts[i])) {
      return unsupported_error(p, "mixture of experts", experts[i],
                               "is set; only dense models are supported");
    }
  }
  /* mistral's sliding_window applies when not null; qwen2 and qwen3 apply
   * theirs only with use_sliding_window */
  if (family == FDY_LLAMA_FAMILY_MISTRAL && set_field(root, "sliding_window")) {
    return unsupported_error(p, "sliding window", "sliding_window",
                             "is set; only full attention (null) is "
                             "supported");
  }
  if (set_field(root, "use_sliding_window")) {
    return unsupported_error(p, "sliding window", "use_sliding_window",
                             "is true; only full attention is supported");
  }
  json_t *types = json_object_get(root, "layer_types");
  if (types && !json_is_null(types)) {
    if (!json_is_array(types)) {
      return field_error(p, FDY_ERR_SCHEMA, "layer_types",
                         "must be a list of strings");
    }
    size_t i;
    json_t *t;
    json_array_foreach(types, i, t) {
      if (!json_is_string(t)) {
        return field_error(p, FDY_ERR_SCHEMA, "layer_types",
                           "must be a list of strings");
      }
      if (strcmp(json_string_value(t), "full_attention") != 0) {
        return unsupported_error(p, "sliding window", "layer_types",
                                 "lists '%.40s' at %zu; only full_attention "
                                 "is supported",
                                 json_string_value(t), i);
      }
    }
  }
  return FDY_OK;
}

/* Fields that would change the architecture: the family (model_type) and
 * what it implies; reject what is not implemented. */
static fdy_status check_architecture(const parse_ctx *p, json_t *root,
                                     fdy_llama_config *c) {
  json_t *mt = json_object_get(root, "model_type");
  if (!mt) {
    return field_error(p, FDY_ERR_SCHEMA, "model_type", "is missing");
  }
  if (!json_is_string(mt)) {
    return field_error(p, FDY_ERR_SCHEMA, "model_type", "must be a string");
  }
  c->family = FDY_LLAMA_FAMILY_COUNT;
  for (unsigned f = 0; f < FDY_LLAMA_FAMILY_COUNT; f++) {
    if (family_supported[f] &&
        strcmp(json_string_value(mt), family_names[f]) == 0) {
      c->family = (fdy_llama_family)f;
    }
  }
  if (c->family == FDY_LLAMA_FAMILY_COUNT) {
    return unsupported_error(p, "model", "model_type",
                             "is '%.40s'; only llama, mistral, qwen2 and "
                             "qwen3 are supported",
                             json_string_value(mt));
  }
  json_t *act = json_object_get(root, "hidden_act");
  if (act &&
      (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0)) {
    return unsupported_error(p, "activation", "hidden_act", "must be \"silu\"");
  }
  /* qwen2's q, k and v always have biases (its attention_bias, if any, is
   * not read); the other families' linears have none */
  c->qkv_bias = c->family == FDY_LLAMA_FAMILY_QWEN2;
  c->qk_norm = c->family == FDY_LLAMA_FAMILY_QWEN3;
  static const char *const biases[] = {"attention_bias", "mlp_bias"};
  for (size_t i = c->qkv_bias ? 1 : 0; i < 2; i++) {
    json_t *b = json_object_get(root, biases[i]);
    if (b && !json_is_boolean(b)) {
      return field_error(p, FDY_ERR_SCHEMA, biases[i], "must be a boolean");
    }
    if (json_is_true(b)) {
      return unsupported_error(p, "linear biases", biases[i],
                               "is true; only linears without biases are "
                               "supported");
    }
  }
  return check_unimplemented(p, root, c->family);
}

static fdy_status parse_sizes(const parse_ctx *p, json_t *root,
                              fdy_llama_config *c) {
  fdy_status s;
  if ((s = get_uint(p, root, "vocab_size", "vocab_size", true, 0, 1, MAX_VOCAB,
                    &c->vocab_size)) != FDY_OK ||
      (s = get_uint(p, root, "hidden_size", "hidden_size", true, 0, 1, MAX_DIM,
                    &c->hidden_size)) != FDY_OK ||
      (s = get_uint(p, root, "intermediate_size", "intermediate_size", true, 0,
                    1, MAX_DIM, &c->intermediate_size)) != FDY_OK ||
      (s = get_uint(p, root, "num_hidden_layers", "num_hidden_layers", true, 0,
                    1, MAX_LAYERS, &c->num_layers)) != FDY_OK ||
      (s = get_uint(p, root, "num_attention_heads", "num_attention_heads", true,
                    0, 1, MAX_DIM, &c->num_heads)) != FDY_OK ||
      (s = get_uint(p, root, "num_key_value_heads", "num_key_value_heads",
                    false, c->num_heads, 1, MAX_DIM, &c->num_kv_heads)) !=
          FDY_OK ||
      (s = get_uint(p, root, "head_dim", "head_dim", false,
                    c->hidden_size / c->num_heads, 1, MAX_DIM, &c->head_dim)) !=
          FDY_OK ||
      (s = get_uint(p, root, "max_position_embeddings",
                    "max_position_embeddings", true, 0, 1, UINT32_MAX >> 1,
                    &c->max_position_embeddings)) != FDY_OK) {
    return s;
  }
  json_t *hd = json_object_get(root, "head_dim");
  if ((!hd || json_is_null(hd)) && c->hidden_size % c->num_heads != 0) {
    return field_error(p, FDY_ERR_SCHEMA, "head_dim",
                       "is missing and hidden_size is not a multiple of "
                       "num_attention_heads");
  }
  if (c->num_heads % c->num_kv_heads != 0) {
    return field_error(p, FDY_ERR_SCHEMA, "num_key_value_heads",
                       "must divide num_attention_heads");
  }
  if (c->head_dim % 2 != 0) {
    return field_error(p, FDY_ERR_SCHEMA, "head_dim", "must be even");
  }
  if ((uint64_t)c->num_heads * c->head_dim > MAX_DIM) {
    return field_error(p, FDY_ERR_SCHEMA, "num_attention_heads",
                       "times head_dim exceeds %u", MAX_DIM);
  }
  return FDY_OK;
}

fdy_status fdy_llama_config_parse_quant(const char *json, size_t len,
                                        const char *path, fdy_llama_config *out,
                                        fdy_llama_module_quant **quant,
                                        fdy_error *err) {
  parse_ctx p = {path, err};
  fdy_llama_module_quant *table = NULL;
  if (quant) {
    *quant = NULL;
  }
  json_t *root = NULL;
  if (fdy_llama_json_parse(path, NULL, json, len, &root, err) != FDY_OK) {
    return FDY_ERR_PARSE;
  }
  fdy_llama_config c;
  memset(&c, 0, sizeof c);
  c.dtype = FDY_DTYPE_F16;
  fdy_status s = FDY_OK;
  if (!json_is_object(root)) {
    s = fdy_llama_file_error(err, FDY_ERR_SCHEMA, path, "not a JSON object");
    goto cleanup;
  }
  json_t *tie = json_object_get(root, "tie_word_embeddings");
  if (tie && !json_is_boolean(tie)) {
    s = field_error(&p, FDY_ERR_SCHEMA, "tie_word_embeddings",
                    "must be a boolean");
    goto cleanup;
  }
  c.tie_word_embeddings = json_is_true(tie);
  if ((s = check_architecture(&p, root, &c)) != FDY_OK ||
      (s = parse_sizes(&p, root, &c)) != FDY_OK ||
      (s = get_positive(&p, root, "rope_theta", "rope_theta", &c.rope_theta)) !=
          FDY_OK ||
      (s = parse_rope_scaling(&p, root, &c)) != FDY_OK ||
      (s = get_positive(&p, root, "rms_norm_eps", "rms_norm_eps",
                        &c.rms_norm_eps)) != FDY_OK ||
      (s = parse_token_ids(&p, root, &c)) != FDY_OK) {
    goto cleanup;
  }
  if (quant && !(table = calloc(fdy_llama_quant_count(&c), sizeof *table))) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  if ((s = parse_quantization(&p, root, &c, table)) != FDY_OK) {
    goto cleanup;
  }
  *out = c;
  if (quant) {
    *quant = table;
    table = NULL;
  }
cleanup:
  free(table);
  json_decref(root);
  return s;
}

fdy_status fdy_llama_config_parse(const char *json, size_t len,
                                  const char *path, fdy_llama_config *out,
                                  fdy_error *err) {
  return fdy_llama_config_parse_quant(json, len, path, out, NULL, err);
}
