/* Plan JSON (version 2) and plan file tests: exact round trips of
 * hand-built plans (every command kind, buffer class, tensor role and op
 * kind with its parameters, several sections, extreme integers and
 * doubles) and of the planner's plans; encoding refusals; strict decoding
 * of edited documents (each schema error with its JSON path and global
 * command index), version 1 refused, NUL bytes, truncation, oversized
 * counts; the seed corpus of fuzz/corpus/plan_json; saving without
 * overwriting and loading regular files only. */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "plan_helpers.h"

#define JSON_MAX ((uint64_t)INT64_MAX)

/* ---- helpers ------------------------------------------------------------- */

static char *encode(const fdy_plan *plan) {
  char *text = NULL;
  fdy_error err;
  if (fdy_plan_to_json(plan, &text, &err) != FDY_OK) {
    fail_msg("encode failed: %s", err.message);
  }
  assert_non_null(text);
  return text;
}

static fdy_plan *decode(const char *text) {
  fdy_plan *plan = NULL;
  fdy_error err;
  if (fdy_plan_from_json(text, strlen(text), &plan, &err) != FDY_OK) {
    fail_msg("decode failed (%s at %s): %s", fdy_status_name(err.kind),
             err.name, err.message);
  }
  return plan;
}

static void assert_same_plan(const fdy_plan *a, const fdy_plan *b) {
  assert_true(fdy_graph_same_structure(fdy_plan_graph(a), fdy_plan_graph(b)));
  assert_int_equal(fdy_plan_budget(a), fdy_plan_budget(b));
  assert_int_equal(fdy_plan_stream_count(a), fdy_plan_stream_count(b));
  assert_int_equal(fdy_plan_event_count(a), fdy_plan_event_count(b));
  assert_int_equal(fdy_plan_buffer_count(a), fdy_plan_buffer_count(b));
  for (uint32_t i = 0; i < fdy_plan_buffer_count(a); i++) {
    assert_int_equal(fdy_plan_buffer_at(a, i)->cls,
                     fdy_plan_buffer_at(b, i)->cls);
    assert_int_equal(fdy_plan_buffer_at(a, i)->bytes,
                     fdy_plan_buffer_at(b, i)->bytes);
  }
  for (uint32_t t = 0; t < fdy_graph_tensor_count(fdy_plan_graph(a)); t++) {
    fdy_placement x = fdy_plan_placement(a, (fdy_tensor_id){t});
    fdy_placement y = fdy_plan_placement(b, (fdy_tensor_id){t});
    assert_int_equal(x.buffer.v, y.buffer.v);
    assert_int_equal(x.offset, y.offset);
  }
  assert_int_equal(fdy_plan_section_count(a), fdy_plan_section_count(b));
  for (size_t s = 0; s < fdy_plan_section_count(a); s++) {
    const fdy_section *x = fdy_plan_section(a, s);
    const fdy_section *y = fdy_plan_section(b, s);
    assert_string_equal(x->name, y->name);
    assert_int_equal(x->first, y->first);
    assert_int_equal(x->count, y->count);
  }
  assert_int_equal(fdy_plan_command_count(a), fdy_plan_command_count(b));
  for (size_t i = 0; i < fdy_plan_command_count(a); i++) {
    assert_true(
        fdy_command_equal(fdy_plan_command(a, i), fdy_plan_command(b, i)));
  }
}

/* encode -> decode -> encode gives the same text and an equal plan, which
 * validates exactly as the original does. */
static void round_trip(const fdy_plan *plan) {
  char *text = encode(plan);
  fdy_plan *decoded = decode(text);
  assert_same_plan(plan, decoded);
  char *again = encode(decoded);
  assert_string_equal(text, again);
  fdy_error e1, e2;
  fdy_status s1 = fdy_plan_validate(plan, NULL, &e1);
  fdy_status s2 = fdy_plan_validate(decoded, NULL, &e2);
  assert_int_equal(s1, s2);
  if (s1 != FDY_OK) {
    assert_int_equal(e1.command_index, e2.command_index);
    assert_string_equal(e1.name, e2.name);
  }
  free(again);
  free(text);
  fdy_plan_destroy(decoded);
}

static fdy_plan *new_plan(const fdy_graph *g, uint64_t budget, uint32_t streams,
                          const fdy_plan_buffer *buffers, uint32_t nb,
                          uint32_t events) {
  fdy_plan *plan = NULL;
  fdy_error err;
  if (fdy_plan_create(g, budget, streams, buffers, nb, events, &plan, &err) !=
      FDY_OK) {
    fail_msg("plan create: %s", err.message);
  }
  return plan;
}

/* ---- a graph with every op kind and tensor role --------------------------
 *
 * T = 2 rows, H = 64, heads 4 of 16 over 2 KV heads, context 8. Weights
 * "embed", "wq" and "wk" are gathers read through views; "norm" and "blob"
 * are read directly. */

enum {
  T_STEP, /* input I32 [4] */
  T_EMBED,
  T_EMBED_TABLE,
  T_EMBED_SCALES,
  T_EMBED_BIASES,
  T_NORM,
  T_WQ,
  T_WQ_W,
  T_WQ_S,
  T_WQ_B,
  T_WK,
  T_WK_W,
  T_WK_S,
  T_WK_B,
  T_BLOB,
  T_K_CACHE, /* state F32 [8, 32] */
  T_V_CACHE,
  T_H, /* activations from here on */
  T_N,
  T_Q,
  T_QR,
  T_K,
  T_KR,
  T_ATT,
  T_SW,
  T_RES,
  T_LAST,
  T_TOK,
  T_SUM,
  T_SUM2,
  T_COUNT
};

enum {
  O_EMBED,
  O_NORM,
  O_MM_Q,
  O_ROPE_Q,
  O_MM_K,
  O_ROPE_K,
  O_ATTN,
  O_SWIGLU,
  O_ADD,
  O_LAST,
  O_ARGMAX,
  O_SUM,
  O_SUM2,
  O_COUNT
};

static fdy_graph *every_kind_graph(void) {
  fdy_graph *g = NULL;
  fdy_shape row = FDY_SHAPE(2, 64), half = FDY_SHAPE(2, 32);
  assert_int_equal(fdy_graph_create("every kind", &g, NULL), FDY_OK);
  add_input(g, "step", FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(2)));
  add_weight(g, "embed", FDY_DTYPE_U8, FDY_SHAPE(1024));
  add_view(g, "embed.table", T_EMBED, 0, FDY_DTYPE_U32, FDY_SHAPE(16, 8));
  add_view(g, "embed.scales", T_EMBED, 512, FDY_DTYPE_F16, FDY_SHAPE(16, 2));
  add_view(g, "embed.biases", T_EMBED, 768, FDY_DTYPE_F16, FDY_SHAPE(16, 2));
  add_weight(g, "norm", FDY_DTYPE_BF16, FDY_SHAPE(64));
  add_weight(g, "wq", FDY_DTYPE_U8, FDY_SHAPE(2560));
  add_view(g, "wq.weight", T_WQ, 0, FDY_DTYPE_U32, FDY_SHAPE(64, 8));
  add_view(g, "wq.scales", T_WQ, 2048, FDY_DTYPE_F16, FDY_SHAPE(64, 2));
  add_view(g, "wq.biases", T_WQ, 2304, FDY_DTYPE_F16, FDY_SHAPE(64, 2));
  add_weight(g, "wk", FDY_DTYPE_U8, FDY_SHAPE(1408));
  add_view(g, "wk.weight", T_WK, 0, FDY_DTYPE_U32, FDY_SHAPE(32, 8));
  add_view(g, "wk.scales", T_WK, 1024, FDY_DTYPE_BF16, FDY_SHAPE(32, 2));
  add_view(g, "wk.biases", T_WK, 1280, FDY_DTYPE_BF16, FDY_SHAPE(32, 2));
  add_weight(g, "blob", FDY_DTYPE_U8, FDY_SHAPE(64));
  add_state(g, "k_cache", FDY_DTYPE_F32, FDY_SHAPE(1, 8, 32));
  add_state(g, "v_cache", FDY_DTYPE_F32, FDY_SHAPE(1, 8, 32));
  add_activation(g, "h", FDY_DTYPE_F32, row);
  add_activation(g, "n", FDY_DTYPE_F32, row);
  add_activation(g, "q", FDY_DTYPE_F32, row);
  add_activation(g, "qr", FDY_DTYPE_F32, row);
  add_activation(g, "k", FDY_DTYPE_F32, half);
  add_activation(g, "kr", FDY_DTYPE_F32, half);
  add_activation(g, "att", FDY_DTYPE_F32, row);
  add_activation(g, "sw", FDY_DTYPE_F32, row);
  add_activation(g, "res", FDY_DTYPE_F32, row);
  add_activation(g, "last", FDY_DTYPE_F32, FDY_SHAPE(1, 64));
  add_activation(g, "tok", FDY_DTYPE_I32, FDY_SHAPE(1));
  add_activation(g, "sum", FDY_DTYPE_U64, FDY_SHAPE(1));
  add_activation(g, "sum2", FDY_DTYPE_U64, FDY_SHAPE(1));
  assert_int_equal(fdy_graph_tensor_count(g), T_COUNT);

  fdy_op_params none = {0};
  fdy_op_params norm = {.rmsnorm = {.eps = 1e-5}};
  fdy_op_params rope3 = {.rope = {.head_dim = 16,
                                  .theta = 500000.0,
                                  .llama3 = true,
                                  .factor = 32.0,
                                  .low_freq_factor = 1.0,
                                  .high_freq_factor = 4.0,
                                  .original_max_position = 8192}};
  fdy_op_params rope = {.rope = {.head_dim = 16, .theta = 10000.0 / 3}};
  fdy_op_params attn = {
      .attention = {.heads = 4, .kv_heads = 2, .head_dim = 16}};
  fdy_op_params sum = {.checksum = {.passes = 3}};
  add_op(g, "embed", FDY_OP_EMBED_Q4, none,
         (uint32_t[]){T_STEP, T_EMBED_TABLE, T_EMBED_SCALES, T_EMBED_BIASES}, 4,
         T_H);
  add_op(g, "norm", FDY_OP_RMSNORM, norm, (uint32_t[]){T_STEP, T_H, T_NORM}, 3,
         T_N);
  add_op(g, "mm_q", FDY_OP_MATMUL_Q4, none,
         (uint32_t[]){T_STEP, T_N, T_WQ_W, T_WQ_S, T_WQ_B}, 5, T_Q);
  add_op(g, "rope_q", FDY_OP_ROPE, rope3, (uint32_t[]){T_STEP, T_Q}, 2, T_QR);
  add_op(g, "mm_k", FDY_OP_MATMUL_Q4, none,
         (uint32_t[]){T_STEP, T_N, T_WK_W, T_WK_S, T_WK_B}, 5, T_K);
  add_op(g, "rope_k", FDY_OP_ROPE, rope, (uint32_t[]){T_STEP, T_K}, 2, T_KR);
  add_op(g, "attn", FDY_OP_ATTENTION, attn,
         (uint32_t[]){T_STEP, T_QR, T_KR, T_K, T_K_CACHE, T_V_CACHE}, 6, T_ATT);
  add_op(g, "swiglu", FDY_OP_SWIGLU, none, (uint32_t[]){T_STEP, T_ATT, T_N}, 3,
         T_SW);
  add_op(g, "add", FDY_OP_ADD, none, (uint32_t[]){T_STEP, T_SW, T_H}, 3, T_RES);
  add_op(g, "last", FDY_OP_LAST_ROW, none, (uint32_t[]){T_STEP, T_RES}, 2,
         T_LAST);
  add_op(g, "argmax", FDY_OP_ARGMAX, none, (uint32_t[]){T_LAST}, 1, T_TOK);
  add_op(g, "sum", FDY_OP_CHECKSUM, sum, (uint32_t[]){T_BLOB}, 1, T_SUM);
  add_op(g, "sum2", FDY_OP_CHECKSUM, none, (uint32_t[]){T_BLOB, T_SUM}, 2,
         T_SUM2);
  assert_int_equal(fdy_graph_op_count(g), O_COUNT);
  return g;
}

/* Buffers of the hand-built plan, one per class. */
enum { B_RESIDENT, B_SLOT, B_ARENA, B_STATE, B_IO, B_COUNT };

/* Global command indices of the hand-built plan's sections. */
#define SETUP_COMMANDS    9
#define PREFILL_FIRST     SETUP_COMMANDS
#define PREFILL_COMMANDS  18
#define DECODE_FIRST      (PREFILL_FIRST + PREFILL_COMMANDS)
#define DECODE_COMMANDS   4
#define TEARDOWN_FIRST    (DECODE_FIRST + DECODE_COMMANDS)
#define EVERY_KIND_EVENTS 16

/* A valid plan over every_kind_graph: setup uploads embed, norm and blob
 * into the resident buffer; "prefill" copies the step in, streams wq and
 * wk through the slot, runs ops 0..10 and copies the token out; "decode"
 * runs the two checksums; teardown releases everything. */
static fdy_plan *every_kind_plan(void) {
  fdy_graph *g = every_kind_graph();
  const fdy_plan_buffer buffers[B_COUNT] = {
      [B_RESIDENT] = {FDY_BUFFER_RESIDENT, 1536},
      [B_SLOT] = {FDY_BUFFER_SLOT, 4096},
      [B_ARENA] = {FDY_BUFFER_ARENA, 5120},
      [B_STATE] = {FDY_BUFFER_STATE, 2048},
      [B_IO] = {FDY_BUFFER_IO, 256},
  };
  fdy_plan *plan = new_plan(g, FDY_MIB, 2, buffers, B_COUNT, EVERY_KIND_EVENTS);
  fdy_graph_destroy(g);
  static const uint32_t arena_order[] = {T_H,   T_N,   T_Q,   T_QR,  T_K,
                                         T_KR,  T_ATT, T_SW,  T_RES, T_LAST,
                                         T_TOK, T_SUM, T_SUM2};
  uint64_t offset = 0;
  for (size_t i = 0; i < sizeof(arena_order) / sizeof(arena_order[0]); i++) {
    fdy_tensor_info info;
    assert_int_equal(fdy_graph_tensor(fdy_plan_graph(plan),
                                      (fdy_tensor_id){arena_order[i]}, &info,
                                      NULL),
                     FDY_OK);
    place(plan, arena_order[i], B_ARENA, offset);
    offset += (info.bytes + 255) / 256 * 256;
  }
  assert_int_equal(offset, 5120);
  place(plan, T_K_CACHE, B_STATE, 0);
  place(plan, T_V_CACHE, B_STATE, 1024);
  place(plan, T_STEP, B_IO, 0);

  for (uint32_t b = 0; b < B_COUNT; b++) {
    add(plan, c_alloc(b));
  }
  add(plan, c_prefetch(T_EMBED, B_RESIDENT, 0, 0, 0));
  add(plan, c_prefetch(T_NORM, B_RESIDENT, 1024, 0, 1));
  add(plan, c_prefetch(T_BLOB, B_RESIDENT, 1280, 0, 2));
  add(plan, c_wait_host(2));

  section(plan, "prefill");
  add(plan, c_copy_in(T_STEP, 1, 0));
  add(plan, c_prefetch(T_WQ, B_SLOT, 0, 0, 1));
  add(plan, c_prefetch(T_WK, B_SLOT, 2560, 0, 2));
  add(plan, c_launch1(O_EMBED, 1, 3, T_EMBED, B_RESIDENT, 0));
  add(plan, c_launch1(O_NORM, 1, 4, T_NORM, B_RESIDENT, 1024));
  add(plan, c_wait_stream(1, 1));
  add(plan, c_launch1(O_MM_Q, 1, 5, T_WQ, B_SLOT, 0));
  add(plan, c_launch(O_ROPE_Q, 1, 6));
  add(plan, c_wait_stream(2, 1));
  add(plan, c_launch1(O_MM_K, 1, 7, T_WK, B_SLOT, 2560));
  add(plan, c_launch(O_ROPE_K, 1, 8));
  add(plan, c_launch(O_ATTN, 1, 9));
  add(plan, c_launch(O_SWIGLU, 1, 10));
  add(plan, c_launch(O_ADD, 1, 11));
  add(plan, c_launch(O_LAST, 1, 12));
  add(plan, c_launch(O_ARGMAX, 1, 13));
  add(plan, c_copy_out(T_TOK, 1, 14));
  add(plan, c_wait_host(14));

  section(plan, "decode");
  add(plan, c_launch1(O_SUM, 1, 0, T_BLOB, B_RESIDENT, 1280));
  add(plan, c_launch1(O_SUM2, 1, 1, T_BLOB, B_RESIDENT, 1280));
  add(plan, c_copy_out(T_SUM2, 1, 2));
  add(plan, c_wait_host(2));

  section(plan, "teardown");
  for (uint32_t b = 0; b < B_COUNT; b++) {
    add(plan, c_release(b));
  }
  assert_int_equal(fdy_plan_command_count(plan), TEARDOWN_FIRST + B_COUNT);
  return plan;
}

/* ---- round trips ----------------------------------------------------------
 */

static void test_round_trip_every_kind(void **state) {
  (void)state;
  fdy_plan *plan = every_kind_plan();
  fdy_error err;
  if (fdy_plan_validate(plan, NULL, &err) != FDY_OK) {
    fail_msg("the hand-built plan is invalid (%s, command %lld): %s",
             fdy_status_name(err.kind), (long long)err.command_index,
             err.message);
  }
  round_trip(plan);

  /* Every command kind, buffer class, tensor role and op kind is in it. */
  char *text = encode(plan);
  static const char *const words[] = {
      "\"allocate\"", "\"prefetch\"",     "\"copy_input\"", "\"copy_output\"",
      "\"wait\"",     "\"launch\"",       "\"release\"",    "\"resident\"",
      "\"slot\"",     "\"arena\"",        "\"state\"",      "\"io\"",
      "\"weight\"",   "\"weight_view\"",  "\"input\"",      "\"activation\"",
      "\"checksum\"", "\"embed_q4\"",     "\"rmsnorm\"",    "\"matmul_q4\"",
      "\"rope\"",     "\"attention\"",    "\"swiglu\"",     "\"add\"",
      "\"last_row\"", "\"argmax\"",       "\"prefill\"",    "\"decode\"",
      "\"teardown\"", "\"llama3\": true", "\"host\": true"};
  for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
    if (strstr(text, words[i]) == NULL) {
      fail_msg("%s is missing from the encoding", words[i]);
    }
  }
  free(text);
  fdy_plan_destroy(plan);
}

/* The largest values each field carries, doubles that need all 17 digits,
 * -0.0, a subnormal, a non-ASCII name, the most sections and bindings. */
static void test_round_trip_extremes(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  assert_int_equal(
      fdy_graph_create("\"quoted\" \xc3\xa9t\xc3\xa9 \\", &g, NULL), FDY_OK);
  uint32_t step =
      add_input(g, "step", FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  uint32_t x = add_input(g, "x", FDY_DTYPE_F32, FDY_SHAPE(1, 8));
  uint32_t big = add_weight(g, "big", FDY_DTYPE_U8, FDY_SHAPE(JSON_MAX));
  uint32_t view = add_view(g, "big.tail", big, (JSON_MAX - 16) / 256 * 256,
                           FDY_DTYPE_F16, FDY_SHAPE(8));
  uint32_t y = add_activation(g, "y", FDY_DTYPE_F32, FDY_SHAPE(1, 8));
  uint32_t z = add_activation(g, "z", FDY_DTYPE_F32, FDY_SHAPE(1, 8));
  uint32_t w = add_activation(g, "w", FDY_DTYPE_F32, FDY_SHAPE(1, 8));
  fdy_op_params sub = {.rmsnorm = {.eps = 5e-324}};
  fdy_op_params neg = {.rmsnorm = {.eps = -0.0}};
  fdy_op_params rope = {.rope = {.head_dim = 2,
                                 .theta = 1.7976931348623157e308,
                                 .factor = 1.0 / 3.0,
                                 .low_freq_factor = -0.0,
                                 .high_freq_factor = 0.1,
                                 .original_max_position = UINT32_MAX}};
  add_op(g, "sub", FDY_OP_RMSNORM, sub, (uint32_t[]){step, x, view}, 3, y);
  add_op(g, "neg", FDY_OP_RMSNORM, neg, (uint32_t[]){step, y, view}, 3, z);
  add_op(g, "rope", FDY_OP_ROPE, rope, (uint32_t[]){step, z}, 2, w);

  fdy_plan_buffer buffers[] = {{FDY_BUFFER_SLOT, JSON_MAX}, {FDY_BUFFER_IO, 1}};
  fdy_plan *plan = new_plan(g, JSON_MAX, FDY_PLAN_MAX_STREAMS, buffers, 2,
                            FDY_PLAN_MAX_EVENTS);
  place(plan, step, UINT32_MAX - 1, JSON_MAX);
  add(plan, c_prefetch(big, UINT32_MAX, JSON_MAX, UINT32_MAX, UINT32_MAX));
  add(plan, c_wait_stream(UINT32_MAX, UINT32_MAX));
  fdy_command launch = c_launch(UINT32_MAX, 63, 0);
  for (uint32_t i = 0; i < FDY_MAX_BINDINGS; i++) {
    launch = c_bind(launch, UINT32_MAX - i, i, JSON_MAX - i);
  }
  add(plan, launch);
  for (size_t s = 1; s < FDY_PLAN_MAX_SECTIONS; s++) {
    char name[FDY_PLAN_NAME_MAX];
    snprintf(name, sizeof(name), "s%02zu_abcdefghijklmnopqrstuvwxyz_", s);
    assert_int_equal(strlen(name), FDY_PLAN_NAME_MAX - 1);
    section(plan, name);
    add(plan, c_copy_out((uint32_t)s, 0, (uint32_t)s));
  }
  round_trip(plan);

  /* The doubles come back bit for bit. */
  char *text = encode(plan);
  fdy_plan *decoded = decode(text);
  fdy_op_info op;
  assert_int_equal(
      fdy_graph_op(fdy_plan_graph(decoded), (fdy_op_id){1}, &op, NULL), FDY_OK);
  assert_true(signbit(op.params.rmsnorm.eps));
  assert_int_equal(
      fdy_graph_op(fdy_plan_graph(decoded), (fdy_op_id){0}, &op, NULL), FDY_OK);
  assert_true(op.params.rmsnorm.eps == 5e-324);
  fdy_plan_destroy(decoded);
  free(text);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

/* An empty graph and a plan with nothing but its setup section. */
static void test_round_trip_empty(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("", &g, NULL), FDY_OK);
  fdy_plan *plan = new_plan(g, 0, 1, NULL, 0, 0);
  round_trip(plan);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

/* The planner's plans, everything resident and everything streamed. */
static void test_round_trip_planner(void **state) {
  (void)state;
  fdy_graph *g = every_kind_graph();
  fdy_op_id prefill_ops[O_SUM], decode_ops[] = {{O_SUM}, {O_SUM2}};
  for (uint32_t i = 0; i < O_SUM; i++) {
    prefill_ops[i].v = i;
  }
  fdy_tensor_id tok = {T_TOK}, sum2 = {T_SUM2};
  fdy_plan_step steps[] = {
      {"prefill", prefill_ops, O_SUM, &tok, 1},
      {"decode", decode_ops, 2, &sum2, 1},
  };
  /* The weights need 5632 bytes: all resident; embed and norm resident,
   * the rest through one slot of 2560; everything through two slots. */
  const fdy_planner_options options[] = {
      {.weight_budget = FDY_MIB, .buffers = 2},
      {.weight_budget = 5400, .buffers = 1},
      {.weight_budget = 5200, .buffers = 2},
  };
  const uint32_t slots[] = {0, 1, 2};
  for (size_t i = 0; i < 3; i++) {
    fdy_plan *plan = NULL;
    fdy_error err;
    if (fdy_plan_build(g, steps, 2, &options[i], &plan, &err) != FDY_OK) {
      fail_msg("planner: %s", err.message);
    }
    uint32_t n = 0;
    for (uint32_t b = 0; b < fdy_plan_buffer_count(plan); b++) {
      n += fdy_plan_buffer_at(plan, b)->cls == FDY_BUFFER_SLOT;
    }
    assert_int_equal(n, slots[i]);
    assert_int_equal(fdy_plan_validate(plan, NULL, NULL), FDY_OK);
    round_trip(plan);
    fdy_plan_destroy(plan);
  }
  fdy_graph_destroy(g);
}

/* ROPE_ATTENTION's parameters (the rope's and the attention's, the rope's
 * head_dim under "rope_head_dim") survive a planner plan's round trip. */
static void test_round_trip_rope_attention(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("rope attention", &g, NULL), FDY_OK);
  uint32_t step =
      add_input(g, "step", FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  uint32_t q = add_input(g, "q", FDY_DTYPE_F32, FDY_SHAPE(1, 64));
  uint32_t k = add_input(g, "k", FDY_DTYPE_F32, FDY_SHAPE(1, 32));
  uint32_t v = add_input(g, "v", FDY_DTYPE_F32, FDY_SHAPE(1, 32));
  uint32_t kc = add_state(g, "k_cache", FDY_DTYPE_F16, FDY_SHAPE(1, 8, 32));
  uint32_t vc = add_state(g, "v_cache", FDY_DTYPE_F16, FDY_SHAPE(1, 8, 32));
  uint32_t out = add_activation(g, "att", FDY_DTYPE_F32, FDY_SHAPE(1, 64));
  fdy_op_params p = {
      .rope_attention = {
          .rope = {.head_dim = 16,
                   .theta = 500000.0,
                   .llama3 = true,
                   .factor = 32.0,
                   .low_freq_factor = 1.0,
                   .high_freq_factor = 4.0,
                   .original_max_position = 8192},
          .attention = {.heads = 4, .kv_heads = 2, .head_dim = 16}}};
  fdy_op_id op = {add_op(g, "attn", FDY_OP_ROPE_ATTENTION, p,
                         (uint32_t[]){step, q, k, v, kc, vc}, 6, out)};
  fdy_tensor_id att = {out};
  fdy_plan_step steps[] = {{"decode", &op, 1, &att, 1}};
  fdy_planner_options options = {.weight_budget = FDY_MIB, .buffers = 1};
  fdy_plan *plan = NULL;
  fdy_error err;
  if (fdy_plan_build(g, steps, 1, &options, &plan, &err) != FDY_OK) {
    fail_msg("planner: %s", err.message);
  }
  assert_int_equal(fdy_plan_validate(plan, NULL, NULL), FDY_OK);
  round_trip(plan);
  char *text = encode(plan);
  static const char *const words[] = {"\"rope_attention\"",
                                      "\"rope_head_dim\": 16",
                                      "\"llama3\": true", "\"kv_heads\": 2"};
  for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
    if (strstr(text, words[i]) == NULL) {
      fail_msg("%s is missing from the encoding:\n%s", words[i], text);
    }
  }
  fdy_plan *decoded = decode(text);
  fdy_op_info info;
  assert_int_equal(fdy_graph_op(fdy_plan_graph(decoded), op, &info, NULL),
                   FDY_OK);
  assert_int_equal(info.kind, FDY_OP_ROPE_ATTENTION);
  assert_memory_equal(&info.params.rope_attention.attention,
                      &p.rope_attention.attention,
                      sizeof p.rope_attention.attention);
  assert_int_equal(info.params.rope_attention.rope.head_dim, 16);
  assert_true(info.params.rope_attention.rope.theta == 500000.0);
  assert_true(info.params.rope_attention.rope.high_freq_factor == 4.0);
  assert_int_equal(info.params.rope_attention.rope.original_max_position, 8192);
  free(text);
  fdy_plan_destroy(decoded);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

/* ---- encoding refusals --------------------------------------------------- */

static void expect_encode_error(const fdy_plan *plan, const char *name,
                                int64_t command_index) {
  char *text = (char *)&text;
  fdy_error err;
  assert_int_equal(fdy_plan_to_json(plan, &text, &err), FDY_ERR_UNSUPPORTED);
  assert_null(text);
  assert_int_equal(err.kind, FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.name, name);
  assert_int_equal(err.command_index, command_index);
}

static void test_encode_refuses_unrepresentable(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("g", &g, NULL), FDY_OK);
  uint32_t step =
      add_input(g, "step", FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  uint32_t x = add_input(g, "x", FDY_DTYPE_F32, FDY_SHAPE(1, 8));
  uint32_t huge = add_weight(g, "huge", FDY_DTYPE_U8, FDY_SHAPE(UINT64_MAX));
  add_view(g, "huge.view", huge, JSON_MAX + 1, FDY_DTYPE_U8, FDY_SHAPE(8));
  uint32_t y = add_activation(g, "y", FDY_DTYPE_F32, FDY_SHAPE(1, 8));
  /* llama3 off: fdy_op_check leaves the scaling fields alone. */
  fdy_op_params rope = {.rope = {.head_dim = 2, .theta = 1.0, .factor = NAN}};
  add_op(g, "rope", FDY_OP_ROPE, rope, (uint32_t[]){step, x}, 2, y);

  fdy_plan_buffer ok = {FDY_BUFFER_IO, 256};
  fdy_plan_buffer too_big = {FDY_BUFFER_SLOT, UINT64_MAX};
  fdy_plan *plan = new_plan(g, UINT64_MAX, 1, &ok, 1, 1);
  expect_encode_error(plan, "budget_bytes", -1);
  fdy_plan_destroy(plan);

  plan = new_plan(g, 0, 1, &too_big, 1, 1);
  expect_encode_error(plan, "buffers[0].bytes", -1);
  fdy_plan_destroy(plan);

  plan = new_plan(g, 0, 1, &ok, 1, 1);
  expect_encode_error(plan, "graph.tensors[2].shape[0]", -1);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);

  /* Now without the huge weight: its view, the NaN and placements. */
  assert_int_equal(fdy_graph_create("g", &g, NULL), FDY_OK);
  step = add_input(g, "step", FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  x = add_input(g, "x", FDY_DTYPE_F32, FDY_SHAPE(1, 8));
  huge = add_weight(g, "huge", FDY_DTYPE_U8, FDY_SHAPE(JSON_MAX));
  y = add_activation(g, "y", FDY_DTYPE_F32, FDY_SHAPE(1, 8));
  add_op(g, "rope", FDY_OP_ROPE, rope, (uint32_t[]){step, x}, 2, y);
  plan = new_plan(g, 0, 1, &ok, 1, 1);
  expect_encode_error(plan, "graph.ops[0].params.factor", -1);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);

  /* 3 x (2^62 - 1) bytes: every dimension fits, a view beyond 2^63 not. */
  assert_int_equal(fdy_graph_create("g", &g, NULL), FDY_OK);
  huge = add_weight(g, "huge", FDY_DTYPE_U8,
                    FDY_SHAPE(3, ((uint64_t)1 << 62) - 1));
  add_view(g, "far", huge, JSON_MAX + 1, FDY_DTYPE_U8, FDY_SHAPE(8));
  plan = new_plan(g, 0, 1, &ok, 1, 1);
  expect_encode_error(plan, "graph.tensors[1].offset", -1);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);

  assert_int_equal(fdy_graph_create("g", &g, NULL), FDY_OK);
  huge = add_weight(g, "huge", FDY_DTYPE_U8, FDY_SHAPE(JSON_MAX));
  add_view(g, "far", huge, JSON_MAX - 255, FDY_DTYPE_U8, FDY_SHAPE(8));
  plan = new_plan(g, 0, 1, &ok, 1, 1);
  place(plan, 1, 0, JSON_MAX + 1);
  expect_encode_error(plan, "placements[0].offset", -1);
  fdy_plan_destroy(plan);

  plan = new_plan(g, 0, 1, &ok, 1, 1);
  add(plan, c_alloc(0));
  section(plan, "step");
  add(plan, c_wait_host(0));
  add(plan, c_launch1(0, 0, 0, huge, 0, JSON_MAX + 1));
  expect_encode_error(plan, "sections[1].commands[1].bindings[0].offset", 2);
  fdy_plan_destroy(plan);

  plan = new_plan(g, 0, 1, &ok, 1, 1);
  section(plan, "step");
  add(plan, c_prefetch(huge, 0, UINT64_MAX, 0, 0));
  expect_encode_error(plan, "sections[1].commands[0].offset", 0);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);

  /* A name that is not UTF-8. */
  assert_int_equal(fdy_graph_create("g", &g, NULL), FDY_OK);
  add_input(g, "x", FDY_DTYPE_F32, FDY_SHAPE(1));
  add_input(g, "bad\xff", FDY_DTYPE_F32, FDY_SHAPE(1));
  plan = new_plan(g, 0, 1, &ok, 1, 1);
  expect_encode_error(plan, "graph.tensors[1].name", -1);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

/* ---- decoding errors ----------------------------------------------------- */

/* `label` names the case in a failure. */
static void expect_decode_at(const char *label, const char *text, size_t length,
                             fdy_status kind, const char *name,
                             int64_t command_index) {
  fdy_plan *plan = (fdy_plan *)&plan;
  fdy_error err;
  fdy_status st = fdy_plan_from_json(text, length, &plan, &err);
  if (st != kind || (name != NULL && strcmp(err.name, name) != 0) ||
      err.command_index != command_index) {
    fail_msg("%.80s: expected %s at %s (command %lld), got %s at %s (command "
             "%lld): %s",
             label, fdy_status_name(kind), name ? name : "-",
             (long long)command_index, fdy_status_name(st),
             st == FDY_OK ? "-" : err.name,
             st == FDY_OK ? -1LL : (long long)err.command_index,
             st == FDY_OK ? "" : err.message);
  }
  assert_null(plan);
  assert_int_equal(err.kind, kind);
  assert_true(strlen(err.message) > 0);
  if (kind == FDY_ERR_PARSE) {
    assert_true(err.line >= 1);
    assert_true(err.column >= 0);
  }
}

static void expect_decode(const char *text, size_t length, fdy_status kind,
                          const char *name, int64_t command_index) {
  expect_decode_at(text, text, length, kind, name, command_index);
}

static void expect_decode_str(const char *text, fdy_status kind,
                              const char *name, int64_t command_index) {
  expect_decode(text, strlen(text), kind, name, command_index);
}

/* The value at a path like "sections[1].commands[3].buffer": *parent is
 * its container, *key its member name ("" for an array element) and
 * *index its position. */
static void resolve(json_t *root, const char *path, json_t **parent, char *key,
                    size_t *index) {
  json_t *at = root;
  const char *p = path;
  *parent = NULL;
  while (*p != '\0') {
    *parent = at;
    key[0] = '\0';
    if (*p == '[') {
      char *end;
      *index = strtoul(p + 1, &end, 10);
      assert_true(*end == ']');
      p = end + 1;
      at = json_array_get(at, *index);
    } else {
      size_t n = strcspn(p, ".[");
      memcpy(key, p, n);
      key[n] = '\0';
      p += n;
      at = json_object_get(at, key);
    }
    if (*p == '.') {
      p++;
    }
    if (*p != '\0' && at == NULL) {
      fail_msg("no %s in the document", path);
    }
  }
}

/* Sets the value at path to the JSON text `value`, or removes it when
 * value is NULL. */
static void edit(json_t *root, const char *path, const char *value) {
  json_t *parent;
  char key[128];
  size_t index = 0;
  resolve(root, path, &parent, key, &index);
  json_t *v = NULL;
  if (value != NULL) {
    v = json_loads(value, JSON_DECODE_ANY, NULL);
    assert_non_null(v);
  }
  if (key[0] != '\0') {
    if (v == NULL) {
      assert_int_equal(json_object_del(parent, key), 0);
    } else {
      assert_int_equal(json_object_set_new(parent, key, v), 0);
    }
  } else if (v == NULL) {
    assert_int_equal(json_array_remove(parent, index), 0);
  } else {
    assert_int_equal(json_array_set_new(parent, index, v), 0);
  }
}

typedef struct edit_case {
  const char *path;  /* what to change */
  const char *value; /* its new JSON value, NULL to remove it */
  fdy_status kind;
  const char *name; /* expected err->name */
  int64_t command_index;
} edit_case;

/* Decodes the encoding of every_kind_plan after one edit. */
static void expect_edit(const edit_case *c) {
  fdy_plan *plan = every_kind_plan();
  char *text = encode(plan);
  json_t *root = json_loads(text, 0, NULL);
  assert_non_null(root);
  edit(root, c->path, c->value);
  char *edited = json_dumps(root, JSON_INDENT(1));
  assert_non_null(edited);
  char label[256];
  snprintf(label, sizeof(label), "%s = %s", c->path,
           c->value ? c->value : "(removed)");
  expect_decode_at(label, edited, strlen(edited), c->kind, c->name,
                   c->command_index);
  free(edited);
  json_decref(root);
  free(text);
  fdy_plan_destroy(plan);
}

#define SCHEMA FDY_ERR_SCHEMA
#define P1(i)  "sections[1].commands[" #i "]"

static const edit_case schema_cases[] = {
    /* top level */
    {"extra", "1", SCHEMA, "extra", -1},
    {"budget_bytes", "-1", SCHEMA, "budget_bytes", -1},
    {"budget_bytes", "1.5", SCHEMA, "budget_bytes", -1},
    {"budget_bytes", NULL, SCHEMA, "budget_bytes", -1},
    {"streams", "0", SCHEMA, "streams", -1},
    {"streams", "65", SCHEMA, "streams", -1},
    {"events", "16777217", SCHEMA, "events", -1},
    {"events", "\"16\"", SCHEMA, "events", -1},
    {"format", "\"other.plan\"", SCHEMA, "format", -1},
    {"format", NULL, SCHEMA, "format", -1},
    {"version", "\"2\"", SCHEMA, "version", -1},
    {"version", "2.0", SCHEMA, "version", -1},
    {"version", NULL, SCHEMA, "version", -1},
    /* buffers */
    {"buffers", "{}", SCHEMA, "buffers", -1},
    {"buffers[0]", "[]", SCHEMA, "buffers[0]", -1},
    {"buffers[1].bogus", "0", SCHEMA, "buffers[1].bogus", -1},
    {"buffers[1].class", "\"vram\"", SCHEMA, "buffers[1].class", -1},
    {"buffers[1].class", "1", SCHEMA, "buffers[1].class", -1},
    {"buffers[2].bytes", "0", SCHEMA, "buffers[2].bytes", -1},
    {"buffers[2].bytes", NULL, SCHEMA, "buffers[2].bytes", -1},
    /* graph and tensors */
    {"graph", "[]", SCHEMA, "graph", -1},
    {"graph.bogus", "null", SCHEMA, "graph.bogus", -1},
    {"graph.name", "7", SCHEMA, "graph.name", -1},
    {"graph.fingerprint", "\"1234\"", SCHEMA, "graph.fingerprint", -1},
    {"graph.tensors[0].role", "\"ghost\"", SCHEMA, "graph.tensors[0].role", -1},
    {"graph.tensors[0].dtype", "\"F12\"", SCHEMA, "graph.tensors[0].dtype", -1},
    {"graph.tensors[0].shape", "[1,1,1,1,1,1,1,1,1]", SCHEMA,
     "graph.tensors[0].shape", -1},
    {"graph.tensors[0].shape[0]", "-4", SCHEMA, "graph.tensors[0].shape[0]",
     -1},
    {"graph.tensors[0].extents", "[]", SCHEMA, "graph.tensors[0].extents", -1},
    {"graph.tensors[1].weight", "1", SCHEMA, "graph.tensors[1].weight", -1},
    {"graph.tensors[2].offset", NULL, SCHEMA, "graph.tensors[2].offset", -1},
    {"graph.tensors[2].weight", "4294967296", SCHEMA, "graph.tensors[2].weight",
     -1},
    /* ops and their params */
    {"graph.ops[0].kind", "\"teleport\"", SCHEMA, "graph.ops[0].kind", -1},
    {"graph.ops[0].kind", "3", SCHEMA, "graph.ops[0].kind", -1},
    {"graph.ops[0].param", "0", SCHEMA, "graph.ops[0].param", -1},
    {"graph.ops[0].params", NULL, SCHEMA, "graph.ops[0].params", -1},
    {"graph.ops[0].params.eps", "0.5", SCHEMA, "graph.ops[0].params.eps", -1},
    {"graph.ops[1].params", "[]", SCHEMA, "graph.ops[1].params", -1},
    {"graph.ops[1].params.eps", "\"small\"", SCHEMA, "graph.ops[1].params.eps",
     -1},
    {"graph.ops[1].params.eps", "9007199254740993", SCHEMA,
     "graph.ops[1].params.eps", -1},
    {"graph.ops[3].params.llama3", "1", SCHEMA, "graph.ops[3].params.llama3",
     -1},
    {"graph.ops[3].params.theta", NULL, SCHEMA, "graph.ops[3].params.theta",
     -1},
    {"graph.ops[3].params.head_dim", "16.0", SCHEMA,
     "graph.ops[3].params.head_dim", -1},
    {"graph.ops[6].params.kv_heads", "-2", SCHEMA,
     "graph.ops[6].params.kv_heads", -1},
    {"graph.ops[11].params.passes", "4294967296", SCHEMA,
     "graph.ops[11].params.passes", -1},
    {"graph.ops[0].reads", "[0,2,3,4,0,0,0,0,0,0,0,0,0]", SCHEMA,
     "graph.ops[0].reads", -1},
    {"graph.ops[0].reads[1]", "-1", SCHEMA, "graph.ops[0].reads[1]", -1},
    {"graph.ops[0].writes", "[17,18,19,20]", SCHEMA, "graph.ops[0].writes", -1},
    {"graph.ops[0].writes", "17", SCHEMA, "graph.ops[0].writes", -1},
    /* placements */
    {"placements", "{}", SCHEMA, "placements", -1},
    {"placements[0].bogus", "0", SCHEMA, "placements[0].bogus", -1},
    {"placements[0].tensor", "30", SCHEMA, "placements[0].tensor", -1},
    {"placements[1].tensor", "0", SCHEMA, "placements[1].tensor", -1},
    {"placements[0].buffer", "4294967295", SCHEMA, "placements[0].buffer", -1},
    {"placements[0].offset", "-256", SCHEMA, "placements[0].offset", -1},
    /* sections */
    {"sections", "[]", SCHEMA, "sections", -1},
    {"sections[0].name", "\"prefill\"", SCHEMA, "sections[0].name", -1},
    {"sections[1].name", "\"Prefill!\"", SCHEMA, "sections[1].name", -1},
    {"sections[1].name", "\"\"", SCHEMA, "sections[1].name", -1},
    {"sections[1].name", "\"a_name_of_exactly_32_characters_\"", SCHEMA,
     "sections[1].name", -1},
    {"sections[2].bogus", "[]", SCHEMA, "sections[2].bogus", -1},
    {"sections[2].commands", "{}", SCHEMA, "sections[2].commands", -1},
    {"sections[2].commands", NULL, SCHEMA, "sections[2].commands", -1},
    /* commands: the index is global (setup holds 9) */
    {"sections[0].commands[0].buffer", "\"0\"", SCHEMA,
     "sections[0].commands[0].buffer", 0},
    {"sections[0].commands[1]", "[]", SCHEMA, "sections[0].commands[1]", 1},
    {"sections[0].commands[5].offset", "-1", SCHEMA,
     "sections[0].commands[5].offset", 5},
    {"sections[0].commands[5].slot", "0", SCHEMA,
     "sections[0].commands[5].slot", 5},
    {P1(0) ".kind", "\"teleport\"", SCHEMA, P1(0) ".kind", PREFILL_FIRST},
    {P1(0) ".kind", NULL, SCHEMA, P1(0) ".kind", PREFILL_FIRST},
    {P1(0) ".tensor", NULL, SCHEMA, P1(0) ".tensor", PREFILL_FIRST},
    {P1(0) ".weight", "1", SCHEMA, P1(0) ".weight", PREFILL_FIRST},
    {P1(1) ".signal", "4294967296", SCHEMA, P1(1) ".signal", PREFILL_FIRST + 1},
    {P1(1) ".offset", "1e3", SCHEMA, P1(1) ".offset", PREFILL_FIRST + 1},
    {P1(3) ".bindings", "[{},{},{},{},{},{},{},{},{}]", SCHEMA,
     P1(3) ".bindings", PREFILL_FIRST + 3},
    {P1(3) ".bindings", NULL, SCHEMA, P1(3) ".bindings", PREFILL_FIRST + 3},
    {P1(3) ".bindings[0].slot", "0", SCHEMA, P1(3) ".bindings[0].slot",
     PREFILL_FIRST + 3},
    {P1(3) ".bindings[0].offset", "-256", SCHEMA, P1(3) ".bindings[0].offset",
     PREFILL_FIRST + 3},
    {P1(3) ".bindings[0]", "3", SCHEMA, P1(3) ".bindings[0]",
     PREFILL_FIRST + 3},
    {P1(5) ".host", "true", SCHEMA, P1(5), PREFILL_FIRST + 5},
    {P1(5) ".stream", NULL, SCHEMA, P1(5), PREFILL_FIRST + 5},
    {P1(17) ".host", "false", SCHEMA, P1(17) ".host", PREFILL_FIRST + 17},
    {P1(17) ".event", "-3", SCHEMA, P1(17) ".event", PREFILL_FIRST + 17},
    {"sections[3].commands[4].buffer", "true", SCHEMA,
     "sections[3].commands[4].buffer", TEARDOWN_FIRST + 4},
};

static void test_decode_schema_errors(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(schema_cases) / sizeof(schema_cases[0]); i++) {
    expect_edit(&schema_cases[i]);
  }
}

/* Errors of the graph mutators keep their kinds; name = the JSON path of
 * the tensor or op. */
static const edit_case graph_cases[] = {
    {"graph.ops[0].reads[1]", "999", FDY_ERR_GRAPH_UNKNOWN_TENSOR,
     "graph.ops[0]", -1},
    {"graph.ops[1].reads[1]", "18", FDY_ERR_GRAPH_READ_BEFORE_WRITE,
     "graph.ops[1]", -1},
    {"graph.ops[1].writes[0]", "17", FDY_ERR_GRAPH_MULTIPLE_PRODUCERS,
     "graph.ops[1]", -1},
    {"graph.ops[0].writes[0]", "0", FDY_ERR_GRAPH_ROLE, "graph.ops[0]", -1},
    {"graph.ops[1].name", "\"embed\"", FDY_ERR_GRAPH_DUPLICATE_NAME,
     "graph.ops[1]", -1},
    {"graph.ops[1].params.eps", "-1.0", FDY_ERR_INVALID_ARGUMENT,
     "graph.ops[1]", -1},
    {"graph.ops[6].params.kv_heads", "3", FDY_ERR_INVALID_ARGUMENT,
     "graph.ops[6]", -1},
    /* a fused kind by name, its eps read, its operands checked */
    {"graph.ops[1].kind", "\"norm_matmul_q4\"", FDY_ERR_INVALID_ARGUMENT,
     "graph.ops[1]", -1},
    {"graph.ops[0].writes", "[17,18]", FDY_ERR_INVALID_ARGUMENT, "graph.ops[0]",
     -1},
    {"graph.ops[2].reads", "[0,18,7,8]", FDY_ERR_INVALID_ARGUMENT,
     "graph.ops[2]", -1},
    {"graph.tensors[1].name", "\"step\"", FDY_ERR_GRAPH_DUPLICATE_NAME,
     "graph.tensors[1]", -1},
    {"graph.tensors[3].offset", "500", FDY_ERR_INVALID_ARGUMENT,
     "graph.tensors[3]", -1},
    {"graph.tensors[3].offset", "1024", FDY_ERR_GRAPH_WEIGHT_SIZE,
     "graph.tensors[3]", -1},
    {"graph.tensors[3].weight", "0", FDY_ERR_INVALID_ARGUMENT,
     "graph.tensors[3]", -1},
    {"graph.tensors[0].shape", "[4294967296,4294967296,4294967296]",
     FDY_ERR_OVERFLOW, "graph.tensors[0]", -1},
};

static void test_decode_graph_errors_keep_kind(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(graph_cases) / sizeof(graph_cases[0]); i++) {
    expect_edit(&graph_cases[i]);
  }
}

/* Edits that decode: the result equals the original, or is what the edit
 * says. */
static void test_decode_accepts(void **state) {
  (void)state;
  fdy_plan *plan = every_kind_plan();
  char *text = encode(plan);
  json_t *root = json_loads(text, 0, NULL);
  /* An integer where a double is expected, keys in another order, a compact
   * document. */
  edit(root, "graph.ops[3].params.theta", "500000");
  json_t *budget = json_incref(json_object_get(root, "budget_bytes"));
  edit(root, "budget_bytes", NULL);
  json_object_set_new(root, "budget_bytes", budget);
  char *compact = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
  fdy_plan *decoded = decode(compact);
  assert_same_plan(plan, decoded);
  char *again = encode(decoded);
  assert_string_equal(text, again);
  free(again);
  fdy_plan_destroy(decoded);
  free(compact);
  json_decref(root);
  free(text);
  fdy_plan_destroy(plan);
}

static void test_version_1_refused(void **state) {
  (void)state;
  /* A version 1 document as the previous format wrote it. */
  static const char v1[] =
      "{\"format\": \"foundry.plan\", \"version\": 1,\n"
      " \"graph\": {\"name\": \"synthetic\", \"fingerprint\": "
      "\"1bc9bb7c7dad5a3e\",\n"
      "  \"tensors\": [{\"name\": \"layer.0.weight\", \"role\": \"weight\", "
      "\"dtype\": \"U8\", \"shape\": [1000]}],\n"
      "  \"ops\": []},\n"
      " \"budget_bytes\": 4096, \"streams\": 2, \"slots\": 2, \"events\": 4,\n"
      " \"commands\": [{\"kind\": \"allocate\", \"slot\": 0, \"bytes\": "
      "1024}]}";
  fdy_plan *plan = NULL;
  fdy_error err;
  assert_int_equal(fdy_plan_from_json(v1, strlen(v1), &plan, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_null(plan);
  assert_string_equal(err.name, "version");
  assert_int_equal(err.expected, FDY_PLAN_VERSION);
  assert_int_equal(err.actual, 1);
  assert_int_equal(err.command_index, -1);
  assert_non_null(strstr(err.message, "version 1"));
  expect_decode_str("{\"version\": 3, \"format\": \"foundry.plan\"}",
                    FDY_ERR_UNSUPPORTED, "version", -1);
  expect_decode_str("{\"version\": -1, \"format\": \"foundry.plan\"}",
                    FDY_ERR_UNSUPPORTED, "version", -1);
  /* Another format is reported as such, whatever its version. */
  expect_decode_str("{\"version\": 1, \"format\": \"other\"}", FDY_ERR_SCHEMA,
                    "format", -1);
}

static void test_decode_parse_errors(void **state) {
  (void)state;
  fdy_plan *plan = every_kind_plan();
  char *text = encode(plan);
  size_t len = strlen(text);
  /* Truncated anywhere: always a clean parse error. */
  for (size_t cut = 0; cut < len; cut += 7) {
    expect_decode(text, cut, FDY_ERR_PARSE, NULL, -1);
  }
  expect_decode(text, len - 1, FDY_ERR_PARSE, NULL, -1);

  /* A NUL byte anywhere, right after a number too, is refused with its
   * position. */
  char *nul = strdup(text);
  char *version = strstr(nul, "\"version\": 2") + strlen("\"version\": 2");
  *version = '\0';
  fdy_error err;
  fdy_plan *out = NULL;
  assert_int_equal(fdy_plan_from_json(nul, len, &out, &err), FDY_ERR_PARSE);
  assert_null(out);
  assert_int_equal(err.line, 3);
  assert_int_equal(err.column, (int64_t)strlen("  \"version\": 2") + 1);
  strcpy(nul, text);
  nul[len - 1] = '\0'; /* the final brace */
  expect_decode(nul, len, FDY_ERR_PARSE, NULL, -1);
  strcpy(nul, text);
  expect_decode(nul, len + 1, FDY_ERR_PARSE, NULL, -1); /* its terminator */
  free(nul);
  free(text);
  fdy_plan_destroy(plan);

  const char *dup = "{\"format\": \"foundry.plan\",\n \"format\": \"x\"}";
  assert_int_equal(fdy_plan_from_json(dup, strlen(dup), &out, &err),
                   FDY_ERR_PARSE);
  assert_int_equal(err.line, 2);
  assert_true(err.column > 0);
  expect_decode_str("{\"format\": \"foundry.plan\"} trailing", FDY_ERR_PARSE,
                    NULL, -1);
  /* 2^63 does not fit a JSON integer; 2^63 - 1 does (the extremes test). */
  expect_decode_str("{\"budget_bytes\": 9223372036854775808}", FDY_ERR_PARSE,
                    NULL, -1);
  expect_decode_str("{\"name\": \"a\\u0000b\"}", FDY_ERR_PARSE, NULL, -1);
  expect_decode_str("{\"theta\": 1e999}", FDY_ERR_PARSE, NULL, -1);
  expect_decode_str("", FDY_ERR_PARSE, NULL, -1);
  expect_decode_str("42", FDY_ERR_PARSE, NULL, -1);
  expect_decode_str("[1, 2]", FDY_ERR_SCHEMA, "$", -1);
  expect_decode_str("{}", FDY_ERR_SCHEMA, "format", -1);
  assert_int_equal(fdy_plan_from_json(NULL, 0, &out, &err), FDY_ERR_PARSE);
  assert_int_equal(fdy_plan_from_json(NULL, 3, &out, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_plan_from_json("{}", 2, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
}

/* Tables above their limits are refused by their count, before anything
 * of that size is allocated. */
static void test_decode_huge_counts(void **state) {
  (void)state;
  fdy_plan *plan = every_kind_plan();
  char *text = encode(plan);
  json_t *root = json_loads(text, 0, NULL);
  json_t *buffers = json_object_get(root, "buffers");
  while (json_array_size(buffers) <= FDY_PLAN_MAX_BUFFERS) {
    json_array_append(buffers, json_array_get(buffers, 0));
  }
  char *many = json_dumps(root, JSON_COMPACT);
  expect_decode_str(many, FDY_ERR_SCHEMA, "buffers", -1);
  free(many);
  json_array_clear(buffers);

  json_t *sections = json_object_get(root, "sections");
  while (json_array_size(sections) <= FDY_PLAN_MAX_SECTIONS) {
    json_array_append(sections, json_array_get(sections, 1));
  }
  many = json_dumps(root, JSON_COMPACT);
  expect_decode_str(many, FDY_ERR_SCHEMA, "sections", -1);
  free(many);

  json_t *placements = json_object_get(root, "placements");
  while (json_array_size(placements) <= T_COUNT) {
    json_array_append(placements, json_array_get(placements, 0));
  }
  many = json_dumps(root, JSON_COMPACT);
  expect_decode_str(many, FDY_ERR_SCHEMA, "placements", -1);
  free(many);

  json_decref(root);
  free(text);
  fdy_plan_destroy(plan);
}

/* ---- the fuzzer's seed corpus -------------------------------------------- */

/* fuzz/corpus/plan_json: "valid-*" files decode, validate and round-trip;
 * "invalid-*" files decode and round-trip but fail validation; "bad-*"
 * files are refused by the decoder. */
static void test_seed_corpus(void **state) {
  (void)state;
  const char *root = getenv("FOUNDRY_SOURCE_DIR");
  if (root == NULL) {
    skip();
  }
  char dir[1024];
  snprintf(dir, sizeof(dir), "%s/fuzz/corpus/plan_json", root);
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t counts[3] = {0, 0, 0};
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *name = e->d_name;
    if (name[0] == '.') {
      continue;
    }
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fdy_plan *plan = NULL;
    fdy_error err;
    fdy_status st = fdy_plan_load(path, &plan, &err);
    bool valid = strncmp(name, "valid-", 6) == 0;
    bool invalid = strncmp(name, "invalid-", 8) == 0;
    if (!valid && !invalid) {
      assert_true(strncmp(name, "bad-", 4) == 0);
      if (st == FDY_OK) {
        fail_msg("%s decodes", name);
      }
      counts[2]++;
      continue;
    }
    if (st != FDY_OK) {
      fail_msg("%s: %s", name, err.message);
    }
    st = fdy_plan_validate(plan, NULL, &err);
    if ((st == FDY_OK) != valid) {
      fail_msg("%s: validation gives %s", name, fdy_status_name(st));
    }
    round_trip(plan);
    counts[valid ? 0 : 1]++;
    fdy_plan_destroy(plan);
  }
  closedir(d);
  assert_true(counts[0] >= 2 && counts[1] >= 1 && counts[2] >= 5);
}

/* ---- files
 * -------------------------------------------------------------------- */

static char *temp_dir(void) {
  char tmpl[] = "/tmp/foundry-plan-test-XXXXXX";
  char *dir = mkdtemp(tmpl);
  assert_non_null(dir);
  return strdup(dir);
}

static size_t dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      n++;
    }
  }
  closedir(d);
  return n;
}

static void test_save_load(void **state) {
  (void)state;
  char *dir = temp_dir();
  char path[512], other[512], fifo[512];
  snprintf(path, sizeof(path), "%s/plan.json", dir);
  snprintf(other, sizeof(other), "%s/other.json", dir);
  snprintf(fifo, sizeof(fifo), "%s/fifo.json", dir);
  fdy_plan *plan = every_kind_plan();
  fdy_plan *loaded = NULL;
  fdy_error err;
  assert_int_equal(fdy_plan_save(plan, path, &err), FDY_OK);
  assert_int_equal(dir_entries(dir), 1);
  assert_int_equal(fdy_plan_load(path, &loaded, &err), FDY_OK);
  assert_same_plan(plan, loaded);
  assert_int_equal(fdy_plan_validate(loaded, NULL, &err), FDY_OK);
  fdy_plan_destroy(loaded);
  loaded = NULL;

  /* Never overwrites, leaves no temporary behind. */
  assert_int_equal(fdy_plan_save(plan, path, &err), FDY_ERR_EXISTS);
  assert_string_equal(err.name, path);
  assert_int_equal(dir_entries(dir), 1);

  assert_int_equal(fdy_plan_load(other, &loaded, &err), FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, other);
  assert_null(loaded);

  /* A truncated file is a parse error with a position. */
  FILE *src = fopen(path, "rb");
  assert_non_null(src);
  char buf[300];
  size_t n = fread(buf, 1, sizeof(buf), src);
  fclose(src);
  FILE *dst = fopen(other, "wb");
  assert_non_null(dst);
  assert_int_equal(fwrite(buf, 1, n, dst), n);
  fclose(dst);
  assert_int_equal(fdy_plan_load(other, &loaded, &err), FDY_ERR_PARSE);
  assert_true(err.line > 0);
  assert_null(loaded);

  /* Saving into a missing directory fails cleanly. */
  char bad[600];
  snprintf(bad, sizeof(bad), "%s/no/such/plan.json", dir);
  assert_int_equal(fdy_plan_save(plan, bad, &err), FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, bad);

  /* Only regular files: a directory and a FIFO without a writer are refused
   * at once (the alarm fails the test if the open blocks). */
  assert_int_equal(fdy_plan_load(dir, &loaded, &err), FDY_ERR_IO);
  assert_string_equal(err.name, dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  alarm(10);
  assert_int_equal(fdy_plan_load(fifo, &loaded, &err), FDY_ERR_IO);
  alarm(0);
  assert_string_equal(err.name, fifo);
  assert_null(loaded);

  unlink(path);
  unlink(other);
  unlink(fifo);
  assert_int_equal(rmdir(dir), 0);
  free(dir);
  fdy_plan_destroy(plan);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_every_kind),
      cmocka_unit_test(test_round_trip_extremes),
      cmocka_unit_test(test_round_trip_empty),
      cmocka_unit_test(test_round_trip_planner),
      cmocka_unit_test(test_round_trip_rope_attention),
      cmocka_unit_test(test_encode_refuses_unrepresentable),
      cmocka_unit_test(test_decode_schema_errors),
      cmocka_unit_test(test_decode_graph_errors_keep_kind),
      cmocka_unit_test(test_decode_accepts),
      cmocka_unit_test(test_version_1_refused),
      cmocka_unit_test(test_decode_parse_errors),
      cmocka_unit_test(test_decode_huge_counts),
      cmocka_unit_test(test_seed_corpus),
      cmocka_unit_test(test_save_load),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
