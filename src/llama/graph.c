/* The model as a Foundry graph (fdy_llama_graph in llama.h) and its plan.
 * Weights come from the layout table (layout.h) grouped into three kinds of
 * streamable units (the embedding, each decoder layer, the head), each a
 * gather of file extents padded so that every tensor is an aligned view;
 * the embedding and the head have a residency priority, so that a budget
 * keeps them resident before any layer.
 * Nothing is read from the files here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "loader.h"

/* Longest tensor or op name the builder makes ("prefill.layer.4294967295.
 * attn_residual" and the like), NUL included, with room to spare. */
#define NAME_MAX_LEN   128
#define PREFIX_MAX_LEN 64

typedef struct builder {
  fdy_graph *g;
  const fdy_llama_model *model;
  const fdy_llama_config *c;
  const fdy_llama_graph_options *options;
  fdy_llama_tensor_spec *specs;
  size_t spec_count;
  fdy_tensor_id *views; /* spec index -> view */
  fdy_tensor_id *k_cache, *v_cache;
  fdy_status st;
  fdy_error *err;
} builder;

static fdy_tensor_id none(void) {
  return (fdy_tensor_id){UINT32_MAX};
}

/* Residency priority of the embedding and the head units: the planner keeps
 * them resident before any layer (the tied embedding is read twice per
 * step, by the lookup and the LM head; both are needed by every token). */
#define RESIDENT_FIRST 1u

/* A weight named `name` gathering the specs for which `member` is true, in
 * layout order, each at an aligned offset; one view per spec; with
 * residency priority `priority`. */
static void add_unit(builder *b, const char *name,
                     bool (*member)(const fdy_llama_tensor_spec *, int64_t),
                     int64_t layer, uint32_t priority) {
  if (b->st != FDY_OK) {
    return;
  }
  size_t count = 0;
  for (size_t i = 0; i < b->spec_count; i++) {
    count += member(&b->specs[i], layer);
  }
  fdy_extent *extents = calloc(2 * count + 1, sizeof(*extents));
  size_t *members = calloc(count + 1, sizeof(size_t));
  uint64_t *offsets = calloc(count + 1, sizeof(uint64_t));
  if (!extents || !members || !offsets) {
    b->st = fdy_error_set(b->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  size_t n = 0, m = 0;
  uint64_t at = 0;
  for (size_t i = 0; b->st == FDY_OK && i < b->spec_count; i++) {
    if (!member(&b->specs[i], layer)) {
      continue;
    }
    uint64_t aligned = 0;
    b->st = fdy_align_up(at, FDY_TENSOR_ALIGNMENT, &aligned, b->err);
    if (b->st == FDY_OK && aligned > at) {
      extents[n++] =
          (fdy_extent){.kind = FDY_EXTENT_PADDING, .length = aligned - at};
    }
    const fdy_st_tensor *t = fdy_llama_model_tensor(b->model, &b->specs[i]);
    extents[n++] = (fdy_extent){.kind = FDY_EXTENT_FILE,
                                .path = t->path,
                                .offset = t->file_offset,
                                .length = t->bytes};
    members[m] = i;
    offsets[m++] = aligned;
    if (b->st == FDY_OK) {
      b->st = fdy_add_u64(aligned, t->bytes, &at, b->err);
    }
  }
  fdy_tensor_id unit;
  if (b->st == FDY_OK) {
    b->st = fdy_graph_add_weight(b->g, name, FDY_DTYPE_U8, FDY_SHAPE(at),
                                 extents, n, &unit, b->err);
  }
  if (b->st == FDY_OK && priority > 0) {
    b->st = fdy_graph_set_residency_priority(b->g, unit, priority, b->err);
  }
  for (size_t k = 0; b->st == FDY_OK && k < m; k++) {
    const fdy_llama_tensor_spec *spec = &b->specs[members[k]];
    b->st = fdy_graph_add_weight_view(b->g, spec->name, unit, offsets[k],
                                      spec->dtype, spec->shape,
                                      &b->views[members[k]], b->err);
  }
  free(extents);
  free(members);
  free(offsets);
}

static bool in_embed(const fdy_llama_tensor_spec *s, int64_t layer) {
  (void)layer;
  return s->module == FDY_LLAMA_EMBED;
}

static bool in_layer(const fdy_llama_tensor_spec *s, int64_t layer) {
  return s->layer == layer;
}

static bool in_head(const fdy_llama_tensor_spec *s, int64_t layer) {
  (void)layer;
  return s->module == FDY_LLAMA_FINAL_NORM || s->module == FDY_LLAMA_LM_HEAD;
}

/* The view of part `part` of module `module` (of `layer`, or -1). */
static fdy_tensor_id view(const builder *b, fdy_llama_module module,
                          fdy_llama_part part, int64_t layer) {
  for (size_t i = 0; i < b->spec_count; i++) {
    const fdy_llama_tensor_spec *s = &b->specs[i];
    if (s->module == module && s->part == part && s->layer == layer) {
      return b->views[i];
    }
  }
  return none();
}

static fdy_tensor_id activation(builder *b, const char *prefix,
                                const char *name, fdy_dtype dtype,
                                uint64_t rows, uint64_t cols) {
  fdy_tensor_id id = none();
  char full[NAME_MAX_LEN];
  snprintf(full, sizeof full, "%s.%s", prefix, name);
  if (b->st == FDY_OK) {
    b->st = fdy_graph_add_activation(
        b->g, full, dtype, cols ? FDY_SHAPE(rows, cols) : FDY_SHAPE(rows), &id,
        b->err);
  }
  return id;
}

/* Appends op `name` (prefixed) of kind with inputs and outputs. */
static void add_op_outputs(builder *b, const char *prefix, const char *name,
                           fdy_op_kind kind, fdy_op_params params,
                           const fdy_tensor_id *inputs, size_t input_count,
                           const fdy_tensor_id *outputs, size_t output_count) {
  char full[NAME_MAX_LEN];
  snprintf(full, sizeof full, "%s.%s", prefix, name);
  fdy_op_desc desc = {.name = full,
                      .kind = kind,
                      .params = params,
                      .reads = inputs,
                      .read_count = input_count,
                      .writes = outputs,
                      .write_count = output_count};
  if (b->st == FDY_OK) {
    b->st = fdy_graph_add_op(b->g, &desc, NULL, b->err);
  }
}

/* Appends op `name` (prefixed) of kind with inputs and one output. */
static fdy_tensor_id add_op(builder *b, const char *prefix, const char *name,
                            fdy_op_kind kind, fdy_op_params params,
                            const fdy_tensor_id *inputs, size_t input_count,
                            fdy_tensor_id output) {
  add_op_outputs(b, prefix, name, kind, params, inputs, input_count, &output,
                 1);
  return output;
}

static fdy_op_params no_params(void) {
  fdy_op_params p;
  memset(&p, 0, sizeof p);
  return p;
}

/* A tied LM head is the embedding used as a linear. */
static fdy_llama_module linear_module(const builder *b,
                                      fdy_llama_module module) {
  return module == FDY_LLAMA_LM_HEAD && b->c->tie_word_embeddings
             ? FDY_LLAMA_EMBED
             : module;
}

/* The quantization of a linear module (of `layer`, or -1). */
static fdy_llama_quant module_quant(const builder *b, fdy_llama_module module,
                                    int64_t layer) {
  module = linear_module(b, module);
  for (size_t i = 0; i < b->spec_count; i++) {
    const fdy_llama_tensor_spec *s = &b->specs[i];
    if (s->module == module && s->layer == layer) {
      return s->quant;
    }
  }
  return (fdy_llama_quant){0, 0};
}

/* The views of a linear module into out: its packed weight, scales and
 * biases (quantized), or its weight (unquantized); returns how many. */
static size_t linear_views(const builder *b, fdy_llama_module module,
                           int64_t layer, fdy_tensor_id *out) {
  module = linear_module(b, module);
  if (module_quant(b, module, layer).bits == 0) {
    out[0] = view(b, module, FDY_LLAMA_PART_DENSE, layer);
    return 1;
  }
  out[0] = view(b, module, FDY_LLAMA_PART_PACKED, layer);
  out[1] = view(b, module, FDY_LLAMA_PART_SCALES, layer);
  out[2] = view(b, module, FDY_LLAMA_PART_BIASES, layer);
  return 3;
}

/* Whether the `count` modules are all 4-bit with one group size: the
 * weights of one fused Q4 op. */
static bool fusable(const builder *b, const fdy_llama_module *modules,
                    size_t count, int64_t layer) {
  fdy_llama_quant first = module_quant(b, modules[0], layer);
  for (size_t j = 0; j < count; j++) {
    fdy_llama_quant q = module_quant(b, modules[j], layer);
    if (q.bits != 4 || q.group_size != first.group_size) {
      return false;
    }
  }
  return true;
}

/* The matmul kind of a quantization. */
static fdy_op_kind matmul_kind(fdy_llama_quant q) {
  return q.bits == 4   ? FDY_OP_MATMUL_Q4
         : q.bits == 8 ? FDY_OP_MATMUL_Q8
                       : FDY_OP_MATMUL_DENSE;
}

/* x W^T of module: MATMUL_Q4, MATMUL_Q8 or MATMUL_DENSE as it is
 * quantized. */
static fdy_tensor_id matmul(builder *b, const char *prefix, const char *name,
                            fdy_tensor_id step, fdy_tensor_id x,
                            fdy_llama_module module, int64_t layer,
                            uint64_t rows, uint64_t out_features) {
  fdy_tensor_id in[5] = {step, x};
  size_t n = 2 + linear_views(b, module, layer, in + 2);
  fdy_tensor_id y =
      activation(b, prefix, name, FDY_DTYPE_F32, rows, out_features);
  return add_op(b, prefix, name, matmul_kind(module_quant(b, module, layer)),
                no_params(), in, n, y);
}

static fdy_op_params norm_params(const builder *b) {
  fdy_op_params p = no_params();
  p.rmsnorm.eps = b->c->rms_norm_eps;
  return p;
}

/* RMSNORM of x (rows, cols) by weight: of each row when the weight has
 * cols values, of each head when it has head_dim (qwen3's q and k). */
static fdy_tensor_id norm_segments(builder *b, const char *prefix,
                                   const char *name, fdy_tensor_id step,
                                   fdy_tensor_id x, fdy_tensor_id weight,
                                   uint64_t rows, uint64_t cols) {
  fdy_tensor_id in[3] = {step, x, weight};
  fdy_tensor_id y = activation(b, prefix, name, FDY_DTYPE_F32, rows, cols);
  return add_op(b, prefix, name, FDY_OP_RMSNORM, norm_params(b), in, 3, y);
}

static fdy_tensor_id rmsnorm(builder *b, const char *prefix, const char *name,
                             fdy_tensor_id step, fdy_tensor_id x,
                             fdy_tensor_id weight, uint64_t rows) {
  return norm_segments(b, prefix, name, step, x, weight, rows,
                       b->c->hidden_size);
}

/* RMSNORM of h by norm, then `count` modules: outputs[j] (named names[j],
 * out_features[j] wide) for modules[j]; one NORM_MATMUL_Q4 `name` when
 * the modules are fusable, else RMSNORM (named `norm_name`) and a matmul
 * per module. */
static void norm_matmul(builder *b, const char *prefix, const char *name,
                        const char *norm_name, fdy_tensor_id step,
                        fdy_tensor_id h, fdy_tensor_id norm,
                        const fdy_llama_module *modules,
                        const char *const *names, const uint64_t *out_features,
                        size_t count, int64_t layer, uint64_t rows,
                        fdy_tensor_id *outputs) {
  if (!fusable(b, modules, count, layer)) {
    fdy_tensor_id x = rmsnorm(b, prefix, norm_name, step, h, norm, rows);
    for (size_t j = 0; j < count; j++) {
      outputs[j] = matmul(b, prefix, names[j], step, x, modules[j], layer, rows,
                          out_features[j]);
    }
    return;
  }
  fdy_tensor_id in[FDY_OP_MAX_INPUTS] = {step, h, norm};
  for (size_t j = 0; j < count; j++) {
    linear_views(b, modules[j], layer, in + 3 + 3 * j);
    outputs[j] =
        activation(b, prefix, names[j], FDY_DTYPE_F32, rows, out_features[j]);
  }
  add_op_outputs(b, prefix, name, FDY_OP_NORM_MATMUL_Q4, norm_params(b), in,
                 3 + 3 * count, outputs, count);
}

/* ADD_BIAS of x (rows, cols) and the bias vector `bias` (cols). */
static fdy_tensor_id add_bias(builder *b, const char *prefix, const char *name,
                              fdy_tensor_id step, fdy_tensor_id x,
                              fdy_tensor_id bias, uint64_t rows,
                              uint64_t cols) {
  fdy_tensor_id in[3] = {step, x, bias};
  return add_op(b, prefix, name, FDY_OP_ADD_BIAS, no_params(), in, 3,
                activation(b, prefix, name, FDY_DTYPE_F32, rows, cols));
}

/* ADD of a and b (a row-wise op). */
static fdy_tensor_id add(builder *b, const char *prefix, const char *name,
                         fdy_tensor_id step, fdy_tensor_id a, fdy_tensor_id x,
                         uint64_t rows, uint64_t cols) {
  fdy_tensor_id in[3] = {step, a, x};
  return add_op(b, prefix, name, FDY_OP_ADD, no_params(), in, 3,
                activation(b, prefix, name, FDY_DTYPE_F32, rows, cols));
}

/* residual + x W^T of module: one MATMUL_ADD_Q4 for a 4-bit module, else
 * its matmul (named `matmul_name`) and ADD (ADD's operand order is the
 * fused op's). */
static fdy_tensor_id matmul_add(builder *b, const char *prefix,
                                const char *name, const char *matmul_name,
                                fdy_tensor_id step, fdy_tensor_id x,
                                fdy_llama_module module, int64_t layer,
                                fdy_tensor_id residual, uint64_t rows,
                                uint64_t out_features) {
  if (module_quant(b, module, layer).bits != 4) {
    fdy_tensor_id y = matmul(b, prefix, matmul_name, step, x, module, layer,
                             rows, out_features);
    return add(b, prefix, name, step, residual, y, rows, out_features);
  }
  fdy_tensor_id in[6] = {step, x};
  linear_views(b, module, layer, in + 2);
  in[5] = residual;
  fdy_tensor_id y =
      activation(b, prefix, name, FDY_DTYPE_F32, rows, out_features);
  return add_op(b, prefix, name, FDY_OP_MATMUL_ADD_Q4, no_params(), in, 6, y);
}

/* The model's rope parameters. */
static fdy_rope_params rope_params(const builder *b) {
  const fdy_llama_config *c = b->c;
  fdy_rope_params r;
  memset(&r, 0, sizeof r);
  r.head_dim = c->head_dim;
  r.theta = c->rope_theta;
  r.llama3 = c->rope_llama3;
  r.factor = c->rope_factor;
  r.low_freq_factor = c->rope_low_freq_factor;
  r.high_freq_factor = c->rope_high_freq_factor;
  r.original_max_position = c->rope_original_max_position;
  return r;
}

/* The model's attention parameters. */
static fdy_attention_params attention_params(const builder *b) {
  fdy_attention_params a = {
      .heads = b->c->num_heads,
      .kv_heads = b->c->num_kv_heads,
      .head_dim = b->c->head_dim,
  };
  return a;
}

static fdy_tensor_id rope(builder *b, const char *prefix, const char *name,
                          fdy_tensor_id step, fdy_tensor_id x, uint64_t rows,
                          uint64_t cols) {
  fdy_op_params p = no_params();
  p.rope = rope_params(b);
  fdy_tensor_id in[2] = {step, x};
  fdy_tensor_id y = activation(b, prefix, name, FDY_DTYPE_F32, rows, cols);
  return add_op(b, prefix, name, FDY_OP_ROPE, p, in, 2, y);
}

/* Attention of one layer over q, k and v (rope on q and k, then the KV
 * append and causal attention): ROPE, ROPE and ATTENTION, or one
 * ROPE_ATTENTION when `fused` (the decode step). */
static fdy_tensor_id attend(builder *b, const char *prefix, fdy_tensor_id step,
                            fdy_tensor_id q, fdy_tensor_id k, fdy_tensor_id v,
                            uint32_t l, uint64_t rows, bool fused) {
  const fdy_llama_config *c = b->c;
  uint64_t q_dim = (uint64_t)c->num_heads * c->head_dim;
  uint64_t kv_dim = (uint64_t)c->num_kv_heads * c->head_dim;
  fdy_op_params p = no_params();
  fdy_op_kind kind = FDY_OP_ROPE_ATTENTION;
  if (fused) {
    p.rope_attention.rope = rope_params(b);
    p.rope_attention.attention = attention_params(b);
  } else {
    q = rope(b, prefix, "q_rope", step, q, rows, q_dim);
    k = rope(b, prefix, "k_rope", step, k, rows, kv_dim);
    p.attention = attention_params(b);
    kind = FDY_OP_ATTENTION;
  }
  fdy_tensor_id in[6] = {step, q, k, v, b->k_cache[l], b->v_cache[l]};
  return add_op(b, prefix, "attention", kind, p, in, 6,
                activation(b, prefix, "attention", FDY_DTYPE_F32, rows, q_dim));
}

/* One decoder layer over `rows` rows in fused ops; returns the new hidden
 * state: [norm + q, k, v] ([q + bias] [k + bias] [v + bias]: qwen2)
 * ([norm q per head] [norm k per head]: qwen3) [rope q] [rope k] [attention] [o
 * + residual] [norm + gate, up + swiglu] [down + residual] (7 ops), the ropes
 * and the attention as one ROPE_ATTENTION when `decode` (5 ops; rows at their
 * own positions of their own sequences). A fused op whose weights are not all
 * 4-bit alike is its unfused sequence (RMSNORM, matmuls, ADD, SWIGLU). */
static fdy_tensor_id decoder_layer(builder *b, const char *prefix,
                                   fdy_tensor_id step, fdy_tensor_id h,
                                   uint32_t l, uint64_t rows, bool decode) {
  const fdy_llama_config *c = b->c;
  uint64_t hidden = c->hidden_size, ffn = c->intermediate_size;
  uint64_t q_dim = (uint64_t)c->num_heads * c->head_dim;
  uint64_t kv_dim = (uint64_t)c->num_kv_heads * c->head_dim;
  char p[PREFIX_MAX_LEN];
  snprintf(p, sizeof p, "%s.layer.%u", prefix, l);
  static const fdy_llama_module qkv_modules[3] = {
      FDY_LLAMA_Q_PROJ, FDY_LLAMA_K_PROJ, FDY_LLAMA_V_PROJ};
  static const char *const qkv_names[3] = {"q", "k", "v"};
  uint64_t qkv_features[3] = {q_dim, kv_dim, kv_dim};
  fdy_tensor_id qkv[3];
  norm_matmul(b, p, "qkv", "attn_norm", step, h,
              view(b, FDY_LLAMA_INPUT_NORM, FDY_LLAMA_PART_NORM, l),
              qkv_modules, qkv_names, qkv_features, 3, l, rows, qkv);
  if (c->qkv_bias) { /* qwen2 */
    static const fdy_llama_module bias_modules[3] = {
        FDY_LLAMA_Q_BIAS, FDY_LLAMA_K_BIAS, FDY_LLAMA_V_BIAS};
    static const char *const bias_names[3] = {"q_bias", "k_bias", "v_bias"};
    for (int j = 0; j < 3; j++) {
      qkv[j] = add_bias(b, p, bias_names[j], step, qkv[j],
                        view(b, bias_modules[j], FDY_LLAMA_PART_BIAS, l), rows,
                        qkv_features[j]);
    }
  }
  if (c->qk_norm) { /* qwen3: q and k normalized per head, before the rope */
    qkv[0] = norm_segments(b, p, "q_norm", step, qkv[0],
                           view(b, FDY_LLAMA_Q_NORM, FDY_LLAMA_PART_NORM, l),
                           rows, q_dim);
    qkv[1] = norm_segments(b, p, "k_norm", step, qkv[1],
                           view(b, FDY_LLAMA_K_NORM, FDY_LLAMA_PART_NORM, l),
                           rows, kv_dim);
  }
  fdy_tensor_id attn =
      attend(b, p, step, qkv[0], qkv[1], qkv[2], l, rows, decode);
  fdy_tensor_id h1 = matmul_add(b, p, "attn_residual", "o", step, attn,
                                FDY_LLAMA_O_PROJ, l, h, rows, hidden);
  fdy_tensor_id post = view(b, FDY_LLAMA_POST_NORM, FDY_LLAMA_PART_NORM, l);
  static const fdy_llama_module mlp_modules[2] = {FDY_LLAMA_GATE_PROJ,
                                                  FDY_LLAMA_UP_PROJ};
  fdy_tensor_id act;
  if (fusable(b, mlp_modules, 2, l)) {
    fdy_tensor_id in[9] = {step, h1, post};
    linear_views(b, FDY_LLAMA_GATE_PROJ, l, in + 3);
    linear_views(b, FDY_LLAMA_UP_PROJ, l, in + 6);
    act = add_op(b, p, "swiglu", FDY_OP_NORM_SWIGLU_Q4, norm_params(b), in, 9,
                 activation(b, p, "swiglu", FDY_DTYPE_F32, rows, ffn));
  } else {
    static const char *const mlp_names[2] = {"gate", "up"};
    uint64_t mlp_features[2] = {ffn, ffn};
    fdy_tensor_id gate_up[2];
    norm_matmul(b, p, "gate_up", "mlp_norm", step, h1, post, mlp_modules,
                mlp_names, mlp_features, 2, l, rows, gate_up);
    fdy_tensor_id in[3] = {step, gate_up[0], gate_up[1]};
    act = add_op(b, p, "swiglu", FDY_OP_SWIGLU, no_params(), in, 3,
                 activation(b, p, "swiglu", FDY_DTYPE_F32, rows, ffn));
  }
  return matmul_add(b, p, "mlp_residual", "down", step, act,
                    FDY_LLAMA_DOWN_PROJ, l, h1, rows, hidden);
}

/* The ops of one step over `rows` rows: embedding (EMBED_Q4, EMBED_Q8 or
 * EMBED_DENSE), layers (decoder_layer; ROPE_ATTENTION when `fused`), head
 * (one NORM_MATMUL_Q4 when `fused` and the LM head is 4-bit, else RMSNORM
 * and the LM head's matmul); `fused` for the decode step. */
static void add_step(builder *b, const char *prefix, uint64_t rows,
                     bool all_logits, bool fused, fdy_tensor_id *step,
                     fdy_tensor_id *sampling, fdy_tensor_id *logits,
                     fdy_tensor_id *next) {
  const fdy_llama_config *c = b->c;
  char name[NAME_MAX_LEN];
  snprintf(name, sizeof name, "%s.step", prefix);
  if (b->st == FDY_OK) {
    b->st =
        fdy_graph_add_input(b->g, name, FDY_DTYPE_I32,
                            FDY_SHAPE(FDY_STEP_ELEMENTS(rows)), step, b->err);
  }
  if (b->st == FDY_OK && fused) { /* every decode tensor of `rows` is by row */
    b->st = fdy_graph_set_step_rows(b->g, *step, rows, b->err);
  }
  fdy_llama_quant embed = module_quant(b, FDY_LLAMA_EMBED, -1);
  fdy_op_kind embed_kind = embed.bits == 4   ? FDY_OP_EMBED_Q4
                           : embed.bits == 8 ? FDY_OP_EMBED_Q8
                                             : FDY_OP_EMBED_DENSE;
  fdy_tensor_id in[4] = {*step};
  size_t n = 1 + linear_views(b, FDY_LLAMA_EMBED, -1, in + 1);
  fdy_tensor_id h = add_op(
      b, prefix, "embed", embed_kind, no_params(), in, n,
      activation(b, prefix, "embed", FDY_DTYPE_F32, rows, c->hidden_size));
  for (uint32_t l = 0; l < c->num_layers; l++) {
    h = decoder_layer(b, prefix, *step, h, l, rows, fused);
  }
  fdy_tensor_id norm = view(b, FDY_LLAMA_FINAL_NORM, FDY_LLAMA_PART_NORM, -1);
  /* the prefill's logits (unless all_logits) and next id are its last
   * row's; the decode step's every row's (each row's next id) */
  uint64_t head_rows = fused ? rows : 1;
  fdy_tensor_id last;
  if (all_logits) {
    fdy_tensor_id x = rmsnorm(b, prefix, "final_norm", *step, h, norm, rows);
    *logits = matmul(b, prefix, "logits", *step, x, FDY_LLAMA_LM_HEAD, -1, rows,
                     c->vocab_size);
    fdy_tensor_id take[2] = {*step, *logits};
    last = add_op(
        b, prefix, "last_logits", FDY_OP_LAST_ROW, no_params(), take, 2,
        activation(b, prefix, "last_logits", FDY_DTYPE_F32, 1, c->vocab_size));
  } else {
    if (!fused && rows > 1) {
      fdy_tensor_id take[2] = {*step, h};
      h = add_op(b, prefix, "last_hidden", FDY_OP_LAST_ROW, no_params(), take,
                 2,
                 activation(b, prefix, "last_hidden", FDY_DTYPE_F32, 1,
                            c->hidden_size));
    }
    if (fused) {
      static const fdy_llama_module head[1] = {FDY_LLAMA_LM_HEAD};
      static const char *const names[1] = {"logits"};
      uint64_t features[1] = {c->vocab_size};
      norm_matmul(b, prefix, "logits", "final_norm", *step, h, norm, head,
                  names, features, 1, -1, head_rows, logits);
    } else {
      fdy_tensor_id x = rmsnorm(b, prefix, "final_norm", *step, h, norm, 1);
      *logits = matmul(b, prefix, "logits", *step, x, FDY_LLAMA_LM_HEAD, -1, 1,
                       c->vocab_size);
    }
    last = *logits;
  }
  snprintf(name, sizeof name, "%s.sampling", prefix);
  if (b->st == FDY_OK) {
    b->st = fdy_graph_add_input(b->g, name, FDY_DTYPE_U32,
                                FDY_SHAPE(head_rows, FDY_SAMPLE_FIELDS),
                                sampling, b->err);
  }
  fdy_tensor_id draw[3] = {*step, last, *sampling};
  *next = add_op(b, prefix, "next", FDY_OP_SAMPLE, no_params(), draw, 3,
                 activation(b, prefix, "next", FDY_DTYPE_I32, head_rows, 0));
}

static uint32_t sequences_of(const fdy_llama_graph_options *o) {
  return o->sequences ? o->sequences : 1;
}

static uint32_t step_rows_of(const fdy_llama_graph_options *o) {
  return o->step_rows ? o->step_rows : sequences_of(o);
}

static void add_caches(builder *b) {
  const fdy_llama_config *c = b->c;
  uint64_t kv_dim = (uint64_t)c->num_kv_heads * c->head_dim;
  uint64_t sequences = sequences_of(b->options);
  for (uint32_t l = 0; b->st == FDY_OK && l < c->num_layers; l++) {
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "layer.%u.k_cache", l);
    b->st =
        fdy_graph_add_state(b->g, name, b->options->kv_dtype,
                            FDY_SHAPE(sequences, b->options->context, kv_dim),
                            &b->k_cache[l], b->err);
    snprintf(name, sizeof name, "layer.%u.v_cache", l);
    if (b->st == FDY_OK) {
      b->st =
          fdy_graph_add_state(b->g, name, b->options->kv_dtype,
                              FDY_SHAPE(sequences, b->options->context, kv_dim),
                              &b->v_cache[l], b->err);
    }
  }
}

static fdy_status check_options(const fdy_llama_config *c,
                                const fdy_llama_graph_options *o,
                                fdy_error *err) {
  if (o->context == 0 || o->prefill_rows == 0 ||
      o->context > c->max_position_embeddings) {
    fdy_status st = fdy_error_set(
        err, FDY_ERR_INVALID_ARGUMENT,
        "a Llama graph needs a context of 1 to %u positions (the model's "
        "max_position_embeddings) and at least one prefill row; got context "
        "%u and %u rows",
        c->max_position_embeddings, o->context, o->prefill_rows);
    if (err) {
      err->expected = c->max_position_embeddings;
      err->actual = o->context;
    }
    return st;
  }
  if (o->kv_dtype != FDY_DTYPE_F32 && o->kv_dtype != FDY_DTYPE_F16) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the KV cache dtype must be F32 or F16, not %s",
                         fdy_dtype_name(o->kv_dtype));
  }
  if (o->step_rows && o->step_rows < sequences_of(o)) {
    fdy_status st = fdy_error_set(
        err, FDY_ERR_INVALID_ARGUMENT,
        "the decode step needs at least one row per sequence: %u step rows "
        "for %u sequences",
        o->step_rows, sequences_of(o));
    if (err) {
      err->expected = sequences_of(o);
      err->actual = o->step_rows;
    }
    return st;
  }
  if (o->ids_only && o->all_logits) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a Llama graph cannot output every row's logits "
                         "(all_logits) and only the next ids (ids_only)");
  }
  return FDY_OK;
}

fdy_status fdy_llama_graph(const fdy_llama_model *model,
                           const fdy_llama_graph_options *options,
                           fdy_graph **out, fdy_llama_graph_io *io,
                           fdy_error *err) {
  if (out) {
    *out = NULL;
  }
  if (!model || !options || !out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_graph needs a model, options and output");
  }
  const fdy_llama_config *c = fdy_llama_model_config(model);
  fdy_status st = check_options(c, options, err);
  if (st != FDY_OK) {
    return st;
  }
  builder b = {.model = model, .c = c, .options = options, .err = err};
  const fdy_llama_module_quant *quant = fdy_llama_model_quant(model);
  b.st = fdy_llama_layout_new(c, quant, &b.specs, &b.spec_count, err);
  if (b.st == FDY_OK) {
    b.views = calloc(b.spec_count, sizeof(*b.views));
    b.k_cache = calloc(c->num_layers, sizeof(*b.k_cache));
    b.v_cache = calloc(c->num_layers, sizeof(*b.v_cache));
    b.st = b.views && b.k_cache && b.v_cache
               ? fdy_graph_create("llama", &b.g, err)
               : fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  add_unit(&b, "embed", in_embed, -1, RESIDENT_FIRST);
  for (uint32_t l = 0; b.st == FDY_OK && l < c->num_layers; l++) {
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "layer.%u", l);
    add_unit(&b, name, in_layer, l, 0);
  }
  add_unit(&b, "head", in_head, -1, RESIDENT_FIRST);
  add_caches(&b);
  fdy_llama_graph_io ids;
  memset(&ids, 0, sizeof ids);
  ids.prefill_first_op = 0;
  ids.ids_only = options->ids_only;
  add_step(&b, "prefill", options->prefill_rows, options->all_logits, false,
           &ids.prefill_step, &ids.prefill_sampling, &ids.prefill_logits,
           &ids.prefill_next);
  if (b.st == FDY_OK) {
    ids.prefill_op_count = (uint32_t)fdy_graph_op_count(b.g);
    ids.decode_first_op = ids.prefill_op_count;
  }
  add_step(&b, "decode", step_rows_of(options), false, true, &ids.decode_step,
           &ids.decode_sampling, &ids.decode_logits, &ids.decode_next);
  if (b.st == FDY_OK) {
    ids.decode_op_count =
        (uint32_t)fdy_graph_op_count(b.g) - ids.decode_first_op;
    b.st = fdy_graph_validate(b.g, err);
  }
  free(b.specs);
  free(b.views);
  free(b.k_cache);
  free(b.v_cache);
  if (b.st != FDY_OK) {
    fdy_graph_destroy(b.g);
    return b.st;
  }
  *out = b.g;
  if (io) {
    *io = ids;
  }
  return FDY_OK;
}

fdy_status fdy_llama_plan(const fdy_graph *graph, const fdy_llama_graph_io *io,
                          uint64_t weight_budget, uint32_t buffers,
                          fdy_plan **out, fdy_error *err) {
  if (!graph || !io) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_plan needs a graph and its io");
  }
  uint32_t total = io->prefill_op_count + io->decode_op_count;
  fdy_op_id *ops = calloc(total ? total : 1, sizeof(*ops));
  if (!ops) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (uint32_t i = 0; i < io->prefill_op_count; i++) {
    ops[i].v = io->prefill_first_op + i;
  }
  for (uint32_t i = 0; i < io->decode_op_count; i++) {
    ops[io->prefill_op_count + i].v = io->decode_first_op + i;
  }
  /* the next id, then the logits unless ids_only */
  fdy_tensor_id prefill_out[2] = {io->prefill_next, io->prefill_logits};
  fdy_tensor_id decode_out[2] = {io->decode_next, io->decode_logits};
  const size_t outputs = io->ids_only ? 1 : 2;
  fdy_plan_step steps[2] = {
      {"prefill", ops, io->prefill_op_count, prefill_out, outputs},
      {"decode", ops + io->prefill_op_count, io->decode_op_count, decode_out,
       outputs},
  };
  fdy_planner_options options = {.weight_budget = weight_budget,
                                 .buffers = buffers};
  fdy_status st = fdy_plan_build(graph, steps, 2, &options, out, err);
  free(ops);
  return st;
}
