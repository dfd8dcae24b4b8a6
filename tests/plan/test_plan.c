/* Plan tests, written from the contract in include/foundry/plan.h: plan
 * construction, then every validation rule with a valid plan that
 * exercises it and a minimal mutation that breaks it (kind, command_index,
 * section and the ids involved), the summary, and the planner's promise
 * that its plans validate.
 *
 * Two graphs (tests/plan/plan_helpers.h) and their plans:
 * - the chain: checksum ops op0..op2 over weights w0..w2; w0 is resident
 *   (uploaded by setup), w1 and w2 stream through one slot in the step;
 * - the block: rmsnorm/add ops over a step input, an input x, a state
 *   tensor and one weight with two views, with activations in an arena. */
#include "plan_helpers.h"

#define ANY (-1) /* an id or index not checked */

enum { COPY, COMPUTE, AUX };

/* ---- expectations ---------------------------------------------------- */

static bool has_id(const fdy_error *err, int64_t id) {
  return id == ANY || err->ids[0] == id || err->ids[1] == id;
}

/* Validation fails with `kind` at command `index` of section `sec`, and
 * err.ids holds `id` (the spec says "the ids involved", not their order).
 * ANY / NULL leave a field unchecked. The section in err.name is checked
 * last, so that a wrong name shows as such. */
static void expect_error(const fdy_plan *plan, fdy_status kind, int64_t index,
                         const char *sec, int64_t id) {
  fdy_error err;
  fdy_error_clear(&err);
  fdy_status st = fdy_plan_validate(plan, NULL, &err);
  if (st != kind || err.kind != kind ||
      (index != ANY && err.command_index != index) || !has_id(&err, id) ||
      err.message[0] == '\0') {
    fail_msg("expected %s at %lld with id %lld; got %s at %lld ids {%lld, "
             "%lld}: %s",
             fdy_status_name(kind), (long long)index, (long long)id,
             fdy_status_name(st), (long long)err.command_index,
             (long long)err.ids[0], (long long)err.ids[1], err.message);
  }
  if (sec != NULL && strcmp(err.name, sec) != 0) {
    fail_msg("%s at %lld: err.name is '%s', not the section '%s'",
             fdy_status_name(kind), (long long)index, err.name, sec);
  }
}

/* A PLACEMENT_HAZARD in section `sec`, reported at command a or b: where
 * the bytes of a live tensor are overwritten (a liveness check) or where
 * they are read after that (the dynamic check); the spec allows both. */
static void expect_hazard(const fdy_plan *plan, int64_t a, int64_t b,
                          const char *sec) {
  fdy_error err;
  fdy_error_clear(&err);
  fdy_status st = fdy_plan_validate(plan, NULL, &err);
  if (st != FDY_ERR_PLAN_PLACEMENT_HAZARD || err.kind != st ||
      (err.command_index != a && err.command_index != b)) {
    fail_msg("expected plan_placement_hazard at %lld or %lld; got %s at %lld: "
             "%s",
             (long long)a, (long long)b, fdy_status_name(st),
             (long long)err.command_index, err.message);
  }
  if (strcmp(err.name, sec) != 0) {
    fail_msg("plan_placement_hazard at %lld: err.name is '%s', not the "
             "section '%s'",
             (long long)err.command_index, err.name, sec);
  }
}

/* Validation fails with one of kinds a or b (the spec leaves the choice
 * open) at command `index`. */
static void expect_error2(const fdy_plan *plan, fdy_status a, fdy_status b,
                          int64_t index) {
  fdy_error err;
  fdy_error_clear(&err);
  fdy_status st = fdy_plan_validate(plan, NULL, &err);
  if ((st != a && st != b) || err.kind != st ||
      (index != ANY && err.command_index != index)) {
    fail_msg("expected %s or %s at %lld; got %s at %lld: %s",
             fdy_status_name(a), fdy_status_name(b), (long long)index,
             fdy_status_name(st), (long long)err.command_index, err.message);
  }
}

/* Validation fails (the spec names no kind) at command `index`. */
static void expect_rejected(const fdy_plan *plan, int64_t index) {
  fdy_error err;
  fdy_error_clear(&err);
  fdy_status st = fdy_plan_validate(plan, NULL, &err);
  if (st == FDY_OK || err.kind != st ||
      (index != ANY && err.command_index != index)) {
    fail_msg("expected a rejection at %lld; got %s at %lld: %s",
             (long long)index, fdy_status_name(st),
             (long long)err.command_index, err.message);
  }
}

static void expect_valid(const fdy_plan *plan, fdy_plan_summary *summary) {
  fdy_error err;
  fdy_error_clear(&err);
  fdy_status st = fdy_plan_validate(plan, summary, &err);
  if (st != FDY_OK) {
    fail_msg("validation failed: %s at %lld in '%s' ids {%lld, %lld}: %s",
             fdy_status_name(st), (long long)err.command_index, err.name,
             (long long)err.ids[0], (long long)err.ids[1], err.message);
  }
}

/* ---- the chain plan -------------------------------------------------- */

enum { RES, SLOT, ARENA }; /* the chain plan's buffers */
#define CHAIN_STREAMS 3
#define CHAIN_EVENTS  8

/* Command indices of chain_plan. */
enum {
  /* setup */
  CH_ALLOC_RES,
  CH_ALLOC_SLOT,
  CH_ALLOC_ARENA,
  CH_UPLOAD_W0, /* w0 -> RES@0, COPY, e0 */
  CH_SETUP_SYNC,
  /* "step" */
  CH_LAUNCH0,    /* op0 on COMPUTE, e0, w0 @ RES 0: no wait */
  CH_FETCH1,     /* w1 -> SLOT@0, COPY, e1 */
  CH_WAIT1,      /* COMPUTE waits e1 */
  CH_LAUNCH1,    /* op1 on COMPUTE, e2, w1 @ SLOT 0 */
  CH_REUSE_WAIT, /* COPY waits e2 (op1, the slot's reader): no host wait */
  CH_FETCH2,     /* w2 -> SLOT@0, COPY, e3 */
  CH_WAIT2,      /* COMPUTE waits e3 */
  CH_LAUNCH2,    /* op2 on COMPUTE, e4, w2 @ SLOT 0 */
  CH_COPY_OUT,   /* out2 on COMPUTE, e5 */
  CH_STEP_SYNC,  /* host waits e5 */
  /* teardown */
  CH_RELEASE_RES,
  CH_RELEASE_SLOT,
  CH_RELEASE_ARENA,
  CH_COUNT
};

typedef struct chain_opts {
  uint64_t slot_bytes;  /* 0: TEST_W */
  uint64_t arena_bytes; /* 0: 3 * 256 (out<i> at 256 * i) */
  uint64_t budget;      /* 0: TEST_W + slot_bytes */
} chain_opts;

/* The chain plan's buffers, placements and setup, then section "step". */
static fdy_plan *chain_begin(const test_chain *ch, chain_opts o) {
  uint64_t slot = o.slot_bytes ? o.slot_bytes : TEST_W;
  fdy_plan_buffer buffers[] = {
      [RES] = {FDY_BUFFER_RESIDENT, TEST_W},
      [SLOT] = {FDY_BUFFER_SLOT, slot},
      [ARENA] = {FDY_BUFFER_ARENA, o.arena_bytes ? o.arena_bytes : 3 * 256},
  };
  fdy_plan *p = NULL;
  assert_int_equal(
      fdy_plan_create(ch->graph, o.budget ? o.budget : TEST_W + slot,
                      CHAIN_STREAMS, buffers, 3, CHAIN_EVENTS, &p, NULL),
      FDY_OK);
  for (size_t i = 0; i < ch->n; i++) {
    place(p, ch->out[i], ARENA, 256 * i);
  }
  add(p, c_alloc(RES));
  add(p, c_alloc(SLOT));
  add(p, c_alloc(ARENA));
  add(p, c_prefetch(ch->w[0], RES, 0, COPY, 0));
  add(p, c_wait_host(0));
  section(p, "step");
  return p;
}

static void chain_step(fdy_plan *p, const test_chain *ch) {
  add(p, c_launch1(0, COMPUTE, 0, ch->w[0], RES, 0));
  add(p, c_prefetch(ch->w[1], SLOT, 0, COPY, 1));
  add(p, c_wait_stream(1, COMPUTE));
  add(p, c_launch1(1, COMPUTE, 2, ch->w[1], SLOT, 0));
  add(p, c_wait_stream(2, COPY));
  add(p, c_prefetch(ch->w[2], SLOT, 0, COPY, 3));
  add(p, c_wait_stream(3, COMPUTE));
  add(p, c_launch1(2, COMPUTE, 4, ch->w[2], SLOT, 0));
  add(p, c_copy_out(ch->out[2], COMPUTE, 5));
  add(p, c_wait_host(5));
}

static void chain_end(fdy_plan *p) {
  section(p, "teardown");
  add(p, c_release(RES));
  add(p, c_release(SLOT));
  add(p, c_release(ARENA));
}

static fdy_plan *chain_plan(const test_chain *ch, chain_opts o) {
  fdy_plan *p = chain_begin(ch, o);
  chain_step(p, ch);
  chain_end(p);
  assert_int_equal(fdy_plan_command_count(p), CH_COUNT);
  return p;
}

/* Every weight of the chain resident (w<i> at RES offset i * TEST_W,
 * uploaded by setup on COPY with event i), outputs in ARENA; one step
 * "s<k>" per string of `steps` (NULL-terminated) launching the ops whose
 * digits it lists, in that order, on COMPUTE (bound to the resident copy,
 * no waits), then a host wait for its last launch. */
static fdy_plan *resident_plan(const test_chain *ch, const char *const *steps) {
  fdy_plan_buffer buffers[] = {
      {FDY_BUFFER_RESIDENT, ch->n * TEST_W},
      {FDY_BUFFER_ARENA, ch->n * 256},
  };
  fdy_plan *p = NULL;
  assert_int_equal(
      fdy_plan_create(ch->graph, ch->n * TEST_W, 2, buffers, 2, 16, &p, NULL),
      FDY_OK);
  for (size_t i = 0; i < ch->n; i++) {
    place(p, ch->out[i], 1, 256 * i);
  }
  add(p, c_alloc(0));
  add(p, c_alloc(1));
  for (size_t i = 0; i < ch->n; i++) {
    add(p, c_prefetch(ch->w[i], 0, i * TEST_W, COPY, (uint32_t)i));
  }
  add(p, c_wait_host((uint32_t)ch->n - 1));
  for (size_t k = 0; steps[k] != NULL; k++) {
    char name[32];
    snprintf(name, sizeof name, "s%zu", k);
    section(p, name);
    uint32_t event = 0;
    for (const char *d = steps[k]; *d; d++) {
      uint32_t op = (uint32_t)(*d - '0');
      add(p, c_launch1(op, COMPUTE, event++, ch->w[op], 0, op * TEST_W));
    }
    if (event > 0) {
      add(p, c_wait_host(event - 1));
    }
  }
  section(p, "teardown");
  add(p, c_release(0));
  add(p, c_release(1));
  return p;
}

/* ---- the block plan -------------------------------------------------- */

enum { B_RES, B_ARENA, B_STATE, B_IO }; /* the block plan's buffers */
#define BLOCK_STREAMS 4
#define BLOCK_EVENTS  16
#define ARENA_BYTES   (6 * TEST_ROW) /* rows 4 and 5 free */

/* Command indices of block_plan (one compute stream). */
enum {
  /* setup */
  BK_ALLOC_RES,
  BK_ALLOC_ARENA,
  BK_ALLOC_STATE,
  BK_ALLOC_IO,
  BK_UPLOAD,     /* norm -> B_RES@0, COPY, e0 */
  BK_SETUP_SYNC, /* host waits e0 */
  /* "step" */
  BK_COPY_STEP, /* copy_input step, COPY, e0 */
  BK_COPY_X,    /* copy_input x, COPY, e1 */
  BK_WAIT_IN,   /* COMPUTE waits e1 (and so e0) */
  BK_LAUNCH_NA, /* norm_a, e2, norm @ B_RES 0 */
  BK_LAUNCH_AA, /* add_a, e3 */
  BK_LAUNCH_NB, /* norm_b, e4, norm @ B_RES 0 */
  BK_LAUNCH_AO, /* add_out, e5 */
  BK_COPY_Y,    /* copy_output y, COMPUTE, e6 */
  BK_STEP_SYNC, /* host waits e6 */
  /* teardown */
  BK_RELEASE_RES,
  BK_COUNT = BK_RELEASE_RES + 4
};

/* Command indices of the step of block_plan_aux: norm_b runs on AUX. */
enum {
  AX_LAUNCH_AA = BK_LAUNCH_AA,
  AX_WAIT_IN,   /* AUX waits e1 (the inputs) */
  AX_ORDER,     /* AUX waits e3 (add_a, the last reader of a) */
  AX_LAUNCH_NB, /* norm_b on AUX, e4 */
  AX_WAIT_B,    /* COMPUTE waits e4 */
  AX_LAUNCH_AO, /* add_out, e5 */
  AX_COPY_Y,
  AX_STEP_SYNC,
  AX_RELEASE_RES
};

/* Placements: a, c, b, y at rows 0..3 of the arena, cache at 0 of
 * B_STATE, step at 0 and x at 256 of B_IO. */
static fdy_plan *block_begin(const test_block *k, uint64_t budget) {
  fdy_plan_buffer buffers[] = {
      [B_RES] = {FDY_BUFFER_RESIDENT, 2 * TEST_NORM},
      [B_ARENA] = {FDY_BUFFER_ARENA, ARENA_BYTES},
      [B_STATE] = {FDY_BUFFER_STATE, TEST_ROW},
      [B_IO] = {FDY_BUFFER_IO, 1024},
  };
  fdy_plan *p = NULL;
  assert_int_equal(fdy_plan_create(k->graph, budget, BLOCK_STREAMS, buffers, 4,
                                   BLOCK_EVENTS, &p, NULL),
                   FDY_OK);
  place(p, k->a, B_ARENA, 0);
  place(p, k->c, B_ARENA, TEST_ROW);
  place(p, k->b, B_ARENA, 2 * TEST_ROW);
  place(p, k->y, B_ARENA, 3 * TEST_ROW);
  place(p, k->cache, B_STATE, 0);
  place(p, k->step, B_IO, 0);
  place(p, k->x, B_IO, 256);
  add(p, c_alloc(B_RES));
  add(p, c_alloc(B_ARENA));
  add(p, c_alloc(B_STATE));
  add(p, c_alloc(B_IO));
  add(p, c_prefetch(k->norm, B_RES, 0, COPY, 0));
  add(p, c_wait_host(0));
  section(p, "step");
  return p;
}

static void block_end(fdy_plan *p) {
  section(p, "teardown");
  add(p, c_release(B_RES));
  add(p, c_release(B_ARENA));
  add(p, c_release(B_STATE));
  add(p, c_release(B_IO));
}

/* `aux`: norm_b runs on AUX after waiting for the inputs and for add_a. */
static fdy_plan *block_plan_with(const test_block *k, bool aux,
                                 uint64_t budget) {
  fdy_plan *p = block_begin(k, budget);
  add(p, c_copy_in(k->step, COPY, 0));
  add(p, c_copy_in(k->x, COPY, 1));
  add(p, c_wait_stream(1, COMPUTE));
  add(p, c_launch1(OP_NORM_A, COMPUTE, 2, k->norm, B_RES, 0));
  add(p, c_launch(OP_ADD_A, COMPUTE, 3));
  if (aux) {
    add(p, c_wait_stream(1, AUX));
    add(p, c_wait_stream(3, AUX));
    add(p, c_launch1(OP_NORM_B, AUX, 4, k->norm, B_RES, 0));
    add(p, c_wait_stream(4, COMPUTE));
  } else {
    add(p, c_launch1(OP_NORM_B, COMPUTE, 4, k->norm, B_RES, 0));
  }
  add(p, c_launch(OP_ADD_OUT, COMPUTE, 5));
  add(p, c_copy_out(k->y, COMPUTE, 6));
  add(p, c_wait_host(6));
  block_end(p);
  assert_int_equal(fdy_plan_command_count(p), aux ? BK_COUNT + 3 : BK_COUNT);
  return p;
}

static fdy_plan *block_plan(const test_block *k) {
  return block_plan_with(k, false, 2 * TEST_NORM);
}

static fdy_plan *block_plan_aux(const test_block *k) {
  return block_plan_with(k, true, 2 * TEST_NORM);
}

/* ---- fixture --------------------------------------------------------- */

typedef struct fixture {
  test_chain ch;  /* chained: op<i> reads out<i-1> */
  test_chain ind; /* independent ops */
  test_block blk;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  f->ch = chain_make(3, true);
  f->ind = chain_make(3, false);
  f->blk = block_make();
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  fdy_graph_destroy(f->ch.graph);
  fdy_graph_destroy(f->ind.graph);
  fdy_graph_destroy(f->blk.graph);
  free(f);
  return 0;
}

/* ---- construction ---------------------------------------------------- */

static void test_create_and_accessors(void **state) {
  fixture *f = *state;
  fdy_plan *p = chain_plan(&f->ch, (chain_opts){.arena_bytes = 1024});
  assert_true(fdy_graph_same_structure(fdy_plan_graph(p), f->ch.graph));
  assert_int_equal(fdy_plan_budget(p), 2 * TEST_W);
  assert_int_equal(fdy_plan_stream_count(p), CHAIN_STREAMS);
  assert_int_equal(fdy_plan_event_count(p), CHAIN_EVENTS);
  assert_int_equal(fdy_plan_buffer_count(p), 3);
  assert_int_equal(fdy_plan_buffer_at(p, SLOT)->cls, FDY_BUFFER_SLOT);
  assert_int_equal(fdy_plan_buffer_at(p, ARENA)->bytes, 1024);
  assert_null(fdy_plan_buffer_at(p, 3));
  fdy_placement pl = fdy_plan_placement(p, (fdy_tensor_id){f->ch.out[1]});
  assert_int_equal(pl.buffer.v, ARENA);
  assert_int_equal(pl.offset, 256);
  assert_int_equal(fdy_plan_placement(p, (fdy_tensor_id){f->ch.w[0]}).buffer.v,
                   FDY_NO_BUFFER);
  assert_int_equal(fdy_plan_placement(p, (fdy_tensor_id){999}).buffer.v,
                   FDY_NO_BUFFER);
  assert_int_equal(fdy_plan_section_count(p), 3);
  assert_string_equal(fdy_plan_section(p, 0)->name, "setup");
  assert_int_equal(fdy_plan_section(p, 0)->first, 0);
  assert_int_equal(fdy_plan_section(p, 0)->count, CH_LAUNCH0);
  assert_int_equal(fdy_plan_section(p, 1)->first, CH_LAUNCH0);
  assert_int_equal(fdy_plan_section(p, 2)->first, CH_RELEASE_RES);
  assert_int_equal(fdy_plan_section(p, 2)->count, 3);
  assert_null(fdy_plan_section(p, 3));
  assert_int_equal(fdy_plan_find_section(p, "step"), 1);
  assert_int_equal(fdy_plan_find_section(p, "decode"), -1);
  assert_int_equal(fdy_plan_command_count(p), CH_COUNT);
  fdy_command want = c_launch1(1, COMPUTE, 2, f->ch.w[1], SLOT, 0);
  assert_true(fdy_command_equal(fdy_plan_command(p, CH_LAUNCH1), &want));
  assert_null(fdy_plan_command(p, CH_COUNT));
  assert_string_equal(fdy_buffer_class_name(FDY_BUFFER_STATE), "state");
  assert_string_equal(fdy_command_kind_name(FDY_CMD_COPY_INPUT), "copy_input");
  fdy_plan_destroy(p);
  fdy_plan_destroy(NULL);
}

static void test_create_rejects_bad_arguments(void **state) {
  fixture *f = *state;
  fdy_plan *p = NULL;
  fdy_error err;
  fdy_plan_buffer ok[] = {{FDY_BUFFER_SLOT, 8}};
  fdy_plan_buffer zero[] = {{FDY_BUFFER_SLOT, 8}, {FDY_BUFFER_ARENA, 0}};
  fdy_plan_buffer bad_class[] = {{FDY_BUFFER_CLASS_COUNT, 8}};
  assert_int_equal(fdy_plan_create(f->ch.graph, 0, 0, ok, 1, 1, &p, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_plan_create(f->ch.graph, 0, FDY_PLAN_MAX_STREAMS + 1, ok,
                                   1, 1, &p, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_plan_create(f->ch.graph, 0, 1, zero, 2, 1, &p, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      fdy_plan_create(f->ch.graph, 0, 1, bad_class, 1, 1, &p, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_plan_create(f->ch.graph, 0, 1, ok, 1,
                                   FDY_PLAN_MAX_EVENTS + 1, &p, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_plan_buffer *many = calloc(FDY_PLAN_MAX_BUFFERS + 1, sizeof(*many));
  assert_non_null(many);
  for (uint32_t i = 0; i <= FDY_PLAN_MAX_BUFFERS; i++) {
    many[i] = ok[0];
  }
  assert_int_equal(fdy_plan_create(f->ch.graph, 0, 1, many,
                                   FDY_PLAN_MAX_BUFFERS + 1, 1, &p, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  free(many);
  assert_null(p);
  assert_int_equal(fdy_plan_create(f->ch.graph, 0, FDY_PLAN_MAX_STREAMS, NULL,
                                   0, 0, &p, &err),
                   FDY_OK);
  fdy_plan_destroy(p);
}

static void test_sections_append_remove(void **state) {
  fixture *f = *state;
  fdy_plan *p = NULL;
  fdy_error err;
  assert_int_equal(fdy_plan_create(f->ch.graph, 0, 1, NULL, 0, 0, &p, &err),
                   FDY_OK);
  const char *bad[] = {"", "Decode", "pre-fill", "a b",
                       "abcdefghijklmnopqrstuvwxyz012345"}; /* 32 chars */
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(fdy_plan_begin_section(p, bad[i], &err),
                     FDY_ERR_INVALID_ARGUMENT);
  }
  assert_int_equal(fdy_plan_section_count(p), 1);
  add(p, c_alloc(0));
  section(p, "decode_1");
  add(p, c_wait_host(0));
  add(p, c_wait_host(1));
  fdy_command bad_kind = {.kind = FDY_CMD_KIND_COUNT};
  assert_int_equal(fdy_plan_append(p, &bad_kind, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_command many = c_launch(0, 0, 0);
  many.u.launch.binding_count = FDY_MAX_BINDINGS + 1;
  assert_int_equal(fdy_plan_append(p, &many, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_plan_command_count(p), 3);
  /* Removing shrinks the section and shifts the later ones. */
  assert_int_equal(fdy_plan_remove(p, 0, &err), FDY_OK);
  assert_int_equal(fdy_plan_section(p, 0)->count, 0);
  assert_int_equal(fdy_plan_section(p, 1)->first, 0);
  assert_int_equal(fdy_plan_section(p, 1)->count, 2);
  assert_int_equal(fdy_plan_remove(p, 2, &err), FDY_ERR_NOT_FOUND);
  for (size_t i = fdy_plan_section_count(p); i < FDY_PLAN_MAX_SECTIONS; i++) {
    section(p, "more");
  }
  assert_int_equal(fdy_plan_begin_section(p, "more", &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_plan_destroy(p);
}

static void test_place_and_check_graph(void **state) {
  fixture *f = *state;
  fdy_plan *p = chain_plan(&f->ch, (chain_opts){0});
  fdy_error err;
  fdy_placement pl = {{ARENA}, 512};
  assert_int_equal(fdy_plan_place(p, (fdy_tensor_id){99}, pl, &err),
                   FDY_ERR_NOT_FOUND);
  assert_int_equal(fdy_plan_check_graph(p, f->ch.graph, &err), FDY_OK);
  assert_int_equal(fdy_plan_check_graph(p, f->ind.graph, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "graph");
  assert_int_equal(err.expected, fdy_graph_fingerprint(f->ch.graph));
  assert_int_equal(err.actual, fdy_graph_fingerprint(f->ind.graph));
  fdy_plan_destroy(p);
}

/* ---- valid plans ----------------------------------------------------- */

static void test_chain_plan_valid(void **state) {
  fixture *f = *state;
  fdy_plan *p = chain_plan(&f->ch, (chain_opts){0});
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
}

static void test_block_plans_valid(void **state) {
  fixture *f = *state;
  fdy_plan *p = block_plan(&f->blk);
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  p = block_plan_aux(&f->blk);
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
}

static void test_empty_plan_valid(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_plan *p = NULL;
  fdy_plan_summary s;
  assert_int_equal(fdy_graph_create("empty", &g, NULL), FDY_OK);
  assert_int_equal(fdy_plan_create(g, 0, 1, NULL, 0, 0, &p, NULL), FDY_OK);
  section(p, "teardown");
  expect_valid(p, &s);
  assert_int_equal(s.commands, 0);
  assert_int_equal(s.ops, 0);
  assert_int_equal(s.peak_weight_bytes, 0);
  assert_int_equal(s.streams, 0);
  fdy_plan_destroy(p);
  fdy_graph_destroy(g);
}

/* The graph is validated first, its error kind unchanged. */
static void test_graph_checked_first(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_plan *p = NULL;
  fdy_error err;
  assert_int_equal(fdy_graph_create("dangling", &g, NULL), FDY_OK);
  add_activation(g, "orphan", FDY_DTYPE_F32, FDY_SHAPE(4));
  assert_int_equal(fdy_plan_create(g, 0, 1, NULL, 0, 0, &p, NULL), FDY_OK);
  section(p, "teardown");
  assert_int_equal(fdy_plan_validate(p, NULL, &err),
                   FDY_ERR_GRAPH_READ_BEFORE_WRITE);
  fdy_plan_destroy(p);
  fdy_graph_destroy(g);
}

/* ---- sections -------------------------------------------------------- */

/* Section 0 is setup, the last is teardown, step names are unique. The
 * spec names no error kind for these: any rejection passes. */
static void test_section_names(void **state) {
  (void)state;
  const char *const cases[][4] = {
      {"step", NULL},                 /* no teardown */
      {"step", "step", "teardown"},   /* duplicate step */
      {"setup", "teardown", NULL},    /* a second setup */
      {"teardown", "teardown", NULL}, /* two teardowns */
      {"teardown", "step", NULL},     /* teardown not last */
  };
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("empty", &g, NULL), FDY_OK);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fdy_plan *p = NULL;
    assert_int_equal(fdy_plan_create(g, 0, 1, NULL, 0, 0, &p, NULL), FDY_OK);
    for (size_t s = 0; s < 4 && cases[i][s] != NULL; s++) {
      section(p, cases[i][s]);
    }
    expect_rejected(p, ANY);
    fdy_plan_destroy(p);
  }
  fdy_graph_destroy(g);
}

static void test_rule_section_command(void **state) {
  fixture *f = *state;
  const test_chain *ch = &f->ch;
  chain_opts o = {0};
  /* allocate in a step */
  fdy_plan *p = without(chain_plan(ch, o), CH_ALLOC_ARENA);
  p = insert(p, "step", 0, c_alloc(ARENA));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_LAUNCH0 - 1, "step", ANY);
  fdy_plan_destroy(p);
  /* allocate in teardown (of a buffer released just before) */
  p = insert(chain_plan(ch, o), "teardown", 1, c_alloc(RES));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_RELEASE_RES + 1, "teardown",
               ANY);
  fdy_plan_destroy(p);
  /* release in setup */
  p = insert(chain_plan(ch, o), "setup", 5, c_release(SLOT));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_LAUNCH0, "setup", ANY);
  fdy_plan_destroy(p);
  /* release in a step */
  p = without(chain_plan(ch, o), CH_RELEASE_ARENA);
  p = insert(p, "step", 10, c_release(ARENA));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_RELEASE_RES, "step", ANY);
  fdy_plan_destroy(p);
  /* prefetch into a resident buffer in a step */
  p = insert(chain_plan(ch, o), "step", 0,
             c_prefetch(ch->w[0], RES, 0, COPY, 7));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_LAUNCH0, "step", ANY);
  fdy_plan_destroy(p);
  /* prefetch into an arena buffer in a step */
  p = insert(chain_plan(ch, o), "step", 0,
             c_prefetch(ch->w[1], ARENA, 512, COPY, 7));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_LAUNCH0, "step", ANY);
  fdy_plan_destroy(p);
  /* prefetch into a slot in setup */
  p = insert(chain_plan(ch, o), "setup", 4,
             c_prefetch(ch->w[1], SLOT, 0, COPY, 1));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_SETUP_SYNC, "setup", ANY);
  fdy_plan_destroy(p);
  /* prefetch in teardown */
  p = insert(chain_plan(ch, o), "teardown", 0,
             c_prefetch(ch->w[0], RES, 0, COPY, 0));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_RELEASE_RES, "teardown",
               ANY);
  fdy_plan_destroy(p);
  /* launch in setup and in teardown */
  p = insert(chain_plan(ch, o), "setup", 5,
             c_launch1(0, COMPUTE, 1, ch->w[0], RES, 0));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_LAUNCH0, "setup", ANY);
  fdy_plan_destroy(p);
  p = insert(chain_plan(ch, o), "teardown", 0,
             c_launch1(0, COMPUTE, 0, ch->w[0], RES, 0));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_RELEASE_RES, "teardown",
               ANY);
  fdy_plan_destroy(p);
  /* copy_output in setup and in teardown */
  p = insert(chain_plan(ch, o), "setup", 5, c_copy_out(ch->out[0], COPY, 1));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_LAUNCH0, "setup", ANY);
  fdy_plan_destroy(p);
  p = insert(chain_plan(ch, o), "teardown", 0, c_copy_out(ch->out[2], COPY, 0));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, CH_RELEASE_RES, "teardown",
               ANY);
  fdy_plan_destroy(p);
  /* copy_input in setup and in teardown */
  p = insert(block_plan(&f->blk), "setup", 6, c_copy_in(f->blk.step, COPY, 1));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, BK_COPY_STEP, "setup", ANY);
  fdy_plan_destroy(p);
  p = insert(block_plan(&f->blk), "teardown", 0,
             c_copy_in(f->blk.step, COPY, 0));
  expect_error(p, FDY_ERR_PLAN_SECTION_COMMAND, BK_RELEASE_RES, "teardown",
               ANY);
  fdy_plan_destroy(p);
}

/* ---- allocate, release, budget --------------------------------------- */

static void test_rule_double_allocation(void **state) {
  fixture *f = *state;
  fdy_plan *p =
      insert(chain_plan(&f->ch, (chain_opts){0}), "setup", 1, c_alloc(RES));
  expect_error(p, FDY_ERR_PLAN_DOUBLE_ALLOCATION, 1, "setup", RES);
  fdy_plan_destroy(p);
}

/* Only resident and slot bytes count against the budget, inclusive. */
static void test_rule_budget(void **state) {
  fixture *f = *state;
  fdy_plan *p = chain_plan(&f->ch, (chain_opts){.arena_bytes = FDY_GIB});
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  p = chain_plan(&f->ch, (chain_opts){.budget = 2 * TEST_W - 1});
  expect_error(p, FDY_ERR_PLAN_BUDGET_EXCEEDED, CH_ALLOC_SLOT, "setup", SLOT);
  fdy_plan_destroy(p);
  /* The block: 512 resident bytes, 3.5 KiB of arena, state and io. */
  p = block_plan(&f->blk);
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  p = block_plan_with(&f->blk, false, 2 * TEST_NORM - 1);
  expect_error(p, FDY_ERR_PLAN_BUDGET_EXCEEDED, BK_ALLOC_RES, "setup", B_RES);
  fdy_plan_destroy(p);

  /* Live bytes that would wrap 64 bits are an error, never a wrap. */
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("empty", &g, NULL), FDY_OK);
  fdy_plan_buffer huge[] = {{FDY_BUFFER_RESIDENT, (uint64_t)1 << 63},
                            {FDY_BUFFER_SLOT, (uint64_t)1 << 63}};
  assert_int_equal(fdy_plan_create(g, UINT64_MAX, 1, huge, 2, 0, &p, NULL),
                   FDY_OK);
  add(p, c_alloc(0));
  add(p, c_alloc(1));
  section(p, "teardown");
  add(p, c_release(0));
  add(p, c_release(1));
  expect_error(p, FDY_ERR_PLAN_BUDGET_EXCEEDED, 1, "setup", 1);
  fdy_plan_destroy(p);
  fdy_graph_destroy(g);
}

static void test_rule_slot_not_allocated(void **state) {
  fixture *f = *state;
  chain_opts o = {0};
  /* prefetch into a buffer never allocated */
  fdy_plan *p = without(chain_plan(&f->ch, o), CH_ALLOC_SLOT);
  expect_error(p, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, CH_FETCH1 - 1, "step", SLOT);
  fdy_plan_destroy(p);
  /* release twice */
  p = insert(chain_plan(&f->ch, o), "teardown", 1, c_release(RES));
  expect_error(p, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, CH_RELEASE_RES + 1,
               "teardown", RES);
  fdy_plan_destroy(p);
  /* A launch writing into an arena never allocated, a copy into io never
   * allocated (the spec names no kind; SLOT_NOT_ALLOCATED is "use of a
   * dead buffer"). */
  p = without(chain_plan(&f->ch, o), CH_ALLOC_ARENA);
  expect_error(p, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, CH_LAUNCH0 - 1, "step",
               ARENA);
  fdy_plan_destroy(p);
  p = without(block_plan(&f->blk), BK_ALLOC_IO);
  expect_error(p, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, BK_COPY_STEP - 1, "step",
               B_IO);
  fdy_plan_destroy(p);
}

static void test_rule_unreleased_end(void **state) {
  fixture *f = *state;
  fdy_plan *p = without(chain_plan(&f->ch, (chain_opts){0}), CH_RELEASE_SLOT);
  expect_error(p, FDY_ERR_PLAN_UNRELEASED_END, CH_COUNT - 1, NULL, SLOT);
  fdy_plan_destroy(p);
}

/* ---- prefetch -------------------------------------------------------- */

static void test_rule_not_a_weight(void **state) {
  fixture *f = *state;
  const test_block *k = &f->blk;
  fdy_plan *p = replace(chain_plan(&f->ch, (chain_opts){0}), CH_UPLOAD_W0,
                        c_prefetch(f->ch.out[0], RES, 0, COPY, 0));
  expect_error(p, FDY_ERR_PLAN_NOT_A_WEIGHT, CH_UPLOAD_W0, "setup",
               f->ch.out[0]);
  fdy_plan_destroy(p);
  /* an input */
  p = replace(block_plan(k), BK_UPLOAD, c_prefetch(k->x, B_RES, 0, COPY, 0));
  expect_error(p, FDY_ERR_PLAN_NOT_A_WEIGHT, BK_UPLOAD, "setup", k->x);
  fdy_plan_destroy(p);
  /* a view: a prefetch moves a whole weight */
  p = replace(block_plan(k), BK_UPLOAD,
              c_prefetch(k->norm_a, B_RES, 0, COPY, 0));
  expect_error(p, FDY_ERR_PLAN_NOT_A_WEIGHT, BK_UPLOAD, "setup", k->norm_a);
  fdy_plan_destroy(p);
}

static void test_rule_slot_too_small(void **state) {
  fixture *f = *state;
  const test_chain *ch = &f->ch;
  chain_opts wide = {.slot_bytes = 2 * TEST_W};
  /* the slot is smaller than the weight */
  fdy_plan *p = chain_plan(ch, (chain_opts){.slot_bytes = TEST_W / 2});
  expect_error(p, FDY_ERR_PLAN_SLOT_TOO_SMALL, CH_FETCH1, "step", SLOT);
  fdy_plan_destroy(p);
  /* the weight would end past the buffer */
  p = replace(chain_plan(ch, (chain_opts){0}), CH_FETCH1,
              c_prefetch(ch->w[1], SLOT, 256, COPY, 1));
  expect_error(p, FDY_ERR_PLAN_SLOT_TOO_SMALL, CH_FETCH1, "step", SLOT);
  fdy_plan_destroy(p);
  p = replace(chain_plan(ch, (chain_opts){0}), CH_UPLOAD_W0,
              c_prefetch(ch->w[0], RES, 256, COPY, 0));
  expect_error(p, FDY_ERR_PLAN_SLOT_TOO_SMALL, CH_UPLOAD_W0, "setup", RES);
  fdy_plan_destroy(p);
  /* an offset that is not a multiple of FDY_TENSOR_ALIGNMENT */
  p = replace(chain_plan(ch, wide), CH_FETCH1,
              c_prefetch(ch->w[1], SLOT, 128, COPY, 1));
  expect_error(p, FDY_ERR_PLAN_SLOT_TOO_SMALL, CH_FETCH1, "step", SLOT);
  fdy_plan_destroy(p);
  /* offset + bytes wraps 64 bits */
  p = replace(chain_plan(ch, wide), CH_FETCH1,
              c_prefetch(ch->w[1], SLOT, UINT64_MAX & ~(uint64_t)255, COPY, 1));
  expect_error(p, FDY_ERR_PLAN_SLOT_TOO_SMALL, CH_FETCH1, "step", SLOT);
  fdy_plan_destroy(p);
  /* A slot twice the weight takes it at offset 256. */
  p = replace(chain_plan(ch, wide), CH_FETCH1,
              c_prefetch(ch->w[1], SLOT, 256, COPY, 1));
  p = replace(p, CH_LAUNCH1, c_launch1(1, COMPUTE, 2, ch->w[1], SLOT, 256));
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
}

/* A slot is refilled once the copy stream waits for the previous reader's
 * launch event: stream order alone, no host wait. */
static void test_slot_reuse_by_stream_order(void **state) {
  fixture *f = *state;
  chain_opts o = {0};
  fdy_plan *p = chain_plan(&f->ch, o);
  for (size_t i = CH_LAUNCH0; i < CH_STEP_SYNC; i++) {
    const fdy_command *c = fdy_plan_command(p, i);
    assert_false(c->kind == FDY_CMD_WAIT && c->u.wait.host);
  }
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  /* A host wait for the reader works too. */
  p = replace(chain_plan(&f->ch, o), CH_REUSE_WAIT, c_wait_host(2));
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  /* Without the wait, w2 overwrites w1 while op1 may still read it. */
  p = without(chain_plan(&f->ch, o), CH_REUSE_WAIT);
  expect_error(p, FDY_ERR_PLAN_SLOT_BUSY, CH_FETCH2 - 1, "step", SLOT);
  fdy_plan_destroy(p);
  /* Waiting for the slot's transfer is not waiting for its reader. */
  p = replace(chain_plan(&f->ch, o), CH_REUSE_WAIT, c_wait_stream(1, COPY));
  expect_error(p, FDY_ERR_PLAN_SLOT_BUSY, CH_FETCH2, "step", SLOT);
  fdy_plan_destroy(p);
  /* Refilling on the reader's own stream is ordered by FIFO alone. */
  p = replace(chain_plan(&f->ch, o), CH_FETCH2,
              c_prefetch(f->ch.w[2], SLOT, 0, COMPUTE, 3));
  p = without(p, CH_REUSE_WAIT);
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  /* A wait on another stream does not order the copy stream. */
  p = replace(chain_plan(&f->ch, o), CH_REUSE_WAIT, c_wait_stream(2, AUX));
  expect_error(p, FDY_ERR_PLAN_SLOT_BUSY, CH_FETCH2, "step", SLOT);
  fdy_plan_destroy(p);
}

/* w1 at SLOT@0 on COPY and w2 at SLOT@w2_offset on w2_stream, both before
 * the launches that read them; `w2_waits_w1`: w2's stream first waits for
 * w1's transfer. */
static fdy_plan *two_transfer_plan(const test_chain *ch, uint64_t w2_offset,
                                   uint32_t w2_stream, bool w2_waits_w1) {
  fdy_plan *p = chain_begin(ch, (chain_opts){.slot_bytes = 2 * TEST_W});
  add(p, c_launch1(0, COMPUTE, 0, ch->w[0], RES, 0));
  add(p, c_prefetch(ch->w[1], SLOT, 0, COPY, 1)); /* step 1 */
  if (w2_waits_w1) {
    add(p, c_wait_stream(1, w2_stream));
  }
  add(p, c_prefetch(ch->w[2], SLOT, w2_offset, w2_stream, 3));
  add(p, c_wait_stream(1, COMPUTE));
  add(p, c_launch1(1, COMPUTE, 2, ch->w[1], SLOT, 0));
  add(p, c_wait_stream(3, COMPUTE));
  add(p, c_launch1(2, COMPUTE, 4, ch->w[2], SLOT, w2_offset));
  add(p, c_copy_out(ch->out[2], COMPUTE, 5));
  add(p, c_wait_host(5));
  chain_end(p);
  return p;
}

/* Transfers into the same bytes are ordered too (write after write), in
 * steps and in setup; disjoint bytes of one buffer need no order. */
static void test_slot_busy_write_after_write(void **state) {
  fixture *f = *state;
  fdy_plan *p = two_transfer_plan(&f->ch, 256, AUX, false);
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  p = two_transfer_plan(&f->ch, 0, AUX, false);
  expect_error(p, FDY_ERR_PLAN_SLOT_BUSY, at(p, "step", 2), "step", SLOT);
  fdy_plan_destroy(p);
  /* Two uploads into the same resident bytes on two streams. */
  const char *const all[] = {"012", NULL};
  p = resident_plan(&f->ind, all);
  expect_valid(p, NULL);
  p = replace(p, 3, c_prefetch(f->ind.w[1], 0, 0, COMPUTE, 1));
  expect_error(p, FDY_ERR_PLAN_SLOT_BUSY, 3, "setup", 0);
  fdy_plan_destroy(p);
}

/* ---- copies ---------------------------------------------------------- */

static void test_copy_input_rules(void **state) {
  fixture *f = *state;
  const test_block *k = &f->blk;
  /* copy_input of something that is not an input (no kind in the spec) */
  fdy_plan *p = replace(block_plan(k), BK_COPY_X, c_copy_in(k->cache, COPY, 1));
  expect_rejected(p, BK_COPY_X);
  fdy_plan_destroy(p);
  p = replace(block_plan(k), BK_COPY_X, c_copy_in(k->a, COPY, 1));
  expect_rejected(p, BK_COPY_X);
  fdy_plan_destroy(p);
  /* an input read before it was copied in this run */
  p = without(block_plan(k), BK_COPY_X);
  p = replace(p, BK_WAIT_IN - 1, c_wait_stream(0, COMPUTE));
  expect_error(p, FDY_ERR_PLAN_PRODUCER_NOT_AWAITED, BK_LAUNCH_NA - 1, "step",
               k->x);
  fdy_plan_destroy(p);
  /* copied, but the launch's stream did not wait for it */
  p = replace(block_plan(k), BK_WAIT_IN, c_wait_stream(0, COMPUTE));
  expect_error(p, FDY_ERR_PLAN_PRODUCER_NOT_AWAITED, BK_LAUNCH_NA, "step",
               k->x);
  fdy_plan_destroy(p);
  /* a host wait orders the copy before later work */
  p = replace(block_plan(k), BK_WAIT_IN, c_wait_host(1));
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
}

static void test_copy_output_rules(void **state) {
  fixture *f = *state;
  const test_block *k = &f->blk;
  /* y copied on COPY, which never waited for add_out */
  fdy_plan *p = replace(block_plan(k), BK_COPY_Y, c_copy_out(k->y, COPY, 6));
  expect_error(p, FDY_ERR_PLAN_PRODUCER_NOT_AWAITED, BK_COPY_Y, "step", k->y);
  fdy_plan_destroy(p);
  /* COPY waiting for add_out makes it valid */
  p = replace(block_plan(k), BK_COPY_Y, c_copy_out(k->y, COPY, 6));
  p = insert(p, "step", BK_COPY_Y - BK_COPY_STEP, c_wait_stream(5, COPY));
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  /* state and inputs have no producer in the run: copied out as they are */
  p = insert(block_plan(k), "step", 0, c_copy_out(k->cache, COPY, 7));
  p = insert(p, "step", 4, c_copy_out(k->x, COMPUTE, 8));
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  /* an activation produced only by another step: "(if any)" is about
   * state and inputs; another run's arena bytes are not this run's */
  const char *const steps[] = {"012", "1", NULL};
  p = resident_plan(&f->ind, steps);
  p = insert(p, "s1", 0, c_copy_out(f->ind.out[0], COMPUTE, 5));
  expect_error(p, FDY_ERR_PLAN_PRODUCER_NOT_AWAITED, at(p, "s1", 0), "s1",
               f->ind.out[0]);
  fdy_plan_destroy(p);
  /* a weight is not an output (no kind in the spec) */
  p = insert(block_plan(k), "step", 8, c_copy_out(k->norm, COMPUTE, 7));
  expect_rejected(p, BK_STEP_SYNC);
  fdy_plan_destroy(p);
}

/* ---- events ---------------------------------------------------------- */

static void test_rule_event_not_signalled(void **state) {
  fixture *f = *state;
  chain_opts o = {0};
  fdy_plan *p = replace(chain_plan(&f->ch, o), CH_WAIT2, c_wait_stream(7, 1));
  expect_error(p, FDY_ERR_PLAN_EVENT_NOT_SIGNALLED, CH_WAIT2, "step", 7);
  fdy_plan_destroy(p);
  /* waiting before the command that signals it */
  p = insert(chain_plan(&f->ch, o), "step", 0, c_wait_stream(1, COMPUTE));
  expect_error(p, FDY_ERR_PLAN_EVENT_NOT_SIGNALLED, CH_LAUNCH0, "step", 1);
  fdy_plan_destroy(p);
  /* signalled in setup: events are scoped to one section */
  p = replace(chain_plan(&f->ch, o), CH_UPLOAD_W0,
              c_prefetch(f->ch.w[0], RES, 0, COPY, 7));
  p = replace(p, CH_SETUP_SYNC, c_wait_host(7));
  expect_valid(p, NULL);
  p = insert(p, "step", 0, c_wait_host(7));
  expect_error(p, FDY_ERR_PLAN_EVENT_NOT_SIGNALLED, CH_LAUNCH0, "step", 7);
  fdy_plan_destroy(p);
}

static void test_rule_event_reused(void **state) {
  fixture *f = *state;
  /* by a launch */
  fdy_plan *p = replace(chain_plan(&f->ch, (chain_opts){0}), CH_LAUNCH2,
                        c_launch1(2, COMPUTE, 1, f->ch.w[2], SLOT, 0));
  expect_error(p, FDY_ERR_PLAN_EVENT_REUSED, CH_LAUNCH2, "step", 1);
  fdy_plan_destroy(p);
  /* by a copy */
  p = replace(block_plan(&f->blk), BK_COPY_X, c_copy_in(f->blk.x, COPY, 0));
  expect_error(p, FDY_ERR_PLAN_EVENT_REUSED, BK_COPY_X, "step", 0);
  fdy_plan_destroy(p);
  /* by an upload in setup */
  const char *const all[] = {"012", NULL};
  p = replace(resident_plan(&f->ind, all), 3,
              c_prefetch(f->ind.w[1], 0, TEST_W, COPY, 0));
  expect_error(p, FDY_ERR_PLAN_EVENT_REUSED, 3, "setup", 0);
  fdy_plan_destroy(p);
}

/* Events are scoped to a run: a step run twice (two steps with the same
 * commands and event ids) is valid, and a run cannot use the events or the
 * slot contents of another. */
static void test_step_run_twice(void **state) {
  fixture *f = *state;
  fdy_plan *p = chain_begin(&f->ch, (chain_opts){0});
  chain_step(p, &f->ch);
  section(p, "again");
  chain_step(p, &f->ch);
  chain_end(p);
  expect_valid(p, NULL);
  size_t again = at(p, "again", 0);
  /* waiting for an event of the other run */
  fdy_plan *q = insert(p, "again", 0, c_wait_host(5));
  expect_error(q, FDY_ERR_PLAN_EVENT_NOT_SIGNALLED, (int64_t)again, "again", 5);
  fdy_plan_destroy(q);
  /* binding w1 in the slot where the other run put it */
  p = chain_begin(&f->ch, (chain_opts){0});
  chain_step(p, &f->ch);
  section(p, "again");
  chain_step(p, &f->ch);
  chain_end(p);
  p = without(p, again + 2); /* COMPUTE waits e1 */
  p = without(p, again + 1); /* w1 -> SLOT */
  expect_error(p, FDY_ERR_PLAN_BINDING_MISMATCH, (int64_t)again + 1, "again",
               1);
  fdy_plan_destroy(p);
}

/* Every event is observed by the host at the end of its section. */
static void test_rule_unsynchronized_end(void **state) {
  fixture *f = *state;
  chain_opts o = {0};
  /* the host waits for op2, not for the copy of out2 */
  fdy_plan *p = replace(chain_plan(&f->ch, o), CH_STEP_SYNC, c_wait_host(4));
  expect_error(p, FDY_ERR_PLAN_UNSYNCHRONIZED_END, CH_RELEASE_RES, "step", 5);
  fdy_plan_destroy(p);
  /* a stream wait is not a host observation */
  p = replace(chain_plan(&f->ch, o), CH_STEP_SYNC, c_wait_stream(5, COPY));
  expect_error(p, FDY_ERR_PLAN_UNSYNCHRONIZED_END, CH_RELEASE_RES, "step", ANY);
  fdy_plan_destroy(p);
  /* setup */
  p = without(chain_plan(&f->ch, o), CH_SETUP_SYNC);
  expect_error(p, FDY_ERR_PLAN_UNSYNCHRONIZED_END, CH_SETUP_SYNC, "setup", 0);
  fdy_plan_destroy(p);
}

/* ---- launches -------------------------------------------------------- */

/* Steps launch different subsets of the ops, each in graph order. */
static void test_rule_op_order(void **state) {
  fixture *f = *state;
  const char *const subsets[] = {"02", "1", NULL};
  fdy_plan *p = resident_plan(&f->ind, subsets);
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  const char *const both_all[] = {"012", "012", NULL};
  p = resident_plan(&f->ind, both_all);
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  const char *const reversed[] = {"20", "1", NULL};
  p = resident_plan(&f->ind, reversed);
  expect_error(p, FDY_ERR_PLAN_OP_ORDER, at(p, "s0", 1), "s0", 0);
  fdy_plan_destroy(p);
  const char *const twice[] = {"002", "1", NULL};
  p = resident_plan(&f->ind, twice);
  expect_error(p, FDY_ERR_PLAN_OP_ORDER, at(p, "s0", 1), "s0", 0);
  fdy_plan_destroy(p);
}

static void test_rule_incomplete(void **state) {
  fixture *f = *state;
  const char *const missing1[] = {"02", NULL};
  fdy_plan *p = resident_plan(&f->ind, missing1);
  expect_error(p, FDY_ERR_PLAN_INCOMPLETE, fdy_plan_command_count(p), NULL, 1);
  fdy_plan_destroy(p);
  const char *const split[] = {"0", "2", NULL};
  p = resident_plan(&f->ind, split);
  expect_error(p, FDY_ERR_PLAN_INCOMPLETE, fdy_plan_command_count(p), NULL, 1);
  fdy_plan_destroy(p);
  const char *const none[] = {NULL};
  p = resident_plan(&f->ind, none);
  expect_error(p, FDY_ERR_PLAN_INCOMPLETE, fdy_plan_command_count(p), NULL, 0);
  fdy_plan_destroy(p);
}

/* A binding to a resident weight uploaded in setup needs no wait in the
 * step: every setup transfer is complete when a run starts. */
static void test_resident_binding_needs_no_wait(void **state) {
  fixture *f = *state;
  const char *const all[] = {"012", NULL};
  fdy_plan *p = resident_plan(&f->ind, all);
  const fdy_section *s = fdy_plan_section(p, 1);
  for (size_t i = 0; i + 1 < s->count; i++) {
    assert_int_equal(fdy_plan_command(p, s->first + i)->kind, FDY_CMD_LAUNCH);
  }
  expect_valid(p, NULL);
  /* bound at the offset of another weight */
  p = replace(p, at(p, "s0", 1),
              c_launch1(1, COMPUTE, 1, f->ind.w[1], 0, 2 * TEST_W));
  expect_error(p, FDY_ERR_PLAN_BINDING_MISMATCH, at(p, "s0", 1), "s0", 1);
  fdy_plan_destroy(p);
}

static void test_rule_binding_mismatch(void **state) {
  fixture *f = *state;
  const test_chain *ch = &f->ch;
  chain_opts o = {0};
  struct {
    const char *what;
    fdy_command launch;
  } cases[] = {
      {"no binding", c_launch(1, COMPUTE, 2)},
      {"extra weight",
       c_bind(c_launch1(1, COMPUTE, 2, ch->w[1], SLOT, 0), ch->w[0], RES, 0)},
      {"same weight twice",
       c_bind(c_launch1(1, COMPUTE, 2, ch->w[1], SLOT, 0), ch->w[1], SLOT, 0)},
      {"another weight", c_launch1(1, COMPUTE, 2, ch->w[0], RES, 0)},
      {"wrong buffer", c_launch1(1, COMPUTE, 2, ch->w[1], RES, 0)},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    print_message("binding case: %s\n", cases[i].what);
    fdy_plan *p = replace(chain_plan(ch, o), CH_LAUNCH1, cases[i].launch);
    expect_error(p, FDY_ERR_PLAN_BINDING_MISMATCH, CH_LAUNCH1, "step", 1);
    fdy_plan_destroy(p);
  }
  /* wrong offset inside a slot large enough for it */
  fdy_plan *p =
      replace(chain_plan(ch, (chain_opts){.slot_bytes = 2 * TEST_W}),
              CH_LAUNCH1, c_launch1(1, COMPUTE, 2, ch->w[1], SLOT, 256));
  expect_error(p, FDY_ERR_PLAN_BINDING_MISMATCH, CH_LAUNCH1, "step", 1);
  fdy_plan_destroy(p);
  /* w1's bytes were overwritten by w2 (the transfers ordered by FIFO/waits)
   * before op1 reads them: the latest transfer *into those bytes* is not
   * w1's */
  p = two_transfer_plan(ch, 0, AUX, true);
  expect_error(p, FDY_ERR_PLAN_BINDING_MISMATCH, at(p, "step", 5), "step", 1);
  fdy_plan_destroy(p);
  /* binding a view instead of its weight, binding an activation */
  p = replace(block_plan(&f->blk), BK_LAUNCH_NA,
              c_launch1(OP_NORM_A, COMPUTE, 2, f->blk.norm_a, B_RES, 0));
  expect_error2(p, FDY_ERR_PLAN_BINDING_MISMATCH, FDY_ERR_PLAN_NOT_A_WEIGHT,
                BK_LAUNCH_NA);
  fdy_plan_destroy(p);
  p = replace(chain_plan(ch, o), CH_LAUNCH1,
              c_bind(c_launch1(1, COMPUTE, 2, ch->w[1], SLOT, 0), ch->out[0],
                     ARENA, 0));
  expect_error2(p, FDY_ERR_PLAN_BINDING_MISMATCH, FDY_ERR_PLAN_NOT_A_WEIGHT,
                CH_LAUNCH1);
  fdy_plan_destroy(p);
}

/* Two ops read one weight through different views (the block), and one op
 * reads three views of one weight (a 4-bit matmul layer): each launch binds
 * the weight once. */
static void test_binding_views_of_one_weight(void **state) {
  fixture *f = *state;
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("layer", &g, NULL), FDY_OK);
  uint32_t step =
      add_input(g, "step", FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  uint32_t x = add_input(g, "x", FDY_DTYPE_F32, FDY_SHAPE(1, 64));
  uint32_t layer = add_weight(g, "layer", FDY_DTYPE_U8, FDY_SHAPE(2560));
  uint32_t q =
      add_view(g, "layer.q", layer, 0, FDY_DTYPE_U32, FDY_SHAPE(64, 8));
  uint32_t sc =
      add_view(g, "layer.scales", layer, 2048, FDY_DTYPE_F16, FDY_SHAPE(64, 2));
  uint32_t bi =
      add_view(g, "layer.biases", layer, 2304, FDY_DTYPE_F16, FDY_SHAPE(64, 2));
  uint32_t y = add_activation(g, "y", FDY_DTYPE_F32, FDY_SHAPE(1, 64));
  add_op(g, "mm", FDY_OP_MATMUL_Q4, (fdy_op_params){0},
         (uint32_t[]){step, x, q, sc, bi}, 5, y);
  fdy_plan_buffer buffers[] = {
      {FDY_BUFFER_SLOT, 2560}, {FDY_BUFFER_IO, 512}, {FDY_BUFFER_ARENA, 256}};
  fdy_plan *p = NULL;
  assert_int_equal(fdy_plan_create(g, 2560, 2, buffers, 3, 8, &p, NULL),
                   FDY_OK);
  place(p, step, 1, 0);
  place(p, x, 1, 256);
  place(p, y, 2, 0);
  add(p, c_alloc(0));
  add(p, c_alloc(1));
  add(p, c_alloc(2));
  section(p, "decode");
  add(p, c_copy_in(step, COPY, 0));              /* 3 */
  add(p, c_copy_in(x, COPY, 1));                 /* 4 */
  add(p, c_prefetch(layer, 0, 0, COPY, 2));      /* 5 */
  add(p, c_wait_stream(2, COMPUTE));             /* 6 */
  add(p, c_launch1(0, COMPUTE, 3, layer, 0, 0)); /* 7 */
  add(p, c_copy_out(y, COMPUTE, 4));             /* 8 */
  add(p, c_wait_host(4));                        /* 9 */
  section(p, "teardown");
  add(p, c_release(0));
  add(p, c_release(1));
  add(p, c_release(2));
  expect_valid(p, NULL);
  p = replace(p, 7, c_bind(c_launch1(0, COMPUTE, 3, layer, 0, 0), layer, 0, 0));
  expect_error(p, FDY_ERR_PLAN_BINDING_MISMATCH, 7, "decode", 0);
  fdy_plan_destroy(p);
  fdy_graph_destroy(g);

  /* The block's two norms share one resident weight. */
  p = block_plan(&f->blk);
  expect_valid(p, NULL);
  p = replace(p, BK_LAUNCH_NB,
              c_launch1(OP_NORM_B, COMPUTE, 4, f->blk.norm, B_RES, TEST_NORM));
  expect_error(p, FDY_ERR_PLAN_BINDING_MISMATCH, BK_LAUNCH_NB, "step",
               OP_NORM_B);
  fdy_plan_destroy(p);
}

static void test_rule_transfer_not_awaited(void **state) {
  fixture *f = *state;
  chain_opts o = {0};
  fdy_plan *p = without(chain_plan(&f->ch, o), CH_WAIT1);
  expect_error(p, FDY_ERR_PLAN_TRANSFER_NOT_AWAITED, CH_LAUNCH1 - 1, "step",
               ANY);
  fdy_plan_destroy(p);
  /* waiting for an older event of the copy stream is not enough */
  p = replace(chain_plan(&f->ch, o), CH_WAIT2, c_wait_stream(1, COMPUTE));
  expect_error(p, FDY_ERR_PLAN_TRANSFER_NOT_AWAITED, CH_LAUNCH2, "step", ANY);
  fdy_plan_destroy(p);
  /* a host wait issued after the launch does not order it */
  p = without(chain_plan(&f->ch, o), CH_WAIT1);
  p = insert(p, "step", CH_LAUNCH1 - CH_LAUNCH0, c_wait_host(1));
  expect_error(p, FDY_ERR_PLAN_TRANSFER_NOT_AWAITED, CH_LAUNCH1 - 1, "step",
               ANY);
  fdy_plan_destroy(p);
  /* An event carries its stream's clock when it is signalled, not later
   * waits of that stream: op0 runs on AUX (e0), then AUX waits for w1's
   * transfer; COMPUTE waiting for e0 is not waiting for the transfer. */
  p = replace(chain_plan(&f->ch, o), CH_LAUNCH0,
              c_launch1(0, AUX, 0, f->ch.w[0], RES, 0));
  p = replace(p, CH_WAIT1, c_wait_stream(1, AUX));
  p = insert(p, "step", 3, c_wait_stream(0, COMPUTE));
  expect_error(p, FDY_ERR_PLAN_TRANSFER_NOT_AWAITED, CH_LAUNCH1 + 1, "step",
               ANY);
  p = insert(p, "step", 4, c_wait_stream(1, COMPUTE));
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  /* a host wait before the launch is issued orders it */
  p = replace(chain_plan(&f->ch, o), CH_WAIT1, c_wait_host(1));
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  /* waiting for a later event of the same copy stream covers the earlier
   * transfer (FIFO + transitivity) */
  p = two_transfer_plan(&f->ch, 256, COPY, false);
  p = without(p, at(p, "step", 3)); /* COMPUTE waits e1 */
  p = insert(p, "step", 3, c_wait_stream(3, COMPUTE));
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  /* through another stream: AUX waited for w1's transfer before w2's,
   * COMPUTE waits only for w2's */
  p = two_transfer_plan(&f->ch, 256, AUX, true);
  p = replace(p, at(p, "step", 4), c_wait_stream(3, COMPUTE));
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
}

static void test_rule_producer_not_awaited(void **state) {
  fixture *f = *state;
  /* op1 on COPY reads out0 from op0 on COMPUTE */
  fdy_plan *p = replace(chain_plan(&f->ch, (chain_opts){0}), CH_LAUNCH1,
                        c_launch1(1, COPY, 2, f->ch.w[1], SLOT, 0));
  expect_error(p, FDY_ERR_PLAN_PRODUCER_NOT_AWAITED, CH_LAUNCH1, "step",
               f->ch.out[0]);
  fdy_plan_destroy(p);
  /* the producer ran in another step: it must run in this run */
  const char *const split[] = {"01", "2", NULL};
  p = resident_plan(&f->ch, split);
  expect_error(p, FDY_ERR_PLAN_PRODUCER_NOT_AWAITED, at(p, "s1", 0), "s1",
               f->ch.out[1]);
  fdy_plan_destroy(p);
  /* the block with norm_b on AUX: add_out must wait for it */
  p = without(block_plan_aux(&f->blk), AX_WAIT_B);
  expect_error(p, FDY_ERR_PLAN_PRODUCER_NOT_AWAITED, AX_LAUNCH_AO - 1, "step",
               f->blk.b);
  fdy_plan_destroy(p);
}

/* b shares a's bytes. a's last reader is add_a (COMPUTE); norm_b writes b.
 * Safe when norm_b is ordered after add_a; a hazard when not. */
static void test_placement_hazard_across_streams(void **state) {
  fixture *f = *state;
  const test_block *k = &f->blk;
  /* one stream: stream order makes the sharing safe */
  fdy_plan *p = block_plan(k);
  place(p, k->b, B_ARENA, 0);
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  /* AUX waits for add_a */
  p = block_plan_aux(k);
  place(p, k->b, B_ARENA, 0);
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
  /* AUX waits only for norm_a, the writer of a: add_a may still read it */
  p = replace(block_plan_aux(k), AX_ORDER, c_wait_stream(2, AUX));
  place(p, k->b, B_ARENA, 0);
  expect_error(p, FDY_ERR_PLAN_PLACEMENT_HAZARD, AX_LAUNCH_NB, "step", ANY);
  fdy_plan_destroy(p);
  /* AUX waits for nothing of COMPUTE */
  p = without(block_plan_aux(k), AX_ORDER);
  place(p, k->b, B_ARENA, 0);
  expect_error(p, FDY_ERR_PLAN_PLACEMENT_HAZARD, AX_LAUNCH_NB - 1, "step", ANY);
  fdy_plan_destroy(p);
  /* without the sharing, the same order is fine */
  p = without(block_plan_aux(k), AX_ORDER);
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
}

/* b shares c's bytes while both are live (add_out reads both): no order
 * can make that safe, even on one stream. */
static void test_placement_hazard_both_live(void **state) {
  fixture *f = *state;
  fdy_plan *p = block_plan(&f->blk);
  place(p, f->blk.b, B_ARENA, TEST_ROW);
  expect_hazard(p, BK_LAUNCH_NB, BK_LAUNCH_AO, "step");
  fdy_plan_destroy(p);
}

/* An op whose output overlaps its own input: add_a writes c over a while
 * reading a. Both are live during the op (the spec's "never live at once")
 * and no kind in ops.h promises in-place operation (a matmul would read
 * what it already overwrote), so the safe reading rejects it. */
static void test_placement_hazard_in_place(void **state) {
  fixture *f = *state;
  fdy_plan *p = block_plan(&f->blk);
  place(p, f->blk.c, B_ARENA, 0);
  expect_error(p, FDY_ERR_PLAN_PLACEMENT_HAZARD, BK_LAUNCH_AA, "step", ANY);
  fdy_plan_destroy(p);
}

/* State persists across runs, so two state tensors whose bytes overlap are
 * always live at once: an attention whose k and v caches share bytes
 * corrupts one with the other (the op reads and updates both in place). */
static void test_placement_hazard_state_overlap(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("attention", &g, NULL), FDY_OK);
  fdy_shape row = FDY_SHAPE(1, 64), cache = FDY_SHAPE(1, 4, 64);
  uint32_t step =
      add_input(g, "step", FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  uint32_t q = add_input(g, "q", FDY_DTYPE_F32, row);
  uint32_t kk = add_input(g, "k", FDY_DTYPE_F32, row);
  uint32_t vv = add_input(g, "v", FDY_DTYPE_F32, row);
  uint32_t kc = add_state(g, "k_cache", FDY_DTYPE_F32, cache);
  uint32_t vc = add_state(g, "v_cache", FDY_DTYPE_F32, cache);
  uint32_t out = add_activation(g, "out", FDY_DTYPE_F32, row);
  fdy_op_params params = {.attention = {1, 1, 64}};
  add_op(g, "attn", FDY_OP_ATTENTION, params,
         (uint32_t[]){step, q, kk, vv, kc, vc}, 6, out);
  fdy_plan_buffer buffers[] = {
      {FDY_BUFFER_IO, 1024}, {FDY_BUFFER_STATE, 2048}, {FDY_BUFFER_ARENA, 256}};
  fdy_plan *p = NULL;
  assert_int_equal(fdy_plan_create(g, 0, 2, buffers, 3, 8, &p, NULL), FDY_OK);
  place(p, step, 0, 0);
  place(p, q, 0, 256);
  place(p, kk, 0, 512);
  place(p, vv, 0, 768);
  place(p, kc, 1, 0);
  place(p, vc, 1, 1024);
  place(p, out, 2, 0);
  add(p, c_alloc(0));
  add(p, c_alloc(1));
  add(p, c_alloc(2));
  section(p, "decode");
  add(p, c_copy_in(step, COPY, 0));
  add(p, c_copy_in(q, COPY, 1));
  add(p, c_copy_in(kk, COPY, 2));
  add(p, c_copy_in(vv, COPY, 3));
  add(p, c_wait_stream(3, COMPUTE));
  add(p, c_launch(0, COMPUTE, 4));
  add(p, c_copy_out(out, COMPUTE, 5));
  add(p, c_wait_host(5));
  section(p, "teardown");
  add(p, c_release(0));
  add(p, c_release(1));
  add(p, c_release(2));
  expect_valid(p, NULL);
  place(p, vc, 1, 0);
  fdy_error err;
  fdy_error_clear(&err);
  fdy_status st = fdy_plan_validate(p, NULL, &err);
  if (st != FDY_ERR_PLAN_PLACEMENT_HAZARD) {
    fail_msg("overlapping caches: got %s: %s", fdy_status_name(st),
             err.message);
  }
  fdy_plan_destroy(p);
  fdy_graph_destroy(g);
}

/* Copies are accesses too: an input copied over another live input, an
 * input copied again while launches may still read it, an activation
 * copied out after another one overwrote its bytes. */
static void test_placement_hazard_copies(void **state) {
  fixture *f = *state;
  const test_block *k = &f->blk;
  fdy_plan *p = block_plan(k);
  place(p, k->x, B_IO, 0); /* over step: inputs never share bytes */
  expect_error(p, FDY_ERR_PLAN_PLACEMENT_HAZARD, -1, NULL, k->x);
  fdy_plan_destroy(p);
  p = insert(block_plan(k), "step", BK_STEP_SYNC - BK_COPY_STEP,
             c_copy_in(k->x, COPY, 7));
  expect_error(p, FDY_ERR_PLAN_PLACEMENT_HAZARD, BK_STEP_SYNC, "step", ANY);
  fdy_plan_destroy(p);
  p = insert(block_plan(k), "step", BK_COPY_Y - BK_COPY_STEP,
             c_copy_out(k->a, COMPUTE, 7));
  place(p, k->b, B_ARENA, 0); /* b overwrites a; the copy reads a after */
  expect_hazard(p, BK_LAUNCH_NB, BK_COPY_Y, "step");
  fdy_plan_destroy(p);
}

/* A copy_output reading a is a reader too: norm_b may not overwrite a's
 * bytes before the copy completed. */
static void test_placement_hazard_copy_output(void **state) {
  fixture *f = *state;
  const test_block *k = &f->blk;
  size_t pos = BK_LAUNCH_AA - BK_COPY_STEP; /* after norm_a */
  fdy_plan *p = insert(block_plan(k), "step", pos, c_wait_stream(2, COPY));
  p = insert(p, "step", pos + 1, c_copy_out(k->a, COPY, 7));
  place(p, k->b, B_ARENA, 0);
  /* add_a at BK_LAUNCH_AA + 2, norm_b at BK_LAUNCH_NB + 2 */
  expect_error(p, FDY_ERR_PLAN_PLACEMENT_HAZARD, BK_LAUNCH_NB + 2, "step", ANY);
  p = insert(p, "step", pos + 3, c_wait_stream(7, COMPUTE));
  expect_valid(p, NULL);
  fdy_plan_destroy(p);
}

/* ---- placements ------------------------------------------------------ */

static void test_rule_placement(void **state) {
  fixture *f = *state;
  const test_block *k = &f->blk;
  struct {
    const char *what;
    uint32_t tensor, buffer;
    uint64_t offset;
  } cases[] = {
      {"unplaced activation", k->a, FDY_NO_BUFFER, 0},
      {"activation in state", k->a, B_STATE, 0},
      {"activation in resident", k->a, B_RES, 0},
      {"activation in io", k->a, B_IO, 512},
      {"state in the arena", k->cache, B_ARENA, 4 * TEST_ROW},
      {"input in the arena", k->x, B_ARENA, 4 * TEST_ROW},
      {"unplaced input", k->step, FDY_NO_BUFFER, 0},
      {"unaligned", k->a, B_ARENA, 4 * TEST_ROW + 8},
      {"past the end", k->y, B_ARENA, ARENA_BYTES - 256},
      {"wrapping", k->y, B_ARENA, UINT64_MAX & ~(uint64_t)255},
      {"placed weight", k->norm, B_RES, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    print_message("placement case: %s\n", cases[i].what);
    fdy_plan *p = block_plan(k);
    place(p, cases[i].tensor, cases[i].buffer, cases[i].offset);
    expect_error(p, FDY_ERR_PLAN_PLACEMENT, ANY, NULL, cases[i].tensor);
    fdy_plan_destroy(p);
  }
}

/* An unplaced tensor's message says so instead of printing the
 * FDY_NO_BUFFER sentinel as a buffer, and a placed weight's names no
 * "no buffer" class (issue #31: the message text is the fix). */
static void test_rule_placement_message(void **state) {
  fixture *f = *state;
  const test_block *k = &f->blk;
  struct {
    uint32_t tensor, buffer;
    const char *says;
  } cases[] = {
      {k->a, FDY_NO_BUFFER, "has no placement"},
      {k->step, FDY_NO_BUFFER, "has no placement"},
      {k->norm, B_RES, "a weight takes no placement"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fdy_plan *p = block_plan(k);
    place(p, cases[i].tensor, cases[i].buffer, 0);
    fdy_error err;
    fdy_error_clear(&err);
    assert_int_equal(fdy_plan_validate(p, NULL, &err), FDY_ERR_PLAN_PLACEMENT);
    assert_int_equal(err.kind, FDY_ERR_PLAN_PLACEMENT);
    assert_int_equal(err.ids[0], cases[i].tensor);
    assert_int_equal(err.ids[1], cases[i].buffer == FDY_NO_BUFFER
                                     ? -1
                                     : (int64_t)cases[i].buffer);
    if (strstr(err.message, "4294967295") != NULL ||
        strstr(err.message, "a no buffer") != NULL ||
        strstr(err.message, cases[i].says) == NULL) {
      fail_msg("case %zu: '%s'", i, err.message);
    }
    fdy_plan_destroy(p);
  }
}

/* ---- unknown ids ----------------------------------------------------- */

static void test_rule_unknown_id(void **state) {
  fixture *f = *state;
  const test_chain *ch = &f->ch;
  const uint32_t w1 = ch->w[1];
  const uint32_t no_buffer = 3, no_stream = CHAIN_STREAMS,
                 no_event = CHAIN_EVENTS, no_tensor = 99, no_op = 3;
  struct {
    size_t index;
    fdy_command c;
    int64_t bad;
  } cases[] = {
      {CH_ALLOC_RES, c_alloc(no_buffer), no_buffer},
      {CH_UPLOAD_W0, c_prefetch(no_tensor, RES, 0, COPY, 0), no_tensor},
      {CH_UPLOAD_W0, c_prefetch(ch->w[0], no_buffer, 0, COPY, 0), no_buffer},
      {CH_UPLOAD_W0, c_prefetch(ch->w[0], RES, 0, no_stream, 0), no_stream},
      {CH_UPLOAD_W0, c_prefetch(ch->w[0], RES, 0, COPY, no_event), no_event},
      {CH_SETUP_SYNC, c_wait_host(no_event), no_event},
      {CH_FETCH1, c_prefetch(w1, SLOT, 0, COPY, no_event), no_event},
      {CH_WAIT1, c_wait_stream(no_event, COMPUTE), no_event},
      {CH_WAIT1, c_wait_stream(1, no_stream), no_stream},
      {CH_LAUNCH1, c_launch1(no_op, COMPUTE, 2, w1, SLOT, 0), no_op},
      {CH_LAUNCH1, c_launch1(1, no_stream, 2, w1, SLOT, 0), no_stream},
      {CH_LAUNCH1, c_launch1(1, COMPUTE, no_event, w1, SLOT, 0), no_event},
      {CH_LAUNCH1, c_launch1(1, COMPUTE, 2, no_tensor, SLOT, 0), no_tensor},
      {CH_LAUNCH1, c_launch1(1, COMPUTE, 2, w1, no_buffer, 0), no_buffer},
      {CH_COPY_OUT, c_copy_out(no_tensor, COMPUTE, 5), no_tensor},
      {CH_COPY_OUT, c_copy_out(ch->out[2], no_stream, 5), no_stream},
      {CH_COPY_OUT, c_copy_out(ch->out[2], COMPUTE, no_event), no_event},
      {CH_RELEASE_ARENA, c_release(no_buffer), no_buffer},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    print_message("unknown id case %zu\n", i);
    fdy_plan *p =
        replace(chain_plan(ch, (chain_opts){0}), cases[i].index, cases[i].c);
    const char *sec = cases[i].index < CH_LAUNCH0       ? "setup"
                      : cases[i].index < CH_RELEASE_RES ? "step"
                                                        : "teardown";
    expect_error(p, FDY_ERR_PLAN_UNKNOWN_ID, cases[i].index, sec, cases[i].bad);
    fdy_plan_destroy(p);
  }
  /* copy_input fields */
  const test_block *k = &f->blk;
  fdy_command copies[] = {c_copy_in(no_tensor, COPY, 0),
                          c_copy_in(k->step, BLOCK_STREAMS, 0),
                          c_copy_in(k->step, COPY, BLOCK_EVENTS)};
  int64_t bad[] = {no_tensor, BLOCK_STREAMS, BLOCK_EVENTS};
  for (size_t i = 0; i < 3; i++) {
    fdy_plan *p = replace(block_plan(k), BK_COPY_STEP, copies[i]);
    expect_error(p, FDY_ERR_PLAN_UNKNOWN_ID, BK_COPY_STEP, "step", bad[i]);
    fdy_plan_destroy(p);
  }
  /* a placement in a buffer outside the table */
  fdy_plan *p = block_plan(k);
  place(p, k->a, 9, 0);
  expect_error(p, FDY_ERR_PLAN_UNKNOWN_ID, ANY, NULL, 9);
  fdy_plan_destroy(p);
}

/* ---- order of errors ------------------------------------------------- */

static void test_first_error_in_command_order(void **state) {
  fixture *f = *state;
  fdy_plan *p = without(chain_plan(&f->ch, (chain_opts){0}), CH_RELEASE_SLOT);
  p = replace(p, CH_WAIT2, c_wait_stream(7, COMPUTE)); /* not signalled */
  p = replace(p, CH_LAUNCH2, c_launch(2, COMPUTE, 4)); /* no binding */
  expect_error(p, FDY_ERR_PLAN_EVENT_NOT_SIGNALLED, CH_WAIT2, "step", 7);
  p = without(p, CH_SETUP_SYNC); /* unsynchronized setup comes first */
  expect_error(p, FDY_ERR_PLAN_UNSYNCHRONIZED_END, CH_SETUP_SYNC, "setup", 0);
  fdy_plan_destroy(p);
}

/* ---- summary --------------------------------------------------------- */

static void test_summary(void **state) {
  fixture *f = *state;
  fdy_plan_summary s;
  fdy_plan *p = chain_plan(&f->ch, (chain_opts){0});
  expect_valid(p, &s);
  assert_int_equal(s.commands, CH_COUNT);
  assert_int_equal(s.ops, 3);
  assert_int_equal(s.buffers, 3);
  assert_int_equal(s.class_bytes[FDY_BUFFER_RESIDENT], TEST_W);
  assert_int_equal(s.class_bytes[FDY_BUFFER_SLOT], TEST_W);
  assert_int_equal(s.class_bytes[FDY_BUFFER_ARENA], 3 * 256);
  assert_int_equal(s.class_bytes[FDY_BUFFER_STATE], 0);
  assert_int_equal(s.class_bytes[FDY_BUFFER_IO], 0);
  assert_int_equal(s.peak_weight_bytes, 2 * TEST_W);
  assert_int_equal(s.setup_transfer_bytes, TEST_W);
  assert_int_equal(s.step_transfer_bytes, 2 * TEST_W);
  assert_int_equal(s.streams, 2); /* of CHAIN_STREAMS */
  /* a stream that only waits counts */
  p = insert(p, "step", CH_RELEASE_RES - CH_LAUNCH0, c_wait_stream(5, AUX));
  expect_valid(p, &s);
  assert_int_equal(s.streams, 3);
  fdy_plan_destroy(p);

  /* A buffer of the table that is never allocated has no class bytes. */
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("empty", &g, NULL), FDY_OK);
  fdy_plan_buffer table[] = {{FDY_BUFFER_RESIDENT, 256},
                             {FDY_BUFFER_SLOT, 512},
                             {FDY_BUFFER_ARENA, 1024}};
  assert_int_equal(fdy_plan_create(g, 256, 1, table, 3, 0, &p, NULL), FDY_OK);
  add(p, c_alloc(0));
  add(p, c_alloc(2));
  section(p, "teardown");
  add(p, c_release(2));
  add(p, c_release(0));
  expect_valid(p, &s);
  assert_int_equal(s.class_bytes[FDY_BUFFER_RESIDENT], 256);
  assert_int_equal(s.class_bytes[FDY_BUFFER_SLOT], 0);
  assert_int_equal(s.class_bytes[FDY_BUFFER_ARENA], 1024);
  assert_int_equal(s.peak_weight_bytes, 256);
  assert_int_equal(s.setup_transfer_bytes, 0);
  assert_int_equal(s.streams, 0);
  fdy_plan_destroy(p);
  fdy_graph_destroy(g);

  /* Two steps: the one with the most transfer bytes counts (not the sum,
   * not the last). */
  p = chain_begin(&f->ch, (chain_opts){0});
  chain_step(p, &f->ch);
  section(p, "light");
  add(p, c_launch1(0, COMPUTE, 0, f->ch.w[0], RES, 0));
  add(p, c_prefetch(f->ch.w[1], SLOT, 0, COPY, 1));
  add(p, c_wait_stream(1, COMPUTE));
  add(p, c_launch1(1, COMPUTE, 2, f->ch.w[1], SLOT, 0));
  add(p, c_copy_out(f->ch.out[1], COMPUTE, 3));
  add(p, c_wait_host(3));
  chain_end(p);
  expect_valid(p, &s);
  assert_int_equal(s.commands, CH_COUNT + 6);
  assert_int_equal(s.step_transfer_bytes, 2 * TEST_W);
  assert_int_equal(s.setup_transfer_bytes, TEST_W);
  fdy_plan_destroy(p);

  /* The block: state, io and arena bytes are reported per class; three
   * streams of four run work. */
  p = block_plan_aux(&f->blk);
  expect_valid(p, &s);
  assert_int_equal(s.ops, 4);
  assert_int_equal(s.buffers, 4);
  assert_int_equal(s.class_bytes[FDY_BUFFER_RESIDENT], 2 * TEST_NORM);
  assert_int_equal(s.class_bytes[FDY_BUFFER_SLOT], 0);
  assert_int_equal(s.class_bytes[FDY_BUFFER_ARENA], ARENA_BYTES);
  assert_int_equal(s.class_bytes[FDY_BUFFER_STATE], TEST_ROW);
  assert_int_equal(s.class_bytes[FDY_BUFFER_IO], 1024);
  assert_int_equal(s.peak_weight_bytes, 2 * TEST_NORM);
  assert_int_equal(s.setup_transfer_bytes, 2 * TEST_NORM);
  assert_int_equal(s.step_transfer_bytes, 0);
  assert_int_equal(s.streams, 3);
  fdy_plan_destroy(p);
}

/* Summed class bytes are checked arithmetic too: two arena buffers of
 * 2^63 bytes are an overflow the user sees (DESIGN: never a wrap), not a
 * summary with class_bytes[arena] = 0. */
static void test_summary_overflow(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_plan *p = NULL;
  assert_int_equal(fdy_graph_create("empty", &g, NULL), FDY_OK);
  fdy_plan_buffer huge[] = {{FDY_BUFFER_ARENA, (uint64_t)1 << 63},
                            {FDY_BUFFER_ARENA, (uint64_t)1 << 63}};
  assert_int_equal(fdy_plan_create(g, 0, 1, huge, 2, 0, &p, NULL), FDY_OK);
  add(p, c_alloc(0));
  add(p, c_alloc(1));
  section(p, "teardown");
  add(p, c_release(0));
  add(p, c_release(1));
  expect_error(p, FDY_ERR_OVERFLOW, 1, "setup", ANY);
  fdy_plan_destroy(p);
  fdy_graph_destroy(g);
}

/* ---- planner --------------------------------------------------------- */

/* The planner's plans pass validation (its contract), all resident or
 * streamed through 1..3 slots, with one step or two steps launching
 * different subsets. */
static void test_planner_plans_validate(void **state) {
  (void)state;
  const uint64_t budgets[] = {TEST_W, 2 * TEST_W, 3 * TEST_W, 8 * TEST_W};
  for (size_t layers = 1; layers <= 4; layers++) {
    test_chain ch = chain_make(layers, false);
    fdy_op_id all[TEST_MAX_OPS], even[TEST_MAX_OPS], odd[TEST_MAX_OPS];
    fdy_tensor_id last = {ch.out[layers - 1]}, first = {ch.out[0]};
    size_t ne = 0, no = 0;
    for (uint32_t i = 0; i < layers; i++) {
      all[i].v = i;
      if (i % 2 == 0) {
        even[ne++].v = i;
      } else {
        odd[no++].v = i;
      }
    }
    fdy_plan_step one[] = {{"decode", all, layers, &last, 1}};
    fdy_plan_step two[] = {{"even", even, ne, &first, 1},
                           {"odd", odd, no, NULL, 0}};
    for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++) {
      for (uint32_t buffers = 1; buffers <= 3; buffers++) {
        fdy_planner_options o = {budgets[b], buffers, 0};
        if (budgets[b] < buffers * TEST_W && budgets[b] < layers * TEST_W) {
          continue; /* below N slots */
        }
        for (int split = 0; split < (layers > 1 ? 2 : 1); split++) {
          fdy_plan *p = NULL;
          fdy_error err;
          fdy_status st = fdy_plan_build(ch.graph, split ? two : one,
                                         split ? 2 : 1, &o, &p, &err);
          if (st != FDY_OK) {
            fail_msg("planner, %zu layers, budget %llu, %u buffers: %s", layers,
                     (unsigned long long)budgets[b], buffers, err.message);
          }
          expect_valid(p, NULL);
          fdy_plan_destroy(p);
        }
      }
    }
    fdy_graph_destroy(ch.graph);
  }
}

/* A model-shaped graph for the residency order: op 0 reads "embed" (2048
 * bytes), ops 1-4 read "layer0" (768 bytes, the largest layer) and
 * "layer1".."layer3" (512), op 5 reads "head" (256) and op 6 reads "embed"
 * again (a tied LM head). Each op is a checksum writing "out<i>"; the
 * step "decode" runs every op and copies out6 out. With `ranked`, embed
 * and head have residency priority 1. Costs with two buffers (resident
 * prefix + slots of the largest weight left): {} 4096, {embed} 3584,
 * {embed, head} 3840, + layer0 4096, + layer1 4608; everything 4608. */
enum {
  MW_EMBED,
  MW_LAYER0,
  MW_LAYER1,
  MW_LAYER2,
  MW_LAYER3,
  MW_HEAD,
  MW_COUNT
};
typedef struct model_graph {
  fdy_graph *graph;
  uint32_t w[MW_COUNT];
  fdy_op_id ops[7];
  fdy_tensor_id out;
} model_graph;

static model_graph model_make(bool ranked) {
  static const char *const names[MW_COUNT] = {"embed",  "layer0", "layer1",
                                              "layer2", "layer3", "head"};
  static const uint64_t bytes[MW_COUNT] = {2048, 768, 512, 512, 512, 256};
  static const int reads[7] = {MW_EMBED,  MW_LAYER0, MW_LAYER1, MW_LAYER2,
                               MW_LAYER3, MW_HEAD,   MW_EMBED};
  model_graph m;
  assert_int_equal(fdy_graph_create("model", &m.graph, NULL), FDY_OK);
  for (int i = 0; i < MW_COUNT; i++) {
    m.w[i] = add_weight(m.graph, names[i], FDY_DTYPE_U8, FDY_SHAPE(bytes[i]));
  }
  for (uint32_t o = 0; o < 7; o++) {
    char name[16];
    snprintf(name, sizeof name, "out%u", o);
    uint32_t out = add_activation(m.graph, name, FDY_DTYPE_U64, FDY_SHAPE(1));
    snprintf(name, sizeof name, "op%u", o);
    uint32_t w = m.w[reads[o]];
    m.ops[o].v =
        add_op(m.graph, name, FDY_OP_CHECKSUM, (fdy_op_params){0}, &w, 1, out);
    m.out.v = out;
  }
  if (ranked) {
    assert_int_equal(fdy_graph_set_residency_priority(
                         m.graph, (fdy_tensor_id){m.w[MW_EMBED]}, 1, NULL),
                     FDY_OK);
    assert_int_equal(fdy_graph_set_residency_priority(
                         m.graph, (fdy_tensor_id){m.w[MW_HEAD]}, 1, NULL),
                     FDY_OK);
  }
  return m;
}

static fdy_status model_plan(const model_graph *m, uint64_t budget,
                             uint32_t buffers, fdy_plan **out, fdy_error *err) {
  fdy_plan_step step = {"decode", m->ops, 7, &m->out, 1};
  fdy_planner_options o = {budget, buffers, 0};
  return fdy_plan_build(m->graph, &step, 1, &o, out, err);
}

/* Prefetches of weight w in section `name`. */
static uint32_t prefetch_count(const fdy_plan *p, const char *name,
                               uint32_t w) {
  const fdy_section *sec = fdy_plan_section(p, fdy_plan_find_section(p, name));
  uint32_t count = 0;
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *c = fdy_plan_command(p, i);
    count += c->kind == FDY_CMD_PREFETCH && c->u.prefetch.weight.v == w;
  }
  return count;
}

/* Which weights a plan keeps resident (uploaded by setup, never streamed),
 * as a bit mask over MW_*, checking that every other weight streams. */
static unsigned resident_mask(const model_graph *m, const fdy_plan *p) {
  unsigned mask = 0;
  for (int i = 0; i < MW_COUNT; i++) {
    uint32_t setup = prefetch_count(p, "setup", m->w[i]);
    uint32_t step = prefetch_count(p, "decode", m->w[i]);
    assert_true((setup == 1 && step == 0) || (setup == 0 && step >= 1));
    mask |= (unsigned)setup << i;
  }
  return mask;
}

#define MW(i) (1u << (i))

/* The residency order: priority first (embed and head), then first use;
 * the longest prefix that fits with N slots of the largest weight left to
 * stream stays resident, the slots sized to that weight. */
static void test_planner_residency_order(void **state) {
  (void)state;
  model_graph m = model_make(true);
  const struct {
    uint64_t budget;
    unsigned resident;
    uint64_t slot_bytes;
  } cases[] = {
      {3584, MW(MW_EMBED), 768},               /* the minimum */
      {3839, MW(MW_EMBED), 768},               /* head streams */
      {3840, MW(MW_EMBED) | MW(MW_HEAD), 768}, /* layers stream */
      {4095, MW(MW_EMBED) | MW(MW_HEAD), 768}, /* one short */
      {4096, MW(MW_EMBED) | MW(MW_HEAD) | MW(MW_LAYER0),
       512}, /* slot shrinks */
      {4607, MW(MW_EMBED) | MW(MW_HEAD) | MW(MW_LAYER0), 512},
      {4608, (1u << MW_COUNT) - 1, 0}, /* everything */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fdy_plan *p = NULL;
    fdy_error err;
    fdy_plan_summary sum;
    if (model_plan(&m, cases[i].budget, 2, &p, &err) != FDY_OK) {
      fail_msg("budget %llu: %s", (unsigned long long)cases[i].budget,
               err.message);
    }
    expect_valid(p, &sum);
    assert_int_equal(resident_mask(&m, p), cases[i].resident);
    assert_int_equal(sum.class_bytes[FDY_BUFFER_SLOT], 2 * cases[i].slot_bytes);
    for (uint32_t b = 0; b < fdy_plan_buffer_count(p); b++) {
      const fdy_plan_buffer *buf = fdy_plan_buffer_at(p, b);
      if (buf->cls == FDY_BUFFER_SLOT) {
        assert_int_equal(buf->bytes, cases[i].slot_bytes);
      }
    }
    assert_true(sum.peak_weight_bytes <= cases[i].budget);
    /* the tied reader of a resident embed needs no second copy */
    if (cases[i].resident & MW(MW_EMBED)) {
      assert_int_equal(prefetch_count(p, "decode", m.w[MW_EMBED]), 0);
    }
    fdy_plan_destroy(p);
  }
  /* one buffer: everything streams through a slot of the embed's size,
   * and the head, later in the order, still fits beside it */
  fdy_plan *one = NULL;
  fdy_plan_summary sum;
  assert_int_equal(model_plan(&m, 2048 + 256, 1, &one, NULL), FDY_OK);
  expect_valid(one, &sum);
  assert_int_equal(resident_mask(&m, one), MW(MW_HEAD));
  assert_int_equal(sum.class_bytes[FDY_BUFFER_SLOT], 2048);
  fdy_plan_destroy(one);
  assert_int_equal(model_plan(&m, 2048 + 255, 1, &one, NULL), FDY_OK);
  assert_int_equal(resident_mask(&m, one), 0);
  fdy_plan_destroy(one);
  fdy_graph_destroy(m.graph);

  /* without priorities the order is first use: at 3840 the first layer
   * stays resident instead of the head */
  m = model_make(false);
  fdy_plan *p = NULL;
  assert_int_equal(model_plan(&m, 3840, 2, &p, NULL), FDY_OK);
  expect_valid(p, NULL);
  assert_int_equal(resident_mask(&m, p), MW(MW_EMBED) | MW(MW_LAYER0));
  fdy_plan_destroy(p);
  fdy_graph_destroy(m.graph);
}

/* Below the smallest budget of any plan: FDY_ERR_BUDGET with expected = the
 * budget and actual = that minimum (the cheapest split, or every weight
 * resident when that is cheaper), nothing returned. */
static void test_planner_budget_minimum(void **state) {
  (void)state;
  model_graph m = model_make(true);
  const struct {
    uint32_t buffers;
    uint64_t minimum;
  } cases[] = {
      {1, 2048}, /* everything through one slot of the embed's size */
      {2, 2048 + 2 * 768},
      {3, 2048 + 3 * 768},
      {4, 4608}, /* embed + 4 slots: every weight resident is cheaper */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fdy_plan *p = (fdy_plan *)(uintptr_t)1;
    fdy_error err;
    fdy_error_clear(&err);
    assert_int_equal(
        model_plan(&m, cases[i].minimum - 1, cases[i].buffers, &p, &err),
        FDY_ERR_BUDGET);
    assert_null(p);
    assert_int_equal(err.kind, FDY_ERR_BUDGET);
    assert_int_equal(err.expected, cases[i].minimum - 1);
    assert_int_equal(err.actual, cases[i].minimum);
    char text[32];
    snprintf(text, sizeof text, "at least %llu bytes",
             (unsigned long long)cases[i].minimum);
    assert_non_null(strstr(err.message, text));
    /* exactly the minimum plans and validates */
    assert_int_equal(
        model_plan(&m, cases[i].minimum, cases[i].buffers, &p, &err), FDY_OK);
    fdy_plan_summary sum;
    expect_valid(p, &sum);
    assert_true(sum.peak_weight_bytes <= cases[i].minimum);
    fdy_plan_destroy(p);
  }
  fdy_graph_destroy(m.graph);
}

/* The same graph, steps and options give the same plan, command for
 * command (the planner is deterministic), and every budget from the
 * minimum to everything gives a valid plan. */
static void test_planner_deterministic(void **state) {
  (void)state;
  model_graph m = model_make(true);
  for (uint32_t buffers = 1; buffers <= 3; buffers++) {
    for (uint64_t budget = 2048 + buffers * 768; budget <= 4608; budget += 64) {
      fdy_plan *a = NULL, *b = NULL;
      assert_int_equal(model_plan(&m, budget, buffers, &a, NULL), FDY_OK);
      assert_int_equal(model_plan(&m, budget, buffers, &b, NULL), FDY_OK);
      expect_valid(a, NULL);
      char *ja = NULL, *jb = NULL;
      assert_int_equal(fdy_plan_to_json(a, &ja, NULL), FDY_OK);
      assert_int_equal(fdy_plan_to_json(b, &jb, NULL), FDY_OK);
      assert_string_equal(ja, jb);
      free(ja);
      free(jb);
      fdy_plan_destroy(a);
      fdy_plan_destroy(b);
    }
  }
  fdy_graph_destroy(m.graph);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_create_and_accessors),
      T(test_create_rejects_bad_arguments),
      T(test_sections_append_remove),
      T(test_place_and_check_graph),
      T(test_chain_plan_valid),
      T(test_block_plans_valid),
      T(test_empty_plan_valid),
      T(test_graph_checked_first),
      T(test_section_names),
      T(test_rule_section_command),
      T(test_rule_double_allocation),
      T(test_rule_budget),
      T(test_rule_slot_not_allocated),
      T(test_rule_unreleased_end),
      T(test_rule_not_a_weight),
      T(test_rule_slot_too_small),
      T(test_slot_reuse_by_stream_order),
      T(test_slot_busy_write_after_write),
      T(test_copy_input_rules),
      T(test_copy_output_rules),
      T(test_rule_event_not_signalled),
      T(test_rule_event_reused),
      T(test_step_run_twice),
      T(test_rule_unsynchronized_end),
      T(test_rule_op_order),
      T(test_rule_incomplete),
      T(test_resident_binding_needs_no_wait),
      T(test_rule_binding_mismatch),
      T(test_binding_views_of_one_weight),
      T(test_rule_transfer_not_awaited),
      T(test_rule_producer_not_awaited),
      T(test_placement_hazard_across_streams),
      T(test_placement_hazard_both_live),
      T(test_placement_hazard_in_place),
      T(test_placement_hazard_copies),
      T(test_placement_hazard_state_overlap),
      T(test_placement_hazard_copy_output),
      T(test_rule_placement),
      T(test_rule_placement_message),
      T(test_rule_unknown_id),
      T(test_first_error_in_command_order),
      T(test_summary),
      T(test_summary_overflow),
      T(test_planner_plans_validate),
      T(test_planner_residency_order),
      T(test_planner_budget_minimum),
      T(test_planner_deterministic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
