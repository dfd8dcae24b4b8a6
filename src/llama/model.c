/* Opening a checkpoint directory: config.json, then model.safetensors or
 * the shards named by model.safetensors.index.json, then the full tensor
 * inventory. The expected tensors are derived from the config (names,
 * dtypes, shapes); every one must be present exactly as expected and no
 * other tensor may exist. Errors name the offending file in err->name and
 * the tensor in the message. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/input.h"
#include "loader.h"

#define MAX_CONFIG_BYTES ((uint64_t)16 << 20)
#define MAX_INDEX_BYTES  ((uint64_t)100 << 20)
#define NAME_MAX_LEN     96

struct fdy_llama_model {
  char *dir;
  fdy_llama_config config;
  fdy_safetensors **shards;
  size_t shard_count;
  fdy_llama_layer_weights *layers; /* num_layers */
  uint64_t *layer_bytes;           /* num_layers */
  fdy_llama_qlinear embed;
  fdy_llama_qlinear lm_head; /* the embedding when tied */
  const fdy_st_tensor *final_norm;
  size_t tensor_count;
  uint64_t total_bytes;
};

/* One tensor the config implies. */
typedef struct expected {
  char name[NAME_MAX_LEN];
  bool half;       /* F16 or BF16 (the checkpoint's scale dtype) */
  fdy_shape shape; /* dtype U32 when !half */
  const fdy_st_tensor **slot;
  int64_t layer; /* -1 outside decoder layers */
} expected;

typedef struct expect_list {
  expected *items;
  size_t count, cap;
} expect_list;

static char *join_path(const char *dir, const char *file) {
  size_t n = strlen(dir) + strlen(file) + 2;
  char *p = malloc(n);
  if (p) {
    snprintf(p, n, "%s/%s", dir, file);
  }
  return p;
}

/* Reads a whole (small) regular file; *out is malloc'd. FDY_ERR_NOT_FOUND
 * when absent. */
static fdy_status read_file(const char *path, uint64_t limit, char **out,
                            size_t *len, fdy_error *err) {
  return fdy_input_read(path, "checkpoint file", limit, out, len, err);
}

static fdy_status expect_add(expect_list *list, const char *name, bool half,
                             fdy_shape shape, const fdy_st_tensor **slot,
                             int64_t layer, fdy_error *err) {
  if (list->count == list->cap) {
    size_t cap = list->cap ? list->cap * 2 : 64;
    expected *items = realloc(list->items, cap * sizeof *items);
    if (!items) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    list->items = items;
    list->cap = cap;
  }
  expected *e = &list->items[list->count++];
  snprintf(e->name, sizeof e->name, "%s", name);
  e->half = half;
  e->shape = shape;
  e->slot = slot;
  e->layer = layer;
  return FDY_OK;
}

static fdy_status expect_linear(expect_list *list, const char *prefix,
                                fdy_llama_qlinear *q, uint32_t out_features,
                                uint32_t in_features, const fdy_llama_config *c,
                                int64_t layer, fdy_error *err) {
  char name[NAME_MAX_LEN];
  q->out_features = out_features;
  q->in_features = in_features;
  uint64_t packed = (uint64_t)in_features * c->bits / 32;
  uint64_t groups = in_features / c->group_size;
  fdy_status s;
  snprintf(name, sizeof name, "%s.weight", prefix);
  if ((s = expect_add(list, name, false, FDY_SHAPE(out_features, packed),
                      &q->weight, layer, err)) != FDY_OK) {
    return s;
  }
  snprintf(name, sizeof name, "%s.scales", prefix);
  if ((s = expect_add(list, name, true, FDY_SHAPE(out_features, groups),
                      &q->scales, layer, err)) != FDY_OK) {
    return s;
  }
  snprintf(name, sizeof name, "%s.biases", prefix);
  return expect_add(list, name, true, FDY_SHAPE(out_features, groups),
                    &q->biases, layer, err);
}

/* Every tensor the config implies, embedding scales second (they fix the
 * checkpoint's scale dtype). */
static fdy_status build_expected(fdy_llama_model *m, expect_list *list,
                                 fdy_error *err) {
  const fdy_llama_config *c = &m->config;
  uint32_t hidden = c->hidden_size, ffn = c->intermediate_size;
  uint32_t q_out = c->num_heads * c->head_dim;
  uint32_t kv_out = c->num_kv_heads * c->head_dim;
  fdy_status s = expect_linear(list, "model.embed_tokens", &m->embed,
                               c->vocab_size, hidden, c, -1, err);
  char prefix[NAME_MAX_LEN], name[NAME_MAX_LEN];
  for (uint32_t i = 0; i < c->num_layers && s == FDY_OK; i++) {
    fdy_llama_layer_weights *w = &m->layers[i];
    int64_t l = i;
    struct {
      const char *name;
      fdy_llama_qlinear *q;
      uint32_t out, in;
    } linears[] = {
        {"self_attn.q_proj", &w->q, q_out, hidden},
        {"self_attn.k_proj", &w->k, kv_out, hidden},
        {"self_attn.v_proj", &w->v, kv_out, hidden},
        {"self_attn.o_proj", &w->o, hidden, q_out},
        {"mlp.gate_proj", &w->gate, ffn, hidden},
        {"mlp.up_proj", &w->up, ffn, hidden},
        {"mlp.down_proj", &w->down, hidden, ffn},
    };
    snprintf(name, sizeof name, "model.layers.%u.input_layernorm.weight", i);
    s = expect_add(list, name, true, FDY_SHAPE(hidden), &w->input_norm, l, err);
    for (size_t k = 0; k < 7 && s == FDY_OK; k++) {
      snprintf(prefix, sizeof prefix, "model.layers.%u.%s", i, linears[k].name);
      s = expect_linear(list, prefix, linears[k].q, linears[k].out,
                        linears[k].in, c, l, err);
    }
    snprintf(name, sizeof name,
             "model.layers.%u.post_attention_layernorm.weight", i);
    if (s == FDY_OK) {
      s = expect_add(list, name, true, FDY_SHAPE(hidden), &w->post_norm, l,
                     err);
    }
  }
  if (s == FDY_OK) {
    s = expect_add(list, "model.norm.weight", true, FDY_SHAPE(hidden),
                   &m->final_norm, -1, err);
  }
  if (s == FDY_OK && !c->tie_word_embeddings) {
    s = expect_linear(list, "lm_head", &m->lm_head, c->vocab_size, hidden, c,
                      -1, err);
  }
  return s;
}

static int expected_cmp(const void *a, const void *b) {
  return strcmp(((const expected *)a)->name, ((const expected *)b)->name);
}

static bool is_expected(const expected *sorted, size_t n, const char *name) {
  expected key;
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
    char *path = join_path(m->dir, file);
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
    char *path = join_path(m->dir, "model.safetensors");
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
  json_error_t jerr;
  s = fdy_json_check_text(text, len, err);
  if (s != FDY_OK) {
    free(text);
    fdy_error_prefix(err, "%s", index_path);
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", index_path);
    }
    return s;
  }
  *index = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (!*index) {
    fdy_llama_file_error(err, FDY_ERR_PARSE, index_path,
                         "not valid JSON (line %d, column %d): %s", jerr.line,
                         jerr.column, jerr.text);
    if (err) {
      err->line = jerr.line;
      err->column = jerr.column;
    }
    return FDY_ERR_PARSE;
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

static fdy_status check_tensor(fdy_llama_model *m, const expected *e,
                               const fdy_st_tensor *t, fdy_error *err) {
  fdy_dtype want = FDY_DTYPE_U32;
  if (e->half) {
    if (t == m->embed.scales &&
        (t->dtype == FDY_DTYPE_F16 || t->dtype == FDY_DTYPE_BF16)) {
      m->config.scale_dtype = t->dtype;
    }
    want = m->config.scale_dtype;
  }
  if (t->dtype != want) {
    return fdy_llama_file_error(
        err, FDY_ERR_SCHEMA, t->path, "tensor '%s' has dtype %s, expected %s%s",
        t->name, fdy_dtype_name(t->dtype), fdy_dtype_name(want),
        e->half ? " (F16 or BF16, as the embedding "
                  "scales)"
                : "");
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

/* Every expected tensor present and right; then nothing else anywhere. */
static fdy_status check_inventory(fdy_llama_model *m, expect_list *list,
                                  const char *index_path, json_t *weight_map,
                                  fdy_error *err) {
  fdy_status s = FDY_OK;
  bool **marks = calloc(m->shard_count, sizeof *marks);
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
  for (size_t k = 0; k < list->count; k++) {
    expected *e = &list->items[k];
    size_t shard = 0;
    const fdy_st_tensor *t = NULL;
    if ((s = find_tensor(m, index_path, weight_map, e->name, &shard, &t,
                         err)) != FDY_OK) {
      goto cleanup;
    }
    *e->slot = t;
    if ((s = check_tensor(m, e, t, err)) != FDY_OK) {
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
  if (weight_map && json_object_size(weight_map) != list->count) {
    qsort(list->items, list->count, sizeof *list->items, expected_cmp);
    const char *key;
    json_t *value;
    json_object_foreach(weight_map, key, value) {
      if (!is_expected(list->items, list->count, key)) {
        s = fdy_llama_file_error(err, FDY_ERR_SCHEMA, index_path,
                                 "weight_map lists unexpected tensor '%s'",
                                 key);
        goto cleanup;
      }
    }
  }
  m->tensor_count = list->count;
cleanup:
  for (size_t i = 0; i < m->shard_count; i++) {
    free(marks[i]);
  }
  free(marks);
  return s;
}

static fdy_status load_config(fdy_llama_model *m, fdy_error *err) {
  char *path = join_path(m->dir, "config.json");
  char *text = NULL;
  size_t len = 0;
  if (!path) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_status s = read_file(path, MAX_CONFIG_BYTES, &text, &len, err);
  if (s == FDY_OK) {
    s = fdy_llama_config_parse(text, len, path, &m->config, err);
  }
  free(text);
  free(path);
  return s;
}

fdy_status fdy_llama_open(const char *dir, fdy_llama_model **out,
                          fdy_error *err) {
  *out = NULL;
  expect_list list = {0};
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
  m->layers = calloc(layers, sizeof *m->layers);
  m->layer_bytes = calloc(layers, sizeof *m->layer_bytes);
  index_path = join_path(m->dir, "model.safetensors.index.json");
  if (!m->layers || !m->layer_bytes || !index_path) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  if ((s = build_expected(m, &list, err)) != FDY_OK ||
      (s = open_files(m, index_path, &index, &weight_map, err)) != FDY_OK ||
      (s = check_inventory(m, &list, index_path, weight_map, err)) != FDY_OK) {
    goto cleanup;
  }
  if (m->config.tie_word_embeddings) {
    m->lm_head = m->embed;
  }
  *out = m;
  m = NULL;
cleanup:
  json_decref(index);
  free(index_path);
  free(list.items);
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
  free(model->layers);
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
  return layer < model->config.num_layers ? &model->layers[layer] : NULL;
}

const fdy_llama_qlinear *fdy_llama_embedding(const fdy_llama_model *model) {
  return &model->embed;
}

const fdy_llama_qlinear *fdy_llama_lm_head(const fdy_llama_model *model) {
  return &model->lm_head;
}

const fdy_st_tensor *fdy_llama_final_norm(const fdy_llama_model *model) {
  return model->final_norm;
}

size_t fdy_llama_tensor_count(const fdy_llama_model *model) {
  return model->tensor_count;
}

uint64_t fdy_llama_layer_bytes(const fdy_llama_model *model, uint32_t layer) {
  return layer < model->config.num_layers ? model->layer_bytes[layer] : 0;
}

uint64_t fdy_llama_total_bytes(const fdy_llama_model *model) {
  return model->total_bytes;
}
