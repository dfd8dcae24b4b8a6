/* `foundry inspect MODEL_DIR [--json]`: opens and fully validates an MLX
 * checkpoint of a family Foundry runs (docs/models.md) and prints its
 * configuration, tensor count, bytes per decoder layer (the smallest and
 * the largest when the layers differ, as in a mixed-precision checkpoint;
 * each layer's in JSON) and in total, and the dtype of its scales. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "foundry/llama.h"

void fdy_cmd_inspect_help(FILE *out) {
  fprintf(out,
          "usage: foundry inspect MODEL_DIR [--json]\n"
          "\n"
          "Opens the checkpoint in MODEL_DIR (config.json and\n"
          "model.safetensors or the shards of model.safetensors.index.json),\n"
          "validates every tensor and prints the configuration, the tensor\n"
          "count, the bytes of each decoder layer and in total, and the dtype\n"
          "of the scales, biases and norms.\n"
          "\n"
          "  --json   machine-readable output on stdout\n");
}

/* "X" when every decoder layer of m has X bytes, else "X to Y" (the
 * smallest and the largest), written into out. A model has a layer at
 * least (config.json's validation). */
static void format_layer_bytes(const fdy_llama_model *m, char *out,
                               size_t size) {
  uint32_t layers = fdy_llama_model_config(m)->num_layers;
  uint64_t least = UINT64_MAX, most = 0;
  for (uint32_t i = 0; i < layers; i++) {
    uint64_t bytes = fdy_llama_layer_bytes(m, i);
    least = bytes < least ? bytes : least;
    most = bytes > most ? bytes : most;
  }
  char low[32], high[32];
  fdy_format_bytes(least, low, sizeof low);
  fdy_format_bytes(most, high, sizeof high);
  if (least == most) {
    snprintf(out, size, "%s", low);
  } else {
    snprintf(out, size, "%s to %s", low, high);
  }
}

static void print_text(const fdy_llama_model *m) {
  const fdy_llama_config *c = fdy_llama_model_config(m);
  char layer[72], total[32];
  format_layer_bytes(m, layer, sizeof layer);
  fdy_format_bytes(fdy_llama_total_bytes(m), total, sizeof total);
  printf("model: %s\n", fdy_llama_model_dir(m));
  printf("  %s, layers %" PRIu32 ", hidden %" PRIu32 ", heads %" PRIu32
         " / kv heads %" PRIu32 ", head_dim %" PRIu32 ", ffn %" PRIu32
         ", vocab %" PRIu32 "\n",
         fdy_llama_family_name(c->family), c->num_layers, c->hidden_size,
         c->num_heads, c->num_kv_heads, c->head_dim, c->intermediate_size,
         c->vocab_size);
  printf("  rope theta %g, ", c->rope_theta);
  if (c->rope_llama3) {
    printf("llama3 scaling (factor %g, low %g, high %g, original %" PRIu32
           ")\n",
           c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
           c->rope_original_max_position);
  } else {
    printf("no scaling\n");
  }
  printf("  embeddings %s, rms_norm_eps %g, max positions %" PRIu32
         ", bos %" PRId32 ", eos",
         c->tie_word_embeddings ? "tied" : "untied", c->rms_norm_eps,
         c->max_position_embeddings, c->bos_id);
  for (uint32_t i = 0; i < c->eos_count; i++) {
    printf("%s%" PRId32, i ? "," : " ", c->eos_ids[i]);
  }
  printf("%s\n", c->eos_count ? "" : " none");
  if (c->bits == 0) {
    printf("  quantization none, dtype %s", fdy_dtype_name(c->dtype));
  } else {
    printf("  quantization %" PRIu32 "-bit, group size %" PRIu32 ", dtype %s",
           c->bits, c->group_size, fdy_dtype_name(c->dtype));
  }
  printf(", %" PRIu32 " modules with their own\n", c->quant_overrides);
  printf("  tensors %zu, %s per layer, %s total (%" PRIu64 " bytes)\n",
         fdy_llama_tensor_count(m), layer, total, fdy_llama_total_bytes(m));
}

static int print_json(const fdy_llama_model *m) {
  const fdy_llama_config *c = fdy_llama_model_config(m);
  /* the directory as given may not be UTF-8, which jansson refuses */
  char *model = fdy_utf8_sanitize(fdy_llama_model_dir(m));
  json_t *eos = json_array(), *layers = json_array(), *rope = json_null();
  for (uint32_t i = 0; eos && i < c->eos_count; i++) {
    json_array_append_new(eos, json_integer(c->eos_ids[i]));
  }
  for (uint32_t i = 0; layers && i < c->num_layers; i++) {
    json_array_append_new(
        layers, json_integer((json_int_t)fdy_llama_layer_bytes(m, i)));
  }
  if (c->rope_llama3) {
    rope = json_pack("{s:s, s:f, s:f, s:f, s:i}", "type", "llama3", "factor",
                     c->rope_factor, "low_freq_factor", c->rope_low_freq_factor,
                     "high_freq_factor", c->rope_high_freq_factor,
                     "original_max_position_embeddings",
                     (json_int_t)c->rope_original_max_position);
  }
  json_t *doc = json_pack(
      "{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:o, s:b, s:f, "
      "s:i, s:o, s:{s:i, s:i, s:s, s:i}, s:I, s:o, s:I}",
      "model", model ? model : "", "vocab_size", (json_int_t)c->vocab_size,
      "hidden_size", (json_int_t)c->hidden_size, "intermediate_size",
      (json_int_t)c->intermediate_size, "num_layers", (json_int_t)c->num_layers,
      "num_heads", (json_int_t)c->num_heads, "num_kv_heads",
      (json_int_t)c->num_kv_heads, "head_dim", (json_int_t)c->head_dim,
      "max_position_embeddings", (json_int_t)c->max_position_embeddings,
      "rope_theta", c->rope_theta, "rope_scaling", rope, "tie_word_embeddings",
      (int)c->tie_word_embeddings, "rms_norm_eps", c->rms_norm_eps, "bos_id",
      (json_int_t)c->bos_id, "eos_ids", eos, "quantization", "bits",
      (json_int_t)c->bits, "group_size", (json_int_t)c->group_size, "dtype",
      fdy_dtype_name(c->dtype), "overrides", (json_int_t)c->quant_overrides,
      "tensor_count", (json_int_t)fdy_llama_tensor_count(m), "layer_bytes",
      layers, "total_bytes", (json_int_t)fdy_llama_total_bytes(m));
  free(model);
  if (doc &&
      json_object_set_new(doc, "model_type",
                          json_string(fdy_llama_family_name(c->family))) != 0) {
    json_decref(doc);
    doc = NULL;
  }
  if (!doc) {
    fprintf(stderr, "foundry: error: out of memory\n");
    return FDY_EXIT_FAILURE;
  }
  int rc = json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
  json_decref(doc);
  if (rc != 0 && !ferror(stdout)) {
    fprintf(stderr, "foundry: error: cannot encode the JSON output\n");
    return FDY_EXIT_FAILURE;
  }
  fputc('\n', stdout);
  return FDY_EXIT_OK; /* main checks the writes (fdy_cli_finish_stdout) */
}

/* The command's options, as parsed. */
typedef struct inspect_args {
  bool json;
} inspect_args;

static const fdy_cli_flag flags[] = {
    {FDY_CLI_SET("json", inspect_args, json)},
    {FDY_CLI_END},
};

int fdy_cmd_inspect(int argc, char **argv) {
  inspect_args a = {.json = false};
  int operand = argc;
  int code = fdy_cli_parse_flags("inspect", argc, argv, flags, &a, &operand);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (operand != argc - 1) {
    return fdy_cli_usage("inspect", "give exactly one MODEL_DIR");
  }
  fdy_error err;
  fdy_llama_model *model = NULL;
  if (fdy_llama_open(argv[operand], &model, &err) != FDY_OK) {
    return fdy_cli_fail(&err);
  }
  code = FDY_EXIT_OK;
  if (a.json) {
    code = print_json(model);
  } else {
    print_text(model);
  }
  fdy_llama_close(model);
  return code;
}
