/* What the Jinja parser (jinja_parse.c) gives the renderer (jinja_value.c,
 * jinja_eval.c and jinja_render.c): the tree of statements and expressions,
 * and the arena both allocate from. */
#ifndef FOUNDRY_JINJA_INTERNAL_H
#define FOUNDRY_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "foundry/chat_template.h"

/* ---- arena: many small allocations freed at once ------------------------ */

typedef struct jj_chunk jj_chunk;
typedef struct jj_arena {
  jj_chunk *head;
  uint64_t used;  /* bytes handed out */
  uint64_t limit; /* most bytes; over it an allocation fails */
} jj_arena;

/* n bytes, 16-aligned, zeroed; NULL when out of memory or over the limit
 * (*over tells which when not NULL). */
void *jj_alloc(jj_arena *a, size_t n, bool *over);
void jj_arena_free(jj_arena *a);

/* ---- the names the renderer implements (the parser refuses others) ----- */

extern const char *const jj_tests[];
extern const size_t jj_test_count;
extern const char *const jj_functions[]; /* global functions */
extern const size_t jj_function_count;
/* Whether the len bytes at s spell one of the count names. */
bool jj_listed(const char *const *names, size_t count, const char *s,
               size_t len);

/* ---- expressions -------------------------------------------------------- */

typedef enum jj_expr_kind {
  JJ_E_STR,    /* str, len */
  JJ_E_INT,    /* i */
  JJ_E_FLOAT,  /* f */
  JJ_E_BOOL,   /* i */
  JJ_E_NONE,   /* */
  JJ_E_NAME,   /* str */
  JJ_E_ATTR,   /* a . str */
  JJ_E_ITEM,   /* a [ b ] */
  JJ_E_SLICE,  /* a [ b : c : d ], each may be NULL */
  JJ_E_CALL,   /* a ( args ): a is a NAME (function) or an ATTR (method) */
  JJ_E_FILTER, /* a | str ( args ) */
  JJ_E_TEST,   /* a is [not] str ( args ); i = negated */
  JJ_E_NOT,    /* not a */
  JJ_E_NEG,    /* - a */
  JJ_E_POS,    /* + a */
  JJ_E_BINARY, /* a op b */
  JJ_E_AND,    /* a and b */
  JJ_E_OR,     /* a or b */
  JJ_E_COND,   /* b if a else c (c NULL: undefined) */
  JJ_E_LIST,   /* [ args ] and tuples */
  JJ_E_DICT,   /* { args: keys and values alternating } */
} jj_expr_kind;

typedef enum jj_op {
  JJ_ADD,
  JJ_SUB,
  JJ_MUL,
  JJ_DIV,
  JJ_FLOORDIV,
  JJ_MOD,
  JJ_POW,
  JJ_CONCAT,
  JJ_EQ,
  JJ_NE,
  JJ_LT,
  JJ_LE,
  JJ_GT,
  JJ_GE,
  JJ_IN,
  JJ_NOT_IN,
} jj_op;

typedef struct jj_expr jj_expr;
typedef struct jj_arg {
  const char *name; /* keyword argument, or NULL */
  jj_expr *value;
} jj_arg;

struct jj_expr {
  jj_expr_kind kind;
  int line;
  jj_op op;
  const char *str; /* names and string literals (NUL-terminated) */
  size_t len;
  int64_t i;
  double f;
  jj_expr *a, *b, *c, *d;
  jj_arg *args;
  size_t nargs;
};

/* ---- statements --------------------------------------------------------- */

typedef enum jj_node_kind {
  JJ_N_TEXT,     /* str, len */
  JJ_N_OUTPUT,   /* {{ expr }} */
  JJ_N_IF,       /* if expr: body, else: orelse (an elif is an IF there) */
  JJ_N_FOR,      /* for target[, target2] in expr [if cond]: body, orelse */
  JJ_N_SET,      /* set target[.attr] = expr */
  JJ_N_BREAK,    /* */
  JJ_N_CONTINUE, /* */
} jj_node_kind;

typedef struct jj_node jj_node;
typedef struct jj_body {
  jj_node **items;
  size_t count;
} jj_body;

struct jj_node {
  jj_node_kind kind;
  int line;
  const char *str; /* text; SET/FOR: the target name */
  size_t len;
  const char *attr;     /* SET: the namespace attribute, or NULL; FOR: the
                           second target, or NULL */
  jj_expr *expr, *cond; /* FOR: cond filters the items (or NULL) */
  jj_body body, orelse;
};

struct fdy_jinja {
  jj_arena arena; /* every node and expression */
  jj_body root;
};

#endif
