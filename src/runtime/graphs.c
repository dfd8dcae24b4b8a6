/* Steps recorded as backend graphs: cut at host waits into stretches,
 * each recorded once (per batch-size bucket) and launched by a run. */
#include "executor_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- graphs
 * ------------------------------------------------------------------ */

static bool is_host_wait(const fdy_command *c) {
  return c->kind == FDY_CMD_WAIT && c->u.wait.host;
}

/* Cuts every step into stretches of device commands ended by a host wait
 * (or the end of the step), one set of them per bucket of the step (the
 * same stretches: bucket j's follow bucket j - 1's). */
static fdy_status cut_steps(fdy_executor *x, fdy_error *e) {
  size_t sections = fdy_plan_section_count(x->plan);
  size_t total = 1;
  for (size_t s = 1; s + 1 < sections; s++) {
    size_t count = fdy_plan_section(x->plan, s)->count;
    total += count * x->steps[s].bucket_count;
  }
  x->segments = calloc(total, sizeof(*x->segments));
  if (!x->segments) {
    return ex_oom(e);
  }
  for (size_t s = 1; s + 1 < sections; s++) {
    const fdy_section *sec = fdy_plan_section(x->plan, s);
    ex_step *step = &x->steps[s];
    ex_segment *open = NULL;
    step->first_segment = x->segment_count;
    for (size_t i = sec->first; i < sec->first + sec->count; i++) {
      if (is_host_wait(fdy_plan_command(x->plan, i))) {
        if (open != NULL) {
          open->host_wait = i;
        }
        open = NULL;
        continue;
      }
      if (open == NULL) {
        open = &x->segments[x->segment_count++];
        *open = (ex_segment){.first = i, .host_wait = SIZE_MAX};
      }
      open->count++;
    }
    step->segment_count = x->segment_count - step->first_segment;
    for (size_t j = 1; j < step->bucket_count; j++) {
      for (size_t k = 0; k < step->segment_count; k++) {
        x->segments[x->segment_count++] = x->segments[step->first_segment + k];
      }
    }
  }
  return FDY_OK;
}

void ex_destroy_graphs(fdy_executor *x, size_t first, size_t count) {
  for (size_t i = first; i < first + count; i++) {
    if (x->segments[i].graph != NULL) {
      x->ops->graph_destroy(x->b, x->segments[i].graph);
      x->segments[i].graph = NULL;
    }
  }
}

/* Issues the commands of seg between graph_begin and graph_end. The
 * recording always ends; on failure seg->graph is NULL and the first
 * failure is reported. */
static fdy_status record_segment(fdy_executor *x, ex_segment *seg,
                                 fdy_error *e) {
  fdy_status st = x->ops->graph_begin(x->b, x->streams, x->stream_count, e);
  if (st != FDY_OK) {
    return ex_backend_failed(e, st, (int64_t)seg->first, "graph_begin");
  }
  for (size_t i = seg->first; st == FDY_OK && i < seg->first + seg->count;
       i++) {
    st = ex_run_command(x, i, e);
  }
  fdy_error end_error;
  fdy_error_clear(&end_error);
  fdy_status end = x->ops->graph_end(x->b, &seg->graph, &end_error);
  if (end != FDY_OK) {
    seg->graph = NULL;
    if (st == FDY_OK) {
      *e = end_error;
      st = ex_backend_failed(e, end, (int64_t)seg->first, "graph_end");
    }
  } else if (st != FDY_OK) {
    x->ops->graph_destroy(x->b, seg->graph);
    seg->graph = NULL;
  }
  return st;
}

/* Records every step as graphs (runtime.h). A step the backend refuses to
 * record (FDY_ERR_UNSUPPORTED) falls back to commands, with the refusal
 * kept for fdy_executor_step_mode; any other failure is returned. */
fdy_status ex_record_steps(fdy_executor *x, fdy_error *e) {
  fdy_status st = cut_steps(x, e);
  if (st == FDY_OK) {
    st = x->ops->event_create(x->b, &x->graph_done, e);
    if (st != FDY_OK) {
      x->graph_done = NULL;
      return ex_backend_failed(e, st, -1, "event_create");
    }
  }
  size_t sections = fdy_plan_section_count(x->plan);
  for (size_t s = 1; st == FDY_OK && s + 1 < sections; s++) {
    ex_step *step = &x->steps[s];
    const size_t segments = step->segment_count * step->bucket_count;
    for (size_t j = 0; st == FDY_OK && j < step->bucket_count; j++) {
      const bool narrowed = j + 1 < step->bucket_count;
      if (narrowed) {
        ex_swap_bucket(x, s, j);
      }
      for (size_t k = 0; st == FDY_OK && k < step->segment_count; k++) {
        st = record_segment(
            x, &x->segments[step->first_segment + j * step->segment_count + k],
            e);
      }
      if (narrowed) {
        ex_swap_bucket(x, s, j);
      }
    }
    if (st == FDY_ERR_UNSUPPORTED) {
      ex_destroy_graphs(x, step->first_segment, segments);
      step->mode = FDY_STEP_FALLBACK;
      step->why = *e;
      fdy_error_clear(e);
      x->stats.graph_fallbacks++;
      st = FDY_OK;
    } else if (st == FDY_OK) {
      step->mode = FDY_STEP_GRAPHS;
      x->stats.graph_steps++;
      x->stats.bucket_steps += step->bucket_count > 1;
      x->stats.graphs += segments;
    }
  }
  return st;
}

/* A failure of a replayed graph: attributed to the graph as a whole. */
static fdy_status graph_failed(fdy_error *e, fdy_status st,
                               const ex_segment *seg, const char *op) {
  e->kind = st;
  e->command_index = (int64_t)seg->first;
  snprintf(e->backend_op, sizeof(e->backend_op), "%s", op);
  fdy_error_prefix(e, "commands %zu to %zu (one graph): backend %s failed",
                   seg->first, seg->first + seg->count - 1, op);
  return st;
}

/* A run of a recorded step: its graphs, each followed by one host wait
 * where the plan waits after it. */
fdy_status ex_run_graphs(fdy_executor *x, const ex_step *step, fdy_error *e) {
  const size_t bucket = ex_bucket_of(x, step);
  x->stats.last_run_rows = step->bucket_rows[bucket];
  for (size_t k = 0; k < step->segment_count; k++) {
    const ex_segment *seg =
        &x->segments[step->first_segment + bucket * step->segment_count + k];
    fdy_status st = x->ops->graph_launch(x->b, seg->graph, e);
    if (st != FDY_OK) {
      return graph_failed(e, st, seg, "graph_launch");
    }
    x->stats.last_run_graph_launches++;
    x->stats.graph_launches++;
    if (seg->host_wait == SIZE_MAX) {
      continue;
    }
    st = x->ops->event_record(x->b, x->streams[0], x->graph_done, e);
    if (st != FDY_OK) {
      return graph_failed(e, st, seg, "event_record");
    }
    st = x->ops->host_wait(x->b, x->graph_done, e);
    if (st != FDY_OK) {
      return graph_failed(e, st, seg, "host_wait");
    }
  }
  return FDY_OK;
}
