/* Which ops the CUDA backend runs: every kind of include/foundry/ops.h with
 * the dtypes fdy_op_check allows, every dimension below 2^31 (the
 * checksum's byte count aside; kernels index rows and features with 32-bit
 * integers), and launches that fit the device: the dynamic shared memory of
 * the one-row MATMUL_Q4 kernel (x and its group sums) and of ATTENTION and
 * ROPE_ATTENTION (a decode chunk's scores, a batch block's q rows, scores
 * and partial outputs, or a prefill tile's q, keys, values and output)
 * within what a block may use, grid dimensions within CUDA's limits (the
 * 8-bit and unquantized matmuls: a block row per row of x), and at
 * most FDY_CUDA_ROPE_MAX_PAIRS rope pairs (ROPE and ROPE_ATTENTION, of
 * any row count: one decode row, or a batch of independent rows). The
 * workspace of an op: the one-row ATTENTION's and ROPE_ATTENTION's partial
 * results (attention.cu), the blocks' winners of ARGMAX over long rows
 * and SAMPLE's chunk sums and argmax ids (ops_kernels.cu), and MATMUL_Q4 and
 * the fused matmul kinds (NORM_MATMUL_Q4, NORM_SWIGLU_Q4, MATMUL_ADD_Q4) of
 * several rows (x, normed where the kind says, in F16, partial sums:
 * matmul_q4_mma.cu); other ops need none. Those fused kinds run for any row
 * count: one row on the GEMV (matmul_q4.cu), several on the tensor cores. */
#include "cuda_internal.h"

#include "foundry/op_table.h"

#include <stdint.h>
#include <string.h>

static const fdy_tensor_view *view_at(const fdy_op *op, uint32_t i) {
  return i < op->input_count ? &op->inputs[i]
                             : &op->outputs[i - op->input_count];
}

static bool dims_fit(const fdy_op *op) {
  for (uint32_t i = 0; i < op->input_count + op->output_count; i++) {
    const fdy_tensor_view *v = view_at(op, i);
    for (uint32_t d = 0; d < v->shape.rank; d++) {
      bool bytes = fdy_op_operand_of(op, i)->flags & FDY_OPERAND_WORDS;
      if (!bytes && v->shape.dims[d] > INT32_MAX) {
        return false;
      }
    }
  }
  return true;
}

bool fdy_cuda_op_supported(const fdy_cuda_ctx *ctx, const fdy_op *op) {
  if (op == NULL || fdy_op_check(op, NULL) != FDY_OK || !dims_fit(op)) {
    return false;
  }
  if (fdy_cuda_op_shared_bytes(op) > ctx->smem_optin) {
    return false;
  }
  if (fdy_op_row_of(op->kind)->flags & FDY_OP_Q4_MATMUL) {
    /* one row: the GEMV (with the fused kinds' prologue or epilogue);
     * several: the tensor-core kernel, 128 rows per block in y */
    uint64_t rows = op->inputs[1].shape.dims[0];
    return (rows + FDY_CUDA_GEMM_ROWS - 1) / FDY_CUDA_GEMM_ROWS <=
           FDY_CUDA_MAX_GRID_Y;
  }
  switch (op->kind) {
  case FDY_OP_RMSNORM: /* a block per segment of a row */
    return op->inputs[1].shape.dims[0] *
               (op->inputs[1].shape.dims[1] / op->inputs[2].shape.dims[0]) <=
           INT32_MAX;
  case FDY_OP_MATMUL_Q8:
  case FDY_OP_MATMUL_DENSE: /* a block row per row of x */
    return op->inputs[1].shape.dims[0] <= FDY_CUDA_MAX_GRID_Y;
  case FDY_OP_ROPE:
    return op->params.rope.head_dim / 2 <= FDY_CUDA_ROPE_MAX_PAIRS;
  case FDY_OP_ATTENTION:
  case FDY_OP_ROPE_ATTENTION:
    return fdy_cuda_attention_grid_fits(op);
  default:
    return true;
  }
}

fdy_cuda_rope_table fdy_cuda_rope_table_of(const fdy_op *op) {
  fdy_cuda_rope_table table;
  memset(&table, 0, sizeof table);
  const fdy_op_params params = fdy_rope_params_of(op);
  for (uint32_t j = 0; j < params.rope.head_dim / 2; j++) {
    table.inv[j] = fdy_rope_inverse_frequency(&params, j);
  }
  return table;
}

uint64_t fdy_cuda_op_workspace_bytes(const fdy_op *op) {
  if (op->kind == FDY_OP_ATTENTION || op->kind == FDY_OP_ROPE_ATTENTION) {
    return fdy_cuda_attention_workspace_bytes(op);
  }
  if (op->kind == FDY_OP_ARGMAX || op->kind == FDY_OP_SAMPLE) {
    return fdy_cuda_argmax_workspace_bytes(op); /* SAMPLE runs ARGMAX */
  }
  const bool q4 = fdy_op_row_of(op->kind)->flags & FDY_OP_Q4_MATMUL;
  if (q4 && op->inputs[1].shape.dims[0] != 1) {
    return fdy_cuda_matmul_q4_mma_workspace_bytes(op);
  }
  return 0;
}
