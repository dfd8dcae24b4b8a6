/* The Chrome Trace Event document of `foundry bench` (opens in Perfetto and
 * chrome://tracing): one process with a host track (each execution and the
 * issue span of every command), a copy track and a compute track built from
 * the device timestamps of prefetches and launches. Timestamps are
 * microseconds since the first execution began. */
#include <inttypes.h>
#include <stdio.h>

#include "bench_internal.h"

enum { TID_HOST = 1, TID_COPY = 2, TID_COMPUTE = 3 };

int64_t bench_origin_ns(const bench_state *s) {
  return s->execution_count ? s->executions[0].begin_ns : 0;
}

const char *bench_trace_scope(const bench_state *s) {
  return s->trace_all ? "all" : "last_measured";
}

json_t *bench_trace_metadata(const char *what, int tid, const char *name) {
  json_t *e = json_object();
  json_object_set_new(e, "name", json_string(what));
  json_object_set_new(e, "ph", json_string("M"));
  json_object_set_new(e, "pid", json_integer(1));
  if (tid > 0) {
    json_object_set_new(e, "tid", json_integer(tid));
  }
  json_t *args = json_object();
  json_object_set_new(args, "name", bench_json_text(name));
  json_object_set_new(e, "args", args);
  return e;
}

json_t *bench_trace_sort_index(int tid) {
  json_t *e = json_object();
  json_object_set_new(e, "name", json_string("thread_sort_index"));
  json_object_set_new(e, "ph", json_string("M"));
  json_object_set_new(e, "pid", json_integer(1));
  json_object_set_new(e, "tid", json_integer(tid));
  json_t *args = json_object();
  json_object_set_new(args, "sort_index", json_integer(tid));
  json_object_set_new(e, "args", args);
  return e;
}

static double us(int64_t ns, int64_t origin) {
  return (double)(ns - origin) / 1e3;
}

json_t *bench_trace_span(const char *name, const char *cat, int tid,
                         int64_t begin, int64_t end, int64_t origin,
                         json_t *args) {
  json_t *e = json_object();
  json_object_set_new(e, "name", bench_json_text(name));
  json_object_set_new(e, "cat", json_string(cat));
  json_object_set_new(e, "ph", json_string("X"));
  json_object_set_new(e, "pid", json_integer(1));
  json_object_set_new(e, "tid", json_integer(tid));
  json_object_set_new(e, "ts", json_real(us(begin, origin)));
  json_object_set_new(e, "dur", json_real((double)(end - begin) / 1e3));
  json_object_set_new(e, "args", args);
  return e;
}

/* "prefetch layer.3.weight", "launch layer.3", "wait host",
 * "copy_output layer.47.out", ... */
static void command_name(const fdy_plan *plan, const fdy_command *c, char *buf,
                         size_t cap) {
  const fdy_graph *g = fdy_plan_graph(plan);
  const char *kind = fdy_command_kind_name(c->kind);
  if (c->kind == FDY_CMD_PREFETCH) {
    fdy_tensor_info t;
    if (fdy_graph_tensor(g, c->u.prefetch.weight, &t, NULL) == FDY_OK) {
      snprintf(buf, cap, "%s %s", kind, t.name);
      return;
    }
  } else if (c->kind == FDY_CMD_LAUNCH) {
    fdy_op_info op;
    if (fdy_graph_op(g, c->u.launch.op, &op, NULL) == FDY_OK) {
      snprintf(buf, cap, "%s %s", kind, op.name);
      return;
    }
  } else if (c->kind == FDY_CMD_COPY_INPUT || c->kind == FDY_CMD_COPY_OUTPUT) {
    fdy_tensor_info t;
    if (fdy_graph_tensor(g, c->u.copy.tensor, &t, NULL) == FDY_OK) {
      snprintf(buf, cap, "%s %s", kind, t.name);
      return;
    }
  } else if (c->kind == FDY_CMD_WAIT) {
    snprintf(buf, cap, "%s %s", kind, c->u.wait.host ? "host" : "stream");
    return;
  }
  snprintf(buf, cap, "%s", kind);
}

static void trace_execution(const bench_state *s, const bench_execution *x,
                            int64_t origin, json_t *events) {
  const fdy_plan *plan = s->configs[x->config].plan;
  uint32_t buffers = s->opt->buffers[x->config];
  char name[160];
  snprintf(name, sizeof name, "execution %" PRIu64 ": %" PRIu32 " buffers (%s)",
           x->sequence, buffers, x->measured ? "measured" : "warmup");
  json_t *args = json_object();
  json_object_set_new(args, "sequence", json_integer((json_int_t)x->sequence));
  json_object_set_new(args, "buffers", json_integer(buffers));
  json_object_set_new(args, "round", json_integer(x->round));
  json_object_set_new(args, "elapsed_ns",
                      json_integer(x->end_ns - x->begin_ns));
  json_array_append_new(events,
                        bench_trace_span(name, "execution", TID_HOST,
                                         x->begin_ns, x->end_ns, origin, args));
  for (size_t i = 0; i < x->timing_count; i++) {
    const fdy_command_timing *t = &x->timings[i];
    const fdy_command *c = fdy_plan_command(plan, t->command_index);
    if (!c) {
      continue;
    }
    command_name(plan, c, name, sizeof name);
    args = json_object();
    json_object_set_new(args, "sequence",
                        json_integer((json_int_t)x->sequence));
    json_object_set_new(args, "command", json_integer(t->command_index));
    json_object_set_new(args, "buffers", json_integer(buffers));
    json_array_append_new(
        events, bench_trace_span(name, "issue", TID_HOST, t->host_begin_ns,
                                 t->host_end_ns, origin, json_incref(args)));
    if ((c->kind == FDY_CMD_PREFETCH || c->kind == FDY_CMD_LAUNCH) &&
        t->device_start_ns >= 0 && t->device_end_ns >= t->device_start_ns) {
      json_array_append_new(
          events,
          bench_trace_span(
              name, c->kind == FDY_CMD_PREFETCH ? "copy" : "compute",
              c->kind == FDY_CMD_PREFETCH ? TID_COPY : TID_COMPUTE,
              t->device_start_ns, t->device_end_ns, origin, json_incref(args)));
    }
    json_decref(args);
  }
}

json_t *bench_trace_doc(json_t *events, const char *format,
                        const char *report_path, json_t **other) {
  json_t *doc = json_object();
  *other = json_object();
  if (!doc || !events || !*other) {
    json_decref(doc);
    json_decref(events);
    json_decref(*other);
    *other = NULL;
    return NULL;
  }
  json_object_set_new(doc, "traceEvents", events);
  json_object_set_new(doc, "displayTimeUnit", json_string("ms"));
  json_object_set_new(*other, "format", json_string(format));
  json_object_set_new(*other, "report", bench_json_text(report_path));
  json_object_set_new(doc, "otherData", *other);
  return doc;
}

json_t *bench_trace_json(const bench_state *s) {
  json_t *events = json_array();
  if (!events) {
    return NULL;
  }
  bool cuda = s->backend_kind == FDY_BENCH_BACKEND_CUDA;
  char process[192];
  snprintf(process, sizeof process, "foundry bench (%s backend: %s)",
           fdy_bench_backend_name(s->backend_kind),
           s->have_caps ? s->caps.name : "?");
  json_array_append_new(events,
                        bench_trace_metadata("process_name", 0, process));
  json_array_append_new(
      events, bench_trace_metadata("thread_name", TID_HOST, "CPU: host issue"));
  json_array_append_new(
      events,
      bench_trace_metadata("thread_name", TID_COPY,
                           cuda ? "GPU: copy" : "cpu backend: copy (worker)"));
  json_array_append_new(
      events, bench_trace_metadata("thread_name", TID_COMPUTE,
                                   cuda ? "GPU: compute"
                                        : "cpu backend: compute (worker)"));
  for (int tid = TID_HOST; tid <= TID_COMPUTE; tid++) {
    json_array_append_new(events, bench_trace_sort_index(tid));
  }
  int64_t origin = bench_origin_ns(s);
  for (size_t i = 0; i < s->execution_count; i++) {
    if (s->executions[i].timing_count > 0) {
      trace_execution(s, &s->executions[i], origin, events);
    }
  }
  json_t *other = NULL;
  json_t *doc = bench_trace_doc(events, FDY_BENCH_REPORT_FORMAT,
                                s->opt->report_path, &other);
  if (!doc) {
    return NULL;
  }
  json_object_set_new(other, "executions", json_string(bench_trace_scope(s)));
  return doc;
}
