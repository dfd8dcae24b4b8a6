/* The Jinja renderer: walks the parsed tree with Python's value semantics
 * where templates depend on them (truthiness, `and`/`or` returning an
 * operand, str() and repr() of values, slicing by characters, json.dumps
 * as transformers' tojson calls it). Every value lives in one arena freed
 * at the end of the render; each string remembers whether its bytes come
 * from the template (special tokens are tokens there) or from the caller's
 * data, and the output keeps that per byte. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_internal.h"

#define RENDER_LIMIT (256ull << 20)

/* ---- values -------------------------------------------------------------- */

typedef enum vkind {
  V_UNDEF,
  V_NONE,
  V_BOOL,
  V_INT,
  V_FLOAT,
  V_STR,
  V_LIST,
  V_DICT,
  V_NS,
  V_LOOP,
  V_FUNC,
} vkind;

/* where a string's bytes come from */
enum { FROM_DATA = 0, FROM_TEMPLATE = 1, FROM_BOTH = 2 };

typedef struct list list;
typedef struct dict dict;
typedef struct loop loop;

typedef struct value {
  vkind kind;
  uint8_t origin;      /* V_STR: FROM_* (FROM_BOTH: see mask) */
  const uint8_t *mask; /* V_STR FROM_BOTH: len flags */
  union {
    bool b;
    int64_t i;
    double f;
    const char *s; /* V_STR (len bytes, NUL after); V_UNDEF: the name or
                      NULL; V_FUNC: its name */
    list *l;
    dict *d; /* V_DICT, V_NS */
    loop *lp;
  };
  size_t len;
} value;

struct list {
  value *items;
  size_t count, cap;
};

struct dict {
  value *keys, *vals;
  size_t count, cap;
};

struct loop {
  list *items;
  size_t index; /* 0-based */
};

typedef struct scope scope;
struct scope {
  scope *parent;
  const char **names;
  value *vals;
  size_t count, cap;
};

typedef enum flow { FLOW_OK, FLOW_BREAK, FLOW_CONTINUE, FLOW_ERROR } flow;

typedef struct render {
  jj_arena arena;
  scope *scope;
  char *out;
  uint8_t *out_mask;
  size_t out_len, out_cap;
  int line;
  fdy_status status;
  fdy_error *err;
} render;

static const value UNDEF = {.kind = V_UNDEF};
static const value NONE = {.kind = V_NONE};

/* ---- errors and memory -------------------------------------------------- */

static bool fail(render *r, fdy_status kind, const char *name, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));
static bool fail(render *r, fdy_status kind, const char *name, const char *fmt,
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

static void *alloc(render *r, size_t n) {
  bool over = false;
  void *p = jj_alloc(&r->arena, n, &over);
  if (!p) {
    if (over) {
      fail(r, FDY_ERR_BUDGET, NULL,
           "rendering needs more than %llu MiB of values",
           (unsigned long long)(RENDER_LIMIT >> 20));
    } else {
      fail(r, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
    }
  }
  return p;
}

/* A new array of cap elements of size bytes holding the first count
 * (at most cap) of old; NULL as alloc. */
static void *grow(render *r, const void *old, size_t count, size_t cap,
                  size_t size) {
  void *p = alloc(r, cap * size);
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

static bool type_error(render *r, const char *op, const value *a,
                       const value *b) {
  if (a->kind == V_UNDEF && a->s) {
    return fail(r, FDY_ERR_INVALID_ARGUMENT, op, "'%s' is undefined (in %s)",
                a->s, op);
  }
  if (b && b->kind == V_UNDEF && b->s) {
    return fail(r, FDY_ERR_INVALID_ARGUMENT, op, "'%s' is undefined (in %s)",
                b->s, op);
  }
  if (b) {
    return fail(r, FDY_ERR_INVALID_ARGUMENT, op,
                "%s is not defined between %s and %s", op, kind_name(a),
                kind_name(b));
  }
  return fail(r, FDY_ERR_INVALID_ARGUMENT, op, "%s is not defined on %s", op,
              kind_name(a));
}

/* ---- strings ------------------------------------------------------------- */

static value str_value(const char *s, size_t len, uint8_t origin) {
  return (value){.kind = V_STR, .s = s, .len = len, .origin = origin};
}

/* A new string of len bytes (filled by the caller) with one origin. */
static char *new_str(render *r, size_t len, uint8_t origin, value *out) {
  char *s = alloc(r, len + 1);
  if (s) {
    *out = str_value(s, len, origin);
  }
  return s;
}

static uint8_t origin_at(const value *v, size_t i) {
  return v->origin == FROM_BOTH ? v->mask[i] : v->origin;
}

/* a + b keeping each byte's origin */
static bool concat_str(render *r, const value *a, const value *b, value *out) {
  size_t n = a->len + b->len;
  if (n < a->len) {
    return fail(r, FDY_ERR_OVERFLOW, NULL, "string too long");
  }
  uint8_t origin = a->len == 0   ? b->origin
                   : b->len == 0 ? a->origin
                   : a->origin == b->origin && a->origin != FROM_BOTH
                       ? a->origin
                       : FROM_BOTH;
  value v;
  char *s = new_str(r, n, origin, &v);
  if (!s) {
    return false;
  }
  memcpy(s, a->s, a->len);
  memcpy(s + a->len, b->s, b->len);
  if (origin == FROM_BOTH) {
    uint8_t *m = alloc(r, n);
    if (!m) {
      return false;
    }
    for (size_t k = 0; k < a->len; k++) {
      m[k] = origin_at(a, k);
    }
    for (size_t k = 0; k < b->len; k++) {
      m[a->len + k] = origin_at(b, k);
    }
    v.mask = m;
  }
  *out = v;
  return true;
}

/* A string derived from v by a transformation (strip, slice, replace...):
 * from the template only when all of v is. */
static uint8_t derived(const value *v) {
  return v->origin == FROM_TEMPLATE ? FROM_TEMPLATE : FROM_DATA;
}

static size_t char_len(const char *s, size_t n) {
  size_t k = fdy_utf8_char_length(s, n);
  return k ? k : 1; /* a byte that starts no character counts as one */
}

static size_t char_count(const char *s, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i += char_len(s + i, n - i)) {
    c++;
  }
  return c;
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
    size_t k = char_len(chars->s + i, chars->len - i);
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
  *out = str_value(v->s + start, end - start, v->origin);
  if (v->origin == FROM_BOTH) {
    out->mask = v->mask + start;
  }
  return true;
}

static bool case_map(render *r, const value *v, bool upper, value *out) {
  char *s = new_str(r, v->len, derived(v), out);
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

/* ---- building values ---------------------------------------------------- */

static bool list_push(render *r, list *l, value v) {
  if (l->count == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 4;
    value *items = grow(r, l->items, l->count, cap, sizeof *items);
    if (!items) {
      return false;
    }
    l->items = items;
    l->cap = cap;
  }
  l->items[l->count++] = v;
  return true;
}

static bool new_list(render *r, value *out) {
  list *l = alloc(r, sizeof *l);
  if (!l) {
    return false;
  }
  *out = (value){.kind = V_LIST, .l = l};
  return true;
}

static bool equal(const value *a, const value *b);

static value *dict_find(const dict *d, const value *key) {
  for (size_t k = 0; k < d->count; k++) {
    if (equal(&d->keys[k], key)) {
      return &d->vals[k];
    }
  }
  return NULL;
}

static bool dict_set(render *r, dict *d, value key, value val) {
  value *slot = dict_find(d, &key);
  if (slot) {
    *slot = val;
    return true;
  }
  if (d->count == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 4;
    value *keys = grow(r, d->keys, d->count, cap, sizeof *keys);
    value *vals = grow(r, d->vals, d->count, cap, sizeof *vals);
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

static bool new_dict(render *r, vkind kind, value *out) {
  dict *d = alloc(r, sizeof *d);
  if (!d) {
    return false;
  }
  *out = (value){.kind = kind, .d = d};
  return true;
}

/* ---- Python semantics -----------------------------------------------------
 */

static bool truthy(const value *v) {
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

static bool is_number(const value *v) {
  return v->kind == V_INT || v->kind == V_FLOAT || v->kind == V_BOOL;
}

static double as_double(const value *v) {
  return v->kind == V_FLOAT ? v->f : v->kind == V_INT ? (double)v->i : v->b;
}

static int64_t as_int(const value *v) {
  return v->kind == V_INT ? v->i : v->b;
}

static bool equal(const value *a, const value *b) {
  if (is_number(a) && is_number(b)) {
    if (a->kind == V_FLOAT || b->kind == V_FLOAT) {
      return as_double(a) == as_double(b);
    }
    return as_int(a) == as_int(b);
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
      if (!equal(&a->l->items[k], &b->l->items[k])) {
        return false;
      }
    }
    return true;
  case V_DICT:
    if (a->d->count != b->d->count) {
      return false;
    }
    for (size_t k = 0; k < a->d->count; k++) {
      const value *other = dict_find(b->d, &a->d->keys[k]);
      if (!other || !equal(&a->d->vals[k], other)) {
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

/* A growable byte buffer in the arena (for str(), repr() and tojson). */
typedef struct sbuf {
  render *r;
  char *s;
  size_t len, cap;
  bool data; /* some of it comes from data */
} sbuf;

static bool put(sbuf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n + 1) {
      if (cap > SIZE_MAX / 2) {
        return fail(b->r, FDY_ERR_OVERFLOW, NULL, "string too long");
      }
      cap *= 2;
    }
    char *grown = alloc(b->r, cap);
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
  return put(b, s, strlen(s));
}

static value sbuf_value(sbuf *b) {
  if (!b->s && !put(b, "", 0)) {
    return UNDEF;
  }
  return str_value(b->s, b->len, b->data ? FROM_DATA : FROM_TEMPLATE);
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
    return put(b, v->s, v->len);
  default:
    return repr(b, v, depth);
  }
}

static bool repr(sbuf *b, const value *v, int depth) {
  if (depth > 64) {
    return fail(b->r, FDY_ERR_OVERFLOW, NULL, "values nested too deep");
  }
  switch (v->kind) {
  case V_STR: {
    b->data = b->data || v->origin != FROM_TEMPLATE;
    bool dq = memchr(v->s, '\'', v->len) && !memchr(v->s, '"', v->len);
    char q = dq ? '"' : '\'';
    if (!put(b, &q, 1)) {
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
    return put(b, &q, 1);
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

static bool to_str(render *r, const value *v, value *out) {
  if (v->kind == V_STR) {
    *out = *v;
    return true;
  }
  sbuf b = {.r = r};
  if (!str_of(&b, v, 0)) {
    return false;
  }
  *out = sbuf_value(&b);
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
    if (!put(b, esc, c ? strlen(esc) : 1)) {
      return false;
    }
  }
  return puts_(b, "\"");
}

/* The order of a dict's n entries with its string keys sorted bytewise (a
 * stable insertion sort; other keys compare equal), in the render's arena;
 * NULL when out of memory. */
static size_t *sorted_keys(render *r, const dict *d, size_t n) {
  size_t *order = alloc(r, n * sizeof *order);
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

static bool json_of(sbuf *b, const value *v, int indent, bool sort_keys,
                    int level);

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
      } else if (!to_str(b->r, key, &text)) {
        return false;
      }
      if (!json_of(b, &text, indent, sort_keys, level + 1) || !puts_(b, ": ")) {
        return false;
      }
    }
    if (!json_of(b, is_dict ? &v->d->vals[at] : &v->l->items[at], indent,
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
static bool json_of(sbuf *b, const value *v, int indent, bool sort_keys,
                    int level) {
  if (level > 64) {
    return fail(b->r, FDY_ERR_OVERFLOW, NULL, "values nested too deep");
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
    return type_error(b->r, "tojson", v, NULL);
  }
}

/* ---- the output ------------------------------------------------------------
 */

static bool emit(render *r, const value *v) {
  value s;
  if (!to_str(r, v, &s)) {
    return false;
  }
  if (s.len > RENDER_LIMIT - r->out_len) {
    return fail(r, FDY_ERR_BUDGET, NULL,
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
      return fail(r, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
    }
    r->out_mask = mask;
    r->out_cap = cap;
  }
  memcpy(r->out + r->out_len, s.s, s.len);
  for (size_t k = 0; k < s.len; k++) {
    r->out_mask[r->out_len + k] = origin_at(&s, k);
  }
  r->out_len += s.len;
  r->out[r->out_len] = '\0';
  return true;
}

/* ---- scopes ----------------------------------------------------------------
 */

static value *lookup(render *r, const char *name) {
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
    const char **names = grow(r, s->names, s->count, cap, sizeof *names);
    value *vals = grow(r, s->vals, s->count, cap, sizeof *vals);
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

/* ---- expressions ------------------------------------------------------------
 */

static bool eval(render *r, const jj_expr *e, value *out);

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
  return !a || eval(r, a->value, out);
}

static bool want_str(render *r, const char *op, const value *v) {
  return v->kind == V_STR || type_error(r, op, v, NULL);
}

static bool item(render *r, const value *obj, const value *key, value *out) {
  *out = UNDEF;
  switch (obj->kind) {
  case V_UNDEF:
    return type_error(r, "a subscript", obj, NULL);
  case V_LIST:
  case V_STR: {
    if (key->kind != V_INT && key->kind != V_BOOL) {
      return obj->kind == V_LIST ? true
                                 : type_error(r, "a subscript", obj, key);
    }
    int64_t i = as_int(key);
    if (obj->kind == V_LIST) {
      int64_t n = (int64_t)obj->l->count;
      i = i < 0 ? i + n : i;
      if (i >= 0 && i < n) {
        *out = obj->l->items[i];
      }
      return true;
    }
    int64_t n = (int64_t)char_count(obj->s, obj->len);
    i = i < 0 ? i + n : i;
    if (i < 0 || i >= n) {
      return true;
    }
    size_t at = 0;
    for (int64_t c = 0; c < i; c++) {
      at += char_len(obj->s + at, obj->len - at);
    }
    *out = str_value(obj->s + at, char_len(obj->s + at, obj->len - at),
                     derived(obj));
    return true;
  }
  case V_DICT:
  case V_NS: {
    const value *v = dict_find(obj->d, key);
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
    if (parts[k] && !eval(r, parts[k], &v[k])) {
      return false;
    }
    if (v[k].kind != V_UNDEF && v[k].kind != V_NONE && v[k].kind != V_INT &&
        v[k].kind != V_BOOL) {
      return type_error(r, "a slice", &v[k], NULL);
    }
  }
  bool given[3];
  int64_t x[3];
  for (int k = 0; k < 3; k++) {
    given[k] = v[k].kind == V_INT || v[k].kind == V_BOOL;
    x[k] = given[k] ? as_int(&v[k]) : 0;
  }
  *step = given[2] ? x[2] : 1;
  if (*step == 0) {
    return fail(r, FDY_ERR_INVALID_ARGUMENT, "a slice",
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
    return type_error(r, "a slice", obj, NULL);
  }
  bool is_list = obj->kind == V_LIST;
  /* a string's character offsets */
  size_t *offs = NULL;
  int64_t n;
  if (is_list) {
    n = (int64_t)obj->l->count;
  } else {
    n = (int64_t)char_count(obj->s, obj->len);
    if (!(offs = alloc(r, ((size_t)n + 1) * sizeof *offs))) {
      return false;
    }
    size_t at = 0;
    for (int64_t c = 0; c < n; c++) {
      offs[c] = at;
      at += char_len(obj->s + at, obj->len - at);
    }
    offs[n] = obj->len;
  }
  int64_t start = 0, stop = 0, step = 1;
  if (!slice_bounds(r, e, n, &start, &stop, &step)) {
    return false;
  }
  if (is_list) {
    if (!new_list(r, out)) {
      return false;
    }
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (!list_push(r, out->l, obj->l->items[i])) {
        return false;
      }
    }
    return true;
  }
  if (step == 1) { /* a piece of the string: its origins stay */
    size_t a = offs[start], b = stop > start ? offs[stop] : a;
    *out = str_value(obj->s + a, b - a, obj->origin);
    if (obj->origin == FROM_BOTH) {
      out->mask = obj->mask + a;
    }
    return true;
  }
  sbuf b = {.r = r, .data = obj->origin != FROM_TEMPLATE};
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (!put(&b, obj->s + offs[i], offs[i + 1] - offs[i])) {
      return false;
    }
  }
  *out = sbuf_value(&b);
  return out->kind == V_STR;
}

static bool contains(render *r, const value *hay, const value *needle,
                     bool *out) {
  switch (hay->kind) {
  case V_STR:
    if (needle->kind != V_STR) {
      return type_error(r, "'in'", needle, hay);
    }
    *out = needle->len == 0 ||
           (needle->len <= hay->len &&
            memmem(hay->s, hay->len, needle->s, needle->len) != NULL);
    return true;
  case V_LIST:
    *out = false;
    for (size_t k = 0; k < hay->l->count && !*out; k++) {
      *out = equal(&hay->l->items[k], needle);
    }
    return true;
  case V_DICT:
  case V_NS:
    *out = dict_find(hay->d, needle) != NULL;
    return true;
  case V_UNDEF:
    *out = false;
    return true;
  default:
    return type_error(r, "'in'", needle, hay);
  }
}

static int compare_str(const value *a, const value *b) {
  size_t m = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->s, b->s, m);
  return c ? c : (a->len > b->len) - (a->len < b->len);
}

static bool checked(render *r, bool overflow, const char *op) {
  return !overflow || fail(r, FDY_ERR_OVERFLOW, op,
                           "integer arithmetic (%s) outside 64 bits", op);
}

/* str * n and list * n */
static bool repeat(render *r, const value *v, int64_t n, value *out) {
  if (n < 0) {
    n = 0;
  }
  size_t unit = v->kind == V_STR ? v->len : v->l->count;
  if (unit && (uint64_t)n > RENDER_LIMIT / unit) {
    return fail(r, FDY_ERR_BUDGET, "*", "a repetition longer than %llu MiB",
                (unsigned long long)(RENDER_LIMIT >> 20));
  }
  if (v->kind == V_STR) {
    char *s = new_str(r, unit * (size_t)n, derived(v), out);
    for (int64_t k = 0; s && k < n; k++) {
      memcpy(s + unit * (size_t)k, v->s, unit);
    }
    return s != NULL;
  }
  if (!new_list(r, out)) {
    return false;
  }
  for (int64_t k = 0; k < n; k++) {
    for (size_t j = 0; j < unit; j++) {
      if (!list_push(r, out->l, v->l->items[j])) {
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
    return concat_str(r, a, b, out);
  }
  if (op == JJ_ADD && a->kind == V_LIST && b->kind == V_LIST) {
    if (!new_list(r, out)) {
      return false;
    }
    for (size_t k = 0; k < a->l->count + b->l->count; k++) {
      value v = k < a->l->count ? a->l->items[k] : b->l->items[k - a->l->count];
      if (!list_push(r, out->l, v)) {
        return false;
      }
    }
    return true;
  }
  if (op == JJ_MUL && (a->kind == V_STR || a->kind == V_LIST) &&
      (b->kind == V_INT || b->kind == V_BOOL)) {
    return repeat(r, a, as_int(b), out);
  }
  if (op == JJ_MUL && (b->kind == V_STR || b->kind == V_LIST) &&
      (a->kind == V_INT || a->kind == V_BOOL)) {
    return repeat(r, b, as_int(a), out);
  }
  if (!is_number(a) || !is_number(b)) {
    return type_error(r, name, a, b);
  }
  if (a->kind != V_FLOAT && b->kind != V_FLOAT && op != JJ_DIV) {
    int64_t x = as_int(a), y = as_int(b), z = 0;
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
        return fail(r, FDY_ERR_INVALID_ARGUMENT, name, "division by zero");
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
  double x = as_double(a), y = as_double(b), z;
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
      return fail(r, FDY_ERR_INVALID_ARGUMENT, name, "division by zero");
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
  if (!eval(r, e->a, &a) || !eval(r, e->b, &b)) {
    return false;
  }
  switch (e->op) {
  case JJ_CONCAT: {
    value x, y;
    return to_str(r, &a, &x) && to_str(r, &b, &y) && concat_str(r, &x, &y, out);
  }
  case JJ_EQ:
  case JJ_NE:
    *out = (value){.kind = V_BOOL, .b = equal(&a, &b) == (e->op == JJ_EQ)};
    return true;
  case JJ_LT:
  case JJ_LE:
  case JJ_GT:
  case JJ_GE: {
    int c;
    if (is_number(&a) && is_number(&b)) {
      double x = as_double(&a), y = as_double(&b);
      c = (x > y) - (x < y);
    } else if (a.kind == V_STR && b.kind == V_STR) {
      c = compare_str(&a, &b);
    } else {
      return type_error(r, "a comparison", &a, &b);
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
    *out = is_number(v);
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
    *out = equal(v, &arg);
  } else if (!strcmp(t, "ne")) {
    *out = !equal(v, &arg);
  } else if (!strcmp(t, "odd") || !strcmp(t, "even")) {
    if (v->kind != V_INT && v->kind != V_BOOL) {
      return type_error(r, t, v, NULL);
    }
    *out = (as_int(v) % 2 != 0) == (t[0] == 'o');
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
static bool items_of(render *r, const char *op, const value *v, list **out) {
  if (v->kind == V_LIST) {
    *out = v->l;
    return true;
  }
  value l;
  if (!new_list(r, &l)) {
    return false;
  }
  *out = l.l;
  if (v->kind == V_DICT) {
    for (size_t k = 0; k < v->d->count; k++) {
      if (!list_push(r, l.l, v->d->keys[k])) {
        return false;
      }
    }
    return true;
  }
  if (v->kind == V_STR) {
    for (size_t at = 0; at < v->len;) {
      size_t n = char_len(v->s + at, v->len - at);
      if (!list_push(r, l.l, str_value(v->s + at, n, derived(v)))) {
        return false;
      }
      at += n;
    }
    return true;
  }
  return v->kind == V_UNDEF || type_error(r, op, v, NULL);
}

/* selectattr/rejectattr/select/reject: keep the items whose attribute
 * (or themselves) pass the named test (or are truthy). */
static bool select_items(render *r, const jj_expr *e, const value *v, bool attr,
                         bool keep, value *out) {
  list *in;
  value name = UNDEF, test_name = UNDEF;
  bool given;
  if (!items_of(r, e->str, v, &in) || !new_list(r, out)) {
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
    char *s = alloc(r, test_name.len + 1);
    if (!s) {
      return false;
    }
    memcpy(s, test_name.s, test_name.len);
    t.str = s;
    bool found = jj_listed(jj_tests, jj_test_count, s, test_name.len);
    if (!found) {
      return fail(r, FDY_ERR_UNSUPPORTED, "test",
                  "%s: the test '%s' is outside the Jinja that Foundry "
                  "interprets",
                  e->str, s);
    }
    size_t skip = first + 1, positional = 0;
    t.args = alloc(r, (e->nargs + 1) * sizeof *t.args);
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
      if (!item(r, &it, &name, &subject)) {
        return false;
      }
    }
    bool pass;
    if (given) {
      if (!test(r, &t, &subject, &pass)) {
        return false;
      }
    } else {
      pass = truthy(&subject);
    }
    if (pass == keep && !list_push(r, out->l, it)) {
      return false;
    }
  }
  return true;
}

static bool join(render *r, const jj_expr *e, const value *v, value *out) {
  list *in;
  value sep = str_value("", 0, FROM_TEMPLATE), attr;
  bool given;
  if (!items_of(r, "join", v, &in) || !eval_arg(r, e, 0, "d", &sep, &given) ||
      (given && !want_str(r, "join", &sep)) ||
      !eval_arg(r, e, 1, "attribute", &attr, &given)) {
    return false;
  }
  if (!given) {
    attr = UNDEF;
  }
  if (sep.kind != V_STR) {
    sep = str_value("", 0, FROM_TEMPLATE);
  }
  value acc = str_value("", 0, FROM_TEMPLATE);
  for (size_t k = 0; k < in->count; k++) {
    value it = in->items[k], s;
    if (attr.kind != V_UNDEF && !item(r, &in->items[k], &attr, &it)) {
      return false;
    }
    if ((k && !concat_str(r, &acc, &sep, &acc)) || !to_str(r, &it, &s) ||
        !concat_str(r, &acc, &s, &acc)) {
      return false;
    }
  }
  *out = acc;
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
      if ((count < 0 || done < count) && put(&b, new->s, new->len)) {
        done++;
      } else if (b.r->status != FDY_OK) {
        return false;
      }
      if (at >= v->len) {
        break;
      }
      size_t n = char_len(v->s + at, v->len - at);
      if (!put(&b, v->s + at, n)) {
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
      if (!put(&b, v->s + at, upto - at) ||
          (hit && !put(&b, new->s, new->len))) {
        return false;
      }
      at = hit ? upto + old->len : v->len;
      done += hit != NULL;
    }
  }
  *out = sbuf_value(&b);
  return out->kind == V_STR;
}

/* Python's str.split(sep, maxsplit) */
static bool split(render *r, const value *v, const value *sep, int64_t max,
                  value *out) {
  if (!new_list(r, out)) {
    return false;
  }
  uint8_t o = derived(v);
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
        return list_push(r, out->l, str_value(v->s + at, end - at, o));
      }
      size_t end = at;
      while (end < v->len && !space_bytes(v->s + end, v->len - end, false)) {
        end += char_len(v->s + end, v->len - end);
      }
      if (!list_push(r, out->l, str_value(v->s + at, end - at, o))) {
        return false;
      }
      done++;
      at = end;
    }
  }
  if (sep->len == 0) {
    return fail(r, FDY_ERR_INVALID_ARGUMENT, "split", "empty separator");
  }
  for (;;) {
    const char *hit = max >= 0 && done >= max
                          ? NULL
                          : memmem(v->s + at, v->len - at, sep->s, sep->len);
    size_t upto = hit ? (size_t)(hit - v->s) : v->len;
    if (!list_push(r, out->l, str_value(v->s + at, upto - at, o))) {
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
    return type_error(r, op, v, NULL);
  }
  *out = as_int(v);
  return true;
}

static bool method(render *r, const jj_expr *call, value *out) {
  const jj_expr *attr = call->a;
  const char *m = attr->str;
  value self, a0, a1, a2;
  bool g0, g1, g2;
  if (!eval(r, attr->a, &self) || !eval_arg(r, call, 0, NULL, &a0, &g0) ||
      !eval_arg(r, call, 1, NULL, &a1, &g1) ||
      !eval_arg(r, call, 2, NULL, &a2, &g2)) {
    return false;
  }
  if (self.kind == V_DICT) {
    if (!strcmp(m, "get")) {
      const value *v = dict_find(self.d, &a0);
      *out = v ? *v : g1 ? a1 : NONE;
      return true;
    }
    bool keys = !strcmp(m, "keys"), vals = !strcmp(m, "values");
    if (keys || vals || !strcmp(m, "items")) {
      if (!new_list(r, out)) {
        return false;
      }
      for (size_t k = 0; k < self.d->count; k++) {
        value it;
        if (keys || vals) {
          it = keys ? self.d->keys[k] : self.d->vals[k];
        } else if (!new_list(r, &it) || !list_push(r, it.l, self.d->keys[k]) ||
                   !list_push(r, it.l, self.d->vals[k])) {
          return false;
        }
        if (!list_push(r, out->l, it)) {
          return false;
        }
      }
      return true;
    }
  }
  if (self.kind != V_STR) {
    return type_error(r, m, &self, NULL);
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
  return type_error(r, m, &self, NULL);
}

/* One filter's call: the filter's name, the call's arguments (NULL for a
 * filter named by map), the value filtered, and the first positional argument
 * evaluated up front (a0, given when the call passed one). Each filter fills
 * *out, or fails through fail() and returns false. */
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
  size_t n = v->kind == V_STR    ? char_count(v->s, v->len)
             : v->kind == V_LIST ? v->l->count
             : v->kind == V_DICT ? v->d->count
                                 : 0;
  if (v->kind != V_STR && v->kind != V_LIST && v->kind != V_DICT &&
      v->kind != V_UNDEF) {
    return type_error(r, c->f, v, NULL);
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
      return fail(r, FDY_ERR_UNSUPPORTED, "tojson",
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
  if (!json_of(&b, c->v, (int)ind, truthy(&sort), 0)) {
    return false;
  }
  *out = sbuf_value(&b);
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
  bool use = c->v->kind == V_UNDEF || (truthy(&boolean) && !truthy(c->v));
  *out = use ? (c->given ? c->a0 : str_value("", 0, FROM_TEMPLATE)) : *c->v;
  return true;
}

/* upper, lower: the value's string in that case. */
static bool filter_case(render *r, const filter_call *c, value *out) {
  value s;
  return to_str(r, c->v, &s) && case_map(r, &s, c->f[0] == 'u', out);
}

/* string: the value as str() writes it. */
static bool filter_string(render *r, const filter_call *c, value *out) {
  return to_str(r, c->v, out);
}

/* list: a new list of the value's items. */
static bool filter_list(render *r, const filter_call *c, value *out) {
  list *in;
  if (!items_of(r, c->f, c->v, &in) || !new_list(r, out)) {
    return false;
  }
  for (size_t k = 0; k < in->count; k++) {
    if (!list_push(r, out->l, in->items[k])) {
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
  if (!items_of(r, c->f, c->v, &in)) {
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
  if (!items_of(r, c->f, c->v, &in) ||
      !eval_arg(r, c->e, 99, "attribute", &attr, &g_attr) ||
      !new_list(r, out)) {
    return false;
  }
  const value *a0 = &c->a0;
  if (!g_attr && !(c->given && a0->kind == V_STR)) {
    return fail(r, FDY_ERR_UNSUPPORTED, "map",
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
      return fail(r, FDY_ERR_UNSUPPORTED, "map",
                  "map with the filter '%.*s' is outside the Jinja that "
                  "Foundry interprets",
                  (int)(a0->len > 40 ? 40 : a0->len), a0->s);
    }
  }
  for (size_t k = 0; k < in->count; k++) {
    value it;
    if (!(g_attr ? item(r, &in->items[k], &attr, &it)
                 : apply_filter(r, name, NULL, &in->items[k], &it)) ||
        !list_push(r, out->l, it)) {
      return false;
    }
  }
  return true;
}

/* items: a dict's [key, value] pairs; an empty list for undefined. */
static bool filter_items(render *r, const filter_call *c, value *out) {
  const value *v = c->v;
  if (v->kind == V_UNDEF) {
    return new_list(r, out);
  }
  if (v->kind != V_DICT) {
    return type_error(r, c->f, v, NULL);
  }
  if (!new_list(r, out)) {
    return false;
  }
  for (size_t k = 0; k < v->d->count; k++) {
    value pair;
    if (!new_list(r, &pair) || !list_push(r, pair.l, v->d->keys[k]) ||
        !list_push(r, pair.l, v->d->vals[k]) || !list_push(r, out->l, pair)) {
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
  if (is_number(v)) {
    d = as_double(v);
    if (to_int && v->kind != V_FLOAT) {
      *out = (value){.kind = V_INT, .i = as_int(v)};
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
    return type_error(r, c->f, v, NULL);
  }
  int64_t i = as_int(v);
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
  return to_str(r, c->v, &s) && eval_arg(r, c->e, 1, NULL, &b, &gb) &&
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
    if (!new_dict(r, V_NS, out)) {
      return false;
    }
    for (size_t k = 0; k < call->nargs; k++) {
      value v;
      if (!call->args[k].name) {
        return fail(r, FDY_ERR_UNSUPPORTED, "namespace",
                    "namespace() takes only name=value arguments here");
      }
      if (!eval(r, call->args[k].value, &v) ||
          !dict_set(r, out->d,
                    str_value(call->args[k].name, strlen(call->args[k].name),
                              FROM_TEMPLATE),
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
    if (!to_str(r, &a0, &msg)) {
      return false;
    }
    return fail(r, FDY_ERR_INVALID_ARGUMENT, "raise_exception",
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
    return fail(r, FDY_ERR_INVALID_ARGUMENT, name,
                "strftime_now cannot format the time with this format");
  }
  char fmt[130];
  memcpy(fmt, a0.s, a0.len);
  fmt[a0.len] = '\0';
  size_t n = strftime(buf, sizeof buf, fmt, &tm);
  char *s = new_str(r, n, FROM_DATA, out);
  if (s) {
    memcpy(s, buf, n);
  }
  return s != NULL;
}

/* obj.name: the attribute or key of a defined value; a missing one is
 * undefined and keeps the name for its error. */
static bool eval_attr(render *r, const jj_expr *e, value *out) {
  value obj;
  if (!eval(r, e->a, &obj)) {
    return false;
  }
  r->line = e->line;
  if (obj.kind == V_UNDEF) {
    return type_error(r, "an attribute", &obj, NULL);
  }
  value key = str_value(e->str, e->len, FROM_TEMPLATE);
  if (!item(r, &obj, &key, out)) {
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
  if (!eval(r, e->a, &v)) {
    return false;
  }
  if (!is_number(&v)) {
    return type_error(r, e->kind == JJ_E_NEG ? "unary -" : "unary +", &v, NULL);
  }
  if (v.kind == V_FLOAT) {
    *out = (value){.kind = V_FLOAT, .f = e->kind == JJ_E_NEG ? -v.f : v.f};
    return true;
  }
  int64_t i = as_int(&v);
  if (e->kind == JJ_E_NEG && !checked(r, i == INT64_MIN, "unary -")) {
    return false;
  }
  *out = (value){.kind = V_INT, .i = e->kind == JJ_E_NEG ? -i : i};
  return true;
}

/* [a, b, ...]: a new list of the items evaluated in order. */
static bool eval_list(render *r, const jj_expr *e, value *out) {
  if (!new_list(r, out)) {
    return false;
  }
  for (size_t k = 0; k < e->nargs; k++) {
    value v;
    if (!eval(r, e->args[k].value, &v) || !list_push(r, out->l, v)) {
      return false;
    }
  }
  return true;
}

/* {k: v, ...}: a new dict, keys and values evaluated in order (args holds
 * them alternately); a later key replaces an earlier one. */
static bool eval_dict(render *r, const jj_expr *e, value *out) {
  if (!new_dict(r, V_DICT, out)) {
    return false;
  }
  for (size_t k = 0; k + 1 < e->nargs; k += 2) {
    value key, v;
    if (!eval(r, e->args[k].value, &key) ||
        !eval(r, e->args[k + 1].value, &v) || !dict_set(r, out->d, key, v)) {
      return false;
    }
  }
  return true;
}

/* Evaluates the expression e into *out (values live in the render's arena);
 * false when it failed, with the error in the render. */
static bool eval(render *r, const jj_expr *e, value *out) {
  r->line = e->line;
  switch (e->kind) {
  case JJ_E_STR:
    *out = str_value(e->str, e->len, FROM_TEMPLATE);
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
    const value *v = lookup(r, e->str);
    *out = v ? *v : (value){.kind = V_UNDEF, .s = e->str};
    return true;
  }
  case JJ_E_ATTR:
    return eval_attr(r, e, out);
  case JJ_E_ITEM: {
    value obj, key;
    if (!eval(r, e->a, &obj) || !eval(r, e->b, &key)) {
      return false;
    }
    r->line = e->line;
    return item(r, &obj, &key, out);
  }
  case JJ_E_SLICE: {
    value obj;
    if (!eval(r, e->a, &obj)) {
      return false;
    }
    r->line = e->line;
    return slice(r, e, &obj, out);
  }
  case JJ_E_CALL:
    return e->a->kind == JJ_E_ATTR ? method(r, e, out) : function(r, e, out);
  case JJ_E_FILTER: {
    value v;
    if (!eval(r, e->a, &v)) {
      return false;
    }
    r->line = e->line;
    return apply_filter(r, e->str, e, &v, out);
  }
  case JJ_E_TEST: {
    value v;
    if (!eval(r, e->a, &v)) {
      return false;
    }
    *out = (value){.kind = V_BOOL};
    return test(r, e, &v, &out->b);
  }
  case JJ_E_NOT: {
    value v;
    if (!eval(r, e->a, &v)) {
      return false;
    }
    *out = (value){.kind = V_BOOL, .b = !truthy(&v)};
    return true;
  }
  case JJ_E_NEG:
  case JJ_E_POS:
    return eval_sign(r, e, out);
  case JJ_E_BINARY:
    return binary_op(r, e, out);
  case JJ_E_AND:
  case JJ_E_OR:
    if (!eval(r, e->a, out)) {
      return false;
    }
    if (truthy(out) == (e->kind == JJ_E_OR)) {
      return true;
    }
    return eval(r, e->b, out);
  case JJ_E_COND: {
    value c;
    if (!eval(r, e->a, &c)) {
      return false;
    }
    if (truthy(&c)) {
      return eval(r, e->b, out);
    }
    *out = UNDEF;
    return !e->c || eval(r, e->c, out);
  }
  case JJ_E_LIST:
    return eval_list(r, e, out);
  default: /* JJ_E_DICT */
    return eval_dict(r, e, out);
  }
}

/* ---- statements
 * ------------------------------------------------------------------ */

static flow exec_body(render *r, const jj_body *b);

static flow exec_for(render *r, const jj_node *n) {
  value seq;
  list *all, *items;
  if (!eval(r, n->expr, &seq)) {
    return FLOW_ERROR;
  }
  r->line = n->line;
  if (seq.kind == V_UNDEF) {
    all = &(list){0};
  } else if (!items_of(r, "a for loop", &seq, &all)) {
    return FLOW_ERROR;
  }
  scope *s = alloc(r, sizeof *s);
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
    if (!new_list(r, &filtered)) {
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
      ok = item(r, &v, &i0, &a) && item(r, &v, &i1, &b) &&
           assign(r, s, n->str, a) && assign(r, s, n->attr, b);
    }
    if (!ok || !eval(r, n->cond, &c)) {
      f = FLOW_ERROR;
    } else if (truthy(&c) && !list_push(r, items, v)) {
      f = FLOW_ERROR;
    }
  }
  loop *lp = f == FLOW_OK ? alloc(r, sizeof *lp) : NULL;
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
        type_error(r, "unpacking two loop variables", &v, NULL);
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
      value t = str_value(n->str, n->len, FROM_TEMPLATE);
      if (!emit(r, &t)) {
        return FLOW_ERROR;
      }
      break;
    }
    case JJ_N_OUTPUT: {
      value v;
      if (!eval(r, n->expr, &v) || !emit(r, &v)) {
        return FLOW_ERROR;
      }
      break;
    }
    case JJ_N_IF: {
      value c;
      if (!eval(r, n->expr, &c)) {
        return FLOW_ERROR;
      }
      flow f = exec_body(r, truthy(&c) ? &n->body : &n->orelse);
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
      if (!eval(r, n->expr, &v)) {
        return FLOW_ERROR;
      }
      r->line = n->line;
      if (n->attr) {
        value *ns = lookup(r, n->str);
        if (!ns || ns->kind != V_NS) {
          fail(r, FDY_ERR_INVALID_ARGUMENT, "set",
               "'%s' is not a namespace: cannot set its attribute '%s'", n->str,
               n->attr);
          return FLOW_ERROR;
        }
        if (!dict_set(r, ns->d,
                      str_value(n->attr, strlen(n->attr), FROM_TEMPLATE), v)) {
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
    return fail(r, FDY_ERR_OVERFLOW, "variables",
                "the variables nest deeper than 64");
  }
  switch (json_typeof(j)) {
  case JSON_OBJECT: {
    const char *key;
    json_t *v;
    if (!new_dict(r, V_DICT, out)) {
      return false;
    }
    json_object_foreach(j, key, v) {
      value k, x;
      size_t n = strlen(key);
      char *s = new_str(r, n, FROM_DATA, &k);
      if (!s) {
        return false;
      }
      memcpy(s, key, n);
      if (!from_json(r, v, &x, depth + 1) || !dict_set(r, out->d, k, x)) {
        return false;
      }
    }
    return true;
  }
  case JSON_ARRAY: {
    size_t i;
    json_t *v;
    if (!new_list(r, out)) {
      return false;
    }
    json_array_foreach(j, i, v) {
      value x;
      if (!from_json(r, v, &x, depth + 1) || !list_push(r, out->l, x)) {
        return false;
      }
    }
    return true;
  }
  case JSON_STRING: {
    size_t n = json_string_length(j);
    char *s = new_str(r, n, FROM_DATA, out);
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
  if (!new_list(r, &msgs)) {
    return false;
  }
  for (size_t k = 0; k < in->message_count; k++) {
    const fdy_jinja_message *m = &in->messages[k];
    value d, role, content;
    size_t rl = m->role ? strlen(m->role) : 0;
    char *rs = new_str(r, rl, FROM_DATA, &role);
    char *cs = rs ? new_str(r, m->content_len, FROM_DATA, &content) : NULL;
    if (!cs || !new_dict(r, V_DICT, &d)) {
      return false;
    }
    memcpy(rs, m->role ? m->role : "", rl);
    if (m->content_len) {
      memcpy(cs, m->content, m->content_len);
    }
    if (!dict_set(r, d.d, str_value("role", 4, FROM_TEMPLATE), role) ||
        !dict_set(r, d.d, str_value("content", 7, FROM_TEMPLATE), content) ||
        !list_push(r, msgs.l, d)) {
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
                str_value(tokens[k], strlen(tokens[k]), FROM_TEMPLATE))) {
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
    fail(r, FDY_ERR_PARSE, "variables",
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
    char *name = ok ? alloc(r, n + 1) : NULL;
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
    fail(&r, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
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
