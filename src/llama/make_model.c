/* Random-weight checkpoints in exactly the MLX layout (4-bit by default;
 * 8-bit, unquantized or mixed on request): config.json (Hugging Face
 * fields plus "quantization", with per-module entries for a mixed
 * recipe), model.safetensors (sorted header, unpadded, data in the order
 * of the layout table, layout.h) and model.safetensors.index.json.
 *
 * Every value is a pure function of (seed, tensor name, element index)
 * through the SplitMix64 mixer, so output is byte-identical for a seed and
 * any chunk of any tensor can be produced independently: the file is
 * streamed in bounded chunks. Weights are realistic: packed values are
 * uniform, a group's scale s is spread around target / q_std (q_std the
 * standard deviation of a uniform 4-bit or 8-bit value: 4.61, 73.9) with
 * an occasional negative sign, and its bias is about -(2^bits - 1) / 2 s,
 * so dequantized weights are roughly zero-mean with a standard deviation of
 * target = 1/sqrt(in_features) (0.05 for embedding and LM head rows);
 * unquantized weights are uniform with that standard deviation; norm
 * weights lie in [0.9, 1.1], biases (qwen2's q, k and v) in [-0.5, 0.5].
 * The directory is built under a temporary name
 * beside out_dir and renamed into place without replacing anything. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "foundry/new_file.h"
#include "layout.h"
#include "loader.h"

#define GOLDEN    0x9E3779B97F4A7C15ull
#define Q4_STD    4.6097722f /* sqrt((16^2 - 1) / 12) */
#define Q8_STD    73.900834f /* sqrt((256^2 - 1) / 12) */
#define EMBED_STD 0.05f
#define SQRT3     1.7320508f

/* What every preset of a model_type writes in config.json. */
typedef struct family_row {
  const char *architecture;
  double rope_theta, rms_eps;
  uint32_t max_position;
} family_row;

static const family_row family_rows[FDY_LLAMA_FAMILY_COUNT] = {
    [FDY_LLAMA_FAMILY_LLAMA] = {"LlamaForCausalLM", 500000.0, 1e-5, 131072},
    [FDY_LLAMA_FAMILY_MISTRAL] = {"MistralForCausalLM", 1e6, 1e-5, 32768},
    [FDY_LLAMA_FAMILY_QWEN2] = {"Qwen2ForCausalLM", 1e6, 1e-6, 32768},
    [FDY_LLAMA_FAMILY_QWEN3] = {"Qwen3ForCausalLM", 1e6, 1e-6, 40960},
};

typedef struct preset {
  const char *name;
  struct {
    uint32_t layers, hidden, heads, kv_heads, head_dim, ffn, vocab;
  };
  fdy_llama_family family; /* model_type: family_rows */
  fdy_dtype dtype;
  bool tied;
  double llama3_factor; /* rope_scaling (rope_type llama3); 0: none */
  struct {
    int32_t bos;
    int32_t eos[3];
    uint32_t eos_count;
  };
} preset;

/* clang-format off */
/* The bos and eos ids of the Llama 3 and the Qwen vocabularies. */
#define LLAMA3_TOKENS {128000, {128001, 128008, 128009}, 3}
#define QWEN_TOKENS   {151643, {151645, 151643}, 2}

/* A row a preset: name, {layers, hidden, heads, kv_heads, head_dim, ffn,
 * vocab}, model_type, dtype, tied embeddings, the llama3 rope scaling
 * factor (0: no rope_scaling), {bos, {eos ids}, eos count}. */
static const preset presets[] = {
    {"llama-3.2-1b",       {16, 2048, 32, 8,  64,  8192, 128256},
     FDY_LLAMA_FAMILY_LLAMA,   FDY_DTYPE_F16,  true,  32.0, LLAMA3_TOKENS},
    {"llama-3.2-3b",       {28, 3072, 24, 8, 128,  8192, 128256},
     FDY_LLAMA_FAMILY_LLAMA,   FDY_DTYPE_F16,  true,  32.0, LLAMA3_TOKENS},
    {"llama-3.1-8b",       {32, 4096, 32, 8, 128, 14336, 128256},
     FDY_LLAMA_FAMILY_LLAMA,   FDY_DTYPE_BF16, false,  8.0, LLAMA3_TOKENS},
    {"tiny",               { 2,  768,  6, 2, 128,  2048,   2048},
     FDY_LLAMA_FAMILY_LLAMA,   FDY_DTYPE_F16,  true,  32.0, {1, {2, 3}, 2}},
    {"micro",              { 2,  256,  8, 2,  32,   512,   1024},
     FDY_LLAMA_FAMILY_LLAMA,   FDY_DTYPE_F16,  true,  32.0, {1, {2, 3}, 2}},
    {"micro-untied",       { 2,  256,  8, 2,  32,   512,   1024},
     FDY_LLAMA_FAMILY_LLAMA,   FDY_DTYPE_BF16, false,  0.0, {1, {2}, 1}},
    /* the real Llama 3 vocabulary and EOS ids on tiny layers: for tests of
     * text, the tokenizer and the chat template (4.6 MB) */
    {"micro-llama3-vocab", { 2,   64,  2, 1,  32,   128, 128256},
     FDY_LLAMA_FAMILY_LLAMA,   FDY_DTYPE_F16,  true,  32.0, LLAMA3_TOKENS},
    /* Mistral 7B v0.3's shapes (model_type mistral, no sliding window) */
    {"mistral-7b-v0.3",    {32, 4096, 32, 8, 128, 14336,  32768},
     FDY_LLAMA_FAMILY_MISTRAL, FDY_DTYPE_BF16, false,  0.0, {1, {2}, 1}},
    /* mistral on tiny layers, Nemo-style: head_dim 64 is not hidden /
     * heads, 3 query heads per kv head */
    {"micro-mistral",      { 2,  256,  6, 2,  64,   512,   1024},
     FDY_LLAMA_FAMILY_MISTRAL, FDY_DTYPE_BF16, false,  0.0, {1, {2}, 1}},
    /* Qwen2.5 0.5B's shapes (q, k and v biases; 14 heads over 2 kv heads) */
    {"qwen2.5-0.5b",       {24,  896, 14, 2,  64,  4864, 151936},
     FDY_LLAMA_FAMILY_QWEN2,   FDY_DTYPE_BF16, true,   0.0, QWEN_TOKENS},
    /* Qwen3 0.6B's shapes (q and k normalized per head; q is 2048 wide
     * over a hidden of 1024) */
    {"qwen3-0.6b",         {28, 1024, 16, 8, 128,  3072, 151936},
     FDY_LLAMA_FAMILY_QWEN3,   FDY_DTYPE_BF16, true,   0.0, QWEN_TOKENS},
    /* qwen3 on tiny layers: head_dim 128, q twice as wide as hidden */
    {"micro-qwen3",        { 2,  256,  4, 2, 128,   512,   1024},
     FDY_LLAMA_FAMILY_QWEN3,   FDY_DTYPE_BF16, true,   0.0, {1, {2}, 1}},
    /* qwen2 on tiny layers: 7 heads over 1 kv head */
    {"micro-qwen2",        { 2,  256,  7, 1,  64,   512,   1024},
     FDY_LLAMA_FAMILY_QWEN2,   FDY_DTYPE_BF16, true,   0.0, {1, {2}, 1}},
};
/* clang-format on */

#define PRESET_COUNT (sizeof presets / sizeof presets[0])

/* The names of the presets (as many: checked below), as the CLI lists them. */
static const char *const preset_names[] = {"llama-3.2-1b",
                                           "llama-3.2-3b",
                                           "llama-3.1-8b",
                                           "tiny",
                                           "micro",
                                           "micro-untied",
                                           "micro-llama3-vocab",
                                           "mistral-7b-v0.3",
                                           "micro-mistral",
                                           "qwen3-0.6b",
                                           "micro-qwen3",
                                           "qwen2.5-0.5b",
                                           "micro-qwen2",
                                           NULL};

_Static_assert(sizeof preset_names / sizeof preset_names[0] == PRESET_COUNT + 1,
               "every preset is named in preset_names");

const char *const *fdy_llama_presets(void) {
  return preset_names;
}

/* How to produce one tensor's bytes. */
typedef struct gen_tensor {
  fdy_llama_tensor_spec spec;
  uint64_t key; /* the linear's (or norm's) key: shared by scales/biases */
  float target; /* standard deviation of the dequantized weights */
} gen_tensor;

typedef struct gen_ctx {
  gen_tensor *tensors;
  size_t count;
  uint64_t done, total;
  fdy_llama_progress_fn progress;
  void *progress_ctx;
} gen_ctx;

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Element i of the SplitMix64 sequence seeded with key. */
static uint64_t rand_at(uint64_t key, uint64_t i) {
  return mix64(key + (i + 1) * GOLDEN);
}

/* Uniform in [0, 1). */
static float unit(uint64_t r) {
  return (float)(r >> 40) * (1.0f / 16777216.0f);
}

/* The key of the first len bytes of name. */
static uint64_t name_key(uint64_t seed, const char *name, size_t len) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < len; i++) {
    h = (h ^ (unsigned char)name[i]) * 0x100000001b3ull;
  }
  return mix64(seed ^ mix64(h));
}

static float scale_at(const gen_tensor *t, uint64_t i) {
  uint64_t r = rand_at(t->key, i);
  float std = t->spec.quant.bits == 8 ? Q8_STD : Q4_STD;
  float s = t->target / std * (0.5f + unit(r));
  return (r & 7) == 0 ? -s : s;
}

static float value_at(const gen_tensor *t, uint64_t i) {
  float middle = (float)((1u << t->spec.quant.bits) - 1) / 2.0f;
  switch (t->spec.part) {
  case FDY_LLAMA_PART_SCALES:
    return scale_at(t, i);
  case FDY_LLAMA_PART_BIASES:
    return scale_at(t, i) *
           (-middle + 0.5f * (unit(rand_at(t->key ^ GOLDEN, i)) - 0.5f));
  case FDY_LLAMA_PART_NORM:
    return 0.9f + 0.2f * unit(rand_at(t->key, i));
  case FDY_LLAMA_PART_BIAS:
    return unit(rand_at(t->key, i)) - 0.5f;
  case FDY_LLAMA_PART_DENSE:
    return (2.0f * unit(rand_at(t->key, i)) - 1.0f) * SQRT3 * t->target;
  case FDY_LLAMA_PART_PACKED:
    break;
  }
  return 0.0f;
}

static void put_u16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}

static fdy_status gen_fill(void *ctx, size_t index, uint64_t offset, void *buf,
                           uint64_t len, fdy_error *err) {
  (void)err;
  gen_ctx *g = ctx;
  const gen_tensor *t = &g->tensors[index];
  unsigned char *out = buf;
  if (t->spec.part == FDY_LLAMA_PART_PACKED) {
    for (uint64_t b = 0; b < len; b += 4) {
      uint64_t r = rand_at(t->key, (offset + b) / 4);
      for (int k = 0; k < 4; k++) {
        out[b + (uint64_t)k] = (unsigned char)(r >> (8 * k));
      }
    }
  } else if (t->spec.dtype == FDY_DTYPE_F32) {
    for (uint64_t b = 0; b < len; b += 4) {
      float v = value_at(t, (offset + b) / 4);
      uint32_t bits;
      memcpy(&bits, &v, sizeof bits);
      for (int k = 0; k < 4; k++) {
        out[b + (uint64_t)k] = (unsigned char)(bits >> (8 * k));
      }
    }
  } else {
    for (uint64_t b = 0; b < len; b += 2) {
      float v = value_at(t, (offset + b) / 2);
      put_u16(out + b, t->spec.dtype == FDY_DTYPE_BF16
                           ? fdy_llama_float_to_bf16(v)
                           : fdy_float_to_f16(v));
    }
  }
  g->done += len;
  if (g->progress) {
    g->progress(g->progress_ctx, g->done, g->total);
  }
  return FDY_OK;
}

typedef struct gen_list {
  gen_tensor *items;
  size_t count;
} gen_list;

/* Every tensor of config (linears quantized as quant says) in layout
 * order, keyed by seed. A linear's tensors share its module's key, a norm
 * is keyed by its full name; a linear's dequantized weights have a
 * standard deviation of 1/sqrt(in_features), the embedding's and LM
 * head's EMBED_STD. */
static fdy_status gen_tensors(const fdy_llama_config *config,
                              const fdy_llama_module_quant *quant,
                              uint64_t seed, gen_list *l, fdy_error *err) {
  fdy_llama_tensor_spec *specs = NULL;
  size_t n = 0;
  fdy_status st = fdy_llama_layout_new(config, quant, &specs, &n, err);
  if (st != FDY_OK) {
    return st;
  }
  l->items = calloc(n, sizeof *l->items);
  if (!l->items) {
    free(specs);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    const fdy_llama_tensor_spec *s = &specs[i];
    bool norm =
        s->part == FDY_LLAMA_PART_NORM || s->part == FDY_LLAMA_PART_BIAS;
    bool embed = s->module == FDY_LLAMA_EMBED || s->module == FDY_LLAMA_LM_HEAD;
    l->items[i] = (gen_tensor){
        .spec = *s,
        .key = name_key(seed, s->name, norm ? strlen(s->name) : s->module_len),
        .target = norm    ? 0.0f
                  : embed ? EMBED_STD
                          : 1.0f / sqrtf((float)s->in_features)};
  }
  l->count = n;
  free(specs);
  return FDY_OK;
}

static fdy_status write_json(const char *path, json_t *doc, size_t flags,
                             fdy_error *err) {
  char *text = json_dumps(doc, flags);
  if (!text) {
    return fdy_llama_file_error(err, FDY_ERR_OUT_OF_MEMORY, path,
                                "out of memory encoding JSON");
  }
  fdy_status st = fdy_write_new_text_file(path, text, err);
  free(text);
  return st;
}

/* A preset's checkpoint as the options ask for it. */
typedef struct variant {
  uint32_t bits, group_size; /* the default quantization; 0: unquantized */
  bool mixed;
  fdy_dtype dtype;
} variant;

static fdy_status variant_of(const preset *p, const fdy_llama_make_options *o,
                             variant *out, fdy_error *err) {
  static const fdy_llama_make_options none = {0};
  o = o ? o : &none;
  variant v = {o->bits ? o->bits : 4, o->group_size ? o->group_size : 64,
               o->mixed, p->dtype};
  if (v.bits != 4 && v.bits != 8) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "bits %u: a checkpoint is 4-bit or 8-bit", v.bits);
  }
  if (v.group_size != 32 && v.group_size != 64 && v.group_size != 128) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "group size %u: groups are of 32, 64 or 128",
                         v.group_size);
  }
  static const struct {
    const char *name;
    fdy_dtype dtype;
  } dtypes[] = {{"float16", FDY_DTYPE_F16},
                {"bfloat16", FDY_DTYPE_BF16},
                {"float32", FDY_DTYPE_F32}};
  bool known = o->dtype == NULL;
  for (size_t i = 0; o->dtype && i < 3; i++) {
    if (strcmp(o->dtype, dtypes[i].name) == 0) {
      v.dtype = dtypes[i].dtype;
      known = true;
    }
  }
  if (!known) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "dtype '%s': float16, bfloat16 or float32", o->dtype);
  }
  if (o->unquantized && o->mixed) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a mixed-precision checkpoint is quantized");
  }
  if (v.dtype == FDY_DTYPE_F32 && !o->unquantized) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "float32 weights only unquantized: MLX scales of "
                         "quantized weights are float16 or bfloat16");
  }
  if (o->unquantized) {
    v.bits = 0;
    v.group_size = 0;
  }
  *out = v;
  return FDY_OK;
}

/* The mixed recipe's entry for module m of layer l (-1 outside the
 * layers), or NULL for the default: 8 bits for v_proj and down_proj of
 * the layers mlx-lm's mixed recipes favour and for an untied lm_head,
 * false for the last layer's o_proj. */
static json_t *mixed_entry(const preset *p, const variant *v,
                           fdy_llama_module m, int64_t l) {
  uint32_t n = p->layers;
  bool more = l >= 0 && ((uint32_t)l < n / 8 || (uint32_t)l >= 7 * n / 8 ||
                         ((uint32_t)l - n / 8) % 3 == 2);
  if (m == FDY_LLAMA_O_PROJ && l == (int64_t)n - 1) {
    return json_false();
  }
  if (m == FDY_LLAMA_LM_HEAD ||
      (more && (m == FDY_LLAMA_V_PROJ || m == FDY_LLAMA_DOWN_PROJ))) {
    return json_pack("{s:i, s:i}", "group_size", (int)v->group_size, "bits", 8);
  }
  return NULL;
}

/* config.json's "quantization": the default and, for a mixed recipe, the
 * entries of the modules that differ; NULL when out of memory. */
static json_t *quantization_json(const preset *p, const variant *v) {
  json_t *q = json_pack("{s:i, s:i}", "group_size", (int)v->group_size, "bits",
                        (int)v->bits);
  static const fdy_llama_module linears[] = {
      FDY_LLAMA_Q_PROJ,   FDY_LLAMA_K_PROJ,    FDY_LLAMA_V_PROJ,
      FDY_LLAMA_O_PROJ,   FDY_LLAMA_GATE_PROJ, FDY_LLAMA_UP_PROJ,
      FDY_LLAMA_DOWN_PROJ};
  for (int64_t l = -1; q && v->mixed && l < (int64_t)p->layers; l++) {
    size_t count = l < 0 ? 1 : sizeof linears / sizeof linears[0];
    for (size_t k = 0; q && k < count; k++) {
      fdy_llama_module m = l < 0 ? FDY_LLAMA_LM_HEAD : linears[k];
      if (m == FDY_LLAMA_LM_HEAD && p->tied) {
        continue;
      }
      json_t *entry = mixed_entry(p, v, m, l);
      char name[FDY_LLAMA_NAME_MAX];
      fdy_llama_module_name(m, l, name, sizeof name);
      if (entry && json_object_set_new(q, name, entry) != 0) {
        json_decref(q);
        q = NULL;
      }
    }
  }
  return q;
}

/* The fields of p's family beyond the Llama ones, set on doc; false when
 * out of memory. */
static bool family_fields(const preset *p, json_t *doc) {
  int failed = 0;
  switch (p->family) {
  case FDY_LLAMA_FAMILY_MISTRAL: /* no bias fields; full attention */
    json_object_del(doc, "attention_bias");
    json_object_del(doc, "mlp_bias");
    failed |= json_object_set_new(doc, "sliding_window", json_null());
    break;
  case FDY_LLAMA_FAMILY_QWEN2: /* the window is off: use_sliding_window */
    json_object_del(doc, "attention_bias");
    json_object_del(doc, "mlp_bias");
    failed |= json_object_set_new(doc, "use_sliding_window", json_false());
    failed |= json_object_set_new(doc, "sliding_window", json_integer(32768));
    failed |=
        json_object_set_new(doc, "max_window_layers", json_integer(p->layers));
    break;
  case FDY_LLAMA_FAMILY_QWEN3:
    json_object_del(doc, "mlp_bias");
    failed |= json_object_set_new(doc, "use_sliding_window", json_false());
    failed |= json_object_set_new(doc, "sliding_window", json_null());
    failed |=
        json_object_set_new(doc, "max_window_layers", json_integer(p->layers));
    break;
  default:
    break;
  }
  return failed == 0;
}

static json_t *config_json(const preset *p, const variant *v) {
  const family_row *family = &family_rows[p->family];
  json_t *rope = json_null();
  if (p->llama3_factor > 0) {
    rope =
        json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor",
                  p->llama3_factor, "high_freq_factor", 4.0, "low_freq_factor",
                  1.0, "original_max_position_embeddings", 8192);
  }
  json_t *eos = json_array();
  for (uint32_t i = 0; eos && i < p->eos_count; i++) {
    json_array_append_new(eos, json_integer(p->eos[i]));
  }
  static const char *const torch_dtypes[] = {[FDY_DTYPE_F32] = "float32",
                                             [FDY_DTYPE_F16] = "float16",
                                             [FDY_DTYPE_BF16] = "bfloat16"};
  json_t *doc = json_pack(
      "{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:o, s:b, s:i, s:f, "
      "s:i, s:o, s:s, s:b, s:b, s:s, s:s}",
      "architectures", family->architecture, "vocab_size", (int)p->vocab,
      "hidden_size", (int)p->hidden, "intermediate_size", (int)p->ffn,
      "num_hidden_layers", (int)p->layers, "num_attention_heads", (int)p->heads,
      "num_key_value_heads", (int)p->kv_heads, "head_dim", (int)p->head_dim,
      "rope_theta", family->rope_theta, "rope_scaling", rope,
      "tie_word_embeddings", (int)p->tied, "max_position_embeddings",
      (int)family->max_position, "rms_norm_eps", family->rms_eps,
      "bos_token_id", (int)p->bos, "eos_token_id", eos, "hidden_act", "silu",
      "attention_bias", 0, "mlp_bias", 0, "model_type",
      fdy_llama_family_name(p->family), "torch_dtype", torch_dtypes[v->dtype]);
  if (doc && p->family != FDY_LLAMA_FAMILY_LLAMA && !family_fields(p, doc)) {
    json_decref(doc);
    doc = NULL;
  }
  if (doc && v->bits != 0) {
    /* mlx-lm writes the block twice, the second for Hugging Face */
    json_t *q = quantization_json(p, v);
    json_t *copy = json_deep_copy(q);
    int failed = json_object_set_new(doc, "quantization", q);
    failed |= json_object_set_new(doc, "quantization_config", copy);
    if (failed) {
      json_decref(doc);
      doc = NULL;
    }
  }
  return doc;
}

/* Bytes of every tensor of the list: the index's total_size. */
static fdy_status list_bytes(const gen_list *l, uint64_t *total,
                             fdy_error *err) {
  *total = 0;
  for (size_t i = 0; i < l->count; i++) {
    uint64_t bytes = 0;
    fdy_status s = fdy_tensor_bytes(l->items[i].spec.dtype,
                                    l->items[i].spec.shape, &bytes, err);
    if (s == FDY_OK) {
      s = fdy_add_u64(*total, bytes, total, err);
    }
    if (s != FDY_OK) {
      return s;
    }
  }
  return FDY_OK;
}

static json_t *index_json(const gen_list *l, uint64_t total) {
  json_t *map = json_object();
  for (size_t i = 0; map && i < l->count; i++) {
    if (json_object_set_new(map, l->items[i].spec.name,
                            json_string("model.safetensors"))) {
      json_decref(map);
      map = NULL;
    }
  }
  return json_pack("{s:{s:I}, s:o}", "metadata", "total_size",
                   (json_int_t)total, "weight_map", map);
}

static const char *const files[] = {"config.json", "model.safetensors",
                                    "model.safetensors.index.json"};

/* The configuration a checkpoint of preset p as variant v has, and the
 * quantization of its linears (*quant malloc'd), as the loader reads
 * them. */
static fdy_status preset_config(const preset *p, const variant *v,
                                fdy_llama_config *out,
                                fdy_llama_module_quant **quant,
                                fdy_error *err) {
  json_t *doc = config_json(p, v);
  char *text = doc ? json_dumps(doc, JSON_REAL_PRECISION(15)) : NULL;
  json_decref(doc);
  if (!text) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_status s = fdy_llama_config_parse_quant(text, strlen(text), p->name, out,
                                              quant, err);
  free(text);
  if (s == FDY_OK) {
    out->dtype = v->dtype;
  }
  return s;
}

/* Writes the three files into the existing directory dir. */
static fdy_status write_checkpoint(const preset *p, const variant *v,
                                   uint64_t seed, const char *dir,
                                   fdy_llama_progress_fn progress, void *pctx,
                                   fdy_error *err) {
  gen_list list = {0};
  fdy_st_write_tensor *wt = NULL;
  json_t *config = NULL, *index = NULL;
  fdy_llama_module_quant *quant = NULL;
  char path[4096];
  fdy_llama_config parsed;
  fdy_status s = preset_config(p, v, &parsed, &quant, err);
  if (s == FDY_OK) {
    s = gen_tensors(&parsed, quant, seed, &list, err);
  }
  if (s != FDY_OK) {
    goto cleanup;
  }
  wt = calloc(list.count, sizeof *wt);
  if (!wt) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  gen_ctx g = {.tensors = list.items,
               .count = list.count,
               .progress = progress,
               .progress_ctx = pctx};
  for (size_t i = 0; i < list.count; i++) {
    wt[i] = (fdy_st_write_tensor){.name = list.items[i].spec.name,
                                  .dtype = list.items[i].spec.dtype,
                                  .shape = list.items[i].spec.shape};
  }
  if ((s = list_bytes(&list, &g.total, err)) != FDY_OK) {
    goto cleanup;
  }
  config = config_json(p, v);
  index = index_json(&list, g.total);
  if (!config || !index) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  snprintf(path, sizeof path, "%s/%s", dir, files[0]);
  if ((s = write_json(path, config, JSON_INDENT(2) | JSON_REAL_PRECISION(15),
                      err)) != FDY_OK) {
    goto cleanup;
  }
  snprintf(path, sizeof path, "%s/%s", dir, files[1]);
  if ((s = fdy_st_write_stream(path, wt, list.count, gen_fill, &g, err)) !=
      FDY_OK) {
    goto cleanup;
  }
  snprintf(path, sizeof path, "%s/%s", dir, files[2]);
  s = write_json(path, index, JSON_INDENT(4) | JSON_SORT_KEYS, err);
cleanup:
  json_decref(config);
  json_decref(index);
  free(wt);
  free(list.items);
  free(quant);
  return s;
}

static void remove_tree(const char *dir) {
  char path[4096];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
}

static fdy_status find_preset(const char *name, const preset **out,
                              fdy_error *err) {
  for (size_t i = 0; i < PRESET_COUNT && name; i++) {
    if (strcmp(presets[i].name, name) == 0) {
      *out = &presets[i];
      return FDY_OK;
    }
  }
  char known[512] = "";
  for (size_t i = 0; i < PRESET_COUNT; i++) {
    size_t used = strlen(known);
    snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
             presets[i].name);
  }
  return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                       "unknown preset '%s' (%s)", name ? name : "", known);
}

fdy_status fdy_llama_preset_config(const char *preset_name,
                                   const fdy_llama_make_options *options,
                                   fdy_llama_config *config,
                                   uint64_t *total_bytes, fdy_error *err) {
  const preset *p = NULL;
  variant v;
  fdy_status s = find_preset(preset_name, &p, err);
  if (s == FDY_OK) {
    s = variant_of(p, options, &v, err);
  }
  if (s != FDY_OK) {
    return s;
  }
  fdy_llama_config parsed;
  fdy_llama_module_quant *quant = NULL;
  if ((s = preset_config(p, &v, &parsed, &quant, err)) != FDY_OK) {
    return s;
  }
  if (total_bytes) {
    gen_list list = {0};
    s = gen_tensors(&parsed, quant, 0, &list, err);
    if (s == FDY_OK) {
      s = list_bytes(&list, total_bytes, err);
    }
    free(list.items);
  }
  free(quant);
  if (s == FDY_OK) {
    *config = parsed;
  }
  return s;
}

fdy_status fdy_llama_make_model_ex(const char *preset_name, uint64_t seed,
                                   const fdy_llama_make_options *options,
                                   const char *out_dir,
                                   fdy_llama_progress_fn progress, void *ctx,
                                   fdy_error *err) {
  const preset *p = NULL;
  variant v;
  fdy_status s = find_preset(preset_name, &p, err);
  if (s == FDY_OK) {
    s = variant_of(p, options, &v, err);
  }
  if (s != FDY_OK) {
    return s;
  }
  size_t n = out_dir ? strlen(out_dir) : 0;
  while (n > 1 && out_dir[n - 1] == '/') {
    n--;
  }
  if (n == 0 || n > 3000) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the output directory path is empty or too long");
  }
  char target[3072];
  snprintf(target, sizeof target, "%.*s", (int)n, out_dir);
  struct stat sb;
  if (lstat(target, &sb) == 0) {
    return fdy_llama_file_error(err, FDY_ERR_EXISTS, target,
                                "already exists; refusing to overwrite");
  }
  /* mode 0777 & ~umask, like the files in it; checked before any work */
  char *tmp = NULL;
  s = fdy_new_dir_temp(target, &tmp, err);
  if (s != FDY_OK) {
    return s;
  }
  s = write_checkpoint(p, &v, seed, tmp, progress, ctx, err);
  if (s == FDY_OK &&
      renameat2(AT_FDCWD, tmp, AT_FDCWD, target, RENAME_NOREPLACE) != 0) {
    s = fdy_llama_file_error(
        err, errno == EEXIST ? FDY_ERR_EXISTS : FDY_ERR_IO, target,
        "cannot move the new checkpoint into place: %s", strerror(errno));
  }
  if (s != FDY_OK) {
    remove_tree(tmp);
  }
  free(tmp);
  return s;
}

fdy_status fdy_llama_make_model(const char *preset_name, uint64_t seed,
                                const char *out_dir, fdy_error *err) {
  return fdy_llama_make_model_ex(preset_name, seed, NULL, out_dir, NULL, NULL,
                                 err);
}
