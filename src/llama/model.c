/* Opening a checkpoint directory: config.json, then model.safetensors or
 * the shards named by model.safetensors.index.json, then the quantization
 * of every linear (config.json's, except that a linear without an entry
 * whose scales are absent is unquantized, as mlx-lm loads it), then the
 * full tensor inventory. The expected tensors are the layout table's for
 * the config and those quantizations (layout.h: names, dtypes, shapes);
 * every one must be present exactly as expected and no other tensor may
 * exist. Errors name the offending file in
 * err->name and the tensor in the message. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/input.h"
#include "layout.h"
#include "loader.h"

#define MAX_CONFIG_BYTES ((uint64_t)16 << 20)
#define MAX_INDEX_BYTES  ((uint64_t)100 << 20)

struct fdy_llama_model {
  char *dir;
  fdy_llama_config config;
  fdy_llama_module_quant *quant; /* fdy_llama_quant_count(&config) */
  fdy_safetensors **shards;
  size_t shard_count;
  fdy_llama_weights weights; /* lm_head is the embedding when tied */
  uint64_t *layer_bytes;     /* num_layers */
  size_t tensor_count;
  uint64_t total_bytes;
};

/* Reads a whole (small) regular file; *out is malloc'd. FDY_ERR_NOT_FOUND
 * when absent. */
static fdy_status read_file(const char *path, uint64_t limit, char **out,
                            size_t *len, fdy_error *err) {
  return fdy_input_read(path, "checkpoint file", limit, out, len, err);
}

/* The expected tensors of m's config, in layout order; *out is malloc'd.
 * Fills in every linear's dimensions. */
static fdy_status build_expected(fdy_llama_model *m,
                                 fdy_llama_tensor_spec **out, size_t *count,
                                 fdy_error *err) {
  fdy_llama_tensor_spec *specs = NULL;
  size_t n = 0;
  fdy_status s = fdy_llama_layout_new(&m->config, m->quant, &specs, &n, err);
  if (s != FDY_OK) {
    return s;
  }
  for (size_t i = 0; i < n; i++) {
    fdy_llama_linear *q = fdy_llama_weights_linear(&m->weights, &specs[i]);
    if (q) {
      q->out_features = specs[i].out_features;
      q->in_features = specs[i].in_features;
      q->quant = specs[i].quant;
    }
  }
  *out = specs;
  *count = n;
  return FDY_OK;
}

static int expected_cmp(const void *a, const void *b) {
  return strcmp(((const fdy_llama_tensor_spec *)a)->name,
                ((const fdy_llama_tensor_spec *)b)->name);
}

static bool is_expected(const fdy_llama_tensor_spec *sorted, size_t n,
                        const char *name) {
  fdy_llama_tensor_spec key;
  snprintf(key.name, sizeof key.name, "%s", name);
  return strlen(name) < sizeof key.name &&
         bsearch(&key, sorted, n, sizeof *sorted, expected_cmp) != NULL;
}

/* Opens the shards named by an index's weight_map (in order of first
 * appearance). */
static fdy_status open_shards(fdy_llama_model *m, const char *index_path,
                              json_t *weight_map, fdy_error *err) {
  size_t n = json_object_size(weight_map);
  m->shards = calloc(n ? n : 1, sizeof *m->shards);
  if (!m->shards) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  const char *key;
  json_t *value;
  json_object_foreach(weight_map, key, value) {
    const char *file = json_string_value(value);
    if (!file || !*file || strchr(file, '/') || strcmp(file, ".") == 0 ||
        strcmp(file, "..") == 0) {
      return fdy_llama_file_error(err, FDY_ERR_SCHEMA, index_path,
                                  "weight_map entry for tensor '%s' is not "
                                  "a file name in the checkpoint directory",
                                  key);
    }
    bool seen = false;
    for (size_t i = 0; i < m->shard_count && !seen; i++) {
      const char *p = fdy_safetensors_path(m->shards[i]);
      size_t dl = strlen(m->dir);
      seen = strcmp(p + dl + 1, file) == 0;
    }
    if (seen) {
      continue;
    }
    char *path = fdy_path_join(m->dir, file);
    if (!path) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    fdy_status s = fdy_safetensors_open(path, &m->shards[m->shard_count], err);
    free(path);
    if (s != FDY_OK) {
      return s;
    }
    m->shard_count++;
  }
  return FDY_OK;
}

/* Loads the index (when present) and opens every shard. *weight_map is
 * borrowed from *index (NULL for a single file). */
static fdy_status open_files(fdy_llama_model *m, const char *index_path,
                             json_t **index, json_t **weight_map,
                             fdy_error *err) {
  char *text = NULL;
  size_t len = 0;
  fdy_status s = read_file(index_path, MAX_INDEX_BYTES, &text, &len, err);
  if (s == FDY_ERR_NOT_FOUND) {
    char *path = fdy_path_join(m->dir, "model.safetensors");
    m->shards = calloc(1, sizeof *m->shards);
    if (!path || !m->shards) {
      free(path);
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    s = fdy_safetensors_open(path, &m->shards[0], err);
    free(path);
    m->shard_count = s == FDY_OK ? 1 : 0;
    return s;
  }
  if (s != FDY_OK) {
    return s;
  }
  s = fdy_llama_json_parse(index_path, NULL, text, len, index, err);
  free(text);
  if (s != FDY_OK) {
    return s;
  }
  *weight_map = json_object_get(*index, "weight_map");
  if (!json_is_object(*index) || !json_is_object(*weight_map)) {
    return fdy_llama_file_error(err, FDY_ERR_SCHEMA, index_path,
                                "has no weight_map object");
  }
  return open_shards(m, index_path, *weight_map, err);
}

static fdy_status find_tensor(const fdy_llama_model *m, const char *index_path,
                              json_t *weight_map, const char *name,
                              size_t *shard, const fdy_st_tensor **out,
                              fdy_error *err) {
  size_t i = 0;
  if (weight_map) {
    const char *file = json_string_value(json_object_get(weight_map, name));
    if (!file) {
      return fdy_llama_file_error(err, FDY_ERR_NOT_FOUND, index_path,
                                  "missing tensor '%s'", name);
    }
    size_t dl = strlen(m->dir);
    while (strcmp(fdy_safetensors_path(m->shards[i]) + dl + 1, file) != 0) {
      i++;
    }
  }
  const fdy_safetensors *st = m->shards[i];
  if (fdy_safetensors_find(st, name, out, NULL) != FDY_OK) {
    return fdy_llama_file_error(err, FDY_ERR_NOT_FOUND,
                                fdy_safetensors_path(st), "missing tensor '%s'",
                                name);
  }
  *shard = i;
  return FDY_OK;
}

/* Whether any linear of m is quantized. */
static bool any_quantized(const fdy_llama_model *m) {
  for (size_t i = 0; i < fdy_llama_quant_count(&m->config); i++) {
    if (m->quant[i].quant.bits != 0) {
      return true;
    }
  }
  return false;
}

/* Scales, biases, norms and unquantized weights must have the checkpoint's
 * dtype, which the first of them (the embedding's scales or weight,
 * checked first) fixes: F16 or BF16, or F32 when nothing is quantized. */
static fdy_status check_tensor(fdy_llama_model *m,
                               const fdy_llama_tensor_spec *e,
                               const fdy_st_tensor *t, bool first_typed,
                               fdy_error *err) {
  bool typed = e->part != FDY_LLAMA_PART_PACKED;
  bool f32 = !any_quantized(m);
  fdy_dtype want = e->dtype;
  if (typed) {
    if (first_typed &&
        (t->dtype == FDY_DTYPE_F16 || t->dtype == FDY_DTYPE_BF16 ||
         (f32 && t->dtype == FDY_DTYPE_F32))) {
      m->config.dtype = t->dtype;
    }
    want = m->config.dtype;
  }
  if (t->dtype != want) {
    return fdy_llama_file_error(
        err, FDY_ERR_SCHEMA, t->path, "tensor '%s' has dtype %s, expected %s%s",
        t->name, fdy_dtype_name(t->dtype), fdy_dtype_name(want),
        !typed ? ""
        : f32  ? " (F32, F16 or BF16, as the embedding's)"
               : " (F16 or BF16, as the embedding's scales)");
  }
  if (!fdy_shape_equal(t->shape, e->shape)) {
    char have[96], need[96];
    fdy_shape_format(t->shape, have, sizeof have);
    fdy_shape_format(e->shape, need, sizeof need);
    return fdy_llama_file_error(err, FDY_ERR_SCHEMA, t->path,
                                "tensor '%s' has shape %s, expected %s",
                                t->name, have, need);
  }
  return FDY_OK;
}

/* Whether the checkpoint has a tensor named name (in the index's
 * weight_map, or in the one file). */
static bool has_tensor(const fdy_llama_model *m, json_t *weight_map,
                       const char *name) {
  if (weight_map) {
    return json_object_get(weight_map, name) != NULL;
  }
  const fdy_st_tensor *t = NULL;
  return fdy_safetensors_find(m->shards[0], name, &t, NULL) == FDY_OK;
}

/* A quantized linear without an entry of its own in quantization whose
 * NAME.scales the checkpoint lacks is unquantized (mlx-lm's rule: its
 * quantization predicates record no entry for a module they leave
 * unquantized). */
static fdy_status find_unquantized(fdy_llama_model *m, json_t *weight_map,
                                   fdy_error *err) {
  fdy_llama_tensor_spec *specs = NULL;
  size_t n = 0;
  fdy_status s = fdy_llama_layout_new(&m->config, m->quant, &specs, &n, err);
  if (s != FDY_OK) {
    return s;
  }
  for (size_t i = 0; i < n; i++) {
    const fdy_llama_tensor_spec *e = &specs[i];
    fdy_llama_module_quant *q =
        &m->quant[fdy_llama_quant_index(e->module, e->layer)];
    char name[FDY_LLAMA_NAME_MAX + 8];
    snprintf(name, sizeof name, "%.*s.scales", (int)e->module_len, e->name);
    if (e->part == FDY_LLAMA_PART_SCALES && !q->given &&
        !has_tensor(m, weight_map, name)) {
      q->quant = (fdy_llama_quant){0, 0};
    }
  }
  free(specs);
  return FDY_OK;
}

/* Every expected tensor present and right; then nothing else anywhere. */
static fdy_status check_inventory(fdy_llama_model *m,
                                  fdy_llama_tensor_spec *expected, size_t count,
                                  const char *index_path, json_t *weight_map,
                                  fdy_error *err) {
  fdy_status s = FDY_OK;
  bool **marks = calloc(m->shard_count ? m->shard_count : 1, sizeof *marks);
  if (!marks) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (size_t i = 0; i < m->shard_count; i++) {
    size_t n = fdy_safetensors_count(m->shards[i]);
    if (!(marks[i] = calloc(n ? n : 1, sizeof **marks))) {
      s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      goto cleanup;
    }
  }
  for (size_t k = 0; k < count; k++) {
    const fdy_llama_tensor_spec *e = &expected[k];
    size_t shard = 0;
    const fdy_st_tensor *t = NULL;
    if ((s = find_tensor(m, index_path, weight_map, e->name, &shard, &t,
                         err)) != FDY_OK) {
      goto cleanup;
    }
    *fdy_llama_weights_slot(&m->weights, e) = t;
    bool first_typed =
        e->module == FDY_LLAMA_EMBED &&
        (e->part == FDY_LLAMA_PART_SCALES || e->part == FDY_LLAMA_PART_DENSE);
    if ((s = check_tensor(m, e, t, first_typed, err)) != FDY_OK) {
      goto cleanup;
    }
    marks[shard][t - fdy_safetensors_at(m->shards[shard], 0)] = true;
    uint64_t *sum = e->layer >= 0 ? &m->layer_bytes[e->layer] : NULL;
    if (fdy_add_u64(m->total_bytes, t->bytes, &m->total_bytes, err) != FDY_OK ||
        (sum && fdy_add_u64(*sum, t->bytes, sum, err) != FDY_OK)) {
      s = FDY_ERR_OVERFLOW;
      goto cleanup;
    }
  }
  const char *why = m->config.tie_word_embeddings
                        ? " (embeddings are tied, so no lm_head is expected)"
                        : "";
  for (size_t i = 0; i < m->shard_count; i++) {
    for (size_t j = 0; j < fdy_safetensors_count(m->shards[i]); j++) {
      if (!marks[i][j]) {
        const fdy_st_tensor *t = fdy_safetensors_at(m->shards[i], j);
        s = fdy_llama_file_error(
            err, FDY_ERR_SCHEMA, t->path, "unexpected tensor '%s'%s", t->name,
            strncmp(t->name, "lm_head.", 8) == 0 ? why : "");
        goto cleanup;
      }
    }
  }
  if (weight_map && json_object_size(weight_map) != count) {
    qsort(expected, count, sizeof *expected, expected_cmp);
    const char *key;
    json_t *value;
    json_object_foreach(weight_map, key, value) {
      if (!is_expected(expected, count, key)) {
        s = fdy_llama_file_error(err, FDY_ERR_SCHEMA, index_path,
                                 "weight_map lists unexpected tensor '%s'",
                                 key);
        goto cleanup;
      }
    }
  }
  m->tensor_count = count;
cleanup:
  for (size_t i = 0; i < m->shard_count; i++) {
    free(marks[i]);
  }
  free(marks);
  return s;
}

static fdy_status load_config(fdy_llama_model *m, fdy_error *err) {
  char *path = fdy_path_join(m->dir, "config.json");
  char *text = NULL;
  size_t len = 0;
  if (!path) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_status s = read_file(path, MAX_CONFIG_BYTES, &text, &len, err);
  if (s == FDY_OK) {
    s = fdy_llama_config_parse_quant(text, len, path, &m->config, &m->quant,
                                     err);
  }
  free(text);
  free(path);
  return s;
}

fdy_status fdy_llama_open(const char *dir, fdy_llama_model **out,
                          fdy_error *err) {
  *out = NULL;
  fdy_llama_tensor_spec *expected = NULL;
  size_t count = 0;
  json_t *index = NULL, *weight_map = NULL;
  char *index_path = NULL;
  fdy_status s = FDY_OK;
  fdy_llama_model *m = calloc(1, sizeof *m);
  if (!m || !(m->dir = strdup(dir))) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  size_t dl = strlen(m->dir);
  while (dl > 1 && m->dir[dl - 1] == '/') {
    m->dir[--dl] = '\0';
  }
  if ((s = load_config(m, err)) != FDY_OK) {
    goto cleanup;
  }
  uint32_t layers = m->config.num_layers;
  m->weights.layers = calloc(layers, sizeof *m->weights.layers);
  m->layer_bytes = calloc(layers, sizeof *m->layer_bytes);
  index_path = fdy_path_join(m->dir, "model.safetensors.index.json");
  if (!m->weights.layers || !m->layer_bytes || !index_path) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  if ((s = open_files(m, index_path, &index, &weight_map, err)) != FDY_OK ||
      (s = find_unquantized(m, weight_map, err)) != FDY_OK ||
      (s = build_expected(m, &expected, &count, err)) != FDY_OK ||
      (s = check_inventory(m, expected, count, index_path, weight_map, err)) !=
          FDY_OK) {
    goto cleanup;
  }
  if (m->config.tie_word_embeddings) {
    m->weights.lm_head = m->weights.embed;
  }
  *out = m;
  m = NULL;
cleanup:
  json_decref(index);
  free(index_path);
  free(expected);
  fdy_llama_close(m);
  return s;
}

void fdy_llama_close(fdy_llama_model *model) {
  if (!model) {
    return;
  }
  for (size_t i = 0; i < model->shard_count; i++) {
    fdy_safetensors_close(model->shards[i]);
  }
  free(model->shards);
  free(model->quant);
  free(model->weights.layers);
  free(model->layer_bytes);
  free(model->dir);
  free(model);
}

const fdy_llama_config *fdy_llama_model_config(const fdy_llama_model *model) {
  return &model->config;
}

const char *fdy_llama_model_dir(const fdy_llama_model *model) {
  return model->dir;
}

const fdy_llama_layer_weights *fdy_llama_layer(const fdy_llama_model *model,
                                               uint32_t layer) {
  return layer < model->config.num_layers ? &model->weights.layers[layer]
                                          : NULL;
}

const fdy_llama_linear *fdy_llama_embedding(const fdy_llama_model *model) {
  return &model->weights.embed;
}

const fdy_llama_linear *fdy_llama_lm_head(const fdy_llama_model *model) {
  return &model->weights.lm_head;
}

const fdy_st_tensor *fdy_llama_final_norm(const fdy_llama_model *model) {
  return model->weights.final_norm;
}

const fdy_llama_module_quant *
fdy_llama_model_quant(const fdy_llama_model *model) {
  return model->quant;
}

size_t fdy_llama_tensor_count(const fdy_llama_model *model) {
  return model->tensor_count;
}

const fdy_st_tensor *fdy_llama_model_tensor(const fdy_llama_model *model,
                                            const fdy_llama_tensor_spec *spec) {
  /* The slot lookup takes a mutable table; nothing is written through it. */
  fdy_llama_weights *w = (fdy_llama_weights *)&model->weights;
  return *fdy_llama_weights_slot(w, spec);
}

uint64_t fdy_llama_layer_bytes(const fdy_llama_model *model, uint32_t layer) {
  return layer < model->config.num_layers ? model->layer_bytes[layer] : 0;
}

uint64_t fdy_llama_total_bytes(const fdy_llama_model *model) {
  return model->total_bytes;
}
