/* `foundry make-model --preset NAME --seed S --out DIR` (and the
 * quantization flags): writes a random-weight Llama checkpoint in the MLX
 * layout, deterministic for (preset, flags, seed), refusing to overwrite
 * DIR. Progress goes to stderr when it is a terminal. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "foundry/llama.h"
#include "foundry/tokenizer.h"

/* ids of the Llama 3 vocabulary: 128,000 ranks and 256 special tokens */
#define FDY_LLAMA3_VOCAB_SIZE 128256u

void fdy_cmd_make_model_help(FILE *out) {
  fprintf(out,
          "usage: foundry make-model --preset NAME [--seed S] [--bits 4|8]\n"
          "         [--group-size 32|64|128] [--mixed] [--unquantized]\n"
          "         [--dtype float16|bfloat16|float32] --out DIR\n"
          "\n"
          "Writes a random-weight checkpoint (config.json,\n"
          "model.safetensors, model.safetensors.index.json) into the new\n"
          "directory DIR, which must not exist. The files are identical\n"
          "for the same preset, flags and seed (default 0). Weights are\n"
          "MLX affine 4-bit in groups of 64 unless --bits and --group-size\n"
          "say otherwise; --mixed adds mlx-lm-style per-module entries (8\n"
          "bits for some v_proj and down_proj and an untied lm_head, the\n"
          "last layer's o_proj unquantized); --unquantized writes plain\n"
          "weights; --dtype sets the dtype of scales, norms and plain\n"
          "weights (default the preset's; float32 only unquantized).\n"
          "The presets of the\n"
          "Llama 3 vocabulary (llama-3.*, micro-llama3-vocab) also get\n"
          "its tokenizer.json and tokenizer_config.json (with the Llama 3\n"
          "Instruct chat template), so that --prompt and chat work; the\n"
          "weights are random, and so is the text.\n"
          "\n"
          "presets:");
  for (const char *const *p = fdy_llama_presets(); *p; p++) {
    fprintf(out, " %s", *p);
  }
  fprintf(out, "\n");
}

typedef struct progress_state {
  int last_percent;
} progress_state;

static void show_progress(void *ctx, uint64_t done, uint64_t total) {
  progress_state *state = ctx;
  int percent = total ? (int)(done * 100 / total) : 100;
  if (percent == state->last_percent) {
    return;
  }
  state->last_percent = percent;
  char a[32], b[32];
  fdy_format_bytes(done, a, sizeof a);
  fdy_format_bytes(total, b, sizeof b);
  fprintf(stderr, "\rwriting %3d%% (%s of %s)  ", percent, a, b);
  if (done == total) {
    fputc('\n', stderr);
  }
}

/* The command's options, as parsed. */
typedef struct make_args {
  const char *preset, *out;
  uint64_t seed;
  fdy_llama_make_options make;
} make_args;

/* --bits (4 or 8) or --group-size (32, 64 or 128) into the uint32_t at
 * value. */
static fdy_status parse_quantization(const char *flag, const char *text,
                                     void *value, fdy_error *err) {
  const bool bits = strcmp(flag, "--bits") == 0;
  uint64_t number = 0;
  fdy_status st = fdy_cli_parse_uint(flag, text, 1, UINT32_MAX, &number, err);
  if (st != FDY_OK) {
    return st;
  }
  if (bits ? number != 4 && number != 8
           : number != 32 && number != 64 && number != 128) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "%s %s: %s", flag, text,
                         bits ? "4 or 8" : "32, 64 or 128");
  }
  *(uint32_t *)value = (uint32_t)number;
  return FDY_OK;
}

/* --dtype: float16, bfloat16 or float32, the name itself. */
static fdy_status parse_dtype(const char *flag, const char *text, void *value,
                              fdy_error *err) {
  if (strcmp(text, "float16") != 0 && strcmp(text, "bfloat16") != 0 &&
      strcmp(text, "float32") != 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "%s %s: float16, bfloat16 or float32", flag, text);
  }
  *(const char **)value = text;
  return FDY_OK;
}

static const fdy_cli_flag flags[] = {
    {FDY_CLI_TEXT("preset", make_args, preset)},
    {FDY_CLI_U64("seed", make_args, seed, 0, UINT64_MAX)},
    {FDY_CLI_TEXT("out", make_args, out)},
    {FDY_CLI_PARSE("bits", make_args, make.bits, parse_quantization)},
    {FDY_CLI_PARSE("group-size", make_args, make.group_size,
                   parse_quantization)},
    {FDY_CLI_SET("mixed", make_args, make.mixed)},
    {FDY_CLI_SET("unquantized", make_args, make.unquantized)},
    {FDY_CLI_PARSE("dtype", make_args, make.dtype, parse_dtype)},
    {FDY_CLI_END},
};

/* The flags into *a, and the checks between them: FDY_EXIT_OK or the
 * usage error printed. */
static int parse(int argc, char **argv, make_args *a) {
  *a = (make_args){.preset = NULL};
  int code = fdy_cli_parse_flags("make-model", argc, argv, flags, a, NULL);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (!a->preset || !a->out) {
    return fdy_cli_usage("make-model", "--preset and --out are required");
  }
  bool known = false;
  char names[256] = "";
  size_t used = 0;
  for (const char *const *p = fdy_llama_presets(); *p; p++) {
    known = known || strcmp(*p, a->preset) == 0;
    int n = snprintf(names + used, sizeof names - used, "%s%s",
                     used ? ", " : "", *p);
    used = n > 0 && (size_t)n < sizeof names - used ? used + (size_t)n : used;
  }
  if (!known) {
    return fdy_cli_usage("make-model", "unknown preset '%s' (presets: %s)",
                         a->preset, names);
  }
  if (a->make.unquantized &&
      (a->make.bits || a->make.group_size || a->make.mixed)) {
    return fdy_cli_usage("make-model", "--unquantized takes no --bits, "
                                       "--group-size or --mixed");
  }
  return FDY_EXIT_OK;
}

/* Writes the checkpoint, and with the Llama 3 vocabulary its tokenizer
 * beside the weights, as a real checkpoint has it, so that text prompts
 * and chat work (*text). */
static int run(const make_args *a, bool *text) {
  fdy_error err;
  progress_state state = {-1};
  bool tty = fdy_cli_stderr_is_tty();
  if (fdy_llama_make_model_ex(a->preset, a->seed, &a->make, a->out,
                              tty ? show_progress : NULL, &state,
                              &err) != FDY_OK) {
    if (tty && state.last_percent >= 0 && state.last_percent < 100) {
      fputc('\n', stderr);
    }
    return fdy_cli_fail(&err);
  }
  fdy_llama_config config;
  *text = fdy_llama_preset_config(a->preset, &a->make, &config, NULL, &err) ==
              FDY_OK &&
          config.vocab_size == FDY_LLAMA3_VOCAB_SIZE;
  if (*text && fdy_tokenizer_write_llama3(a->out, &err) != FDY_OK) {
    return fdy_cli_fail(&err);
  }
  return FDY_EXIT_OK;
}

int fdy_cmd_make_model(int argc, char **argv) {
  make_args a;
  int code = parse(argc, argv, &a);
  bool text = false;
  if (code == FDY_EXIT_OK) {
    code = run(&a, &text);
  }
  if (code == FDY_EXIT_OK) {
    fprintf(stderr, "wrote %s (preset %s, seed %" PRIu64 "%s)\n", a.out,
            a.preset, a.seed, text ? ", with the Llama 3 tokenizer" : "");
  }
  return code;
}
