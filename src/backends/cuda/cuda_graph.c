/* CUDA graphs of the CUDA backend (backend.h, graphs) by stream capture.
 *
 * graph_begin starts a capture on the first of the given streams, in
 * thread-local mode (only the calling thread is held to capture's rules;
 * the staging ring's fill threads and CUDA's host-function thread are not),
 * and forks every other stream into it: each waits on an event recorded on
 * the first, so whatever the caller then issues on any of them is captured
 * into one graph, cross-stream event waits included. graph_end joins them
 * back (the first stream waits on an event recorded on each other one),
 * ends the capture and instantiates the graph once. graph_launch makes the
 * first stream wait for the tail of every other one, launches the graph on
 * it, then makes every other stream wait for it: the stream order the
 * calls would have had if they were issued again (backend.h).
 *
 * Copies between device memory and registered (page-locked) host memory
 * are captured as memcpy nodes, which read or write the host memory at
 * every replay. A copy that would go through the staging ring (host memory
 * not registered, or FDY_CUDA_HOST_STAGED) cannot be captured: the ring
 * fills or drains on the host when the call is made. cuda_streams.c then
 * calls fdy_cuda_capture_refuse instead of the ring: the call fails with
 * FDY_ERR_UNSUPPORTED and so does graph_end.
 *
 * Errors: a kernel that fails inside a replay is reported by the next
 * synchronization (host_wait, drain) like any asynchronous failure, and can
 * be attributed to the graph launch only, not to the op inside it. */
#include "cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>

struct fdy_backend_graph {
  fdy_list_node node; /* on ctx->graphs once instantiated */
  cudaStream_t *streams;
  uint32_t count;
  /* fork: recorded on streams[0] for the others to wait on (capture, and
   * after a launch); join: recorded on each other stream for streams[0] to
   * wait on (end of capture, and before a launch) */
  cudaEvent_t fork, join;
  cudaGraphExec_t exec;
  bool refused;      /* a call could not be captured */
  fdy_error refusal; /* its error */
};

static void graph_free(fdy_backend_graph *g) {
  fdy_list_unlink(&g->node);
  if (g->exec != NULL) {
    fdy_cuda_ignore(cudaGraphExecDestroy(g->exec));
  }
  if (g->fork != NULL) {
    fdy_cuda_ignore(cudaEventDestroy(g->fork));
  }
  if (g->join != NULL) {
    fdy_cuda_ignore(cudaEventDestroy(g->join));
  }
  free(g->streams);
  free(g);
}

/* Orders streams[0] after the current tail of every other stream. */
static cudaError_t join_into_first(const fdy_backend_graph *g) {
  for (uint32_t i = 1; i < g->count; i++) {
    cudaError_t rc = cudaEventRecord(g->join, g->streams[i]);
    if (rc == cudaSuccess) {
      rc = cudaStreamWaitEvent(g->streams[0], g->join, 0);
    }
    if (rc != cudaSuccess) {
      return rc;
    }
  }
  return cudaSuccess;
}

/* Orders every other stream after the current tail of streams[0]. */
static cudaError_t fork_from_first(const fdy_backend_graph *g) {
  if (g->count < 2) {
    return cudaSuccess;
  }
  cudaError_t rc = cudaEventRecord(g->fork, g->streams[0]);
  for (uint32_t i = 1; rc == cudaSuccess && i < g->count; i++) {
    rc = cudaStreamWaitEvent(g->streams[i], g->fork, 0);
  }
  return rc;
}

/* Ends the capture of g, dropping whatever it captured (cleanup). */
static void abandon_capture(fdy_backend_graph *g) {
  cudaGraph_t graph = NULL;
  fdy_cuda_ignore(cudaStreamEndCapture(g->streams[0], &graph));
  if (graph != NULL) {
    fdy_cuda_ignore(cudaGraphDestroy(graph));
  }
}

fdy_status fdy_cuda_graph_begin(fdy_backend *b,
                                fdy_backend_stream *const *streams,
                                uint32_t count, fdy_error *err) {
  const char *op = "graph_begin";
  fdy_cuda_ctx *ctx = NULL;
  fdy_status st = fdy_cuda_ctx_of(b, op, &ctx, err);
  if (st != FDY_OK) {
    return st;
  }
  if (streams == NULL || count == 0 || ctx->capture != NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "no streams given, or a recording is already open");
  }
  fdy_backend_graph *g = calloc(1, sizeof *g);
  cudaStream_t *handles = calloc(count, sizeof *handles);
  if (g == NULL || handles == NULL) {
    free(g);
    free(handles);
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, op,
                         "cannot allocate a graph");
  }
  fdy_list_init(&g->node);
  g->streams = handles;
  g->count = count;
  for (uint32_t i = 0; i < count; i++) {
    if (streams[i] == NULL) {
      graph_free(g);
      return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                           "stream %u is NULL", i);
    }
    handles[i] = fdy_cuda_stream_of(streams[i]);
  }
  st =
      fdy_cuda_check(cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming),
                     err, op, "cudaEventCreateWithFlags");
  if (st == FDY_OK) {
    st = fdy_cuda_check(
        cudaEventCreateWithFlags(&g->join, cudaEventDisableTiming), err, op,
        "cudaEventCreateWithFlags");
  }
  if (st == FDY_OK) {
    st = fdy_cuda_check(
        cudaStreamBeginCapture(handles[0], cudaStreamCaptureModeThreadLocal),
        err, op, "cudaStreamBeginCapture");
    if (st == FDY_OK) {
      st = fdy_cuda_check(fork_from_first(g), err, op,
                          "forking the streams into the capture");
      if (st != FDY_OK) {
        abandon_capture(g);
      }
    }
  }
  if (st != FDY_OK) {
    graph_free(g);
    return st;
  }
  ctx->capture = g;
  return FDY_OK;
}

fdy_status fdy_cuda_graph_end(fdy_backend *b, fdy_backend_graph **out,
                              fdy_error *err) {
  const char *op = "graph_end";
  fdy_cuda_ctx *ctx = NULL;
  if (out != NULL) {
    *out = NULL;
  }
  fdy_status st = fdy_cuda_ctx_of(b, op, &ctx, err);
  if (st != FDY_OK) {
    return st;
  }
  fdy_backend_graph *g = ctx->capture;
  ctx->capture = NULL;
  if (g == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "no recording is open");
  }
  fdy_error local;
  fdy_status joined = fdy_cuda_check(join_into_first(g), &local, op,
                                     "joining the streams into the capture");
  cudaGraph_t graph = NULL;
  fdy_status ended = fdy_cuda_check(cudaStreamEndCapture(g->streams[0], &graph),
                                    err, op, "cudaStreamEndCapture");
  if (g->refused) {
    st = g->refusal.kind;
    if (err != NULL) {
      *err = g->refusal;
      snprintf(err->backend_op, sizeof err->backend_op, "%s", op);
    }
  } else if (joined != FDY_OK) {
    st = joined;
    if (err != NULL) {
      *err = local;
    }
  } else {
    st = ended;
  }
  if (st == FDY_OK && out == NULL) {
    st = fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op, "out is NULL");
  }
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaGraphInstantiate(&g->exec, graph, 0), err, op,
                        "cudaGraphInstantiate");
    if (st != FDY_OK) {
      g->exec = NULL;
    }
  }
  if (graph != NULL) {
    fdy_cuda_ignore(cudaGraphDestroy(graph));
  }
  if (st != FDY_OK) {
    graph_free(g);
    return st;
  }
  fdy_list_push(&ctx->graphs, &g->node);
  *out = g;
  return FDY_OK;
}

fdy_status fdy_cuda_graph_launch(fdy_backend *b, fdy_backend_graph *graph,
                                 fdy_error *err) {
  const char *op = "graph_launch";
  fdy_cuda_ctx *ctx = NULL;
  fdy_status st = fdy_cuda_ctx_of(b, op, &ctx, err);
  if (st != FDY_OK) {
    return st;
  }
  if (graph == NULL || graph->exec == NULL || ctx->capture != NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "NULL graph, or a recording is open");
  }
  fdy_cuda_note_submitted(b);
  st = fdy_cuda_check(join_into_first(graph), err, op,
                      "ordering the graph after its streams");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaGraphLaunch(graph->exec, graph->streams[0]), err,
                        op, "cudaGraphLaunch");
  }
  if (st == FDY_OK) {
    st = fdy_cuda_check(fork_from_first(graph), err, op,
                        "ordering its streams after the graph");
  }
  return st;
}

void fdy_cuda_graph_destroy(fdy_backend *b, fdy_backend_graph *graph) {
  (void)b;
  if (graph != NULL) {
    graph_free(graph);
  }
}

fdy_status fdy_cuda_capture_refuse(fdy_cuda_ctx *ctx, const char *op,
                                   fdy_error *err) {
  fdy_error refusal;
  fdy_cuda_fail(&refusal, FDY_ERR_UNSUPPORTED, op,
                "a copy from or to host memory that is not registered "
                "(page-locked) goes through the staging ring, which cannot "
                "be captured in a graph");
  fdy_backend_graph *g = ctx->capture;
  if (!g->refused) {
    g->refused = true;
    g->refusal = refusal;
  }
  if (err != NULL) {
    *err = refusal;
  }
  return FDY_ERR_UNSUPPORTED;
}

void fdy_cuda_graphs_destroy_all(fdy_cuda_ctx *ctx) {
  if (ctx->capture != NULL) {
    abandon_capture(ctx->capture);
    graph_free(ctx->capture);
    ctx->capture = NULL;
  }
  while (ctx->graphs.next != &ctx->graphs) {
    graph_free((fdy_backend_graph *)ctx->graphs.next);
  }
}
