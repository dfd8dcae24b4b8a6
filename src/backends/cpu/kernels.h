/* The CPU backend's op kernels (private to src/backends/cpu): the reference
 * implementation of every kind of include/foundry/ops.h, multi-threaded
 * within one op on the backend's pool, with results that do not depend on
 * the thread count. cpu.c checks and queues ops; kernels.c runs them. */
#ifndef FOUNDRY_CPU_KERNELS_H
#define FOUNDRY_CPU_KERNELS_H

#include "foundry/ops.h"
#include "foundry/pool.h"

/* Regions of a workspace (per-thread scratch above all) start at multiples
 * of this many bytes from its start, so threads do not share cache lines. */
#define FDY_CPU_WORKSPACE_ALIGN 64

/* Whether the kernels run op: it passed fdy_op_check, its kind has a
 * kernel, every dimension is below 2^31 (positions and ids are I32) and
 * the workspace computable. */
bool fdy_cpu_op_supported(const fdy_op *op, uint32_t threads);

/* Workspace bytes op needs on a pool of `threads` threads (0 when none).
 * FDY_ERR_OVERFLOW when they do not fit 64 bits. */
fdy_status fdy_cpu_op_workspace(const fdy_op *op, uint32_t threads,
                                uint64_t *out, fdy_error *err);

/* An op whose views resolved to host memory. */
typedef struct fdy_cpu_args {
  const fdy_op *op;
  void *inputs[FDY_OP_MAX_INPUTS];
  void *outputs[FDY_OP_MAX_OUTPUTS];
  unsigned char *workspace; /* 8-byte aligned, fdy_cpu_op_workspace bytes;
                               NULL when the op needs none */
} fdy_cpu_args;

/* Runs a supported op on pool (all views in bounds and aligned).
 * Cannot fail: values read from the step tensor only select rows. */
void fdy_cpu_op_run(fdy_pool *pool, const fdy_cpu_args *args);

/* ---- matmul_q4.c ---------------------------------------------------------
 */

/* Workspace layout of a MATMUL_Q4 op (bytes, FDY_CPU_WORKSPACE_ALIGN
 * multiples): block-transposed inputs xt, per-group input sums, then one row
 * scratch per thread. */
typedef struct fdy_cpu_matmul_layout {
  uint64_t xt, xsum, rows, row_stride, total;
} fdy_cpu_matmul_layout;

fdy_status fdy_cpu_matmul_layout_of(const fdy_op *op, uint32_t threads,
                                    fdy_cpu_matmul_layout *out, fdy_error *err);
/* y = x W^T for the first `rows` rows of x. */
void fdy_cpu_matmul_q4(fdy_pool *pool, const fdy_cpu_args *args, uint32_t rows);

/* ---- half.c ---------------------------------------------------------------
 */

/* F16 bits to float (exact). */
float fdy_cpu_f16_to_float(uint16_t bits);
/* BF16 bits to float (exact). */
float fdy_cpu_bf16_to_float(uint16_t bits);
/* All 65536 F16 values as floats (built on first use; thread-safe). */
const float *fdy_cpu_f16_table(void);
/* Element i of an F16 or BF16 vector (little-endian bytes). */
float fdy_cpu_half_at(const void *data, fdy_dtype dtype, uint64_t i);
/* Elements [first, first + count) of an F16 or BF16 vector into out. */
void fdy_cpu_halves_to_float(const void *data, fdy_dtype dtype, uint64_t first,
                             uint32_t count, float *out);
/* The same for an F32, F16 or BF16 vector. */
void fdy_cpu_floats_of(const void *data, fdy_dtype dtype, uint64_t first,
                       uint32_t count, float *out);

/* ---- linear.c --------------------------------------------------------------
 */

/* Workspace bytes of MATMUL_Q8 or MATMUL_DENSE on `threads` threads: one
 * expanded weight row per thread. */
fdy_status fdy_cpu_linear_workspace(const fdy_op *op, uint32_t threads,
                                    uint64_t *out, fdy_error *err);
/* EMBED_Q4, EMBED_Q8 or EMBED_DENSE for the first `rows` rows of the
 * output. */
void fdy_cpu_embed_linear(fdy_pool *pool, const fdy_cpu_args *args,
                          uint32_t rows);
/* MATMUL_Q8 or MATMUL_DENSE: y = x W^T for the first `rows` rows of x. */
void fdy_cpu_matmul_linear(fdy_pool *pool, const fdy_cpu_args *args,
                           uint32_t rows);

#endif
