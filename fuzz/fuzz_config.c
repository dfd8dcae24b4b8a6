/* libFuzzer target for config.json (seed corpus: fuzz/corpus/config). Any
 * input must parse or fail with an error, never crash or leak. A parsed
 * config must hold what the rest of Foundry relies on (sizes in range,
 * heads divisible, whole quantization groups) and give, with the
 * quantization of every linear, a checkpoint layout whose every tensor has
 * a name, a consistent shape and a byte size that does not overflow. */
#include <stdint.h>
#include <stdlib.h>

#include "layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_config(const fdy_llama_config *c) {
  if (c->vocab_size == 0 || c->hidden_size == 0 || c->intermediate_size == 0 ||
      c->num_layers == 0 || c->num_heads == 0 || c->num_kv_heads == 0 ||
      c->head_dim == 0 || c->head_dim % 2 != 0 ||
      c->num_heads % c->num_kv_heads != 0 ||
      (c->bits != 0 &&
       ((c->bits != 4 && c->bits != 8) ||
        (c->group_size != 32 && c->group_size != 64 && c->group_size != 128) ||
        c->hidden_size % c->group_size != 0 ||
        c->intermediate_size % c->group_size != 0 ||
        (uint64_t)c->num_heads * c->head_dim % c->group_size != 0)) ||
      !(c->rope_theta > 0) || !(c->rms_norm_eps > 0) ||
      c->eos_count > FDY_LLAMA_MAX_EOS ||
      (c->bos_id >= 0 && (uint32_t)c->bos_id >= c->vocab_size)) {
    abort();
  }
  for (uint32_t i = 0; i < c->eos_count; i++) {
    if (c->eos_ids[i] < 0 || (uint32_t)c->eos_ids[i] >= c->vocab_size) {
      abort();
    }
  }
}

static void check_layout(const fdy_llama_config *c,
                         const fdy_llama_module_quant *quant) {
  fdy_llama_tensor_spec *specs = NULL;
  size_t n = 0;
  if (fdy_llama_layout_new(c, quant, &specs, &n, NULL) != FDY_OK) {
    abort();
  }
  size_t per_layer =
      (c->bits != 0 ? 23 : 9) + (c->qkv_bias ? 3 : 0) + (c->qk_norm ? 2 : 0);
  if (c->quant_overrides == 0 &&
      n != per_layer * (size_t)c->num_layers + 1 +
               (c->bits != 0 ? 3 : 1) * (c->tie_word_embeddings ? 1 : 2)) {
    abort();
  }
  for (size_t i = 0; i < n; i++) {
    const fdy_llama_tensor_spec *s = &specs[i];
    uint64_t bytes = 0;
    bool linear = s->part != FDY_LLAMA_PART_NORM;
    if (s->name[0] == '\0' || s->module_len == 0 ||
        s->module_len >= FDY_LLAMA_NAME_MAX || s->shape.rank == 0 ||
        s->layer >= (int64_t)c->num_layers ||
        fdy_tensor_bytes(s->dtype, s->shape, &bytes, NULL) != FDY_OK ||
        bytes == 0 ||
        (linear && s->quant.bits != 0 &&
         s->in_features % s->quant.group_size != 0)) {
      abort();
    }
  }
  free(specs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fdy_llama_config config;
  fdy_llama_module_quant *quant = NULL;
  fdy_error err;
  if (fdy_llama_config_parse_quant((const char *)data, size, "config.json",
                                   &config, &quant, &err) != FDY_OK) {
    return 0;
  }
  check_config(&config);
  check_layout(&config, quant);
  free(quant);
  return 0;
}
