/* The speculative-decoding flags of generate and chat, parsed once here:
 * --draft-model DIR, --draft-tokens K (1 to FDY_LLAMA_MAX_DRAFT_TOKENS,
 * default FDY_CLI_DEFAULT_DRAFT_TOKENS; adaptive up to 2K unless fixed)
 * and --draft-fixed; the draft checkpoint and its session. */
#ifndef FOUNDRY_CLI_DRAFT_H
#define FOUNDRY_CLI_DRAFT_H

#include "cli_util.h"
#include "foundry/speculative.h"

/* Ids drafted per target pass at first. */
#define FDY_CLI_DEFAULT_DRAFT_TOKENS 4u

typedef struct fdy_cli_draft_flags {
  const char *dir; /* --draft-model; NULL: no draft */
  uint64_t tokens; /* --draft-tokens; 0: not given */
  bool fixed;      /* --draft-fixed */
} fdy_cli_draft_flags;

/* The rows of the draft flags, into a fdy_cli_draft_flags. A bad K is
 * FDY_ERR_INVALID_ARGUMENT naming --draft-tokens: a usage error. */
extern const fdy_cli_flag fdy_cli_draft_rows[];

/* Their row group into field (a fdy_cli_draft_flags) of type. */
#define FDY_CLI_DRAFT_ROWS(type, field)                                        \
  FDY_CLI_GROUP(fdy_cli_draft_rows,                                            \
                FDY_CLI_AT(type, field, fdy_cli_draft_flags))

/* FDY_EXIT_OK when the flags are consistent; else command's usage error naming
 * the flag given without --draft-model ("--draft-tokens needs --draft-model")
 * printed, and its exit code. */
int fdy_cli_draft_check(const char *command, const fdy_cli_draft_flags *flags);

/* The help lines of the draft flags: --draft-model's, then
 * fdy_cli_draft_tokens_help's. */
void fdy_cli_draft_help(FILE *out);

/* The help lines of --draft-tokens and --draft-fixed alone (serve, whose
 * --draft-model line differs, prints them after its own). */
void fdy_cli_draft_tokens_help(FILE *out);

/* The speculative options of the flags: K = --draft-tokens or the
 * default; the most K grows to twice K (at most
 * FDY_LLAMA_MAX_DRAFT_TOKENS) unless fixed. */
fdy_llama_speculative_options
fdy_cli_draft_speculative(const fdy_cli_draft_flags *flags);

/* Opens the draft checkpoint dir and refuses, before any work, one whose
 * vocabulary is not target's (FDY_ERR_INVALID_ARGUMENT naming both sizes,
 * expected = the target's); errors are prefixed "--draft-model". */
fdy_status fdy_cli_open_draft(const char *dir, const fdy_llama_model *target,
                              fdy_llama_model **out, fdy_error *err);

/* The draft's session on the target's backend: every weight resident (no
 * budget), context (at most the draft's max_position_embeddings), steps
 * of one row, the KV dtype, prefill rows and graphs of flags; ids_only
 * unless logits (speculative sampling reads them). Errors are prefixed
 * "--draft-model". */
fdy_status fdy_cli_draft_session(const fdy_cli_session_flags *flags,
                                 const fdy_llama_model *model,
                                 fdy_backend *engine, uint32_t context,
                                 bool logits, fdy_llama_session **out,
                                 fdy_error *err);

/* A speculative generation's figures: the ids after the first (which the
 * prefill gives) come from the target's verification passes. */
typedef struct fdy_cli_draft_figures {
  double acceptance;    /* accepted / proposed */
  double ids_per_pass;  /* ids after the first per target pass */
  double draft_per_id;  /* the draft's seconds per id after the first */
  double target_per_id; /* the target's seconds per id after the first */
} fdy_cli_draft_figures;

/* The figures of stats for a generation of count ids (0 where a divisor
 * is 0). */
fdy_cli_draft_figures
fdy_cli_draft_figures_of(const fdy_llama_speculative_stats *stats,
                         uint32_t count);

/* One line on out of a speculative generation's figures: "speculative: K 4
 * adaptive, 71.2% of 52 proposed ids accepted, 3.10 ids per target pass
 * (12 passes); per id: draft 0.310 ms, target 0.402 ms" (the times over
 * the count - 1 ids after the first). */
void fdy_cli_draft_print(FILE *out, const fdy_llama_speculative_options *spec,
                         const fdy_llama_speculative_stats *stats,
                         uint32_t count);

#endif
