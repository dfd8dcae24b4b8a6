/* The benchmark's workload (include/foundry/bench.h): a chain of
 * FDY_OP_CHECKSUM ops, one weight per layer, each op folding its weight's
 * checksum into the previous op's result, and its one-step plan. Describing
 * the weights (no layer_data) allocates only names and small tables,
 * whatever weight_bytes; `foundry plan --dump` plans such a description. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "foundry/bench.h"

fdy_status fdy_synthetic_graph_create(uint32_t layers, uint64_t weight_bytes,
                                      uint32_t passes,
                                      const void *const *layer_data,
                                      fdy_graph **out, fdy_error *err) {
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "output is required");
  }
  *out = NULL;
  if (layers == 0 || weight_bytes == 0 || weight_bytes % 8 != 0) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "a synthetic chain needs at least one layer and a weight "
                  "size that is a positive multiple of 8 bytes (got %" PRIu32
                  " layers of %" PRIu64 " bytes)",
                  layers, weight_bytes);
    if (err) {
      err->actual = weight_bytes;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  fdy_graph *g = NULL;
  fdy_status s = fdy_graph_create("synthetic", &g, err);
  fdy_tensor_id prev = {0};
  for (uint32_t i = 0; s == FDY_OK && i < layers; i++) {
    char name[64];
    fdy_tensor_id w, act;
    fdy_extent extent = {.kind = FDY_EXTENT_HOST,
                         .host = layer_data ? layer_data[i] : NULL,
                         .length = weight_bytes};
    snprintf(name, sizeof(name), "layer.%" PRIu32 ".weight", i);
    s = fdy_graph_add_weight(g, name, FDY_DTYPE_U8, FDY_SHAPE(weight_bytes),
                             layer_data ? &extent : NULL, layer_data ? 1 : 0,
                             &w, err);
    if (s != FDY_OK) {
      break;
    }
    snprintf(name, sizeof(name), "layer.%" PRIu32 ".out", i);
    s = fdy_graph_add_activation(g, name, FDY_DTYPE_U64, FDY_SHAPE(1), &act,
                                 err);
    if (s != FDY_OK) {
      break;
    }
    fdy_tensor_id reads[2] = {w, prev};
    snprintf(name, sizeof(name), "layer.%" PRIu32, i);
    fdy_op_desc op = {.name = name,
                      .kind = FDY_OP_CHECKSUM,
                      .params.checksum.passes = passes,
                      .reads = reads,
                      .read_count = i > 0 ? 2 : 1,
                      .writes = &act,
                      .write_count = 1};
    s = fdy_graph_add_op(g, &op, NULL, err);
    prev = act;
  }
  if (s == FDY_OK) {
    *out = g;
    g = NULL;
  }
  fdy_graph_destroy(g);
  return s;
}

fdy_status fdy_synthetic_output(const fdy_graph *chain, fdy_tensor_id *out,
                                fdy_error *err) {
  size_t ops = chain ? fdy_graph_op_count(chain) : 0;
  if (ops == 0 || !out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a synthetic chain with at least one op is required");
  }
  fdy_op_info info;
  fdy_status s =
      fdy_graph_op(chain, (fdy_op_id){(uint32_t)(ops - 1)}, &info, err);
  if (s == FDY_OK && info.write_count != 1) {
    s = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                      "the last op of the chain writes %zu tensors, not 1",
                      info.write_count);
  }
  if (s == FDY_OK) {
    *out = info.writes[0];
  }
  return s;
}

fdy_status fdy_synthetic_plan_build(const fdy_graph *chain,
                                    const fdy_planner_options *options,
                                    fdy_plan **out, fdy_error *err) {
  fdy_tensor_id output;
  fdy_status s = fdy_synthetic_output(chain, &output, err);
  if (s != FDY_OK) {
    return s;
  }
  size_t count = fdy_graph_op_count(chain);
  fdy_op_id *ops = malloc(count * sizeof(*ops));
  if (!ops) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory listing %zu ops", count);
  }
  for (size_t i = 0; i < count; i++) {
    ops[i] = (fdy_op_id){(uint32_t)i};
  }
  fdy_plan_step step = {.name = FDY_BENCH_STEP,
                        .ops = ops,
                        .op_count = count,
                        .outputs = &output,
                        .output_count = 1};
  s = fdy_plan_build(chain, &step, 1, options, out, err);
  free(ops);
  return s;
}
