/* The model as a Foundry graph (see fdy_llama_graph in llama.h). Each op
 * reads exactly one weight, a U8 vector gathered from the file extents of
 * its tensors, so one decoder layer is one streamable unit. Nothing is read
 * from the files here. */
#include <stdio.h>
#include <stdlib.h>

#include "loader.h"

#define LAYER_TENSORS 23 /* two norms and seven linears of three tensors */

static fdy_extent file_extent(const fdy_st_tensor *t) {
  fdy_extent e = {.kind = FDY_EXTENT_FILE,
                  .path = t->path,
                  .offset = t->file_offset,
                  .length = t->bytes};
  return e;
}

static size_t add_linear(fdy_extent *out, size_t n,
                         const fdy_llama_qlinear *q) {
  out[n++] = file_extent(q->weight);
  out[n++] = file_extent(q->scales);
  out[n++] = file_extent(q->biases);
  return n;
}

/* A U8 weight of the extents' total length. */
static fdy_status add_weight(fdy_graph *g, const char *name,
                             const fdy_extent *extents, size_t count,
                             fdy_tensor_id *out, fdy_error *err) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < count; i++) {
    if (fdy_add_u64(bytes, extents[i].length, &bytes, err) != FDY_OK) {
      return FDY_ERR_OVERFLOW;
    }
  }
  return fdy_graph_add_weight(g, name, FDY_DTYPE_U8, FDY_SHAPE(bytes), extents,
                              count, out, err);
}

static fdy_status add_op(fdy_graph *g, const char *name, const char *kind,
                         uint64_t param, fdy_tensor_id a, fdy_tensor_id b,
                         fdy_tensor_id written, fdy_error *err) {
  fdy_tensor_id reads[2] = {a, b};
  fdy_op_desc desc = {.name = name,
                      .kind = kind,
                      .param = param,
                      .reads = reads,
                      .read_count = 2,
                      .writes = &written,
                      .write_count = 1};
  fdy_op_id id;
  return fdy_graph_add_op(g, &desc, &id, err);
}

static fdy_status build(const fdy_llama_model *model, uint32_t context,
                        fdy_graph *g, fdy_error *err) {
  const fdy_llama_config *c = fdy_llama_model_config(model);
  fdy_extent ext[LAYER_TENSORS];
  char name[64], out_name[64];
  fdy_tensor_id tokens, weight, hidden, next;
  fdy_shape hidden_shape = FDY_SHAPE(context, c->hidden_size);
  fdy_status s;
  size_t n = add_linear(ext, 0, fdy_llama_embedding(model));
  if ((s = fdy_graph_add_input(g, "tokens", FDY_DTYPE_I32, FDY_SHAPE(context),
                               &tokens, err)) != FDY_OK ||
      (s = add_weight(g, "embed", ext, n, &weight, err)) != FDY_OK ||
      (s = fdy_graph_add_activation(g, "embed.out", FDY_DTYPE_F32, hidden_shape,
                                    &hidden, err)) != FDY_OK ||
      (s = add_op(g, "embed", FDY_OP_LLAMA_EMBED, 0, tokens, weight, hidden,
                  err)) != FDY_OK) {
    return s;
  }
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const fdy_llama_layer_weights *w = fdy_llama_layer(model, i);
    n = 0;
    ext[n++] = file_extent(w->input_norm);
    n = add_linear(ext, n, &w->q);
    n = add_linear(ext, n, &w->k);
    n = add_linear(ext, n, &w->v);
    n = add_linear(ext, n, &w->o);
    ext[n++] = file_extent(w->post_norm);
    n = add_linear(ext, n, &w->gate);
    n = add_linear(ext, n, &w->up);
    n = add_linear(ext, n, &w->down);
    snprintf(name, sizeof name, "layer.%u", i);
    snprintf(out_name, sizeof out_name, "layer.%u.out", i);
    if ((s = add_weight(g, name, ext, n, &weight, err)) != FDY_OK ||
        (s = fdy_graph_add_activation(g, out_name, FDY_DTYPE_F32, hidden_shape,
                                      &next, err)) != FDY_OK ||
        (s = add_op(g, name, FDY_OP_LLAMA_LAYER, i, weight, hidden, next,
                    err)) != FDY_OK) {
      return s;
    }
    hidden = next;
  }
  n = 0;
  ext[n++] = file_extent(fdy_llama_final_norm(model));
  n = add_linear(ext, n, fdy_llama_lm_head(model));
  if ((s = add_weight(g, "head", ext, n, &weight, err)) != FDY_OK ||
      (s = fdy_graph_add_activation(g, "logits", FDY_DTYPE_F32,
                                    FDY_SHAPE(context, c->vocab_size), &next,
                                    err)) != FDY_OK ||
      (s = add_op(g, "head", FDY_OP_LLAMA_HEAD, 0, weight, hidden, next,
                  err)) != FDY_OK) {
    return s;
  }
  return fdy_graph_validate(g, err);
}

fdy_status fdy_llama_graph(const fdy_llama_model *model, uint32_t context,
                           fdy_graph **out, fdy_error *err) {
  *out = NULL;
  if (context == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the graph context must be at least 1 position");
  }
  fdy_graph *g = NULL;
  fdy_status s = fdy_graph_create("llama", &g, err);
  if (s == FDY_OK) {
    s = build(model, context, g, err);
  }
  if (s != FDY_OK) {
    fdy_graph_destroy(g);
    return s;
  }
  *out = g;
  return FDY_OK;
}
