/* The synthetic workload: a chain of checksum ops, one weight per layer,
 * used by `foundry plan` and `foundry bench`. Describing the weights (no
 * layer_data) allocates only names and small tables, whatever weight_bytes. */
#include "foundry/graph.h"

#include <inttypes.h>
#include <stdio.h>

fdy_status fdy_synthetic_graph_create(uint32_t layers, uint64_t weight_bytes,
                                      const void *const *layer_data,
                                      fdy_graph **out, fdy_error *err) {
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "output is required");
  }
  if (weight_bytes == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "synthetic weight size must be > 0 bytes");
  }
  fdy_graph *g = NULL;
  fdy_status s = fdy_graph_create("synthetic", &g, err);
  if (s != FDY_OK) {
    goto cleanup;
  }
  fdy_tensor_id prev = {0};
  for (uint32_t i = 0; i < layers; i++) {
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
      goto cleanup;
    }
    snprintf(name, sizeof(name), "layer.%" PRIu32 ".out", i);
    s = fdy_graph_add_activation(g, name, FDY_DTYPE_U64, FDY_SHAPE(1), &act,
                                 err);
    if (s != FDY_OK) {
      goto cleanup;
    }
    fdy_tensor_id reads[2] = {w, prev};
    snprintf(name, sizeof(name), "layer.%" PRIu32, i);
    fdy_op_desc op = {.name = name,
                      .kind = FDY_OP_SYNTHETIC_CHECKSUM,
                      .param = i,
                      .reads = reads,
                      .read_count = i > 0 ? 2 : 1,
                      .writes = &act,
                      .write_count = 1};
    s = fdy_graph_add_op(g, &op, NULL, err);
    if (s != FDY_OK) {
      goto cleanup;
    }
    prev = act;
  }
  *out = g;
  g = NULL;
cleanup:
  fdy_graph_destroy(g);
  return s;
}
