/* Tests of the Llama checkpoint loader: the shared and the generated
 * fixtures open with the right configuration; every kind of bad checkpoint
 * (built in a temporary directory from a copy of a fixture) gives one error
 * of the right kind naming the file and the tensor or field; make-model
 * output opens, is byte-identical for a seed, never overwrites and matches
 * the preset's computed configuration and size (the real-shape presets are
 * checked without writing); the model graph: one weight unit per decoder
 * layer plus the embedding and the head, each a gather of file extents
 * padded so that every tensor view is aligned, the KV caches, the prefill
 * and decode ops, and bad options refused; its plan keeps everything
 * resident when the budget allows and streams the layers otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "foundry/llama.h"
#include "foundry/op_table.h"
#include "foundry/plan.h"
#include "foundry/safetensors.h"

/* llama3-micro, llama3-tiny and the families' micro fixtures */
static char fixture[5][512];
#define MISTRAL_FIXTURE 2
#define QWEN2_FIXTURE   3
#define QWEN3_FIXTURE   4
static const char *data_root;

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  buf[n] = '\0';
  *len = (size_t)n;
  return buf;
}

static void write_all(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

static const char *const model_files[] = {"config.json", "model.safetensors",
                                          "model.safetensors.index.json"};

/* A fresh directory holding a copy of the micro fixture. */
static void copy_fixture(char *dir, size_t cap, int which) {
  snprintf(dir, cap, "/tmp/fdy_llama_test_XXXXXX");
  assert_non_null(mkdtemp(dir));
  for (int i = 0; i < 3; i++) {
    char src[1024], dst[1024];
    size_t len;
    snprintf(src, sizeof src, "%s/%s", fixture[which], model_files[i]);
    snprintf(dst, sizeof dst, "%s/%s", dir, model_files[i]);
    char *data = read_all(src, &len);
    write_all(dst, data, len);
    free(data);
  }
}

static void remove_dir(const char *dir) {
  char path[1024];
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, model_files[i]);
    unlink(path);
  }
  assert_int_equal(rmdir(dir), 0);
}

static void path_in(char *out, size_t cap, const char *dir, const char *f) {
  snprintf(out, cap, "%s/%s", dir, f);
}

/* Rewrites model.safetensors in dir with the header returned by edit(). */
typedef void (*header_edit)(json_t *header);

static void edit_header(const char *dir, header_edit edit) {
  char path[1024];
  size_t len;
  path_in(path, sizeof path, dir, "model.safetensors");
  char *file = read_all(path, &len);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) {
    n = n << 8 | (unsigned char)file[i];
  }
  json_t *header = json_loadb(file + 8, n, 0, NULL);
  assert_non_null(header);
  edit(header);
  char *text = json_dumps(header, JSON_COMPACT);
  size_t tl = strlen(text);
  size_t out_len = 8 + tl + (len - 8 - n);
  char *out = malloc(out_len);
  for (int i = 0; i < 8; i++) {
    out[i] = (char)((uint64_t)tl >> (8 * i));
  }
  memcpy(out + 8, text, tl);
  memcpy(out + 8 + tl, file + 8 + n, len - 8 - n);
  unlink(path);
  write_all(path, out, out_len);
  free(out);
  free(text);
  free(file);
  json_decref(header);
}

/* Opens dir expecting kind, err.name ending in name_suffix and the message
 * mentioning `mention`. */
static void expect_open_error(const char *dir, fdy_status kind,
                              const char *name_suffix, const char *mention) {
  fdy_error err;
  fdy_llama_model *m = (fdy_llama_model *)(uintptr_t)1;
  fdy_status s = fdy_llama_open(dir, &m, &err);
  if (s != kind) {
    print_error("got %s: %s\n", fdy_status_name(s), err.message);
  }
  assert_int_equal(s, kind);
  assert_int_equal(err.kind, kind);
  assert_null(m);
  size_t nl = strlen(err.name), sl = strlen(name_suffix);
  assert_true(nl >= sl);
  assert_string_equal(err.name + nl - sl, name_suffix);
  if (mention && strstr(err.message, mention) == NULL) {
    print_error("'%s' does not mention '%s'\n", err.message, mention);
    fail();
  }
}

static void test_fixtures_open(void **state) {
  (void)state;
  static const uint32_t hidden[2] = {256, 768}, heads[2] = {8, 6},
                        head_dim[2] = {32, 128}, ffn[2] = {512, 2048},
                        vocab[2] = {1024, 2048};
  for (int w = 0; w < 2; w++) {
    fdy_error err;
    fdy_llama_model *m = NULL;
    assert_int_equal(fdy_llama_open(fixture[w], &m, &err), FDY_OK);
    const fdy_llama_config *c = fdy_llama_model_config(m);
    assert_int_equal(c->num_layers, 2);
    assert_int_equal(c->hidden_size, hidden[w]);
    assert_int_equal(c->num_heads, heads[w]);
    assert_int_equal(c->num_kv_heads, 2);
    assert_int_equal(c->head_dim, head_dim[w]);
    assert_int_equal(c->intermediate_size, ffn[w]);
    assert_int_equal(c->vocab_size, vocab[w]);
    assert_true(c->tie_word_embeddings);
    assert_true(c->rope_llama3);
    assert_true(c->rope_theta == 500000.0);
    assert_true(c->rope_factor == 32.0);
    assert_true(c->rope_low_freq_factor == 1.0);
    assert_true(c->rope_high_freq_factor == 4.0);
    assert_int_equal(c->rope_original_max_position, 8192);
    assert_true(c->rms_norm_eps == 1e-5);
    assert_int_equal(c->bos_id, 1);
    assert_int_equal(c->eos_count, 2);
    assert_int_equal(c->eos_ids[0], 2);
    assert_int_equal(c->eos_ids[1], 3);
    assert_int_equal(c->group_size, 64);
    assert_int_equal(c->bits, 4);
    assert_int_equal(c->dtype, FDY_DTYPE_F16);
    assert_int_equal(fdy_llama_tensor_count(m), 3 + 2 * 23 + 1);
    const fdy_llama_linear *e = fdy_llama_embedding(m);
    assert_ptr_equal(fdy_llama_lm_head(m)->weight, e->weight);
    assert_int_equal(e->out_features, vocab[w]);
    assert_int_equal(e->in_features, hidden[w]);
    const fdy_llama_layer_weights *l = fdy_llama_layer(m, 1);
    assert_non_null(l);
    assert_null(fdy_llama_layer(m, 2));
    assert_string_equal(l->q.weight->name,
                        "model.layers.1.self_attn.q_proj.weight");
    assert_int_equal(l->q.out_features, heads[w] * head_dim[w]);
    assert_int_equal(l->down.in_features, ffn[w]);
    /* total = every tensor = the index's total_size */
    uint64_t sum = e->weight->bytes + e->scales->bytes + e->biases->bytes +
                   fdy_llama_final_norm(m)->bytes;
    sum += fdy_llama_layer_bytes(m, 0) + fdy_llama_layer_bytes(m, 1);
    assert_int_equal(sum, fdy_llama_total_bytes(m));
    char path[1024];
    size_t len;
    path_in(path, sizeof path, fixture[w], "model.safetensors.index.json");
    char *text = read_all(path, &len);
    json_t *index = json_loadb(text, len, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(index, "metadata"), "total_size")),
                     fdy_llama_total_bytes(m));
    json_decref(index);
    free(text);
    fdy_llama_close(m);
  }
  fdy_llama_close(NULL);
}

/* ---- the model as a graph -------------------------------------------------
 */

static fdy_tensor_info tensor_at(const fdy_graph *g, fdy_tensor_id id) {
  fdy_tensor_info info;
  fdy_error err;
  assert_int_equal(fdy_graph_tensor(g, id, &info, &err), FDY_OK);
  return info;
}

static fdy_tensor_id tensor_named(const fdy_graph *g, const char *name) {
  fdy_tensor_id id = {UINT32_MAX};
  fdy_error err;
  fdy_status st = fdy_graph_find_tensor(g, name, &id, &err);
  if (st != FDY_OK) {
    print_error("no tensor %s\n", name);
  }
  assert_int_equal(st, FDY_OK);
  return id;
}

static fdy_op_info op_at(const fdy_graph *g, uint32_t index) {
  fdy_op_info op;
  fdy_error err;
  assert_int_equal(fdy_graph_op(g, (fdy_op_id){index}, &op, &err), FDY_OK);
  return op;
}

static fdy_op_info op_named(const fdy_graph *g, const char *name) {
  for (uint32_t i = 0; i < fdy_graph_op_count(g); i++) {
    fdy_op_info op = op_at(g, i);
    if (strcmp(op.name, name) == 0) {
      return op;
    }
  }
  print_error("no op %s\n", name);
  fail();
  return op_at(g, 0);
}

/* Bytes of all file extents of the graph's weights. */
static uint64_t file_extent_bytes(const fdy_graph *g) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < fdy_graph_tensor_count(g); i++) {
    fdy_tensor_info info = tensor_at(g, (fdy_tensor_id){i});
    for (size_t k = 0; info.role == FDY_TENSOR_WEIGHT && k < info.extent_count;
         k++) {
      if (info.extents[k].kind == FDY_EXTENT_FILE) {
        sum += info.extents[k].length;
      }
    }
  }
  return sum;
}

/* The checkpoint tensors of one weight unit, in layout order. */
typedef struct unit_tensors {
  const fdy_st_tensor *t[32];
  size_t count;
} unit_tensors;

static void add_linear(unit_tensors *u, const fdy_llama_linear *l) {
  u->t[u->count++] = l->weight;
  u->t[u->count++] = l->scales;
  u->t[u->count++] = l->biases;
}

/* input norm, q, k, v, o, post norm, gate, up, down */
static unit_tensors layer_tensors(const fdy_llama_model *m, uint32_t layer) {
  const fdy_llama_layer_weights *l = fdy_llama_layer(m, layer);
  unit_tensors u = {.count = 0};
  u.t[u.count++] = l->input_norm;
  add_linear(&u, &l->q);
  add_linear(&u, &l->k);
  add_linear(&u, &l->v);
  if (fdy_llama_model_config(m)->qkv_bias) {
    u.t[u.count++] = l->q_bias;
    u.t[u.count++] = l->k_bias;
    u.t[u.count++] = l->v_bias;
  }
  if (fdy_llama_model_config(m)->qk_norm) {
    u.t[u.count++] = l->q_norm;
    u.t[u.count++] = l->k_norm;
  }
  add_linear(&u, &l->o);
  u.t[u.count++] = l->post_norm;
  add_linear(&u, &l->gate);
  add_linear(&u, &l->up);
  add_linear(&u, &l->down);
  return u;
}

/* Checks weight `name`: a U8 gather of exactly u's file extents in order,
 * each at a FDY_TENSOR_ALIGNMENT offset after padding shorter than the
 * alignment, and one view per tensor, in the same order, named, typed and
 * shaped like the tensor, at its extent's offset. Returns the padding
 * bytes. */
static uint64_t expect_unit(const fdy_graph *g, const char *name,
                            const unit_tensors *u) {
  fdy_tensor_id id = tensor_named(g, name);
  fdy_tensor_info unit = tensor_at(g, id);
  assert_int_equal(unit.role, FDY_TENSOR_WEIGHT);
  assert_int_equal(unit.dtype, FDY_DTYPE_U8);
  uint64_t at = 0, padding = 0;
  size_t files = 0;
  for (size_t k = 0; k < unit.extent_count; k++) {
    const fdy_extent *e = &unit.extents[k];
    if (e->kind == FDY_EXTENT_PADDING) {
      assert_true(e->length > 0 && e->length < FDY_TENSOR_ALIGNMENT);
      padding += e->length;
      at += e->length;
      continue;
    }
    assert_int_equal(e->kind, FDY_EXTENT_FILE);
    assert_true(files < u->count);
    const fdy_st_tensor *t = u->t[files++];
    assert_int_equal(at % FDY_TENSOR_ALIGNMENT, 0);
    assert_string_equal(e->path, t->path);
    assert_int_equal(e->offset, t->file_offset);
    assert_int_equal(e->length, t->bytes);
    fdy_tensor_info view = tensor_at(g, tensor_named(g, t->name));
    assert_int_equal(view.role, FDY_TENSOR_WEIGHT_VIEW);
    assert_int_equal(view.weight, id.v);
    assert_int_equal(view.offset, at);
    assert_int_equal(view.dtype, t->dtype);
    assert_true(fdy_shape_equal(view.shape, t->shape));
    assert_int_equal(view.bytes, t->bytes);
    at += e->length;
    assert_true(at <= unit.bytes);
  }
  assert_int_equal(files, u->count);
  assert_int_equal(at, unit.bytes);
  /* the unit's views, in tensor order, are u's tensors in layout order */
  size_t seen = 0;
  for (uint32_t i = 0; i < fdy_graph_tensor_count(g); i++) {
    fdy_tensor_info view = tensor_at(g, (fdy_tensor_id){i});
    if (view.role == FDY_TENSOR_WEIGHT_VIEW && view.weight == id.v) {
      assert_true(seen < u->count);
      assert_string_equal(view.name, u->t[seen++]->name);
    }
  }
  assert_int_equal(seen, u->count);
  return padding;
}

/* Ops per decoder layer of the prefill (fused ops, rope and attention
 * separate) and of the decode step (fused ops, ROPE_ATTENTION). */
#define LAYER_OPS       7
#define FUSED_LAYER_OPS 5

/* The kinds of one step's ops: the embedding, the decoder layers and the
 * head (the last row first when a multi-row step takes the last row's
 * logits only; last row after the LM head when every row has logits). The
 * layers normalize inside their matmuls; the decode step (fused) also
 * ropes inside its attention and normalizes inside its LM head. */
/* The ops a family adds to a layer after its q, k and v: ADD_BIAS of each
 * (qwen2), RMSNORM of q and k per head (qwen3). */
static uint32_t family_layer_ops(const fdy_llama_config *c) {
  return (c->qkv_bias ? 3 : 0) + (c->qk_norm ? 2 : 0);
}

static size_t step_kinds(const fdy_llama_config *c, uint32_t rows,
                         bool all_logits, bool fused, fdy_op_kind *out) {
  uint32_t layers = c->num_layers;
  static const fdy_op_kind layer[LAYER_OPS] = {
      FDY_OP_NORM_MATMUL_Q4, FDY_OP_ROPE,          FDY_OP_ROPE,
      FDY_OP_ATTENTION,      FDY_OP_MATMUL_ADD_Q4, FDY_OP_NORM_SWIGLU_Q4,
      FDY_OP_MATMUL_ADD_Q4};
  static const fdy_op_kind fused_layer[FUSED_LAYER_OPS] = {
      FDY_OP_NORM_MATMUL_Q4, FDY_OP_ROPE_ATTENTION, FDY_OP_MATMUL_ADD_Q4,
      FDY_OP_NORM_SWIGLU_Q4, FDY_OP_MATMUL_ADD_Q4};
  size_t n = 0;
  out[n++] = FDY_OP_EMBED_Q4;
  for (uint32_t l = 0; l < layers; l++) {
    const fdy_op_kind *kinds = fused ? fused_layer : layer;
    size_t count = fused ? FUSED_LAYER_OPS : LAYER_OPS;
    out[n++] = kinds[0]; /* q, k and v */
    for (uint32_t j = 0; c->qkv_bias && j < 3; j++) {
      out[n++] = FDY_OP_ADD_BIAS;
    }
    for (uint32_t j = 0; c->qk_norm && j < 2; j++) {
      out[n++] = FDY_OP_RMSNORM;
    }
    memcpy(out + n, kinds + 1, sizeof *kinds * (count - 1));
    n += count - 1;
  }
  if (!all_logits && rows > 1) {
    out[n++] = FDY_OP_LAST_ROW;
  }
  if (fused) {
    out[n++] = FDY_OP_NORM_MATMUL_Q4;
    out[n++] = FDY_OP_SAMPLE;
    return n;
  }
  out[n++] = FDY_OP_RMSNORM;
  out[n++] = FDY_OP_MATMUL_Q4;
  if (all_logits) {
    out[n++] = FDY_OP_LAST_ROW;
  }
  out[n++] = FDY_OP_SAMPLE;
  return n;
}

/* Ops [first, first + count) are one step `prefix` over `rows` rows with
 * step tensor `step`: their kinds, names, the step tensor they read, the
 * rows of every decoder layer's output and the caches each attention
 * appends to. */
static void expect_step(const fdy_graph *g, const fdy_llama_config *c,
                        const char *prefix, uint32_t first, uint32_t count,
                        fdy_tensor_id step, uint32_t rows, bool all_logits,
                        bool fused) {
  fdy_op_kind kinds[16 * 8 + 8];
  assert_true(c->num_layers <= 8);
  size_t n = step_kinds(c, rows, all_logits, fused, kinds);
  assert_int_equal(count, n);
  size_t prefix_len = strlen(prefix);
  uint32_t attention = 0;
  for (uint32_t i = 0; i < count; i++) {
    fdy_op_info op = op_at(g, first + i);
    assert_int_equal(op.kind, kinds[i]);
    assert_memory_equal(op.name, prefix, prefix_len);
    assert_int_equal(op.name[prefix_len], '.');
    assert_int_equal(op.reads[0].v, step.v);
    bool in_layer = i > 0 && i <= ((fused ? FUSED_LAYER_OPS : LAYER_OPS) +
                                   family_layer_ops(c)) *
                                      c->num_layers;
    fdy_tensor_info out = tensor_at(g, op.writes[0]);
    if (i == 0 || in_layer) {
      assert_int_equal(out.role, FDY_TENSOR_ACTIVATION);
      assert_int_equal(out.shape.dims[0], rows);
    }
    if (op.kind == FDY_OP_ATTENTION || op.kind == FDY_OP_ROPE_ATTENTION) {
      const fdy_attention_params *a = op.kind == FDY_OP_ATTENTION
                                          ? &op.params.attention
                                          : &op.params.rope_attention.attention;
      char name[64];
      snprintf(name, sizeof name, "layer.%u.k_cache", attention);
      assert_int_equal(op.reads[4].v, tensor_named(g, name).v);
      snprintf(name, sizeof name, "layer.%u.v_cache", attention);
      assert_int_equal(op.reads[5].v, tensor_named(g, name).v);
      assert_int_equal(a->heads, c->num_heads);
      assert_int_equal(a->kv_heads, c->num_kv_heads);
      assert_int_equal(a->head_dim, c->head_dim);
      if (op.kind == FDY_OP_ROPE_ATTENTION) {
        assert_int_equal(op.params.rope_attention.rope.head_dim, c->head_dim);
        assert_true(op.params.rope_attention.rope.theta == c->rope_theta);
      }
      attention++;
    }
  }
  assert_int_equal(attention, c->num_layers);
}

static void expect_io_tensor(const fdy_graph *g, fdy_tensor_id id,
                             fdy_tensor_role role, fdy_dtype dtype,
                             fdy_shape shape) {
  fdy_tensor_info info = tensor_at(g, id);
  assert_int_equal(info.role, role);
  assert_int_equal(info.dtype, dtype);
  assert_true(fdy_shape_equal(info.shape, shape));
}

/* Everything a graph of model m with options o must hold. */
static void expect_graph(const fdy_llama_model *m, const fdy_graph *g,
                         const fdy_llama_graph_io *io,
                         const fdy_llama_graph_options *o) {
  const fdy_llama_config *c = fdy_llama_model_config(m);
  fdy_error err;
  assert_int_equal(fdy_graph_validate(g, &err), FDY_OK);
  /* weights: embed, layer.<i>, head, and nothing else */
  unit_tensors embed = {.count = 0}, head = {.count = 0};
  add_linear(&embed, fdy_llama_embedding(m));
  head.t[head.count++] = fdy_llama_final_norm(m);
  if (!c->tie_word_embeddings) {
    add_linear(&head, fdy_llama_lm_head(m));
  }
  expect_unit(g, "embed", &embed);
  for (uint32_t l = 0; l < c->num_layers; l++) {
    char name[32];
    snprintf(name, sizeof name, "layer.%u", l);
    unit_tensors u = layer_tensors(m, l);
    expect_unit(g, name, &u);
  }
  expect_unit(g, "head", &head);
  uint32_t units = 0, views = 0, states = 0;
  for (uint32_t i = 0; i < fdy_graph_tensor_count(g); i++) {
    fdy_tensor_info info = tensor_at(g, (fdy_tensor_id){i});
    units += info.role == FDY_TENSOR_WEIGHT;
    views += info.role == FDY_TENSOR_WEIGHT_VIEW;
    states += info.role == FDY_TENSOR_STATE;
    if (info.role == FDY_TENSOR_WEIGHT_VIEW) {
      fdy_tensor_info unit =
          tensor_at(g, (fdy_tensor_id){(uint32_t)info.weight});
      assert_int_equal(info.offset % FDY_TENSOR_ALIGNMENT, 0);
      assert_true(info.offset + info.bytes <= unit.bytes);
    }
  }
  assert_int_equal(units, c->num_layers + 2);
  assert_int_equal(views, fdy_llama_tensor_count(m));
  assert_int_equal(file_extent_bytes(g), fdy_llama_total_bytes(m));
  /* the KV caches: state of the KV dtype, [sequences, context, kv_heads *
   * head_dim] */
  assert_int_equal(states, 2 * c->num_layers);
  for (uint32_t l = 0; l < c->num_layers; l++) {
    for (int kv = 0; kv < 2; kv++) {
      char name[32];
      snprintf(name, sizeof name, "layer.%u.%s", l, kv ? "v_cache" : "k_cache");
      expect_io_tensor(g, tensor_named(g, name), FDY_TENSOR_STATE, o->kv_dtype,
                       FDY_SHAPE(o->sequences ? o->sequences : 1, o->context,
                                 (uint64_t)c->num_kv_heads * c->head_dim));
    }
  }
  /* the steps: prefill ops, then decode ops, covering the graph */
  assert_int_equal(io->prefill_first_op, 0);
  assert_int_equal(io->decode_first_op, io->prefill_op_count);
  assert_int_equal(io->prefill_op_count + io->decode_op_count,
                   fdy_graph_op_count(g));
  expect_step(g, c, "prefill", io->prefill_first_op, io->prefill_op_count,
              io->prefill_step, o->prefill_rows, o->all_logits, false);
  expect_step(g, c, "decode", io->decode_first_op, io->decode_op_count,
              io->decode_step, 1, false, true);
  expect_io_tensor(g, io->prefill_step, FDY_TENSOR_INPUT, FDY_DTYPE_I32,
                   FDY_SHAPE(FDY_STEP_ELEMENTS(o->prefill_rows)));
  expect_io_tensor(g, io->decode_step, FDY_TENSOR_INPUT, FDY_DTYPE_I32,
                   FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  expect_io_tensor(
      g, io->prefill_logits, FDY_TENSOR_ACTIVATION, FDY_DTYPE_F32,
      FDY_SHAPE(o->all_logits ? o->prefill_rows : 1, c->vocab_size));
  expect_io_tensor(g, io->decode_logits, FDY_TENSOR_ACTIVATION, FDY_DTYPE_F32,
                   FDY_SHAPE(1, c->vocab_size));
  expect_io_tensor(g, io->prefill_next, FDY_TENSOR_ACTIVATION, FDY_DTYPE_I32,
                   FDY_SHAPE(1));
  expect_io_tensor(g, io->decode_next, FDY_TENSOR_ACTIVATION, FDY_DTYPE_I32,
                   FDY_SHAPE(1));
  /* the LM head: the embedding's views when tied, the head's own else */
  const fdy_llama_linear *lm = fdy_llama_lm_head(m);
  const char *logits_ops[2] = {"prefill.logits", "decode.logits"};
  /* the decode step's LM head normalizes: its weight follows the norm */
  const fdy_op_kind logits_kinds[2] = {FDY_OP_MATMUL_Q4, FDY_OP_NORM_MATMUL_Q4};
  const uint32_t weight_at[2] = {2, 3};
  for (int s = 0; s < 2; s++) {
    fdy_op_info op = op_named(g, logits_ops[s]);
    uint32_t w_at = weight_at[s];
    assert_int_equal(op.kind, logits_kinds[s]);
    assert_int_equal(op.reads[w_at].v, tensor_named(g, lm->weight->name).v);
    assert_int_equal(op.reads[w_at + 1].v, tensor_named(g, lm->scales->name).v);
    assert_int_equal(op.reads[w_at + 2].v, tensor_named(g, lm->biases->name).v);
    fdy_tensor_info w = tensor_at(g, op.reads[w_at]);
    fdy_tensor_info unit = tensor_at(g, (fdy_tensor_id){(uint32_t)w.weight});
    assert_string_equal(unit.name, c->tie_word_embeddings ? "embed" : "head");
  }
  /* a layer's matmuls read its own views: layer 1's fused q, k, v (three
   * weights, three outputs) in each step */
  if (c->num_layers > 1) {
    const fdy_llama_layer_weights *w1 = fdy_llama_layer(m, 1);
    const char *const steps[2] = {"prefill", "decode"};
    for (int s = 0; s < 2; s++) {
      char name[64];
      snprintf(name, sizeof name, "%s.layer.1.qkv", steps[s]);
      fdy_op_info qkv = op_named(g, name);
      assert_int_equal(qkv.read_count, 12);
      assert_int_equal(qkv.write_count, 3);
      assert_int_equal(qkv.reads[3].v, tensor_named(g, w1->q.weight->name).v);
      assert_int_equal(qkv.reads[6].v, tensor_named(g, w1->k.weight->name).v);
      assert_int_equal(qkv.reads[9].v, tensor_named(g, w1->v.weight->name).v);
      snprintf(name, sizeof name, "%s.layer.1.q", steps[s]);
      assert_int_equal(qkv.writes[0].v, tensor_named(g, name).v);
      snprintf(name, sizeof name, "%s.layer.1.v", steps[s]);
      assert_int_equal(qkv.writes[2].v, tensor_named(g, name).v);
    }
  }
}

static void test_graph(void **state) {
  (void)state;
  fdy_error err;
  fdy_llama_model *m = NULL;
  assert_int_equal(fdy_llama_open(fixture[0], &m, &err), FDY_OK);
  const fdy_llama_config *c = fdy_llama_model_config(m);
  const fdy_llama_graph_options cases[] = {
      {.context = 64, .prefill_rows = 8, .kv_dtype = FDY_DTYPE_F32},
      {.context = 17,
       .prefill_rows = 5,
       .kv_dtype = FDY_DTYPE_F16,
       .all_logits = true},
      {.context = 1, .prefill_rows = 1, .kv_dtype = FDY_DTYPE_F32},
      {.context = c->max_position_embeddings,
       .prefill_rows = 64,
       .kv_dtype = FDY_DTYPE_F16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fdy_graph *g = NULL;
    fdy_llama_graph_io io;
    memset(&io, 0xff, sizeof io);
    assert_int_equal(fdy_llama_graph(m, &cases[i], &g, &io, &err), FDY_OK);
    expect_graph(m, g, &io, &cases[i]);
    fdy_graph_destroy(g);
  }
  /* io is optional; the graph owns its paths, so the model may go first */
  fdy_graph *g = NULL;
  assert_int_equal(fdy_llama_graph(m, &cases[0], &g, NULL, &err), FDY_OK);
  fdy_llama_close(m);
  fdy_tensor_info embed = tensor_at(g, tensor_named(g, "embed"));
  assert_true(strstr(embed.extents[0].path, "/model.safetensors") != NULL);
  fdy_graph_destroy(g);
}

static void expect_valid(const fdy_plan *plan, fdy_plan_summary *summary) {
  fdy_error err;
  fdy_status st = fdy_plan_validate(plan, summary, &err);
  if (st != FDY_OK) {
    print_error("%s\n", err.message);
  }
  assert_int_equal(st, FDY_OK);
}

/* The untied variant: the head unit holds the final norm and lm_head, and
 * the logits read lm_head's views. */
static void test_graph_untied(void **state) {
  (void)state;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/llama3-micro-untied-g32/model", data_root);
  fdy_error err;
  fdy_llama_model *m = NULL;
  assert_int_equal(fdy_llama_open(dir, &m, &err), FDY_OK);
  assert_false(fdy_llama_model_config(m)->tie_word_embeddings);
  fdy_llama_graph_options o = {.context = 32, .prefill_rows = 4};
  fdy_graph *g = NULL;
  fdy_llama_graph_io io;
  assert_int_equal(fdy_llama_graph(m, &o, &g, &io, &err), FDY_OK);
  expect_graph(m, g, &io, &o);
  fdy_tensor_info head = tensor_at(g, tensor_named(g, "head"));
  fdy_tensor_info embed = tensor_at(g, tensor_named(g, "embed"));
  assert_true(head.bytes >= embed.bytes);
  /* two slots of the largest unit: every unit streams */
  uint64_t largest = 0;
  for (uint32_t i = 0; i < fdy_graph_tensor_count(g); i++) {
    fdy_tensor_info info = tensor_at(g, (fdy_tensor_id){i});
    if (info.role == FDY_TENSOR_WEIGHT && info.bytes > largest) {
      largest = info.bytes;
    }
  }
  fdy_plan *plan = NULL;
  fdy_plan_summary sum;
  assert_int_equal(fdy_llama_plan(g, &io, 2 * largest, 2, &plan, &err), FDY_OK);
  expect_valid(plan, &sum);
  assert_int_equal(sum.class_bytes[FDY_BUFFER_RESIDENT], 0);
  assert_int_equal(sum.class_bytes[FDY_BUFFER_SLOT], 2 * largest);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
  fdy_llama_close(m);
}

/* Bad options: nothing built, *out NULL, the kind (and for the context the
 * limit and the value). */
static void test_graph_bad_options(void **state) {
  (void)state;
  fdy_error err;
  fdy_llama_model *m = NULL;
  assert_int_equal(fdy_llama_open(fixture[0], &m, &err), FDY_OK);
  uint32_t limit = fdy_llama_model_config(m)->max_position_embeddings;
  const struct {
    fdy_llama_graph_options o;
    bool context;
  } cases[] = {
      {{.context = 0, .prefill_rows = 8}, true},
      {{.context = limit + 1, .prefill_rows = 8}, true},
      {{.context = 64, .prefill_rows = 0}, false},
      {{.context = 64, .prefill_rows = 8, .kv_dtype = FDY_DTYPE_BF16}, false},
      {{.context = 64, .prefill_rows = 8, .kv_dtype = FDY_DTYPE_I32}, false},
      {{.context = 64, .prefill_rows = 8, .kv_dtype = FDY_DTYPE_COUNT}, false},
      {{.context = 64, .prefill_rows = 8, .sequences = 4, .step_rows = 3},
       false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fdy_graph *g = (fdy_graph *)(uintptr_t)1;
    assert_int_equal(fdy_llama_graph(m, &cases[i].o, &g, NULL, &err),
                     FDY_ERR_INVALID_ARGUMENT);
    assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
    assert_null(g);
    if (cases[i].context) {
      assert_int_equal(err.expected, limit);
      assert_int_equal(err.actual, cases[i].o.context);
    }
    if (cases[i].o.step_rows) {
      assert_int_equal(err.expected, cases[i].o.sequences);
      assert_int_equal(err.actual, cases[i].o.step_rows);
    }
  }
  fdy_graph *g = NULL;
  assert_int_equal(fdy_llama_graph(m, NULL, &g, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_graph(NULL, &cases[0].o, &g, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_llama_close(m);
}

/* A one-layer checkpoint whose tensors are not multiples of the alignment
 * (hidden 64, group 32, vocab 40: 128-byte norms, 160-byte embedding
 * scales), written from the micro fixture's config. */
static void write_padded_checkpoint(char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/fdy_llama_padded_XXXXXX");
  assert_non_null(mkdtemp(dir));
  const uint64_t hidden = 64, ffn = 96, vocab = 40, q = 64, kv = 32;
  char src[1024], path[1024];
  path_in(src, sizeof src, fixture[0], "config.json");
  json_t *config = json_load_file(src, 0, NULL);
  assert_non_null(config);
  json_t *quant = json_pack("{s:i, s:i}", "group_size", 32, "bits", 4);
  json_t *sizes =
      json_pack("{s:I, s:I, s:I, s:i, s:i, s:i, s:i, s:O, s:O}", "vocab_size",
                (json_int_t)vocab, "hidden_size", (json_int_t)hidden,
                "intermediate_size", (json_int_t)ffn, "num_hidden_layers", 1,
                "num_attention_heads", 2, "num_key_value_heads", 1, "head_dim",
                32, "quantization", quant, "quantization_config", quant);
  assert_non_null(sizes);
  assert_int_equal(json_object_update(config, sizes), 0);
  json_decref(sizes);
  json_decref(quant);
  path_in(path, sizeof path, dir, "config.json");
  assert_int_equal(json_dump_file(config, path, 0), 0);
  json_decref(config);

  const struct {
    const char *name;
    uint64_t out, in; /* in 0: a norm of `out` */
  } modules[] = {
      {"model.embed_tokens", vocab, hidden},
      {"model.layers.0.input_layernorm", hidden, 0},
      {"model.layers.0.self_attn.q_proj", q, hidden},
      {"model.layers.0.self_attn.k_proj", kv, hidden},
      {"model.layers.0.self_attn.v_proj", kv, hidden},
      {"model.layers.0.self_attn.o_proj", hidden, q},
      {"model.layers.0.post_attention_layernorm", hidden, 0},
      {"model.layers.0.mlp.gate_proj", ffn, hidden},
      {"model.layers.0.mlp.up_proj", ffn, hidden},
      {"model.layers.0.mlp.down_proj", hidden, ffn},
      {"model.norm", hidden, 0},
  };
  enum { MODULES = sizeof modules / sizeof modules[0] };
  static char names[3 * MODULES][96];
  static uint16_t zeros[4096];
  fdy_st_write_tensor tensors[3 * MODULES];
  size_t n = 0;
  for (size_t i = 0; i < MODULES; i++) {
    static const char *const parts[3] = {"weight", "scales", "biases"};
    for (int p = 0; p < (modules[i].in ? 3 : 1); p++) {
      snprintf(names[n], sizeof names[n], "%s.%s", modules[i].name, parts[p]);
      fdy_shape shape = !modules[i].in ? FDY_SHAPE(modules[i].out)
                        : p == 0
                            ? FDY_SHAPE(modules[i].out, modules[i].in / 8)
                            : FDY_SHAPE(modules[i].out, modules[i].in / 32);
      tensors[n] = (fdy_st_write_tensor){
          .name = names[n],
          .dtype = modules[i].in && p == 0 ? FDY_DTYPE_U32 : FDY_DTYPE_F16,
          .shape = shape,
          .data = zeros};
      n++;
    }
  }
  fdy_error err;
  path_in(path, sizeof path, dir, "model.safetensors");
  assert_int_equal(fdy_safetensors_write(path, tensors, n, &err), FDY_OK);
}

static void test_graph_padding(void **state) {
  (void)state;
  char dir[256];
  write_padded_checkpoint(dir, sizeof dir);
  fdy_error err;
  fdy_llama_model *m = NULL;
  fdy_status st = fdy_llama_open(dir, &m, &err);
  if (st != FDY_OK) {
    print_error("%s\n", err.message);
  }
  assert_int_equal(st, FDY_OK);
  assert_int_equal(fdy_llama_embedding(m)->scales->bytes, 160);
  fdy_llama_graph_options o = {.context = 16, .prefill_rows = 4};
  fdy_graph *g = NULL;
  fdy_llama_graph_io io;
  assert_int_equal(fdy_llama_graph(m, &o, &g, &io, &err), FDY_OK);
  expect_graph(m, g, &io, &o);
  unit_tensors embed = {.count = 0}, layer = layer_tensors(m, 0);
  add_linear(&embed, fdy_llama_embedding(m));
  /* embedding: 1280 + 160 (+96 padding) + 160 */
  assert_int_equal(expect_unit(g, "embed", &embed), 96);
  assert_true(expect_unit(g, "layer.0", &layer) > 0);
  fdy_graph_destroy(g);
  fdy_llama_close(m);
  remove_dir(dir);
}

/* ---- the plan ------------------------------------------------------------ */

/* The weight units' bytes rounded up to the alignment. */
static uint64_t aligned_bytes(const fdy_graph *g, const char *name) {
  uint64_t bytes = tensor_at(g, tensor_named(g, name)).bytes;
  return (bytes + FDY_TENSOR_ALIGNMENT - 1) / FDY_TENSOR_ALIGNMENT *
         FDY_TENSOR_ALIGNMENT;
}

/* Counts the prefetches of weight `name` in section `section`. */
static uint32_t prefetches(const fdy_plan *plan, const char *section,
                           const char *name) {
  const fdy_graph *g = fdy_plan_graph(plan);
  int64_t s = fdy_plan_find_section(plan, section);
  assert_true(s >= 0);
  const fdy_section *sec = fdy_plan_section(plan, (size_t)s);
  fdy_tensor_id id = tensor_named(g, name);
  uint32_t count = 0;
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *cmd = fdy_plan_command(plan, i);
    count += cmd->kind == FDY_CMD_PREFETCH && cmd->u.prefetch.weight.v == id.v;
  }
  return count;
}

/* Resident for a large budget, layers streamed through 2 slots of the
 * largest unit for a small one, the embedding and head resident too when
 * the budget also holds them, and FDY_ERR_BUDGET naming the minimum below
 * two slots. Every plan validates. */
static void test_graph_plans(void **state) {
  (void)state;
  fdy_error err;
  fdy_llama_model *m = NULL;
  fdy_graph *g = NULL;
  fdy_plan *plan = NULL;
  fdy_llama_graph_io io;
  assert_int_equal(fdy_llama_open(fixture[0], &m, &err), FDY_OK);
  const fdy_llama_config *c = fdy_llama_model_config(m);
  assert_int_equal(c->num_layers, 2);
  fdy_llama_graph_options o = {.context = 64, .prefill_rows = 8};
  assert_int_equal(fdy_llama_graph(m, &o, &g, &io, &err), FDY_OK);
  uint64_t layer = aligned_bytes(g, "layer.0"),
           embed = aligned_bytes(g, "embed"), head = aligned_bytes(g, "head");
  assert_int_equal(aligned_bytes(g, "layer.1"), layer);
  assert_true(embed < layer && head < layer);
  uint64_t all = embed + 2 * layer + head;
  static const char *const units[4] = {"embed", "layer.0", "layer.1", "head"};
  /* the embedding and the head come first in the residency order */
  for (int u = 0; u < 4; u++) {
    bool first = u == 0 || u == 3;
    assert_int_equal(tensor_at(g, tensor_named(g, units[u])).residency_priority,
                     first ? 1 : 0);
  }

  /* everything fits: one resident buffer uploaded by setup */
  fdy_plan_summary sum;
  assert_int_equal(fdy_llama_plan(g, &io, all, 2, &plan, &err), FDY_OK);
  expect_valid(plan, &sum);
  assert_int_equal(fdy_plan_check_graph(plan, g, &err), FDY_OK);
  assert_true(fdy_plan_find_section(plan, "prefill") > 0);
  assert_true(fdy_plan_find_section(plan, "decode") > 0);
  assert_int_equal(sum.ops, fdy_graph_op_count(g));
  assert_int_equal(sum.class_bytes[FDY_BUFFER_RESIDENT], all);
  assert_int_equal(sum.class_bytes[FDY_BUFFER_SLOT], 0);
  assert_int_equal(sum.step_transfer_bytes, 0);
  assert_true(sum.class_bytes[FDY_BUFFER_STATE] >=
              2ull * 2 * 64 * c->num_kv_heads * c->head_dim * 4);
  for (int u = 0; u < 4; u++) {
    assert_int_equal(prefetches(plan, "setup", units[u]), 1);
    assert_int_equal(prefetches(plan, "prefill", units[u]), 0);
    assert_int_equal(prefetches(plan, "decode", units[u]), 0);
  }
  fdy_plan_destroy(plan);
  plan = NULL;

  /* room for the embedding and the head besides one slot: they stay
   * resident and the layers stream through the slot */
  uint64_t budget = embed + head + layer;
  assert_int_equal(fdy_llama_plan(g, &io, budget, 1, &plan, &err), FDY_OK);
  expect_valid(plan, &sum);
  assert_int_equal(sum.class_bytes[FDY_BUFFER_RESIDENT], embed + head);
  assert_int_equal(sum.class_bytes[FDY_BUFFER_SLOT], layer);
  assert_true(sum.peak_weight_bytes <= budget);
  assert_int_equal(sum.step_transfer_bytes, 2 * layer);
  for (int u = 0; u < 4; u++) {
    bool streamed = u == 1 || u == 2;
    assert_int_equal(prefetches(plan, "setup", units[u]), !streamed);
    assert_int_equal(prefetches(plan, "prefill", units[u]), streamed);
    assert_int_equal(prefetches(plan, "decode", units[u]), streamed);
  }
  fdy_plan_destroy(plan);
  plan = NULL;

  /* one byte short of two slots */
  assert_int_equal(fdy_llama_plan(g, &io, 2 * layer - 1, 2, &plan, &err),
                   FDY_ERR_BUDGET);
  assert_int_equal(err.kind, FDY_ERR_BUDGET);
  assert_null(plan);
  assert_int_equal(err.expected, 2 * layer - 1);
  assert_int_equal(err.actual, 2 * layer);
  assert_int_equal(fdy_llama_plan(g, &io, 2 * layer, 0, &plan, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_plan(g, NULL, 2 * layer, 2, &plan, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  /* two slots of a layer and nothing else: everything streams, the tied
   * embedding (read first and again by the LM head) included */
  assert_int_equal(fdy_llama_plan(g, &io, 2 * layer, 2, &plan, &err), FDY_OK);
  expect_valid(plan, &sum);
  assert_int_equal(sum.class_bytes[FDY_BUFFER_RESIDENT], 0);
  assert_int_equal(sum.class_bytes[FDY_BUFFER_SLOT], 2 * layer);
  assert_true(sum.peak_weight_bytes <= 2 * layer);
  assert_true(sum.step_transfer_bytes >= all);
  for (int u = 0; u < 4; u++) {
    assert_int_equal(prefetches(plan, "setup", units[u]), 0);
    assert_true(prefetches(plan, "prefill", units[u]) >= 1);
    assert_true(prefetches(plan, "decode", units[u]) >= 1);
  }
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
  fdy_llama_close(m);
}

/* The generated variant fixtures open with the configuration they exist to
 * cover (tests/data/README.md). */
static void test_variant_fixtures_open(void **state) {
  (void)state;
  char dir[600];
  fdy_error err;
  fdy_llama_model *m = NULL;
  snprintf(dir, sizeof dir, "%s/llama3-micro-untied-g32/model", data_root);
  assert_int_equal(fdy_llama_open(dir, &m, &err), FDY_OK);
  const fdy_llama_config *c = fdy_llama_model_config(m);
  assert_false(c->tie_word_embeddings);
  assert_false(c->rope_llama3);
  assert_int_equal(c->dtype, FDY_DTYPE_BF16);
  assert_int_equal(c->group_size, 32);
  assert_int_equal(c->num_heads, 8);
  assert_int_equal(c->num_kv_heads, 2);
  assert_int_equal(fdy_llama_tensor_count(m), 3 + 2 * 23 + 1 + 3);
  const fdy_llama_linear *head = fdy_llama_lm_head(m);
  assert_string_equal(head->scales->name, "lm_head.scales");
  assert_int_equal(head->scales->dtype, FDY_DTYPE_BF16);
  assert_int_equal(head->scales->shape.dims[1], c->hidden_size / 32);
  fdy_llama_close(m);

  snprintf(dir, sizeof dir, "%s/llama3-micro-mha-g128/model", data_root);
  assert_int_equal(fdy_llama_open(dir, &m, &err), FDY_OK);
  c = fdy_llama_model_config(m);
  assert_true(c->tie_word_embeddings);
  assert_int_equal(c->dtype, FDY_DTYPE_F16);
  assert_int_equal(c->group_size, 128);
  assert_int_equal(c->num_kv_heads, c->num_heads);
  assert_int_equal(c->head_dim, 32); /* no head_dim field: hidden / heads */
  assert_int_equal(c->eos_count, 1); /* a scalar eos_token_id */
  assert_int_equal(c->eos_ids[0], 3);
  assert_int_equal(c->max_position_embeddings, 512);
  assert_int_equal(fdy_llama_layer(m, 0)->k.out_features, 256);
  assert_int_equal(fdy_llama_tensor_count(m), 3 + 2 * 23 + 1);
  fdy_llama_close(m);
}

/* MLX casts norms to the model's dtype like the scales, so an F32 norm in an
 * F16 checkpoint is a schema error naming the tensor. */
static void test_f32_norm_rejected(void **state) {
  (void)state;
  static const char *const norms[] = {
      "model.layers.1.post_attention_layernorm.weight", "model.norm.weight"};
  for (size_t k = 0; k < 2; k++) {
    char dir[256], path[1024], src[1024];
    copy_fixture(dir, sizeof dir, 0);
    path_in(src, sizeof src, fixture[0], "model.safetensors");
    path_in(path, sizeof path, dir, "model.safetensors");
    fdy_error err;
    fdy_safetensors *st = NULL;
    assert_int_equal(fdy_safetensors_open(src, &st, &err), FDY_OK);
    size_t n = fdy_safetensors_count(st);
    fdy_st_write_tensor *tensors = calloc(n, sizeof *tensors);
    float ones[256];
    assert_non_null(tensors);
    for (size_t i = 0; i < 256; i++) {
      ones[i] = 1.0f;
    }
    for (size_t i = 0; i < n; i++) {
      const fdy_st_tensor *t = fdy_safetensors_at(st, i);
      tensors[i] = (fdy_st_write_tensor){.name = t->name,
                                         .dtype = t->dtype,
                                         .shape = t->shape,
                                         .data = t->data};
      if (strcmp(t->name, norms[k]) == 0) {
        assert_true(fdy_shape_equal(t->shape, FDY_SHAPE(256)));
        tensors[i].dtype = FDY_DTYPE_F32;
        tensors[i].data = ones;
      }
    }
    assert_int_equal(unlink(path), 0);
    assert_int_equal(fdy_safetensors_write(path, tensors, n, &err), FDY_OK);
    free(tensors);
    fdy_safetensors_close(st);
    expect_open_error(dir, FDY_ERR_SCHEMA, "/model.safetensors", norms[k]);
    remove_dir(dir);
  }
}

/* ---- bad safetensors --------------------------------------------------- */

static void overwrite_bytes(const char *dir, long offset, const void *data,
                            size_t n) {
  char path[1024];
  path_in(path, sizeof path, dir, "model.safetensors");
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  fseek(f, offset, SEEK_SET);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

static void test_truncated(void **state) {
  (void)state;
  char dir[256], path[1024];
  copy_fixture(dir, sizeof dir, 0);
  path_in(path, sizeof path, dir, "model.safetensors");
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(truncate(path, sb.st_size - 100), 0);
  expect_open_error(dir, FDY_ERR_FORMAT, "model.safetensors", "tensor '");
  assert_int_equal(truncate(path, 5), 0);
  expect_open_error(dir, FDY_ERR_FORMAT, "model.safetensors", "truncated");
  remove_dir(dir);
}

static void test_header_too_long(void **state) {
  (void)state;
  char dir[256];
  copy_fixture(dir, sizeof dir, 0);
  unsigned char len[8] = {0, 0, 0, 0, 0, 0, 0, 1};
  overwrite_bytes(dir, 0, len, 8);
  expect_open_error(dir, FDY_ERR_FORMAT, "model.safetensors", "header");
  unsigned char big[8] = {0, 0, 0, 0x7f, 0, 0, 0, 0}; /* > file, < 100 MiB? */
  overwrite_bytes(dir, 0, big, 8);
  expect_open_error(dir, FDY_ERR_FORMAT, "model.safetensors", "header");
  remove_dir(dir);
}

static void test_header_not_json(void **state) {
  (void)state;
  char dir[256];
  copy_fixture(dir, sizeof dir, 0);
  overwrite_bytes(dir, 8, "{oops", 5);
  expect_open_error(dir, FDY_ERR_PARSE, "model.safetensors", NULL);
  remove_dir(dir);
}

static json_t *entry(json_t *h, const char *name) {
  json_t *e = json_object_get(h, name);
  assert_non_null(e);
  return e;
}

static void edit_outside(json_t *h) {
  json_t *o = json_object_get(entry(h, "model.norm.weight"), "data_offsets");
  json_int_t b = json_integer_value(json_array_get(o, 0));
  json_array_set_new(o, 0, json_integer(b + 100000000));
  json_array_set_new(o, 1, json_integer(b + 100000000 + 512));
}

static void edit_overlap(json_t *h) {
  json_t *src = json_object_get(
      entry(h, "model.layers.0.input_layernorm.weight"), "data_offsets");
  json_object_set(entry(h, "model.norm.weight"), "data_offsets", src);
}

static void edit_dtype(json_t *h) {
  json_object_set_new(entry(h, "model.layers.1.mlp.up_proj.scales"), "dtype",
                      json_string("BF16"));
}

static void edit_shape(json_t *h) {
  json_t *e = entry(h, "model.layers.1.self_attn.k_proj.biases");
  json_t *shape = json_object_get(e, "shape");
  json_int_t a = json_integer_value(json_array_get(shape, 0));
  json_int_t b = json_integer_value(json_array_get(shape, 1));
  json_object_set_new(e, "shape", json_pack("[I, I]", a / 2, b * 2));
}

static void edit_missing(json_t *h) {
  json_object_del(h, "model.layers.1.mlp.gate_proj.weight");
}

static void edit_unexpected(json_t *h) {
  json_object_set_new(h, "model.layers.0.extra.weight",
                      json_pack("{s:s, s:[i], s:[i, i]}", "dtype", "U8",
                                "shape", 0, "data_offsets", 0, 0));
}

static void edit_lm_head(json_t *h) {
  json_object_set_new(h, "lm_head.weight",
                      json_pack("{s:s, s:[i], s:[i, i]}", "dtype", "U32",
                                "shape", 0, "data_offsets", 0, 0));
}

static void edit_size_mismatch(json_t *h) {
  json_object_set_new(entry(h, "model.norm.weight"), "shape",
                      json_pack("[i]", 255));
}

static void test_bad_tensors(void **state) {
  (void)state;
  struct {
    header_edit edit;
    fdy_status kind;
    const char *tensor;
  } cases[] = {
      {edit_outside, FDY_ERR_FORMAT, "model.norm.weight"},
      {edit_overlap, FDY_ERR_FORMAT, "model.norm.weight"},
      {edit_size_mismatch, FDY_ERR_FORMAT, "model.norm.weight"},
      {edit_dtype, FDY_ERR_SCHEMA, "model.layers.1.mlp.up_proj.scales"},
      {edit_shape, FDY_ERR_SCHEMA, "model.layers.1.self_attn.k_proj.biases"},
      {edit_missing, FDY_ERR_NOT_FOUND, "model.layers.1.mlp.gate_proj.weight"},
      {edit_unexpected, FDY_ERR_SCHEMA, "model.layers.0.extra.weight"},
      {edit_lm_head, FDY_ERR_SCHEMA, "lm_head.weight"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char dir[256];
    copy_fixture(dir, sizeof dir, 0);
    edit_header(dir, cases[i].edit);
    expect_open_error(dir, cases[i].kind, "/model.safetensors",
                      cases[i].tensor);
    remove_dir(dir);
  }
}

static void test_safetensors_direct(void **state) {
  (void)state;
  char path[1024];
  fdy_error err;
  fdy_safetensors *st = NULL;
  path_in(path, sizeof path, fixture[0], "model.safetensors");
  assert_int_equal(fdy_safetensors_open(path, &st, &err), FDY_OK);
  assert_int_equal(fdy_safetensors_count(st), 50);
  assert_null(fdy_safetensors_at(st, 50));
  const fdy_st_tensor *t = NULL;
  assert_int_equal(fdy_safetensors_find(st, "nope", &t, &err),
                   FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, "nope");
  assert_int_equal(fdy_safetensors_find(st, "model.norm.weight", &t, &err),
                   FDY_OK);
  assert_int_equal(t->dtype, FDY_DTYPE_F16);
  assert_int_equal(t->bytes, 512);
  fdy_safetensors_close(st);
  assert_int_equal(
      fdy_safetensors_open("/nonexistent/x.safetensors", &st, &err),
      FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, "/nonexistent/x.safetensors");
}

static void test_writer_roundtrip(void **state) {
  (void)state;
  char dir[] = "/tmp/fdy_st_write_XXXXXX", path[256];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/a.safetensors", dir);
  uint16_t half[6] = {1, 2, 3, 4, 5, 6};
  uint8_t bytes[3] = {7, 8, 9};
  fdy_st_write_tensor ts[2] = {
      {"zeta", FDY_DTYPE_F16, FDY_SHAPE(2, 3), half},
      {"alpha", FDY_DTYPE_U8, FDY_SHAPE(3), bytes},
  };
  fdy_error err;
  assert_int_equal(fdy_safetensors_write(path, ts, 2, &err), FDY_OK);
  assert_int_equal(fdy_safetensors_write(path, ts, 2, &err), FDY_ERR_EXISTS);
  fdy_st_write_tensor dup[2] = {ts[0], ts[0]};
  char path2[300];
  snprintf(path2, sizeof path2, "%s/b.safetensors", dir);
  assert_int_equal(fdy_safetensors_write(path2, dup, 2, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(access(path2, F_OK), -1);
  fdy_safetensors *st = NULL;
  assert_int_equal(fdy_safetensors_open(path, &st, &err), FDY_OK);
  const fdy_st_tensor *t = NULL;
  assert_int_equal(fdy_safetensors_find(st, "alpha", &t, &err), FDY_OK);
  assert_memory_equal(t->data, bytes, 3);
  assert_int_equal(fdy_safetensors_find(st, "zeta", &t, &err), FDY_OK);
  assert_true(fdy_shape_equal(t->shape, FDY_SHAPE(2, 3)));
  assert_memory_equal(t->data, half, 12);
  fdy_safetensors_close(st);
  unlink(path);
  assert_int_equal(rmdir(dir), 0);
}

/* ---- bad config.json ----------------------------------------------------- */

typedef void (*config_edit)(json_t *config);

static void edit_config(const char *dir, config_edit edit) {
  char path[1024];
  size_t len;
  path_in(path, sizeof path, dir, "config.json");
  char *text = read_all(path, &len);
  json_t *c = json_loadb(text, len, 0, NULL);
  assert_non_null(c);
  edit(c);
  free(text);
  text = json_dumps(c, 0);
  write_all(path, text, strlen(text));
  free(text);
  json_decref(c);
}

static void cfg_group(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"), "group_size",
                      json_integer(48));
}
/* bits a cfg_bits edit writes */
static int edit_bits = 3;
static void cfg_bits(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"), "bits",
                      json_integer(edit_bits));
}
static void cfg_mode(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"), "mode",
                      json_string("mxfp4"));
}
/* nvfp4 has groups of 16: the mode, not the group size, is the reason */
static void cfg_mode_nvfp4(json_t *c) {
  json_t *q = json_object_get(c, "quantization");
  json_object_set_new(q, "mode", json_string("nvfp4"));
  json_object_set_new(q, "group_size", json_integer(16));
}
static void cfg_mode_affine(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"), "mode",
                      json_string("affine"));
}
static void cfg_mode_null(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"), "mode", json_null());
}
static void cfg_mode_type(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"), "mode",
                      json_integer(1));
}
static void cfg_override(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"),
                      "model.layers.0.mlp.down_proj",
                      json_pack("{s:i, s:i}", "group_size", 64, "bits", 8));
}
/* a tied model has no lm_head */
static void cfg_unquantized_layer(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"), "lm_head",
                      json_false());
}
static void cfg_override_bits(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"),
                      "model.layers.1.self_attn.v_proj",
                      json_pack("{s:i, s:i}", "group_size", 64, "bits", 6));
}
static void cfg_override_group(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"),
                      "model.layers.1.self_attn.v_proj",
                      json_pack("{s:i, s:i}", "group_size", 48, "bits", 8));
}
static void cfg_override_mode(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"),
                      "model.layers.1.self_attn.v_proj",
                      json_pack("{s:i, s:i, s:s}", "group_size", 32, "bits", 4,
                                "mode", "mxfp4"));
}
static void cfg_override_no_bits(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"), "model.embed_tokens",
                      json_pack("{s:i}", "group_size", 64));
}
static void cfg_override_layer(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"),
                      "model.layers.2.mlp.up_proj", json_false());
}
static void cfg_override_norm(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"),
                      "model.layers.0.input_layernorm", json_true());
}
static void cfg_override_unquantized(json_t *c) {
  json_object_set_new(json_object_get(c, "quantization"),
                      "model.layers.0.self_attn.o_proj", json_false());
}
static void cfg_missing(json_t *c) {
  json_object_del(c, "hidden_size");
}
static void cfg_type(json_t *c) {
  json_object_set_new(c, "num_hidden_layers", json_string("2"));
}
static void cfg_eos_type(json_t *c) {
  json_object_set_new(c, "eos_token_id", json_string("2"));
}
static void cfg_no_quant(json_t *c) {
  json_object_del(c, "quantization");
}
static void cfg_rope(json_t *c) {
  json_object_set_new(json_object_get(c, "rope_scaling"), "rope_type",
                      json_string("yarn"));
}
static void cfg_model_type(json_t *c) {
  json_object_set_new(c, "model_type", json_string("phi3"));
}
static void cfg_untied(json_t *c) {
  json_object_set_new(c, "tie_word_embeddings", json_false());
}
static void cfg_rope_factor(json_t *c) {
  json_object_del(json_object_get(c, "rope_scaling"), "factor");
}

static void test_bad_config(void **state) {
  (void)state;
  struct {
    config_edit edit;
    fdy_status kind;
    const char *name;
    const char *mention;
  } cases[] = {
      {cfg_group, FDY_ERR_UNSUPPORTED, "quantization.group_size",
       "unsupported quantization: field 'quantization.group_size' is 48"},
      {cfg_bits, FDY_ERR_UNSUPPORTED, "quantization.bits",
       "unsupported quantization: field 'quantization.bits' is 3; only 4-bit "
       "and 8-bit"},
      {cfg_mode, FDY_ERR_UNSUPPORTED, "quantization.mode", "'mxfp4'"},
      {cfg_mode_nvfp4, FDY_ERR_UNSUPPORTED, "quantization.mode", "'nvfp4'"},
      {cfg_mode_type, FDY_ERR_SCHEMA, "quantization.mode", NULL},
      /* an 8-bit entry over 4-bit tensors, an unquantized one over
       * quantized tensors: the shapes say so */
      {cfg_override, FDY_ERR_SCHEMA, "model.safetensors",
       "tensor 'model.layers.0.mlp.down_proj.weight' has shape [256, 64], "
       "expected [256, 128]"},
      {cfg_override_unquantized, FDY_ERR_SCHEMA, "model.safetensors",
       "tensor 'model.layers.0.self_attn.o_proj.weight' has dtype U32, "
       "expected F16"},
      {cfg_unquantized_layer, FDY_ERR_SCHEMA, "quantization.lm_head",
       "names no linear layer of this model"},
      {cfg_override_bits, FDY_ERR_UNSUPPORTED,
       "quantization.model.layers.1.self_attn.v_proj.bits",
       "is 6; only 4-bit and 8-bit"},
      {cfg_override_group, FDY_ERR_UNSUPPORTED,
       "quantization.model.layers.1.self_attn.v_proj.group_size", "is 48"},
      {cfg_override_mode, FDY_ERR_UNSUPPORTED,
       "quantization.model.layers.1.self_attn.v_proj.mode", "'mxfp4'"},
      {cfg_override_no_bits, FDY_ERR_SCHEMA,
       "quantization.model.embed_tokens.bits", "is missing"},
      {cfg_override_layer, FDY_ERR_SCHEMA,
       "quantization.model.layers.2.mlp.up_proj", "names no linear layer"},
      {cfg_override_norm, FDY_ERR_SCHEMA,
       "quantization.model.layers.0.input_layernorm", "names no linear layer"},
      {cfg_missing, FDY_ERR_SCHEMA, "hidden_size", NULL},
      {cfg_type, FDY_ERR_SCHEMA, "num_hidden_layers", NULL},
      {cfg_eos_type, FDY_ERR_SCHEMA, "eos_token_id", NULL},
      /* no quantization: an unquantized checkpoint, which this is not */
      {cfg_no_quant, FDY_ERR_SCHEMA, "model.safetensors",
       "tensor 'model.embed_tokens.weight' has dtype U32, expected F16"},
      {cfg_rope, FDY_ERR_UNSUPPORTED, "rope_scaling.rope_type",
       "unsupported rope scaling"},
      {cfg_rope_factor, FDY_ERR_SCHEMA, "rope_scaling.factor", NULL},
      {cfg_model_type, FDY_ERR_UNSUPPORTED, "model_type", "unsupported model"},
      /* untied but no lm_head in the file */
      {cfg_untied, FDY_ERR_NOT_FOUND, "model.safetensors.index.json",
       "lm_head.weight"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char dir[256];
    copy_fixture(dir, sizeof dir, 0);
    edit_config(dir, cases[i].edit);
    expect_open_error(dir, cases[i].kind, cases[i].name, cases[i].mention);
    remove_dir(dir);
  }
  /* the other bits mlx-lm writes are refused, naming the value */
  static const int other_bits[] = {2, 5, 6};
  for (size_t i = 0; i < 3; i++) {
    char dir[256], mention[96];
    edit_bits = other_bits[i];
    snprintf(mention, sizeof mention,
             "unsupported quantization: field 'quantization.bits' is %d",
             other_bits[i]);
    copy_fixture(dir, sizeof dir, 0);
    edit_config(dir, cfg_bits);
    expect_open_error(dir, FDY_ERR_UNSUPPORTED, "quantization.bits", mention);
    remove_dir(dir);
  }
  edit_bits = 3;
  /* "mode": "affine" (what mlx-lm writes) and null are the default */
  static const config_edit accepted[] = {cfg_mode_affine, cfg_mode_null};
  for (size_t i = 0; i < 2; i++) {
    char dir[256];
    copy_fixture(dir, sizeof dir, 0);
    edit_config(dir, accepted[i]);
    fdy_error err;
    fdy_llama_model *m = NULL;
    assert_int_equal(fdy_llama_open(dir, &m, &err), FDY_OK);
    fdy_llama_close(m);
    remove_dir(dir);
  }
  char dir[256], path[1024];
  copy_fixture(dir, sizeof dir, 0);
  path_in(path, sizeof path, dir, "config.json");
  write_all(path, "{\"a\": 1,", 8);
  expect_open_error(dir, FDY_ERR_PARSE, "config.json", NULL);
  unlink(path);
  expect_open_error(dir, FDY_ERR_NOT_FOUND, "config.json", NULL);
  remove_dir(dir);
}

/* ---- make-model ------------------------------------------------------------
 */

static void expect_same_files(const char *a, const char *b, bool same) {
  bool all_same = true;
  for (int i = 0; i < 3; i++) {
    char pa[1024], pb[1024];
    size_t la, lb;
    path_in(pa, sizeof pa, a, model_files[i]);
    path_in(pb, sizeof pb, b, model_files[i]);
    char *da = read_all(pa, &la), *db = read_all(pb, &lb);
    if (i == 1) {
      all_same = la == lb && memcmp(da, db, la) == 0;
    } else if (!same) {
      assert_int_equal(la, lb);
    } else {
      assert_int_equal(la, lb);
      assert_memory_equal(da, db, la);
    }
    free(da);
    free(db);
  }
  assert_true(all_same == same);
}

static void expect_same_config(const fdy_llama_config *a,
                               const fdy_llama_config *b) {
  assert_int_equal(a->vocab_size, b->vocab_size);
  assert_int_equal(a->hidden_size, b->hidden_size);
  assert_int_equal(a->intermediate_size, b->intermediate_size);
  assert_int_equal(a->num_layers, b->num_layers);
  assert_int_equal(a->num_heads, b->num_heads);
  assert_int_equal(a->num_kv_heads, b->num_kv_heads);
  assert_int_equal(a->head_dim, b->head_dim);
  assert_int_equal(a->max_position_embeddings, b->max_position_embeddings);
  assert_true(a->rope_theta == b->rope_theta);
  assert_true(a->rope_llama3 == b->rope_llama3);
  assert_true(a->rope_factor == b->rope_factor);
  assert_true(a->rope_low_freq_factor == b->rope_low_freq_factor);
  assert_true(a->rope_high_freq_factor == b->rope_high_freq_factor);
  assert_int_equal(a->rope_original_max_position,
                   b->rope_original_max_position);
  assert_true(a->tie_word_embeddings == b->tie_word_embeddings);
  assert_true(a->rms_norm_eps == b->rms_norm_eps);
  assert_int_equal(a->bos_id, b->bos_id);
  assert_int_equal(a->quant_overrides, b->quant_overrides);
  assert_int_equal(a->eos_count, b->eos_count);
  assert_memory_equal(a->eos_ids, b->eos_ids,
                      sizeof a->eos_ids[0] * a->eos_count);
  assert_int_equal(a->group_size, b->group_size);
  assert_int_equal(a->bits, b->bits);
  assert_int_equal(a->dtype, b->dtype);
  assert_int_equal(a->family, b->family);
  assert_true(a->qkv_bias == b->qkv_bias);
  assert_true(a->qk_norm == b->qk_norm);
}

/* A scale or bias (F16 or BF16, little-endian, possibly unaligned) as a
 * double, decoded here independently of the library. */
static double half_at(const fdy_st_tensor *t, uint64_t index) {
  const unsigned char *p = (const unsigned char *)t->data + 2 * index;
  uint16_t h = (uint16_t)(p[0] | p[1] << 8);
  if (t->dtype == FDY_DTYPE_BF16) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
  }
  assert_int_equal(t->dtype, FDY_DTYPE_F16);
  int e = (h >> 10) & 31, mantissa = h & 1023;
  assert_int_not_equal(e, 31);
  double v = e == 0 ? ldexp(mantissa, -24) : ldexp(1024 + mantissa, e - 25);
  return h & 0x8000 ? -v : v;
}

/* Element (row, i) of a quantized linear in the MLX layout: nibbles low
 * first, w = scale * q + bias per group. */
static double dequantized(const fdy_llama_linear *l, uint32_t group,
                          uint32_t row, uint32_t i) {
  const unsigned char *packed = l->weight->data;
  uint64_t word = ((uint64_t)row * l->in_features + i) / 8;
  const unsigned char *w = packed + 4 * word;
  uint32_t bits = (uint32_t)w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16 |
                  (uint32_t)w[3] << 24;
  uint32_t q = (bits >> (4 * (i % 8))) & 0xf;
  uint64_t g = (uint64_t)row * (l->in_features / group) + i / group;
  return half_at(l->scales, g) * q + half_at(l->biases, g);
}

static void test_make_model(void **state) {
  (void)state;
  char root[] = "/tmp/fdy_make_model_XXXXXX";
  assert_non_null(mkdtemp(root));
  static const char *const presets[] = {"micro", "tiny", "micro-untied",
                                        "micro-llama3-vocab"};
  for (int p = 0; p < 4; p++) {
    char a[256], b[256], c[256];
    snprintf(a, sizeof a, "%s/%s-a", root, presets[p]);
    snprintf(b, sizeof b, "%s/%s-b/", root, presets[p]);
    snprintf(c, sizeof c, "%s/%s-c", root, presets[p]);
    fdy_error err;
    assert_int_equal(fdy_llama_make_model(presets[p], 7, a, &err), FDY_OK);
    assert_int_equal(fdy_llama_make_model(presets[p], 7, b, &err), FDY_OK);
    assert_int_equal(fdy_llama_make_model(presets[p], 8, c, &err), FDY_OK);
    expect_same_files(a, b, true);
    expect_same_files(a, c, false);
    assert_int_equal(fdy_llama_make_model(presets[p], 7, a, &err),
                     FDY_ERR_EXISTS);
    fdy_llama_model *m = NULL;
    assert_int_equal(fdy_llama_open(a, &m, &err), FDY_OK);
    const fdy_llama_config *cfg = fdy_llama_model_config(m);
    /* the preset's config and bytes, computed, are what was written */
    fdy_llama_config want;
    uint64_t want_bytes = 0;
    assert_int_equal(
        fdy_llama_preset_config(presets[p], NULL, &want, &want_bytes, &err),
        FDY_OK);
    expect_same_config(&want, cfg);
    assert_int_equal(want_bytes, fdy_llama_total_bytes(m));
    if (p == 2) {
      assert_false(cfg->tie_word_embeddings);
      assert_false(cfg->rope_llama3);
      assert_int_equal(cfg->dtype, FDY_DTYPE_BF16);
      assert_ptr_not_equal(fdy_llama_lm_head(m)->weight,
                           fdy_llama_embedding(m)->weight);
      assert_string_equal(fdy_llama_lm_head(m)->weight->name, "lm_head.weight");
    } else {
      assert_true(cfg->tie_word_embeddings);
      assert_int_equal(cfg->dtype, FDY_DTYPE_F16);
    }
    if (p == 3) {
      /* the real Llama 3 vocabulary, BOS and EOS ids on tiny layers */
      assert_int_equal(cfg->vocab_size, 128256);
      assert_int_equal(cfg->bos_id, 128000);
      assert_int_equal(cfg->eos_count, 3);
      assert_int_equal(cfg->eos_ids[0], 128001);
      assert_int_equal(cfg->eos_ids[1], 128008);
      assert_int_equal(cfg->eos_ids[2], 128009);
      assert_int_equal(cfg->hidden_size, 64);
    }
    /* the graph of what make-model wrote */
    fdy_llama_graph_options o = {.context = 16, .prefill_rows = 4};
    fdy_graph *g = NULL;
    fdy_llama_graph_io io;
    assert_int_equal(fdy_llama_graph(m, &o, &g, &io, &err), FDY_OK);
    expect_graph(m, g, &io, &o);
    fdy_graph_destroy(g);
    /* dequantized weights are realistic: |w| small, not all zero */
    const fdy_llama_linear *q = &fdy_llama_layer(m, 0)->q;
    double sq = 0;
    for (uint32_t i = 0; i < q->in_features; i++) {
      double w = dequantized(q, cfg->group_size, 3, i);
      sq += w * w;
    }
    double rms = sqrt(sq / q->in_features);
    double target = 1.0 / sqrt((double)q->in_features);
    assert_true(rms > 0.5 * target && rms < 2.0 * target);
    fdy_llama_close(m);
    remove_dir(a);
    remove_dir(b);
    remove_dir(c);
  }
  fdy_error err;
  char bad[300];
  snprintf(bad, sizeof bad, "%s/none", root);
  assert_int_equal(fdy_llama_make_model("huge", 1, bad, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  snprintf(bad, sizeof bad, "%s/missing/parent", root);
  assert_int_equal(fdy_llama_make_model("micro", 1, bad, &err),
                   FDY_ERR_NOT_FOUND);
  assert_int_equal(rmdir(root), 0); /* nothing left behind */
  assert_non_null(fdy_llama_presets()[0]);
}

/* The kind of the op named `name` (FDY_OP_KIND_COUNT when there is
 * none). */
static fdy_op_kind kind_named(const fdy_graph *g, const char *name) {
  for (uint32_t i = 0; i < fdy_graph_op_count(g); i++) {
    fdy_op_info op = op_at(g, i);
    if (strcmp(op.name, name) == 0) {
      return op.kind;
    }
  }
  return FDY_OP_KIND_COUNT;
}

/* Whether any op of g has a kind with the Q4 matmul flag. */
static bool has_q4_kinds(const fdy_graph *g) {
  for (uint32_t i = 0; i < fdy_graph_op_count(g); i++) {
    if (fdy_op_row_of(op_at(g, i).kind)->flags & FDY_OP_Q4_MATMUL) {
      return true;
    }
  }
  return false;
}

/* A linear's quantization, and its tensors as that says. */
static void expect_linear(const fdy_llama_linear *l, uint32_t bits,
                          uint32_t group, fdy_dtype dtype) {
  assert_int_equal(l->quant.bits, bits);
  assert_int_equal(l->quant.group_size, group);
  if (bits == 0) {
    assert_int_equal(l->weight->dtype, dtype);
    assert_true(fdy_shape_equal(l->weight->shape,
                                FDY_SHAPE(l->out_features, l->in_features)));
    assert_null(l->scales);
    assert_null(l->biases);
    return;
  }
  assert_int_equal(l->weight->dtype, FDY_DTYPE_U32);
  assert_int_equal(l->weight->shape.dims[1], l->in_features * bits / 32);
  assert_int_equal(l->scales->dtype, dtype);
  assert_int_equal(l->scales->shape.dims[1], l->in_features / group);
}

/* make-model's variants: 8-bit, unquantized (F16, BF16, F32) and mixed
 * (make_model.c's recipe on 2 layers: layer 1's v_proj and down_proj and
 * the untied lm_head at 8 bits, layer 1's o_proj unquantized). Each loads
 * with the config and bytes fdy_llama_preset_config computes, every linear
 * quantized as asked, and a graph whose ops follow the quantization: the
 * fused Q4 kinds only where all their weights are 4-bit alike; a layer of
 * the mixed model larger than the other. */
static void test_make_model_variants(void **state) {
  (void)state;
  char root[] = "/tmp/fdy_make_variants_XXXXXX";
  assert_non_null(mkdtemp(root));
  const struct {
    const char *preset;
    fdy_llama_make_options o;
    uint32_t bits, group, overrides;
    fdy_dtype dtype;
  } variants[] = {
      {"micro", {.bits = 8, .group_size = 32}, 8, 32, 0, FDY_DTYPE_F16},
      {"micro-untied", {.bits = 8}, 8, 64, 0, FDY_DTYPE_BF16},
      {"micro", {.unquantized = true}, 0, 0, 0, FDY_DTYPE_F16},
      {"micro-untied",
       {.unquantized = true, .dtype = "float32"},
       0,
       0,
       0,
       FDY_DTYPE_F32},
      {"micro",
       {.unquantized = true, .dtype = "bfloat16"},
       0,
       0,
       0,
       FDY_DTYPE_BF16},
      {"micro-untied",
       {.mixed = true, .group_size = 128},
       4,
       128,
       4,
       FDY_DTYPE_BF16},
  };
  for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/%zu", root, v);
    fdy_error err;
    assert_int_equal(fdy_llama_make_model_ex(variants[v].preset, 5,
                                             &variants[v].o, dir, NULL, NULL,
                                             &err),
                     FDY_OK);
    fdy_llama_model *m = NULL;
    assert_int_equal(fdy_llama_open(dir, &m, &err), FDY_OK);
    const fdy_llama_config *c = fdy_llama_model_config(m);
    assert_int_equal(c->bits, variants[v].bits);
    assert_int_equal(c->group_size, variants[v].group);
    assert_int_equal(c->quant_overrides, variants[v].overrides);
    assert_int_equal(c->dtype, variants[v].dtype);
    fdy_llama_config want;
    uint64_t want_bytes = 0;
    assert_int_equal(fdy_llama_preset_config(variants[v].preset, &variants[v].o,
                                             &want, &want_bytes, &err),
                     FDY_OK);
    expect_same_config(&want, c);
    assert_int_equal(want.dtype, c->dtype);
    assert_int_equal(want_bytes, fdy_llama_total_bytes(m));
    bool mixed = variants[v].o.mixed;
    uint32_t bits = variants[v].bits, group = variants[v].group;
    const fdy_llama_layer_weights *l0 = fdy_llama_layer(m, 0),
                                  *l1 = fdy_llama_layer(m, 1);
    expect_linear(fdy_llama_embedding(m), bits, group, c->dtype);
    expect_linear(&l0->v, bits, group, c->dtype);
    expect_linear(&l0->o, bits, group, c->dtype);
    expect_linear(&l1->q, bits, group, c->dtype);
    expect_linear(&l1->v, mixed ? 8 : bits, group, c->dtype);
    expect_linear(&l1->down, mixed ? 8 : bits, group, c->dtype);
    expect_linear(&l1->o, mixed ? 0 : bits, mixed ? 0 : group, c->dtype);
    expect_linear(fdy_llama_lm_head(m), mixed ? 8 : bits, group, c->dtype);
    if (mixed) {
      assert_true(fdy_llama_layer_bytes(m, 1) > fdy_llama_layer_bytes(m, 0));
    } else {
      assert_int_equal(fdy_llama_layer_bytes(m, 1),
                       fdy_llama_layer_bytes(m, 0));
    }
    fdy_llama_graph_options o = {.context = 16, .prefill_rows = 4};
    fdy_graph *g = NULL;
    assert_int_equal(fdy_llama_graph(m, &o, &g, NULL, &err), FDY_OK);
    const fdy_op_kind matmul = bits == 8   ? FDY_OP_MATMUL_Q8
                               : bits == 0 ? FDY_OP_MATMUL_DENSE
                                           : FDY_OP_MATMUL_Q4;
    const fdy_op_kind embed = bits == 8   ? FDY_OP_EMBED_Q8
                              : bits == 0 ? FDY_OP_EMBED_DENSE
                                          : FDY_OP_EMBED_Q4;
    assert_int_equal(kind_named(g, "decode.embed"), embed);
    assert_int_equal(kind_named(g, "prefill.embed"), embed);
    if (!mixed) {
      assert_false(has_q4_kinds(g));
      for (int l = 0; l < 2; l++) {
        static const char *const matmuls[] = {"q",    "k",  "v",   "o",
                                              "gate", "up", "down"};
        for (size_t k = 0; k < 7; k++) {
          char name[64];
          snprintf(name, sizeof name, "decode.layer.%d.%s", l, matmuls[k]);
          assert_int_equal(kind_named(g, name), matmul);
        }
      }
      assert_int_equal(kind_named(g, "decode.layer.0.attn_norm"),
                       FDY_OP_RMSNORM);
      assert_int_equal(kind_named(g, "decode.layer.0.mlp_norm"),
                       FDY_OP_RMSNORM);
      assert_int_equal(kind_named(g, "decode.layer.0.attn_residual"),
                       FDY_OP_ADD);
      assert_int_equal(kind_named(g, "decode.layer.0.swiglu"), FDY_OP_SWIGLU);
      assert_int_equal(kind_named(g, "decode.layer.1.mlp_residual"),
                       FDY_OP_ADD);
      assert_int_equal(kind_named(g, "decode.final_norm"), FDY_OP_RMSNORM);
      assert_int_equal(kind_named(g, "decode.logits"), matmul);
    } else {
      /* layer 0 all 4-bit: fused; layer 1: unfused where 8-bit or
       * unquantized weights are */
      assert_int_equal(kind_named(g, "decode.layer.0.qkv"),
                       FDY_OP_NORM_MATMUL_Q4);
      assert_int_equal(kind_named(g, "decode.layer.0.attn_residual"),
                       FDY_OP_MATMUL_ADD_Q4);
      assert_int_equal(kind_named(g, "decode.layer.0.mlp_residual"),
                       FDY_OP_MATMUL_ADD_Q4);
      assert_int_equal(kind_named(g, "decode.layer.1.attn_norm"),
                       FDY_OP_RMSNORM);
      assert_int_equal(kind_named(g, "decode.layer.1.q"), FDY_OP_MATMUL_Q4);
      assert_int_equal(kind_named(g, "decode.layer.1.v"), FDY_OP_MATMUL_Q8);
      assert_int_equal(kind_named(g, "decode.layer.1.o"), FDY_OP_MATMUL_DENSE);
      assert_int_equal(kind_named(g, "decode.layer.1.attn_residual"),
                       FDY_OP_ADD);
      assert_int_equal(kind_named(g, "decode.layer.1.swiglu"),
                       FDY_OP_NORM_SWIGLU_Q4);
      assert_int_equal(kind_named(g, "decode.layer.1.down"), FDY_OP_MATMUL_Q8);
      assert_int_equal(kind_named(g, "decode.logits"), FDY_OP_MATMUL_Q8);
      assert_int_equal(kind_named(g, "prefill.logits"), FDY_OP_MATMUL_Q8);
    }
    assert_int_equal(fdy_graph_validate(g, &err), FDY_OK);
    fdy_graph_destroy(g);
    fdy_llama_close(m);
    remove_dir(dir);
  }
  /* options out of range are refused before anything is written */
  const fdy_llama_make_options bad[] = {
      {.bits = 6},
      {.bits = 3},
      {.group_size = 16},
      {.dtype = "float64"},
      {.dtype = "float32"}, /* quantized */
      {.unquantized = true, .mixed = true},
  };
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/bad", root);
    fdy_error err;
    assert_int_equal(
        fdy_llama_make_model_ex("micro", 1, &bad[b], dir, NULL, NULL, &err),
        FDY_ERR_INVALID_ARGUMENT);
    assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
    fdy_llama_config c;
    assert_int_equal(fdy_llama_preset_config("micro", &bad[b], &c, NULL, &err),
                     FDY_ERR_INVALID_ARGUMENT);
  }
  assert_int_equal(rmdir(root), 0); /* nothing left behind */
}

/* A linear without an entry of its own whose scales the checkpoint lacks
 * is unquantized (mlx-lm writes no entry for a module its predicate left
 * unquantized); one without an entry whose scales are there takes the
 * default, which tensors of other bits contradict. */
static void cfg_drop_o_proj(json_t *c) {
  json_object_del(json_object_get(c, "quantization"),
                  "model.layers.1.self_attn.o_proj");
}
static void cfg_drop_v_proj(json_t *c) {
  json_object_del(json_object_get(c, "quantization"),
                  "model.layers.1.self_attn.v_proj");
}

static void test_mixed_without_entries(void **state) {
  (void)state;
  char dir[] = "/tmp/fdy_mixed_XXXXXX";
  assert_non_null(mkdtemp(dir));
  assert_int_equal(rmdir(dir), 0);
  fdy_llama_make_options o = {.mixed = true};
  fdy_error err;
  assert_int_equal(
      fdy_llama_make_model_ex("micro", 2, &o, dir, NULL, NULL, &err), FDY_OK);
  edit_config(dir, cfg_drop_o_proj);
  fdy_llama_model *m = NULL;
  assert_int_equal(fdy_llama_open(dir, &m, &err), FDY_OK);
  assert_int_equal(fdy_llama_model_config(m)->quant_overrides, 2);
  expect_linear(&fdy_llama_layer(m, 1)->o, 0, 0, FDY_DTYPE_F16);
  expect_linear(&fdy_llama_layer(m, 0)->o, 4, 64, FDY_DTYPE_F16);
  fdy_llama_close(m);
  edit_config(dir, cfg_drop_v_proj);
  expect_open_error(dir, FDY_ERR_SCHEMA, "model.safetensors",
                    "tensor 'model.layers.1.self_attn.v_proj.weight' has "
                    "shape [64, 64], expected [64, 32]");
  remove_dir(dir);
}

/* Bytes of a 4-bit linear with groups of 64 and 2-byte scales and biases:
 * packed nibbles plus a scale and a bias per group. */
static uint64_t linear_bytes(uint64_t out, uint64_t in) {
  return out * in / 2 + 2 * 2 * out * (in / 64);
}

/* ---- model families ---------------------------------------------------------
 */

static void cfg_sliding_window(json_t *c) {
  json_object_set_new(c, "sliding_window", json_integer(4096));
}
static void cfg_sliding_window_null(json_t *c) {
  json_object_set_new(c, "sliding_window", json_null());
}
static void cfg_use_sliding_window(json_t *c) {
  json_object_set_new(c, "use_sliding_window", json_true());
}
static void cfg_use_sliding_window_false(json_t *c) {
  json_object_set_new(c, "use_sliding_window", json_false());
}
static void cfg_local_experts(json_t *c) {
  json_object_set_new(c, "num_local_experts", json_integer(8));
}
static void cfg_experts_per_tok(json_t *c) {
  json_object_set_new(c, "num_experts_per_tok", json_integer(2));
}
static void cfg_no_experts(json_t *c) {
  json_object_set_new(c, "num_experts", json_integer(0));
  json_object_set_new(c, "moe_intermediate_size", json_null());
}
static void cfg_moe_size(json_t *c) {
  json_object_set_new(c, "moe_intermediate_size", json_integer(768));
}
static void cfg_layer_types(json_t *c) {
  json_object_set_new(
      c, "layer_types",
      json_pack("[s, s]", "full_attention", "sliding_attention"));
}
static void cfg_layer_types_full(json_t *c) {
  json_object_set_new(c, "layer_types",
                      json_pack("[s, s]", "full_attention", "full_attention"));
}
static void cfg_layer_types_type(json_t *c) {
  json_object_set_new(c, "layer_types", json_string("full_attention"));
}
static void cfg_rope_yarn(json_t *c) {
  json_object_set_new(
      c, "rope_scaling",
      json_pack("{s:s, s:f}", "rope_type", "yarn", "factor", 4.0));
}
static void cfg_family_unknown(json_t *c) {
  json_object_set_new(c, "model_type", json_string("gemma"));
}
static void cfg_mlp_bias(json_t *c) {
  json_object_set_new(c, "mlp_bias", json_true());
}
/* qwen2 reads no attention_bias (its q, k and v always have biases) */
static void cfg_attention_bias(json_t *c) {
  json_object_set_new(c, "attention_bias", json_false());
}
static void cfg_llama(json_t *c) {
  json_object_set_new(c, "model_type", json_string("llama"));
}
static void cfg_qwen2(json_t *c) {
  json_object_set_new(c, "model_type", json_string("qwen2"));
}
static void cfg_attention_bias_true(json_t *c) {
  json_object_set_new(c, "attention_bias", json_true());
}

/* The families' configs: a field that would change the math and is not
 * implemented is refused naming it (sliding windows, mixture of experts,
 * another rope type, per-layer attention kinds); the values that leave the
 * math alone are accepted. */
static void test_family_configs(void **state) {
  (void)state;
  struct {
    int which;
    config_edit edit;
    fdy_status kind;
    const char *name;
    const char *mention;
  } cases[] = {
      {MISTRAL_FIXTURE, cfg_sliding_window, FDY_ERR_UNSUPPORTED,
       "sliding_window",
       "unsupported sliding window: field 'sliding_window' is set"},
      {MISTRAL_FIXTURE, cfg_use_sliding_window, FDY_ERR_UNSUPPORTED,
       "use_sliding_window", "unsupported sliding window"},
      {MISTRAL_FIXTURE, cfg_local_experts, FDY_ERR_UNSUPPORTED,
       "num_local_experts", "unsupported mixture of experts"},
      {MISTRAL_FIXTURE, cfg_experts_per_tok, FDY_ERR_UNSUPPORTED,
       "num_experts_per_tok", "unsupported mixture of experts"},
      {MISTRAL_FIXTURE, cfg_moe_size, FDY_ERR_UNSUPPORTED,
       "moe_intermediate_size", "unsupported mixture of experts"},
      {MISTRAL_FIXTURE, cfg_layer_types, FDY_ERR_UNSUPPORTED, "layer_types",
       "'sliding_attention' at 1"},
      {MISTRAL_FIXTURE, cfg_layer_types_type, FDY_ERR_SCHEMA, "layer_types",
       NULL},
      {MISTRAL_FIXTURE, cfg_rope_yarn, FDY_ERR_UNSUPPORTED,
       "rope_scaling.rope_type", "'yarn'"},
      {MISTRAL_FIXTURE, cfg_family_unknown, FDY_ERR_UNSUPPORTED, "model_type",
       "'gemma'"},
      {MISTRAL_FIXTURE, cfg_mlp_bias, FDY_ERR_UNSUPPORTED, "mlp_bias", NULL},
      {QWEN2_FIXTURE, cfg_use_sliding_window, FDY_ERR_UNSUPPORTED,
       "use_sliding_window", "is true"},
      {QWEN2_FIXTURE, cfg_layer_types, FDY_ERR_UNSUPPORTED, "layer_types",
       NULL},
      {QWEN2_FIXTURE, cfg_local_experts, FDY_ERR_UNSUPPORTED,
       "num_local_experts", NULL},
      {QWEN2_FIXTURE, cfg_mlp_bias, FDY_ERR_UNSUPPORTED, "mlp_bias", NULL},
      /* a qwen2 checkpoint read as llama: its biases are not llama's */
      {QWEN2_FIXTURE, cfg_llama, FDY_ERR_SCHEMA, "/model.safetensors",
       "unexpected tensor 'model.layers."},
      /* qwen3's attention_bias would put biases on q, k, v and o */
      {QWEN3_FIXTURE, cfg_attention_bias_true, FDY_ERR_UNSUPPORTED,
       "attention_bias", "unsupported linear biases"},
      {QWEN3_FIXTURE, cfg_use_sliding_window, FDY_ERR_UNSUPPORTED,
       "use_sliding_window", NULL},
      {QWEN3_FIXTURE, cfg_experts_per_tok, FDY_ERR_UNSUPPORTED,
       "num_experts_per_tok", NULL},
      {QWEN3_FIXTURE, cfg_rope_yarn, FDY_ERR_UNSUPPORTED,
       "rope_scaling.rope_type", NULL},
      /* a qwen3 checkpoint read as qwen2: no biases, norms not expected */
      {QWEN3_FIXTURE, cfg_qwen2, FDY_ERR_NOT_FOUND,
       "model.safetensors.index.json", "model.layers.0.self_attn.q_proj.bias"},
      /* llama3-micro: the same fields are refused on llama */
      {0, cfg_local_experts, FDY_ERR_UNSUPPORTED, "num_local_experts", NULL},
      {0, cfg_layer_types, FDY_ERR_UNSUPPORTED, "layer_types", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char dir[256];
    copy_fixture(dir, sizeof dir, cases[i].which);
    edit_config(dir, cases[i].edit);
    expect_open_error(dir, cases[i].kind, cases[i].name, cases[i].mention);
    remove_dir(dir);
  }
  static const config_edit accepted[] = {cfg_sliding_window_null,
                                         cfg_use_sliding_window_false,
                                         cfg_no_experts, cfg_layer_types_full};
  for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
    char dir[256];
    copy_fixture(dir, sizeof dir, MISTRAL_FIXTURE);
    edit_config(dir, accepted[i]);
    fdy_error err;
    fdy_llama_model *m = NULL;
    assert_int_equal(fdy_llama_open(dir, &m, &err), FDY_OK);
    assert_int_equal(fdy_llama_model_config(m)->family,
                     FDY_LLAMA_FAMILY_MISTRAL);
    fdy_llama_close(m);
    remove_dir(dir);
  }
  /* qwen2: the window off (use_sliding_window false) whatever its size,
   * attention_bias not read */
  static const config_edit qwen2_accepted[] = {
      cfg_sliding_window, cfg_use_sliding_window_false, cfg_attention_bias,
      cfg_no_experts, cfg_layer_types_full};
  for (size_t i = 0; i < sizeof qwen2_accepted / sizeof qwen2_accepted[0];
       i++) {
    char dir[256];
    copy_fixture(dir, sizeof dir, QWEN2_FIXTURE);
    edit_config(dir, qwen2_accepted[i]);
    fdy_error err;
    fdy_llama_model *m = NULL;
    assert_int_equal(fdy_llama_open(dir, &m, &err), FDY_OK);
    assert_int_equal(fdy_llama_model_config(m)->family, FDY_LLAMA_FAMILY_QWEN2);
    assert_true(fdy_llama_model_config(m)->qkv_bias);
    fdy_llama_close(m);
    remove_dir(dir);
  }
  assert_string_equal(fdy_llama_family_name(FDY_LLAMA_FAMILY_MISTRAL),
                      "mistral");
  assert_string_equal(fdy_llama_family_name(FDY_LLAMA_FAMILY_COUNT), "unknown");
}

static void edit_bias_missing(json_t *h) {
  json_object_del(h, "model.layers.1.self_attn.k_proj.bias");
}
static void edit_bias_shape(json_t *h) {
  json_object_set_new(entry(h, "model.layers.0.self_attn.q_proj.bias"), "shape",
                      json_pack("[i, i]", 2, 112));
}
static void edit_norm_missing(json_t *h) {
  json_object_del(h, "model.layers.0.self_attn.k_norm.weight");
}
static void edit_norm_shape(json_t *h) {
  json_object_set_new(entry(h, "model.layers.1.self_attn.q_norm.weight"),
                      "shape", json_pack("[i, i]", 2, 32));
}
static void edit_bias_dtype(json_t *h) {
  json_object_set_new(entry(h, "model.layers.1.self_attn.v_proj.bias"), "dtype",
                      json_string("F16"));
}

/* The families' own tensors are checked like every other: a missing bias,
 * one of the wrong shape or dtype is refused naming it. */
static void test_family_tensors(void **state) {
  (void)state;
  struct {
    int which;
    header_edit edit;
    fdy_status kind;
    const char *tensor;
  } cases[] = {
      {QWEN2_FIXTURE, edit_bias_missing, FDY_ERR_NOT_FOUND,
       "model.layers.1.self_attn.k_proj.bias"},
      {QWEN2_FIXTURE, edit_bias_shape, FDY_ERR_SCHEMA,
       "tensor 'model.layers.0.self_attn.q_proj.bias' has shape [2, 112], "
       "expected [224]"},
      {QWEN2_FIXTURE, edit_bias_dtype, FDY_ERR_SCHEMA,
       "tensor 'model.layers.1.self_attn.v_proj.bias' has dtype F16, "
       "expected BF16"},
      {QWEN3_FIXTURE, edit_norm_missing, FDY_ERR_NOT_FOUND,
       "model.layers.0.self_attn.k_norm.weight"},
      {QWEN3_FIXTURE, edit_norm_shape, FDY_ERR_SCHEMA,
       "tensor 'model.layers.1.self_attn.q_norm.weight' has shape [2, 32], "
       "expected [64]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char dir[256];
    copy_fixture(dir, sizeof dir, cases[i].which);
    edit_header(dir, cases[i].edit);
    expect_open_error(dir, cases[i].kind, "/model.safetensors",
                      cases[i].tensor);
    remove_dir(dir);
  }
  /* the biases are the layer's: in its unit, read from the checkpoint */
  fdy_llama_model *m = NULL;
  fdy_error err;
  assert_int_equal(fdy_llama_open(fixture[QWEN2_FIXTURE], &m, &err), FDY_OK);
  const fdy_llama_layer_weights *l = fdy_llama_layer(m, 1);
  assert_non_null(l->q_bias);
  assert_string_equal(l->q_bias->name, "model.layers.1.self_attn.q_proj.bias");
  assert_string_equal(l->k_bias->name, "model.layers.1.self_attn.k_proj.bias");
  assert_string_equal(l->v_bias->name, "model.layers.1.self_attn.v_proj.bias");
  assert_int_equal(l->k_bias->shape.dims[0], 32);
  fdy_llama_close(m);
  assert_int_equal(fdy_llama_open(fixture[MISTRAL_FIXTURE], &m, &err), FDY_OK);
  assert_null(fdy_llama_layer(m, 0)->q_bias);
  assert_null(fdy_llama_layer(m, 0)->q_norm);
  fdy_llama_close(m);
  assert_int_equal(fdy_llama_open(fixture[QWEN3_FIXTURE], &m, &err), FDY_OK);
  l = fdy_llama_layer(m, 1);
  assert_null(l->q_bias);
  assert_string_equal(l->q_norm->name,
                      "model.layers.1.self_attn.q_norm.weight");
  assert_string_equal(l->k_norm->name,
                      "model.layers.1.self_attn.k_norm.weight");
  assert_int_equal(l->k_norm->shape.dims[0], 64);
  /* the graph normalizes q and k per head with those weights */
  fdy_llama_graph_options o = {.context = 16, .prefill_rows = 4};
  fdy_graph *g = NULL;
  fdy_llama_graph_io io;
  assert_int_equal(fdy_llama_graph(m, &o, &g, &io, &err), FDY_OK);
  expect_graph(m, g, &io, &o);
  fdy_op_info norm = op_named(g, "decode.layer.1.k_norm");
  assert_int_equal(norm.kind, FDY_OP_RMSNORM);
  assert_int_equal(norm.reads[1].v, tensor_named(g, "decode.layer.1.k").v);
  assert_int_equal(norm.reads[2].v, tensor_named(g, l->k_norm->name).v);
  fdy_op_info attention = op_named(g, "decode.layer.1.attention");
  assert_int_equal(attention.reads[1].v,
                   tensor_named(g, "decode.layer.1.q_norm").v);
  assert_int_equal(attention.reads[2].v,
                   tensor_named(g, "decode.layer.1.k_norm").v);
  fdy_graph_destroy(g);
  fdy_llama_close(m);
}

/* Each family's presets: the real shapes (computed), and a micro variant
 * written, opened with the preset's config and turned into a valid
 * graph. */
static void test_family_presets(void **state) {
  (void)state;
  const struct {
    const char *name;
    fdy_llama_family family;
    uint32_t layers, hidden, heads, kv_heads, head_dim, vocab;
    bool tied, write;
  } presets[] = {
      {"mistral-7b-v0.3", FDY_LLAMA_FAMILY_MISTRAL, 32, 4096, 32, 8, 128, 32768,
       false, false},
      {"micro-mistral", FDY_LLAMA_FAMILY_MISTRAL, 2, 256, 6, 2, 64, 1024, false,
       true},
      {"qwen2.5-0.5b", FDY_LLAMA_FAMILY_QWEN2, 24, 896, 14, 2, 64, 151936, true,
       false},
      {"micro-qwen2", FDY_LLAMA_FAMILY_QWEN2, 2, 256, 7, 1, 64, 1024, true,
       true},
      {"qwen3-0.6b", FDY_LLAMA_FAMILY_QWEN3, 28, 1024, 16, 8, 128, 151936, true,
       false},
      {"micro-qwen3", FDY_LLAMA_FAMILY_QWEN3, 2, 256, 4, 2, 128, 1024, true,
       true},
  };
  char root[] = "/tmp/fdy_family_presets_XXXXXX";
  assert_non_null(mkdtemp(root));
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
    fdy_llama_config c;
    uint64_t total = 0;
    fdy_error err;
    assert_int_equal(
        fdy_llama_preset_config(presets[i].name, NULL, &c, &total, &err),
        FDY_OK);
    assert_int_equal(c.family, presets[i].family);
    bool listed = false; /* the CLI's list of presets has it */
    for (const char *const *p = fdy_llama_presets(); *p; p++) {
      listed = listed || strcmp(*p, presets[i].name) == 0;
    }
    assert_true(listed);
    assert_true(c.qkv_bias == (presets[i].family == FDY_LLAMA_FAMILY_QWEN2));
    assert_true(c.qk_norm == (presets[i].family == FDY_LLAMA_FAMILY_QWEN3));
    assert_int_equal(c.num_layers, presets[i].layers);
    assert_int_equal(c.hidden_size, presets[i].hidden);
    assert_int_equal(c.num_heads, presets[i].heads);
    assert_int_equal(c.num_kv_heads, presets[i].kv_heads);
    assert_int_equal(c.head_dim, presets[i].head_dim);
    assert_int_equal(c.vocab_size, presets[i].vocab);
    assert_true(c.tie_word_embeddings == presets[i].tied);
    assert_false(c.rope_llama3);
    assert_true(c.rope_theta == 1e6);
    assert_true(total > 0);
    if (!presets[i].write) {
      continue;
    }
    char dir[300];
    snprintf(dir, sizeof dir, "%s/%s", root, presets[i].name);
    assert_int_equal(fdy_llama_make_model(presets[i].name, 3, dir, &err),
                     FDY_OK);
    fdy_llama_model *m = NULL;
    assert_int_equal(fdy_llama_open(dir, &m, &err), FDY_OK);
    expect_same_config(&c, fdy_llama_model_config(m));
    assert_int_equal(fdy_llama_model_config(m)->family, presets[i].family);
    assert_int_equal(total, fdy_llama_total_bytes(m));
    fdy_llama_graph_options o = {.context = 16, .prefill_rows = 4};
    fdy_graph *g = NULL;
    fdy_llama_graph_io io;
    assert_int_equal(fdy_llama_graph(m, &o, &g, &io, &err), FDY_OK);
    expect_graph(m, g, &io, &o);
    fdy_graph_destroy(g);
    fdy_llama_close(m);
    remove_dir(dir);
  }
  assert_int_equal(rmdir(root), 0);
}

/* The real-shape presets, checked without writing their files: the
 * configuration and the checkpoint's tensor bytes against the formula (and,
 * for 3B, the bytes of an actual make-model run). */
static void test_real_presets(void **state) {
  (void)state;
  const struct {
    const char *name;
    uint32_t layers, hidden, heads, kv_heads, head_dim, ffn, vocab;
    bool tied;
    fdy_dtype dtype;
    double rope_factor;
  } presets[] = {
      {"llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, true, FDY_DTYPE_F16,
       32.0},
      {"llama-3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256, true, FDY_DTYPE_F16,
       32.0},
      {"llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, false,
       FDY_DTYPE_BF16, 8.0},
  };
  for (size_t i = 0; i < 3; i++) {
    fdy_llama_config c;
    uint64_t total = 0;
    fdy_error err;
    assert_int_equal(
        fdy_llama_preset_config(presets[i].name, NULL, &c, &total, &err),
        FDY_OK);
    assert_int_equal(c.num_layers, presets[i].layers);
    assert_int_equal(c.hidden_size, presets[i].hidden);
    assert_int_equal(c.num_heads, presets[i].heads);
    assert_int_equal(c.num_kv_heads, presets[i].kv_heads);
    assert_int_equal(c.head_dim, presets[i].head_dim);
    assert_int_equal(c.intermediate_size, presets[i].ffn);
    assert_int_equal(c.vocab_size, presets[i].vocab);
    assert_true(c.tie_word_embeddings == presets[i].tied);
    assert_int_equal(c.dtype, presets[i].dtype);
    assert_true(c.rope_llama3);
    assert_true(c.rope_factor == presets[i].rope_factor);
    assert_true(c.rope_theta == 500000.0);
    assert_int_equal(c.rope_original_max_position, 8192);
    assert_int_equal(c.max_position_embeddings, 131072);
    assert_int_equal(c.group_size, 64);
    assert_int_equal(c.bits, 4);
    assert_int_equal(c.bos_id, 128000);
    assert_int_equal(c.eos_count, 3);

    uint64_t h = c.hidden_size, q = (uint64_t)c.num_heads * c.head_dim,
             kv = (uint64_t)c.num_kv_heads * c.head_dim,
             f = c.intermediate_size, v = c.vocab_size;
    uint64_t layer = linear_bytes(q, h) + 2 * linear_bytes(kv, h) +
                     linear_bytes(h, q) + 2 * linear_bytes(f, h) +
                     linear_bytes(h, f) + 2 * 2 * h;
    uint64_t expected = linear_bytes(v, h) * (c.tie_word_embeddings ? 1 : 2) +
                        c.num_layers * layer + 2 * h;
    assert_int_equal(total, expected);
    if (i == 1) {
      assert_int_equal(total, 1807423488ull);
    }
    /* total_bytes is optional */
    assert_int_equal(
        fdy_llama_preset_config(presets[i].name, NULL, &c, NULL, &err), FDY_OK);
  }
  fdy_llama_config untouched;
  memset(&untouched, 0x5a, sizeof untouched);
  fdy_llama_config c = untouched;
  uint64_t total = 7;
  fdy_error err;
  assert_int_equal(fdy_llama_preset_config("llama-4", NULL, &c, &total, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
  assert_memory_equal(&c, &untouched, sizeof c);
  assert_int_equal(total, 7);
}

/* ---- shards
 * ------------------------------------------------------------------ */

/* Splits the micro fixture into two shards (layer 1 and the final norm in the
 * second) named by an index; returns the directory. */
static void write_sharded_fixture(char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/fdy_llama_shards_XXXXXX");
  assert_non_null(mkdtemp(dir));
  char path[1024];
  fdy_error err;
  fdy_safetensors *st = NULL;
  path_in(path, sizeof path, fixture[0], "model.safetensors");
  assert_int_equal(fdy_safetensors_open(path, &st, &err), FDY_OK);
  size_t n = fdy_safetensors_count(st), counts[2] = {0, 0};
  fdy_st_write_tensor *parts[2] = {calloc(n, sizeof(fdy_st_write_tensor)),
                                   calloc(n, sizeof(fdy_st_write_tensor))};
  assert_non_null(parts[0]);
  assert_non_null(parts[1]);
  json_t *map = json_object();
  static const char *const shard_names[2] = {
      "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  for (size_t i = 0; i < n; i++) {
    const fdy_st_tensor *t = fdy_safetensors_at(st, i);
    int which = strstr(t->name, "layers.1.") != NULL ||
                strcmp(t->name, "model.norm.weight") == 0;
    parts[which][counts[which]++] = (fdy_st_write_tensor){
        .name = t->name, .dtype = t->dtype, .shape = t->shape, .data = t->data};
    json_object_set_new(map, t->name, json_string(shard_names[which]));
  }
  for (int w = 0; w < 2; w++) {
    path_in(path, sizeof path, dir, shard_names[w]);
    assert_int_equal(fdy_safetensors_write(path, parts[w], counts[w], &err),
                     FDY_OK);
    free(parts[w]);
  }
  fdy_safetensors_close(st);
  json_t *index = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0,
                            "weight_map", map);
  path_in(path, sizeof path, dir, "model.safetensors.index.json");
  assert_int_equal(json_dump_file(index, path, 0), 0);
  json_decref(index);
  size_t len;
  char src[1024];
  path_in(src, sizeof src, fixture[0], "config.json");
  char *config = read_all(src, &len);
  path_in(path, sizeof path, dir, "config.json");
  write_all(path, config, len);
  free(config);
}

static void remove_sharded_fixture(const char *dir) {
  static const char *const files[] = {
      "config.json", "model.safetensors.index.json",
      "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  char path[1024];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    path_in(path, sizeof path, dir, files[i]);
    unlink(path);
  }
  assert_int_equal(rmdir(dir), 0);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void test_shards(void **state) {
  (void)state;
  char dir[256], path[1024];
  write_sharded_fixture(dir, sizeof dir);
  fdy_error err;
  fdy_llama_model *whole = NULL, *sharded = NULL;
  assert_int_equal(fdy_llama_open(fixture[0], &whole, &err), FDY_OK);
  assert_int_equal(fdy_llama_open(dir, &sharded, &err), FDY_OK);
  assert_int_equal(fdy_llama_tensor_count(sharded),
                   fdy_llama_tensor_count(whole));
  assert_int_equal(fdy_llama_total_bytes(sharded),
                   fdy_llama_total_bytes(whole));
  const fdy_llama_layer_weights *l0 = fdy_llama_layer(sharded, 0),
                                *l1 = fdy_llama_layer(sharded, 1),
                                *w1 = fdy_llama_layer(whole, 1);
  assert_true(
      ends_with(l0->q.weight->path, "model-00001-of-00002.safetensors"));
  assert_true(
      ends_with(l1->q.weight->path, "model-00002-of-00002.safetensors"));
  assert_true(ends_with(fdy_llama_final_norm(sharded)->path,
                        "model-00002-of-00002.safetensors"));
  assert_int_equal(l1->down.scales->bytes, w1->down.scales->bytes);
  assert_memory_equal(l1->down.scales->data, w1->down.scales->data,
                      w1->down.scales->bytes);
  fdy_llama_close(sharded);
  fdy_llama_close(whole);

  /* a shard named by the index but absent: NOT_FOUND naming that file */
  path_in(path, sizeof path, dir, "model-00002-of-00002.safetensors");
  char moved[1100];
  snprintf(moved, sizeof moved, "%s.moved", path);
  assert_int_equal(rename(path, moved), 0);
  sharded = (fdy_llama_model *)(uintptr_t)1;
  assert_int_equal(fdy_llama_open(dir, &sharded, &err), FDY_ERR_NOT_FOUND);
  assert_null(sharded);
  assert_true(ends_with(err.name, "model-00002-of-00002.safetensors"));
  assert_int_equal(rename(moved, path), 0);
  remove_sharded_fixture(dir);
}

int main(void) {
  const char *data = getenv("FOUNDRY_TEST_DATA");
  if (!data) {
    data = "tests/data";
  }
  data_root = data;
  snprintf(fixture[0], sizeof fixture[0], "%s/llama3-micro/model", data);
  snprintf(fixture[1], sizeof fixture[1], "%s/llama3-tiny/model", data);
  snprintf(fixture[MISTRAL_FIXTURE], sizeof fixture[MISTRAL_FIXTURE],
           "%s/mistral-micro/model", data);
  snprintf(fixture[QWEN2_FIXTURE], sizeof fixture[QWEN2_FIXTURE],
           "%s/qwen2-micro/model", data);
  snprintf(fixture[QWEN3_FIXTURE], sizeof fixture[QWEN3_FIXTURE],
           "%s/qwen3-micro/model", data);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fixtures_open),
      cmocka_unit_test(test_graph),
      cmocka_unit_test(test_graph_untied),
      cmocka_unit_test(test_graph_bad_options),
      cmocka_unit_test(test_graph_padding),
      cmocka_unit_test(test_graph_plans),
      cmocka_unit_test(test_variant_fixtures_open),
      cmocka_unit_test(test_f32_norm_rejected),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_header_too_long),
      cmocka_unit_test(test_header_not_json),
      cmocka_unit_test(test_bad_tensors),
      cmocka_unit_test(test_safetensors_direct),
      cmocka_unit_test(test_writer_roundtrip),
      cmocka_unit_test(test_bad_config),
      cmocka_unit_test(test_family_configs),
      cmocka_unit_test(test_family_presets),
      cmocka_unit_test(test_family_tensors),
      cmocka_unit_test(test_make_model),
      cmocka_unit_test(test_make_model_variants),
      cmocka_unit_test(test_mixed_without_entries),
      cmocka_unit_test(test_real_presets),
      cmocka_unit_test(test_shards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
