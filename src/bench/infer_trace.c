/* The Chrome trace of `foundry infer-bench`: the traced execution's runs
 * (infer.c) on the host row, each with the host waits, and every other
 * command on the row of its plan stream, at device times where the backend
 * gave them. */
#include <inttypes.h>

#include "infer_internal.h"

/* Rows of the trace: the host, then one per plan stream. */
enum { TRACE_TID_HOST = 1, TRACE_TID_STREAM0 = 2 };

/* The name of the section that holds command `index`. */
static const char *section_of(const fdy_plan *plan, uint32_t index) {
  for (size_t k = 0; k < fdy_plan_section_count(plan); k++) {
    const fdy_section *sec = fdy_plan_section(plan, k);
    if (index >= sec->first && index < sec->first + sec->count) {
      return sec->name;
    }
  }
  return "?";
}

/* "rmsnorm decode.layer.0.attn_norm", "prefetch layer.3", "copy_input
 * decode.step", "wait host (event 41)", "wait stream 0 (event 7)". */
static void command_name(const fdy_plan *plan, const fdy_command *c, char *buf,
                         size_t cap) {
  const fdy_graph *g = fdy_plan_graph(plan);
  const char *kind = fdy_command_kind_name(c->kind);
  fdy_op_info op;
  fdy_tensor_info t;
  switch (c->kind) {
  case FDY_CMD_LAUNCH:
    if (fdy_graph_op(g, c->u.launch.op, &op, NULL) == FDY_OK) {
      snprintf(buf, cap, "%s %s", fdy_op_kind_name(op.kind), op.name);
      return;
    }
    break;
  case FDY_CMD_PREFETCH:
  case FDY_CMD_COPY_INPUT:
  case FDY_CMD_COPY_OUTPUT:
    if (fdy_graph_tensor(g,
                         c->kind == FDY_CMD_PREFETCH ? c->u.prefetch.weight
                                                     : c->u.copy.tensor,
                         &t, NULL) == FDY_OK) {
      snprintf(buf, cap, "%s %s", kind, t.name);
      return;
    }
    break;
  case FDY_CMD_WAIT:
    if (c->u.wait.host) {
      snprintf(buf, cap, "wait host (event %" PRIu32 ")", c->u.wait.event.v);
    } else {
      snprintf(buf, cap, "wait stream %" PRIu32 " (event %" PRIu32 ")",
               c->u.wait.stream.v, c->u.wait.event.v);
    }
    return;
  default:
    break;
  }
  snprintf(buf, cap, "%s", kind);
}

static const char *command_category(fdy_command_kind kind) {
  return kind == FDY_CMD_LAUNCH ? "launch"
         : kind == FDY_CMD_WAIT ? "wait"
                                : "copy";
}

/* "stream 1: weight prefetches, stream waits": what the steps put on it. */
static void stream_row_name(const fdy_plan *plan, uint32_t stream, char *buf,
                            size_t cap) {
  bool seen[FDY_CMD_KIND_COUNT] = {false};
  size_t sections = fdy_plan_section_count(plan);
  for (size_t k = 1; k + 1 < sections; k++) {
    const fdy_section *sec = fdy_plan_section(plan, k);
    for (size_t i = sec->first; i < sec->first + sec->count; i++) {
      const fdy_command *c = fdy_plan_command(plan, i);
      if (fdy_command_stream(c) == (int32_t)stream) {
        seen[c->kind] = true;
      }
    }
  }
  static const struct {
    fdy_command_kind kind;
    const char *what;
  } parts[] = {{FDY_CMD_LAUNCH, "op launches"},
               {FDY_CMD_PREFETCH, "weight prefetches"},
               {FDY_CMD_COPY_INPUT, "input copies"},
               {FDY_CMD_COPY_OUTPUT, "output copies"},
               {FDY_CMD_WAIT, "stream waits"}};
  int used = snprintf(buf, cap, "stream %" PRIu32 ":", stream);
  const char *sep = " ";
  bool any = false;
  for (size_t k = 0; k < FDY_CMD_KIND_COUNT; k++) {
    any = any || seen[k];
  }
  if (!any) {
    snprintf(buf, cap, "stream %" PRIu32 ": idle in the steps", stream);
    return;
  }
  for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
    if (seen[parts[p].kind] && used >= 0 && (size_t)used < cap) {
      used +=
          snprintf(buf + used, cap - (size_t)used, "%s%s", sep, parts[p].what);
      sep = ", ";
    }
  }
}

static json_t *trace_args(size_t run, const char *step) {
  json_t *args = json_object();
  json_object_set_new(args, "run", jint(run));
  json_object_set_new(args, "step", json_string(step));
  return args;
}

/* The Chrome Trace Event document of the traced execution: on the host
 * row each run (a forward) and the host waits, on the row of its plan
 * stream every other command, at device times where the backend gave
 * them. */
json_t *infer_trace_json(const infer_state *s) {
  const infer_trace *t = &s->trace;
  const fdy_plan *plan = fdy_llama_session_plan(s->session);
  json_t *events = json_array();
  if (!events) {
    return NULL;
  }
  char text[256];
  snprintf(text, sizeof text, "foundry infer-bench (%s backend: %s)",
           s->opt->backend_name, s->have_caps ? s->caps.name : "?");
  json_array_append_new(events, bench_trace_metadata("process_name", 0, text));
  json_array_append_new(events,
                        bench_trace_metadata("thread_name", TRACE_TID_HOST,
                                             "host: runs and host waits"));
  json_array_append_new(events, bench_trace_sort_index(TRACE_TID_HOST));
  for (uint32_t k = 0; k < fdy_plan_stream_count(plan); k++) {
    stream_row_name(plan, k, text, sizeof text);
    json_array_append_new(
        events,
        bench_trace_metadata("thread_name", TRACE_TID_STREAM0 + (int)k, text));
    json_array_append_new(events,
                          bench_trace_sort_index(TRACE_TID_STREAM0 + (int)k));
  }
  int64_t origin = t->run_count ? t->runs[0].begin_ns : 0;
  uint64_t device_timed = 0, host_timed = 0;
  for (size_t r = 0; r < t->run_count; r++) {
    const trace_run *run = &t->runs[r];
    const char *step =
        run->count ? section_of(plan, t->timings[run->first].command_index)
                   : "?";
    snprintf(text, sizeof text, "%s run %zu: %" PRIu32 " ids", step, r,
             run->tokens);
    json_t *args = trace_args(r, step);
    json_object_set_new(args, "tokens", jint(run->tokens));
    json_array_append_new(events, bench_trace_span(text, "run", TRACE_TID_HOST,
                                                   run->begin_ns, run->end_ns,
                                                   origin, args));
    for (size_t i = run->first; i < run->first + run->count; i++) {
      const fdy_command_timing *tm = &t->timings[i];
      const fdy_command *c = fdy_plan_command(plan, tm->command_index);
      if (!c) {
        continue;
      }
      command_name(plan, c, text, sizeof text);
      bool device =
          tm->device_start_ns >= 0 && tm->device_end_ns >= tm->device_start_ns;
      device_timed += device;
      host_timed += !device;
      args = trace_args(r, step);
      json_object_set_new(args, "command", jint(tm->command_index));
      json_object_set_new(args, "stream", json_integer(tm->stream));
      json_object_set_new(args, "clock",
                          json_string(device ? "device" : "host"));
      json_array_append_new(
          events,
          bench_trace_span(
              text, command_category(c->kind),
              tm->stream >= 0 ? TRACE_TID_STREAM0 + tm->stream : TRACE_TID_HOST,
              device ? tm->device_start_ns : tm->host_begin_ns,
              device ? tm->device_end_ns : tm->host_end_ns, origin, args));
    }
  }
  json_t *other = NULL;
  json_t *doc = bench_trace_doc(events, FDY_INFER_REPORT_FORMAT,
                                s->opt->report_path, &other);
  if (!doc) {
    return NULL;
  }
  json_object_set_new(
      other, "execution",
      json_string("one unmeasured execution after the measured ones, on a "
                  "session created with collect_timings: each sequence's "
                  "prefill runs, then the decode steps of batch rows, one "
                  "executor run at a time"));
  json_object_set_new(
      other, "timestamps",
      json_string("microseconds since the first run began (fdy_now_ns); "
                  "copies and launches at the device times of the "
                  "backend's events where it gives them (args.clock "
                  "\"device\"), waits and any command without them at "
                  "their host issue times (args.clock \"host\")"));
  json_object_set_new(other, "device_timed_events", jint(device_timed));
  json_object_set_new(other, "host_timed_events", jint(host_timed));
  json_object_set_new(other, "runs", jint(t->run_count));
  json_object_set_new(other, "batch", jint(s->opt->batch));
  json_object_set_new(other, "prefill_rows",
                      jint(fdy_llama_session_prefill_rows(s->session)));
  json_object_set_new(other, "ids_identical_to_measured",
                      json_boolean(t->same_ids));
  return doc;
}
