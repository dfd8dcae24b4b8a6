/* Tests of sessions of many sequences on the CPU backend
 * (fdy_llama_session_admit, _decode, _release, _append by slot): a row's
 * logits bitwise the same for every batch size, set and order of
 * neighbours, slot and max_sequences as the same sequence decoded alone in a
 * one-sequence session; greedy ids of a batch equal to fdy_llama_generate of
 * each prompt alone on every fixture; a sequence untouched by its
 * neighbours' prompts and by garbage left in every KV region; released
 * slots reused by the next admit with nothing carried over; weights
 * streamed through slots giving the bits of resident ones; steps mixing
 * decode rows with prompt chunks (fdy_llama_session_step) giving the alone
 * bits, the chunks' KV as the prefill's; and every bad
 * input (a full session, free, unknown and repeated slots, bad row counts,
 * ids outside the vocabulary, a full context, logits from an ids_only
 * session, too many sequences) refused with its kind and fields, the
 * session left as if the call had not happened. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/cpu.h"
#include "foundry/llama_session.h"
#include "llama_fixtures.h"

#define CONTEXT      64u /* KV positions of every session here */
#define PREFILL_ROWS 16u /* so that the longer prompts take two runs */
#define MAX_PROMPT   20u /* ids of the longest prompt */
#define MAX_BATCH    8u  /* most sequences of a session here */
#define STEPS        10u /* decode steps of each sequence (>= MAX_BATCH) */
#define GEN_TOKENS   10u /* greedy ids of test_batched_equals_alone */

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint32_t rng_next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}

static uint32_t vocab_of(const fdy_llama_model *model) {
  return fdy_llama_model_config(model)->vocab_size;
}

/* Options of every session here: CONTEXT positions, PREFILL_ROWS. */
static fdy_llama_session_options options(fdy_backend *cpu,
                                         uint32_t max_sequences) {
  fdy_llama_session_options o = {.backend = cpu,
                                 .context = CONTEXT,
                                 .prefill_rows = PREFILL_ROWS,
                                 .max_sequences = max_sequences};
  return o;
}

/* A session of o, its slots checked. */
static fdy_llama_session *batch_session(const fdy_llama_model *model,
                                        const fdy_llama_session_options *o) {
  fdy_llama_session *session = make_session(model, o);
  assert_int_equal(fdy_llama_session_max_sequences(session),
                   o->max_sequences ? o->max_sequences : 1);
  return session;
}

static void fill_nan(float *p, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    p[i] = NAN;
  }
}

static float *poisoned(uint64_t n) {
  float *p = malloc(sizeof *p * n);
  assert_non_null(p);
  fill_nan(p, n);
  return p;
}

/* The index of the largest value, the lowest on ties. */
static int32_t argmax(const float *row, uint32_t n) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < n; i++) {
    if (row[i] > row[best]) {
      best = i;
    }
  }
  return (int32_t)best;
}

typedef struct prompt {
  int32_t ids[MAX_PROMPT];
  uint32_t count;
} prompt;

/* n prompts of the given lengths (<= MAX_PROMPT) of random ids. */
static void make_prompts(prompt *out, const uint32_t *lengths, uint32_t n,
                         uint32_t vocab) {
  for (uint32_t p = 0; p < n; p++) {
    assert_true(lengths[p] >= 1 && lengths[p] <= MAX_PROMPT);
    out[p].count = lengths[p];
    for (uint32_t i = 0; i < lengths[p]; i++) {
      out[p].ids[i] = (int32_t)(rng_next() % vocab);
    }
  }
}

/* The lengths of the prompts of the batch tests: one and two prefill runs,
 * a single id. */
#define PROMPTS 8u
static const uint32_t prompt_lengths[PROMPTS] = {3, 9, 1, 17, 5, 12, 2, 20};

/* A prompt decoded alone, teacher-forced with fixed feed ids, through the
 * single-sequence API (forward) of a one-sequence session: what every
 * batched run of the prompt and feeds must give bit for bit. */
typedef struct alone {
  int32_t first;       /* the next id after the prompt */
  int32_t feed[STEPS]; /* the id fed at decode step k */
  int32_t next[STEPS]; /* the next id of step k */
  float *logits;       /* (STEPS, vocab): the logits of step k */
} alone;

static alone decode_alone(const fdy_llama_model *model, fdy_backend *cpu,
                          const prompt *p) {
  uint32_t vocab = vocab_of(model);
  fdy_llama_session_options o = options(cpu, 0);
  fdy_llama_session *s = batch_session(model, &o);
  alone a;
  a.logits = poisoned((uint64_t)STEPS * vocab);
  fdy_error err;
  assert_int_equal(
      fdy_llama_session_forward(s, p->ids, p->count, NULL, NULL, &err), FDY_OK);
  a.first = fdy_llama_session_next(s);
  for (uint32_t k = 0; k < STEPS; k++) {
    float *row = a.logits + (uint64_t)k * vocab;
    a.feed[k] = (int32_t)(rng_next() % vocab);
    assert_int_equal(
        fdy_llama_session_forward(s, &a.feed[k], 1, NULL, row, &err), FDY_OK);
    a.next[k] = fdy_llama_session_next(s);
    assert_int_equal(a.next[k], argmax(row, vocab));
    for (uint32_t i = 0; i < vocab; i++) {
      assert_true(isfinite(row[i])); /* written: NaNs would compare equal */
    }
  }
  assert_int_equal(fdy_llama_session_position(s), p->count + STEPS);
  fdy_llama_session_destroy(s);
  return a;
}

/* Each of the PROMPTS prompts of the model's vocabulary decoded alone. */
static void decode_all_alone(const fdy_llama_model *model, fdy_backend *cpu,
                             prompt *prompts, alone *refs) {
  make_prompts(prompts, prompt_lengths, PROMPTS, vocab_of(model));
  for (uint32_t p = 0; p < PROMPTS; p++) {
    refs[p] = decode_alone(model, cpu, &prompts[p]);
  }
}

static void free_alone(alone *refs, uint32_t n) {
  for (uint32_t p = 0; p < n; p++) {
    free(refs[p].logits);
  }
}

static void shuffle(uint32_t *a, uint32_t n) {
  for (uint32_t i = n; i > 1; i--) {
    uint32_t j = rng_next() % i;
    uint32_t t = a[i - 1];
    a[i - 1] = a[j];
    a[j] = t;
  }
}

/* Admits prompts[order[i]] for i < n into a session of options o (into slot
 * i: admit takes the lowest free slot), then decodes each sequence STEPS
 * times with its alone feeds, in steps of rows in a shuffled order: 1, 2,
 * ... n rows first (every batch size), then random counts until every
 * sequence is done. Every row's logits and next id must be its alone ones,
 * bitwise. */
static void run_schedule(const fdy_llama_model *model,
                         const fdy_llama_session_options *o,
                         const prompt *prompts, const alone *refs,
                         const uint32_t *order, uint32_t n) {
  assert_true(n <= MAX_BATCH && n <= o->max_sequences);
  uint32_t vocab = vocab_of(model);
  fdy_llama_session *s = batch_session(model, o);
  fdy_error err;
  uint32_t done[MAX_BATCH] = {0};
  for (uint32_t i = 0; i < n; i++) {
    const prompt *p = &prompts[order[i]];
    uint32_t slot = UINT32_MAX;
    assert_int_equal(fdy_llama_session_admit(s, p->ids, p->count, &slot, &err),
                     FDY_OK);
    assert_int_equal(slot, i);
    assert_true(fdy_llama_session_slot_active(s, slot));
    assert_int_equal(fdy_llama_session_slot_position(s, slot), p->count);
    assert_int_equal(fdy_llama_session_slot_next(s, slot),
                     refs[order[i]].first);
  }
  float *logits = poisoned((uint64_t)n * vocab);
  bool seen[MAX_BATCH + 1] = {false};
  for (uint32_t j = 0;; j++) {
    uint32_t live[MAX_BATCH], m = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (done[i] < STEPS) {
        live[m++] = i;
      }
    }
    if (m == 0) {
      break;
    }
    shuffle(live, m);
    uint32_t rows = j < n ? j + 1 : 1 + rng_next() % n;
    rows = rows < m ? rows : m;
    uint32_t slots[MAX_BATCH];
    int32_t ids[MAX_BATCH], next[MAX_BATCH];
    for (uint32_t r = 0; r < rows; r++) {
      slots[r] = live[r];
      ids[r] = refs[order[live[r]]].feed[done[live[r]]];
    }
    fill_nan(logits, (uint64_t)n * vocab);
    assert_int_equal(
        fdy_llama_session_decode(s, slots, ids, rows, next, logits, &err),
        FDY_OK);
    for (uint32_t r = 0; r < rows; r++) {
      const alone *ref = &refs[order[slots[r]]];
      uint32_t k = done[slots[r]]++;
      assert_memory_equal(logits + (uint64_t)r * vocab,
                          ref->logits + (uint64_t)k * vocab,
                          sizeof *logits * vocab);
      assert_int_equal(next[r], ref->next[k]);
      assert_int_equal(fdy_llama_session_slot_next(s, slots[r]), next[r]);
      assert_int_equal(fdy_llama_session_slot_position(s, slots[r]),
                       prompts[order[slots[r]]].count + k + 1);
    }
    seen[rows] = true;
  }
  for (uint32_t b = 1; b <= n; b++) {
    assert_true(seen[b]);
  }
  free(logits);
  fdy_llama_session_destroy(s);
}

/* ---- batch invariance --------------------------------------------------- */

/* A row's logits are bitwise those of its sequence decoded alone, whatever
 * the batch size (1 to 8), the other rows and their order, the slot
 * (prompts admitted in order, reversed, and a subset) and the session's
 * max_sequences (8, 3 and 1: fdy_llama_session_decode in a one-sequence
 * session gives the bits of its forward). */
static void test_batch_invariance(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  prompt prompts[PROMPTS];
  alone refs[PROMPTS];
  decode_all_alone(model, cpu, prompts, refs);
  static const uint32_t forward[PROMPTS] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const uint32_t reverse[PROMPTS] = {7, 6, 5, 4, 3, 2, 1, 0};
  static const uint32_t subset[3] = {5, 0, 3};
  fdy_llama_session_options eight = options(cpu, MAX_BATCH);
  fdy_llama_session_options three = options(cpu, 3);
  fdy_llama_session_options one = options(cpu, 1);
  run_schedule(model, &eight, prompts, refs, forward, PROMPTS);
  run_schedule(model, &eight, prompts, refs, reverse, PROMPTS);
  run_schedule(model, &eight, prompts, refs, subset, 3);
  run_schedule(model, &three, prompts, refs, subset, 3);
  run_schedule(model, &one, prompts, refs, &subset[2], 1);
  free_alone(refs, PROMPTS);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* fdy_llama_generate of a prompt (greedy, ignore_eos) in a one-sequence
 * session: n ids, malloc'd. */
static int32_t *generate_alone(const fdy_llama_model *model, fdy_backend *cpu,
                               const prompt *p, uint32_t n) {
  fdy_llama_session_options o = options(cpu, 1);
  fdy_llama_session *s = batch_session(model, &o);
  fdy_llama_generate_options g = {.max_tokens = n, .ignore_eos = true};
  fdy_llama_generation gen;
  fdy_error err;
  assert_int_equal(fdy_llama_generate(s, p->ids, p->count, &g, &gen, &err),
                   FDY_OK);
  assert_int_equal(gen.count, n);
  fdy_llama_session_destroy(s);
  return gen.ids;
}

/* On every fixture, five prompts of different lengths decoded greedily in
 * one batch (an ids_only session with a spare slot, the rows in forward
 * then reversed order) give exactly the ids of each generated alone. */
static void test_batched_equals_alone(void **state) {
  (void)state;
  static const char *const fixtures[] = {"llama3-micro", "llama3-tiny",
                                         "llama3-micro-untied-g32",
                                         "llama3-micro-mha-g128"};
  static const uint32_t lengths[] = {1, 4, 11, 6, 19};
  enum { N = sizeof lengths / sizeof lengths[0] };
  fdy_backend *cpu = cpu_backend(2);
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
    fdy_llama_model *model = open_fixture(fixtures[f]);
    prompt prompts[N];
    make_prompts(prompts, lengths, N, vocab_of(model));
    fdy_llama_session_options o = options(cpu, N + 1);
    o.ids_only = true;
    fdy_llama_session *s = batch_session(model, &o);
    int32_t batched[N][GEN_TOKENS];
    fdy_error err;
    for (uint32_t p = 0; p < N; p++) {
      uint32_t slot = UINT32_MAX;
      assert_int_equal(fdy_llama_session_admit(s, prompts[p].ids,
                                               prompts[p].count, &slot, &err),
                       FDY_OK);
      assert_int_equal(slot, p);
      batched[p][0] = fdy_llama_session_slot_next(s, p);
    }
    for (uint32_t t = 1; t < GEN_TOKENS; t++) {
      uint32_t slots[N];
      int32_t ids[N], next[N];
      for (uint32_t r = 0; r < N; r++) {
        slots[r] = t % 2 ? r : N - 1 - r;
        ids[r] = batched[slots[r]][t - 1];
      }
      assert_int_equal(
          fdy_llama_session_decode(s, slots, ids, N, next, NULL, &err), FDY_OK);
      for (uint32_t r = 0; r < N; r++) {
        batched[slots[r]][t] = next[r];
      }
    }
    for (uint32_t p = 0; p < N; p++) {
      int32_t *ids = generate_alone(model, cpu, &prompts[p], GEN_TOKENS);
      assert_memory_equal(batched[p], ids, sizeof *ids * GEN_TOKENS);
      free(ids);
    }
    fdy_llama_session_destroy(s);
    fdy_llama_close(model);
  }
  fdy_backend_destroy(cpu);
}

/* ---- isolation ---------------------------------------------------------- */

/* Decodes the sequence of refs[x] (admitted into `slot` of s) STEPS times
 * together with every other active slot, which is fed random ids; its
 * logits must be the alone ones, bitwise. */
static void decode_among_others(fdy_llama_session *s, uint32_t vocab,
                                uint32_t slot, const alone *ref) {
  uint32_t n = fdy_llama_session_max_sequences(s);
  float *logits = poisoned((uint64_t)n * vocab);
  fdy_error err;
  for (uint32_t k = 0; k < STEPS; k++) {
    uint32_t slots[MAX_BATCH], rows = 0, row = UINT32_MAX;
    int32_t ids[MAX_BATCH], next[MAX_BATCH];
    for (uint32_t i = 0; i < n; i++) {
      if (fdy_llama_session_slot_active(s, i)) {
        row = i == slot ? rows : row;
        ids[rows] = i == slot ? ref->feed[k] : (int32_t)(rng_next() % vocab);
        slots[rows++] = i;
      }
    }
    fill_nan(logits, (uint64_t)n * vocab);
    assert_int_equal(
        fdy_llama_session_decode(s, slots, ids, rows, next, logits, &err),
        FDY_OK);
    assert_memory_equal(logits + (uint64_t)row * vocab,
                        ref->logits + (uint64_t)k * vocab,
                        sizeof *logits * vocab);
    assert_int_equal(next[row], ref->next[k]);
  }
  free(logits);
}

/* A sequence's logits do not change when its neighbours' prompts do (two
 * sets of neighbours of other lengths and ids around it in slot 2), nor
 * when every KV region, its own included, was first filled with long
 * garbage prompts and the other sequences run far along their context
 * (positions up to 60 beside its 20 or fewer). */
static void test_isolation(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  uint32_t vocab = vocab_of(model);
  fdy_backend *cpu = cpu_backend(2);
  prompt prompts[PROMPTS];
  alone refs[PROMPTS];
  decode_all_alone(model, cpu, prompts, refs);
  const uint32_t x = 3; /* the sequence watched: two prefill runs */
  fdy_llama_session_options o = options(cpu, 4);
  fdy_error err;
  static const uint32_t neighbours[2][3] = {{0, 1, 2}, {7, 5, 4}};
  for (int set = 0; set < 2; set++) {
    fdy_llama_session *s = batch_session(model, &o);
    uint32_t slot = UINT32_MAX;
    for (uint32_t i = 0; i < 4; i++) {
      const prompt *p = &prompts[i == 2 ? x : neighbours[set][i - (i > 2)]];
      assert_int_equal(
          fdy_llama_session_admit(s, p->ids, p->count, &slot, &err), FDY_OK);
      assert_int_equal(slot, i);
    }
    decode_among_others(s, vocab, 2, &refs[x]);
    fdy_llama_session_destroy(s);
  }

  const uint32_t garbage = CONTEXT - STEPS - 4;
  int32_t *junk = malloc(sizeof *junk * garbage);
  assert_non_null(junk);
  for (uint32_t watched = 0; watched < 4; watched += 3) {
    fdy_llama_session *s = batch_session(model, &o);
    uint32_t slot = UINT32_MAX;
    for (uint32_t i = 0; i < 4; i++) {
      for (uint32_t t = 0; t < garbage; t++) {
        junk[t] = (int32_t)(rng_next() % vocab);
      }
      assert_int_equal(fdy_llama_session_admit(s, junk, garbage, &slot, &err),
                       FDY_OK);
    }
    assert_int_equal(fdy_llama_session_release(s, watched, &err), FDY_OK);
    assert_int_equal(fdy_llama_session_admit(s, prompts[x].ids,
                                             prompts[x].count, &slot, &err),
                     FDY_OK);
    assert_int_equal(slot, watched);
    assert_int_equal(fdy_llama_session_slot_next(s, slot), refs[x].first);
    decode_among_others(s, vocab, watched, &refs[x]);
    fdy_llama_session_destroy(s);
  }
  free(junk);
  free_alone(refs, PROMPTS);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* ---- release and reuse -------------------------------------------------- */

#define REUSE_PROMPTS 7u
#define REUSE_TOKENS  16u /* more than any sequence below generates */

/* A sequence of test_release_and_reuse: its prompt and greedy ids. */
typedef struct running {
  uint32_t prompt;
  int32_t ids[REUSE_TOKENS];
  uint32_t count;
} running;

/* One greedy decode step of every active slot of s, each fed its last id. */
static void greedy_step(fdy_llama_session *s, running *in_slot) {
  uint32_t slots[MAX_BATCH], rows = 0;
  int32_t ids[MAX_BATCH], next[MAX_BATCH];
  for (uint32_t i = 0; i < fdy_llama_session_max_sequences(s); i++) {
    if (fdy_llama_session_slot_active(s, i)) {
      assert_true(in_slot[i].count < REUSE_TOKENS);
      ids[rows] = in_slot[i].ids[in_slot[i].count - 1];
      slots[rows++] = i;
    }
  }
  fdy_error err;
  assert_int_equal(
      fdy_llama_session_decode(s, slots, ids, rows, next, NULL, &err), FDY_OK);
  for (uint32_t r = 0; r < rows; r++) {
    running *q = &in_slot[slots[r]];
    q->ids[q->count++] = next[r];
  }
}

/* Admits prompts[p] into the expected slot (the lowest free one). */
static void admit_into(fdy_llama_session *s, const prompt *prompts,
                       running *in_slot, uint32_t p, uint32_t expected) {
  uint32_t slot = UINT32_MAX;
  fdy_error err;
  assert_int_equal(
      fdy_llama_session_admit(s, prompts[p].ids, prompts[p].count, &slot, &err),
      FDY_OK);
  assert_int_equal(slot, expected);
  assert_int_equal(fdy_llama_session_slot_position(s, slot), prompts[p].count);
  in_slot[slot].prompt = p;
  in_slot[slot].ids[0] = fdy_llama_session_slot_next(s, slot);
  in_slot[slot].count = 1;
}

/* Checks a sequence's greedy ids against its prompt generated alone. */
static void check_running(const running *q, int32_t *const *generated) {
  assert_memory_equal(q->ids, generated[q->prompt], sizeof *q->ids * q->count);
}

/* Slots released mid-run (one, then two at once) and refilled by admit,
 * which takes the lowest free slot: each new sequence generates the ids of
 * its prompt alone, and every sequence that ran beside the releases and
 * admits too (also the released ones, up to their release). A released
 * slot is free (position 0, next -1); after a reset every slot is. */
static void test_release_and_reuse(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  static const uint32_t lengths[REUSE_PROMPTS] = {5, 13, 2, 8, 17, 1, 10};
  prompt prompts[REUSE_PROMPTS];
  make_prompts(prompts, lengths, REUSE_PROMPTS, vocab_of(model));
  int32_t *generated[REUSE_PROMPTS];
  for (uint32_t p = 0; p < REUSE_PROMPTS; p++) {
    generated[p] = generate_alone(model, cpu, &prompts[p], REUSE_TOKENS);
  }
  fdy_llama_session_options o = options(cpu, 4);
  fdy_llama_session *s = batch_session(model, &o);
  running in_slot[4];
  fdy_error err;
  for (uint32_t p = 0; p < 4; p++) {
    admit_into(s, prompts, in_slot, p, p);
  }
  for (int t = 0; t < 3; t++) {
    greedy_step(s, in_slot);
  }
  assert_int_equal(fdy_llama_session_release(s, 1, &err), FDY_OK);
  assert_false(fdy_llama_session_slot_active(s, 1));
  assert_int_equal(fdy_llama_session_slot_position(s, 1), 0);
  assert_int_equal(fdy_llama_session_slot_next(s, 1), -1);
  check_running(&in_slot[1], generated);
  for (int t = 0; t < 2; t++) {
    greedy_step(s, in_slot);
  }
  admit_into(s, prompts, in_slot, 4, 1);
  for (int t = 0; t < 3; t++) {
    greedy_step(s, in_slot);
  }
  assert_int_equal(fdy_llama_session_release(s, 3, &err), FDY_OK);
  assert_int_equal(fdy_llama_session_release(s, 0, &err), FDY_OK);
  check_running(&in_slot[3], generated);
  check_running(&in_slot[0], generated);
  admit_into(s, prompts, in_slot, 5, 0);
  admit_into(s, prompts, in_slot, 6, 3);
  for (int t = 0; t < 4; t++) {
    greedy_step(s, in_slot);
  }
  for (uint32_t i = 0; i < 4; i++) {
    check_running(&in_slot[i], generated);
  }
  assert_int_equal(in_slot[2].count, 13); /* ran through every change */
  fdy_llama_session_reset(s);
  for (uint32_t i = 0; i < 4; i++) {
    assert_false(fdy_llama_session_slot_active(s, i));
    assert_int_equal(fdy_llama_session_slot_position(s, i), 0);
  }
  admit_into(s, prompts, in_slot, 6, 0);
  check_running(&in_slot[0], generated);
  fdy_llama_session_destroy(s);
  for (uint32_t p = 0; p < REUSE_PROMPTS; p++) {
    free(generated[p]);
  }
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* ---- streamed weights --------------------------------------------------- */

/* Bytes of the largest weight unit and of unit "layer.0" of a session's
 * graph. */
static void unit_bytes(const fdy_llama_session *s, uint64_t *largest,
                       uint64_t *layer) {
  const fdy_graph *g = fdy_plan_graph(fdy_llama_session_plan(s));
  *largest = *layer = 0;
  for (uint32_t i = 0; i < fdy_graph_tensor_count(g); i++) {
    fdy_tensor_info info;
    assert_int_equal(fdy_graph_tensor(g, (fdy_tensor_id){i}, &info, NULL),
                     FDY_OK);
    if (info.role == FDY_TENSOR_WEIGHT) {
      *largest = info.bytes > *largest ? info.bytes : *largest;
      *layer = strcmp(info.name, "layer.0") == 0 ? info.bytes : *layer;
    }
  }
}

/* Batched decode steps (the schedule of test_batch_invariance over four
 * sequences) of sessions that stream weights give the bits of the resident
 * session's, both being those of each sequence alone: a budget keeping the
 * embedding and head resident and streaming the layers through one slot
 * (tied micro), and one streaming every unit through two slots (untied). */
static void test_streamed_equals_resident(void **state) {
  (void)state;
  static const char *const fixtures[2] = {"llama3-micro",
                                          "llama3-micro-untied-g32"};
  static const uint32_t order[4] = {6, 3, 0, 5};
  fdy_backend *cpu = cpu_backend(2);
  for (int f = 0; f < 2; f++) {
    fdy_llama_model *model = open_fixture(fixtures[f]);
    prompt prompts[PROMPTS];
    alone refs[PROMPTS];
    decode_all_alone(model, cpu, prompts, refs);
    fdy_llama_session_options o = options(cpu, 4);
    run_schedule(model, &o, prompts, refs, order, 4);
    fdy_llama_session *resident = batch_session(model, &o);
    fdy_executor_stats rs = fdy_llama_session_stats(resident);
    assert_int_equal(rs.class_bytes[FDY_BUFFER_SLOT], 0);
    uint64_t largest, layer;
    unit_bytes(resident, &largest, &layer);
    fdy_llama_session_destroy(resident);
    o.weight_budget =
        f == 0 ? rs.class_bytes[FDY_BUFFER_RESIDENT] - layer : 2 * largest;
    o.buffers = f == 0 ? 1 : 2;
    fdy_llama_session *streamed = batch_session(model, &o);
    fdy_executor_stats ss = fdy_llama_session_stats(streamed);
    assert_true(ss.class_bytes[FDY_BUFFER_SLOT] > 0);
    assert_true(ss.class_bytes[FDY_BUFFER_RESIDENT] +
                    ss.class_bytes[FDY_BUFFER_SLOT] <=
                o.weight_budget);
    fdy_llama_session_destroy(streamed);
    run_schedule(model, &o, prompts, refs, order, 4);
    free_alone(refs, PROMPTS);
    fdy_llama_close(model);
  }
  fdy_backend_destroy(cpu);
}

/* ---- bad inputs --------------------------------------------------------- */

/* Asserts a refused call: its status and err's kind. */
static void assert_refused(fdy_status st, const fdy_error *err,
                           fdy_status kind) {
  assert_int_equal(st, kind);
  assert_int_equal(err->kind, kind);
  assert_true(err->message[0] != '\0');
}

/* s saw refused calls, twin the same successful ones only: every slot is
 * in the same state, and a decode step of the listed slots (random ids,
 * the same on both) gives both the same next ids and logits, bitwise. */
static void assert_twins(fdy_llama_session *s, fdy_llama_session *twin,
                         uint32_t vocab, const uint32_t *slots,
                         uint32_t count) {
  for (uint32_t i = 0; i < fdy_llama_session_max_sequences(s); i++) {
    assert_int_equal(fdy_llama_session_slot_active(s, i),
                     fdy_llama_session_slot_active(twin, i));
    assert_int_equal(fdy_llama_session_slot_position(s, i),
                     fdy_llama_session_slot_position(twin, i));
    assert_int_equal(fdy_llama_session_slot_next(s, i),
                     fdy_llama_session_slot_next(twin, i));
  }
  int32_t ids[MAX_BATCH], a[MAX_BATCH], b[MAX_BATCH];
  for (uint32_t r = 0; r < count; r++) {
    ids[r] = (int32_t)(rng_next() % vocab);
  }
  float *la = poisoned((uint64_t)count * vocab);
  float *lb = poisoned((uint64_t)count * vocab);
  fdy_error err;
  assert_int_equal(fdy_llama_session_decode(s, slots, ids, count, a, la, &err),
                   FDY_OK);
  assert_int_equal(
      fdy_llama_session_decode(twin, slots, ids, count, b, lb, &err), FDY_OK);
  assert_memory_equal(a, b, sizeof *a * count);
  assert_memory_equal(la, lb, sizeof *la * count * vocab);
  free(la);
  free(lb);
}

/* Admits p into both sessions; both take slot `expected`. */
static void admit_both(fdy_llama_session *s, fdy_llama_session *twin,
                       const prompt *p, uint32_t expected) {
  fdy_error err;
  uint32_t a = UINT32_MAX, b = UINT32_MAX;
  assert_int_equal(fdy_llama_session_admit(s, p->ids, p->count, &a, &err),
                   FDY_OK);
  assert_int_equal(fdy_llama_session_admit(twin, p->ids, p->count, &b, &err),
                   FDY_OK);
  assert_int_equal(a, expected);
  assert_int_equal(b, expected);
}

/* Every bad call on a session of 3 sequences of 16 positions, each refused
 * with its kind and fields before any work: the session then works exactly
 * as a twin that never saw it (assert_twins after each). */
static void test_bad_inputs(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  uint32_t vocab = vocab_of(model);
  fdy_backend *cpu = cpu_backend(2);
  fdy_error err;
  fdy_status st;
  fdy_llama_session_options o = options(cpu, 3);
  o.context = 16;
  fdy_llama_session *s = batch_session(model, &o);
  fdy_llama_session *twin = batch_session(model, &o);
  static const uint32_t lengths[4] = {4, 3, 14, 2};
  prompt prompts[4];
  make_prompts(prompts, lengths, 4, vocab);
  for (uint32_t p = 0; p < 3; p++) {
    admit_both(s, twin, &prompts[p], p);
  }
  static const uint32_t all[3] = {0, 1, 2};
  assert_twins(s, twin, vocab, all, 3);

  /* every slot in use */
  uint32_t slot = UINT32_MAX;
  st =
      fdy_llama_session_admit(s, prompts[3].ids, prompts[3].count, &slot, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 3);
  assert_int_equal(slot, UINT32_MAX);
  assert_twins(s, twin, vocab, all, 3); /* slot 2 at 16: its context full */

  /* a slot whose context is full, alone and as row 1 */
  int32_t ids[4] = {5, 6, 7, 8}, next[4] = {-2, -2, -2, -2};
  const uint32_t full[2] = {0, 2};
  st = fdy_llama_session_decode(s, &full[1], ids, 1, next, NULL, &err);
  assert_refused(st, &err, FDY_ERR_CONTEXT);
  assert_int_equal(err.ids[0], 0);
  assert_int_equal(err.expected, 16);
  assert_int_equal(err.actual, 17);
  st = fdy_llama_session_decode(s, full, ids, 2, next, NULL, &err);
  assert_refused(st, &err, FDY_ERR_CONTEXT);
  assert_int_equal(err.ids[0], 1);
  assert_int_equal(next[0], -2);
  /* and an append to it */
  st = fdy_llama_session_append(s, 2, ids, 1, NULL, NULL, &err);
  assert_refused(st, &err, FDY_ERR_CONTEXT);
  assert_int_equal(err.expected, 16);
  assert_int_equal(err.actual, 17);
  assert_twins(s, twin, vocab, all, 2);

  /* a released slot, then released again */
  assert_int_equal(fdy_llama_session_release(s, 2, &err), FDY_OK);
  assert_int_equal(fdy_llama_session_release(twin, 2, &err), FDY_OK);
  st = fdy_llama_session_release(s, 2, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  st = fdy_llama_session_decode(s, full, ids, 2, next, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 1);
  assert_twins(s, twin, vocab, all, 2);

  /* a slot out of range: decode (as row 1), release, append */
  const uint32_t unknown[2] = {1, 3};
  st = fdy_llama_session_decode(s, unknown, ids, 2, next, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 1);
  assert_int_equal(err.expected, 3);
  assert_int_equal(err.actual, 3);
  st = fdy_llama_session_release(s, 3, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 3);
  assert_int_equal(err.expected, 3);
  st = fdy_llama_session_append(s, 3, ids, 2, NULL, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 3);
  assert_int_equal(err.expected, 3);
  assert_int_equal(err.actual, 3);
  st = fdy_llama_session_append(s, UINT32_MAX, ids, 2, NULL, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_twins(s, twin, vocab, all, 2);

  /* a slot twice in one step (rows 0 and 2) */
  const uint32_t twice[3] = {1, 0, 1};
  st = fdy_llama_session_decode(s, twice, ids, 3, next, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  assert_twins(s, twin, vocab, all, 2);

  /* no rows, more rows than sequences, no next output */
  const uint32_t four[4] = {0, 1, 2, 3};
  st = fdy_llama_session_decode(s, four, ids, 0, next, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 3);
  assert_int_equal(err.actual, 0);
  st = fdy_llama_session_decode(s, four, ids, 4, next, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 3);
  assert_int_equal(err.actual, 4);
  st = fdy_llama_session_decode(s, all, ids, 2, NULL, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_twins(s, twin, vocab, all, 2);

  /* ids outside the vocabulary: as row 1, and negative as row 0 */
  int32_t bad[2] = {5, (int32_t)vocab};
  st = fdy_llama_session_decode(s, all, bad, 2, next, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 1);
  assert_int_equal(err.ids[1], (int64_t)vocab);
  assert_int_equal(err.expected, vocab);
  int32_t negative[2] = {-1, 5};
  st = fdy_llama_session_decode(s, all, negative, 2, next, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 0);
  assert_int_equal(err.ids[1], -1);
  assert_int_equal(next[0], -2);
  assert_twins(s, twin, vocab, all, 2);

  /* a bad prompt does not take the free slot; a good one then does */
  int32_t bad_prompt[3] = {1, 2, (int32_t)vocab};
  st = fdy_llama_session_admit(s, bad_prompt, 3, &slot, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  assert_false(fdy_llama_session_slot_active(s, 2));
  st = fdy_llama_session_admit(s, prompts[3].ids, 0, &slot, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  st = fdy_llama_session_admit(s, prompts[3].ids, prompts[3].count, NULL, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(slot, UINT32_MAX);
  admit_both(s, twin, &prompts[3], 2);
  static const uint32_t shuffled[3] = {2, 0, 1};
  assert_twins(s, twin, vocab, shuffled, 3);
  fdy_llama_session_destroy(twin);
  fdy_llama_session_destroy(s);

  /* logits from an ids_only session: append and decode */
  o.ids_only = true;
  s = batch_session(model, &o);
  float *logits = poisoned(vocab);
  assert_int_equal(
      fdy_llama_session_admit(s, prompts[0].ids, prompts[0].count, &slot, &err),
      FDY_OK);
  st = fdy_llama_session_append(s, slot, ids, 1, NULL, logits, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  st = fdy_llama_session_decode(s, &slot, ids, 1, next, logits, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_true(isnan(logits[0]));
  assert_int_equal(fdy_llama_session_slot_position(s, slot), prompts[0].count);
  assert_int_equal(fdy_llama_session_decode(s, &slot, ids, 1, next, NULL, &err),
                   FDY_OK);
  assert_int_equal(fdy_llama_session_slot_next(s, slot), next[0]);
  assert_int_equal(fdy_llama_session_slot_position(s, slot),
                   prompts[0].count + 1);
  free(logits);
  fdy_llama_session_destroy(s);

  /* more sequences than a session holds; 0 means 1 */
  o = options(cpu, FDY_LLAMA_MAX_SEQUENCES + 1);
  s = (fdy_llama_session *)(uintptr_t)1;
  st = fdy_llama_session_create(model, &o, &s, &err);
  assert_refused(st, &err, FDY_ERR_INVALID_ARGUMENT);
  assert_null(s);
  assert_int_equal(err.expected, FDY_LLAMA_MAX_SEQUENCES);
  assert_int_equal(err.actual, FDY_LLAMA_MAX_SEQUENCES + 1);
  o = options(cpu, 0);
  s = batch_session(model, &o);
  assert_int_equal(fdy_llama_session_max_sequences(s), 1);
  fdy_llama_session_destroy(s);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* ---- steps of decode rows and prompt chunks ------------------------------ */

/* Runs one fdy_llama_session_step of parts (logits of each part's last row
 * poisoned first) and checks every decode part (count 1, `decode[i]` the
 * alone reference and step of the part, or NULL for a prompt chunk)
 * against its reference bitwise; returns the next ids in next. */
static void mixed_step(fdy_llama_session *s, uint32_t vocab,
                       const fdy_llama_step_part *parts, uint32_t n,
                       const alone *const *refs, const uint32_t *steps,
                       int32_t *next) {
  float *logits = poisoned((uint64_t)n * vocab);
  fdy_error err;
  assert_int_equal(fdy_llama_session_step(s, parts, n, next, logits, &err),
                   FDY_OK);
  for (uint32_t i = 0; i < n; i++) {
    const float *row = logits + (uint64_t)i * vocab;
    assert_int_equal(next[i], argmax(row, vocab));
    assert_int_equal(fdy_llama_session_slot_next(s, parts[i].slot), next[i]);
    if (refs[i]) {
      assert_memory_equal(row, refs[i]->logits + (uint64_t)steps[i] * vocab,
                          sizeof *row * vocab);
      assert_int_equal(next[i], refs[i]->next[steps[i]]);
    }
  }
  free(logits);
}

/* Steps mixing decode rows with prompt chunks: a prompt fed in two chunks
 * beside the decode rows of two running sequences gives its alone first id,
 * the running rows their alone logits bitwise, and then decoding all three
 * gives their alone logits (the chunk rows wrote the KV cache the prefill
 * would have). A step beyond step_rows, a repeated slot, a part without
 * ids or a slot out of range is refused, the session unchanged. */
static void test_mixed_steps(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  uint32_t vocab = vocab_of(model);
  fdy_backend *cpu = cpu_backend(2);
  prompt prompts[PROMPTS];
  alone refs[PROMPTS];
  decode_all_alone(model, cpu, prompts, refs);
  fdy_llama_session_options o = options(cpu, 4);
  o.step_rows = 12;
  fdy_llama_session *s = batch_session(model, &o);
  assert_int_equal(fdy_llama_session_step_rows(s), 12);
  fdy_error err;
  uint32_t slot = UINT32_MAX;
  const prompt *a = &prompts[0], *b = &prompts[1], *c = &prompts[3];
  assert_int_equal(a->count, 3);
  assert_int_equal(b->count, 9);
  assert_int_equal(c->count, 17);
  assert_int_equal(fdy_llama_session_admit(s, a->ids, a->count, &slot, &err),
                   FDY_OK);
  assert_int_equal(slot, 0);
  int32_t next[3];

  /* a decodes while b's whole prompt goes in (slot 1, free until now) */
  fdy_llama_step_part step1[2] = {{0, &refs[0].feed[0], 1},
                                  {1, b->ids, b->count}};
  const alone *r1[2] = {&refs[0], NULL};
  const uint32_t k1[2] = {0, 0};
  mixed_step(s, vocab, step1, 2, r1, k1, next);
  assert_int_equal(next[1], refs[1].first);
  assert_true(fdy_llama_session_slot_active(s, 1));
  assert_int_equal(fdy_llama_session_slot_position(s, 1), b->count);

  /* the first 8 ids of c's prompt (slot 2) ahead of a's and b's rows */
  fdy_llama_step_part step2[3] = {
      {2, c->ids, 8}, {0, &refs[0].feed[1], 1}, {1, &refs[1].feed[0], 1}};
  const alone *r2[3] = {NULL, &refs[0], &refs[1]};
  const uint32_t k2[3] = {0, 1, 0};
  mixed_step(s, vocab, step2, 3, r2, k2, next);
  assert_int_equal(fdy_llama_session_slot_position(s, 2), 8);

  /* refused, the session unchanged: 13 rows, a repeated slot, no ids, a
   * slot out of range */
  fdy_llama_step_part bad[3] = {
      {2, c->ids + 8, 9}, {0, &refs[0].feed[2], 1}, {3, a->ids, 3}};
  assert_refused(fdy_llama_session_step(s, bad, 3, next, NULL, &err), &err,
                 FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 12);
  assert_int_equal(err.actual, 13);
  bad[2] = (fdy_llama_step_part){0, a->ids, 1};
  assert_refused(fdy_llama_session_step(s, bad, 3, next, NULL, &err), &err,
                 FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  bad[2] = (fdy_llama_step_part){3, a->ids, 0};
  assert_refused(fdy_llama_session_step(s, bad, 3, next, NULL, &err), &err,
                 FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  bad[2] = (fdy_llama_step_part){4, a->ids, 1};
  assert_refused(fdy_llama_session_step(s, bad, 3, next, NULL, &err), &err,
                 FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  assert_int_equal(fdy_llama_session_slot_position(s, 0), a->count + 2);
  assert_int_equal(fdy_llama_session_slot_position(s, 1), b->count + 1);
  assert_int_equal(fdy_llama_session_slot_position(s, 2), 8);
  assert_false(fdy_llama_session_slot_active(s, 3));

  /* the rest of c's prompt between a's and b's rows: its first id */
  fdy_llama_step_part step3[3] = {
      {0, &refs[0].feed[2], 1}, {2, c->ids + 8, 9}, {1, &refs[1].feed[1], 1}};
  const alone *r3[3] = {&refs[0], NULL, &refs[1]};
  const uint32_t k3[3] = {2, 0, 1};
  mixed_step(s, vocab, step3, 3, r3, k3, next);
  assert_int_equal(next[1], refs[3].first);

  /* then all three decode as alone, to their last feed */
  uint32_t done[3] = {3, 2, 0};
  const alone *of[3] = {&refs[0], &refs[1], &refs[3]};
  while (done[0] < STEPS || done[1] < STEPS || done[2] < STEPS) {
    fdy_llama_step_part parts[3];
    const alone *r[3];
    uint32_t k[3], n = 0;
    for (uint32_t i = 0; i < 3; i++) {
      if (done[i] < STEPS) {
        parts[n] = (fdy_llama_step_part){i, &of[i]->feed[done[i]], 1};
        r[n] = of[i];
        k[n++] = done[i]++;
      }
    }
    mixed_step(s, vocab, parts, n, r, k, next);
  }
  fdy_llama_session_destroy(s);
  free_alone(refs, PROMPTS);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* A KV cache that does not fit the device memory free beside the weights
 * is refused at create, naming the bytes needed and available; a session
 * that fits the same backend is then created. */
static void test_kv_cache_refused(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_llama_session_options o = options(cpu, 1);
  fdy_llama_session *one = batch_session(model, &o);
  fdy_executor_stats st = fdy_llama_session_stats(one);
  uint64_t weights =
      st.class_bytes[FDY_BUFFER_RESIDENT] + st.class_bytes[FDY_BUFFER_SLOT];
  uint64_t rest = st.class_bytes[FDY_BUFFER_STATE] +
                  st.class_bytes[FDY_BUFFER_ARENA] +
                  st.class_bytes[FDY_BUFFER_IO];
  fdy_llama_session_destroy(one);
  fdy_backend_destroy(cpu);

  /* room for one sequence's cache twice over, not for 32 */
  fdy_cpu_options small = {.threads = 2, .memory_bytes = weights + 2 * rest};
  assert_int_equal(fdy_cpu_backend_create(&small, &cpu, NULL), FDY_OK);
  o = options(cpu, 32);
  fdy_llama_session *session = NULL;
  fdy_error err;
  assert_int_equal(fdy_llama_session_create(model, &o, &session, &err),
                   FDY_ERR_BUDGET);
  assert_int_equal(err.kind, FDY_ERR_BUDGET);
  assert_null(session);
  assert_int_equal(err.expected, 2 * rest);
  assert_true(err.actual > 16 * st.class_bytes[FDY_BUFFER_STATE]);
  assert_non_null(strstr(err.message, "KV cache of 32 sequences"));
  o = options(cpu, 1);
  session = batch_session(model, &o);
  fdy_llama_session_destroy(session);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batch_invariance),
      cmocka_unit_test(test_batched_equals_alone),
      cmocka_unit_test(test_isolation),
      cmocka_unit_test(test_release_and_reuse),
      cmocka_unit_test(test_streamed_equals_resident),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_kv_cache_refused),
      cmocka_unit_test(test_mixed_steps),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
