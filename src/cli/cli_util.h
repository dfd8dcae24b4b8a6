/* Shared helpers of the CLI commands: error reporting and strict number
 * parsing. Messages go to stderr as "foundry: error: ..." (failures, exit 1)
 * or "foundry COMMAND: error: ..." plus a hint to `foundry help COMMAND`
 * (usage errors, exit 2), each on one line: control bytes in them (a shard
 * name with a newline) are escaped (fdy_escape_controls). */
#ifndef FOUNDRY_CLI_UTIL_H
#define FOUNDRY_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <stdio.h>

#include "cli_options.h"
#include "foundry/backend.h"
#include "foundry/chat.h"
#include "foundry/core.h"
#include "foundry/llama_session.h"
#include "foundry/manifest.h"
#include "foundry/ops.h"

enum { FDY_EXIT_OK = 0, FDY_EXIT_FAILURE = 1, FDY_EXIT_USAGE = 2 };

/* Prints err (message, and the cleanup failure when there was one) as
 * "foundry: error: ..." and returns FDY_EXIT_FAILURE. */
int fdy_cli_fail(const fdy_error *err);

/* Prints "foundry COMMAND: error: <message>" and the help hint; returns
 * FDY_EXIT_USAGE. */
int fdy_cli_usage(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The last step of every command (main applies it to each command's exit
 * code, and a command may call it early to stop at a failed write): flushes
 * stdout and checks its error flag. When writing failed, prints "foundry:
 * error: writing to standard output failed: REASON" (once per process) and
 * returns FDY_EXIT_FAILURE in place of FDY_EXIT_OK; otherwise returns
 * code. */
int fdy_cli_finish_stdout(int code);

/* The one check of every command's arguments before its own parsing: none
 * may be empty, so that an empty path (`inspect ""`, `--model ""`,
 * `--out=`) is a usage error instead of opening "/config.json" or the
 * like. Only the values of text flags (--text, --ids, --prompt, --system)
 * may be empty. argv[0] is the command name. Returns FDY_EXIT_OK, or prints the
 * usage error and returns FDY_EXIT_USAGE. */
int fdy_cli_check_arguments(const char *command, int argc, char **argv);

struct option;

/* The one check, before a command's getopt_long loop, that no flag is given
 * twice: runs getopt_long over a copy of argv (argv itself is left
 * unpermuted) with the command's options table, ":" as the short options
 * and opterr off, and refuses the second occurrence of any option
 * ("--model is given twice; give it once"), whether spelled "--x v",
 * "--x=v" or as an abbreviation. Unknown options and missing values are
 * left to the command's own loop, which starts again from optind = 1.
 * Returns FDY_EXIT_OK, or prints the usage error and returns
 * FDY_EXIT_USAGE (FDY_EXIT_FAILURE when out of memory). */
int fdy_cli_check_repeats(const char *command, int argc, char **argv,
                          const struct option *options);

/* Parses a decimal integer in [min, max] for flag; on failure fills err with
 * FDY_ERR_INVALID_ARGUMENT naming the flag ("--layers must be an integer
 * from 1 to 4294967295, got 'x'"). */
fdy_status fdy_cli_parse_uint(const char *flag, const char *text, uint64_t min,
                              uint64_t max, uint64_t *out, fdy_error *err);

/* The largest byte count a size flag takes: 2^63 - 1, the largest integer
 * that a JSON report or plan holds (plan/json.c refuses more). */
#define FDY_CLI_MAX_BYTES ((uint64_t)INT64_MAX)

/* The one parser of size flags (--weight-budget, plan's --budget, bench's
 * --cpu-memory): a positive size in bytes or binary units ("512MiB",
 * "1048576"; fdy_parse_bytes) of at most FDY_CLI_MAX_BYTES. Every failure
 * is FDY_ERR_INVALID_ARGUMENT naming the flag (err->name = flag); a size
 * above the limit sets err->expected = FDY_CLI_MAX_BYTES and err->actual =
 * the size. *out is left alone on failure. */
fdy_status fdy_cli_parse_size(const char *flag, const char *text, uint64_t *out,
                              fdy_error *err);

/* The one parser of comma-separated integer lists ("1,2,3"): each item is
 * decimal digits only (no sign, space or empty item; leading zeros allowed
 * at any length) from min to max. *out is malloc'd with *count >= 1 values.
 * Every failure is FDY_ERR_INVALID_ARGUMENT with one message naming the
 * item and the list ("--prompt-ids: item 2 (' 2') of '1, 2' is not an
 * integer from 0 to 2147483647"), err->ids[0] = the item's index from 0 and
 * err->name = flag; or FDY_ERR_OUT_OF_MEMORY. */
fdy_status fdy_cli_parse_list(const char *flag, const char *text, uint64_t min,
                              uint64_t max, uint64_t **out, uint32_t *count,
                              fdy_error *err);

/* fdy_cli_parse_list of token ids (0 to INT32_MAX) as int32; *out is
 * malloc'd. */
fdy_status fdy_cli_parse_ids(const char *flag, const char *text, int32_t **out,
                             uint32_t *count, fdy_error *err);

/* Creates backend `name`: "cpu" (threads: pool threads, 0 = online CPUs)
 * or "cuda" (device 0, serial_launch: fdy_cuda_options'). FDY_ERR_UNSUPPORTED
 * tells a build without the CUDA backend (and why: fdy_build_info's
 * cuda_note, how to get one) from a CUDA build without a device. An unknown
 * name is FDY_ERR_INVALID_ARGUMENT (a usage error). */
fdy_status fdy_cli_backend_create(const char *name, uint32_t threads,
                                  bool serial_launch, fdy_backend **out,
                                  fdy_error *err);

/* The flags of a Llama session that generate, chat, verify and infer-bench
 * share, parsed once here: --backend cpu|cuda, --threads T (1..256),
 * --context C (>= 1), --kv-dtype f32|f16, --weight-budget SIZE (a positive
 * size in bytes or binary units: 512MiB, 2GiB; fdy_parse_bytes),
 * --buffers N (1..FDY_CLI_MAX_BUFFERS), --prefill-rows N
 * (1..FDY_CLI_MAX_PREFILL_ROWS), --graphs on|off, --pack-streamed on|off
 * and --dependent-launch on|off.
 * A command lists the ones it takes in its flag table
 * (FDY_CLI_SESSION_ROWS, FDY_CLI_ENGINE_ROWS below). */
typedef struct fdy_cli_session_flags {
  const char *backend; /* "cpu" or "cuda" */
  uint64_t threads;    /* 0 = the backend's default */
  uint64_t context;    /* 0 = the session's default */
  fdy_dtype kv_dtype;
  uint64_t weight_budget; /* device bytes for weights; 0 = the session's
                             default (the device's memory) */
  uint64_t buffers;       /* slots of streamed weights; 0 = the default */
  uint64_t prefill_rows;  /* tokens per prefill run; 0 = the default */
  bool no_graphs;         /* --graphs off */
  bool skip_packing;      /* --pack-streamed off: streamed units copied
                             extent by extent (fdy_executor_options) */
  bool serial_launch;     /* --dependent-launch off (fdy_cuda_options) */
  const char *manifest;   /* --manifest FILE: the checkpoint pinned to it */
} fdy_cli_session_flags;

#define FDY_CLI_SESSION_FLAGS_DEFAULT                                          \
  { .backend = "cpu", .kv_dtype = FDY_DTYPE_F32 }

#define FDY_CLI_MAX_BUFFERS      64u
#define FDY_CLI_MAX_PREFILL_ROWS 65536u

/* The rows of the session flags, into a fdy_cli_session_flags: those every
 * session command takes (--backend, --threads, --context, --kv-dtype),
 * and those of the engine's budget and launches (the rest; all but chat
 * take them). A bad value, a --backend other than cpu or cuda included,
 * is FDY_ERR_INVALID_ARGUMENT naming the flag: a usage error. */
extern const fdy_cli_flag fdy_cli_session_rows[];
extern const fdy_cli_flag fdy_cli_engine_rows[];

/* Their row groups into field (a fdy_cli_session_flags) of type. */
#define FDY_CLI_SESSION_ROWS(type, field)                                      \
  FDY_CLI_GROUP(fdy_cli_session_rows,                                          \
                FDY_CLI_AT(type, field, fdy_cli_session_flags))
#define FDY_CLI_ENGINE_ROWS(type, field)                                       \
  FDY_CLI_GROUP(fdy_cli_engine_rows,                                           \
                FDY_CLI_AT(type, field, fdy_cli_session_flags))

/* The help lines of --weight-budget, --buffers, --prefill-rows and
 * --graphs and --pack-streamed. */
void fdy_cli_session_flags_help(FILE *out);

/* The checkpoint in model_dir against flags->manifest, before any work:
 * when flags->manifest is set or actual is not NULL, hashes the directory
 * (fdy_manifest_of_dir; into *actual, which the caller then frees with
 * fdy_manifest_free); when flags->manifest is set, reads it and refuses a
 * directory whose files differ (FDY_ERR_CHECKSUM naming the file and both
 * hashes: fdy_manifest_check). Nothing is done when neither is asked. */
fdy_status fdy_cli_check_manifest(const fdy_cli_session_flags *flags,
                                  const char *model_dir, fdy_manifest *actual,
                                  fdy_error *err);

/* The session options of flags on backend (all_logits and collect_timings
 * off). */
fdy_llama_session_options
fdy_cli_session_options(const fdy_cli_session_flags *flags,
                        fdy_backend *backend);

/* Caps o->prefill_rows at the context the session will have (o->context,
 * or when 0 config's max_position_embeddings capped at
 * FDY_LLAMA_DEFAULT_CONTEXT), so that --prefill-rows above the context
 * neither sizes the activations for rows that can never run nor fails
 * creation with a budget error. Call it once o->context is final. */
void fdy_cli_cap_prefill_rows(fdy_llama_session_options *o,
                              const fdy_llama_config *config);

/* After a session failed to be created with FDY_ERR_BUDGET (the planner:
 * err->expected = the budget, err->actual = the least budget that works
 * with these buffers), appends to err->message the minimum in binary units
 * and the flags to change ("(--weight-budget 1 MiB is too small for
 * --buffers 2: at least 6.76 MiB)"); --buffers unset counts as
 * FDY_LLAMA_DEFAULT_BUFFERS. Any other error is left alone. */
void fdy_cli_explain_budget(const fdy_cli_session_flags *flags, fdy_error *err);

/* The sampling flags of generate and chat, parsed once here:
 * --temperature T (finite, >= 0; 0 = greedy), --top-k K (0 = every id),
 * --top-p P (in [0, 1]; 0 or 1 = off), --min-p P (in [0, 1]; 0 = off) and
 * --seed S (0 to 2^63 - 1, a JSON integer). Each remembers whether it was
 * given, so that the flags given override a default (chat's
 * generation_config.json) one field at a time. */
typedef struct fdy_cli_sampling_flags {
  fdy_sample_params params; /* the values given (others greedy's) */
  bool temperature, top_k, top_p, min_p, seed; /* given */
} fdy_cli_sampling_flags;

/* The rows of the sampling flags, into a fdy_cli_sampling_flags: each
 * sets its field of params and its given bool. A bad value is
 * FDY_ERR_INVALID_ARGUMENT naming the flag: a usage error. */
extern const fdy_cli_flag fdy_cli_sampling_rows[];

/* Their row group into field (a fdy_cli_sampling_flags) of type. */
#define FDY_CLI_SAMPLING_ROWS(type, field)                                     \
  FDY_CLI_GROUP(fdy_cli_sampling_rows,                                         \
                FDY_CLI_AT(type, field, fdy_cli_sampling_flags))

/* The help lines of the sampling flags; default says what is used when
 * none is given ("greedy"). */
void fdy_cli_sampling_help(FILE *out, const char *default_text);

/* Reads model_dir/generation_config.json into *out when the file exists
 * (*found true): temperature, top_k and top_p where present (others
 * greedy's; do_sample false means greedy). A file that is not JSON
 * (FDY_ERR_PARSE, err->line/column) or a field of the wrong type or out
 * of range (FDY_ERR_SCHEMA, err->name the field) is an error naming the
 * file and the field. No file: *found false, *out greedy, FDY_OK. */
fdy_status fdy_cli_generation_config(const char *model_dir,
                                     fdy_sample_params *out, bool *found,
                                     fdy_error *err);

/* The sampling a command uses: base (greedy, or chat's
 * generation_config.json) with each flag given overriding its field; when
 * the result samples (temperature > 0) and no --seed was given, a random
 * seed (*random_seed true), which the command prints so that the run can
 * be repeated. */
fdy_sample_params fdy_cli_sampling_resolve(const fdy_cli_sampling_flags *flags,
                                           fdy_sample_params base,
                                           bool *random_seed);

/* One line on out describing p ("sampling: temperature 0.7, top-k 40,
 * top-p 0.9, min-p 0, seed 12 (random: --seed 12 repeats it)" or
 * "sampling: greedy"), with source saying where the defaults came from
 * (NULL: nothing). */
void fdy_cli_sampling_print(FILE *out, const fdy_sample_params *p,
                            bool random_seed, const char *source);

/* --chat-template VALUE (generate --chat, chat; never empty: the flag
 * parser refuses an empty value): llama3 or chatml sets *kind, anything
 * else is a Jinja template file (*file = text, read by fdy_chat_create). */
void fdy_cli_parse_chat_template(const char *text, fdy_chat_template *kind,
                                 const char **file);

/* After fdy_chat_create refused a chat template (err->name
 * "chat_template"), appends how to apply another: --chat-template. Any
 * other error is left alone; err may be NULL. */
void fdy_cli_explain_template(fdy_error *err);

/* The most bytes the CLI reads from a prompt, prompt-list, text or id
 * file: 64 MiB, a hundred times the text of the longest context (128k
 * tokens), so that a wrong file (900 MB of NUL bytes) is refused at once
 * instead of exhausting memory. */
#define FDY_CLI_MAX_INPUT_BYTES (64ull << 20)

/* The one reader of the CLI's input files (generate --prompt-file and
 * --prompts-file, tokenize --file, id lists): the whole regular file at
 * path as raw bytes, read to end of file (fdy_input_read: a /proc file is
 * not empty); *out is malloc'd with a NUL after the *len bytes.
 * FDY_ERR_NOT_FOUND / FDY_ERR_IO name the path ("cannot open WHAT
 * 'PATH'"); a file of more than FDY_CLI_MAX_INPUT_BYTES is FDY_ERR_FORMAT
 * ("WHAT 'PATH' is larger than the limit of 64 MiB ...", err->name = the
 * path, expected = the limit, actual = the size). */
fdy_status fdy_cli_read_file(const char *path, const char *what, char **out,
                             size_t *len, fdy_error *err);

/* Reads a file of comma-separated ids (fdy_cli_read_file), as
 * infer-bench --prompt-file and detokenize --file take: surrounding
 * blanks and newlines are dropped, the rest goes to fdy_cli_parse_ids
 * under the name label. A NUL byte anywhere is FDY_ERR_PARSE naming the
 * file (err->name = path) and the byte offset of the first one from 0
 * (err->actual), so that it cannot end the list early. A file of blanks
 * gives *count 0 and *out NULL when allow_empty, else the parser's error. */
fdy_status fdy_cli_read_ids_file(const char *path, const char *label,
                                 bool allow_empty, int32_t **out,
                                 uint32_t *count, fdy_error *err);

/* True when stderr is a terminal (progress output). */
bool fdy_cli_stderr_is_tty(void);

/* A JSON array of the count ids (new reference), or NULL when out of
 * memory. */
json_t *fdy_cli_json_ids(const int32_t *ids, uint32_t count);

#endif
