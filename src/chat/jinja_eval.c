/* The Jinja renderer's expressions: evaluates a parsed expression to a value
 * (jinja_value.c) with Python's semantics where templates depend on them:
 * subscripts and slices by characters, `in`, arithmetic checked for 64-bit
 * overflow, comparisons, `and`/`or` returning an operand; and the tests
 * (`is defined`...), the filters, the string and dict methods, and the
 * global functions (namespace, raise_exception, strftime_now). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_render_internal.h"

/* ---- expressions ------------------------------------------------------------
 */

/* The argument named name, else the positional one at index, else NULL
 * (also for e NULL: a filter that map applies has no arguments). */
static const jj_arg *arg_of(const jj_expr *e, size_t index, const char *name) {
  size_t positional = 0;
  for (size_t k = 0; e && k < e->nargs; k++) {
    if (e->args[k].name) {
      if (name && strcmp(e->args[k].name, name) == 0) {
        return &e->args[k];
      }
    } else if (positional++ == index) {
      return &e->args[k];
    }
  }
  return NULL;
}

static bool eval_arg(render *r, const jj_expr *e, size_t index,
                     const char *name, value *out, bool *given) {
  const jj_arg *a = arg_of(e, index, name);
  *given = a != NULL;
  *out = UNDEF;
  return !a || jj_eval(r, a->value, out);
}

static bool want_str(render *r, const char *op, const value *v) {
  return v->kind == V_STR || jj_type_error(r, op, v, NULL);
}

bool jj_item(render *r, const value *obj, const value *key, value *out) {
  *out = UNDEF;
  switch (obj->kind) {
  case V_UNDEF:
    return jj_type_error(r, "a subscript", obj, NULL);
  case V_LIST:
  case V_STR: {
    if (key->kind != V_INT && key->kind != V_BOOL) {
      return obj->kind == V_LIST ? true
                                 : jj_type_error(r, "a subscript", obj, key);
    }
    int64_t i = jj_as_int(key);
    if (obj->kind == V_LIST) {
      int64_t n = (int64_t)obj->l->count;
      i = i < 0 ? i + n : i;
      if (i >= 0 && i < n) {
        *out = obj->l->items[i];
      }
      return true;
    }
    int64_t n = (int64_t)jj_char_count(obj->s, obj->len);
    i = i < 0 ? i + n : i;
    if (i < 0 || i >= n) {
      return true;
    }
    size_t at = 0;
    for (int64_t c = 0; c < i; c++) {
      at += jj_char_len(obj->s + at, obj->len - at);
    }
    *out = jj_str_value(obj->s + at, jj_char_len(obj->s + at, obj->len - at),
                        jj_derived(obj));
    return true;
  }
  case V_DICT:
  case V_NS: {
    const value *v = jj_dict_find(obj->d, key);
    if (v) {
      *out = *v;
    }
    return true;
  }
  case V_LOOP: {
    if (key->kind != V_STR) {
      return true;
    }
    const loop *lp = obj->lp;
    int64_t i = (int64_t)lp->index, n = (int64_t)lp->items->count;
    static const char *const fields[] = {
        "index",     "index0",   "first",    "last",  "length", "revindex",
        "revindex0", "previtem", "nextitem", "depth", "depth0"};
    size_t f = 0;
    for (; f < sizeof fields / sizeof *fields; f++) {
      if (strlen(fields[f]) == key->len &&
          memcmp(fields[f], key->s, key->len) == 0) {
        break;
      }
    }
    int64_t ints[] = {i + 1, i, 0, 0, n, n - i, n - i - 1, 0, 0, 1, 0};
    if (f == 2 || f == 3) {
      *out = (value){.kind = V_BOOL, .b = f == 2 ? i == 0 : i == n - 1};
    } else if (f == 7) {
      *out = i > 0 ? lp->items->items[i - 1] : UNDEF;
    } else if (f == 8) {
      *out = i + 1 < n ? lp->items->items[i + 1] : UNDEF;
    } else if (f < sizeof ints / sizeof *ints) {
      *out = (value){.kind = V_INT, .i = ints[f]};
    }
    return true;
  }
  default:
    return true; /* none.x, 3.x, ...: undefined, as jinja2's getattr */
  }
}

/* Python slice bounds for n elements. */
static bool slice_bounds(render *r, const jj_expr *e, int64_t n, int64_t *start,
                         int64_t *stop, int64_t *step) {
  value v[3] = {UNDEF, UNDEF, UNDEF};
  const jj_expr *parts[3] = {e->b, e->c, e->d};
  for (int k = 0; k < 3; k++) {
    if (parts[k] && !jj_eval(r, parts[k], &v[k])) {
      return false;
    }
    if (v[k].kind != V_UNDEF && v[k].kind != V_NONE && v[k].kind != V_INT &&
        v[k].kind != V_BOOL) {
      return jj_type_error(r, "a slice", &v[k], NULL);
    }
  }
  bool given[3];
  int64_t x[3];
  for (int k = 0; k < 3; k++) {
    given[k] = v[k].kind == V_INT || v[k].kind == V_BOOL;
    x[k] = given[k] ? jj_as_int(&v[k]) : 0;
  }
  *step = given[2] ? x[2] : 1;
  if (*step == 0) {
    return jj_fail(r, FDY_ERR_INVALID_ARGUMENT, "a slice",
                   "a slice step cannot be zero");
  }
  if (*step == INT64_MIN) {
    *step = -INT64_MAX;
  }
  for (int k = 0; k < 2; k++) {
    int64_t *b = k == 0 ? start : stop;
    if (!given[k]) {
      *b = *step > 0 ? (k == 0 ? 0 : n) : (k == 0 ? n - 1 : -1);
      continue;
    }
    int64_t i = x[k];
    if (i < 0) {
      i = i < -n ? (*step > 0 ? 0 : -1) : i + n;
    } else if (i >= n) {
      i = *step > 0 ? n : n - 1;
    }
    *b = i;
  }
  return true;
}

static bool slice(render *r, const jj_expr *e, const value *obj, value *out) {
  if (obj->kind != V_LIST && obj->kind != V_STR) {
    return jj_type_error(r, "a slice", obj, NULL);
  }
  bool is_list = obj->kind == V_LIST;
  /* a string's character offsets */
  size_t *offs = NULL;
  int64_t n;
  if (is_list) {
    n = (int64_t)obj->l->count;
  } else {
    n = (int64_t)jj_char_count(obj->s, obj->len);
    if (!(offs = jj_render_alloc(r, ((size_t)n + 1) * sizeof *offs))) {
      return false;
    }
    size_t at = 0;
    for (int64_t c = 0; c < n; c++) {
      offs[c] = at;
      at += jj_char_len(obj->s + at, obj->len - at);
    }
    offs[n] = obj->len;
  }
  int64_t start = 0, stop = 0, step = 1;
  if (!slice_bounds(r, e, n, &start, &stop, &step)) {
    return false;
  }
  if (is_list) {
    if (!jj_new_list(r, out)) {
      return false;
    }
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (!jj_list_push(r, out->l, obj->l->items[i])) {
        return false;
      }
    }
    return true;
  }
  if (step == 1) { /* a piece of the string: its origins stay */
    size_t a = offs[start], b = stop > start ? offs[stop] : a;
    *out = jj_str_value(obj->s + a, b - a, obj->origin);
    if (obj->origin == FROM_BOTH) {
      out->mask = obj->mask + a;
    }
    return true;
  }
  sbuf b = {.r = r, .data = obj->origin != FROM_TEMPLATE};
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (!jj_put(&b, obj->s + offs[i], offs[i + 1] - offs[i])) {
      return false;
    }
  }
  *out = jj_sbuf_value(&b);
  return out->kind == V_STR;
}

static bool contains(render *r, const value *hay, const value *needle,
                     bool *out) {
  switch (hay->kind) {
  case V_STR:
    if (needle->kind != V_STR) {
      return jj_type_error(r, "'in'", needle, hay);
    }
    *out = needle->len == 0 ||
           (needle->len <= hay->len &&
            memmem(hay->s, hay->len, needle->s, needle->len) != NULL);
    return true;
  case V_LIST:
    *out = false;
    for (size_t k = 0; k < hay->l->count && !*out; k++) {
      *out = jj_equal(&hay->l->items[k], needle);
    }
    return true;
  case V_DICT:
  case V_NS:
    *out = jj_dict_find(hay->d, needle) != NULL;
    return true;
  case V_UNDEF:
    *out = false;
    return true;
  default:
    return jj_type_error(r, "'in'", needle, hay);
  }
}

static int compare_str(const value *a, const value *b) {
  size_t m = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->s, b->s, m);
  return c ? c : (a->len > b->len) - (a->len < b->len);
}

static bool checked(render *r, bool overflow, const char *op) {
  return !overflow || jj_fail(r, FDY_ERR_OVERFLOW, op,
                              "integer arithmetic (%s) outside 64 bits", op);
}

/* str * n and list * n */
static bool repeat(render *r, const value *v, int64_t n, value *out) {
  if (n < 0) {
    n = 0;
  }
  size_t unit = v->kind == V_STR ? v->len : v->l->count;
  if (unit && (uint64_t)n > RENDER_LIMIT / unit) {
    return jj_fail(r, FDY_ERR_BUDGET, "*", "a repetition longer than %llu MiB",
                   (unsigned long long)(RENDER_LIMIT >> 20));
  }
  if (v->kind == V_STR) {
    char *s = jj_new_str(r, unit * (size_t)n, jj_derived(v), out);
    for (int64_t k = 0; s && k < n; k++) {
      memcpy(s + unit * (size_t)k, v->s, unit);
    }
    return s != NULL;
  }
  if (!jj_new_list(r, out)) {
    return false;
  }
  for (int64_t k = 0; k < n; k++) {
    for (size_t j = 0; j < unit; j++) {
      if (!jj_list_push(r, out->l, v->l->items[j])) {
        return false;
      }
    }
  }
  return true;
}

static bool arith(render *r, jj_op op, const value *a, const value *b,
                  value *out) {
  static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
  const char *name = names[op];
  if (op == JJ_ADD && a->kind == V_STR && b->kind == V_STR) {
    return jj_concat_str(r, a, b, out);
  }
  if (op == JJ_ADD && a->kind == V_LIST && b->kind == V_LIST) {
    if (!jj_new_list(r, out)) {
      return false;
    }
    for (size_t k = 0; k < a->l->count + b->l->count; k++) {
      value v = k < a->l->count ? a->l->items[k] : b->l->items[k - a->l->count];
      if (!jj_list_push(r, out->l, v)) {
        return false;
      }
    }
    return true;
  }
  if (op == JJ_MUL && (a->kind == V_STR || a->kind == V_LIST) &&
      (b->kind == V_INT || b->kind == V_BOOL)) {
    return repeat(r, a, jj_as_int(b), out);
  }
  if (op == JJ_MUL && (b->kind == V_STR || b->kind == V_LIST) &&
      (a->kind == V_INT || a->kind == V_BOOL)) {
    return repeat(r, b, jj_as_int(a), out);
  }
  if (!jj_is_number(a) || !jj_is_number(b)) {
    return jj_type_error(r, name, a, b);
  }
  if (a->kind != V_FLOAT && b->kind != V_FLOAT && op != JJ_DIV) {
    int64_t x = jj_as_int(a), y = jj_as_int(b), z = 0;
    bool over = false;
    switch (op) {
    case JJ_ADD:
      over = __builtin_add_overflow(x, y, &z);
      break;
    case JJ_SUB:
      over = __builtin_sub_overflow(x, y, &z);
      break;
    case JJ_MUL:
      over = __builtin_mul_overflow(x, y, &z);
      break;
    case JJ_FLOORDIV:
    case JJ_MOD:
      if (y == 0) {
        return jj_fail(r, FDY_ERR_INVALID_ARGUMENT, name, "division by zero");
      }
      over = x == INT64_MIN && y == -1;
      if (!over) {
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          q--;
          m += y;
        }
        z = op == JJ_MOD ? m : q;
      }
      break;
    default: /* JJ_POW */
      if (y < 0) {
        *out = (value){.kind = V_FLOAT, .f = pow((double)x, (double)y)};
        return true;
      }
      if (x == 0 || x == 1 || x == -1) {
        z = x == 0 ? y == 0 : x == 1 ? 1 : (y % 2 ? -1 : 1);
        break;
      }
      z = 1; /* |x| >= 2 overflows within 64 factors */
      for (int64_t k = 0; k < y && !over; k++) {
        over = __builtin_mul_overflow(z, x, &z);
      }
      break;
    }
    if (!checked(r, over, name)) {
      return false;
    }
    *out = (value){.kind = V_INT, .i = z};
    return true;
  }
  double x = jj_as_double(a), y = jj_as_double(b), z;
  switch (op) {
  case JJ_ADD:
    z = x + y;
    break;
  case JJ_SUB:
    z = x - y;
    break;
  case JJ_MUL:
    z = x * y;
    break;
  case JJ_POW:
    z = pow(x, y);
    break;
  default:
    if (y == 0) {
      return jj_fail(r, FDY_ERR_INVALID_ARGUMENT, name, "division by zero");
    }
    z = op == JJ_DIV ? x / y : op == JJ_FLOORDIV ? floor(x / y) : fmod(x, y);
    if (op == JJ_MOD && z != 0 && ((z < 0) != (y < 0))) {
      z += y;
    }
  }
  *out = (value){.kind = V_FLOAT, .f = z};
  return true;
}

static bool binary_op(render *r, const jj_expr *e, value *out) {
  value a, b;
  if (!jj_eval(r, e->a, &a) || !jj_eval(r, e->b, &b)) {
    return false;
  }
  switch (e->op) {
  case JJ_CONCAT: {
    value x, y;
    return jj_to_str(r, &a, &x) && jj_to_str(r, &b, &y) &&
           jj_concat_str(r, &x, &y, out);
  }
  case JJ_EQ:
  case JJ_NE:
    *out = (value){.kind = V_BOOL, .b = jj_equal(&a, &b) == (e->op == JJ_EQ)};
    return true;
  case JJ_LT:
  case JJ_LE:
  case JJ_GT:
  case JJ_GE: {
    int c;
    if (jj_is_number(&a) && jj_is_number(&b)) {
      double x = jj_as_double(&a), y = jj_as_double(&b);
      c = (x > y) - (x < y);
    } else if (a.kind == V_STR && b.kind == V_STR) {
      c = compare_str(&a, &b);
    } else {
      return jj_type_error(r, "a comparison", &a, &b);
    }
    bool v = e->op == JJ_LT   ? c < 0
             : e->op == JJ_LE ? c <= 0
             : e->op == JJ_GT ? c > 0
                              : c >= 0;
    *out = (value){.kind = V_BOOL, .b = v};
    return true;
  }
  case JJ_IN:
  case JJ_NOT_IN: {
    bool in;
    if (!contains(r, &b, &a, &in)) {
      return false;
    }
    *out = (value){.kind = V_BOOL, .b = in == (e->op == JJ_IN)};
    return true;
  }
  default:
    return arith(r, e->op, &a, &b, out);
  }
}

/* ---- tests
 * -------------------------------------------------------------------- */

static bool test(render *r, const jj_expr *e, const value *v, bool *out) {
  const char *t = e->str;
  value arg;
  bool given;
  if (!eval_arg(r, e, 0, NULL, &arg, &given)) {
    return false;
  }
  if (!strcmp(t, "defined")) {
    *out = v->kind != V_UNDEF;
  } else if (!strcmp(t, "undefined")) {
    *out = v->kind == V_UNDEF;
  } else if (!strcmp(t, "none")) {
    *out = v->kind == V_NONE;
  } else if (!strcmp(t, "string")) {
    *out = v->kind == V_STR;
  } else if (!strcmp(t, "number")) {
    *out = jj_is_number(v);
  } else if (!strcmp(t, "integer")) {
    *out = v->kind == V_INT;
  } else if (!strcmp(t, "float")) {
    *out = v->kind == V_FLOAT;
  } else if (!strcmp(t, "boolean")) {
    *out = v->kind == V_BOOL;
  } else if (!strcmp(t, "mapping")) {
    *out = v->kind == V_DICT;
  } else if (!strcmp(t, "iterable") || !strcmp(t, "sequence")) {
    *out = v->kind == V_STR || v->kind == V_LIST || v->kind == V_DICT ||
           (v->kind == V_UNDEF && !strcmp(t, "iterable"));
  } else if (!strcmp(t, "true") || !strcmp(t, "false")) {
    *out = v->kind == V_BOOL && v->b == (t[0] == 't');
  } else if (!strcmp(t, "equalto") || !strcmp(t, "eq")) {
    *out = jj_equal(v, &arg);
  } else if (!strcmp(t, "ne")) {
    *out = !jj_equal(v, &arg);
  } else if (!strcmp(t, "odd") || !strcmp(t, "even")) {
    if (v->kind != V_INT && v->kind != V_BOOL) {
      return jj_type_error(r, t, v, NULL);
    }
    *out = (jj_as_int(v) % 2 != 0) == (t[0] == 'o');
  } else if (!strcmp(t, "in")) {
    if (!contains(r, &arg, v, out)) {
      return false;
    }
  } else { /* lower, upper */
    if (!want_str(r, t, v)) {
      return false;
    }
    bool upper = t[0] == 'u', cased = false, ok = true;
    for (size_t k = 0; k < v->len; k++) {
      char c = v->s[k];
      cased = cased || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      ok = ok && !(upper ? c >= 'a' && c <= 'z' : c >= 'A' && c <= 'Z');
    }
    *out = ok && cased;
  }
  if (e->i) {
    *out = !*out;
  }
  return true;
}

/* ---- filters and methods
 * -------------------------------------------------------- */

static bool apply_filter(render *r, const char *f, const jj_expr *e,
                         const value *v, value *out);

/* Items of an iterable for filters and loops: a list as it is, a dict's
 * keys, a string's characters, nothing for undefined. */
bool jj_items_of(render *r, const char *op, const value *v, list **out) {
  if (v->kind == V_LIST) {
    *out = v->l;
    return true;
  }
  value l;
  if (!jj_new_list(r, &l)) {
    return false;
  }
  *out = l.l;
  if (v->kind == V_DICT) {
    for (size_t k = 0; k < v->d->count; k++) {
      if (!jj_list_push(r, l.l, v->d->keys[k])) {
        return false;
      }
    }
    return true;
  }
  if (v->kind == V_STR) {
    for (size_t at = 0; at < v->len;) {
      size_t n = jj_char_len(v->s + at, v->len - at);
      if (!jj_list_push(r, l.l, jj_str_value(v->s + at, n, jj_derived(v)))) {
        return false;
      }
      at += n;
    }
    return true;
  }
  return v->kind == V_UNDEF || jj_type_error(r, op, v, NULL);
}

/* selectattr/rejectattr/select/reject: keep the items whose attribute
 * (or themselves) pass the named test (or are truthy). */
static bool select_items(render *r, const jj_expr *e, const value *v, bool attr,
                         bool keep, value *out) {
  list *in;
  value name = UNDEF, test_name = UNDEF;
  bool given;
  if (!jj_items_of(r, e->str, v, &in) || !jj_new_list(r, out)) {
    return false;
  }
  size_t first = 0;
  if (attr) {
    if (!eval_arg(r, e, 0, NULL, &name, &given) ||
        !want_str(r, e->str, &name)) {
      return false;
    }
    first = 1;
  }
  if (!eval_arg(r, e, first, NULL, &test_name, &given)) {
    return false;
  }
  if (given && !want_str(r, e->str, &test_name)) {
    return false;
  }
  /* the test as an expression node with the remaining arguments */
  jj_expr t = {.kind = JJ_E_TEST, .line = e->line};
  if (given) {
    char *s = jj_render_alloc(r, test_name.len + 1);
    if (!s) {
      return false;
    }
    memcpy(s, test_name.s, test_name.len);
    t.str = s;
    bool found = jj_listed(jj_tests, jj_test_count, s, test_name.len);
    if (!found) {
      return jj_fail(r, FDY_ERR_UNSUPPORTED, "test",
                     "%s: the test '%s' is outside the Jinja that Foundry "
                     "interprets",
                     e->str, s);
    }
    size_t skip = first + 1, positional = 0;
    t.args = jj_render_alloc(r, (e->nargs + 1) * sizeof *t.args);
    if (!t.args) {
      return false;
    }
    for (size_t k = 0; k < e->nargs; k++) {
      if (!e->args[k].name && positional++ < skip) {
        continue;
      }
      t.args[t.nargs++] = e->args[k];
    }
  }
  for (size_t k = 0; k < in->count; k++) {
    value it = in->items[k], subject = it;
    if (attr) {
      if (!jj_item(r, &it, &name, &subject)) {
        return false;
      }
    }
    bool pass;
    if (given) {
      if (!test(r, &t, &subject, &pass)) {
        return false;
      }
    } else {
      pass = jj_truthy(&subject);
    }
    if (pass == keep && !jj_list_push(r, out->l, it)) {
      return false;
    }
  }
  return true;
}

static bool join(render *r, const jj_expr *e, const value *v, value *out) {
  list *in;
  value sep = jj_str_value("", 0, FROM_TEMPLATE), attr;
  bool given;
  if (!jj_items_of(r, "join", v, &in) ||
      !eval_arg(r, e, 0, "d", &sep, &given) ||
      (given && !want_str(r, "join", &sep)) ||
      !eval_arg(r, e, 1, "attribute", &attr, &given)) {
    return false;
  }
  if (!given) {
    attr = UNDEF;
  }
  if (sep.kind != V_STR) {
    sep = jj_str_value("", 0, FROM_TEMPLATE);
  }
  value acc = jj_str_value("", 0, FROM_TEMPLATE);
  for (size_t k = 0; k < in->count; k++) {
    value it = in->items[k], s;
    if (attr.kind != V_UNDEF && !jj_item(r, &in->items[k], &attr, &it)) {
      return false;
    }
    if ((k && !jj_concat_str(r, &acc, &sep, &acc)) || !jj_to_str(r, &it, &s) ||
        !jj_concat_str(r, &acc, &s, &acc)) {
      return false;
    }
  }
  *out = acc;
  return true;
}

/* Python's str.isspace() characters in UTF-8 beyond ASCII. */
static const char *const unicode_spaces[] = {
    "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80",
    "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84",
    "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88",
    "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9",
    "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};

/* Bytes of the whitespace character at the start (at_end false) or the end
 * of the n bytes at p; 0 when there is none. */
static size_t space_bytes(const char *p, size_t n, bool at_end) {
  if (n == 0) {
    return 0;
  }
  unsigned char c = (unsigned char)(at_end ? p[n - 1] : p[0]);
  if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) {
    return 1;
  }
  for (size_t i = 0; i < sizeof unicode_spaces / sizeof unicode_spaces[0];
       i++) {
    size_t k = strlen(unicode_spaces[i]);
    if (k <= n && memcmp(at_end ? p + n - k : p, unicode_spaces[i], k) == 0) {
      return k;
    }
  }
  return 0;
}

/* Bytes of a character of chars at the start or end of p (0: none). */
static size_t char_in(const char *p, size_t n, bool at_end,
                      const value *chars) {
  if (!chars) {
    return space_bytes(p, n, at_end);
  }
  for (size_t i = 0; i < chars->len;) {
    size_t k = jj_char_len(chars->s + i, chars->len - i);
    if (k <= n && memcmp(at_end ? p + n - k : p, chars->s + i, k) == 0) {
      return k;
    }
    i += k;
  }
  return 0;
}

/* Python's strip/lstrip/rstrip (chars NULL: whitespace). */
static bool strip(const value *v, const value *chars, bool left, bool right,
                  value *out) {
  size_t start = 0, end = v->len, k;
  while (left && (k = char_in(v->s + start, end - start, false, chars)) > 0) {
    start += k;
  }
  while (right && (k = char_in(v->s + start, end - start, true, chars)) > 0) {
    end -= k;
  }
  *out = jj_str_value(v->s + start, end - start, v->origin);
  if (v->origin == FROM_BOTH) {
    out->mask = v->mask + start;
  }
  return true;
}

static bool case_map(render *r, const value *v, bool upper, value *out) {
  char *s = jj_new_str(r, v->len, jj_derived(v), out);
  if (!s) {
    return false;
  }
  for (size_t k = 0; k < v->len; k++) {
    char c = v->s[k];
    s[k] = upper && c >= 'a' && c <= 'z'    ? (char)(c - 32)
           : !upper && c >= 'A' && c <= 'Z' ? (char)(c + 32)
                                            : c;
  }
  return true;
}

static bool replace(render *r, const value *v, const value *old,
                    const value *new, int64_t count, value *out) {
  sbuf b = {.r = r,
            .data = v->origin != FROM_TEMPLATE || new->origin != FROM_TEMPLATE};
  size_t at = 0;
  int64_t done = 0;
  if (old->len == 0) { /* between every character */
    for (;;) {
      if ((count < 0 || done < count) && jj_put(&b, new->s, new->len)) {
        done++;
      } else if (b.r->status != FDY_OK) {
        return false;
      }
      if (at >= v->len) {
        break;
      }
      size_t n = jj_char_len(v->s + at, v->len - at);
      if (!jj_put(&b, v->s + at, n)) {
        return false;
      }
      at += n;
    }
  } else {
    while (at < v->len) {
      const char *hit = count >= 0 && done >= count
                            ? NULL
                            : memmem(v->s + at, v->len - at, old->s, old->len);
      size_t upto = hit ? (size_t)(hit - v->s) : v->len;
      if (!jj_put(&b, v->s + at, upto - at) ||
          (hit && !jj_put(&b, new->s, new->len))) {
        return false;
      }
      at = hit ? upto + old->len : v->len;
      done += hit != NULL;
    }
  }
  *out = jj_sbuf_value(&b);
  return out->kind == V_STR;
}

/* Python's str.split(sep, maxsplit) */
static bool split(render *r, const value *v, const value *sep, int64_t max,
                  value *out) {
  if (!jj_new_list(r, out)) {
    return false;
  }
  uint8_t o = jj_derived(v);
  size_t at = 0;
  int64_t done = 0;
  if (!sep) {
    size_t k;
    for (;;) {
      while ((k = space_bytes(v->s + at, v->len - at, false)) > 0) {
        at += k;
      }
      if (at >= v->len) {
        return true;
      }
      if (max >= 0 && done >= max) {
        size_t end = v->len;
        while ((k = space_bytes(v->s + at, end - at, true)) > 0) {
          end -= k;
        }
        return jj_list_push(r, out->l, jj_str_value(v->s + at, end - at, o));
      }
      size_t end = at;
      while (end < v->len && !space_bytes(v->s + end, v->len - end, false)) {
        end += jj_char_len(v->s + end, v->len - end);
      }
      if (!jj_list_push(r, out->l, jj_str_value(v->s + at, end - at, o))) {
        return false;
      }
      done++;
      at = end;
    }
  }
  if (sep->len == 0) {
    return jj_fail(r, FDY_ERR_INVALID_ARGUMENT, "split", "empty separator");
  }
  for (;;) {
    const char *hit = max >= 0 && done >= max
                          ? NULL
                          : memmem(v->s + at, v->len - at, sep->s, sep->len);
    size_t upto = hit ? (size_t)(hit - v->s) : v->len;
    if (!jj_list_push(r, out->l, jj_str_value(v->s + at, upto - at, o))) {
      return false;
    }
    if (!hit) {
      return true;
    }
    at = upto + sep->len;
    done++;
  }
}

static bool int_arg(render *r, const char *op, const value *v, int64_t dflt,
                    int64_t *out) {
  if (v->kind == V_UNDEF || v->kind == V_NONE) {
    *out = dflt;
    return true;
  }
  if (v->kind != V_INT && v->kind != V_BOOL) {
    return jj_type_error(r, op, v, NULL);
  }
  *out = jj_as_int(v);
  return true;
}

static bool method(render *r, const jj_expr *call, value *out) {
  const jj_expr *attr = call->a;
  const char *m = attr->str;
  value self, a0, a1, a2;
  bool g0, g1, g2;
  if (!jj_eval(r, attr->a, &self) || !eval_arg(r, call, 0, NULL, &a0, &g0) ||
      !eval_arg(r, call, 1, NULL, &a1, &g1) ||
      !eval_arg(r, call, 2, NULL, &a2, &g2)) {
    return false;
  }
  if (self.kind == V_DICT) {
    if (!strcmp(m, "get")) {
      const value *v = jj_dict_find(self.d, &a0);
      *out = v ? *v : g1 ? a1 : NONE;
      return true;
    }
    bool keys = !strcmp(m, "keys"), vals = !strcmp(m, "values");
    if (keys || vals || !strcmp(m, "items")) {
      if (!jj_new_list(r, out)) {
        return false;
      }
      for (size_t k = 0; k < self.d->count; k++) {
        value it;
        if (keys || vals) {
          it = keys ? self.d->keys[k] : self.d->vals[k];
        } else if (!jj_new_list(r, &it) ||
                   !jj_list_push(r, it.l, self.d->keys[k]) ||
                   !jj_list_push(r, it.l, self.d->vals[k])) {
          return false;
        }
        if (!jj_list_push(r, out->l, it)) {
          return false;
        }
      }
      return true;
    }
  }
  if (self.kind != V_STR) {
    return jj_type_error(r, m, &self, NULL);
  }
  if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
    bool start = m[0] == 's';
    list one = {.items = &a0, .count = 1};
    list *cands = a0.kind == V_LIST ? a0.l : &one;
    *out = (value){.kind = V_BOOL};
    for (size_t k = 0; k < cands->count; k++) {
      const value *c = &cands->items[k];
      if (!want_str(r, m, c)) {
        return false;
      }
      out->b = out->b || (c->len <= self.len &&
                          memcmp(start ? self.s : self.s + self.len - c->len,
                                 c->s, c->len) == 0);
    }
    return true;
  }
  if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
    if (g0 && a0.kind != V_NONE && !want_str(r, m, &a0)) {
      return false;
    }
    const value *chars = g0 && a0.kind == V_STR ? &a0 : NULL;
    return strip(&self, chars, m[0] != 'r', m[0] != 'l', out);
  }
  if (!strcmp(m, "split")) {
    int64_t max = -1;
    if ((g0 && a0.kind != V_NONE && !want_str(r, m, &a0)) ||
        !int_arg(r, m, &a1, -1, &max)) {
      return false;
    }
    return split(r, &self, a0.kind == V_STR ? &a0 : NULL, max, out);
  }
  if (!strcmp(m, "replace")) {
    int64_t count = -1;
    return want_str(r, m, &a0) && want_str(r, m, &a1) &&
           int_arg(r, m, &a2, -1, &count) &&
           replace(r, &self, &a0, &a1, count, out);
  }
  if (!strcmp(m, "upper") || !strcmp(m, "lower")) {
    return case_map(r, &self, m[0] == 'u', out);
  }
  return jj_type_error(r, m, &self, NULL);
}

/* One filter's call: the filter's name, the call's arguments (NULL for a
 * filter named by map), the value filtered, and the first positional argument
 * evaluated up front (a0, given when the call passed one). Each filter fills
 * *out, or fails through jj_fail() and returns false. */
typedef struct {
  const char *f;
  const jj_expr *e;
  const value *v;
  value a0;
  bool given;
} filter_call;

typedef bool (*filter_fn)(render *r, const filter_call *c, value *out);

/* safe: the value as it is. */
static bool filter_safe(render *r, const filter_call *c, value *out) {
  (void)r;
  *out = *c->v;
  return true;
}

/* trim: a string without surrounding white space, or the given chars. */
static bool filter_trim(render *r, const filter_call *c, value *out) {
  if (!want_str(r, c->f, c->v) ||
      (c->given && c->a0.kind != V_NONE && !want_str(r, c->f, &c->a0))) {
    return false;
  }
  return strip(c->v, c->given && c->a0.kind == V_STR ? &c->a0 : NULL, true,
               true, out);
}

/* length, count: characters of a string, items of a list or dict, 0 for
 * undefined. */
static bool filter_length(render *r, const filter_call *c, value *out) {
  const value *v = c->v;
  size_t n = v->kind == V_STR    ? jj_char_count(v->s, v->len)
             : v->kind == V_LIST ? v->l->count
             : v->kind == V_DICT ? v->d->count
                                 : 0;
  if (v->kind != V_STR && v->kind != V_LIST && v->kind != V_DICT &&
      v->kind != V_UNDEF) {
    return jj_type_error(r, c->f, v, NULL);
  }
  *out = (value){.kind = V_INT, .i = (int64_t)n};
  return true;
}

/* tojson(indent=, sort_keys=): the value as JSON text, indent capped at 64;
 * ensure_ascii is accepted and ignored, other named arguments fail. */
static bool filter_tojson(render *r, const filter_call *c, value *out) {
  const jj_expr *e = c->e;
  value indent, sort = UNDEF;
  bool g_indent, g_sort;
  if (!eval_arg(r, e, 0, "indent", &indent, &g_indent) ||
      !eval_arg(r, e, 99, "sort_keys", &sort, &g_sort)) {
    return false;
  }
  for (size_t k = 0; e && k < e->nargs; k++) {
    const char *n = e->args[k].name;
    if (n && strcmp(n, "indent") && strcmp(n, "sort_keys") &&
        strcmp(n, "ensure_ascii")) {
      return jj_fail(r, FDY_ERR_UNSUPPORTED, "tojson",
                     "tojson's argument '%s' is outside what Foundry "
                     "interprets",
                     n);
    }
  }
  int64_t ind = -1;
  if (g_indent && indent.kind != V_NONE &&
      !int_arg(r, c->f, &indent, -1, &ind)) {
    return false;
  }
  if (ind > 64) {
    ind = 64;
  }
  sbuf b = {.r = r};
  if (!jj_json_of(&b, c->v, (int)ind, jj_truthy(&sort), 0)) {
    return false;
  }
  *out = jj_sbuf_value(&b);
  out->origin = FROM_DATA;
  return out->kind == V_STR;
}

/* default, d (value, boolean=): the given value (or "") when the value is
 * undefined, or with boolean when it is falsy. */
static bool filter_default(render *r, const filter_call *c, value *out) {
  value boolean = UNDEF;
  bool g;
  if (c->e && !eval_arg(r, c->e, 1, "boolean", &boolean, &g)) {
    return false;
  }
  bool use = c->v->kind == V_UNDEF || (jj_truthy(&boolean) && !jj_truthy(c->v));
  *out = use ? (c->given ? c->a0 : jj_str_value("", 0, FROM_TEMPLATE)) : *c->v;
  return true;
}

/* upper, lower: the value's string in that case. */
static bool filter_case(render *r, const filter_call *c, value *out) {
  value s;
  return jj_to_str(r, c->v, &s) && case_map(r, &s, c->f[0] == 'u', out);
}

/* string: the value as str() writes it. */
static bool filter_string(render *r, const filter_call *c, value *out) {
  return jj_to_str(r, c->v, out);
}

/* list: a new list of the value's items. */
static bool filter_list(render *r, const filter_call *c, value *out) {
  list *in;
  if (!jj_items_of(r, c->f, c->v, &in) || !jj_new_list(r, out)) {
    return false;
  }
  for (size_t k = 0; k < in->count; k++) {
    if (!jj_list_push(r, out->l, in->items[k])) {
      return false;
    }
  }
  return true;
}

/* join(sep, attribute=): see join(). */
static bool filter_join(render *r, const filter_call *c, value *out) {
  return join(r, c->e, c->v, out);
}

/* first, last: that item, undefined for no items. */
static bool filter_first_last(render *r, const filter_call *c, value *out) {
  list *in;
  if (!jj_items_of(r, c->f, c->v, &in)) {
    return false;
  }
  *out = in->count == 0   ? UNDEF
         : c->f[0] == 'f' ? in->items[0]
                          : in->items[in->count - 1];
  return true;
}

/* selectattr, rejectattr: see select_items(). */
static bool filter_selectattr(render *r, const filter_call *c, value *out) {
  return select_items(r, c->e, c->v, true, c->f[0] == 's', out);
}

/* select, reject: see select_items(). */
static bool filter_select(render *r, const filter_call *c, value *out) {
  return select_items(r, c->e, c->v, false, c->f[0] == 's', out);
}

/* map(attribute=) or map('filter'): each item's attribute, or each item
 * through one of the argument-less filters below. */
static bool filter_map(render *r, const filter_call *c, value *out) {
  list *in;
  value attr;
  bool g_attr;
  if (!jj_items_of(r, c->f, c->v, &in) ||
      !eval_arg(r, c->e, 99, "attribute", &attr, &g_attr) ||
      !jj_new_list(r, out)) {
    return false;
  }
  const value *a0 = &c->a0;
  if (!g_attr && !(c->given && a0->kind == V_STR)) {
    return jj_fail(r, FDY_ERR_UNSUPPORTED, "map",
                   "map needs attribute= or a filter name");
  }
  static const char *const simple[] = {
      "trim",  "length", "count", "tojson", "upper", "lower", "string", "list",
      "first", "last",   "items", "int",    "float", "abs",   "safe"};
  char name[16] = "";
  if (!g_attr) {
    bool found = false;
    for (size_t k = 0; k < sizeof simple / sizeof *simple; k++) {
      if (strlen(simple[k]) == a0->len && !memcmp(simple[k], a0->s, a0->len)) {
        snprintf(name, sizeof name, "%s", simple[k]);
        found = true;
      }
    }
    if (!found) {
      return jj_fail(r, FDY_ERR_UNSUPPORTED, "map",
                     "map with the filter '%.*s' is outside the Jinja that "
                     "Foundry interprets",
                     (int)(a0->len > 40 ? 40 : a0->len), a0->s);
    }
  }
  for (size_t k = 0; k < in->count; k++) {
    value it;
    if (!(g_attr ? jj_item(r, &in->items[k], &attr, &it)
                 : apply_filter(r, name, NULL, &in->items[k], &it)) ||
        !jj_list_push(r, out->l, it)) {
      return false;
    }
  }
  return true;
}

/* items: a dict's [key, value] pairs; an empty list for undefined. */
static bool filter_items(render *r, const filter_call *c, value *out) {
  const value *v = c->v;
  if (v->kind == V_UNDEF) {
    return jj_new_list(r, out);
  }
  if (v->kind != V_DICT) {
    return jj_type_error(r, c->f, v, NULL);
  }
  if (!jj_new_list(r, out)) {
    return false;
  }
  for (size_t k = 0; k < v->d->count; k++) {
    value pair;
    if (!jj_new_list(r, &pair) || !jj_list_push(r, pair.l, v->d->keys[k]) ||
        !jj_list_push(r, pair.l, v->d->vals[k]) ||
        !jj_list_push(r, out->l, pair)) {
      return false;
    }
  }
  return true;
}

/* int, float: the number, a string parsed as one, or 0 as jinja2 gives. */
static bool filter_number(render *r, const filter_call *c, value *out) {
  (void)r;
  const value *v = c->v;
  bool to_int = c->f[0] == 'i';
  double d = 0;
  if (jj_is_number(v)) {
    d = jj_as_double(v);
    if (to_int && v->kind != V_FLOAT) {
      *out = (value){.kind = V_INT, .i = jj_as_int(v)};
      return true;
    }
  } else if (v->kind == V_STR) {
    char buf[64];
    size_t n = v->len < sizeof buf - 1 ? v->len : sizeof buf - 1;
    memcpy(buf, v->s, n);
    buf[n] = '\0';
    char *end;
    d = strtod(buf, &end);
    if (end == buf) {
      d = 0; /* jinja2: the default, 0 */
    }
  }
  if (to_int) {
    if (!(d > -9.2e18 && d < 9.2e18)) {
      d = 0;
    }
    *out = (value){.kind = V_INT, .i = (int64_t)d};
  } else {
    *out = (value){.kind = V_FLOAT, .f = d};
  }
  return true;
}

/* abs: a number's magnitude; abs of INT64_MIN fails as an overflow. */
static bool filter_abs(render *r, const filter_call *c, value *out) {
  const value *v = c->v;
  if (v->kind == V_FLOAT) {
    *out = (value){.kind = V_FLOAT, .f = fabs(v->f)};
    return true;
  }
  if (v->kind != V_INT && v->kind != V_BOOL) {
    return jj_type_error(r, c->f, v, NULL);
  }
  int64_t i = jj_as_int(v);
  if (!checked(r, i == INT64_MIN, "abs")) {
    return false;
  }
  *out = (value){.kind = V_INT, .i = i < 0 ? -i : i};
  return true;
}

/* replace(old, new, count=): see replace(). */
static bool filter_replace(render *r, const filter_call *c, value *out) {
  value s, b, n;
  bool gb, gn;
  int64_t count = -1;
  return jj_to_str(r, c->v, &s) && eval_arg(r, c->e, 1, NULL, &b, &gb) &&
         eval_arg(r, c->e, 2, "count", &n, &gn) && want_str(r, c->f, &c->a0) &&
         want_str(r, c->f, &b) && int_arg(r, c->f, &n, -1, &count) &&
         replace(r, &s, &c->a0, &b, count, out);
}

static const struct {
  const char *name;
  filter_fn fn;
} filters[] = {
    {"safe", filter_safe},
    {"trim", filter_trim},
    {"length", filter_length},
    {"count", filter_length},
    {"tojson", filter_tojson},
    {"default", filter_default},
    {"d", filter_default},
    {"upper", filter_case},
    {"lower", filter_case},
    {"string", filter_string},
    {"list", filter_list},
    {"join", filter_join},
    {"first", filter_first_last},
    {"last", filter_first_last},
    {"selectattr", filter_selectattr},
    {"rejectattr", filter_selectattr},
    {"select", filter_select},
    {"reject", filter_select},
    {"map", filter_map},
    {"items", filter_items},
    {"int", filter_number},
    {"float", filter_number},
    {"abs", filter_abs},
};

/* Applies the filter named f (one the parser accepted; any name not in the
 * table is replace) with the call's arguments e (NULL: none) to v. The first
 * positional argument is evaluated before the filter runs. */
static bool apply_filter(render *r, const char *f, const jj_expr *e,
                         const value *v, value *out) {
  filter_call c = {.f = f, .e = e, .v = v, .a0 = UNDEF};
  if (e && !eval_arg(r, e, 0, NULL, &c.a0, &c.given)) {
    return false;
  }
  for (size_t k = 0; k < sizeof filters / sizeof *filters; k++) {
    if (!strcmp(f, filters[k].name)) {
      return filters[k].fn(r, &c, out);
    }
  }
  return filter_replace(r, &c, out);
}

/* ---- calls of global functions
 * ------------------------------------------------ */

static bool function(render *r, const jj_expr *call, value *out) {
  const char *name = call->a->str;
  if (!strcmp(name, "namespace")) {
    if (!jj_new_dict(r, V_NS, out)) {
      return false;
    }
    for (size_t k = 0; k < call->nargs; k++) {
      value v;
      if (!call->args[k].name) {
        return jj_fail(r, FDY_ERR_UNSUPPORTED, "namespace",
                       "namespace() takes only name=value arguments here");
      }
      if (!jj_eval(r, call->args[k].value, &v) ||
          !jj_dict_set(r, out->d,
                       jj_str_value(call->args[k].name,
                                    strlen(call->args[k].name), FROM_TEMPLATE),
                       v)) {
        return false;
      }
    }
    return true;
  }
  value a0;
  bool given;
  if (!eval_arg(r, call, 0, NULL, &a0, &given)) {
    return false;
  }
  if (!strcmp(name, "raise_exception")) {
    value msg;
    if (!jj_to_str(r, &a0, &msg)) {
      return false;
    }
    return jj_fail(r, FDY_ERR_INVALID_ARGUMENT, "raise_exception",
                   "the template refuses the conversation: %.*s",
                   (int)(msg.len > 400 ? 400 : msg.len), msg.s);
  }
  /* strftime_now(format) with the local time, as datetime.now() */
  if (!want_str(r, name, &a0)) {
    return false;
  }
  time_t now = time(NULL);
  struct tm tm;
  char buf[256];
  if (!localtime_r(&now, &tm) || a0.len > 128) {
    return jj_fail(r, FDY_ERR_INVALID_ARGUMENT, name,
                   "strftime_now cannot format the time with this format");
  }
  char fmt[130];
  memcpy(fmt, a0.s, a0.len);
  fmt[a0.len] = '\0';
  size_t n = strftime(buf, sizeof buf, fmt, &tm);
  char *s = jj_new_str(r, n, FROM_DATA, out);
  if (s) {
    memcpy(s, buf, n);
  }
  return s != NULL;
}

/* obj.name: the attribute or key of a defined value; a missing one is
 * undefined and keeps the name for its error. */
static bool eval_attr(render *r, const jj_expr *e, value *out) {
  value obj;
  if (!jj_eval(r, e->a, &obj)) {
    return false;
  }
  r->line = e->line;
  if (obj.kind == V_UNDEF) {
    return jj_type_error(r, "an attribute", &obj, NULL);
  }
  value key = jj_str_value(e->str, e->len, FROM_TEMPLATE);
  if (!jj_item(r, &obj, &key, out)) {
    return false;
  }
  if (out->kind == V_UNDEF) {
    out->s = e->str;
  }
  return true;
}

/* -x, +x of a number; -INT64_MIN fails as an overflow. */
static bool eval_sign(render *r, const jj_expr *e, value *out) {
  value v;
  if (!jj_eval(r, e->a, &v)) {
    return false;
  }
  if (!jj_is_number(&v)) {
    return jj_type_error(r, e->kind == JJ_E_NEG ? "unary -" : "unary +", &v,
                         NULL);
  }
  if (v.kind == V_FLOAT) {
    *out = (value){.kind = V_FLOAT, .f = e->kind == JJ_E_NEG ? -v.f : v.f};
    return true;
  }
  int64_t i = jj_as_int(&v);
  if (e->kind == JJ_E_NEG && !checked(r, i == INT64_MIN, "unary -")) {
    return false;
  }
  *out = (value){.kind = V_INT, .i = e->kind == JJ_E_NEG ? -i : i};
  return true;
}

/* [a, b, ...]: a new list of the items evaluated in order. */
static bool eval_list(render *r, const jj_expr *e, value *out) {
  if (!jj_new_list(r, out)) {
    return false;
  }
  for (size_t k = 0; k < e->nargs; k++) {
    value v;
    if (!jj_eval(r, e->args[k].value, &v) || !jj_list_push(r, out->l, v)) {
      return false;
    }
  }
  return true;
}

/* {k: v, ...}: a new dict, keys and values evaluated in order (args holds
 * them alternately); a later key replaces an earlier one. */
static bool eval_dict(render *r, const jj_expr *e, value *out) {
  if (!jj_new_dict(r, V_DICT, out)) {
    return false;
  }
  for (size_t k = 0; k + 1 < e->nargs; k += 2) {
    value key, v;
    if (!jj_eval(r, e->args[k].value, &key) ||
        !jj_eval(r, e->args[k + 1].value, &v) ||
        !jj_dict_set(r, out->d, key, v)) {
      return false;
    }
  }
  return true;
}

/* Evaluates the expression e into *out (values live in the render's arena);
 * false when it failed, with the error in the render. */
bool jj_eval(render *r, const jj_expr *e, value *out) {
  r->line = e->line;
  switch (e->kind) {
  case JJ_E_STR:
    *out = jj_str_value(e->str, e->len, FROM_TEMPLATE);
    return true;
  case JJ_E_INT:
    *out = (value){.kind = V_INT, .i = e->i};
    return true;
  case JJ_E_FLOAT:
    *out = (value){.kind = V_FLOAT, .f = e->f};
    return true;
  case JJ_E_BOOL:
    *out = (value){.kind = V_BOOL, .b = e->i != 0};
    return true;
  case JJ_E_NONE:
    *out = NONE;
    return true;
  case JJ_E_NAME: {
    const value *v = jj_lookup(r, e->str);
    *out = v ? *v : (value){.kind = V_UNDEF, .s = e->str};
    return true;
  }
  case JJ_E_ATTR:
    return eval_attr(r, e, out);
  case JJ_E_ITEM: {
    value obj, key;
    if (!jj_eval(r, e->a, &obj) || !jj_eval(r, e->b, &key)) {
      return false;
    }
    r->line = e->line;
    return jj_item(r, &obj, &key, out);
  }
  case JJ_E_SLICE: {
    value obj;
    if (!jj_eval(r, e->a, &obj)) {
      return false;
    }
    r->line = e->line;
    return slice(r, e, &obj, out);
  }
  case JJ_E_CALL:
    return e->a->kind == JJ_E_ATTR ? method(r, e, out) : function(r, e, out);
  case JJ_E_FILTER: {
    value v;
    if (!jj_eval(r, e->a, &v)) {
      return false;
    }
    r->line = e->line;
    return apply_filter(r, e->str, e, &v, out);
  }
  case JJ_E_TEST: {
    value v;
    if (!jj_eval(r, e->a, &v)) {
      return false;
    }
    *out = (value){.kind = V_BOOL};
    return test(r, e, &v, &out->b);
  }
  case JJ_E_NOT: {
    value v;
    if (!jj_eval(r, e->a, &v)) {
      return false;
    }
    *out = (value){.kind = V_BOOL, .b = !jj_truthy(&v)};
    return true;
  }
  case JJ_E_NEG:
  case JJ_E_POS:
    return eval_sign(r, e, out);
  case JJ_E_BINARY:
    return binary_op(r, e, out);
  case JJ_E_AND:
  case JJ_E_OR:
    if (!jj_eval(r, e->a, out)) {
      return false;
    }
    if (jj_truthy(out) == (e->kind == JJ_E_OR)) {
      return true;
    }
    return jj_eval(r, e->b, out);
  case JJ_E_COND: {
    value c;
    if (!jj_eval(r, e->a, &c)) {
      return false;
    }
    if (jj_truthy(&c)) {
      return jj_eval(r, e->b, out);
    }
    *out = UNDEF;
    return !e->c || jj_eval(r, e->c, out);
  }
  case JJ_E_LIST:
    return eval_list(r, e, out);
  default: /* JJ_E_DICT */
    return eval_dict(r, e, out);
  }
}
