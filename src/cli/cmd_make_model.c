/* `foundry make-model --preset NAME --seed S --out DIR` (and the
 * quantization flags): writes a random-weight Llama checkpoint in the MLX
 * layout, deterministic for (preset, flags, seed), refusing to overwrite
 * DIR. Progress goes to stderr when it is a terminal. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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

int fdy_cmd_make_model(int argc, char **argv) {
  enum {
    OPT_PRESET = 256,
    OPT_SEED,
    OPT_OUT,
    OPT_BITS,
    OPT_GROUP,
    OPT_MIXED,
    OPT_UNQUANTIZED,
    OPT_DTYPE
  };
  static const struct option options[] = {
      {"preset", required_argument, NULL, OPT_PRESET},
      {"seed", required_argument, NULL, OPT_SEED},
      {"out", required_argument, NULL, OPT_OUT},
      {"bits", required_argument, NULL, OPT_BITS},
      {"group-size", required_argument, NULL, OPT_GROUP},
      {"mixed", no_argument, NULL, OPT_MIXED},
      {"unquantized", no_argument, NULL, OPT_UNQUANTIZED},
      {"dtype", required_argument, NULL, OPT_DTYPE},
      {NULL, 0, NULL, 0},
  };
  const char *preset = NULL, *out = NULL;
  uint64_t seed = 0, value = 0;
  fdy_llama_make_options make = {0};
  fdy_error err;
  const int repeated = fdy_cli_check_repeats("make-model", argc, argv, options);
  if (repeated != FDY_EXIT_OK) {
    return repeated;
  }
  optind = 1;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":", options, NULL)) != -1) {
    switch (opt) {
    case OPT_PRESET:
      preset = optarg;
      break;
    case OPT_OUT:
      out = optarg;
      break;
    case OPT_SEED:
      if (fdy_cli_parse_uint("--seed", optarg, 0, UINT64_MAX, &seed, &err) !=
          FDY_OK) {
        return fdy_cli_usage("make-model", "%s", err.message);
      }
      break;
    case OPT_BITS:
    case OPT_GROUP: {
      const bool bits = opt == OPT_BITS;
      const char *flag = bits ? "--bits" : "--group-size";
      if (fdy_cli_parse_uint(flag, optarg, 1, UINT32_MAX, &value, &err) !=
          FDY_OK) {
        return fdy_cli_usage("make-model", "%s", err.message);
      }
      if (bits ? value != 4 && value != 8
               : value != 32 && value != 64 && value != 128) {
        return fdy_cli_usage("make-model", "%s %s: %s", flag, optarg,
                             bits ? "4 or 8" : "32, 64 or 128");
      }
      *(bits ? &make.bits : &make.group_size) = (uint32_t)value;
      break;
    }
    case OPT_MIXED:
      make.mixed = true;
      break;
    case OPT_UNQUANTIZED:
      make.unquantized = true;
      break;
    case OPT_DTYPE:
      if (strcmp(optarg, "float16") != 0 && strcmp(optarg, "bfloat16") != 0 &&
          strcmp(optarg, "float32") != 0) {
        return fdy_cli_usage(
            "make-model", "--dtype %s: float16, bfloat16 or float32", optarg);
      }
      make.dtype = optarg;
      break;
    case ':':
      return fdy_cli_usage("make-model", "%s needs a value", argv[optind - 1]);
    default:
      return fdy_cli_usage("make-model", "unknown option '%s'",
                           argv[optind - 1]);
    }
  }
  if (optind < argc) {
    return fdy_cli_usage("make-model", "unexpected argument '%s'",
                         argv[optind]);
  }
  if (!preset || !out) {
    return fdy_cli_usage("make-model", "--preset and --out are required");
  }
  bool known = false;
  char names[256] = "";
  size_t used = 0;
  for (const char *const *p = fdy_llama_presets(); *p; p++) {
    known = known || strcmp(*p, preset) == 0;
    int n = snprintf(names + used, sizeof names - used, "%s%s",
                     used ? ", " : "", *p);
    used = n > 0 && (size_t)n < sizeof names - used ? used + (size_t)n : used;
  }
  if (!known) {
    return fdy_cli_usage("make-model", "unknown preset '%s' (presets: %s)",
                         preset, names);
  }
  progress_state state = {-1};
  bool tty = fdy_cli_stderr_is_tty();
  if (make.unquantized && (make.bits || make.group_size || make.mixed)) {
    return fdy_cli_usage("make-model", "--unquantized takes no --bits, "
                                       "--group-size or --mixed");
  }
  if (fdy_llama_make_model_ex(preset, seed, &make, out,
                              tty ? show_progress : NULL, &state,
                              &err) != FDY_OK) {
    if (tty && state.last_percent >= 0 && state.last_percent < 100) {
      fputc('\n', stderr);
    }
    return fdy_cli_fail(&err);
  }
  /* the Llama 3 vocabulary: its tokenizer beside the weights, as a real
   * checkpoint has it, so that text prompts and chat work */
  fdy_llama_config config;
  bool text =
      fdy_llama_preset_config(preset, &make, &config, NULL, &err) == FDY_OK &&
      config.vocab_size == FDY_LLAMA3_VOCAB_SIZE;
  if (text && fdy_tokenizer_write_llama3(out, &err) != FDY_OK) {
    return fdy_cli_fail(&err);
  }
  fprintf(stderr, "wrote %s (preset %s, seed %" PRIu64 "%s)\n", out, preset,
          seed, text ? ", with the Llama 3 tokenizer" : "");
  return FDY_EXIT_OK;
}
