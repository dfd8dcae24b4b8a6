/* Tests of the float32 CPU inference path: MLX 4-bit dequantization against
 * hand-packed rows, both shared fixtures and the two generated variants
 * (untied, plain rope, BF16, group 32; one kv head per head, group 128)
 * verified against their reference outputs, batching and thread-count
 * invariance, EOS handling, the context a generation uses and the default
 * context, and every bad input (ids outside the vocabulary, empty prompts,
 * context overflow, bad references) with the session left unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "foundry/llama_session.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng_next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}

static const char *data_dir(void) {
  const char *dir = getenv("FOUNDRY_TEST_DATA");
  return dir ? dir : "tests/data";
}

static void fixture_path(char *buf, size_t cap, const char *fixture,
                         const char *leaf) {
  snprintf(buf, cap, "%s/%s/%s", data_dir(), fixture, leaf);
}

static fdy_llama_model *open_fixture(const char *fixture) {
  char dir[512];
  fixture_path(dir, sizeof dir, fixture, "model");
  fdy_llama_model *model = NULL;
  fdy_error err;
  fdy_status st = fdy_llama_open(dir, &model, &err);
  if (st != FDY_OK) {
    print_error("open %s: %s\n", dir, err.message);
  }
  assert_int_equal(st, FDY_OK);
  return model;
}

static fdy_llama_session *make_session(const fdy_llama_model *model,
                                       uint32_t context, uint32_t threads) {
  fdy_llama_session_options options = {context, threads};
  fdy_llama_session *session = NULL;
  fdy_error err;
  assert_int_equal(fdy_llama_session_create(model, &options, &session, &err),
                   FDY_OK);
  return session;
}

/* The fixture's expected.safetensors tensors, copied out. */
typedef struct reference {
  int32_t *prompt;
  uint32_t prompt_count;
  int32_t *greedy;
  uint32_t greedy_count;
  float *logits; /* (prompt_count, vocab) */
} reference;

static void *copy_tensor(const fdy_safetensors *st, const char *name,
                         uint32_t *rows) {
  const fdy_st_tensor *t = NULL;
  assert_int_equal(fdy_safetensors_find(st, name, &t, NULL), FDY_OK);
  void *copy = malloc(t->bytes);
  assert_non_null(copy);
  memcpy(copy, t->data, t->bytes);
  *rows = (uint32_t)t->shape.dims[0];
  return copy;
}

static reference load_reference(const char *fixture) {
  char path[512];
  fixture_path(path, sizeof path, fixture, "expected.safetensors");
  fdy_safetensors *st = NULL;
  assert_int_equal(fdy_safetensors_open(path, &st, NULL), FDY_OK);
  reference ref;
  uint32_t rows = 0;
  ref.prompt = copy_tensor(st, "prompt_ids", &ref.prompt_count);
  ref.greedy = copy_tensor(st, "greedy_ids", &ref.greedy_count);
  ref.logits = copy_tensor(st, "logits", &rows);
  assert_int_equal(rows, ref.prompt_count);
  fdy_safetensors_close(st);
  return ref;
}

static void free_reference(reference *ref) {
  free(ref->prompt);
  free(ref->greedy);
  free(ref->logits);
}

static double relative_error(const float *a, const float *b, uint64_t n) {
  double d2 = 0.0, b2 = 0.0;
  for (uint64_t i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];
    d2 += d * d;
    b2 += (double)b[i] * b[i];
  }
  return sqrt(d2) / sqrt(b2);
}

static float *poisoned(uint64_t n) {
  float *p = malloc(sizeof *p * n);
  assert_non_null(p);
  for (uint64_t i = 0; i < n; i++) {
    p[i] = NAN;
  }
  return p;
}

/* A temporary directory with a copy of a fixture's model whose config has
 * eos_token_id replaced by eos. */
static void model_copy_with_eos(const char *fixture, int32_t eos, char *out,
                                size_t cap) {
  snprintf(out, cap, "/tmp/foundry-infer-XXXXXX");
  assert_non_null(mkdtemp(out));
  char src[512], dst[600];
  static const char *const files[] = {"model.safetensors",
                                      "model.safetensors.index.json"};
  for (size_t i = 0; i < 2; i++) {
    snprintf(src, sizeof src, "%s/%s/model/%s", data_dir(), fixture, files[i]);
    snprintf(dst, sizeof dst, "%s/%s", out, files[i]);
    FILE *in = fopen(src, "rb");
    FILE *to = fopen(dst, "wb");
    assert_non_null(in);
    assert_non_null(to);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
      assert_int_equal(fwrite(buf, 1, n, to), n);
    }
    fclose(in);
    assert_int_equal(fclose(to), 0);
  }
  snprintf(src, sizeof src, "%s/%s/model/config.json", data_dir(), fixture);
  json_t *config = json_load_file(src, 0, NULL);
  assert_non_null(config);
  assert_int_equal(
      json_object_set_new(config, "eos_token_id", json_integer(eos)), 0);
  snprintf(dst, sizeof dst, "%s/config.json", out);
  assert_int_equal(json_dump_file(config, dst, JSON_INDENT(2)), 0);
  json_decref(config);
}

static void remove_dir(const char *dir, const char *const *files,
                       size_t count) {
  char path[600];
  for (size_t i = 0; i < count; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  assert_int_equal(rmdir(dir), 0);
}

static void remove_model_copy(const char *dir) {
  static const char *const files[] = {"config.json", "model.safetensors",
                                      "model.safetensors.index.json"};
  remove_dir(dir, files, 3);
}

/* ---- dequantization ----------------------------------------------------- */

static uint16_t float_to_f16_exact(float value) {
  /* test values are exactly representable: sign, exponent and 10 bits */
  if (value == 0.0f) {
    return 0;
  }
  uint16_t sign = value < 0 ? 0x8000 : 0;
  float a = fabsf(value);
  int exponent = 0;
  float m = frexpf(a, &exponent); /* a = m * 2^exponent, m in [0.5, 1) */
  uint16_t mantissa = (uint16_t)((m * 2.0f - 1.0f) * 1024.0f);
  return (uint16_t)(sign | (uint16_t)((exponent - 1 + 15) << 10) | mantissa);
}

/* Dequantizes one group of q = 1 with bias 0: every element is the scale,
 * which shows the half-precision conversion. */
static float half_through_dequant(uint16_t bits, fdy_dtype dtype) {
  uint32_t words[4] = {0x11111111u, 0x11111111u, 0x11111111u, 0x11111111u};
  uint16_t zero = 0;
  fdy_st_tensor weight = {
      .dtype = FDY_DTYPE_U32, .shape = FDY_SHAPE(1, 4), .data = words};
  fdy_st_tensor scale_t = {
      .dtype = dtype, .shape = FDY_SHAPE(1, 1), .data = &bits};
  fdy_st_tensor bias_t = {
      .dtype = dtype, .shape = FDY_SHAPE(1, 1), .data = &zero};
  fdy_llama_qlinear linear = {&weight, &scale_t, &bias_t, 1, 32};
  float out[32];
  fdy_llama_dequantize_row(&linear, dtype, 0, out);
  for (int i = 1; i < 32; i++) {
    assert_memory_equal(&out[i], &out[0], sizeof out[0]);
  }
  return out[0];
}

static void test_half_conversion(void **state) {
  (void)state;
  const struct {
    uint16_t bits;
    float value;
  } f16[] = {{0x3c00, 1.0f},
             {0xc000, -2.0f},
             {0x3555, 0.333251953125f},
             {0x7bff, 65504.0f},
             {0x0001, 5.9604644775390625e-8f}, /* smallest subnormal */
             {0x0200, 3.0517578125e-5f},       /* subnormal */
             {0x83ff, -6.097555160522461e-5f}, /* largest subnormal */
             {0x0400, 6.103515625e-5f}};       /* smallest normal */
  for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++) {
    assert_float_equal(half_through_dequant(f16[i].bits, FDY_DTYPE_F16),
                       f16[i].value, 0.0);
  }
  assert_true(isinf(half_through_dequant(0x7c00, FDY_DTYPE_F16)));
  const struct {
    uint16_t bits;
    float value;
  } bf16[] = {{0x3f80, 1.0f},
              {0xc0a0, -5.0f},
              {0x3e20, 0.15625f},
              {0x4b80, 16777216.0f}};
  for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++) {
    assert_float_equal(half_through_dequant(bf16[i].bits, FDY_DTYPE_BF16),
                       bf16[i].value, 0.0);
  }
}

/* Builds a quantized linear of rows x in with group size `group` from the
 * given nibbles, scales and biases (as half bits), and checks every row. */
static void check_dequant(uint32_t rows, uint32_t in, uint32_t group,
                          fdy_dtype dtype) {
  uint32_t groups = in / group;
  uint8_t *q = malloc((size_t)rows * in);
  uint32_t *packed = calloc((size_t)rows * in / 8, sizeof *packed);
  uint16_t *scales = malloc(sizeof *scales * rows * groups);
  uint16_t *biases = malloc(sizeof *biases * rows * groups);
  float *scale_f = malloc(sizeof *scale_f * rows * groups);
  float *bias_f = malloc(sizeof *bias_f * rows * groups);
  float *out = malloc(sizeof *out * in);
  assert_true(q && packed && scales && biases && scale_f && bias_f && out);
  for (uint32_t i = 0; i < rows * groups; i++) {
    /* random non-zero values exactly representable in both formats: k / 64
     * with k in [1, 127], random sign */
    float s = (float)(1 + rng_next() % 127) / 64.0f;
    float b = (float)(1 + rng_next() % 127) / 64.0f;
    s = rng_next() % 2 ? -s : s;
    b = rng_next() % 2 ? -b : b;
    scale_f[i] = s;
    bias_f[i] = b;
    if (dtype == FDY_DTYPE_F16) {
      scales[i] = float_to_f16_exact(s);
      biases[i] = float_to_f16_exact(b);
    } else {
      uint32_t sb, bb;
      memcpy(&sb, &s, 4);
      memcpy(&bb, &b, 4);
      scales[i] = (uint16_t)(sb >> 16);
      biases[i] = (uint16_t)(bb >> 16);
    }
  }
  for (uint32_t r = 0; r < rows; r++) {
    for (uint32_t i = 0; i < in; i++) {
      uint8_t v = (uint8_t)(rng_next() % 16);
      q[(size_t)r * in + i] = v;
      packed[((size_t)r * in + i) / 8] |= (uint32_t)v << (4 * (i % 8));
    }
  }
  fdy_st_tensor weight = {.name = "w",
                          .dtype = FDY_DTYPE_U32,
                          .shape = FDY_SHAPE(rows, in / 8),
                          .data = packed};
  fdy_st_tensor scale_t = {.name = "s",
                           .dtype = dtype,
                           .shape = FDY_SHAPE(rows, groups),
                           .data = scales};
  fdy_st_tensor bias_t = {.name = "b",
                          .dtype = dtype,
                          .shape = FDY_SHAPE(rows, groups),
                          .data = biases};
  fdy_llama_qlinear linear = {&weight, &scale_t, &bias_t, rows, in};
  for (uint32_t r = 0; r < rows; r++) {
    fdy_llama_dequantize_row(&linear, dtype, r, out);
    for (uint32_t i = 0; i < in; i++) {
      uint32_t g = r * groups + i / group;
      double expected = (double)scale_f[g] * q[(size_t)r * in + i] + bias_f[g];
      assert_float_equal(out[i], expected, 1e-6);
    }
  }
  free(q);
  free(packed);
  free(scales);
  free(biases);
  free(scale_f);
  free(bias_f);
  free(out);
}

static void test_dequantize_hand_computed(void **state) {
  (void)state;
  /* one group of 32: words 0x76543210 and 0xfedcba98 hold 0..15 low nibble
   * first, then 16 more values; scale -0.75, bias 1.5 (F16 0xba00, 0x3e00) */
  uint32_t words[4] = {0x76543210u, 0xfedcba98u, 0x0000000fu, 0x12345678u};
  uint16_t scale = 0xba00, bias = 0x3e00;
  fdy_st_tensor weight = {
      .dtype = FDY_DTYPE_U32, .shape = FDY_SHAPE(1, 4), .data = words};
  fdy_st_tensor scale_t = {
      .dtype = FDY_DTYPE_F16, .shape = FDY_SHAPE(1, 1), .data = &scale};
  fdy_st_tensor bias_t = {
      .dtype = FDY_DTYPE_F16, .shape = FDY_SHAPE(1, 1), .data = &bias};
  fdy_llama_qlinear linear = {&weight, &scale_t, &bias_t, 1, 32};
  float out[32];
  fdy_llama_dequantize_row(&linear, FDY_DTYPE_F16, 0, out);
  const uint8_t q[32] = {0,  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                         15, 0, 0, 0, 0, 0, 0, 0, 8, 7, 6,  5,  4,  3,  2,  1};
  for (int i = 0; i < 32; i++) {
    assert_float_equal(out[i], -0.75 * q[i] + 1.5, 0.0);
  }
}

static void test_dequantize_random_groups(void **state) {
  (void)state;
  check_dequant(3, 64, 32, FDY_DTYPE_F16);
  check_dequant(4, 256, 64, FDY_DTYPE_F16);
  check_dequant(2, 384, 128, FDY_DTYPE_F16);
  check_dequant(3, 128, 64, FDY_DTYPE_BF16);
}

static void test_dequantize_unaligned(void **state) {
  (void)state;
  /* MLX data may start at any byte: the same row at offset 1 */
  uint32_t words[8] = {0x89abcdefu, 0x01234567u, 0x11111111u, 0xf0f0f0f0u,
                       0x5a5a5a5au, 0x0u,        0xffffffffu, 0x13579bdfu};
  unsigned char raw[1 + sizeof words + 1 + 4 + 1 + 4];
  memcpy(raw + 1, words, sizeof words);
  uint16_t halves[2] = {0x3800, 0xbc00};         /* 0.5, -1 */
  memcpy(raw + 1 + sizeof words + 1, halves, 4); /* scales: 0.5, -1 */
  uint16_t bias_halves[2] = {0x4000, 0x0000};    /* 2, 0 */
  memcpy(raw + 1 + sizeof words + 1 + 4 + 1, bias_halves, 4);
  fdy_st_tensor weight = {
      .dtype = FDY_DTYPE_U32, .shape = FDY_SHAPE(1, 8), .data = raw + 1};
  fdy_st_tensor scale_t = {.dtype = FDY_DTYPE_F16,
                           .shape = FDY_SHAPE(1, 2),
                           .data = raw + 1 + sizeof words + 1};
  fdy_st_tensor bias_t = {.dtype = FDY_DTYPE_F16,
                          .shape = FDY_SHAPE(1, 2),
                          .data = raw + 1 + sizeof words + 1 + 4 + 1};
  fdy_llama_qlinear linear = {&weight, &scale_t, &bias_t, 1, 64};
  float out[64];
  fdy_llama_dequantize_row(&linear, FDY_DTYPE_F16, 0, out);
  for (int i = 0; i < 64; i++) {
    uint32_t qv = (words[i / 8] >> (4 * (i % 8))) & 0xf;
    double expected = i < 32 ? 0.5 * qv + 2.0 : -1.0 * qv;
    assert_float_equal(out[i], expected, 0.0);
  }
}

/* ---- verification against the fixtures ---------------------------------- */

static void verify_fixture(const char *fixture, uint32_t threads) {
  fdy_llama_model *model = open_fixture(fixture);
  fdy_llama_session *session = make_session(model, 0, threads);
  char path[512];
  fixture_path(path, sizeof path, fixture, "expected.safetensors");
  fdy_llama_verify_result result;
  fdy_error err;
  assert_int_equal(
      fdy_llama_verify(session, path, FDY_LLAMA_CPU_TOLERANCE, &result, &err),
      FDY_OK);
  print_message("%s: logits %.3e greedy %.3e agreement %u/%u\n", fixture,
                result.logits_relative_error, result.greedy_relative_error,
                result.greedy_matches, result.greedy_tokens);
  assert_true(result.prompt_tokens > 0);
  assert_true(result.greedy_tokens > 0);
  assert_true(result.logits_relative_error <= 1e-4);
  assert_true(result.greedy_relative_error <= 1e-4);
  assert_int_equal(result.greedy_matches, result.greedy_tokens);
  assert_true(result.passed);
  /* a tolerance of zero cannot be met by float32 */
  assert_int_equal(fdy_llama_verify(session, path, 0.0, &result, &err), FDY_OK);
  assert_false(result.passed);
  fdy_llama_session_destroy(session);
  fdy_llama_close(model);
}

static void test_verify_micro(void **state) {
  (void)state;
  verify_fixture("llama3-micro", 0);
}

static void test_verify_tiny(void **state) {
  (void)state;
#if defined(__SANITIZE_ADDRESS__)
  skip(); /* the sanitizer build stays on micro to stay fast */
#else
  verify_fixture("llama3-tiny", 2);
#endif
}

/* The generated fixtures (scripts/make_reference_fixture.py, an independent
 * float64 reference) cover what the shared ones do not; their configs are
 * checked so that a regenerated fixture cannot silently lose a feature. */
static void test_verify_untied_g32(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro-untied-g32");
  const fdy_llama_config *c = fdy_llama_model_config(model);
  assert_false(c->tie_word_embeddings);
  assert_ptr_not_equal(fdy_llama_lm_head(model)->weight,
                       fdy_llama_embedding(model)->weight);
  assert_string_equal(fdy_llama_lm_head(model)->weight->name, "lm_head.weight");
  assert_false(c->rope_llama3);
  assert_int_equal(c->scale_dtype, FDY_DTYPE_BF16);
  assert_int_equal(fdy_llama_final_norm(model)->dtype, FDY_DTYPE_BF16);
  assert_int_equal(c->group_size, 32);
  assert_int_equal(c->num_heads, 4 * c->num_kv_heads);
  fdy_llama_close(model);
  verify_fixture("llama3-micro-untied-g32", 2);
}

static void test_verify_mha_g128(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro-mha-g128");
  const fdy_llama_config *c = fdy_llama_model_config(model);
  assert_true(c->tie_word_embeddings);
  assert_true(c->rope_llama3);
  assert_int_equal(c->scale_dtype, FDY_DTYPE_F16);
  assert_int_equal(c->group_size, 128);
  assert_int_equal(c->num_kv_heads, c->num_heads);
  assert_int_equal(c->head_dim, c->hidden_size / c->num_heads);
  fdy_llama_close(model);
  /* the default context (max_position_embeddings 512 here) is used */
  verify_fixture("llama3-micro-mha-g128", 1);
}

/* Greedy generation reproduces the reference's greedy ids. */
static void test_generate_matches_reference(void **state) {
  (void)state;
  reference ref = load_reference("llama3-micro");
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_llama_session *session = make_session(model, 0, 2);
  fdy_llama_generation gen;
  fdy_error err;
  assert_int_equal(fdy_llama_generate(session, ref.prompt, ref.prompt_count,
                                      ref.greedy_count, true, &gen, &err),
                   FDY_OK);
  assert_int_equal(gen.count, ref.greedy_count);
  assert_memory_equal(gen.ids, ref.greedy, sizeof *gen.ids * gen.count);
  assert_false(gen.stopped_at_eos);
  assert_true(gen.prefill_seconds >= 0 && gen.decode_seconds >= 0);
  assert_true(gen.prefill_tokens_per_second > 0);
  assert_int_equal(fdy_llama_session_position(session),
                   ref.prompt_count + ref.greedy_count - 1);
  fdy_llama_generation_free(&gen);
  assert_null(gen.ids);
  fdy_llama_session_destroy(session);
  fdy_llama_close(model);
  free_reference(&ref);
}

/* ---- numerics: batching and threads ------------------------------------- */

/* Logits of a prefill equal those of the same tokens one at a time (the KV
 * cache path), and are bit-identical across thread counts. */
static void test_batch_and_threads(void **state) {
  (void)state;
  reference ref = load_reference("llama3-micro");
  fdy_llama_model *model = open_fixture("llama3-micro");
  uint32_t vocab = fdy_llama_model_config(model)->vocab_size;
  /* 150 tokens: more than one prefill batch */
  uint32_t n = 150;
  int32_t *ids = malloc(sizeof *ids * n);
  assert_non_null(ids);
  for (uint32_t i = 0; i < n; i++) {
    ids[i] = (int32_t)(rng_next() % vocab);
  }
  uint64_t total = (uint64_t)n * vocab;
  float *one = poisoned(total), *two = poisoned(total),
        *steps = poisoned(total), *last = poisoned(vocab);
  fdy_error err;

  fdy_llama_session *s1 = make_session(model, 256, 1);
  fdy_llama_session *s2 = make_session(model, 256, 2);
  assert_int_equal(fdy_llama_session_threads(s1), 1);
  assert_int_equal(fdy_llama_session_threads(s2), 2);
  assert_int_equal(fdy_llama_session_context(s1), 256);
  assert_int_equal(fdy_llama_session_forward(s1, ids, n, one, NULL, &err),
                   FDY_OK);
  assert_int_equal(fdy_llama_session_forward(s2, ids, n, two, last, &err),
                   FDY_OK);
  assert_memory_equal(one, two, sizeof *one * total);
  assert_memory_equal(last, two + total - vocab, sizeof *last * vocab);
  assert_int_equal(fdy_llama_session_position(s2), n);

  fdy_llama_session_reset(s2);
  assert_int_equal(fdy_llama_session_position(s2), 0);
  for (uint32_t i = 0; i < n; i++) {
    assert_int_equal(fdy_llama_session_forward(s2, &ids[i], 1, NULL,
                                               steps + (uint64_t)i * vocab,
                                               &err),
                     FDY_OK);
  }
  double rel = relative_error(steps, one, total);
  print_message("prefill vs single steps: %.3e\n", rel);
  assert_true(rel < 1e-5);

  /* the reference prompt, batched, against the reference logits */
  fdy_llama_session_reset(s1);
  assert_int_equal(fdy_llama_session_forward(s1, ref.prompt, ref.prompt_count,
                                             one, NULL, &err),
                   FDY_OK);
  assert_true(relative_error(one, ref.logits,
                             (uint64_t)ref.prompt_count * vocab) <= 1e-4);

  fdy_llama_session_destroy(s1);
  fdy_llama_session_destroy(s2);
  free(ids);
  free(one);
  free(two);
  free(steps);
  free(last);
  fdy_llama_close(model);
  free_reference(&ref);
}

/* ---- EOS ---------------------------------------------------------------- */

static void test_generate_eos(void **state) {
  (void)state;
  reference ref = load_reference("llama3-micro");
  char dir[64];
  /* the reference's 4th greedy id becomes the EOS id */
  int32_t eos = ref.greedy[3];
  for (uint32_t i = 0; i < 3; i++) {
    assert_int_not_equal(ref.greedy[i], eos);
  }
  model_copy_with_eos("llama3-micro", eos, dir, sizeof dir);
  fdy_llama_model *model = NULL;
  fdy_error err;
  assert_int_equal(fdy_llama_open(dir, &model, &err), FDY_OK);
  fdy_llama_session *session = make_session(model, 0, 2);
  fdy_llama_generation gen;

  assert_int_equal(fdy_llama_generate(session, ref.prompt, ref.prompt_count, 12,
                                      false, &gen, &err),
                   FDY_OK);
  assert_int_equal(gen.count, 4);
  assert_memory_equal(gen.ids, ref.greedy, sizeof *gen.ids * 4);
  assert_true(gen.stopped_at_eos);
  fdy_llama_generation_free(&gen);

  assert_int_equal(fdy_llama_generate(session, ref.prompt, ref.prompt_count, 12,
                                      true, &gen, &err),
                   FDY_OK);
  assert_int_equal(gen.count, 12);
  assert_memory_equal(gen.ids, ref.greedy, sizeof *gen.ids * 12);
  assert_false(gen.stopped_at_eos);
  fdy_llama_generation_free(&gen);

  fdy_llama_session_destroy(session);
  fdy_llama_close(model);
  remove_model_copy(dir);
  free_reference(&ref);
}

/* ---- bad inputs --------------------------------------------------------- */

static void test_context_overflow(void **state) {
  (void)state;
  reference ref = load_reference("llama3-micro");
  fdy_llama_model *model = open_fixture("llama3-micro");
  uint32_t vocab = fdy_llama_model_config(model)->vocab_size;
  uint32_t context = ref.prompt_count + 4;
  fdy_llama_session *a = make_session(model, context, 2);
  fdy_llama_session *b = make_session(model, context, 2);
  float *la = poisoned(vocab), *lb = poisoned(vocab);
  fdy_error err;

  assert_int_equal(fdy_llama_session_forward(a, ref.prompt, ref.prompt_count,
                                             NULL, NULL, &err),
                   FDY_OK);
  /* 5 more do not fit: error, position and cache unchanged */
  assert_int_equal(fdy_llama_session_forward(a, ref.greedy, 5, NULL, la, &err),
                   FDY_ERR_CONTEXT);
  assert_int_equal(err.kind, FDY_ERR_CONTEXT);
  assert_int_equal(err.expected, context);
  assert_int_equal(err.actual, context + 1);
  assert_int_equal(fdy_llama_session_position(a), ref.prompt_count);
  /* generate checks before any work too: 6 new ids need T + 5 positions */
  fdy_llama_generation gen;
  assert_int_equal(
      fdy_llama_generate(a, ref.prompt, ref.prompt_count, 6, true, &gen, &err),
      FDY_ERR_CONTEXT);
  assert_int_equal(err.expected, context);
  assert_int_equal(err.actual, context + 1);
  assert_null(gen.ids);
  assert_int_equal(fdy_llama_session_position(a), ref.prompt_count);

  /* continuing gives what a session that never failed gives */
  assert_int_equal(fdy_llama_session_forward(a, ref.greedy, 4, NULL, la, &err),
                   FDY_OK);
  assert_int_equal(fdy_llama_session_forward(b, ref.prompt, ref.prompt_count,
                                             NULL, NULL, &err),
                   FDY_OK);
  assert_int_equal(fdy_llama_session_forward(b, ref.greedy, 4, NULL, lb, &err),
                   FDY_OK);
  assert_memory_equal(la, lb, sizeof *la * vocab);
  assert_int_equal(fdy_llama_session_position(a), context);
  assert_int_equal(
      fdy_llama_session_forward(a, ref.greedy, 1, NULL, NULL, &err),
      FDY_ERR_CONTEXT);

  /* a whole generation exactly filling the context is allowed: the fifth
   * id is returned without a pass of its own */
  assert_int_equal(
      fdy_llama_generate(a, ref.prompt, ref.prompt_count, 5, true, &gen, &err),
      FDY_OK);
  assert_int_equal(gen.count, 5);
  assert_memory_equal(gen.ids, ref.greedy, sizeof *gen.ids * 5);
  assert_int_equal(fdy_llama_session_position(a), context);
  fdy_llama_generation_free(&gen);

  fdy_llama_session_destroy(a);
  fdy_llama_session_destroy(b);
  free(la);
  free(lb);
  fdy_llama_close(model);
  free_reference(&ref);
}

/* generate uses prompt + max_tokens - 1 positions: with context 10 and a
 * prompt of 3, 8 new ids fit exactly and 9 do not. */
static void test_generate_context_boundary(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_llama_session *session = make_session(model, 10, 2);
  int32_t prompt[3] = {968, 278, 546};
  fdy_llama_generation gen;
  fdy_error err;
  assert_int_equal(fdy_llama_generate(session, prompt, 3, 9, true, &gen, &err),
                   FDY_ERR_CONTEXT);
  assert_int_equal(err.kind, FDY_ERR_CONTEXT);
  assert_int_equal(err.expected, 10);
  assert_int_equal(err.actual, 11);
  assert_null(gen.ids);
  assert_int_equal(fdy_llama_session_position(session), 0);
  assert_int_equal(fdy_llama_generate(session, prompt, 3, 8, true, &gen, &err),
                   FDY_OK);
  assert_int_equal(gen.count, 8);
  assert_int_equal(fdy_llama_session_position(session), 10);
  fdy_llama_generation_free(&gen);
  /* no new ids: the prompt alone, which may fill the context */
  int32_t full[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  assert_int_equal(fdy_llama_generate(session, full, 10, 0, true, &gen, &err),
                   FDY_OK);
  assert_int_equal(gen.count, 0);
  fdy_llama_generation_free(&gen);
  assert_int_equal(fdy_llama_generate(session, full, 10, 1, true, &gen, &err),
                   FDY_OK);
  assert_int_equal(gen.count, 1);
  fdy_llama_generation_free(&gen);
  assert_int_equal(fdy_llama_generate(session, full, 10, 2, true, &gen, &err),
                   FDY_ERR_CONTEXT);
  assert_int_equal(err.actual, 11);
  fdy_llama_session_destroy(session);
  fdy_llama_close(model);
}

/* Without an explicit context a session takes 1024 positions or the
 * model's max_position_embeddings when that is smaller (512 for the mha
 * fixture); an explicit context above that limit stays an error. */
static void test_default_context_clamped(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro-mha-g128");
  uint32_t limit = fdy_llama_model_config(model)->max_position_embeddings;
  assert_int_equal(limit, 512);
  fdy_llama_session *session = NULL;
  fdy_error err;
  assert_int_equal(fdy_llama_session_create(model, NULL, &session, &err),
                   FDY_OK);
  assert_int_equal(fdy_llama_session_context(session), limit);
  fdy_llama_session_destroy(session);
  session = make_session(model, 0, 1);
  assert_int_equal(fdy_llama_session_context(session), limit);
  fdy_llama_session_destroy(session);
  session = make_session(model, limit, 1);
  assert_int_equal(fdy_llama_session_context(session), limit);
  fdy_llama_session_destroy(session);
  session = NULL;
  fdy_llama_session_options above = {limit + 1, 1};
  assert_int_equal(fdy_llama_session_create(model, &above, &session, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(session);
  assert_int_equal(err.expected, limit);
  assert_int_equal(err.actual, limit + 1);
  fdy_llama_close(model);
}

static void test_invalid_ids(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  int32_t vocab = (int32_t)fdy_llama_model_config(model)->vocab_size;
  fdy_llama_session *session = make_session(model, 64, 1);
  fdy_error err;
  int32_t good[2] = {5, 7};
  assert_int_equal(
      fdy_llama_session_forward(session, good, 2, NULL, NULL, &err), FDY_OK);

  int32_t bad[3] = {1, vocab, 2};
  assert_int_equal(fdy_llama_session_forward(session, bad, 3, NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 1);
  assert_int_equal(err.ids[1], vocab);
  assert_int_equal(err.expected, (uint64_t)vocab);
  int32_t negative[1] = {-1};
  assert_int_equal(
      fdy_llama_session_forward(session, negative, 1, NULL, NULL, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 0);
  assert_int_equal(fdy_llama_session_position(session), 2);

  fdy_llama_generation gen;
  assert_int_equal(fdy_llama_generate(session, bad, 3, 4, false, &gen, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 1);
  assert_null(gen.ids);
  assert_int_equal(fdy_llama_session_position(session), 2);

  fdy_llama_session_destroy(session);
  fdy_llama_close(model);
}

static void test_empty_prompt(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_llama_session *session = make_session(model, 64, 1);
  fdy_error err;
  int32_t ids[1] = {3};
  fdy_llama_generation gen;
  assert_int_equal(fdy_llama_generate(session, ids, 0, 4, false, &gen, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
  assert_null(gen.ids);
  assert_int_equal(fdy_llama_generate(session, NULL, 0, 4, false, &gen, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_session_forward(session, ids, 0, NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_session_position(session), 0);
  fdy_llama_session_destroy(session);
  fdy_llama_close(model);
}

static void test_bad_session_options(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_llama_session *session = NULL;
  fdy_error err;
  fdy_llama_session_options too_long = {
      fdy_llama_model_config(model)->max_position_embeddings + 1, 1};
  assert_int_equal(fdy_llama_session_create(model, &too_long, &session, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(session);
  fdy_llama_session_options threads = {64, 100000};
  assert_int_equal(fdy_llama_session_create(model, &threads, &session, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(session);
  assert_int_equal(fdy_llama_session_create(NULL, NULL, &session, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  /* defaults: context 1024 (the model allows 131072) */
  assert_int_equal(fdy_llama_session_create(model, NULL, &session, &err),
                   FDY_OK);
  assert_int_equal(fdy_llama_session_context(session), 1024);
  assert_true(fdy_llama_session_threads(session) >= 1);
  fdy_llama_session_destroy(session);
  fdy_llama_session_destroy(NULL);
  fdy_llama_close(model);
}

/* Writes a reference whose tensors are the fixture's, with one changed. */
typedef enum bad_reference {
  BAD_VOCAB,     /* logits rows one wider than the vocabulary */
  BAD_MISSING,   /* no greedy_logits */
  BAD_DTYPE,     /* prompt_ids as F32 */
  BAD_ID,        /* a prompt id outside the vocabulary */
  BAD_ROWS,      /* logits with one row fewer than prompt_ids */
  BAD_NO_PROMPT, /* no prompt ids (and no logits rows) */
  BAD_NO_GREEDY, /* no greedy ids: nothing to agree on ("0/0") */
} bad_reference;

static void write_bad_reference(bad_reference kind, const char *path,
                                uint32_t vocab) {
  reference ref = load_reference("llama3-micro");
  uint32_t t = kind == BAD_NO_PROMPT ? 0 : ref.prompt_count;
  uint32_t n = kind == BAD_NO_GREEDY ? 0 : ref.greedy_count;
  uint32_t width = kind == BAD_VOCAB ? vocab + 1 : vocab;
  float *logits = calloc((size_t)t * width + 1, sizeof *logits);
  float *greedy_logits = calloc((size_t)n * width + 1, sizeof *greedy_logits);
  assert_true(logits && greedy_logits);
  for (size_t i = 0; i < (size_t)t * width; i++) {
    logits[i] = (float)(rng_next() % 1000) / 100.0f - 5.0f;
  }
  if (kind == BAD_ID) {
    ref.prompt[3] = (int32_t)vocab;
  }
  fdy_st_write_tensor tensors[4] = {
      {"prompt_ids", kind == BAD_DTYPE ? FDY_DTYPE_F32 : FDY_DTYPE_I32,
       FDY_SHAPE(t), ref.prompt},
      {"logits", FDY_DTYPE_F32, FDY_SHAPE(kind == BAD_ROWS ? t - 1 : t, width),
       logits},
      {"greedy_ids", FDY_DTYPE_I32, FDY_SHAPE(n), ref.greedy},
      {"greedy_logits", FDY_DTYPE_F32, FDY_SHAPE(n, width), greedy_logits},
  };
  fdy_error err;
  fdy_status st =
      fdy_safetensors_write(path, tensors, kind == BAD_MISSING ? 3 : 4, &err);
  if (st != FDY_OK) {
    print_error("write %s: %s\n", path, err.message);
  }
  assert_int_equal(st, FDY_OK);
  free(logits);
  free(greedy_logits);
  free_reference(&ref);
}

static void test_bad_references(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  uint32_t vocab = fdy_llama_model_config(model)->vocab_size;
  fdy_llama_session *session = make_session(model, 64, 1);
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/foundry-ref-XXXXXX");
  assert_non_null(mkdtemp(dir));
  const struct {
    bad_reference kind;
    const char *file;
    const char *tensor;
  } cases[] = {
      {BAD_VOCAB, "vocab.safetensors", "logits"},
      {BAD_MISSING, "missing.safetensors", "greedy_logits"},
      {BAD_DTYPE, "dtype.safetensors", "prompt_ids"},
      {BAD_ID, "id.safetensors", "prompt_ids"},
      {BAD_ROWS, "rows.safetensors", "logits"},
      {BAD_NO_PROMPT, "no-prompt.safetensors", "prompt_ids"},
      {BAD_NO_GREEDY, "no-greedy.safetensors", "greedy_ids"},
  };
  enum { CASES = sizeof cases / sizeof cases[0] };
  const char *files[CASES];
  for (size_t i = 0; i < CASES; i++) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
    files[i] = cases[i].file;
    write_bad_reference(cases[i].kind, path, vocab);
    fdy_llama_verify_result result;
    fdy_error err;
    assert_int_equal(fdy_llama_verify(session, path, 1e-4, &result, &err),
                     FDY_ERR_SCHEMA);
    assert_int_equal(err.kind, FDY_ERR_SCHEMA);
    assert_string_equal(err.name, cases[i].tensor);
    assert_false(result.passed);
    if (cases[i].kind == BAD_VOCAB) {
      assert_int_equal(err.expected, vocab);
      assert_int_equal(err.actual, vocab + 1);
    }
    assert_int_equal(fdy_llama_session_position(session), 0);
  }
  remove_dir(dir, files, CASES);

  /* a reference longer than the context */
  fdy_llama_session *small = make_session(model, 16, 1);
  char path[512];
  fixture_path(path, sizeof path, "llama3-micro", "expected.safetensors");
  fdy_llama_verify_result result;
  fdy_error err;
  assert_int_equal(fdy_llama_verify(small, path, 1e-4, &result, &err),
                   FDY_ERR_CONTEXT);
  assert_int_equal(fdy_llama_verify(session, path, -1.0, &result, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_verify(session, path, NAN, &result, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_not_equal(fdy_llama_verify(session,
                                        "/nonexistent/expected.safetensors",
                                        1e-4, &result, &err),
                       FDY_OK);
  fdy_llama_session_destroy(small);
  fdy_llama_session_destroy(session);
  fdy_llama_close(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_half_conversion),
      cmocka_unit_test(test_dequantize_hand_computed),
      cmocka_unit_test(test_dequantize_random_groups),
      cmocka_unit_test(test_dequantize_unaligned),
      cmocka_unit_test(test_verify_micro),
      cmocka_unit_test(test_verify_tiny),
      cmocka_unit_test(test_verify_untied_g32),
      cmocka_unit_test(test_verify_mha_g128),
      cmocka_unit_test(test_generate_matches_reference),
      cmocka_unit_test(test_batch_and_threads),
      cmocka_unit_test(test_generate_eos),
      cmocka_unit_test(test_context_overflow),
      cmocka_unit_test(test_generate_context_boundary),
      cmocka_unit_test(test_default_context_clamped),
      cmocka_unit_test(test_invalid_ids),
      cmocka_unit_test(test_empty_prompt),
      cmocka_unit_test(test_bad_session_options),
      cmocka_unit_test(test_bad_references),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
