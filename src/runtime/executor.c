/* The executor (include/foundry/runtime.h): preflight checks that touch no
 * backend state, then everything a plan's life needs acquired once
 * (streams, events, file mappings, host registrations, staging, buffers by
 * running setup, per-stream workspaces, every launch resolved to an fdy_op
 * of tensor views), so that a run of a step only walks its commands and
 * issues backend calls. Every handle sits in a table indexed by its plan
 * id, so one cleanup path (drain, then release everything) serves destroy
 * and every failure alike. Backend errors are decorated with the failing
 * command and backend entry; a failure of the cleanup drain goes to
 * cleanup_kind. An I/O failure names a mapped weight file that shrank
 * (backends read mappings with fdy_host_copy, which turns the SIGBUS of a
 * truncated file into FDY_ERR_IO).
 *
 * The files: preflight.c, host_memory.c, launches.c, issue.c, graphs.c,
 * and here the life cycle and the public calls (executor_internal.h holds
 * the layout).
 *
 * Graphs (runtime.h): after setup and resolving, each step is cut at its
 * host waits into stretches of device commands; each stretch is issued
 * once between graph_begin and graph_end over all streams, and a run
 * launches the stretches' graphs, each followed, where the plan has host
 * waits after it, by one host wait on the executor's own event recorded on
 * stream 0 after the graph (graph_launch joins every stream of the graph
 * into stream 0, backend.h). A step that reads a declared step input
 * (fdy_graph_set_step_rows) is recorded once per batch-size bucket, its
 * launches and copies narrowed to the bucket's rows from copies made at
 * create (plan_buckets); a run launches the bucket of its count. */
#include "executor_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* Turns a failed backend call into the executor's error: kind as the
 * backend reported it, plus the command and the entry. */
fdy_status ex_backend_failed(fdy_error *e, fdy_status status,
                             int64_t command_index, const char *op) {
  if (e->kind != status) {
    e->kind = status;
  }
  e->command_index = command_index;
  snprintf(e->backend_op, sizeof(e->backend_op), "%s", op);
  if (command_index >= 0) {
    fdy_error_prefix(e, "command %lld: backend %s failed",
                     (long long)command_index, op);
  } else {
    fdy_error_prefix(e, "backend %s failed", op);
  }
  return status;
}

/* A copy or launch that failed on the device after its call returned,
 * reported by a later call `reporter` of command `index` (a host wait or
 * an event time): the backend names the faulting entry and its submission
 * number (backend.h, submitted: ids[0] == ids[1]). When a command of this
 * executor submitted it, the error is attributed to that command
 * (command_index, and the message names both); else to `index`, as any
 * failed call. */
fdy_status ex_reported_failure(const fdy_executor *x, fdy_error *e,
                               fdy_status status, size_t index,
                               const char *reporter) {
  const bool names_submission = status == FDY_ERR_BACKEND &&
                                x->ops->submitted != NULL && e->ids[0] > 0 &&
                                e->ids[0] == e->ids[1] &&
                                (strcmp(e->backend_op, "launch") == 0 ||
                                 strcmp(e->backend_op, "copy_to_device") == 0 ||
                                 strcmp(e->backend_op, "copy_to_host") == 0);
  for (size_t i = 0; names_submission && i < fdy_plan_command_count(x->plan);
       i++) {
    const ex_command *c = &x->cmds[i];
    if ((uint64_t)e->ids[0] > c->submitted_before &&
        (uint64_t)e->ids[0] <= c->submitted_after) {
      e->kind = status;
      e->command_index = (int64_t)i;
      fdy_error_prefix(e,
                       "command %zu: %s failed on the device (reported by "
                       "%s of command %zu)",
                       i, e->backend_op, reporter, index);
      return status;
    }
  }
  return ex_backend_failed(e, status, (int64_t)index, reporter);
}

fdy_status ex_oom(fdy_error *e) {
  return fdy_error_set(e, FDY_ERR_OUT_OF_MEMORY, "executor: out of memory");
}

fdy_status ex_tensor_info(const fdy_graph *graph, uint32_t id,
                          fdy_tensor_info *out, fdy_error *e) {
  return fdy_graph_tensor(graph, (fdy_tensor_id){id}, out, e);
}

/* ---- life cycle
 * -------------------------------------------------------------- */

/* Destroys the events of events[0 .. count) (NULL: none) and clears them. */
static void destroy_events(fdy_executor *x, fdy_backend_event **events,
                           size_t count) {
  for (size_t i = 0; events && i < count; i++) {
    if (events[i]) {
      x->ops->event_destroy(x->b, events[i]);
      events[i] = NULL;
    }
  }
}

/* Releases the buffers of buffers[0 .. count) (NULL: none) and clears
 * them. */
static void release_buffers(fdy_executor *x, fdy_backend_buffer **buffers,
                            size_t count) {
  for (size_t i = 0; buffers && i < count; i++) {
    if (buffers[i]) {
      x->ops->buffer_release(x->b, buffers[i]);
      buffers[i] = NULL;
    }
  }
}

/* Drains (when asked) and releases every handle. A failed drain is recorded
 * in the cleanup fields of e when the executor already failed. */
static void release_all(fdy_executor *x, bool drain, fdy_error *e) {
  if (drain && x->ops != NULL) {
    fdy_error ce;
    fdy_error_clear(&ce);
    fdy_status st = x->ops->drain(x->b, &ce);
    if (st != FDY_OK && e != NULL) {
      e->cleanup_kind = st;
      snprintf(e->cleanup_message, sizeof(e->cleanup_message),
               "drain after the failure failed: %.200s", ce.message);
    }
  }
  if (x->segments != NULL) {
    ex_destroy_graphs(x, 0, x->segment_count);
  }
  if (x->graph_done != NULL) {
    x->ops->event_destroy(x->b, x->graph_done);
    x->graph_done = NULL;
  }
  destroy_events(x, x->events, x->event_count);
  destroy_events(x, x->starts, x->command_count);
  release_buffers(x, x->buffers, x->buffer_count);
  release_buffers(x, x->workspace, x->stream_count);
  for (uint32_t i = 0; x->streams && i < x->stream_count; i++) {
    if (x->streams[i]) {
      x->ops->stream_destroy(x->b, x->streams[i]);
      x->streams[i] = NULL;
    }
  }
  for (size_t i = 0; i < x->host_count; i++) {
    x->ops->host_unregister(x->b, x->hosts[i]);
  }
  x->host_count = 0;
  for (size_t i = 0; i < x->map_count; i++) {
    munmap(x->maps[i].base, (size_t)x->maps[i].size);
  }
  x->map_count = 0;
}

static void free_executor(fdy_executor *x) {
  if (x->staging) {
    for (size_t t = 0; t < x->tensor_count; t++) {
      free(x->staging[t].data);
    }
  }
  free(x->staging);
  for (size_t t = 0; x->packed && t < x->tensor_count; t++) {
    free(x->packed[t]);
  }
  free(x->packed);
  free(x->streams);
  free(x->buffers);
  free(x->workspace);
  free(x->workspace_bytes);
  free(x->events);
  free(x->starts);
  free(x->maps);
  free(x->hosts);
  free(x->copies);
  free(x->cmds);
  free(x->launch_ops);
  free(x->timings);
  for (size_t s = 0; x->steps && s < fdy_plan_section_count(x->plan); s++) {
    free(x->steps[s].narrowed);
    free(x->steps[s].narrowed_bytes);
  }
  free(x->steps);
  free(x->segments);
  free(x);
}

/* An I/O failure while weight files are mapped: names the first mapped file
 * that is now shorter than its mapping (name, expected = bytes mapped,
 * actual = bytes now), the likely cause of a failed copy from it. */
static void name_shrunk_file(const fdy_executor *x, fdy_status st,
                             fdy_error *e) {
  for (size_t i = 0; st == FDY_ERR_IO && i < x->map_count; i++) {
    const ex_mapping *m = &x->maps[i];
    struct stat sb;
    if (stat(m->path, &sb) == 0 && (uint64_t)sb.st_size < m->size) {
      fdy_error_prefix(e, "weight file %s shrank from %llu to %llu bytes",
                       m->path, (unsigned long long)m->size,
                       (unsigned long long)sb.st_size);
      snprintf(e->name, sizeof(e->name), "%s", m->path);
      e->expected = m->size;
      e->actual = (uint64_t)sb.st_size;
      return;
    }
  }
}

/* A backend may read registered (page-locked) memory by DMA, which sees
 * other bytes, and no error, where the file behind a mapping was truncated
 * (the CUDA backend does: docs/reliability.md). So a mapped file that is
 * shorter than its mapping fails with FDY_ERR_IO (named by
 * name_shrunk_file), its message `why`:
 * - after create's copies and after every run (COPIED_FROM_SHRUNK_FILE):
 *   the run or create that copied from it;
 * - before every run (RUN_NOT_STARTED): the run, which then issues nothing,
 *   so a file truncated between runs is never copied from.
 * step_only: only the mappings steps copy from (unpacked streamed weights).
 * A truncation during a run is detected after it, not prevented: packed
 * streaming (the default) never reads the files during runs. */
static const char COPIED_FROM_SHRUNK_FILE[] =
    "copies from its registered pages may have read other bytes";
static const char RUN_NOT_STARTED[] =
    "the run copies from its registered pages, so it was not started";

static fdy_status check_registered_files(const fdy_executor *x, bool step_only,
                                         const char *why, fdy_error *e) {
  for (size_t i = 0; i < x->map_count; i++) {
    const ex_mapping *m = &x->maps[i];
    struct stat sb;
    if (m->host == NULL || (step_only && !m->step_use) ||
        stat(m->path, &sb) != 0 || (uint64_t)sb.st_size >= m->size) {
      continue;
    }
    /* fail_executor prefixes the file, its mapped and current sizes */
    return fdy_error_set(e, FDY_ERR_IO, "%s", why);
  }
  return FDY_OK;
}

/* Marks the executor failed after draining and releasing everything. */
static fdy_status fail_executor(fdy_executor *x, fdy_status st, fdy_error *e) {
  name_shrunk_file(x, st, e);
  release_all(x, true, e);
  x->failed = true;
  return st;
}

static fdy_status create_handles(fdy_executor *x, fdy_error *e) {
  x->streams = calloc(x->stream_count + 1, sizeof(*x->streams));
  x->buffers = calloc(x->buffer_count + 1, sizeof(*x->buffers));
  x->workspace = calloc(x->stream_count + 1, sizeof(*x->workspace));
  x->workspace_bytes = calloc(x->stream_count + 1, sizeof(uint64_t));
  x->events = calloc(x->event_count + 1, sizeof(*x->events));
  x->cmds = calloc(x->command_count + 1, sizeof(*x->cmds));
  if (x->collect) {
    x->starts = calloc(x->command_count + 1, sizeof(*x->starts));
    x->timings = calloc(x->command_count + 1, sizeof(*x->timings));
  }
  if (!x->streams || !x->buffers || !x->workspace || !x->workspace_bytes ||
      !x->events || !x->cmds || (x->collect && (!x->starts || !x->timings))) {
    return ex_oom(e);
  }
  for (uint32_t i = 0; i < x->stream_count; i++) {
    fdy_status st = x->ops->stream_create(x->b, &x->streams[i], e);
    if (st != FDY_OK) {
      x->streams[i] = NULL;
      fdy_error_prefix(e, "plan stream %u", i);
      return ex_backend_failed(e, st, -1, "stream_create");
    }
  }
  for (uint32_t i = 0; i < x->event_count; i++) {
    fdy_status st = x->ops->event_create(x->b, &x->events[i], e);
    if (st != FDY_OK) {
      x->events[i] = NULL;
      return ex_backend_failed(e, st, -1, "event_create");
    }
  }
  for (size_t i = 0; x->collect && i < x->command_count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    if (ex_command_signal(c) == UINT32_MAX) {
      continue;
    }
    fdy_status st = x->ops->event_create(x->b, &x->starts[i], e);
    if (st != FDY_OK) {
      x->starts[i] = NULL;
      return ex_backend_failed(e, st, (int64_t)i, "event_create");
    }
  }
  return FDY_OK;
}

fdy_status fdy_executor_create(const fdy_plan *plan, const fdy_graph *graph,
                               fdy_backend *backend,
                               const fdy_executor_options *options,
                               fdy_executor **out, fdy_error *err) {
  fdy_error e;
  fdy_error_clear(&e);
  if (out == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "executor create needs an output pointer");
  }
  *out = NULL;
  int64_t begin = fdy_now_ns();
  const fdy_graph *effective = NULL;
  fdy_plan_summary summary;
  fdy_status st = ex_preflight(plan, graph, backend, &effective, &summary, &e);
  if (st != FDY_OK) {
    if (err) {
      *err = e;
    }
    return st;
  }
  fdy_executor *x = calloc(1, sizeof(*x));
  if (x == NULL) {
    return ex_oom(err);
  }
  x->plan = plan;
  x->graph = effective;
  x->b = backend;
  x->ops = backend->ops;
  x->collect = options != NULL && options->collect_timings;
  x->registers_host = options == NULL || !options->skip_host_registration;
  const fdy_backend_ops *o = backend->ops;
  x->graphs = o->graph_begin && o->graph_end && o->graph_launch &&
              o->graph_destroy && !x->collect &&
              (options == NULL || !options->no_graphs);
  x->packs_streamed = options == NULL || !options->skip_packing;
  x->stream_count = fdy_plan_stream_count(plan);
  x->buffer_count = fdy_plan_buffer_count(plan);
  x->event_count = fdy_plan_event_count(plan);
  x->command_count = fdy_plan_command_count(plan);
  x->tensor_count = fdy_graph_tensor_count(effective);
  st = create_handles(x, &e);
  if (st == FDY_OK) {
    st = ex_prepare_weights(x, &e);
  }
  if (st == FDY_OK) {
    st = ex_prepare_staging(x, &e);
  }
  int64_t upload = fdy_now_ns();
  if (st == FDY_OK) {
    st = ex_run_section(x, 0, &e);
  }
  if (st == FDY_OK) {
    st = check_registered_files(x, false, COPIED_FROM_SHRUNK_FILE, &e);
  }
  if (st == FDY_OK) {
    x->stats.upload_ns = fdy_now_ns() - upload;
    ex_release_setup_mappings(x);
    st = ex_resolve_launches(x, &e);
  }
  if (st == FDY_OK && x->graphs) {
    st = ex_record_steps(x, &e);
  }
  if (st != FDY_OK) {
    name_shrunk_file(x, st, &e);
    release_all(x, true, &e);
    free_executor(x);
    if (err) {
      *err = e;
    }
    return st;
  }
  x->stats.setup_transfer_bytes = summary.setup_transfer_bytes;
  x->stats.setup_ns = fdy_now_ns() - begin;
  *out = x;
  return FDY_OK;
}

fdy_status fdy_executor_finish(fdy_executor *x, fdy_error *err) {
  fdy_error e;
  fdy_error_clear(&e);
  if (x == NULL || x->failed || x->finished) {
    return FDY_OK;
  }
  x->finished = true;
  /* Graphs use the buffers teardown releases; the last run left nothing
   * pending (every step ends observed by the host, plan.h). */
  if (x->segments != NULL) {
    ex_destroy_graphs(x, 0, x->segment_count);
  }
  size_t teardown = fdy_plan_section_count(x->plan) - 1;
  fdy_status st = ex_run_section(x, teardown, &e);
  if (st == FDY_OK) {
    st = x->ops->drain(x->b, &e);
    if (st != FDY_OK) {
      ex_backend_failed(&e, st, -1, "drain");
    }
  }
  if (st != FDY_OK) {
    fail_executor(x, st, &e);
    if (err) {
      *err = e;
    }
  }
  return st;
}

void fdy_executor_destroy(fdy_executor *x) {
  if (x == NULL) {
    return;
  }
  fdy_executor_finish(x, NULL);
  release_all(x, true, NULL);
  free_executor(x);
}

void *fdy_executor_input(fdy_executor *x, fdy_tensor_id tensor,
                         uint64_t *bytes) {
  if (x == NULL || tensor.v >= x->tensor_count || !x->staging[tensor.v].input) {
    if (bytes) {
      *bytes = 0;
    }
    return NULL;
  }
  if (bytes) {
    *bytes = x->staging[tensor.v].bytes;
  }
  return x->staging[tensor.v].data;
}

const void *fdy_executor_output(const fdy_executor *x, fdy_tensor_id tensor,
                                uint64_t *bytes) {
  if (x == NULL || tensor.v >= x->tensor_count ||
      !x->staging[tensor.v].output) {
    if (bytes) {
      *bytes = 0;
    }
    return NULL;
  }
  if (bytes) {
    *bytes = x->staging[tensor.v].bytes;
  }
  return x->staging[tensor.v].data;
}

int64_t fdy_executor_step(const fdy_executor *x, const char *name) {
  int64_t s = x ? fdy_plan_find_section(x->plan, name) : -1;
  if (s <= 0 || (size_t)s + 1 >= fdy_plan_section_count(x->plan)) {
    return -1;
  }
  return s;
}

fdy_status fdy_executor_run(fdy_executor *x, size_t step, fdy_error *err) {
  if (x == NULL || x->failed || x->finished || step == 0 ||
      step + 1 >= fdy_plan_section_count(x->plan)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "executor run needs a live executor and a step "
                         "section (got section %zu%s)",
                         step, x && x->failed ? " of a failed executor" : "");
  }
  fdy_error e;
  fdy_error_clear(&e);
  /* Outputs are poisoned (all bits set: NaN for floats, -1 for integers)
   * so that a run that fails to copy one out can never pass for a result. */
  for (size_t t = 0; t < x->tensor_count; t++) {
    if (x->staging[t].output) {
      memset(x->staging[t].data, 0xff, (size_t)x->staging[t].bytes);
    }
  }
  x->stats.last_run_graph_launches = 0;
  x->stats.last_run_rows = 0;
  const ex_step *recorded = x->steps != NULL ? &x->steps[step] : NULL;
  fdy_status st = check_registered_files(x, true, RUN_NOT_STARTED, &e);
  if (st == FDY_OK) {
    st = recorded != NULL && recorded->mode == FDY_STEP_GRAPHS
             ? ex_run_graphs(x, recorded, &e)
             : ex_run_section(x, step, &e);
  }
  if (st == FDY_OK) {
    st = check_registered_files(x, true, COPIED_FROM_SHRUNK_FILE, &e);
  }
  if (st != FDY_OK) {
    fail_executor(x, st, &e);
    if (err) {
      *err = e;
    }
  }
  return st;
}

fdy_step_mode fdy_executor_step_mode(const fdy_executor *x, size_t step,
                                     fdy_error *why) {
  fdy_error_clear(why);
  if (x == NULL || x->steps == NULL || step == 0 ||
      step + 1 >= fdy_plan_section_count(x->plan)) {
    return FDY_STEP_COMMANDS;
  }
  const ex_step *s = &x->steps[step];
  if (s->mode == FDY_STEP_FALLBACK && why != NULL) {
    *why = s->why;
  }
  return s->mode;
}

const fdy_command_timing *fdy_executor_timings(const fdy_executor *x,
                                               size_t *count) {
  if (x == NULL || !x->collect) {
    if (count) {
      *count = 0;
    }
    return NULL;
  }
  if (count) {
    *count = x->timing_count;
  }
  return x->timings;
}

fdy_executor_stats fdy_executor_get_stats(const fdy_executor *x) {
  fdy_executor_stats none;
  memset(&none, 0, sizeof(none));
  return x ? x->stats : none;
}
