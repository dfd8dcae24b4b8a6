/* Shared helpers of the CLI commands (see cli_util.h). */
#include "cli_util.h"

#include "foundry/build_info.h"
#include "foundry/input.h"
#include "foundry/registry.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Control bytes in names from files or arguments (a shard name with a
 * newline) are escaped, so that each error is one line. */
int fdy_cli_fail(const fdy_error *err) {
  char line[4 * FDY_ERROR_MESSAGE_MAX];
  fprintf(stderr, "foundry: error: %s\n",
          fdy_escape_controls(err && err->message[0] ? err->message
                                                     : "unknown failure",
                              line, sizeof line));
  if (err && err->cleanup_kind != FDY_OK) {
    fprintf(stderr, "foundry: error: cleanup also failed: %s\n",
            fdy_escape_controls(err->cleanup_message, line, sizeof line));
  }
  return FDY_EXIT_FAILURE;
}

int fdy_cli_usage(const char *command, const char *fmt, ...) {
  char message[FDY_ERROR_MESSAGE_MAX], line[4 * FDY_ERROR_MESSAGE_MAX];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  fprintf(stderr, "foundry %s: error: %s\nTry 'foundry help %s'.\n", command,
          fdy_escape_controls(message, line, sizeof line), command);
  return FDY_EXIT_USAGE;
}

int fdy_cli_finish_stdout(int code) {
  static bool reported;
  errno = 0;
  const bool flushed = fflush(stdout) == 0;
  const int errnum = errno;
  if (flushed && !ferror(stdout)) {
    return code;
  }
  if (!reported) {
    reported = true;
    fprintf(stderr, "foundry: error: writing to standard output failed: %s\n",
            !flushed && errnum ? strerror(errnum) : "an earlier write failed");
  }
  return code == FDY_EXIT_OK ? FDY_EXIT_FAILURE : code;
}

/* Flags whose value is text, where the empty text is a value like any
 * other (tokenize ""); every other flag names a path, a number or a
 * choice. */
static bool takes_text(const char *flag, size_t len) {
  static const char *const text_flags[] = {"--text", "--ids", "--prompt",
                                           "--system"};
  for (size_t k = 0; k < sizeof text_flags / sizeof *text_flags; k++) {
    if (strlen(text_flags[k]) == len &&
        strncmp(flag, text_flags[k], len) == 0) {
      return true;
    }
  }
  return false;
}

int fdy_cli_check_arguments(const char *command, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    if (eq && eq[1] == '\0' && !takes_text(arg, (size_t)(eq - arg))) {
      return fdy_cli_usage(command, "%.*s needs a non-empty value",
                           (int)(eq - arg), arg);
    }
    if (arg[0] != '\0') {
      continue;
    }
    if (i > 1 && strncmp(argv[i - 1], "--", 2) == 0 &&
        strchr(argv[i - 1], '=') == NULL) {
      if (takes_text(argv[i - 1], strlen(argv[i - 1]))) {
        continue;
      }
      return fdy_cli_usage(command, "%s needs a non-empty value", argv[i - 1]);
    }
    return fdy_cli_usage(command, "argument %d is empty", i);
  }
  return FDY_EXIT_OK;
}

int fdy_cli_check_repeats(const char *command, int argc, char **argv,
                          const struct option *options) {
  size_t n = 0;
  while (options[n].name) {
    n++;
  }
  char **copy = malloc(sizeof *copy * ((size_t)argc + 1));
  int *seen = malloc(sizeof *seen * (n ? n : 1)); /* options seen */
  if (!copy || !seen) {
    free(copy);
    free(seen);
    fdy_error err;
    fdy_error_set(&err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    return fdy_cli_fail(&err);
  }
  memcpy(copy, argv, sizeof *copy * (size_t)argc);
  copy[argc] = NULL;
  size_t count = 0;
  int code = FDY_EXIT_OK;
  optind = 0; /* glibc: start over, whatever an earlier scan left */
  opterr = 0;
  int opt, index = -1;
  while (code == FDY_EXIT_OK &&
         (opt = getopt_long(argc, copy, ":", options, &index)) != -1) {
    if (opt == '?' || opt == ':' || index < 0 || (size_t)index >= n) {
      index = -1;
      continue; /* the command's own loop reports it */
    }
    /* the first entry of the same meaning: one val, no flag pointer */
    int key = index;
    for (int j = 0; j < index; j++) {
      if (!options[index].flag && !options[j].flag &&
          options[j].val == options[index].val) {
        key = j;
        break;
      }
    }
    for (size_t k = 0; k < count; k++) {
      if (seen[k] == key) {
        code = fdy_cli_usage(command, "--%s is given twice; give it once",
                             options[index].name);
      }
    }
    if (count < n) {
      seen[count++] = key;
    }
    index = -1;
  }
  optind = 0;
  free(copy);
  free(seen);
  return code;
}

/* The len bytes at p as a decimal number: at least one digit, digits only,
 * within 64 bits (leading zeros do not count). */
static bool parse_digits(const char *p, size_t len, uint64_t *out) {
  uint64_t value = 0;
  if (len == 0) {
    return false;
  }
  for (size_t i = 0; i < len; i++) {
    if (p[i] < '0' || p[i] > '9' || __builtin_mul_overflow(value, 10, &value) ||
        __builtin_add_overflow(value, (uint64_t)(p[i] - '0'), &value)) {
      return false;
    }
  }
  *out = value;
  return true;
}

fdy_status fdy_cli_parse_uint(const char *flag, const char *text, uint64_t min,
                              uint64_t max, uint64_t *out, fdy_error *err) {
  uint64_t value = 0;
  if (!text || !parse_digits(text, strlen(text), &value) || value < min ||
      value > max) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "%s must be an integer from %llu to %llu, got '%s'",
                         flag, (unsigned long long)min, (unsigned long long)max,
                         text ? text : "");
  }
  *out = value;
  return FDY_OK;
}

fdy_status fdy_cli_parse_list(const char *flag, const char *text, uint64_t min,
                              uint64_t max, uint64_t **out, uint32_t *count,
                              fdy_error *err) {
  *out = NULL;
  *count = 0;
  if (!text) {
    text = "";
  }
  size_t n = 1;
  for (const char *p = text; *p; p++) {
    n += *p == ',';
  }
  if (n > UINT32_MAX) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "%s: '%.40s...' has too many items", flag, text);
  }
  uint64_t *values = malloc(sizeof *values * n);
  if (!values) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  const char *p = text;
  for (size_t i = 0; i < n; i++) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (!parse_digits(p, len, &values[i]) || values[i] < min ||
        values[i] > max) {
      free(values);
      fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                    "%s: item %zu ('%.*s') of '%s' is not an integer from "
                    "%llu to %llu",
                    flag, i + 1, (int)(len < 64 ? len : 64), p, text,
                    (unsigned long long)min, (unsigned long long)max);
      if (err) {
        err->ids[0] = (int64_t)i;
        snprintf(err->name, sizeof err->name, "%s", flag);
      }
      return FDY_ERR_INVALID_ARGUMENT;
    }
    p += len + 1;
  }
  *out = values;
  *count = (uint32_t)n;
  return FDY_OK;
}

fdy_status fdy_cli_parse_ids(const char *flag, const char *text, int32_t **out,
                             uint32_t *count, fdy_error *err) {
  uint64_t *values = NULL;
  *out = NULL;
  fdy_status st =
      fdy_cli_parse_list(flag, text, 0, INT32_MAX, &values, count, err);
  if (st != FDY_OK) {
    return st;
  }
  int32_t *ids = malloc(sizeof *ids * *count);
  if (!ids) {
    free(values);
    *count = 0;
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (uint32_t i = 0; i < *count; i++) {
    ids[i] = (int32_t)values[i];
  }
  free(values);
  *out = ids;
  return FDY_OK;
}

fdy_status fdy_cli_read_file(const char *path, const char *what, char **out,
                             size_t *len, fdy_error *err) {
  return fdy_input_read(path, what, FDY_CLI_MAX_INPUT_BYTES, out, len, err);
}

fdy_status fdy_cli_read_ids_file(const char *path, const char *label,
                                 bool allow_empty, int32_t **out,
                                 uint32_t *count, fdy_error *err) {
  char *text = NULL;
  size_t len = 0;
  *out = NULL;
  *count = 0;
  fdy_status st = fdy_cli_read_file(path, "id file", &text, &len, err);
  if (st != FDY_OK) {
    return st;
  }
  const char *nul = len > 0 ? memchr(text, '\0', len) : NULL;
  if (nul) {
    const size_t offset = (size_t)(nul - text);
    free(text);
    fdy_error_set(err, FDY_ERR_PARSE,
                  "%s: NUL byte at byte offset %zu (an id list is text)", path,
                  offset);
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", path);
      err->actual = offset;
    }
    return FDY_ERR_PARSE;
  }
  while (len > 0 && strchr(" \t\r\n", text[len - 1])) {
    text[--len] = '\0';
  }
  const size_t start = strspn(text, " \t\r\n");
  if (start < len || !allow_empty) {
    st = fdy_cli_parse_ids(label, text + start, out, count, err);
  }
  free(text);
  return st;
}

bool fdy_cli_stderr_is_tty(void) {
  return isatty(STDERR_FILENO) == 1;
}

fdy_status fdy_cli_backend_create(const char *name, uint32_t threads,
                                  bool serial_launch, fdy_backend **out,
                                  fdy_error *err) {
  *out = NULL;
  if (strcmp(name, "cpu") != 0 && strcmp(name, "cuda") != 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "--backend must be cpu or cuda, got '%s'", name);
  }
  if (!fdy_backend_available(name)) {
    const fdy_build_info *info = fdy_build_info_get();
    if (strcmp(info->cuda, "ON") != 0) {
      return fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                           "--backend cuda: this foundry was built without "
                           "the CUDA backend (%s)",
                           info->cuda_note);
    }
    return fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                         "--backend cuda: the CUDA backend is built, but no "
                         "CUDA device is visible here (nvidia-smi lists "
                         "the devices)");
  }
  const fdy_backend_config config = {.threads = threads,
                                     .serial_launch = serial_launch};
  return fdy_backend_create_named(name, &config, out, err);
}

fdy_status fdy_cli_parse_size(const char *flag, const char *text, uint64_t *out,
                              fdy_error *err) {
  uint64_t bytes = 0;
  fdy_status st = FDY_OK;
  if (fdy_parse_bytes(text, &bytes, err) != FDY_OK) {
    fdy_error_prefix(err, "%s", flag);
    st = FDY_ERR_INVALID_ARGUMENT;
  } else if (bytes == 0) {
    st = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                       "%s must be positive, got '%s'", flag, text);
  } else if (bytes > FDY_CLI_MAX_BYTES) {
    st = fdy_error_set(
        err, FDY_ERR_INVALID_ARGUMENT,
        "%s: '%s' is above the largest size a JSON report or plan "
        "holds, %llu bytes (2^63 - 1)",
        flag, text, (unsigned long long)FDY_CLI_MAX_BYTES);
    if (err) {
      err->expected = FDY_CLI_MAX_BYTES;
      err->actual = bytes;
    }
  }
  if (st != FDY_OK) {
    if (err) {
      err->kind = FDY_ERR_INVALID_ARGUMENT;
      snprintf(err->name, sizeof err->name, "%s", flag);
    }
    return st;
  }
  *out = bytes;
  return FDY_OK;
}

/* --backend cpu|cuda: the name itself. */
static fdy_status parse_backend(const char *flag, const char *text, void *value,
                                fdy_error *err) {
  static const fdy_cli_choice backends[] = {{"cpu", 0}, {"cuda", 1}, {NULL, 0}};
  int index = 0;
  fdy_status st = fdy_cli_parse_choice(flag, text, backends, &index, err);
  if (st == FDY_OK) {
    *(const char **)value = backends[index].name;
  }
  return st;
}

/* An on|off flag into a bool that is true for off (--graphs off:
 * no_graphs). */
static fdy_status parse_off(const char *flag, const char *text, void *value,
                            fdy_error *err) {
  static const fdy_cli_choice switches[] = {{"on", 0}, {"off", 1}, {NULL, 0}};
  int off = 0;
  fdy_status st = fdy_cli_parse_choice(flag, text, switches, &off, err);
  if (st == FDY_OK) {
    *(bool *)value = off;
  }
  return st;
}

static const fdy_cli_choice kv_dtypes[] = {
    {"f32", FDY_DTYPE_F32}, {"f16", FDY_DTYPE_F16}, {NULL, 0}};

const fdy_cli_flag fdy_cli_session_rows[] = {
    {FDY_CLI_PARSE("backend", fdy_cli_session_flags, backend, parse_backend)},
    {FDY_CLI_U64("threads", fdy_cli_session_flags, threads, 1, 256)},
    {FDY_CLI_U64("context", fdy_cli_session_flags, context, 1, UINT32_MAX)},
    {FDY_CLI_CHOICE("kv-dtype", fdy_cli_session_flags, kv_dtype, kv_dtypes)},
    {FDY_CLI_END},
};

const fdy_cli_flag fdy_cli_engine_rows[] = {
    {FDY_CLI_SIZE("weight-budget", fdy_cli_session_flags, weight_budget)},
    {FDY_CLI_U64("buffers", fdy_cli_session_flags, buffers, 1,
                 FDY_CLI_MAX_BUFFERS)},
    {FDY_CLI_U64("prefill-rows", fdy_cli_session_flags, prefill_rows, 1,
                 FDY_CLI_MAX_PREFILL_ROWS)},
    {FDY_CLI_PARSE("graphs", fdy_cli_session_flags, no_graphs, parse_off)},
    {FDY_CLI_PARSE("pack-streamed", fdy_cli_session_flags, skip_packing,
                   parse_off)},
    {FDY_CLI_PARSE("dependent-launch", fdy_cli_session_flags, serial_launch,
                   parse_off)},
    {FDY_CLI_TEXT("manifest", fdy_cli_session_flags, manifest)},
    {FDY_CLI_END},
};

void fdy_cli_cap_prefill_rows(fdy_llama_session_options *o,
                              const fdy_llama_config *config) {
  uint32_t context = o->context;
  if (context == 0) {
    const uint32_t max = config->max_position_embeddings;
    context = max < FDY_LLAMA_DEFAULT_CONTEXT ? max : FDY_LLAMA_DEFAULT_CONTEXT;
  }
  if (o->prefill_rows > context) {
    o->prefill_rows = context;
  }
}

void fdy_cli_explain_budget(const fdy_cli_session_flags *flags,
                            fdy_error *err) {
  if (!err || err->kind != FDY_ERR_BUDGET) {
    return;
  }
  char budget[32], least[32];
  fdy_format_bytes(err->expected, budget, sizeof budget);
  fdy_format_bytes(err->actual, least, sizeof least);
  unsigned long long buffers =
      flags->buffers ? flags->buffers : FDY_LLAMA_DEFAULT_BUFFERS;
  size_t len = strlen(err->message);
  snprintf(err->message + len, sizeof err->message - len,
           " (--weight-budget %s is too small for --buffers %llu: at least "
           "%s)",
           budget, buffers, least);
}

void fdy_cli_session_flags_help(FILE *out) {
  fprintf(out,
          "  --weight-budget SIZE  backend memory for weights: 512MiB, 2GiB\n"
          "                   or bytes (default: the backend's memory, the\n"
          "                   device's on cuda, host memory on cpu; every\n"
          "                   weight resident when it fits); what does not\n"
          "                   fit is streamed through --buffers slots\n"
          "  --buffers N      slots of streamed weights, 1 to %u (default %u)\n"
          "  --prefill-rows N tokens per prefill run, 1 to %u (default %u);\n"
          "                   more than the context runs as the context\n"
          "  --graphs on|off  record each step once and replay it (CUDA\n"
          "                   graphs; default on), or issue every command\n"
          "                   per run\n"
          "  --pack-streamed on|off  on (default): each streamed unit is\n"
          "                   copied once at start into page-locked memory\n"
          "                   and streamed in one copy per token; off: one\n"
          "                   copy per tensor from the mapped checkpoint\n"
          "  --dependent-launch on|off  cuda: on (default): each decode\n"
          "                   kernel starts while the one before it\n"
          "                   finishes and waits for its results inside\n"
          "                   (programmatic dependent launch); off: after\n"
          "                   it completes\n"
          "  --manifest FILE  refuse, before any work, a checkpoint whose\n"
          "                   files differ from FILE (foundry manifest)\n",
          FDY_CLI_MAX_BUFFERS, FDY_LLAMA_DEFAULT_BUFFERS,
          FDY_CLI_MAX_PREFILL_ROWS, FDY_LLAMA_DEFAULT_PREFILL_ROWS);
}

fdy_status fdy_cli_check_manifest(const fdy_cli_session_flags *flags,
                                  const char *model_dir, fdy_manifest *actual,
                                  fdy_error *err) {
  fdy_manifest own;
  fdy_manifest *dir = actual ? actual : &own;
  memset(dir, 0, sizeof *dir);
  if (!flags->manifest && !actual) {
    return FDY_OK;
  }
  fdy_manifest pinned;
  fdy_status st = flags->manifest
                      ? fdy_manifest_read(flags->manifest, &pinned, err)
                      : FDY_OK;
  if (st != FDY_OK) {
    return st;
  }
  st = fdy_manifest_of_dir(model_dir, dir, err);
  if (st == FDY_OK && flags->manifest) {
    st = fdy_manifest_check(&pinned, dir, err);
    if (st != FDY_OK) {
      fdy_error_prefix(err, "--manifest %s", flags->manifest);
    }
  }
  if (flags->manifest) {
    fdy_manifest_free(&pinned);
  }
  if (st != FDY_OK || !actual) {
    fdy_manifest_free(dir);
  }
  return st;
}

fdy_llama_session_options
fdy_cli_session_options(const fdy_cli_session_flags *flags,
                        fdy_backend *backend) {
  return (fdy_llama_session_options){.backend = backend,
                                     .context = (uint32_t)flags->context,
                                     .prefill_rows =
                                         (uint32_t)flags->prefill_rows,
                                     .kv_dtype = flags->kv_dtype,
                                     .weight_budget = flags->weight_budget,
                                     .buffers = (uint32_t)flags->buffers,
                                     .no_graphs = flags->no_graphs,
                                     .skip_packing = flags->skip_packing};
}

/* ---- sampling ------------------------------------------------------------ */

/* A finite decimal number in [min, max] for flag. */
static fdy_status parse_number(const char *flag, const char *text, double min,
                               double max, double *out, fdy_error *err) {
  char *end = NULL;
  errno = 0;
  double value = text && *text ? strtod(text, &end) : NAN;
  if (!end || *end != '\0' || !isfinite(value) || value < min || value > max) {
    return fdy_error_setf(err, FDY_ERR_INVALID_ARGUMENT, flag, 0, 0,
                          "%s must be a number from %g to %g, got '%s'", flag,
                          min, max, text ? text : "");
  }
  *out = value;
  return FDY_OK;
}

/* The largest temperature taken: logits divided by less than 1e-3 of
 * themselves are greedy in all but name, and more than 1e3 is uniform. */
#define MAX_TEMPERATURE 1000.0

/* A float in [low, high] (parse_number) into the float at value. */
static fdy_status parse_float(const char *flag, const char *text, double low,
                              double high, void *value, fdy_error *err) {
  double number = 0.0;
  fdy_status st = parse_number(flag, text, low, high, &number, err);
  if (st == FDY_OK) {
    *(float *)value = (float)number;
  }
  return st;
}

/* --temperature T: 0 to MAX_TEMPERATURE. */
static fdy_status parse_temperature(const char *flag, const char *text,
                                    void *value, fdy_error *err) {
  return parse_float(flag, text, 0.0, MAX_TEMPERATURE, value, err);
}

/* --top-p and --min-p: 0 to 1. */
static fdy_status parse_probability(const char *flag, const char *text,
                                    void *value, fdy_error *err) {
  return parse_float(flag, text, 0.0, 1.0, value, err);
}

const fdy_cli_flag fdy_cli_sampling_rows[] = {
    {FDY_CLI_PARSE("temperature", fdy_cli_sampling_flags, params.temperature,
                   parse_temperature),
     FDY_CLI_GIVEN(fdy_cli_sampling_flags, temperature)},
    {FDY_CLI_U32("top-k", fdy_cli_sampling_flags, params.top_k, 0, UINT32_MAX),
     FDY_CLI_GIVEN(fdy_cli_sampling_flags, top_k)},
    {FDY_CLI_PARSE("top-p", fdy_cli_sampling_flags, params.top_p,
                   parse_probability),
     FDY_CLI_GIVEN(fdy_cli_sampling_flags, top_p)},
    {FDY_CLI_PARSE("min-p", fdy_cli_sampling_flags, params.min_p,
                   parse_probability),
     FDY_CLI_GIVEN(fdy_cli_sampling_flags, min_p)},
    {FDY_CLI_U64("seed", fdy_cli_sampling_flags, params.seed, 0, INT64_MAX),
     FDY_CLI_GIVEN(fdy_cli_sampling_flags, seed)},
    {FDY_CLI_END},
};

void fdy_cli_sampling_help(FILE *out, const char *default_text) {
  fprintf(out,
          "  --temperature T  sample at temperature T, 0 to %g (0: greedy,\n"
          "                   the most likely id)\n"
          "                   default: %s\n"
          "  --top-k K        sample among the K most likely ids (0: all)\n"
          "  --top-p P        among the most likely ids holding P of the\n"
          "                   probability, 0 to 1 (0 or 1: off)\n"
          "  --min-p P        among the ids at least P times as likely as\n"
          "                   the most likely one, 0 to 1 (0: off)\n"
          "  --seed S         the random stream, 0 to 2^63 - 1 (default: a\n"
          "                   random one, printed on stderr); a seeded run\n"
          "                   draws the same ids on the cpu backend\n",
          MAX_TEMPERATURE, default_text);
}

/* A generation_config.json field: schema error naming file and field. */
static fdy_status config_field_error(const char *path, const char *field,
                                     const char *expected, fdy_error *err) {
  return fdy_error_setf(err, FDY_ERR_SCHEMA, field, 0, 0,
                        "%s: \"%s\" must be %s", path, field, expected);
}

/* The sampling fields of generation_config.json's object root (path names
 * the file in errors): temperature, top_k and top_p where present, under
 * do_sample. */
static fdy_status config_sampling(const char *path, const json_t *root,
                                  fdy_sample_params *out, fdy_error *err) {
  fdy_sample_params p = FDY_LLAMA_GREEDY;
  const json_t *v = json_object_get(root, "do_sample");
  int do_sample = -1; /* absent */
  if (v && !json_is_null(v)) {
    if (!json_is_boolean(v)) {
      return config_field_error(path, "do_sample", "true or false", err);
    }
    do_sample = json_is_true(v);
  }
  v = json_object_get(root, "temperature");
  bool have_temperature = v && !json_is_null(v);
  if (have_temperature) {
    double t = json_is_number(v) ? json_number_value(v) : -1.0;
    if (!isfinite(t) || t < 0.0 || t > MAX_TEMPERATURE) {
      return config_field_error(path, "temperature", "a number from 0 to 1000",
                                err);
    }
    p.temperature = (float)t;
  }
  v = json_object_get(root, "top_k");
  if (v && !json_is_null(v)) {
    json_int_t k = json_is_integer(v) ? json_integer_value(v) : -1;
    if (k < 0 || k > (json_int_t)UINT32_MAX) {
      return config_field_error(path, "top_k",
                                "an integer from 0 to 4294967295", err);
    }
    p.top_k = (uint32_t)k;
  }
  v = json_object_get(root, "top_p");
  if (v && !json_is_null(v)) {
    double t = json_is_number(v) ? json_number_value(v) : -1.0;
    if (!isfinite(t) || t < 0.0 || t > 1.0) {
      return config_field_error(path, "top_p", "a number from 0 to 1", err);
    }
    p.top_p = (float)t;
  }
  /* Hugging Face samples only with do_sample, at temperature 1.0 unless
   * told otherwise */
  if (do_sample == 0) {
    p = FDY_LLAMA_GREEDY;
  } else if (do_sample == 1 && !have_temperature) {
    p.temperature = 1.0f;
  }
  *out = p;
  return FDY_OK;
}

fdy_status fdy_cli_generation_config(const char *model_dir,
                                     fdy_sample_params *out, bool *found,
                                     fdy_error *err) {
  *out = FDY_LLAMA_GREEDY;
  *found = false;
  size_t dir_len = strlen(model_dir);
  char *path = malloc(dir_len + sizeof "/generation_config.json");
  if (!path) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  memcpy(path, model_dir, dir_len);
  memcpy(path + dir_len, "/generation_config.json",
         sizeof "/generation_config.json");
  char *text = NULL;
  size_t len = 0;
  json_t *root = NULL;
  fdy_status st =
      fdy_cli_read_file(path, "generation config", &text, &len, err);
  if (st == FDY_ERR_NOT_FOUND) {
    st = FDY_OK;
    goto cleanup;
  }
  if (st != FDY_OK) {
    goto cleanup;
  }
  json_error_t jerr;
  root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root || !json_is_object(root)) {
    st = fdy_error_setf(err, FDY_ERR_PARSE, path, 0, 0,
                        "%s: %s (line %d, column %d)", path,
                        root ? "not a JSON object" : jerr.text,
                        root ? 1 : jerr.line, root ? 1 : jerr.column);
    if (err && !root) {
      err->line = jerr.line;
      err->column = jerr.column;
    }
    goto cleanup;
  }
  st = config_sampling(path, root, out, err);
  *found = st == FDY_OK;

cleanup:
  json_decref(root);
  free(text);
  free(path);
  return st;
}

/* A seed from the system's entropy, else from the clock and the pid. */
static uint64_t random_seed(void) {
  uint64_t seed = 0;
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f || fread(&seed, sizeof seed, 1, f) != 1) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
           ((uint64_t)getpid() << 32);
  }
  if (f) {
    fclose(f);
  }
  return seed >> 1; /* a JSON integer */
}

fdy_sample_params fdy_cli_sampling_resolve(const fdy_cli_sampling_flags *flags,
                                           fdy_sample_params base,
                                           bool *random) {
  fdy_sample_params p = base;
  if (flags->temperature) {
    p.temperature = flags->params.temperature;
  }
  if (flags->top_k) {
    p.top_k = flags->params.top_k;
  }
  if (flags->top_p) {
    p.top_p = flags->params.top_p;
  }
  if (flags->min_p) {
    p.min_p = flags->params.min_p;
  }
  *random = false;
  if (flags->seed) {
    p.seed = flags->params.seed;
  } else if (p.temperature > 0.0f) {
    p.seed = random_seed();
    *random = true;
  }
  return p;
}

void fdy_cli_sampling_print(FILE *out, const fdy_sample_params *p, bool random,
                            const char *source) {
  if (p->temperature == 0.0f) {
    fprintf(out, "sampling: greedy%s%s\n", source ? " from " : "",
            source ? source : "");
    return;
  }
  fprintf(out,
          "sampling: temperature %g, top-k %" PRIu32 ", top-p %g, min-p %g, "
          "seed %" PRIu64 "%s%s",
          (double)p->temperature, p->top_k, (double)p->top_p, (double)p->min_p,
          p->seed, source ? " from " : "", source ? source : "");
  if (random) {
    fprintf(out, " (random: --seed %" PRIu64 " repeats it)", p->seed);
  }
  fputc('\n', out);
}

/* ---- chat templates ------------------------------------------------------ */

void fdy_cli_parse_chat_template(const char *text, fdy_chat_template *kind,
                                 const char **file) {
  if (strcmp(text, "llama3") == 0) {
    *kind = FDY_CHAT_TEMPLATE_LLAMA3;
  } else if (strcmp(text, "chatml") == 0) {
    *kind = FDY_CHAT_TEMPLATE_CHATML;
  } else {
    *file = text;
  }
}

void fdy_cli_explain_template(fdy_error *err) {
  if (!err || err->kind != FDY_ERR_UNSUPPORTED ||
      strcmp(err->name, "chat_template") != 0) {
    return;
  }
  size_t len = strlen(err->message);
  snprintf(err->message + len, sizeof err->message - len,
           " (--chat-template llama3, chatml or a template FILE applies "
           "another instead)");
}

json_t *fdy_cli_json_ids(const int32_t *ids, uint32_t count) {
  json_t *array = json_array();
  for (uint32_t i = 0; array && i < count; i++) {
    if (json_array_append_new(array, json_integer(ids[i]))) {
      json_decref(array);
      array = NULL;
    }
  }
  return array;
}
