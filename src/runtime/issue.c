/* Issuing a plan's commands on the backend one by one: a section run
 * command by command, or a command into a recording. */
#include "executor_internal.h"

/* ---- issuing commands
 * -------------------------------------------------------- */

fdy_status ex_record(fdy_executor *x, size_t index, uint32_t stream,
                     uint32_t event, fdy_error *e) {
  fdy_status st =
      x->ops->event_record(x->b, x->streams[stream], x->events[event], e);
  return st == FDY_OK
             ? FDY_OK
             : ex_backend_failed(e, st, (int64_t)index, "event_record");
}

uint32_t ex_command_signal(const fdy_command *c) {
  switch (c->kind) {
  case FDY_CMD_PREFETCH:
    return c->u.prefetch.signal.v;
  case FDY_CMD_COPY_INPUT:
  case FDY_CMD_COPY_OUTPUT:
    return c->u.copy.signal.v;
  case FDY_CMD_LAUNCH:
    return c->u.launch.signal.v;
  default:
    return UINT32_MAX;
  }
}

fdy_status ex_run_command(fdy_executor *x, size_t index, fdy_error *e) {
  const fdy_command *c = fdy_plan_command(x->plan, index);
  ex_command *rc = &x->cmds[index];
  fdy_backend *b = x->b;
  if (x->ops->submitted != NULL) {
    rc->submitted_before = x->ops->submitted(b);
    rc->submitted_after = rc->submitted_before;
  }
  int32_t stream = fdy_command_stream(c);
  fdy_status st = FDY_OK;
  if (x->starts != NULL && x->starts[index] != NULL) {
    st = x->ops->event_record(b, x->streams[stream], x->starts[index], e);
    if (st != FDY_OK) {
      return ex_backend_failed(e, st, (int64_t)index, "event_record");
    }
  }
  switch (c->kind) {
  case FDY_CMD_ALLOCATE: {
    uint32_t id = c->u.allocate.buffer.v;
    const fdy_plan_buffer *pb = fdy_plan_buffer_at(x->plan, id);
    st = x->ops->buffer_alloc(b, pb->bytes, &x->buffers[id], e);
    if (st != FDY_OK) {
      x->buffers[id] = NULL;
      fdy_error_prefix(e, "%s buffer %u (%llu bytes)",
                       fdy_buffer_class_name(pb->cls), id,
                       (unsigned long long)pb->bytes);
      e->ids[0] = id;
      e->actual = pb->bytes;
      return ex_backend_failed(e, st, (int64_t)index, "buffer_alloc");
    }
    x->stats.class_bytes[pb->cls] += pb->bytes;
    return FDY_OK;
  }
  case FDY_CMD_RELEASE: {
    uint32_t id = c->u.release.buffer.v;
    x->ops->buffer_release(b, x->buffers[id]);
    x->buffers[id] = NULL;
    return FDY_OK;
  }
  case FDY_CMD_PREFETCH: {
    fdy_backend_buffer *dst = x->buffers[c->u.prefetch.buffer.v];
    for (size_t k = 0; k < rc->copy_count; k++) {
      const ex_copy *cp = &x->copies[rc->first_copy + k];
      st = x->ops->copy_to_device(b, x->streams[stream], dst,
                                  c->u.prefetch.offset + cp->offset, cp->src,
                                  cp->bytes, e);
      if (st != FDY_OK) {
        return ex_backend_failed(e, st, (int64_t)index, "copy_to_device");
      }
    }
    break;
  }
  case FDY_CMD_COPY_INPUT: {
    fdy_placement p = fdy_plan_placement(x->plan, c->u.copy.tensor);
    st = x->ops->copy_to_device(b, x->streams[stream], x->buffers[p.buffer.v],
                                rc->offset, rc->host, rc->bytes, e);
    if (st != FDY_OK) {
      return ex_backend_failed(e, st, (int64_t)index, "copy_to_device");
    }
    break;
  }
  case FDY_CMD_COPY_OUTPUT: {
    fdy_placement p = fdy_plan_placement(x->plan, c->u.copy.tensor);
    st = x->ops->copy_to_host(b, x->streams[stream], rc->host,
                              x->buffers[p.buffer.v], rc->offset, rc->bytes, e);
    if (st != FDY_OK) {
      return ex_backend_failed(e, st, (int64_t)index, "copy_to_host");
    }
    break;
  }
  case FDY_CMD_LAUNCH:
    st = x->ops->launch(b, x->streams[stream], rc->op, e);
    if (st != FDY_OK) {
      return ex_backend_failed(e, st, (int64_t)index, "launch");
    }
    break;
  case FDY_CMD_WAIT: {
    fdy_backend_event *event = x->events[c->u.wait.event.v];
    if (c->u.wait.host) {
      st = x->ops->host_wait(b, event, e);
      return st == FDY_OK ? FDY_OK
                          : ex_reported_failure(x, e, st, index, "host_wait");
    }
    st = x->ops->stream_wait(b, x->streams[stream], event, e);
    return st == FDY_OK
               ? FDY_OK
               : ex_backend_failed(e, st, (int64_t)index, "stream_wait");
  }
  case FDY_CMD_KIND_COUNT:
    break;
  }
  if (x->ops->submitted != NULL) {
    rc->submitted_after = x->ops->submitted(b);
  }
  return ex_record(x, index, (uint32_t)stream, ex_command_signal(c), e);
}

/* Runs the commands of section s; timings when collecting. */
fdy_status ex_run_section(fdy_executor *x, size_t s, fdy_error *e) {
  const fdy_section *sec = fdy_plan_section(x->plan, s);
  x->timing_count = 0;
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    int64_t begin = x->collect ? fdy_now_ns() : 0;
    fdy_status st = ex_run_command(x, i, e);
    if (st != FDY_OK) {
      return st;
    }
    if (x->collect) {
      const fdy_command *c = fdy_plan_command(x->plan, i);
      x->timings[x->timing_count++] =
          (fdy_command_timing){.command_index = (uint32_t)i,
                               .kind = c->kind,
                               .stream = fdy_command_stream(c),
                               .host_begin_ns = begin,
                               .host_end_ns = fdy_now_ns(),
                               .device_start_ns = -1,
                               .device_end_ns = -1};
    }
  }
  if (!x->collect || x->ops->event_time == NULL) {
    return FDY_OK;
  }
  for (size_t k = 0; k < x->timing_count; k++) {
    fdy_command_timing *t = &x->timings[k];
    const fdy_command *c = fdy_plan_command(x->plan, t->command_index);
    uint32_t signal = ex_command_signal(c);
    if (signal == UINT32_MAX) {
      continue;
    }
    fdy_status st = x->ops->event_time(x->b, x->starts[t->command_index],
                                       &t->device_start_ns, e);
    if (st == FDY_OK) {
      st = x->ops->event_time(x->b, x->events[signal], &t->device_end_ns, e);
    }
    if (st != FDY_OK) {
      return ex_reported_failure(x, e, st, t->command_index, "event_time");
    }
  }
  return FDY_OK;
}
