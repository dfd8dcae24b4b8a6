/* The speculative-decoding flags, the draft checkpoint and its session
 * (cli_draft.h). */
#include "cli_draft.h"
#include "cli_util.h"

#include <inttypes.h>

const fdy_cli_flag fdy_cli_draft_rows[] = {
    {FDY_CLI_TEXT("draft-model", fdy_cli_draft_flags, dir)},
    {FDY_CLI_U64("draft-tokens", fdy_cli_draft_flags, tokens, 1,
                 FDY_LLAMA_MAX_DRAFT_TOKENS)},
    {FDY_CLI_SET("draft-fixed", fdy_cli_draft_flags, fixed)},
    {FDY_CLI_END},
};

int fdy_cli_draft_check(const char *command, const fdy_cli_draft_flags *flags) {
  const char *orphan = flags->dir      ? NULL
                       : flags->tokens ? "--draft-tokens"
                       : flags->fixed  ? "--draft-fixed"
                                       : NULL;
  return orphan ? fdy_cli_usage(command, "%s needs --draft-model", orphan)
                : FDY_EXIT_OK;
}

void fdy_cli_draft_help(FILE *out) {
  fprintf(out,
          "  --draft-model DIR  speculative decoding: DIR, a small checkpoint\n"
          "                   of the same vocabulary on the same backend with\n"
          "                   every weight resident, proposes ids that the\n"
          "                   model checks in one pass; greedy, the ids are\n"
          "                   the model's own; sampling, the rejection rule\n"
          "                   keeps its distribution. The acceptance rate,\n"
          "                   ids per pass of the model and both models'\n"
          "                   seconds per id go to stderr\n");
  fdy_cli_draft_tokens_help(out);
}

void fdy_cli_draft_tokens_help(FILE *out) {
  fprintf(out,
          "  --draft-tokens K ids drafted per pass at first, 1 to %u (default\n"
          "                   %u); adaptive: doubled after a pass that\n"
          "                   accepts every one, up to 2K, cut to the ids\n"
          "                   accepted + 1 after a rejection\n"
          "  --draft-fixed    draft K ids every pass\n",
          FDY_LLAMA_MAX_DRAFT_TOKENS, FDY_CLI_DEFAULT_DRAFT_TOKENS);
}

fdy_llama_speculative_options
fdy_cli_draft_speculative(const fdy_cli_draft_flags *flags) {
  fdy_llama_speculative_options spec = {
      .draft_tokens = flags->tokens ? (uint32_t)flags->tokens
                                    : FDY_CLI_DEFAULT_DRAFT_TOKENS,
      .fixed = flags->fixed};
  spec.max_draft_tokens = flags->fixed ? spec.draft_tokens
                          : 2 * spec.draft_tokens > FDY_LLAMA_MAX_DRAFT_TOKENS
                              ? FDY_LLAMA_MAX_DRAFT_TOKENS
                              : 2 * spec.draft_tokens;
  return spec;
}

fdy_status fdy_cli_open_draft(const char *dir, const fdy_llama_model *target,
                              fdy_llama_model **out, fdy_error *err) {
  fdy_status st = fdy_llama_open(dir, out, err);
  if (st != FDY_OK) {
    fdy_error_prefix(err, "--draft-model");
    return st;
  }
  uint32_t want = fdy_llama_model_config(target)->vocab_size;
  uint32_t have = fdy_llama_model_config(*out)->vocab_size;
  if (have != want) {
    fdy_llama_close(*out);
    *out = NULL;
    return fdy_error_setf(err, FDY_ERR_INVALID_ARGUMENT, "--draft-model", want,
                          have,
                          "--draft-model %s has a vocabulary of %" PRIu32
                          " ids, the model's has %" PRIu32
                          ": a draft must share the model's vocabulary",
                          dir, have, want);
  }
  return FDY_OK;
}

fdy_status fdy_cli_draft_session(const fdy_cli_session_flags *flags,
                                 const fdy_llama_model *model,
                                 fdy_backend *engine, uint32_t context,
                                 bool logits, fdy_llama_session **out,
                                 fdy_error *err) {
  const fdy_llama_config *config = fdy_llama_model_config(model);
  fdy_llama_session_options o = {.backend = engine,
                                 .context =
                                     context < config->max_position_embeddings
                                         ? context
                                         : config->max_position_embeddings,
                                 .prefill_rows = (uint32_t)flags->prefill_rows,
                                 .kv_dtype = flags->kv_dtype,
                                 .ids_only = !logits,
                                 .no_graphs = flags->no_graphs};
  fdy_cli_cap_prefill_rows(&o, config);
  fdy_status st = fdy_llama_session_create(model, &o, out, err);
  if (st != FDY_OK) {
    fdy_error_prefix(err, "--draft-model");
  }
  return st;
}

fdy_cli_draft_figures
fdy_cli_draft_figures_of(const fdy_llama_speculative_stats *s, uint32_t count) {
  uint32_t after = count > 0 ? count - 1 : 0;
  return (fdy_cli_draft_figures){
      .acceptance = s->proposed ? (double)s->accepted / (double)s->proposed : 0,
      .ids_per_pass =
          s->target_passes ? (double)after / (double)s->target_passes : 0,
      .draft_per_id = after ? s->draft_seconds / after : 0,
      .target_per_id = after ? s->target_seconds / after : 0};
}

void fdy_cli_draft_print(FILE *out, const fdy_llama_speculative_options *spec,
                         const fdy_llama_speculative_stats *stats,
                         uint32_t count) {
  fdy_cli_draft_figures f = fdy_cli_draft_figures_of(stats, count);
  fprintf(out,
          "speculative: K %" PRIu32 "%s, %.1f%% of %" PRIu64
          " proposed ids accepted, %.2f ids per target pass (%" PRIu64
          " passes); per id: draft %.3f ms, target %.3f ms\n",
          spec->draft_tokens, spec->fixed ? " fixed" : " adaptive",
          100.0 * f.acceptance, stats->proposed, f.ids_per_pass,
          stats->target_passes, f.draft_per_id * 1e3, f.target_per_id * 1e3);
}
