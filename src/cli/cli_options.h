/* The flag tables of the CLI commands and the one loop that reads them.
 * Each command describes its flags as rows: the long name, how the value
 * is read and where it goes in the command's options struct (an offset),
 * with the flags that several commands share as row groups
 * (fdy_cli_session_rows and the others). fdy_cli_parse_flags runs
 * getopt_long over the table and refuses a flag given twice, a missing
 * value, an unknown option, a bad value and (unless the command takes them)
 * operands, each as the same usage error in every command; the checks
 * between flags stay with each command, after parsing. */
#ifndef FOUNDRY_CLI_OPTIONS_H
#define FOUNDRY_CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "foundry/chat.h"
#include "foundry/core.h"

/* How a row reads its flag's value, and the type of the field it fills. */
typedef enum fdy_cli_flag_kind {
  FDY_CLI_FLAG_END,    /* the end of a table */
  FDY_CLI_FLAG_TEXT,   /* const char *: the value as given */
  FDY_CLI_FLAG_U64,    /* uint64_t: an integer from min to max
                          (fdy_cli_parse_uint) */
  FDY_CLI_FLAG_U32,    /* uint32_t: likewise, max at most UINT32_MAX */
  FDY_CLI_FLAG_SIZE,   /* uint64_t: a positive size in bytes or binary
                          units (fdy_cli_parse_size) */
  FDY_CLI_FLAG_CHOICE, /* an enum (int-sized): the value of the row's
                          choice named by the text (fdy_cli_parse_choice) */
  FDY_CLI_FLAG_SET,    /* bool, set true; the flag takes no value */
  FDY_CLI_FLAG_CLEAR,  /* bool, set false; the flag takes no value */
  FDY_CLI_FLAG_MODE,   /* no value, nothing stored: the mode the command
                          chose from argv before parsing (bench --overhead) */
  FDY_CLI_FLAG_PARSE,  /* the row's parse function reads the value */
  FDY_CLI_FLAG_GROUP   /* the rows of another table, their offsets counted
                          from this row's */
} fdy_cli_flag_kind;

/* One name that a CHOICE flag takes and the value it stands for; a list
 * of them ends with a NULL name. */
typedef struct fdy_cli_choice {
  const char *name;
  int value;
} fdy_cli_choice;

/* Reads text, the value of flag ("--alignment"), into the field at value;
 * a bad value is FDY_ERR_INVALID_ARGUMENT naming the flag, the field left
 * alone. */
typedef fdy_status (*fdy_cli_flag_fn)(const char *flag, const char *text,
                                      void *value, fdy_error *err);

/* One row of a command's flag table. Tables are static const arrays of
 * rows written with the macros below and ending in {FDY_CLI_END}. */
typedef struct fdy_cli_flag {
  const char *name;       /* without "--"; NULL for END and GROUP */
  fdy_cli_flag_kind kind; /* how the value is read */
  size_t offset;          /* of the field in the options struct (GROUP: of the
                             group's struct) */
  uint64_t min, max;      /* U64 and U32: the range */
  const fdy_cli_choice *choices;    /* CHOICE */
  fdy_cli_flag_fn parse;            /* PARSE */
  const struct fdy_cli_flag *group; /* GROUP */
  /* when mark_given, the bool at offset given in the options struct is
   * set true once the flag's value is read */
  bool mark_given;
  size_t given;
  /* END of a command's table: the usage error of an option not in it,
   * after its spelling ("'--layers' does not apply to --overhead"); NULL:
   * "unknown option '--layers'" */
  const char *refusal;
} fdy_cli_flag;

/* offsetof(type, field), a compile error unless the field is a ctype. */
#define FDY_CLI_AT(type, field, ctype)                                         \
  _Generic(((type *)0)->field, ctype : offsetof(type, field))

/* offsetof(type, field), a compile error unless the field is int-sized:
 * an enum, which a CHOICE row writes as an int. */
#define FDY_CLI_AT_ENUM(type, field)                                           \
  (offsetof(type, field) +                                                     \
   0 * sizeof(char[sizeof(((type *)0)->field) == sizeof(int) ? 1 : -1]))

/* The rows, each written {FDY_CLI_U64("layers", plan_args, layers, 1, 64)}
 * and followed, where the command needs to know, by FDY_CLI_GIVEN. */
#define FDY_CLI_TEXT(flag, type, field)                                        \
  .name = (flag), .kind = FDY_CLI_FLAG_TEXT,                                   \
  .offset = FDY_CLI_AT(type, field, const char *)
#define FDY_CLI_U64(flag, type, field, low, high)                              \
  .name = (flag), .kind = FDY_CLI_FLAG_U64,                                    \
  .offset = FDY_CLI_AT(type, field, uint64_t), .min = (low), .max = (high)
#define FDY_CLI_U32(flag, type, field, low, high)                              \
  .name = (flag), .kind = FDY_CLI_FLAG_U32,                                    \
  .offset = FDY_CLI_AT(type, field, uint32_t), .min = (low), .max = (high)
#define FDY_CLI_SIZE(flag, type, field)                                        \
  .name = (flag), .kind = FDY_CLI_FLAG_SIZE,                                   \
  .offset = FDY_CLI_AT(type, field, uint64_t)
#define FDY_CLI_CHOICE(flag, type, field, names)                               \
  .name = (flag), .kind = FDY_CLI_FLAG_CHOICE,                                 \
  .offset = FDY_CLI_AT_ENUM(type, field), .choices = (names)
#define FDY_CLI_SET(flag, type, field)                                         \
  .name = (flag), .kind = FDY_CLI_FLAG_SET,                                    \
  .offset = FDY_CLI_AT(type, field, bool)
#define FDY_CLI_CLEAR(flag, type, field)                                       \
  .name = (flag), .kind = FDY_CLI_FLAG_CLEAR,                                  \
  .offset = FDY_CLI_AT(type, field, bool)
#define FDY_CLI_MODE(flag) .name = (flag), .kind = FDY_CLI_FLAG_MODE
#define FDY_CLI_PARSE(flag, type, field, fn)                                   \
  .name = (flag), .kind = FDY_CLI_FLAG_PARSE, .offset = offsetof(type, field), \
  .parse = (fn)
#define FDY_CLI_GROUP(rows, offset_)                                           \
  .kind = FDY_CLI_FLAG_GROUP, .group = (rows), .offset = (offset_)
#define FDY_CLI_GIVEN(type, field)                                             \
  .mark_given = true, .given = FDY_CLI_AT(type, field, bool)
#define FDY_CLI_END .kind = FDY_CLI_FLAG_END

/* Parses argv by flags into options (the struct the table's offsets are
 * of): runs fdy_cli_check_repeats, then getopt_long over argv (":" as the
 * short options, opterr off), reading each flag with fdy_cli_flag_set.
 * Usage errors of COMMAND (FDY_EXIT_USAGE): "--x needs a value", "unknown
 * option '--x'" (or the table's refusal), the message of a bad value's
 * error, and, when operands is NULL, "unexpected argument 'A'" for the
 * first operand. When operands is not NULL, *operands is the index in argv
 * of the first operand (argc when none; getopt_long moves them to the
 * end). Returns FDY_EXIT_OK when every flag parsed; FDY_EXIT_FAILURE
 * (printed) when out of memory. */
int fdy_cli_parse_flags(const char *command, int argc, char **argv,
                        const fdy_cli_flag *flags, void *options,
                        int *operands);

/* Reads text, the value of --name (NULL for a flag that takes none), into
 * options by the row of flags or of their groups named name, and sets its
 * given bool. A bad value is FDY_ERR_INVALID_ARGUMENT naming the flag in
 * the message and err->name ("--buffers"), options left alone;
 * FDY_ERR_NOT_FOUND when no row is named name. */
fdy_status fdy_cli_flag_set(const fdy_cli_flag *flags, const char *name,
                            const char *text, void *options, fdy_error *err);

/* The one parser of flags that take one of a few names: *value is the
 * value of the choice named text; any other text is
 * FDY_ERR_INVALID_ARGUMENT naming the flag and the names ("--kv-dtype
 * must be f32 or f16, got 'x'"), *value left alone. */
fdy_status fdy_cli_parse_choice(const char *flag, const char *text,
                                const fdy_cli_choice *choices, int *value,
                                fdy_error *err);

/* The flags of text generation that generate and chat share (serve takes
 * --tokenizer alone): --tokenizer FILE, --system TEXT, --chat-template
 * VALUE (fdy_cli_parse_chat_template) and --max-tokens N (1 to 2^32 -
 * 1). */
typedef struct fdy_cli_text_flags {
  const char *tokenizer;           /* NULL: the model directory's */
  const char *system;              /* NULL: no system message */
  fdy_chat_template template_kind; /* AUTO unless given */
  const char *template_file;       /* a Jinja template file */
  uint64_t max_tokens;             /* 0: not given */
} fdy_cli_text_flags;

/* The rows of the text flags, into a fdy_cli_text_flags. */
extern const fdy_cli_flag fdy_cli_text_rows[];

/* The row group of the text flags into field (a fdy_cli_text_flags) of
 * type. */
#define FDY_CLI_TEXT_ROWS(type, field)                                         \
  FDY_CLI_GROUP(fdy_cli_text_rows, FDY_CLI_AT(type, field, fdy_cli_text_flags))

#endif
