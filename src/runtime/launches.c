/* The executor's launches resolved once to fdy_ops of tensor views, and
 * the batch-size buckets of a step that declares its rows: its launches
 * and copies narrowed to each bucket at create. */
#include "executor_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- resolving launches
 * ------------------------------------------------------ */

/* The view of operand tensor t of a launch: its placement, or where the
 * launch's binding puts its weight. */
static fdy_status resolve_view(fdy_executor *x, const fdy_command *c,
                               fdy_tensor_id t, fdy_tensor_view *view,
                               fdy_error *e) {
  fdy_tensor_info info;
  fdy_status st = fdy_graph_tensor(x->graph, t, &info, e);
  if (st != FDY_OK) {
    return st;
  }
  if (info.role == FDY_TENSOR_WEIGHT || info.role == FDY_TENSOR_WEIGHT_VIEW) {
    uint32_t weight =
        info.role == FDY_TENSOR_WEIGHT ? t.v : (uint32_t)info.weight;
    for (uint32_t i = 0; i < c->u.launch.binding_count; i++) {
      const fdy_binding *b = &c->u.launch.bindings[i];
      if (b->weight.v == weight) {
        view->buffer = x->buffers[b->buffer.v];
        view->offset = b->offset + info.offset;
        return FDY_OK;
      }
    }
    return fdy_error_set(e, FDY_ERR_PLAN_BINDING_MISMATCH,
                         "no binding for weight %u", weight);
  }
  fdy_placement p = fdy_plan_placement(x->plan, t);
  view->buffer = x->buffers[p.buffer.v];
  view->offset = p.offset;
  return FDY_OK;
}

/* ---- batch-size buckets
 * ------------------------------------------------------ */

/* The declared step input (fdy_graph_set_step_rows) the launches of
 * section s read, and its rows in *rows; UINT32_MAX when they read none,
 * or several different ones (then nothing is narrowed). */
static uint32_t step_input_of(const fdy_executor *x, size_t s, uint64_t *rows) {
  const fdy_section *sec = fdy_plan_section(x->plan, s);
  uint32_t found = UINT32_MAX;
  *rows = 0;
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    fdy_op_info info;
    if (c->kind != FDY_CMD_LAUNCH ||
        fdy_graph_op(x->graph, c->u.launch.op, &info, NULL) != FDY_OK) {
      continue;
    }
    for (size_t k = 0; k < info.read_count; k++) {
      fdy_tensor_info t;
      if (fdy_graph_tensor(x->graph, info.reads[k], &t, NULL) != FDY_OK ||
          t.step_rows == 0 || info.reads[k].v == found) {
        continue;
      }
      if (found != UINT32_MAX) {
        return UINT32_MAX;
      }
      found = info.reads[k].v;
      *rows = t.step_rows;
    }
  }
  return found;
}

/* The leading dimension of tensor t narrowed to b of the step's `rows`
 * rows (graph.h): the step input's elements, or b for an input or
 * activation whose leading dimension is rows; 0 when t is not
 * row-indexed. */
static uint64_t narrowed_dim(const fdy_executor *x, fdy_tensor_id t,
                             uint32_t input, uint64_t rows, uint64_t b) {
  fdy_tensor_info info;
  if (fdy_graph_tensor(x->graph, t, &info, NULL) != FDY_OK) {
    return 0;
  }
  if (t.v == input) {
    return FDY_STEP_ELEMENTS(b);
  }
  bool indexed =
      (info.role == FDY_TENSOR_INPUT || info.role == FDY_TENSOR_ACTIVATION) &&
      info.shape.rank >= 1 && info.shape.dims[0] == rows;
  return indexed ? b : 0;
}

/* Fills bucket b of step s: its launches' ops (from the resolved ones,
 * row-indexed operands narrowed, variant_rows the full rows for b >= 2,
 * ops.h) and its copies' bytes. False when a narrowed op fails
 * fdy_op_check or the backend does not support it (the bucket is then not
 * used). */
static bool narrow_bucket(fdy_executor *x, size_t s, uint64_t rows, uint64_t b,
                          fdy_op *ops, uint64_t *bytes) {
  const fdy_section *sec = fdy_plan_section(x->plan, s);
  const ex_step *step = &x->steps[s];
  size_t n = 0;
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    if (c->kind == FDY_CMD_COPY_INPUT || c->kind == FDY_CMD_COPY_OUTPUT) {
      uint64_t dim =
          narrowed_dim(x, c->u.copy.tensor, step->step_input, rows, b);
      fdy_tensor_info info;
      if (dim != 0 &&
          fdy_graph_tensor(x->graph, c->u.copy.tensor, &info, NULL) == FDY_OK) {
        bytes[i - sec->first] = info.bytes / info.shape.dims[0] * dim;
      }
      continue;
    }
    if (c->kind != FDY_CMD_LAUNCH) {
      continue;
    }
    fdy_op *op = &ops[n++];
    *op = *x->cmds[i].op;
    fdy_op_info info;
    if (fdy_graph_op(x->graph, c->u.launch.op, &info, NULL) != FDY_OK) {
      return false;
    }
    for (size_t k = 0; k < info.read_count + info.write_count; k++) {
      bool input = k < info.read_count;
      fdy_tensor_id t =
          input ? info.reads[k] : info.writes[k - info.read_count];
      fdy_tensor_view *v =
          input ? &op->inputs[k] : &op->outputs[k - info.read_count];
      uint64_t dim = narrowed_dim(x, t, step->step_input, rows, b);
      if (dim != 0) {
        v->shape.dims[0] = dim;
      }
    }
    op->variant_rows = b >= 2 ? rows : 0;
    if (fdy_op_check(op, NULL) != FDY_OK || !x->ops->supports_op(x->b, op)) {
      return false;
    }
  }
  return true;
}

/* The steps (by section) and, for each step that reads a declared step
 * input of R >= 2 rows, its buckets 1, 2, 4, ... below R (those whose
 * narrowed ops the backend runs) and R, with their narrowed ops and copy
 * bytes, each stream's workspace grown for the narrowed ops. Needs the
 * resolved launches. */
static fdy_status plan_buckets(fdy_executor *x, fdy_error *e) {
  size_t sections = fdy_plan_section_count(x->plan);
  x->steps = calloc(sections, sizeof(*x->steps));
  if (!x->steps) {
    return ex_oom(e);
  }
  for (size_t s = 1; s + 1 < sections; s++) {
    ex_step *step = &x->steps[s];
    const fdy_section *sec = fdy_plan_section(x->plan, s);
    uint64_t rows = 0;
    step->bucket_count = 1;
    step->step_input = step_input_of(x, s, &rows);
    if (step->step_input == UINT32_MAX || rows < 2) {
      step->step_input = UINT32_MAX;
      continue;
    }
    for (size_t i = sec->first; i < sec->first + sec->count; i++) {
      step->launches += fdy_plan_command(x->plan, i)->kind == FDY_CMD_LAUNCH;
    }
    size_t below = 0;
    for (uint64_t b = 1; b < rows && b != 0; b *= 2) {
      below++;
    }
    step->narrowed = calloc(below * step->launches + 1, sizeof(fdy_op));
    step->narrowed_bytes = calloc(below * sec->count + 1, sizeof(uint64_t));
    if (!step->narrowed || !step->narrowed_bytes) {
      return ex_oom(e);
    }
    size_t kept = 0;
    for (uint64_t b = 1; b < rows && b != 0; b *= 2) {
      fdy_op *ops = &step->narrowed[kept * step->launches];
      uint64_t *bytes = &step->narrowed_bytes[kept * sec->count];
      memset(bytes, 0, sec->count * sizeof(*bytes));
      if (narrow_bucket(x, s, rows, b, ops, bytes)) {
        step->bucket_rows[kept++] = b;
      }
    }
    step->bucket_rows[kept] = rows;
    step->bucket_count = kept + 1;
    for (size_t j = 0; j + 1 < step->bucket_count; j++) {
      size_t n = 0;
      for (size_t i = sec->first; i < sec->first + sec->count; i++) {
        const fdy_command *c = fdy_plan_command(x->plan, i);
        if (c->kind != FDY_CMD_LAUNCH) {
          continue;
        }
        const fdy_op *op = &step->narrowed[j * step->launches + n++];
        uint64_t need =
            x->ops->workspace_bytes ? x->ops->workspace_bytes(x->b, op) : 0;
        uint32_t st = c->u.launch.stream.v;
        if (need > x->workspace_bytes[st]) {
          x->workspace_bytes[st] = need;
        }
      }
    }
  }
  return FDY_OK;
}

/* Exchanges the resolved launch ops and copy bytes of step s with those of
 * its bucket j (below its rows): called once to record bucket j, again to
 * restore. */
void ex_swap_bucket(fdy_executor *x, size_t s, size_t j) {
  const fdy_section *sec = fdy_plan_section(x->plan, s);
  ex_step *step = &x->steps[s];
  size_t n = 0;
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    ex_command *rc = &x->cmds[i];
    if (c->kind == FDY_CMD_LAUNCH) {
      fdy_op *narrow = &step->narrowed[j * step->launches + n++];
      fdy_op held = *rc->op;
      *rc->op = *narrow;
      *narrow = held;
    } else if (c->kind == FDY_CMD_COPY_INPUT ||
               c->kind == FDY_CMD_COPY_OUTPUT) {
      uint64_t *bytes = &step->narrowed_bytes[j * sec->count + i - sec->first];
      if (*bytes != 0) {
        uint64_t held = rc->bytes;
        rc->bytes = *bytes;
        *bytes = held;
      }
    }
  }
}

/* The bucket a run of step s launches: the smallest whose rows hold the
 * count its step input's staging holds now (the last for a count above
 * every bucket; the first for a count of 0 or less). */
size_t ex_bucket_of(const fdy_executor *x, const ex_step *step) {
  if (step->bucket_count < 2) {
    return 0;
  }
  const int32_t *in = x->staging[step->step_input].data;
  int64_t count = in != NULL ? in[FDY_STEP_COUNT] : INT64_MAX;
  size_t j = 0;
  while (j + 1 < step->bucket_count &&
         (count < 0 ? 0 : (uint64_t)count) > step->bucket_rows[j]) {
    j++;
  }
  return j;
}

/* Every launch of the steps as an op of views, and each stream's workspace
 * sized for the largest op it runs (that of a bucket included). Needs the
 * buffers (after setup). */
fdy_status ex_resolve_launches(fdy_executor *x, fdy_error *e) {
  size_t launches = 0;
  for (size_t i = 0; i < x->command_count; i++) {
    launches += fdy_plan_command(x->plan, i)->kind == FDY_CMD_LAUNCH;
  }
  x->launch_ops = calloc(launches + 1, sizeof(fdy_op));
  if (!x->launch_ops) {
    return ex_oom(e);
  }
  size_t n = 0;
  for (size_t i = 0; i < x->command_count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    if (c->kind != FDY_CMD_LAUNCH) {
      continue;
    }
    fdy_op *op = &x->launch_ops[n++];
    fdy_op_info info;
    fdy_status st = ex_op_of(x->graph, c->u.launch.op.v, op, &info, e);
    for (size_t k = 0; st == FDY_OK && k < info.read_count; k++) {
      st = resolve_view(x, c, info.reads[k], &op->inputs[k], e);
    }
    for (size_t k = 0; st == FDY_OK && k < info.write_count; k++) {
      st = resolve_view(x, c, info.writes[k], &op->outputs[k], e);
    }
    if (st != FDY_OK) {
      e->command_index = (int64_t)i;
      return st;
    }
    x->cmds[i].op = op;
    uint64_t need =
        x->ops->workspace_bytes ? x->ops->workspace_bytes(x->b, op) : 0;
    uint32_t s = c->u.launch.stream.v;
    if (need > x->workspace_bytes[s]) {
      x->workspace_bytes[s] = need;
    }
  }
  if (x->graphs) {
    fdy_status st = plan_buckets(x, e);
    if (st != FDY_OK) {
      return st;
    }
  }
  for (uint32_t s = 0; s < x->stream_count; s++) {
    if (x->workspace_bytes[s] == 0) {
      continue;
    }
    fdy_status st =
        x->ops->buffer_alloc(x->b, x->workspace_bytes[s], &x->workspace[s], e);
    if (st != FDY_OK) {
      x->workspace[s] = NULL;
      fdy_error_prefix(e, "workspace of stream %u (%llu bytes)", s,
                       (unsigned long long)x->workspace_bytes[s]);
      return ex_backend_failed(e, st, -1, "buffer_alloc");
    }
    x->stats.workspace_bytes += x->workspace_bytes[s];
  }
  for (size_t i = 0; i < x->command_count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    if (c->kind != FDY_CMD_LAUNCH) {
      continue;
    }
    uint32_t s = c->u.launch.stream.v;
    if (x->workspace[s] != NULL) {
      x->cmds[i].op->workspace =
          (fdy_tensor_view){.buffer = x->workspace[s],
                            .dtype = FDY_DTYPE_U8,
                            .shape = FDY_SHAPE(x->workspace_bytes[s])};
    }
  }
  /* the buckets' ops share their command's workspace */
  size_t sections = fdy_plan_section_count(x->plan);
  for (size_t s = 1; x->steps != NULL && s + 1 < sections; s++) {
    ex_step *step = &x->steps[s];
    const fdy_section *sec = fdy_plan_section(x->plan, s);
    for (size_t j = 0; j + 1 < step->bucket_count; j++) {
      size_t k = 0;
      for (size_t i = sec->first; i < sec->first + sec->count; i++) {
        if (fdy_plan_command(x->plan, i)->kind == FDY_CMD_LAUNCH) {
          step->narrowed[j * step->launches + k++].workspace =
              x->cmds[i].op->workspace;
        }
      }
    }
  }
  return FDY_OK;
}
