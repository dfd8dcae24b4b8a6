/* The flag tables' loop and the text flags (cli_options.h). */
#include "cli_options.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"

/* getopt_long's value of the table's entry i: FIRST_VALUE + i, above every
 * character it returns itself. */
#define FIRST_VALUE 256

/* Room for a flag's name with its "--" (the longest:
 * --bootstrap-resamples). */
#define MAX_FLAG 64

static bool takes_value(fdy_cli_flag_kind kind) {
  return kind != FDY_CLI_FLAG_SET && kind != FDY_CLI_FLAG_CLEAR &&
         kind != FDY_CLI_FLAG_MODE;
}

/* Appends the getopt_long entries of flags and their groups, in table
 * order, to table from *count (table NULL: counts them). */
static void list_options(const fdy_cli_flag *flags, struct option *table,
                         size_t *count) {
  for (const fdy_cli_flag *row = flags; row->kind != FDY_CLI_FLAG_END; row++) {
    if (row->kind == FDY_CLI_FLAG_GROUP) {
      list_options(row->group, table, count);
      continue;
    }
    if (table) {
      table[*count] = (struct option){
          .name = row->name,
          .has_arg = takes_value(row->kind) ? required_argument : no_argument,
          .val = FIRST_VALUE + (int)*count};
    }
    (*count)++;
  }
}

/* The row named name among flags and their groups, or NULL; *offset is
 * where the options of its table start in those of flags. */
static const fdy_cli_flag *find_row(const fdy_cli_flag *flags, const char *name,
                                    size_t *offset) {
  for (const fdy_cli_flag *row = flags; row->kind != FDY_CLI_FLAG_END; row++) {
    if (row->kind != FDY_CLI_FLAG_GROUP) {
      if (strcmp(row->name, name) == 0) {
        *offset = 0;
        return row;
      }
      continue;
    }
    size_t inner = 0;
    const fdy_cli_flag *found = find_row(row->group, name, &inner);
    if (found) {
      *offset = row->offset + inner;
      return found;
    }
  }
  return NULL;
}

fdy_status fdy_cli_parse_choice(const char *flag, const char *text,
                                const fdy_cli_choice *choices, int *value,
                                fdy_error *err) {
  size_t count = 0;
  for (; choices[count].name; count++) {
    if (strcmp(text, choices[count].name) == 0) {
      *value = choices[count].value;
      return FDY_OK;
    }
  }
  char names[FDY_ERROR_MESSAGE_MAX] = ""; /* "a, b or c" */
  size_t used = 0;
  for (size_t i = 0; i < count && used < sizeof names; i++) {
    const char *between = i == 0 ? "" : i + 1 < count ? ", " : " or ";
    int n = snprintf(names + used, sizeof names - used, "%s%s", between,
                     choices[i].name);
    used += n > 0 ? (size_t)n : 0;
  }
  return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "%s must be %s, got '%s'",
                       flag, names, text);
}

/* text into the field at value by row's kind. */
static fdy_status read_value(const fdy_cli_flag *row, const char *flag,
                             const char *text, void *value, fdy_error *err) {
  uint64_t number = 0;
  fdy_status st = FDY_OK;
  switch (row->kind) {
  case FDY_CLI_FLAG_TEXT:
    *(const char **)value = text;
    break;
  case FDY_CLI_FLAG_U64:
    st = fdy_cli_parse_uint(flag, text, row->min, row->max, value, err);
    break;
  case FDY_CLI_FLAG_U32:
    st = fdy_cli_parse_uint(flag, text, row->min, row->max, &number, err);
    if (st == FDY_OK) {
      *(uint32_t *)value = (uint32_t)number;
    }
    break;
  case FDY_CLI_FLAG_SIZE:
    st = fdy_cli_parse_size(flag, text, value, err);
    break;
  case FDY_CLI_FLAG_CHOICE:
    st = fdy_cli_parse_choice(flag, text, row->choices, value, err);
    break;
  case FDY_CLI_FLAG_SET:
  case FDY_CLI_FLAG_CLEAR:
    *(bool *)value = row->kind == FDY_CLI_FLAG_SET;
    break;
  case FDY_CLI_FLAG_PARSE:
    st = row->parse(flag, text, value, err);
    break;
  case FDY_CLI_FLAG_MODE:
  case FDY_CLI_FLAG_END:
  case FDY_CLI_FLAG_GROUP:
    break;
  }
  return st;
}

fdy_status fdy_cli_flag_set(const fdy_cli_flag *flags, const char *name,
                            const char *text, void *options, fdy_error *err) {
  size_t offset = 0;
  const fdy_cli_flag *row = find_row(flags, name, &offset);
  if (!row) {
    return fdy_error_set(err, FDY_ERR_NOT_FOUND, "no flag --%s", name);
  }
  char flag[MAX_FLAG];
  snprintf(flag, sizeof flag, "--%s", name);
  char *base = (char *)options + offset;
  fdy_status st = read_value(row, flag, text, base + row->offset, err);
  if (st != FDY_OK && err) {
    snprintf(err->name, sizeof err->name, "%s", flag);
  } else if (st == FDY_OK && row->mark_given) {
    *(bool *)(base + row->given) = true;
  }
  return st;
}

/* The getopt_long loop over table, the entries of flags. */
static int read_flags(const char *command, int argc, char **argv,
                      const fdy_cli_flag *flags, const struct option *table,
                      void *options) {
  int code = fdy_cli_check_repeats(command, argc, argv, table);
  const fdy_cli_flag *end = flags;
  while (end->kind != FDY_CLI_FLAG_END) {
    end++;
  }
  optind = 1;
  opterr = 0;
  int opt;
  while (code == FDY_EXIT_OK &&
         (opt = getopt_long(argc, argv, ":", table, NULL)) != -1) {
    fdy_error err;
    if (opt == ':') {
      code = fdy_cli_usage(command, "%s needs a value", argv[optind - 1]);
    } else if (opt < FIRST_VALUE && end->refusal) {
      code = fdy_cli_usage(command, "'%s' %s", argv[optind - 1], end->refusal);
    } else if (opt < FIRST_VALUE) {
      code = fdy_cli_usage(command, "unknown option '%s'", argv[optind - 1]);
    } else if (fdy_cli_flag_set(flags, table[opt - FIRST_VALUE].name, optarg,
                                options, &err) != FDY_OK) {
      code = fdy_cli_usage(command, "%s", err.message);
    }
  }
  return code;
}

int fdy_cli_parse_flags(const char *command, int argc, char **argv,
                        const fdy_cli_flag *flags, void *options,
                        int *operands) {
  size_t count = 0;
  list_options(flags, NULL, &count);
  struct option *table = calloc(count + 1, sizeof *table);
  if (!table) {
    fdy_error err;
    fdy_error_set(&err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    return fdy_cli_fail(&err);
  }
  count = 0;
  list_options(flags, table, &count);
  int code = read_flags(command, argc, argv, flags, table, options);
  free(table);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (operands) {
    *operands = optind;
  } else if (optind < argc) {
    return fdy_cli_usage(command, "unexpected argument '%s'", argv[optind]);
  }
  return FDY_EXIT_OK;
}

/* --chat-template VALUE into the text flags at value. */
static fdy_status parse_template(const char *flag, const char *text,
                                 void *value, fdy_error *err) {
  (void)flag;
  (void)err;
  fdy_cli_text_flags *flags = value;
  fdy_cli_parse_chat_template(text, &flags->template_kind,
                              &flags->template_file);
  return FDY_OK;
}

const fdy_cli_flag fdy_cli_text_rows[] = {
    {FDY_CLI_TEXT("tokenizer", fdy_cli_text_flags, tokenizer)},
    {FDY_CLI_TEXT("system", fdy_cli_text_flags, system)},
    /* the row's field is the whole struct: the kind or the file */
    {.name = "chat-template",
     .kind = FDY_CLI_FLAG_PARSE,
     .offset = 0,
     .parse = parse_template},
    {FDY_CLI_U64("max-tokens", fdy_cli_text_flags, max_tokens, 1, UINT32_MAX)},
    {FDY_CLI_END},
};
