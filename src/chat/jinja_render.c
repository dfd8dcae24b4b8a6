/* The Jinja renderer: walks the parsed tree with Python's value semantics
 * where templates depend on them (truthiness, `and`/`or` returning an
 * operand, str() and repr() of values, slicing by characters, json.dumps
 * as transformers' tojson calls it). Every value lives in one arena freed
 * at the end of the render; each string remembers whether its bytes come
 * from the template (special tokens are tokens there) or from the caller's
 * data, and the output keeps that per byte. This file holds the output, the
 * scopes of variables, the statements, the input (the conversation and the
 * caller's variables as globals) and fdy_jinja_render; the values are
 * jinja_value.c's, the expressions jinja_eval.c's. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_render_internal.h"

struct scope {
  scope *parent;
  const char **names;
  value *vals;
  size_t count, cap;
};

typedef enum flow { FLOW_OK, FLOW_BREAK, FLOW_CONTINUE, FLOW_ERROR } flow;

/* ---- the output ------------------------------------------------------------
 */

static bool emit(render *r, const value *v) {
  value s;
  if (!jj_to_str(r, v, &s)) {
    return false;
  }
  if (s.len > RENDER_LIMIT - r->out_len) {
    return jj_fail(r, FDY_ERR_BUDGET, NULL,
                   "the rendered text is longer than %llu MiB",
                   (unsigned long long)(RENDER_LIMIT >> 20));
  }
  if (r->out_len + s.len + 1 > r->out_cap) {
    size_t cap = r->out_cap ? r->out_cap : 1024;
    while (cap < r->out_len + s.len + 1) {
      cap *= 2;
    }
    char *text = realloc(r->out, cap);
    if (text) {
      r->out = text;
    }
    uint8_t *mask = text ? realloc(r->out_mask, cap) : NULL;
    if (!mask) {
      return jj_fail(r, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
    }
    r->out_mask = mask;
    r->out_cap = cap;
  }
  memcpy(r->out + r->out_len, s.s, s.len);
  for (size_t k = 0; k < s.len; k++) {
    r->out_mask[r->out_len + k] = jj_origin_at(&s, k);
  }
  r->out_len += s.len;
  r->out[r->out_len] = '\0';
  return true;
}

/* ---- scopes ----------------------------------------------------------------
 */

value *jj_lookup(render *r, const char *name) {
  for (scope *s = r->scope; s; s = s->parent) {
    for (size_t k = s->count; k-- > 0;) {
      if (strcmp(s->names[k], name) == 0) {
        return &s->vals[k];
      }
    }
  }
  return NULL;
}

static bool assign(render *r, scope *s, const char *name, value v) {
  for (size_t k = 0; k < s->count; k++) {
    if (strcmp(s->names[k], name) == 0) {
      s->vals[k] = v;
      return true;
    }
  }
  if (s->count == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 8;
    const char **names = jj_grow(r, s->names, s->count, cap, sizeof *names);
    value *vals = jj_grow(r, s->vals, s->count, cap, sizeof *vals);
    if (!names || !vals) {
      return false;
    }
    s->names = names;
    s->vals = vals;
    s->cap = cap;
  }
  s->names[s->count] = name;
  s->vals[s->count++] = v;
  return true;
}

/* ---- statements
 * ------------------------------------------------------------------ */

static flow exec_body(render *r, const jj_body *b);

static flow exec_for(render *r, const jj_node *n) {
  value seq;
  list *all, *items;
  if (!jj_eval(r, n->expr, &seq)) {
    return FLOW_ERROR;
  }
  r->line = n->line;
  if (seq.kind == V_UNDEF) {
    all = &(list){0};
  } else if (!jj_items_of(r, "a for loop", &seq, &all)) {
    return FLOW_ERROR;
  }
  scope *s = jj_render_alloc(r, sizeof *s);
  if (!s) {
    return FLOW_ERROR;
  }
  s->parent = r->scope;
  r->scope = s;
  flow f = FLOW_OK;
  /* bind the targets of one item */
  items = all;
  value filtered;
  if (n->cond) {
    if (!jj_new_list(r, &filtered)) {
      f = FLOW_ERROR;
    }
    items = filtered.l;
  }
  for (size_t k = 0; f == FLOW_OK && n->cond && k < all->count; k++) {
    value v = all->items[k], c;
    s->count = 0;
    bool ok = assign(r, s, n->str, v);
    if (ok && n->attr) {
      value a = UNDEF, b = UNDEF, i0 = {.kind = V_INT, .i = 0},
            i1 = {.kind = V_INT, .i = 1};
      ok = jj_item(r, &v, &i0, &a) && jj_item(r, &v, &i1, &b) &&
           assign(r, s, n->str, a) && assign(r, s, n->attr, b);
    }
    if (!ok || !jj_eval(r, n->cond, &c)) {
      f = FLOW_ERROR;
    } else if (jj_truthy(&c) && !jj_list_push(r, items, v)) {
      f = FLOW_ERROR;
    }
  }
  loop *lp = f == FLOW_OK ? jj_render_alloc(r, sizeof *lp) : NULL;
  if (!lp) {
    f = FLOW_ERROR;
  } else {
    lp->items = items;
  }
  for (size_t k = 0; f == FLOW_OK && k < items->count; k++) {
    value v = items->items[k];
    s->count = 0;
    lp->index = k;
    if (n->attr) {
      if (v.kind != V_LIST || v.l->count != 2) {
        r->line = n->line;
        jj_type_error(r, "unpacking two loop variables", &v, NULL);
        f = FLOW_ERROR;
        break;
      }
      if (!assign(r, s, n->str, v.l->items[0]) ||
          !assign(r, s, n->attr, v.l->items[1])) {
        f = FLOW_ERROR;
        break;
      }
    } else if (!assign(r, s, n->str, v)) {
      f = FLOW_ERROR;
      break;
    }
    if (!assign(r, s, "loop", (value){.kind = V_LOOP, .lp = lp})) {
      f = FLOW_ERROR;
      break;
    }
    f = exec_body(r, &n->body);
    if (f == FLOW_BREAK) {
      f = FLOW_OK;
      break;
    }
    if (f == FLOW_CONTINUE) {
      f = FLOW_OK;
    }
  }
  if (f == FLOW_OK && items->count == 0) {
    s->count = 0;
    f = exec_body(r, &n->orelse);
  }
  r->scope = s->parent;
  return f;
}

static flow exec_body(render *r, const jj_body *b) {
  for (size_t k = 0; k < b->count; k++) {
    const jj_node *n = b->items[k];
    r->line = n->line;
    switch (n->kind) {
    case JJ_N_TEXT: {
      value t = jj_str_value(n->str, n->len, FROM_TEMPLATE);
      if (!emit(r, &t)) {
        return FLOW_ERROR;
      }
      break;
    }
    case JJ_N_OUTPUT: {
      value v;
      if (!jj_eval(r, n->expr, &v) || !emit(r, &v)) {
        return FLOW_ERROR;
      }
      break;
    }
    case JJ_N_IF: {
      value c;
      if (!jj_eval(r, n->expr, &c)) {
        return FLOW_ERROR;
      }
      flow f = exec_body(r, jj_truthy(&c) ? &n->body : &n->orelse);
      if (f != FLOW_OK) {
        return f;
      }
      break;
    }
    case JJ_N_FOR: {
      flow f = exec_for(r, n);
      if (f != FLOW_OK) {
        return f;
      }
      break;
    }
    case JJ_N_SET: {
      value v;
      if (!jj_eval(r, n->expr, &v)) {
        return FLOW_ERROR;
      }
      r->line = n->line;
      if (n->attr) {
        value *ns = jj_lookup(r, n->str);
        if (!ns || ns->kind != V_NS) {
          jj_fail(r, FDY_ERR_INVALID_ARGUMENT, "set",
                  "'%s' is not a namespace: cannot set its attribute '%s'",
                  n->str, n->attr);
          return FLOW_ERROR;
        }
        if (!jj_dict_set(r, ns->d,
                         jj_str_value(n->attr, strlen(n->attr), FROM_TEMPLATE),
                         v)) {
          return FLOW_ERROR;
        }
      } else if (!assign(r, r->scope, n->str, v)) {
        return FLOW_ERROR;
      }
      break;
    }
    case JJ_N_BREAK:
      return FLOW_BREAK;
    case JJ_N_CONTINUE:
      return FLOW_CONTINUE;
    }
  }
  return FLOW_OK;
}

/* ---- input
 * ---------------------------------------------------------------------- */

static bool from_json(render *r, json_t *j, value *out, int depth) {
  if (depth > 64) {
    return jj_fail(r, FDY_ERR_OVERFLOW, "variables",
                   "the variables nest deeper than 64");
  }
  switch (json_typeof(j)) {
  case JSON_OBJECT: {
    const char *key;
    json_t *v;
    if (!jj_new_dict(r, V_DICT, out)) {
      return false;
    }
    json_object_foreach(j, key, v) {
      value k, x;
      size_t n = strlen(key);
      char *s = jj_new_str(r, n, FROM_DATA, &k);
      if (!s) {
        return false;
      }
      memcpy(s, key, n);
      if (!from_json(r, v, &x, depth + 1) || !jj_dict_set(r, out->d, k, x)) {
        return false;
      }
    }
    return true;
  }
  case JSON_ARRAY: {
    size_t i;
    json_t *v;
    if (!jj_new_list(r, out)) {
      return false;
    }
    json_array_foreach(j, i, v) {
      value x;
      if (!from_json(r, v, &x, depth + 1) || !jj_list_push(r, out->l, x)) {
        return false;
      }
    }
    return true;
  }
  case JSON_STRING: {
    size_t n = json_string_length(j);
    char *s = jj_new_str(r, n, FROM_DATA, out);
    if (s) {
      memcpy(s, json_string_value(j), n);
    }
    return s != NULL;
  }
  case JSON_INTEGER:
    *out = (value){.kind = V_INT, .i = json_integer_value(j)};
    return true;
  case JSON_REAL:
    *out = (value){.kind = V_FLOAT, .f = json_real_value(j)};
    return true;
  case JSON_TRUE:
  case JSON_FALSE:
    *out = (value){.kind = V_BOOL, .b = json_is_true(j)};
    return true;
  default:
    *out = NONE;
    return true;
  }
}

static bool globals(render *r, const fdy_jinja_input *in) {
  scope *g = r->scope;
  value msgs;
  if (!jj_new_list(r, &msgs)) {
    return false;
  }
  for (size_t k = 0; k < in->message_count; k++) {
    const fdy_jinja_message *m = &in->messages[k];
    value d, role, content;
    size_t rl = m->role ? strlen(m->role) : 0;
    char *rs = jj_new_str(r, rl, FROM_DATA, &role);
    char *cs = rs ? jj_new_str(r, m->content_len, FROM_DATA, &content) : NULL;
    if (!cs || !jj_new_dict(r, V_DICT, &d)) {
      return false;
    }
    memcpy(rs, m->role ? m->role : "", rl);
    if (m->content_len) {
      memcpy(cs, m->content, m->content_len);
    }
    if (!jj_dict_set(r, d.d, jj_str_value("role", 4, FROM_TEMPLATE), role) ||
        !jj_dict_set(r, d.d, jj_str_value("content", 7, FROM_TEMPLATE),
                     content) ||
        !jj_list_push(r, msgs.l, d)) {
      return false;
    }
  }
  for (size_t k = 0; k < jj_function_count; k++) {
    if (!assign(r, g, jj_functions[k],
                (value){.kind = V_FUNC, .s = jj_functions[k]})) {
      return false;
    }
  }
  if (!assign(r, g, "messages", msgs) || !assign(r, g, "tools", NONE) ||
      !assign(r, g, "documents", NONE) ||
      !assign(r, g, "add_generation_prompt",
              (value){.kind = V_BOOL, .b = in->add_generation_prompt})) {
    return false;
  }
  const char *tokens[2] = {in->bos_token, in->eos_token};
  const char *names[2] = {"bos_token", "eos_token"};
  for (int k = 0; k < 2; k++) {
    if (tokens[k] &&
        !assign(r, g, names[k],
                jj_str_value(tokens[k], strlen(tokens[k]), FROM_TEMPLATE))) {
      return false;
    }
  }
  if (!in->variables) {
    return true;
  }
  json_error_t je;
  json_t *vars = json_loads(in->variables, JSON_REJECT_DUPLICATES, &je);
  if (!vars || !json_is_object(vars)) {
    json_decref(vars);
    jj_fail(r, FDY_ERR_PARSE, "variables",
            "the template variables are not a JSON object: %s",
            vars ? "another JSON value" : je.text);
    if (r->err) {
      r->err->line = vars ? 1 : je.line;
      r->err->column = vars ? 1 : je.column;
    }
    return false;
  }
  const char *key;
  json_t *v;
  bool ok = true;
  json_object_foreach(vars, key, v) {
    value x;
    size_t n = strlen(key);
    char *name = ok ? jj_render_alloc(r, n + 1) : NULL;
    ok = name && from_json(r, v, &x, 0);
    if (!ok) {
      break;
    }
    memcpy(name, key, n);
    ok = assign(r, g, name, x);
  }
  json_decref(vars);
  return ok;
}

fdy_status fdy_jinja_render(const fdy_jinja *t, const fdy_jinja_input *in,
                            fdy_jinja_output *out, fdy_error *err) {
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_jinja_render needs an output");
  }
  memset(out, 0, sizeof *out);
  if (!t || !in || (in->message_count && !in->messages)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_jinja_render needs a template and its input");
  }
  render r = {.arena = {.limit = RENDER_LIMIT}, .err = err, .line = 1};
  scope root = {0};
  r.scope = &root;
  if (globals(&r, in) && exec_body(&r, &t->root) == FLOW_OK && !r.out &&
      !(r.out = malloc(1))) {
    jj_fail(&r, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
  }
  jj_arena_free(&r.arena);
  if (r.status != FDY_OK) {
    free(r.out);
    free(r.out_mask);
    return r.status;
  }
  if (r.out_len == 0) {
    r.out[0] = '\0';
  }
  out->text = r.out;
  out->len = r.out_len;
  out->from_template = r.out_mask;
  return FDY_OK;
}

void fdy_jinja_output_free(fdy_jinja_output *out) {
  if (out) {
    free(out->text);
    free(out->from_template);
    memset(out, 0, sizeof *out);
  }
}
