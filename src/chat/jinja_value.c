/* The Jinja renderer's values: failing a render and allocating in its
 * arena, strings that remember whether their bytes come from the template
 * (special tokens are tokens there) or from the caller's data, lists and
 * dicts, and Python's semantics of them where templates depend on them:
 * truthiness, equality, str() and repr() (floats as Python writes them), and
 * json.dumps as transformers' tojson calls it. The types are in
 * jinja_render_internal.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_render_internal.h"

/* ---- errors and memory -------------------------------------------------- */

bool jj_fail(render *r, fdy_status kind, const char *name, const char *fmt,
             ...) {
  if (r->status != FDY_OK) {
    return false;
  }
  r->status = kind;
  if (r->err) {
    char msg[FDY_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fdy_error_setf(r->err, kind, name, 0, 0, "chat template line %d: %s",
                   r->line, msg);
    r->err->line = r->line;
  }
  return false;
}

void *jj_render_alloc(render *r, size_t n) {
  bool over = false;
  void *p = jj_alloc(&r->arena, n, &over);
  if (!p) {
    if (over) {
      jj_fail(r, FDY_ERR_BUDGET, NULL,
              "rendering needs more than %llu MiB of values",
              (unsigned long long)(RENDER_LIMIT >> 20));
    } else {
      jj_fail(r, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
    }
  }
  return p;
}

/* A new array of cap elements of size bytes holding the first count
 * (at most cap) of old; NULL as alloc. */
void *jj_grow(render *r, const void *old, size_t count, size_t cap,
              size_t size) {
  void *p = jj_render_alloc(r, cap * size);
  if (p && count) {
    memcpy(p, old, count * size);
  }
  return p;
}

static const char *kind_name(const value *v) {
  static const char *const names[] = {"undefined", "none",   "bool",    "int",
                                      "float",     "string", "list",    "dict",
                                      "namespace", "loop",   "function"};
  return names[v->kind];
}

bool jj_type_error(render *r, const char *op, const value *a, const value *b) {
  if (a->kind == V_UNDEF && a->s) {
    return jj_fail(r, FDY_ERR_INVALID_ARGUMENT, op, "'%s' is undefined (in %s)",
                   a->s, op);
  }
  if (b && b->kind == V_UNDEF && b->s) {
    return jj_fail(r, FDY_ERR_INVALID_ARGUMENT, op, "'%s' is undefined (in %s)",
                   b->s, op);
  }
  if (b) {
    return jj_fail(r, FDY_ERR_INVALID_ARGUMENT, op,
                   "%s is not defined between %s and %s", op, kind_name(a),
                   kind_name(b));
  }
  return jj_fail(r, FDY_ERR_INVALID_ARGUMENT, op, "%s is not defined on %s", op,
                 kind_name(a));
}

/* ---- strings ------------------------------------------------------------- */

value jj_str_value(const char *s, size_t len, uint8_t origin) {
  return (value){.kind = V_STR, .s = s, .len = len, .origin = origin};
}

/* A new string of len bytes (filled by the caller) with one origin. */
char *jj_new_str(render *r, size_t len, uint8_t origin, value *out) {
  char *s = jj_render_alloc(r, len + 1);
  if (s) {
    *out = jj_str_value(s, len, origin);
  }
  return s;
}

uint8_t jj_origin_at(const value *v, size_t i) {
  return v->origin == FROM_BOTH ? v->mask[i] : v->origin;
}

/* a + b keeping each byte's origin */
bool jj_concat_str(render *r, const value *a, const value *b, value *out) {
  size_t n = a->len + b->len;
  if (n < a->len) {
    return jj_fail(r, FDY_ERR_OVERFLOW, NULL, "string too long");
  }
  uint8_t origin = a->len == 0   ? b->origin
                   : b->len == 0 ? a->origin
                   : a->origin == b->origin && a->origin != FROM_BOTH
                       ? a->origin
                       : FROM_BOTH;
  value v;
  char *s = jj_new_str(r, n, origin, &v);
  if (!s) {
    return false;
  }
  memcpy(s, a->s, a->len);
  memcpy(s + a->len, b->s, b->len);
  if (origin == FROM_BOTH) {
    uint8_t *m = jj_render_alloc(r, n);
    if (!m) {
      return false;
    }
    for (size_t k = 0; k < a->len; k++) {
      m[k] = jj_origin_at(a, k);
    }
    for (size_t k = 0; k < b->len; k++) {
      m[a->len + k] = jj_origin_at(b, k);
    }
    v.mask = m;
  }
  *out = v;
  return true;
}

/* A string derived from v by a transformation (strip, slice, replace...):
 * from the template only when all of v is. */
uint8_t jj_derived(const value *v) {
  return v->origin == FROM_TEMPLATE ? FROM_TEMPLATE : FROM_DATA;
}

size_t jj_char_len(const char *s, size_t n) {
  size_t k = fdy_utf8_char_length(s, n);
  return k ? k : 1; /* a byte that starts no character counts as one */
}

size_t jj_char_count(const char *s, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i += jj_char_len(s + i, n - i)) {
    c++;
  }
  return c;
}

/* ---- building values ---------------------------------------------------- */

bool jj_list_push(render *r, list *l, value v) {
  if (l->count == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 4;
    value *items = jj_grow(r, l->items, l->count, cap, sizeof *items);
    if (!items) {
      return false;
    }
    l->items = items;
    l->cap = cap;
  }
  l->items[l->count++] = v;
  return true;
}

bool jj_new_list(render *r, value *out) {
  list *l = jj_render_alloc(r, sizeof *l);
  if (!l) {
    return false;
  }
  *out = (value){.kind = V_LIST, .l = l};
  return true;
}

value *jj_dict_find(const dict *d, const value *key) {
  for (size_t k = 0; k < d->count; k++) {
    if (jj_equal(&d->keys[k], key)) {
      return &d->vals[k];
    }
  }
  return NULL;
}

bool jj_dict_set(render *r, dict *d, value key, value val) {
  value *slot = jj_dict_find(d, &key);
  if (slot) {
    *slot = val;
    return true;
  }
  if (d->count == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 4;
    value *keys = jj_grow(r, d->keys, d->count, cap, sizeof *keys);
    value *vals = jj_grow(r, d->vals, d->count, cap, sizeof *vals);
    if (!keys || !vals) {
      return false;
    }
    d->keys = keys;
    d->vals = vals;
    d->cap = cap;
  }
  d->keys[d->count] = key;
  d->vals[d->count++] = val;
  return true;
}

bool jj_new_dict(render *r, vkind kind, value *out) {
  dict *d = jj_render_alloc(r, sizeof *d);
  if (!d) {
    return false;
  }
  *out = (value){.kind = kind, .d = d};
  return true;
}

/* ---- Python semantics -----------------------------------------------------
 */

bool jj_truthy(const value *v) {
  switch (v->kind) {
  case V_UNDEF:
  case V_NONE:
    return false;
  case V_BOOL:
    return v->b;
  case V_INT:
    return v->i != 0;
  case V_FLOAT:
    return v->f != 0;
  case V_STR:
    return v->len > 0;
  case V_LIST:
    return v->l->count > 0;
  case V_DICT:
    return v->d->count > 0;
  default:
    return true;
  }
}

bool jj_is_number(const value *v) {
  return v->kind == V_INT || v->kind == V_FLOAT || v->kind == V_BOOL;
}

double jj_as_double(const value *v) {
  return v->kind == V_FLOAT ? v->f : v->kind == V_INT ? (double)v->i : v->b;
}

int64_t jj_as_int(const value *v) {
  return v->kind == V_INT ? v->i : v->b;
}

bool jj_equal(const value *a, const value *b) {
  if (jj_is_number(a) && jj_is_number(b)) {
    if (a->kind == V_FLOAT || b->kind == V_FLOAT) {
      return jj_as_double(a) == jj_as_double(b);
    }
    return jj_as_int(a) == jj_as_int(b);
  }
  if (a->kind != b->kind) {
    return false;
  }
  switch (a->kind) {
  case V_UNDEF:
  case V_NONE:
    return true;
  case V_STR:
    return a->len == b->len && memcmp(a->s, b->s, a->len) == 0;
  case V_LIST:
    if (a->l->count != b->l->count) {
      return false;
    }
    for (size_t k = 0; k < a->l->count; k++) {
      if (!jj_equal(&a->l->items[k], &b->l->items[k])) {
        return false;
      }
    }
    return true;
  case V_DICT:
    if (a->d->count != b->d->count) {
      return false;
    }
    for (size_t k = 0; k < a->d->count; k++) {
      const value *other = jj_dict_find(b->d, &a->d->keys[k]);
      if (!other || !jj_equal(&a->d->vals[k], other)) {
        return false;
      }
    }
    return true;
  case V_FUNC:
    return a->s == b->s;
  default:
    return a->d == b->d;
  }
}

/* Python's repr() of a float: the shortest text that reads back. */
static void float_text(double f, char *buf, size_t cap) {
  if (isnan(f)) {
    snprintf(buf, cap, "nan");
    return;
  }
  if (isinf(f)) {
    snprintf(buf, cap, f < 0 ? "-inf" : "inf");
    return;
  }
  int digits = 1;
  char tmp[64];
  for (; digits < 17; digits++) {
    snprintf(tmp, sizeof tmp, "%.*e", digits - 1, f);
    if (strtod(tmp, NULL) == f) {
      break;
    }
  }
  snprintf(tmp, sizeof tmp, "%.*e", digits - 1, f);
  int exp = atoi(strchr(tmp, 'e') + 1);
  if (exp >= -5 && exp < 16) {
    int decimals = digits - 1 - exp;
    snprintf(buf, cap, "%.*f", decimals > 0 ? decimals : 0, f);
    if (!strchr(buf, '.')) {
      strncat(buf, ".0", cap - strlen(buf) - 1);
    }
    return;
  }
  /* mantissa without trailing zeros, exponent with a sign and two digits */
  char *e = strchr(tmp, 'e');
  *e = '\0';
  snprintf(buf, cap, "%.24se%c%02d", tmp, exp < 0 ? '-' : '+', abs(exp));
}

bool jj_put(sbuf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n + 1) {
      if (cap > SIZE_MAX / 2) {
        return jj_fail(b->r, FDY_ERR_OVERFLOW, NULL, "string too long");
      }
      cap *= 2;
    }
    char *grown = jj_render_alloc(b->r, cap);
    if (!grown) {
      return false;
    }
    if (b->len) {
      memcpy(grown, b->s, b->len);
    }
    b->s = grown;
    b->cap = cap;
  }
  if (n) {
    memcpy(b->s + b->len, s, n);
  }
  b->len += n;
  b->s[b->len] = '\0';
  return true;
}

static bool puts_(sbuf *b, const char *s) {
  return jj_put(b, s, strlen(s));
}

value jj_sbuf_value(sbuf *b) {
  if (!b->s && !jj_put(b, "", 0)) {
    return UNDEF;
  }
  return jj_str_value(b->s, b->len, b->data ? FROM_DATA : FROM_TEMPLATE);
}

static bool repr(sbuf *b, const value *v, int depth);

/* str(v) appended to b (a string as it is). */
static bool str_of(sbuf *b, const value *v, int depth) {
  char num[64];
  switch (v->kind) {
  case V_UNDEF:
    return true;
  case V_NONE:
    return puts_(b, "None");
  case V_BOOL:
    return puts_(b, v->b ? "True" : "False");
  case V_INT:
    snprintf(num, sizeof num, "%lld", (long long)v->i);
    return puts_(b, num);
  case V_FLOAT:
    float_text(v->f, num, sizeof num);
    return puts_(b, num);
  case V_STR:
    b->data = b->data || v->origin != FROM_TEMPLATE;
    return jj_put(b, v->s, v->len);
  default:
    return repr(b, v, depth);
  }
}

static bool repr(sbuf *b, const value *v, int depth) {
  if (depth > 64) {
    return jj_fail(b->r, FDY_ERR_OVERFLOW, NULL, "values nested too deep");
  }
  switch (v->kind) {
  case V_STR: {
    b->data = b->data || v->origin != FROM_TEMPLATE;
    bool dq = memchr(v->s, '\'', v->len) && !memchr(v->s, '"', v->len);
    char q = dq ? '"' : '\'';
    if (!jj_put(b, &q, 1)) {
      return false;
    }
    for (size_t k = 0; k < v->len; k++) {
      unsigned char c = (unsigned char)v->s[k];
      char esc[8];
      if (c == '\\' || c == (unsigned char)q) {
        snprintf(esc, sizeof esc, "\\%c", c);
      } else if (c == '\n') {
        snprintf(esc, sizeof esc, "\\n");
      } else if (c == '\r') {
        snprintf(esc, sizeof esc, "\\r");
      } else if (c == '\t') {
        snprintf(esc, sizeof esc, "\\t");
      } else if (c < 0x20 || c == 0x7f) {
        snprintf(esc, sizeof esc, "\\x%02x", c);
      } else {
        esc[0] = (char)c;
        esc[1] = '\0';
      }
      if (!puts_(b, esc)) {
        return false;
      }
    }
    return jj_put(b, &q, 1);
  }
  case V_LIST:
    if (!puts_(b, "[")) {
      return false;
    }
    for (size_t k = 0; k < v->l->count; k++) {
      if ((k && !puts_(b, ", ")) || !repr(b, &v->l->items[k], depth + 1)) {
        return false;
      }
    }
    return puts_(b, "]");
  case V_DICT:
    if (!puts_(b, "{")) {
      return false;
    }
    for (size_t k = 0; k < v->d->count; k++) {
      if ((k && !puts_(b, ", ")) || !repr(b, &v->d->keys[k], depth + 1) ||
          !puts_(b, ": ") || !repr(b, &v->d->vals[k], depth + 1)) {
        return false;
      }
    }
    return puts_(b, "}");
  case V_NS:
    return puts_(b, "<Namespace>");
  case V_LOOP:
    return puts_(b, "<LoopContext>");
  case V_FUNC:
    return puts_(b, "<function>");
  default:
    return str_of(b, v, depth);
  }
}

bool jj_to_str(render *r, const value *v, value *out) {
  if (v->kind == V_STR) {
    *out = *v;
    return true;
  }
  sbuf b = {.r = r};
  if (!str_of(&b, v, 0)) {
    return false;
  }
  *out = jj_sbuf_value(&b);
  return out->kind == V_STR;
}

/* A string as a JSON string literal, escaped as Python's json.dumps with
 * ensure_ascii off; marks the buffer as data unless the string is the
 * template's own text. */
static bool json_quoted(sbuf *b, const value *v) {
  b->data = b->data || v->origin != FROM_TEMPLATE;
  if (!puts_(b, "\"")) {
    return false;
  }
  for (size_t k = 0; k < v->len; k++) {
    unsigned char c = (unsigned char)v->s[k];
    char esc[8] = {(char)c, 0};
    static const char from[] = "\"\\\n\r\t\b\f", to[] = "\"\\nrtbf";
    const char *hit = c ? strchr(from, c) : NULL;
    if (hit) {
      snprintf(esc, sizeof esc, "\\%c", to[hit - from]);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
    }
    if (!jj_put(b, esc, c ? strlen(esc) : 1)) {
      return false;
    }
  }
  return puts_(b, "\"");
}

/* The order of a dict's n entries with its string keys sorted bytewise (a
 * stable insertion sort; other keys compare equal), in the render's arena;
 * NULL when out of memory. */
static size_t *sorted_keys(render *r, const dict *d, size_t n) {
  size_t *order = jj_render_alloc(r, n * sizeof *order);
  if (!order) {
    return NULL;
  }
  for (size_t k = 0; k < n; k++) {
    size_t j = k;
    for (; j > 0; j--) {
      const value *x = &d->keys[order[j - 1]], *y = &d->keys[k];
      size_t m = x->len < y->len ? x->len : y->len;
      int c = x->kind == V_STR && y->kind == V_STR ? memcmp(x->s, y->s, m) : 0;
      if (c < 0 || (c == 0 && x->len <= y->len)) {
        break;
      }
      order[j] = order[j - 1];
    }
    order[j] = k;
  }
  return order;
}

/* A line break and `width` spaces of indentation. */
static bool json_newline(sbuf *b, int width) {
  if (!puts_(b, "\n")) {
    return false;
  }
  for (int s = 0; s < width; s++) {
    if (!puts_(b, " ")) {
      return false;
    }
  }
  return true;
}

/* A list or dict as JSON at nesting `level`: items one a line when indent
 * >= 0, else on one line separated by ", "; a dict's keys as strings (str()
 * of a non-string key), sorted when sort_keys. */
static bool json_container(sbuf *b, const value *v, int indent, bool sort_keys,
                           int level) {
  bool is_dict = v->kind == V_DICT;
  size_t n = is_dict ? v->d->count : v->l->count;
  if (!puts_(b, is_dict ? "{" : "[")) {
    return false;
  }
  size_t *order = NULL;
  if (is_dict && sort_keys && n) {
    order = sorted_keys(b->r, v->d, n);
    if (!order) {
      return false;
    }
  }
  for (size_t k = 0; k < n; k++) {
    if (k && !puts_(b, indent >= 0 ? "," : ", ")) {
      return false;
    }
    if (indent >= 0 && !json_newline(b, indent * (level + 1))) {
      return false;
    }
    size_t at = order ? order[k] : k;
    if (is_dict) {
      const value *key = &v->d->keys[at];
      value text;
      if (key->kind == V_STR) {
        text = *key;
      } else if (!jj_to_str(b->r, key, &text)) {
        return false;
      }
      if (!jj_json_of(b, &text, indent, sort_keys, level + 1) ||
          !puts_(b, ": ")) {
        return false;
      }
    }
    if (!jj_json_of(b, is_dict ? &v->d->vals[at] : &v->l->items[at], indent,
                    sort_keys, level + 1)) {
      return false;
    }
  }
  if (indent >= 0 && n && !json_newline(b, indent * level)) {
    return false;
  }
  return puts_(b, is_dict ? "}" : "]");
}

/* json.dumps(v, ensure_ascii=False, indent, sort_keys): the value as tojson
 * writes it (NaN and Infinity as Python writes them, indent < 0 for one line)
 * at nesting `level`; deeper than 64 levels fails as an overflow. */
bool jj_json_of(sbuf *b, const value *v, int indent, bool sort_keys,
                int level) {
  if (level > 64) {
    return jj_fail(b->r, FDY_ERR_OVERFLOW, NULL, "values nested too deep");
  }
  switch (v->kind) {
  case V_NONE:
    return puts_(b, "null");
  case V_BOOL:
    return puts_(b, v->b ? "true" : "false");
  case V_INT:
  case V_FLOAT:
    if (v->kind == V_FLOAT && (isnan(v->f) || isinf(v->f))) {
      return puts_(b, isnan(v->f) ? "NaN"
                      : v->f < 0  ? "-Infinity"
                                  : "Infinity");
    }
    return str_of(b, v, 0);
  case V_STR:
    return json_quoted(b, v);
  case V_LIST:
  case V_DICT:
    return json_container(b, v, indent, sort_keys, level);
  default:
    return jj_type_error(b->r, "tojson", v, NULL);
  }
}
