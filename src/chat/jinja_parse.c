/* The Jinja parser: template source to the tree of jinja_internal.h, with
 * jinja2's lexing rules as transformers configures them (trim_blocks,
 * lstrip_blocks, `-` and `+` whitespace control, newlines normalised, one
 * trailing newline dropped). Anything outside the interpreted subset is
 * refused here, naming the construct, so that a template that parses
 * renders with no "unknown filter" surprise later. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

#define MAX_SOURCE (16u << 20)
#define MAX_DEPTH  256

/* ---- arena --------------------------------------------------------------- */

struct jj_chunk {
  jj_chunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

void *jj_alloc(jj_arena *a, size_t n, bool *over) {
  n = (n + 15) & ~(size_t)15;
  if (over) {
    *over = false;
  }
  if (n > a->limit || a->used > a->limit - n) {
    if (over) {
      *over = true;
    }
    return NULL;
  }
  jj_chunk *c = a->head;
  if (!c || c->size - c->used < n) {
    size_t size = n > 65536 ? n : 65536;
    c = malloc(sizeof *c + size);
    if (!c) {
      return NULL;
    }
    c->next = a->head;
    c->size = size;
    c->used = 0;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  a->used += n;
  memset(p, 0, n);
  return p;
}

void jj_arena_free(jj_arena *a) {
  while (a->head) {
    jj_chunk *next = a->head->next;
    free(a->head);
    a->head = next;
  }
  a->used = 0;
}

/* ---- the parser's state ------------------------------------------------- */

typedef enum tok_kind {
  T_NAME,
  T_STR,
  T_INT,
  T_FLOAT,
  T_OP,  /* text: the operator */
  T_END, /* the tag's end */
} tok_kind;

typedef struct tok {
  tok_kind kind;
  size_t pos; /* where it starts */
  const char *text;
  size_t len; /* T_STR: the decoded value */
  int64_t i;
  double f;
} tok;

typedef struct parser {
  jj_arena *arena;
  char *src; /* normalised source */
  size_t len, pos;
  size_t line_pos; /* line counting cache: line_no at line_pos */
  int line_no;
  bool line_starting;
  bool in_block; /* a {% %} tag (else {{ }}) */
  int brackets;  /* open ( [ { in the tag */
  tok cur;
  int depth, loops;
  fdy_status status;
  fdy_error *err;
} parser;

static int line_at(parser *p, size_t pos) {
  if (pos < p->line_pos) {
    p->line_pos = 0;
    p->line_no = 1;
  }
  for (; p->line_pos < pos && p->line_pos < p->len; p->line_pos++) {
    p->line_no += p->src[p->line_pos] == '\n';
  }
  return p->line_no;
}

static int column_at(parser *p, size_t pos) {
  size_t start = pos;
  while (start > 0 && p->src[start - 1] != '\n') {
    start--;
  }
  return (int)(pos - start) + 1;
}

/* Records the first error at pos; returns false so callers can chain. */
static bool fail(parser *p, fdy_status kind, size_t pos, const char *name,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static bool fail(parser *p, fdy_status kind, size_t pos, const char *name,
                 const char *fmt, ...) {
  if (p->status != FDY_OK) {
    return false;
  }
  p->status = kind;
  if (!p->err) {
    return false;
  }
  char msg[FDY_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int line = line_at(p, pos), column = column_at(p, pos);
  fdy_error_setf(p->err, kind, name, 0, 0,
                 "chat template line %d column %d: %s", line, column, msg);
  p->err->line = line;
  p->err->column = column;
  return false;
}

static bool unsupported(parser *p, size_t pos, const char *kind,
                        const char *what, size_t len) {
  char name[96];
  snprintf(name, sizeof name, "%s%s%.*s", kind, *kind ? " " : "",
           (int)(len > 48 ? 48 : len), what);
  return fail(p, FDY_ERR_UNSUPPORTED, pos, name,
              "'%s' is outside the Jinja that Foundry interprets", name);
}

static void *alloc(parser *p, size_t n) {
  void *q = jj_alloc(p->arena, n, NULL);
  if (!q) {
    fail(p, FDY_ERR_OUT_OF_MEMORY, p->pos, NULL, "out of memory");
  }
  return q;
}

/* A new array of cap elements of size bytes holding the first count
 * (at most cap) of old; NULL as alloc. */
static void *grow(parser *p, const void *old, size_t count, size_t cap,
                  size_t size) {
  void *q = alloc(p, cap * size);
  if (q && count) {
    memcpy(q, old, count * size);
  }
  return q;
}

static char *copy(parser *p, const char *s, size_t n) {
  char *q = alloc(p, n + 1);
  if (q) {
    memcpy(q, s, n);
  }
  return q;
}

/* Python's str.isspace() for one byte (what \s and rstrip() take). */
static bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static bool is_name_start(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/* ---- tokens inside a tag ------------------------------------------------ */

static bool at_tag_end(parser *p) {
  const char *s = p->src + p->pos, *end = p->in_block ? "%}" : "}}";
  size_t left = p->len - p->pos;
  if (p->brackets > 0) {
    return false;
  }
  if (left >= 3 && (s[0] == '-' || s[0] == '+') && memcmp(s + 1, end, 2) == 0) {
    return !(s[0] == '+' && !p->in_block); /* {{ x +}} is an operator */
  }
  return left >= 2 && memcmp(s, end, 2) == 0;
}

/* The character of the one-character escape \e (\n, \t, \\, \' ...), or 0
 * when e makes none. */
static char one_char_escape(char e) {
  static const char escapes[] = "ntrabfv\\'\"";
  static const char chars[] = "\n\t\r\a\b\f\v\\'\"";
  const char *at = e ? strchr(escapes, e) : NULL;
  return at ? chars[at - escapes] : 0;
}

/* Decodes a string literal's escapes as Python's unicode-escape does (which
 * is how jinja2 reads them) into the arena. */
static bool string_literal(parser *p) {
  size_t start = p->pos;
  char quote = p->src[p->pos++];
  char *out = alloc(p, p->len - p->pos + 1);
  if (!out) {
    return false;
  }
  size_t n = 0;
  for (;;) {
    if (p->pos >= p->len) {
      return fail(p, FDY_ERR_PARSE, start, NULL, "unclosed string literal");
    }
    char c = p->src[p->pos++];
    if (c == quote) {
      break;
    }
    if (c != '\\') {
      out[n++] = c;
      continue;
    }
    if (p->pos >= p->len) {
      return fail(p, FDY_ERR_PARSE, start, NULL, "unclosed string literal");
    }
    char e = p->src[p->pos++];
    uint32_t cp = 0;
    int digits = 0;
    char one = one_char_escape(e);
    if (one) {
      out[n++] = one;
      continue;
    }
    switch (e) {
    case '\n':
      continue;
    case 'x':
      digits = 2;
      break;
    case 'u':
      digits = 4;
      break;
    case 'U':
      digits = 8;
      break;
    case 'N':
      return unsupported(p, p->pos - 2, "escape", "\\N{...}", 7);
    default:
      if (e >= '0' && e <= '7') {
        cp = (uint32_t)(e - '0');
        for (int k = 0; k < 2 && p->pos < p->len && p->src[p->pos] >= '0' &&
                        p->src[p->pos] <= '7';
             k++) {
          cp = cp * 8 + (uint32_t)(p->src[p->pos++] - '0');
        }
        digits = -1;
        break;
      }
      out[n++] = '\\'; /* an unknown escape stays as it is */
      out[n++] = e;
      continue;
    }
    for (int k = 0; k < digits; k++) {
      char h = p->pos < p->len ? p->src[p->pos] : 0;
      int v = is_digit(h)              ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (v < 0) {
        return fail(p, FDY_ERR_PARSE, p->pos, NULL,
                    "truncated \\%c escape in a string literal", e);
      }
      cp = cp * 16 + (uint32_t)v;
      p->pos++;
    }
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return fail(p, FDY_ERR_PARSE, p->pos, NULL,
                  "escape \\%c of an invalid code point in a string literal",
                  e);
    }
    /* UTF-8 of cp (an escape's longest form takes at least its bytes) */
    if (cp < 0x80) {
      out[n++] = (char)cp;
    } else if (cp < 0x800) {
      out[n++] = (char)(0xc0 | (cp >> 6));
      out[n++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out[n++] = (char)(0xe0 | (cp >> 12));
      out[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
      out[n++] = (char)(0x80 | (cp & 0x3f));
    } else {
      out[n++] = (char)(0xf0 | (cp >> 18));
      out[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
      out[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
      out[n++] = (char)(0x80 | (cp & 0x3f));
    }
  }
  out[n] = '\0';
  p->cur = (tok){.kind = T_STR, .pos = start, .text = out, .len = n};
  return true;
}

static bool number(parser *p) {
  size_t start = p->pos;
  char buf[128];
  size_t n = 0;
  bool is_float = false;
  while (p->pos < p->len &&
         (is_digit(p->src[p->pos]) || p->src[p->pos] == '_')) {
    if (p->src[p->pos] != '_' && n < sizeof buf - 1) {
      buf[n++] = p->src[p->pos];
    }
    p->pos++;
  }
  if (p->pos + 1 < p->len && p->src[p->pos] == '.' &&
      is_digit(p->src[p->pos + 1])) {
    is_float = true;
    buf[n < sizeof buf - 1 ? n++ : n] = '.';
    p->pos++;
    while (p->pos < p->len &&
           (is_digit(p->src[p->pos]) || p->src[p->pos] == '_')) {
      if (p->src[p->pos] != '_' && n < sizeof buf - 1) {
        buf[n++] = p->src[p->pos];
      }
      p->pos++;
    }
  }
  size_t e = p->pos;
  if (e < p->len && (p->src[e] == 'e' || p->src[e] == 'E')) {
    e++;
    if (e < p->len && (p->src[e] == '+' || p->src[e] == '-')) {
      e++;
    }
    if (e < p->len && is_digit(p->src[e])) {
      is_float = true;
      buf[n < sizeof buf - 1 ? n++ : n] = 'e';
      for (size_t k = p->pos + 1; k < e; k++) {
        buf[n < sizeof buf - 1 ? n++ : n] = p->src[k];
      }
      p->pos = e;
      while (p->pos < p->len && is_digit(p->src[p->pos])) {
        if (n < sizeof buf - 1) {
          buf[n++] = p->src[p->pos];
        }
        p->pos++;
      }
    }
  }
  if (n >= sizeof buf - 1) {
    return fail(p, FDY_ERR_OVERFLOW, start, NULL, "number literal too long");
  }
  buf[n] = '\0';
  errno = 0;
  if (is_float) {
    p->cur = (tok){.kind = T_FLOAT, .pos = start, .f = strtod(buf, NULL)};
    return true;
  }
  long long v = strtoll(buf, NULL, 10);
  if (errno == ERANGE) {
    return fail(p, FDY_ERR_OVERFLOW, start, NULL,
                "integer literal %s is outside 64 bits", buf);
  }
  p->cur = (tok){.kind = T_INT, .pos = start, .i = v};
  return true;
}

/* Reads the next token of the tag into p->cur. */
static bool next(parser *p) {
  while (p->pos < p->len && is_space(p->src[p->pos])) {
    p->pos++;
  }
  if (p->pos >= p->len) {
    return fail(p, FDY_ERR_PARSE, p->pos, NULL, "unclosed %s tag",
                p->in_block ? "{% ... %}" : "{{ ... }}");
  }
  const char *s = p->src + p->pos;
  if (at_tag_end(p)) {
    p->cur = (tok){.kind = T_END, .pos = p->pos};
    return true;
  }
  if (is_name_start(*s)) {
    size_t n = 1;
    while (p->pos + n < p->len && (is_name_start(s[n]) || is_digit(s[n]))) {
      n++;
    }
    p->cur = (tok){.kind = T_NAME, .pos = p->pos, .text = s, .len = n};
    p->pos += n;
    return true;
  }
  if (is_digit(*s)) {
    return number(p);
  }
  if (*s == '\'' || *s == '"') {
    return string_literal(p);
  }
  static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
  for (size_t k = 0; k < sizeof ops2 / sizeof *ops2; k++) {
    if (p->len - p->pos >= 2 && memcmp(s, ops2[k], 2) == 0) {
      p->cur = (tok){.kind = T_OP, .pos = p->pos, .text = ops2[k], .len = 2};
      p->pos += 2;
      return true;
    }
  }
  if (strchr("+-*/%~<>=()[]{},.:|", *s)) {
    if (*s == '(' || *s == '[' || *s == '{') {
      p->brackets++;
    } else if ((*s == ')' || *s == ']' || *s == '}') && p->brackets > 0) {
      p->brackets--;
    }
    p->cur = (tok){.kind = T_OP, .pos = p->pos, .text = s, .len = 1};
    p->pos++;
    return true;
  }
  return fail(p, FDY_ERR_PARSE, p->pos, NULL,
              "unexpected character '%c' (0x%02x) in a tag",
              (unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f ? *s : '?',
              (unsigned char)*s);
}

static bool is_op(const parser *p, const char *op) {
  return p->cur.kind == T_OP && p->cur.len == strlen(op) &&
         memcmp(p->cur.text, op, p->cur.len) == 0;
}

static bool is_name(const parser *p, const char *name) {
  return p->cur.kind == T_NAME && p->cur.len == strlen(name) &&
         memcmp(p->cur.text, name, p->cur.len) == 0;
}

static const char *describe(const parser *p, char *buf, size_t cap) {
  switch (p->cur.kind) {
  case T_END:
    return "the end of the tag";
  case T_STR:
    return "a string";
  case T_INT:
  case T_FLOAT:
    return "a number";
  default:
    snprintf(buf, cap, "'%.*s'", (int)(p->cur.len > 40 ? 40 : p->cur.len),
             p->cur.text);
    return buf;
  }
}

static bool expect_op(parser *p, const char *op) {
  char buf[48];
  if (!is_op(p, op)) {
    return fail(p, FDY_ERR_PARSE, p->cur.pos, NULL, "expected '%s', found %s",
                op, describe(p, buf, sizeof buf));
  }
  return next(p);
}

/* ---- expressions -------------------------------------------------------- */

static jj_expr *expression(parser *p);
static jj_expr *or_expr(parser *p);
static jj_expr *unary(parser *p, bool with_filter);

static jj_expr *node(parser *p, jj_expr_kind kind, size_t pos) {
  jj_expr *e = alloc(p, sizeof *e);
  if (e) {
    e->kind = kind;
    e->line = line_at(p, pos);
  }
  return e;
}

static jj_expr *binary(parser *p, jj_expr_kind kind, jj_op op, jj_expr *a,
                       jj_expr *b, size_t pos) {
  if (!a || !b) {
    return NULL;
  }
  jj_expr *e = node(p, kind, pos);
  if (e) {
    e->op = op;
    e->a = a;
    e->b = b;
  }
  return e;
}

static bool enter(parser *p) {
  if (++p->depth > MAX_DEPTH) {
    return fail(p, FDY_ERR_OVERFLOW, p->cur.pos, NULL,
                "the template nests deeper than %d", MAX_DEPTH);
  }
  return true;
}

/* Arguments up to ')', already past '('. Keyword arguments when keywords. */
static bool call_args(parser *p, jj_arg **out, size_t *count) {
  jj_arg *args = NULL;
  size_t n = 0, cap = 0;
  while (!is_op(p, ")")) {
    if (n > 0 && !expect_op(p, ",")) {
      return false;
    }
    if (is_op(p, ")")) {
      break; /* a trailing comma */
    }
    if (n == cap) {
      size_t grown = cap ? cap * 2 : 4;
      jj_arg *a = grow(p, args, n, grown, sizeof *a);
      if (!a) {
        return false;
      }
      args = a;
      cap = grown;
    }
    const char *name = NULL;
    if (p->cur.kind == T_NAME) {
      /* name=value: look past the name for '=' (not '==') */
      size_t at = p->pos;
      while (at < p->len && is_space(p->src[at])) {
        at++;
      }
      if (at < p->len && p->src[at] == '=' &&
          !(at + 1 < p->len && p->src[at + 1] == '=')) {
        if (!(name = copy(p, p->cur.text, p->cur.len)) || !next(p) ||
            !next(p)) {
          return false;
        }
      }
    } else if (is_op(p, "*") || is_op(p, "**")) {
      return unsupported(p, p->cur.pos, "", "*args and **kwargs", 18);
    }
    jj_expr *v = expression(p);
    if (!v) {
      return false;
    }
    args[n++] = (jj_arg){.name = name, .value = v};
  }
  *out = args;
  *count = n;
  return next(p);
}

/* The names the renderer implements (jinja_eval.c dispatches on the same
 * spellings). */
static const char *const filters[] = {
    "trim",  "length",     "count",      "tojson", "default", "d",
    "upper", "lower",      "string",     "list",   "join",    "first",
    "last",  "selectattr", "rejectattr", "select", "reject",  "map",
    "items", "int",        "float",      "abs",    "replace", "safe",
};
const char *const jj_tests[] = {
    "defined", "undefined", "none",    "string",   "number",   "integer",
    "float",   "boolean",   "mapping", "iterable", "sequence", "true",
    "false",   "equalto",   "eq",      "ne",       "odd",      "even",
    "in",      "lower",     "upper",
};
const size_t jj_test_count = sizeof jj_tests / sizeof *jj_tests;
static const char *const methods[] = {
    "startswith", "endswith", "split", "strip", "lstrip", "rstrip", "replace",
    "upper",      "lower",    "items", "keys",  "values", "get",
};
const char *const jj_functions[] = {"namespace", "raise_exception",
                                    "strftime_now"};
const size_t jj_function_count = sizeof jj_functions / sizeof *jj_functions;

bool jj_listed(const char *const *names, size_t count, const char *s,
               size_t len) {
  for (size_t k = 0; k < count; k++) {
    if (strlen(names[k]) == len && memcmp(names[k], s, len) == 0) {
      return true;
    }
  }
  return false;
}
#define LISTED(names, s, len)                                                  \
  jj_listed(names, sizeof names / sizeof *names, s, len)

static jj_expr *filter_or_test(parser *p, jj_expr *e) {
  while (e && (is_op(p, "|") || is_name(p, "is"))) {
    bool filter = is_op(p, "|");
    size_t pos = p->cur.pos;
    if (!next(p)) {
      return NULL;
    }
    bool negated = false;
    if (!filter && is_name(p, "not")) {
      negated = true;
      if (!next(p)) {
        return NULL;
      }
    }
    if (p->cur.kind != T_NAME) {
      char buf[48];
      fail(p, FDY_ERR_PARSE, p->cur.pos, NULL, "expected a %s name, found %s",
           filter ? "filter" : "test", describe(p, buf, sizeof buf));
      return NULL;
    }
    const char *name = p->cur.text;
    size_t len = p->cur.len;
    if (filter ? !LISTED(filters, name, len)
               : !jj_listed(jj_tests, jj_test_count, name, len)) {
      unsupported(p, p->cur.pos, filter ? "filter" : "test", name, len);
      return NULL;
    }
    jj_expr *f = node(p, filter ? JJ_E_FILTER : JJ_E_TEST, pos);
    if (!f || !(f->str = copy(p, name, len)) || !next(p)) {
      return NULL;
    }
    f->len = len;
    f->a = e;
    f->i = negated;
    if (is_op(p, "(")) {
      if (!next(p) || !call_args(p, &f->args, &f->nargs)) {
        return NULL;
      }
    } else if (!filter &&
               (p->cur.kind == T_STR || p->cur.kind == T_INT ||
                p->cur.kind == T_FLOAT || is_op(p, "[") || is_op(p, "{") ||
                (p->cur.kind == T_NAME && !is_name(p, "else") &&
                 !is_name(p, "or") && !is_name(p, "and") && !is_name(p, "if") &&
                 !is_name(p, "is") && !is_name(p, "in") &&
                 !is_name(p, "not")))) {
      /* `is equalto 'x'`: one argument without parentheses */
      jj_expr *arg = unary(p, false);
      if (!arg || !(f->args = alloc(p, sizeof *f->args))) {
        return NULL;
      }
      f->args[0].value = arg;
      f->nargs = 1;
    }
    e = f;
  }
  return e;
}

static jj_expr *primary(parser *p) {
  size_t pos = p->cur.pos;
  jj_expr *e = NULL;
  switch (p->cur.kind) {
  case T_STR: {
    e = node(p, JJ_E_STR, pos);
    if (!e) {
      return NULL;
    }
    e->str = p->cur.text;
    e->len = p->cur.len;
    if (!next(p)) {
      return NULL;
    }
    while (p->cur.kind == T_STR) { /* adjacent literals join */
      char *s = alloc(p, e->len + p->cur.len + 1);
      if (!s) {
        return NULL;
      }
      memcpy(s, e->str, e->len);
      memcpy(s + e->len, p->cur.text, p->cur.len);
      e->str = s;
      e->len += p->cur.len;
      if (!next(p)) {
        return NULL;
      }
    }
    return e;
  }
  case T_INT:
  case T_FLOAT:
    e = node(p, p->cur.kind == T_INT ? JJ_E_INT : JJ_E_FLOAT, pos);
    if (!e) {
      return NULL;
    }
    e->i = p->cur.i;
    e->f = p->cur.f;
    return next(p) ? e : NULL;
  case T_NAME:
    if (is_name(p, "true") || is_name(p, "True") || is_name(p, "false") ||
        is_name(p, "False")) {
      e = node(p, JJ_E_BOOL, pos);
      if (e) {
        e->i = p->cur.text[0] == 't' || p->cur.text[0] == 'T';
      }
    } else if (is_name(p, "none") || is_name(p, "None")) {
      e = node(p, JJ_E_NONE, pos);
    } else {
      e = node(p, JJ_E_NAME, pos);
      if (e && (e->str = copy(p, p->cur.text, p->cur.len))) {
        e->len = p->cur.len;
      } else {
        e = NULL;
      }
    }
    return e && next(p) ? e : NULL;
  case T_OP:
    if (is_op(p, "(")) {
      if (!next(p) || !(e = expression(p))) {
        return NULL;
      }
      if (is_op(p, ",")) { /* a tuple: a list here */
        jj_expr *list = node(p, JJ_E_LIST, pos);
        jj_arg *args = NULL;
        size_t n = 0;
        if (!list || !next(p) || !call_args(p, &args, &n)) {
          return NULL;
        }
        list->args = alloc(p, (n + 1) * sizeof *list->args);
        if (!list->args) {
          return NULL;
        }
        list->args[0].value = e;
        if (n) {
          memcpy(list->args + 1, args, n * sizeof *args);
        }
        list->nargs = n + 1;
        return list;
      }
      return expect_op(p, ")") ? e : NULL;
    }
    if (is_op(p, "[") || is_op(p, "{")) {
      bool dict = is_op(p, "{");
      const char *close = dict ? "}" : "]";
      e = node(p, dict ? JJ_E_DICT : JJ_E_LIST, pos);
      if (!e || !next(p)) {
        return NULL;
      }
      size_t cap = 0;
      while (!is_op(p, close)) {
        if (e->nargs > 0 && !expect_op(p, ",")) {
          return NULL;
        }
        if (is_op(p, close)) {
          break;
        }
        if (e->nargs + 2 > cap) {
          size_t grown = cap ? cap * 2 : 8;
          jj_arg *a = grow(p, e->args, e->nargs, grown, sizeof *a);
          if (!a) {
            return NULL;
          }
          e->args = a;
          cap = grown;
        }
        jj_expr *v = expression(p);
        if (!v) {
          return NULL;
        }
        e->args[e->nargs++].value = v;
        if (dict) {
          if (!expect_op(p, ":") || !(v = expression(p))) {
            return NULL;
          }
          e->args[e->nargs++].value = v;
        }
      }
      return next(p) ? e : NULL;
    }
    break;
  default:
    break;
  }
  char buf[48];
  fail(p, FDY_ERR_PARSE, pos, NULL, "expected an expression, found %s",
       describe(p, buf, sizeof buf));
  return NULL;
}

static jj_expr *postfix(parser *p, jj_expr *e) {
  while (e) {
    size_t pos = p->cur.pos;
    if (is_op(p, ".")) {
      if (!next(p)) {
        return NULL;
      }
      jj_expr *a = node(p, JJ_E_ATTR, pos);
      if (!a) {
        return NULL;
      }
      a->a = e;
      if (p->cur.kind == T_NAME) {
        if (!(a->str = copy(p, p->cur.text, p->cur.len))) {
          return NULL;
        }
        a->len = p->cur.len;
      } else if (p->cur.kind == T_INT) { /* x.0 is x[0] */
        a->kind = JJ_E_ITEM;
        if (!(a->b = node(p, JJ_E_INT, p->cur.pos))) {
          return NULL;
        }
        a->b->i = p->cur.i;
      } else {
        char buf[48];
        fail(p, FDY_ERR_PARSE, p->cur.pos, NULL,
             "expected an attribute name after '.', found %s",
             describe(p, buf, sizeof buf));
        return NULL;
      }
      if (!next(p)) {
        return NULL;
      }
      e = a;
    } else if (is_op(p, "[")) {
      if (!next(p)) {
        return NULL;
      }
      jj_expr *bounds[3] = {NULL, NULL, NULL};
      int colons = 0;
      for (;;) {
        if (!is_op(p, ":") && !is_op(p, "]")) {
          if (!(bounds[colons] = expression(p))) {
            return NULL;
          }
        }
        if (is_op(p, ":") && colons < 2) {
          colons++;
          if (!next(p)) {
            return NULL;
          }
          continue;
        }
        break;
      }
      if (!expect_op(p, "]")) {
        return NULL;
      }
      if (colons == 0 && !bounds[0]) {
        fail(p, FDY_ERR_PARSE, pos, NULL, "empty subscript []");
        return NULL;
      }
      jj_expr *s = node(p, colons ? JJ_E_SLICE : JJ_E_ITEM, pos);
      if (!s) {
        return NULL;
      }
      s->a = e;
      s->b = bounds[0];
      s->c = bounds[1];
      s->d = bounds[2];
      e = s;
    } else if (is_op(p, "(")) {
      /* calls: a method (x.name(...)) or a global function (name(...)) */
      if (e->kind == JJ_E_ATTR) {
        if (!LISTED(methods, e->str, e->len)) {
          unsupported(p, pos, "method", e->str, e->len);
          return NULL;
        }
      } else if (e->kind == JJ_E_NAME) {
        if (!jj_listed(jj_functions, jj_function_count, e->str, e->len)) {
          unsupported(p, pos, "function", e->str, e->len);
          return NULL;
        }
      } else {
        unsupported(p, pos, "", "a call of an expression", 23);
        return NULL;
      }
      jj_expr *c = node(p, JJ_E_CALL, pos);
      if (!c || !next(p) || !call_args(p, &c->args, &c->nargs)) {
        return NULL;
      }
      c->a = e;
      e = c;
    } else {
      break;
    }
  }
  return e;
}

static jj_expr *unary(parser *p, bool with_filter) {
  if (!enter(p)) {
    return NULL;
  }
  size_t pos = p->cur.pos;
  jj_expr *e;
  if (is_op(p, "-") || is_op(p, "+")) {
    bool neg = is_op(p, "-");
    if (!next(p)) {
      return NULL;
    }
    jj_expr *inner = unary(p, false);
    e = inner ? node(p, neg ? JJ_E_NEG : JJ_E_POS, pos) : NULL;
    if (e) {
      e->a = inner;
    }
  } else {
    e = primary(p);
  }
  e = postfix(p, e);
  if (with_filter) {
    e = filter_or_test(p, e);
  }
  p->depth--;
  return e;
}

static jj_expr *power(parser *p) {
  jj_expr *e = unary(p, true);
  while (e && is_op(p, "**")) {
    size_t pos = p->cur.pos;
    e = next(p) ? binary(p, JJ_E_BINARY, JJ_POW, e, unary(p, true), pos) : NULL;
  }
  return e;
}

static jj_expr *product(parser *p) {
  jj_expr *e = power(p);
  while (e &&
         (is_op(p, "*") || is_op(p, "/") || is_op(p, "//") || is_op(p, "%"))) {
    jj_op op = is_op(p, "*")    ? JJ_MUL
               : is_op(p, "/")  ? JJ_DIV
               : is_op(p, "//") ? JJ_FLOORDIV
                                : JJ_MOD;
    size_t pos = p->cur.pos;
    e = next(p) ? binary(p, JJ_E_BINARY, op, e, power(p), pos) : NULL;
  }
  return e;
}

static jj_expr *concat(parser *p) {
  jj_expr *e = product(p);
  while (e && is_op(p, "~")) {
    size_t pos = p->cur.pos;
    e = next(p) ? binary(p, JJ_E_BINARY, JJ_CONCAT, e, product(p), pos) : NULL;
  }
  return e;
}

static jj_expr *sum(parser *p) {
  jj_expr *e = concat(p);
  while (e && (is_op(p, "+") || is_op(p, "-"))) {
    jj_op op = is_op(p, "+") ? JJ_ADD : JJ_SUB;
    size_t pos = p->cur.pos;
    e = next(p) ? binary(p, JJ_E_BINARY, op, e, concat(p), pos) : NULL;
  }
  return e;
}

static jj_expr *comparison(parser *p) {
  jj_expr *e = sum(p);
  while (e) {
    size_t pos = p->cur.pos;
    jj_op op;
    if (is_op(p, "==")) {
      op = JJ_EQ;
    } else if (is_op(p, "!=")) {
      op = JJ_NE;
    } else if (is_op(p, "<")) {
      op = JJ_LT;
    } else if (is_op(p, "<=")) {
      op = JJ_LE;
    } else if (is_op(p, ">")) {
      op = JJ_GT;
    } else if (is_op(p, ">=")) {
      op = JJ_GE;
    } else if (is_name(p, "in")) {
      op = JJ_IN;
    } else if (is_name(p, "not")) {
      /* `not in` */
      size_t at = p->pos;
      while (at < p->len && is_space(p->src[at])) {
        at++;
      }
      if (!(p->len - at >= 2 && memcmp(p->src + at, "in", 2) == 0 &&
            !(p->len - at > 2 &&
              (is_name_start(p->src[at + 2]) || is_digit(p->src[at + 2]))))) {
        break;
      }
      if (!next(p)) {
        return NULL;
      }
      op = JJ_NOT_IN;
    } else {
      break;
    }
    e = next(p) ? binary(p, JJ_E_BINARY, op, e, sum(p), pos) : NULL;
  }
  return e;
}

static jj_expr *not_expr(parser *p) {
  if (is_name(p, "not")) {
    size_t pos = p->cur.pos;
    if (!enter(p) || !next(p)) {
      return NULL;
    }
    jj_expr *inner = not_expr(p);
    p->depth--;
    jj_expr *e = inner ? node(p, JJ_E_NOT, pos) : NULL;
    if (e) {
      e->a = inner;
    }
    return e;
  }
  return comparison(p);
}

static jj_expr *and_expr(parser *p) {
  jj_expr *e = not_expr(p);
  while (e && is_name(p, "and")) {
    size_t pos = p->cur.pos;
    e = next(p) ? binary(p, JJ_E_AND, JJ_EQ, e, not_expr(p), pos) : NULL;
  }
  return e;
}

static jj_expr *or_expr(parser *p) {
  jj_expr *e = and_expr(p);
  while (e && is_name(p, "or")) {
    size_t pos = p->cur.pos;
    e = next(p) ? binary(p, JJ_E_OR, JJ_EQ, e, and_expr(p), pos) : NULL;
  }
  return e;
}

/* or_expr [if or_expr [else expression]] */
static jj_expr *expression(parser *p) {
  if (!enter(p)) {
    return NULL;
  }
  jj_expr *e = or_expr(p);
  while (e && is_name(p, "if")) {
    size_t pos = p->cur.pos;
    jj_expr *c = node(p, JJ_E_COND, pos);
    if (!c || !next(p) || !(c->a = or_expr(p))) {
      return NULL;
    }
    c->b = e;
    if (is_name(p, "else")) {
      if (!next(p) || !(c->c = expression(p))) {
        return NULL;
      }
    }
    e = c;
  }
  p->depth--;
  return e;
}

/* ---- statements --------------------------------------------------------- */

static bool push(parser *p, jj_body *b, jj_node *n) {
  if (!n) {
    return false;
  }
  /* the capacity is the next power of two: grow at each one */
  if ((b->count & (b->count - 1)) == 0) {
    size_t cap = b->count ? b->count * 2 : 1;
    jj_node **items = alloc(p, cap * sizeof *items);
    if (!items) {
      return false;
    }
    if (b->count) {
      memcpy(items, b->items, b->count * sizeof *items);
    }
    b->items = items;
  }
  b->items[b->count++] = n;
  return true;
}

static jj_node *stmt(parser *p, jj_node_kind kind, size_t pos) {
  jj_node *n = alloc(p, sizeof *n);
  if (n) {
    n->kind = kind;
    n->line = line_at(p, pos);
  }
  return n;
}

/* Consumes the tag's end and the whitespace it controls. */
static bool tag_end(parser *p) {
  char buf[48];
  if (p->cur.kind != T_END) {
    return fail(p, FDY_ERR_PARSE, p->cur.pos, NULL,
                "expected the end of the tag, found %s",
                describe(p, buf, sizeof buf));
  }
  char sign = p->src[p->pos];
  p->pos += sign == '-' || sign == '+' ? 3 : 2;
  if (sign == '-') {
    while (p->pos < p->len && is_space(p->src[p->pos])) {
      p->pos++;
    }
  } else if (sign != '+' && p->in_block && p->pos < p->len &&
             p->src[p->pos] == '\n') {
    p->pos++; /* trim_blocks */
  }
  p->line_starting = p->src[p->pos - 1] == '\n';
  return true;
}

typedef struct ending {
  const char *names[3]; /* tags that end the body */
  const char *opener;   /* the block, for "unclosed" */
  size_t opener_pos;
} ending;

static bool body(parser *p, jj_body *out, const ending *end, int *which);

/* Text up to the next tag, with the whitespace control of that tag. */
static bool text(parser *p, jj_body *out, size_t start, size_t stop, char kind,
                 char sign) {
  size_t n = stop - start;
  if (sign == '-') {
    while (n > 0 && is_space(p->src[start + n - 1])) {
      n--;
    }
  } else if (sign != '+' && kind != '{') {
    /* lstrip_blocks: blanks from the line's start up to a block or comment
     * tag */
    size_t l = n;
    while (l > 0 && p->src[start + l - 1] != '\n') {
      l--;
    }
    if (l > 0 || p->line_starting) {
      bool blank = l < n;
      for (size_t k = l; k < n && blank; k++) {
        blank = is_space(p->src[start + k]);
      }
      if (blank) {
        n = l;
      }
    }
  }
  if (n == 0) {
    return true;
  }
  jj_node *t = stmt(p, JJ_N_TEXT, start);
  if (!t) {
    return false;
  }
  t->str = p->src + start;
  t->len = n;
  return push(p, out, t);
}

static bool block_statement(parser *p, jj_body *out, const ending *end,
                            int *which, bool *done);

static bool body(parser *p, jj_body *out, const ending *end, int *which) {
  for (;;) {
    size_t start = p->pos, at = start;
    const char *tag = NULL;
    while (at + 1 < p->len) {
      const char *s = p->src + at;
      if (s[0] == '{' && (s[1] == '{' || s[1] == '%' || s[1] == '#')) {
        tag = s;
        break;
      }
      at++;
    }
    if (!tag) {
      if (!text(p, out, start, p->len, '{', 0)) {
        return false;
      }
      p->pos = p->len;
      if (end) {
        return fail(p, FDY_ERR_PARSE, end->opener_pos, NULL,
                    "unclosed '%s' block: no {%% %s %%} before the end of "
                    "the template",
                    end->opener, end->names[0]);
      }
      return true;
    }
    char kind = tag[1];
    char sign = at + 2 < p->len ? tag[2] : 0;
    if (sign != '-' && sign != '+') {
      sign = 0;
    }
    if (!text(p, out, start, at, kind, sign)) {
      return false;
    }
    p->pos = at + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      const char *close = NULL;
      for (size_t k = p->pos; k + 1 < p->len; k++) {
        if (p->src[k] == '#' && p->src[k + 1] == '}') {
          close = p->src + k;
          break;
        }
      }
      if (!close) {
        return fail(p, FDY_ERR_PARSE, at, NULL, "unclosed comment");
      }
      size_t c = (size_t)(close - p->src);
      char csign = c > p->pos ? p->src[c - 1] : 0;
      p->pos = c + 2;
      if (csign == '-') {
        while (p->pos < p->len && is_space(p->src[p->pos])) {
          p->pos++;
        }
      } else if (csign != '+' && p->pos < p->len && p->src[p->pos] == '\n') {
        p->pos++;
      }
      p->line_starting = p->src[p->pos - 1] == '\n';
      continue;
    }
    p->in_block = kind == '%';
    p->brackets = 0;
    if (!next(p)) {
      return false;
    }
    if (kind == '{') {
      jj_node *o = stmt(p, JJ_N_OUTPUT, at);
      if (!o || !(o->expr = expression(p)) || !tag_end(p) || !push(p, out, o)) {
        return false;
      }
      continue;
    }
    bool done = false;
    if (!block_statement(p, out, end, which, &done)) {
      return false;
    }
    if (done) {
      return true;
    }
  }
}

static bool for_statement(parser *p, jj_body *out, size_t at) {
  jj_node *n = stmt(p, JJ_N_FOR, at);
  if (!n) {
    return false;
  }
  for (int k = 0; k < 2; k++) {
    if (p->cur.kind != T_NAME) {
      char buf[48];
      return fail(p, FDY_ERR_PARSE, p->cur.pos, NULL,
                  "expected a loop variable, found %s",
                  describe(p, buf, sizeof buf));
    }
    const char *name = copy(p, p->cur.text, p->cur.len);
    if (!name || !next(p)) {
      return false;
    }
    *(k == 0 ? &n->str : &n->attr) = name;
    if (!is_op(p, ",")) {
      break;
    }
    if (k == 1) {
      return unsupported(p, p->cur.pos, "", "for over more than two names", 28);
    }
    if (!next(p)) {
      return false;
    }
  }
  if (!is_name(p, "in")) {
    char buf[48];
    return fail(p, FDY_ERR_PARSE, p->cur.pos, NULL,
                "expected 'in' in a for loop, found %s",
                describe(p, buf, sizeof buf));
  }
  if (!next(p) || !(n->expr = or_expr(p))) {
    return false;
  }
  if (is_name(p, "if")) {
    if (!next(p) || !(n->cond = expression(p))) {
      return false;
    }
  }
  if (is_name(p, "recursive")) {
    return unsupported(p, p->cur.pos, "", "recursive", 9);
  }
  if (!tag_end(p)) {
    return false;
  }
  ending end = {{"endfor", "else", NULL}, "for", at};
  int which = 0;
  p->loops++;
  bool ok = body(p, &n->body, &end, &which);
  p->loops--;
  if (ok && which == 1) {
    ending end2 = {{"endfor", NULL, NULL}, "for", at};
    ok = body(p, &n->orelse, &end2, &which);
  }
  return ok && push(p, out, n);
}

static bool if_statement(parser *p, jj_body *out, size_t at) {
  jj_node *n = stmt(p, JJ_N_IF, at);
  if (!n || !(n->expr = expression(p)) || !tag_end(p)) {
    return false;
  }
  ending end = {{"endif", "elif", "else"}, "if", at};
  int which = 0;
  if (!body(p, &n->body, &end, &which) || !push(p, out, n)) {
    return false;
  }
  while (which == 1) { /* elif: an if in the else branch */
    jj_node *e = stmt(p, JJ_N_IF, p->cur.pos);
    if (!e || !(e->expr = expression(p)) || !tag_end(p) ||
        !push(p, &n->orelse, e) || !body(p, &e->body, &end, &which)) {
      return false;
    }
    n = e;
  }
  if (which == 2) {
    ending end2 = {{"endif", NULL, NULL}, "if", at};
    return body(p, &n->orelse, &end2, &which);
  }
  return true;
}

static bool set_statement(parser *p, jj_body *out, size_t at) {
  jj_node *n = stmt(p, JJ_N_SET, at);
  char buf[48];
  if (!n) {
    return false;
  }
  if (p->cur.kind != T_NAME) {
    return fail(p, FDY_ERR_PARSE, p->cur.pos, NULL,
                "expected a name to set, found %s",
                describe(p, buf, sizeof buf));
  }
  if (!(n->str = copy(p, p->cur.text, p->cur.len)) || !next(p)) {
    return false;
  }
  if (is_op(p, ".")) {
    if (!next(p)) {
      return false;
    }
    if (p->cur.kind != T_NAME) {
      return fail(p, FDY_ERR_PARSE, p->cur.pos, NULL,
                  "expected an attribute name, found %s",
                  describe(p, buf, sizeof buf));
    }
    if (!(n->attr = copy(p, p->cur.text, p->cur.len)) || !next(p)) {
      return false;
    }
  }
  if (is_op(p, ",")) {
    return unsupported(p, p->cur.pos, "", "set of several names", 20);
  }
  if (p->cur.kind == T_END) {
    return unsupported(p, p->cur.pos, "", "set block", 9);
  }
  if (!expect_op(p, "=") || !(n->expr = expression(p))) {
    return false;
  }
  if (is_op(p, ",")) {
    return unsupported(p, p->cur.pos, "", "a tuple", 7);
  }
  return tag_end(p) && push(p, out, n);
}

/* Tags of Jinja that Foundry does not interpret. */
static const char *const refused_tags[] = {
    "macro",      "call",   "filter",     "block", "extends",
    "include",    "import", "from",       "with",  "raw",
    "autoescape", "do",     "generation", "trans", "pluralize",
};

static bool block_statement(parser *p, jj_body *out, const ending *end,
                            int *which, bool *done) {
  size_t at = p->cur.pos;
  char buf[48];
  if (p->cur.kind != T_NAME) {
    return fail(p, FDY_ERR_PARSE, at, NULL, "expected a tag name, found %s",
                describe(p, buf, sizeof buf));
  }
  for (int k = 0; end && k < 3 && end->names[k]; k++) {
    if (is_name(p, end->names[k])) {
      *which = k;
      *done = true;
      if (!next(p)) {
        return false;
      }
      /* elif's condition is parsed by its if */
      return strcmp(end->names[k], "elif") == 0 || tag_end(p);
    }
  }
  if (!enter(p)) {
    return false;
  }
  bool ok;
  if (is_name(p, "if")) {
    ok = next(p) && if_statement(p, out, at);
  } else if (is_name(p, "for")) {
    ok = next(p) && for_statement(p, out, at);
  } else if (is_name(p, "set")) {
    ok = next(p) && set_statement(p, out, at);
  } else if (is_name(p, "break") || is_name(p, "continue")) {
    jj_node *n = stmt(p, is_name(p, "break") ? JJ_N_BREAK : JJ_N_CONTINUE, at);
    if (p->loops == 0) {
      return fail(p, FDY_ERR_PARSE, at, NULL, "'%.*s' outside a for loop",
                  (int)p->cur.len, p->cur.text);
    }
    ok = n && next(p) && tag_end(p) && push(p, out, n);
  } else if (LISTED(refused_tags, p->cur.text, p->cur.len)) {
    return unsupported(p, at, "", p->cur.text, p->cur.len);
  } else if (end) {
    return fail(p, FDY_ERR_PARSE, at, NULL,
                "unexpected tag '%.*s' in the '%s' block opened on line %d "
                "(expected {%% %s %%})",
                (int)(p->cur.len > 40 ? 40 : p->cur.len), p->cur.text,
                end->opener, line_at(p, end->opener_pos), end->names[0]);
  } else {
    return fail(p, FDY_ERR_PARSE, at, NULL, "unexpected tag '%.*s'",
                (int)(p->cur.len > 40 ? 40 : p->cur.len), p->cur.text);
  }
  p->depth--;
  return ok;
}

fdy_status fdy_jinja_parse(const char *source, size_t len, fdy_jinja **out,
                           fdy_error *err) {
  if (!out || (!source && len)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_jinja_parse needs a source and an output");
  }
  *out = NULL;
  if (len > MAX_SOURCE) {
    return fdy_error_setf(err, FDY_ERR_OVERFLOW, NULL, MAX_SOURCE, len,
                          "a chat template of %zu bytes is larger than the "
                          "%u bytes Foundry reads",
                          len, MAX_SOURCE);
  }
  fdy_jinja *t = calloc(1, sizeof *t);
  if (!t) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  t->arena.limit = UINT64_MAX;
  parser p = {
      .arena = &t->arena, .line_no = 1, .line_starting = true, .err = err};
  /* \r\n and \r become \n; one trailing newline goes */
  p.src = alloc(&p, len + 1);
  if (p.src) {
    for (size_t k = 0; k < len; k++) {
      if (source[k] == '\r') {
        p.src[p.len++] = '\n';
        k += k + 1 < len && source[k + 1] == '\n';
      } else {
        p.src[p.len++] = source[k];
      }
    }
    if (p.len > 0 && p.src[p.len - 1] == '\n') {
      p.len--;
    }
    body(&p, &t->root, NULL, NULL);
  }
  if (p.status != FDY_OK) {
    fdy_jinja_destroy(t);
    return p.status;
  }
  *out = t;
  return FDY_OK;
}

void fdy_jinja_destroy(fdy_jinja *t) {
  if (t) {
    jj_arena_free(&t->arena);
    free(t);
  }
}
