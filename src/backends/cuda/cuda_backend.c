/* The CUDA backend: the backend contract over the CUDA runtime. This file
 * creates the backend (the internal stream, the checksum word sets, the
 * staging ring, the warm-up and the calibration of event times), launches
 * ops, drains and destroys the backend, holds its table and answers the
 * device queries. Beside it, sharing cuda_backend_internal.h:
 *
 *   cuda_memory.c   device buffers and the reference rule, host registration
 *   cuda_streams.c  streams, events, copies, waits and event times
 *   cuda_faults.c   errors, the attribution of device faults, the lost state
 *
 * Copies and launches only enqueue: nothing is tracked per submission, so a
 * recorded step costs the host no more than its CUDA calls. A launch checks
 * the op (fdy_op_check, supports_op in cuda_ops.c), resolves its views (and
 * the workspace of a MATMUL_Q4 of several rows) to device addresses and
 * enqueues its kernels through fdy_cuda_op_enqueue (ops_kernels.cu), the
 * CHECKSUM kind's among them.
 *
 * The executor calls the backend from one thread at a time (backend.h), so
 * the backend's own state needs no lock; only the staging fill threads and
 * CUDA's host-function thread run beside the caller, on staging buffers
 * only. Every CUDA call is checked and a failure becomes an fdy_error with
 * the CUDA error's name and string, except in cleanup paths (release,
 * destroy, unwinding after a failure), which cannot report one and pass the
 * call's result to fdy_cuda_ignore instead. */
#include "cuda_backend_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_ALIGNMENT               256
#define CUDA_DEFAULT_STAGING_BYTES   (16 * FDY_MIB)
#define CUDA_DEFAULT_STAGING_BUFFERS 4
#define CUDA_CALIBRATION_TRIES       5

static const fdy_backend_ops cuda_ops;

fdy_status fdy_cuda_set_device(cuda_backend *b, fdy_error *err,
                               const char *op) {
  return fdy_cuda_check(cudaSetDevice(b->ctx.device), err, op, "cudaSetDevice");
}

fdy_status fdy_cuda_ctx_of(fdy_backend *b, const char *op, fdy_cuda_ctx **out,
                           fdy_error *err) {
  *out = NULL;
  if (b == NULL || b->ops != &cuda_ops) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "the backend is not a CUDA backend");
  }
  if (fdy_cuda_backend_of(b)->lost) {
    return fdy_cuda_fail_lost(fdy_cuda_backend_of(b), op, err);
  }
  fdy_status st = fdy_cuda_set_device(fdy_cuda_backend_of(b), err, op);
  if (st == FDY_OK) {
    *out = &fdy_cuda_backend_of(b)->ctx;
  }
  return st;
}

/* Keeps the first failure of a sequence: when st is one and *first is still
 * FDY_OK, sets *first to st and copies local into err. */
static void keep_first(fdy_status *first, fdy_status st, const fdy_error *local,
                       fdy_error *err) {
  if (st != FDY_OK && *first == FDY_OK) {
    *first = st;
    if (err != NULL) {
      *err = *local;
    }
  }
}

/* ---- entries ---------------------------------------------------------------
 */

static fdy_status cuda_capabilities(fdy_backend *base, fdy_device_caps *out,
                                    fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "capabilities",
                         "out is NULL");
  }
  memset(out, 0, sizeof *out);
  if (b->lost) {
    return fdy_cuda_fail_lost(b, "capabilities", err);
  }
  fdy_status st = fdy_cuda_set_device(b, err, "capabilities");
  if (st != FDY_OK) {
    return fdy_cuda_settle(b, st, "capabilities", err);
  }
  size_t free_bytes = 0, total_bytes = 0;
  st = fdy_cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), err,
                      "capabilities", "cudaMemGetInfo");
  if (st != FDY_OK) {
    return fdy_cuda_settle(b, st, "capabilities", err);
  }
  snprintf(out->name, sizeof out->name, "%s", b->name);
  out->total_memory = total_bytes;
  out->free_memory = free_bytes;
  /* cudaMalloc can take at most what is free; the driver reports no other
   * limit. */
  out->max_allocation = free_bytes;
  out->alignment = CUDA_ALIGNMENT;
  out->concurrent_copy_compute = b->copy_engines > 0;
  out->copy_engines = b->copy_engines;
  return FDY_OK;
}

static bool cuda_supports_op(fdy_backend *base, const fdy_op *op) {
  return fdy_cuda_op_supported(&fdy_cuda_backend_of(base)->ctx, op);
}

/* UINT64_MAX when the op is not supported (no workspace can be that big). */
static uint64_t cuda_workspace_bytes(fdy_backend *base, const fdy_op *op) {
  return op != NULL && cuda_supports_op(base, op)
             ? fdy_cuda_op_workspace_bytes(op)
             : UINT64_MAX;
}

/* The device address of operand `index` of op (inputs, then the output):
 * the view has a buffer and lies inside it at an offset that is a multiple
 * of CUDA_ALIGNMENT. Errors: FDY_ERR_INVALID_ARGUMENT with ids[0] = index,
 * expected = the buffer's bytes, actual = the view's end, name = the kind. */
static fdy_status launch_view(const fdy_op *op, uint32_t index,
                              unsigned char **address, fdy_error *err) {
  const fdy_tensor_view *v = index < op->input_count
                                 ? &op->inputs[index]
                                 : &op->outputs[index - op->input_count];
  uint64_t n = 0, end = 0;
  if (v->buffer == NULL ||
      fdy_tensor_bytes(v->dtype, v->shape, &n, NULL) != FDY_OK ||
      v->offset % CUDA_ALIGNMENT != 0 ||
      __builtin_add_overflow(v->offset, n, &end) || end > v->buffer->bytes) {
    fdy_status st = fdy_cuda_fail(
        err, FDY_ERR_INVALID_ARGUMENT, "launch",
        "%s op: operand %u is unbound, not at a multiple of %d bytes or "
        "outside its buffer",
        fdy_op_kind_name(op->kind), index, CUDA_ALIGNMENT);
    if (err != NULL) {
      err->ids[0] = index;
      err->expected = v->buffer != NULL ? v->buffer->bytes : 0;
      err->actual = end;
      snprintf(err->name, sizeof err->name, "%s", fdy_op_kind_name(op->kind));
    }
    return st;
  }
  *address = (unsigned char *)v->buffer->data + v->offset;
  return FDY_OK;
}

/* The device address of op's workspace when the op needs one (NULL when
 * not): at least fdy_cuda_op_workspace_bytes, inside its buffer, at a
 * multiple of CUDA_ALIGNMENT. Errors: FDY_ERR_INVALID_ARGUMENT with ids[0]
 * = input_count + output_count, expected = the bytes needed, actual = the
 * bytes given, name "workspace". */
static fdy_status launch_workspace(const fdy_op *op, unsigned char **address,
                                   fdy_error *err) {
  const uint64_t need = fdy_cuda_op_workspace_bytes(op);
  const fdy_tensor_view *w = &op->workspace;
  uint64_t given = 0, end = 0;
  *address = NULL;
  if (need == 0) {
    return FDY_OK;
  }
  if (w->buffer == NULL ||
      fdy_tensor_bytes(w->dtype, w->shape, &given, NULL) != FDY_OK ||
      given < need || w->offset % CUDA_ALIGNMENT != 0 ||
      __builtin_add_overflow(w->offset, given, &end) ||
      end > w->buffer->bytes) {
    fdy_status st = fdy_cuda_fail(
        err, FDY_ERR_INVALID_ARGUMENT, "launch",
        "the %s op needs a workspace of %llu bytes at a multiple of %d bytes "
        "inside its buffer, got %llu",
        fdy_op_kind_name(op->kind), (unsigned long long)need, CUDA_ALIGNMENT,
        (unsigned long long)given);
    if (err != NULL) {
      err->ids[0] = op->input_count + op->output_count;
      err->expected = need;
      err->actual = given;
      snprintf(err->name, sizeof err->name, "workspace");
    }
    return st;
  }
  *address = (unsigned char *)w->buffer->data + w->offset;
  return FDY_OK;
}

/* Whether an op computes one row (the decode chain's ops, the LM head of a
 * prefill): those are programmatic dependent launches unless serial_launch
 * is set. Ops of many rows (prefill) keep serial launches: on the H200
 * their dependent launches made a 512-token prefill 1.4 ms slower
 * (docs/tuning-log.md, entry 16), and with the later kernels no faster
 * (entry 30). */
static bool one_row_op(const fdy_op *op) {
  return op->output_count > 0 && op->outputs[0].shape.rank > 0 &&
         op->outputs[0].shape.dims[0] == 1;
}

/* Checks the op (fdy_op_check, then supports_op), resolves every view, and
 * enqueues the op's kernels through fdy_cuda_op_enqueue with the stream's
 * word set. */
static fdy_status cuda_launch(fdy_backend *base, fdy_backend_stream *stream,
                              const fdy_op *op, fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (b->lost) {
    return fdy_cuda_fail_lost(b, "launch", err);
  }
  if (stream == NULL || op == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                         "NULL stream or op");
  }
  fdy_status st = fdy_op_check(op, err);
  if (st != FDY_OK) {
    if (err != NULL) {
      snprintf(err->backend_op, sizeof err->backend_op, "launch");
    }
    return st;
  }
  if (!fdy_cuda_op_supported(&b->ctx, op)) {
    st = fdy_cuda_fail(err, FDY_ERR_UNSUPPORTED, "launch",
                       "this %s op exceeds the backend's limits (dimensions "
                       "below 2^31, shared memory, grid size, rope pairs)",
                       fdy_op_kind_name(op->kind));
    if (err != NULL) {
      snprintf(err->name, sizeof err->name, "%s", fdy_op_kind_name(op->kind));
    }
    return st;
  }
  unsigned char *address[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS] = {NULL};
  for (uint32_t i = 0; st == FDY_OK && i < op->input_count + op->output_count;
       i++) {
    st = launch_view(op, i, &address[i], err);
  }
  unsigned char *workspace = NULL;
  if (st == FDY_OK) {
    st = launch_workspace(op, &workspace, err);
  }
  if (st == FDY_OK) {
    st = fdy_cuda_set_device(b, err, "launch");
  }
  if (st != FDY_OK) {
    return fdy_cuda_settle(b, st, "launch", err);
  }
  fdy_cuda_count_submission(b, stream, "launch", op);
  fdy_cuda_op_args args = {.op = op,
                           .workspace = workspace,
                           .sm_count = b->ctx.sm_count,
                           .max_blocks = b->ctx.max_blocks,
                           .dependent =
                               !b->opts.serial_launch && one_row_op(op),
                           .words = &b->words[stream->words],
                           .counters = &b->words[stream->words].op_counters[0]};
  for (uint32_t i = 0; i < op->input_count; i++) {
    args.in[i] = address[i];
  }
  for (uint32_t j = 0; j < op->output_count; j++) {
    args.outputs[j] = address[op->input_count + j];
  }
  args.out = args.outputs[0];
  const cudaError_t rc = fdy_cuda_op_enqueue(&args, stream->stream);
  st = fdy_cuda_check(rc, err, "launch", "the kernel launch");
  if (st != FDY_OK && err != NULL) {
    snprintf(err->name, sizeof err->name, "%s", fdy_op_kind_name(op->kind));
  }
  return fdy_cuda_settle(b, st, "launch", err);
}

/* After a drain: every recording and every stream's work completed. */
static void saw_everything_done(cuda_backend *b) {
  for (fdy_list_node *n = b->events.next; n != &b->events; n = n->next) {
    fdy_backend_event *e = (fdy_backend_event *)n;
    e->seen_done = e->recorded;
  }
  for (fdy_list_node *n = b->streams.next; n != &b->streams; n = n->next) {
    ((fdy_backend_stream *)n)->pending = (cuda_submission){0};
  }
}

/* Synchronizes every stream of the backend and the internal one, then
 * frees every retired buffer. After a failure it still does all of it, so
 * the caller can release everything; it returns the first error. Once the
 * backend is lost it waits for nothing and fails. */
static fdy_status cuda_drain(fdy_backend *base, fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (b->lost) {
    return fdy_cuda_fail_lost(b, "drain", err);
  }
  fdy_status first = fdy_cuda_set_device(b, err, "drain");
  fdy_error local;
  for (fdy_list_node *n = b->streams.next; n != &b->streams; n = n->next) {
    fdy_status st =
        fdy_cuda_check(cudaStreamSynchronize(((fdy_backend_stream *)n)->stream),
                       &local, "drain", "cudaStreamSynchronize");
    keep_first(&first, st, &local, err);
  }
  fdy_status st = fdy_cuda_check(cudaStreamSynchronize(b->ctx.internal), &local,
                                 "drain", "cudaStreamSynchronize");
  keep_first(&first, st, &local, err);
  first = fdy_cuda_settle(b, first, "drain", err);
  if (!b->lost) {
    fdy_cuda_sweep_retired(b, true, "drain");
  }
  if (b->lost) {
    if (err != NULL) {
      *err = b->lost_error;
    }
    return FDY_ERR_BACKEND;
  }
  if (first == FDY_OK) {
    b->submitted = false;
    saw_everything_done(b);
  }
  return first;
}

/* Drains and frees every object, released or not; once the backend is
 * lost, only host memory, with no CUDA call. */
static void cuda_destroy(fdy_backend *base) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (!b->lost) {
    fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
  }
  if (b->ctx.internal != NULL && !b->lost) {
    cuda_drain(base, NULL);
  }
  fdy_cuda_graphs_destroy_all(&b->ctx);
  while (b->streams.next != &b->streams) {
    fdy_cuda_stream_destroy(base, (fdy_backend_stream *)b->streams.next);
  }
  while (b->hosts.next != &b->hosts) {
    fdy_cuda_host_unregister(base, (fdy_backend_host *)b->hosts.next);
  }
  while (b->buffers.next != &b->buffers) {
    fdy_cuda_buffer_free(b, (fdy_backend_buffer *)b->buffers.next);
  }
  while (b->retired.next != &b->retired) {
    fdy_cuda_buffer_free(b, (fdy_backend_buffer *)b->retired.next);
  }
  while (b->events.next != &b->events) {
    fdy_cuda_event_destroy(base, (fdy_backend_event *)b->events.next);
  }
  fdy_cuda_staging_destroy(b->staging, b->lost);
  if (!b->lost) {
    if (b->ctx.internal != NULL) {
      fdy_cuda_ignore(cudaStreamSynchronize(b->ctx.internal));
      fdy_cuda_ignore(cudaStreamDestroy(b->ctx.internal));
    }
    if (b->calib != NULL) {
      fdy_cuda_ignore(cudaEventDestroy(b->calib));
    }
    if (b->join != NULL) {
      fdy_cuda_ignore(cudaEventDestroy(b->join));
    }
    fdy_cuda_ignore(cudaFree(b->words));
  }
  free(b->free_words);
  free(b);
}

static uint64_t cuda_submitted(fdy_backend *base) {
  return fdy_cuda_backend_of(base)->submissions;
}

static const fdy_backend_ops cuda_ops = {
    .name = "cuda",
    .capabilities = cuda_capabilities,
    .supports_op = cuda_supports_op,
    .workspace_bytes = cuda_workspace_bytes,
    .buffer_alloc = fdy_cuda_buffer_alloc,
    .buffer_release = fdy_cuda_buffer_release,
    .host_register = fdy_cuda_host_register,
    .host_unregister = fdy_cuda_host_unregister,
    .stream_create = fdy_cuda_stream_create,
    .stream_destroy = fdy_cuda_stream_destroy,
    .event_create = fdy_cuda_event_create,
    .event_destroy = fdy_cuda_event_destroy,
    .event_record = fdy_cuda_event_record,
    .copy_to_device = fdy_cuda_copy_to_device,
    .copy_to_host = fdy_cuda_copy_to_host,
    .launch = cuda_launch,
    .stream_wait = fdy_cuda_stream_wait,
    .host_wait = fdy_cuda_host_wait,
    .event_time = fdy_cuda_event_time,
    .graph_begin = fdy_cuda_graph_begin,
    .graph_end = fdy_cuda_graph_end,
    .graph_launch = fdy_cuda_graph_launch,
    .graph_destroy = fdy_cuda_graph_destroy,
    .submitted = cuda_submitted,
    .measure_ceiling = fdy_cuda_measure_ceiling,
    .drain = cuda_drain,
    .destroy = cuda_destroy,
};

/* ---- creation
 * ----------------------------------------------------------------
 */

int fdy_cuda_device_count(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void fdy_cuda_versions(int *runtime_version, int *driver_version) {
  int rv = 0, dv = 0;
  if (cudaRuntimeGetVersion(&rv) != cudaSuccess) {
    rv = 0;
  }
  if (cudaDriverGetVersion(&dv) != cudaSuccess) {
    dv = 0;
  }
  cudaGetLastError();
  if (runtime_version != NULL) {
    *runtime_version = rv;
  }
  if (driver_version != NULL) {
    *driver_version = dv;
  }
}

fdy_status fdy_cuda_memory_in_use(fdy_backend *b, uint64_t *out,
                                  fdy_error *err) {
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "memory_in_use",
                         "out is NULL");
  }
  *out = 0;
  fdy_cuda_ctx *ctx = NULL;
  fdy_status st = fdy_cuda_ctx_of(b, "memory_in_use", &ctx, err);
  if (st != FDY_OK) {
    return st;
  }
  size_t free_bytes = 0, total_bytes = 0;
  st = fdy_cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), err,
                      "memory_in_use", "cudaMemGetInfo");
  if (st == FDY_OK) {
    *out = (uint64_t)(total_bytes - free_bytes);
  }
  return st;
}

/* Records calibration events on the idle internal stream and keeps the one
 * whose host window was narrowest (timestamps: cuda_streams.c). */
static fdy_status calibrate(cuda_backend *b, fdy_error *err) {
  int64_t best_window = INT64_MAX;
  for (int i = 0; i < CUDA_CALIBRATION_TRIES; i++) {
    cudaEvent_t ev = NULL;
    fdy_status st = fdy_cuda_check(cudaEventCreate(&ev), err, "create",
                                   "cudaEventCreate (calibration)");
    if (st != FDY_OK) {
      return st;
    }
    int64_t t0 = fdy_now_ns();
    st = fdy_cuda_check(cudaEventRecord(ev, b->ctx.internal), err, "create",
                        "cudaEventRecord (calibration)");
    if (st == FDY_OK) {
      st = fdy_cuda_check(cudaEventSynchronize(ev), err, "create",
                          "cudaEventSynchronize (calibration)");
    }
    int64_t t1 = fdy_now_ns();
    if (st != FDY_OK) {
      fdy_cuda_ignore(cudaEventDestroy(ev));
      return st;
    }
    if (t1 - t0 < best_window) {
      best_window = t1 - t0;
      if (b->calib != NULL) {
        fdy_cuda_ignore(cudaEventDestroy(b->calib));
      }
      b->calib = ev;
      b->calib_host_ns = t0 + (t1 - t0) / 2;
    } else {
      fdy_cuda_ignore(cudaEventDestroy(ev));
    }
  }
  return FDY_OK;
}

static uint32_t fill_parts(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  long parts = cpus / 2;
  if (parts < 1) {
    parts = 1;
  }
  if (parts > 8) {
    parts = 8;
  }
  return (uint32_t)parts;
}

/* The options with their defaults filled in, checked against the devices
 * present: FDY_ERR_INVALID_ARGUMENT for an unknown host mode or a device
 * that does not exist (expected: the device count, actual: the device),
 * FDY_ERR_UNSUPPORTED when there is no device. */
static fdy_status resolve_options(const fdy_cuda_options *options,
                                  fdy_cuda_options *opts, fdy_error *err) {
  *opts = options != NULL ? *options : (fdy_cuda_options){0};
  if (opts->host_mode != FDY_CUDA_HOST_REGISTERED &&
      opts->host_mode != FDY_CUDA_HOST_STAGED) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                         "unknown host mode %d", (int)opts->host_mode);
  }
  if (opts->staging_bytes == 0) {
    opts->staging_bytes = CUDA_DEFAULT_STAGING_BYTES;
  }
  if (opts->staging_buffers == 0) {
    opts->staging_buffers = CUDA_DEFAULT_STAGING_BUFFERS;
  }
  int count = fdy_cuda_device_count();
  if (count == 0) {
    return fdy_cuda_fail(err, FDY_ERR_UNSUPPORTED, "create",
                         "no CUDA device is available");
  }
  if (opts->device < 0 || opts->device >= count) {
    fdy_status st = fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                                  "device %d does not exist (%d devices)",
                                  opts->device, count);
    if (err != NULL) {
      err->expected = (uint64_t)count;
      err->actual = (uint64_t)(int64_t)opts->device;
    }
    return st;
  }
  return FDY_OK;
}

/* A backend of opts with empty lists and no CUDA object yet, or NULL when
 * out of host memory. */
static cuda_backend *backend_alloc(const fdy_cuda_options *opts) {
  cuda_backend *b = calloc(1, sizeof *b);
  if (b == NULL) {
    return NULL;
  }
  b->base.ops = &cuda_ops;
  b->base.self = b;
  b->opts = *opts;
  b->ctx.device = opts->device;
  long page = sysconf(_SC_PAGESIZE);
  b->page_bytes = page > 0 ? (uint64_t)page : 4096;
  fdy_list_init(&b->buffers);
  fdy_list_init(&b->retired);
  fdy_list_init(&b->events);
  fdy_list_init(&b->streams);
  fdy_list_init(&b->hosts);
  fdy_list_init(&b->ctx.graphs);
  return b;
}

/* Reads the device's name, copy engines, L2 size, multiprocessors, opt-in
 * shared memory and the checksum kernel's resident blocks into b. */
static fdy_status read_device(cuda_backend *b, fdy_error *err) {
  struct cudaDeviceProp prop;
  fdy_status st = fdy_cuda_check(cudaGetDeviceProperties(&prop, b->ctx.device),
                                 err, "create", "cudaGetDeviceProperties");
  if (st != FDY_OK) {
    return st;
  }
  snprintf(b->name, sizeof b->name, "%.127s", prop.name);
  b->copy_engines =
      prop.asyncEngineCount > 0 ? (uint32_t)prop.asyncEngineCount : 0;
  b->ctx.l2_bytes = prop.l2CacheSize > 0 ? (uint64_t)prop.l2CacheSize : 0;
  int per_sm = 0;
  st = fdy_cuda_check(fdy_cuda_checksum_occupancy(&per_sm), err, "create",
                      "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  if (st != FDY_OK) {
    return st;
  }
  b->ctx.max_blocks = prop.multiProcessorCount * (per_sm > 0 ? per_sm : 1);
  b->ctx.sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
  b->ctx.smem_optin = prop.sharedMemPerBlockOptin;
  return FDY_OK;
}

/* Creates the internal stream, the checksum word sets (zeroed on that
 * stream; set 0 is the internal stream's, the others free) and the join
 * event. What it made stays in b for cuda_destroy on failure. */
static fdy_status create_internal(cuda_backend *b, fdy_error *err) {
  fdy_status st = fdy_cuda_check(
      cudaStreamCreateWithFlags(&b->ctx.internal, cudaStreamNonBlocking), err,
      "create", "cudaStreamCreateWithFlags");
  if (st != FDY_OK) {
    b->ctx.internal = NULL;
    return st;
  }
  st = fdy_cuda_check(
      cudaMalloc((void **)&b->words, CUDA_WORD_SETS * sizeof *b->words), err,
      "create", "cudaMalloc of the checksum words");
  if (st != FDY_OK) {
    b->words = NULL;
    return st;
  }
  /* On the internal stream, so that the warm-up's synchronize also orders
   * it before any launch (a cudaMemset on the legacy default stream is not
   * ordered with the non-blocking streams the launches use). */
  st = fdy_cuda_check(cudaMemsetAsync(b->words, 0,
                                      CUDA_WORD_SETS * sizeof *b->words,
                                      b->ctx.internal),
                      err, "create", "cudaMemsetAsync of the checksum words");
  if (st != FDY_OK) {
    return st;
  }
  b->free_words = malloc(CUDA_WORD_SETS * sizeof *b->free_words);
  if (b->free_words == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "create",
                         "cannot allocate the word set list");
  }
  for (uint32_t i = CUDA_WORD_SETS - 1; i >= 1; i--) {
    b->free_words[b->free_word_count++] = i;
  }
  b->ctx.internal_words = &b->words[0];
  b->ctx.internal_sink = (uint64_t *)&b->words[0].sink;
  st =
      fdy_cuda_check(cudaEventCreateWithFlags(&b->join, cudaEventDisableTiming),
                     err, "create", "cudaEventCreateWithFlags (join)");
  if (st != FDY_OK) {
    b->join = NULL;
  }
  return st;
}

/* Loads the kernel modules now (lazy loading would load them at the first
 * launch and change the device memory in use then): a checksum launch on
 * the internal stream, its synchronize, then the op kernels' preparation. */
static fdy_status warm_up(cuda_backend *b, fdy_error *err) {
  fdy_status st = fdy_cuda_check(
      fdy_cuda_checksum_enqueue(b->words, 0, 1, b->ctx.max_blocks,
                                b->ctx.internal_words, NULL,
                                b->ctx.internal_sink, b->ctx.internal),
      err, "create", "the warm-up checksum launch");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaStreamSynchronize(b->ctx.internal), err, "create",
                        "cudaStreamSynchronize (warm-up)");
  }
  if (st == FDY_OK) {
    st = fdy_cuda_check(fdy_cuda_ops_prepare(b->ctx.smem_optin), err, "create",
                        "loading the op kernels");
  }
  return st;
}

fdy_status fdy_cuda_backend_create(const fdy_cuda_options *options,
                                   fdy_backend **out, fdy_error *err) {
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                         "out is NULL");
  }
  *out = NULL;
  fdy_cuda_options opts;
  fdy_status st = resolve_options(options, &opts, err);
  if (st != FDY_OK) {
    return st;
  }
  cuda_backend *b = backend_alloc(&opts);
  if (b == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "create",
                         "cannot allocate the backend");
  }
  st = fdy_cuda_set_device(b, err, "create");
  if (st == FDY_OK) {
    st = read_device(b, err);
  }
  if (st == FDY_OK) {
    st = create_internal(b, err);
  }
  if (st == FDY_OK) {
    st = fdy_cuda_staging_create(opts.staging_bytes, opts.staging_buffers,
                                 fill_parts(), &b->staging, err);
  }
  if (st == FDY_OK) {
    st = warm_up(b, err);
  }
  if (st == FDY_OK) {
    st = calibrate(b, err);
  }
  if (st != FDY_OK) {
    cuda_destroy(&b->base);
    return st;
  }
  *out = &b->base;
  return FDY_OK;
}
