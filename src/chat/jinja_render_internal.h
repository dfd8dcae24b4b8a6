/* What the renderer's files share: the values of jinja_value.c, the state of
 * one render, and the few functions each file gives the others
 * (jinja_value.c: values and their Python semantics; jinja_eval.c:
 * expressions; jinja_render.c: scopes, statements and the entry point). Not
 * a public header: only those three files include it. */
#ifndef FOUNDRY_JINJA_RENDER_INTERNAL_H
#define FOUNDRY_JINJA_RENDER_INTERNAL_H

#include "jinja_internal.h"

/* The most bytes of values, and of output, one render may hold. */
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

typedef struct scope scope; /* the variables of a block (jinja_render.c) */

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

/* A growable byte buffer in the arena (for str(), repr() and tojson). */
typedef struct sbuf {
  render *r;
  char *s;
  size_t len, cap;
  bool data; /* some of it comes from data */
} sbuf;

/* Every function below that takes a render (or an sbuf) returns false (or
 * NULL) having failed the render through jj_fail, unless it says otherwise;
 * what it allocates lives in the render's arena. */

/* ---- jinja_value.c: errors and memory ----------------------------------- */

/* Fails the render with kind, the name of what failed (or NULL) and a printf
 * message prefixed by the template line; keeps an earlier failure. Returns
 * false. */
bool jj_fail(render *r, fdy_status kind, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* n zeroed bytes; over RENDER_LIMIT in all, FDY_ERR_BUDGET. */
void *jj_render_alloc(render *r, size_t n);
/* A new array of cap elements of size bytes holding the first count (at most
 * cap) of old. */
void *jj_grow(render *r, const void *old, size_t count, size_t cap,
              size_t size);
/* Fails: op is not defined on a (b NULL) or between a and b, or an operand
 * is a named undefined variable. Returns false. */
bool jj_type_error(render *r, const char *op, const value *a, const value *b);

/* ---- jinja_value.c: strings --------------------------------------------- */

/* The string of the len bytes at s (a NUL after them), all from origin. */
value jj_str_value(const char *s, size_t len, uint8_t origin);
/* A new string of len bytes from origin in *out; the caller fills the bytes
 * returned. */
char *jj_new_str(render *r, size_t len, uint8_t origin, value *out);
/* Where byte i of the string v comes from: FROM_DATA or FROM_TEMPLATE. */
uint8_t jj_origin_at(const value *v, size_t i);
/* *out = a + b (strings), each byte keeping its origin. */
bool jj_concat_str(render *r, const value *a, const value *b, value *out);
/* The origin of a string transformed from v: the template's only when all of
 * v is. */
uint8_t jj_derived(const value *v);
/* Bytes of the UTF-8 character at s (n bytes left); 1 for a byte that starts
 * none. */
size_t jj_char_len(const char *s, size_t n);
/* Characters, as jj_char_len counts them, in the n bytes at s. */
size_t jj_char_count(const char *s, size_t n);

/* ---- jinja_value.c: lists and dicts ------------------------------------- */

/* Appends v to l. */
bool jj_list_push(render *r, list *l, value v);
/* *out = a new empty list. */
bool jj_new_list(render *r, value *out);
/* The value of the key jj_equal to key in d, or NULL. */
value *jj_dict_find(const dict *d, const value *key);
/* d[key] = val, replacing the value of an equal key. */
bool jj_dict_set(render *r, dict *d, value key, value val);
/* *out = a new empty dict of kind V_DICT or V_NS. */
bool jj_new_dict(render *r, vkind kind, value *out);

/* ---- jinja_value.c: Python semantics ------------------------------------ */

/* Python's bool(v); undefined is false. */
bool jj_truthy(const value *v);
/* Whether v is an int, a float or a bool. */
bool jj_is_number(const value *v);
/* The number v (jj_is_number) as a double. */
double jj_as_double(const value *v);
/* The int or bool v as an integer. */
int64_t jj_as_int(const value *v);
/* Python's a == b: numbers across kinds, lists and dicts by their items. */
bool jj_equal(const value *a, const value *b);
/* Appends the n bytes at s to b, which stays NUL-terminated. */
bool jj_put(sbuf *b, const char *s, size_t n);
/* b's text as a string, from data when any of it is; UNDEF having failed. */
value jj_sbuf_value(sbuf *b);
/* *out = str(v); a string as it is. */
bool jj_to_str(render *r, const value *v, value *out);
/* Appends json.dumps(v, ensure_ascii=False, indent, sort_keys) to b at
 * nesting level (tojson; indent < 0: one line); deeper than 64 levels, or a
 * value JSON cannot hold, fails. */
bool jj_json_of(sbuf *b, const value *v, int indent, bool sort_keys, int level);

/* ---- jinja_eval.c: expressions ------------------------------------------ */

/* Evaluates the expression e into *out. */
bool jj_eval(render *r, const jj_expr *e, value *out);
/* *out = obj[key], as Jinja subscripts and attributes: undefined when
 * missing; fails on an undefined obj or a string's non-integer index. */
bool jj_item(render *r, const value *obj, const value *key, value *out);
/* The items of v for filters and loops: a list as it is, a dict's keys, a
 * string's characters, none for undefined; another value fails, naming op. */
bool jj_items_of(render *r, const char *op, const value *v, list **out);

/* ---- jinja_render.c: scopes --------------------------------------------- */

/* The variable name in the innermost scope that has it, or NULL. */
value *jj_lookup(render *r, const char *name);

#endif
