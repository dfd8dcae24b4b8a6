/* Tests of speculative decoding (fdy_llama_generate_speculative) on the
 * CPU backend: greedy is lossless, i.e. the ids equal fdy_llama_generate's
 * on the target alone, bitwise, for every fixture drafting for itself
 * (every proposal accepted) and for every pair of fixtures of one
 * vocabulary (random weights: the draft is mostly wrong), with a fixed K of
 * 1, 3 and 8 and adaptive K, with and without EOS; the sessions hold
 * exactly the accepted positions afterwards (continuing both gives the
 * logits of a plain run bitwise, so no rejected id's KV entry is ever
 * read); fdy_llama_session_append_rows equals one pass per id and
 * fdy_llama_session_rewind refuses bad positions; the rejection rule
 * (fdy_speculative_verdict) turns draws of q into draws of p (chi-square
 * against p's frequencies; a rule that skips the residual fails it);
 * speculative sampling keeps the target's distribution (a two-sample
 * chi-square test against the target sampling alone, which tells the
 * draft's own distribution apart); a
 * draft of another vocabulary, a target whose steps are too small for K,
 * K out of range, bad sampling, sampling with ids_only sessions and a
 * prompt beyond the draft's context are refused before any work; rounds
 * driven by the caller (fdy_llama_speculator_round) on other slots of
 * batched sessions are lossless too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/speculative.h"
#include "llama_fixtures.h"

#define CONTEXT    64u
#define GEN_TOKENS 24u
#define MAX_K      8u

static fdy_llama_session *session_of(const fdy_llama_model *model,
                                     fdy_backend *cpu, uint32_t step_rows,
                                     uint32_t context) {
  fdy_llama_session_options o = {.backend = cpu,
                                 .context = context,
                                 .step_rows = step_rows,
                                 .ids_only = true};
  return make_session(model, &o);
}

static const int32_t prompt[] = {5, 17, 250, 3, 99, 41, 7};
#define PROMPT_COUNT (sizeof prompt / sizeof prompt[0])

/* The target's own greedy ids (fdy_llama_generate on a session of one
 * step row). */
static fdy_llama_generation plain(const fdy_llama_model *model,
                                  fdy_backend *cpu, bool ignore_eos) {
  fdy_llama_session *s = session_of(model, cpu, 0, CONTEXT);
  fdy_llama_generate_options o = {.max_tokens = GEN_TOKENS,
                                  .ignore_eos = ignore_eos};
  fdy_llama_generation g;
  fdy_error err;
  assert_int_equal(fdy_llama_generate(s, prompt, PROMPT_COUNT, &o, &g, &err),
                   FDY_OK);
  fdy_llama_session_destroy(s);
  return g;
}

/* Speculative ids equal to plain ones for the target and draft fixtures,
 * fixed K 1, 3, 8 and adaptive; every proposal accepted when the draft is
 * the target's own checkpoint. */
static void lossless(const char *target_name, const char *draft_name) {
  fdy_llama_model *target_model = open_fixture(target_name);
  fdy_llama_model *draft_model = open_fixture(draft_name);
  fdy_backend *cpu = cpu_backend(2);
  bool same = strcmp(target_name, draft_name) == 0;
  for (int ignore = 0; ignore < 2; ignore++) {
    fdy_llama_generation reference = plain(target_model, cpu, ignore);
    const struct {
      uint32_t k, max;
      bool fixed;
    } modes[] = {{1, 0, true}, {3, 0, true}, {8, 0, true}, {2, MAX_K, false}};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
      fdy_llama_session *target =
          session_of(target_model, cpu, MAX_K + 1, CONTEXT);
      fdy_llama_session *draft = session_of(draft_model, cpu, 0, CONTEXT);
      fdy_llama_generate_options o = {.max_tokens = GEN_TOKENS,
                                      .ignore_eos = ignore};
      fdy_llama_speculative_options spec = {.draft_tokens = modes[m].k,
                                            .max_draft_tokens = modes[m].max,
                                            .fixed = modes[m].fixed};
      fdy_llama_generation g;
      fdy_llama_speculative_stats stats;
      fdy_error err;
      assert_int_equal(fdy_llama_generate_speculative(target, draft, prompt,
                                                      PROMPT_COUNT, &o, &spec,
                                                      &g, &stats, &err),
                       FDY_OK);
      assert_int_equal(g.count, reference.count);
      assert_memory_equal(g.ids, reference.ids, sizeof *g.ids * g.count);
      assert_int_equal(g.stopped_at_eos, reference.stopped_at_eos);
      assert_true(stats.accepted <= stats.proposed);
      assert_true(stats.target_passes >= 1);
      /* every pass emits its accepted proposals and one id of its own */
      assert_int_equal(stats.accepted + stats.target_passes, g.count - 1);
      if (same && g.count == GEN_TOKENS) {
        assert_int_equal(stats.accepted, stats.proposed);
        assert_true(stats.target_passes < g.count - 1 || modes[m].k == 1);
      }
      /* both hold the prompt and every id but the last */
      assert_int_equal(fdy_llama_session_slot_position(target, 0),
                       PROMPT_COUNT + g.count - 1);
      assert_int_equal(fdy_llama_session_slot_position(draft, 0),
                       PROMPT_COUNT + g.count - 1);
      fdy_llama_generation_free(&g);
      fdy_llama_session_destroy(target);
      fdy_llama_session_destroy(draft);
    }
    fdy_llama_generation_free(&reference);
  }
  fdy_backend_destroy(cpu);
  fdy_llama_close(target_model);
  fdy_llama_close(draft_model);
}

static void test_self_draft(void **state) {
  (void)state;
  static const char *const fixtures[] = {"llama3-micro", "llama3-tiny",
                                         "llama3-micro-untied-g32",
                                         "llama3-micro-mha-g128"};
  for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
    lossless(fixtures[i], fixtures[i]);
  }
}

/* The fixtures of 512 ids drafting for one another. */
static void test_other_drafts(void **state) {
  (void)state;
  static const char *const fixtures[] = {
      "llama3-micro-untied-g32", "llama3-micro-mha-g128", "llama3-micro-mlx"};
  for (size_t t = 0; t < 3; t++) {
    for (size_t d = 0; d < 3; d++) {
      if (t != d) {
        lossless(fixtures[t], fixtures[d]);
      }
    }
  }
}

/* After speculation, the target continued with more ids gives the logits of
 * a plain session fed the same ids, bitwise: the rejected ids left nothing
 * that is read. */
static void test_no_state_leaks(void **state) {
  (void)state;
  fdy_llama_model *target_model = open_fixture("llama3-micro-untied-g32");
  fdy_llama_model *draft_model = open_fixture("llama3-micro-mha-g128");
  fdy_backend *cpu = cpu_backend(2);
  uint32_t vocab = fdy_llama_model_config(target_model)->vocab_size;
  fdy_llama_session_options o = {
      .backend = cpu, .context = CONTEXT, .step_rows = MAX_K + 1};
  fdy_llama_session *target = make_session(target_model, &o);
  o.step_rows = 0;
  fdy_llama_session *draft = make_session(draft_model, &o);
  fdy_llama_session *alone = make_session(target_model, &o);
  fdy_llama_generate_options go = {.max_tokens = GEN_TOKENS,
                                   .ignore_eos = true};
  fdy_llama_speculative_options spec = {.draft_tokens = 4, .fixed = true};
  fdy_llama_generation g;
  fdy_llama_speculative_stats stats;
  fdy_error err;
  assert_int_equal(fdy_llama_generate_speculative(target, draft, prompt,
                                                  PROMPT_COUNT, &go, &spec, &g,
                                                  &stats, &err),
                   FDY_OK);
  assert_true(stats.accepted < stats.proposed); /* something was rejected */
  int32_t fed[PROMPT_COUNT + GEN_TOKENS];
  memcpy(fed, prompt, sizeof prompt);
  memcpy(fed + PROMPT_COUNT, g.ids, sizeof *g.ids * (g.count - 1));
  assert_int_equal(fdy_llama_session_append(alone, 0, fed,
                                            PROMPT_COUNT + g.count - 1, NULL,
                                            NULL, &err),
                   FDY_OK);
  const int32_t more[4] = {g.ids[g.count - 1], 11, 300, 2};
  float *a = malloc(sizeof *a * vocab), *b = malloc(sizeof *b * vocab);
  assert_non_null(a);
  assert_non_null(b);
  for (int i = 0; i < 4; i++) {
    memset(a, 0xff, sizeof *a * vocab);
    memset(b, 0x7f, sizeof *b * vocab);
    assert_int_equal(
        fdy_llama_session_append(target, 0, &more[i], 1, NULL, a, &err),
        FDY_OK);
    assert_int_equal(
        fdy_llama_session_append(alone, 0, &more[i], 1, NULL, b, &err), FDY_OK);
    assert_memory_equal(a, b, sizeof *a * vocab);
  }
  free(a);
  free(b);
  fdy_llama_generation_free(&g);
  fdy_llama_session_destroy(target);
  fdy_llama_session_destroy(draft);
  fdy_llama_session_destroy(alone);
  fdy_backend_destroy(cpu);
  fdy_llama_close(target_model);
  fdy_llama_close(draft_model);
}

/* append_rows gives each row the next id of feeding the ids one by one;
 * rewind refuses positions beyond the slot's and free slots. */
static void test_append_rows_and_rewind(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_llama_session *rows = session_of(model, cpu, 6, CONTEXT);
  fdy_llama_session *one = session_of(model, cpu, 0, CONTEXT);
  fdy_error err;
  int32_t next[6];
  assert_int_equal(
      fdy_llama_session_append_rows(rows, 0, prompt, 6, next, NULL, &err),
      FDY_OK);
  for (uint32_t i = 0; i < 6; i++) {
    assert_int_equal(
        fdy_llama_session_append(one, 0, &prompt[i], 1, NULL, NULL, &err),
        FDY_OK);
    assert_int_equal(next[i], fdy_llama_session_slot_next(one, 0));
  }
  assert_int_equal(fdy_llama_session_slot_next(rows, 0), next[5]);
  /* 7 rows in steps of 6 */
  assert_int_equal(
      fdy_llama_session_append_rows(rows, 0, prompt, 7, next, NULL, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      fdy_llama_session_append_rows(rows, 0, prompt, 1, NULL, NULL, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_session_rewind(rows, 0, 7, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 6);
  assert_int_equal(fdy_llama_session_rewind(rows, 1, 0, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_session_slot_position(rows, 0), 6);
  /* back to 3 positions, then the same ids again: the same next ids */
  assert_int_equal(fdy_llama_session_rewind(rows, 0, 3, &err), FDY_OK);
  assert_int_equal(fdy_llama_session_slot_position(rows, 0), 3);
  assert_int_equal(fdy_llama_session_slot_next(rows, 0), -1);
  int32_t again[3];
  assert_int_equal(
      fdy_llama_session_append_rows(rows, 0, prompt + 3, 3, again, NULL, &err),
      FDY_OK);
  assert_memory_equal(again, next + 3, sizeof again);
  fdy_llama_session_destroy(rows);
  fdy_llama_session_destroy(one);
  /* every row's logits: those of feeding the ids one by one, bitwise */
  fdy_llama_session_options lo = {
      .backend = cpu, .context = CONTEXT, .step_rows = 6};
  rows = make_session(model, &lo);
  lo.step_rows = 0;
  one = make_session(model, &lo);
  uint32_t vocab = fdy_llama_model_config(model)->vocab_size;
  float *all = malloc(sizeof *all * 6 * vocab);
  float *each = malloc(sizeof *each * vocab);
  assert_non_null(all);
  assert_non_null(each);
  memset(all, 0xff, sizeof *all * 6 * vocab);
  assert_int_equal(
      fdy_llama_session_append_rows(rows, 0, prompt, 6, next, all, &err),
      FDY_OK);
  for (uint32_t i = 0; i < 6; i++) {
    memset(each, 0x7f, sizeof *each * vocab);
    assert_int_equal(
        fdy_llama_session_append(one, 0, &prompt[i], 1, NULL, each, &err),
        FDY_OK);
    assert_memory_equal(all + (uint64_t)i * vocab, each, sizeof *each * vocab);
  }
  free(all);
  free(each);
  fdy_llama_session_destroy(rows);
  fdy_llama_session_destroy(one);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* Sampled generations of SAMPLED_TOKENS ids, top-k 2: at most 16
 * possible sequences of one model, each counted in its cell (room for
 * those of two models). */
#define SAMPLED_TOKENS 4u
#define SAMPLED_RUNS   600u
#define SAMPLED_CELLS  (2u << SAMPLED_TOKENS)

static const fdy_sample_params sampled = {
    .temperature = 1.0f, .top_k = 2, .top_p = 1.0f, .min_p = 0.0f};

/* The sequences met (shared by the samples compared) and each sample's
 * count of each. */
typedef struct sequences {
  int32_t ids[SAMPLED_CELLS][SAMPLED_TOKENS];
  uint32_t count;
} sequences;

static void count_cell(sequences *met, uint32_t *counts,
                       const fdy_llama_generation *g) {
  assert_int_equal(g->count, SAMPLED_TOKENS);
  uint32_t cell = 0;
  while (cell < met->count &&
         memcmp(met->ids[cell], g->ids, sizeof met->ids[cell]) != 0) {
    cell++;
  }
  if (cell == met->count) {
    assert_true(met->count < SAMPLED_CELLS);
    memcpy(met->ids[met->count++], g->ids, sizeof met->ids[cell]);
  }
  counts[cell]++;
}

/* SAMPLED_RUNS generations of target (seeds from seed0), drafted by draft
 * when not NULL, counted into c. */
static void sample_runs(const fdy_llama_model *target_model,
                        const fdy_llama_model *draft_model, fdy_backend *cpu,
                        uint64_t seed0, sequences *met, uint32_t *counts) {
  fdy_llama_session_options o = {
      .backend = cpu, .context = CONTEXT, .step_rows = draft_model ? 3 : 0};
  fdy_llama_session *target = make_session(target_model, &o);
  o.step_rows = 0;
  fdy_llama_session *draft = draft_model ? make_session(draft_model, &o) : NULL;
  fdy_llama_speculative_options spec = {.draft_tokens = 2, .fixed = true};
  for (uint32_t run = 0; run < SAMPLED_RUNS; run++) {
    fdy_sample_params p = sampled;
    p.seed = seed0 + run;
    fdy_llama_generate_options go = {
        .max_tokens = SAMPLED_TOKENS, .ignore_eos = true, .sampling = &p};
    fdy_llama_generation g;
    fdy_error err;
    fdy_status st =
        draft ? fdy_llama_generate_speculative(target, draft, prompt,
                                               PROMPT_COUNT, &go, &spec, &g,
                                               NULL, &err)
              : fdy_llama_generate(target, prompt, PROMPT_COUNT, &go, &g, &err);
    assert_int_equal(st, FDY_OK);
    count_cell(met, counts, &g);
    fdy_llama_generation_free(&g);
  }
  fdy_llama_session_destroy(target);
  if (draft) {
    fdy_llama_session_destroy(draft);
  }
}

/* Two-sample chi-square statistic of equal-sized samples a and b (over the
 * cells either reaches), and its degrees of freedom. */
static double chi_square(const uint32_t *a, const uint32_t *b, uint32_t *df) {
  double x2 = 0.0;
  *df = 0;
  for (uint32_t i = 0; i < SAMPLED_CELLS; i++) {
    double n = (double)a[i] + b[i];
    if (n > 0) {
      double d = (double)a[i] - b[i];
      x2 += d * d / n;
      ++*df;
    }
  }
  --*df;
  return x2;
}

/* The chi-square quantile of probability 0.999 for df degrees of freedom
 * (Wilson-Hilferty; z = 3.09). */
static double critical_999(uint32_t df) {
  double v = 2.0 / (9.0 * df);
  double c = 1.0 - v + 3.09 * sqrt(v);
  return df * c * c * c;
}

/* The chi-square statistic of counts against the probabilities p (n
 * draws; every p[i] > 0 in the cells compared). */
static double chi_square_of(const uint32_t *counts, const double *p,
                            uint32_t cells, uint32_t n) {
  double x2 = 0.0;
  for (uint32_t i = 0; i < cells; i++) {
    double e = p[i] * n, d = counts[i] - e;
    x2 += d * d / e;
  }
  return x2;
}

/* x drawn from q, then the rule: the results follow p. p and q overlap
 * (each holds ids the other lacks, and they differ where both hold), so
 * acceptance, rejection and the residual all matter: the same test fails
 * for the draws of q themselves and for a rule drawing its replacement
 * from p instead of the residual. */
static void test_verdict_follows_target(void **state) {
  (void)state;
  enum { V = 6, N = 200000 };
  const double p[V] = {0.30, 0.25, 0.20, 0.15, 0.10, 0.0};
  const double q[V] = {0.05, 0.40, 0.20, 0.0, 0.15, 0.20};
  uint32_t rule[V] = {0}, drafted[V] = {0}, no_residual[V] = {0};
  uint32_t accepted_count = 0;
  for (uint32_t n = 0; n < N; n++) {
    double u = fdy_sample_uniform(7, n), run = 0.0;
    int32_t x = 0;
    while (x < V - 1 && (run += q[x]) <= u) {
      x++;
    }
    bool accepted = false;
    int32_t id = fdy_speculative_verdict(p, q, V, x, fdy_sample_uniform(8, n),
                                         fdy_sample_uniform(9, n), &accepted);
    assert_true(id >= 0 && id < V);
    assert_true(p[id] > 0.0);
    assert_true(!accepted || id == x);
    accepted_count += accepted;
    rule[id]++;
    drafted[x]++;
    /* the wrong rule: a rejected x replaced by a draw from p */
    int32_t wrong = id;
    if (!accepted) {
      double v = fdy_sample_uniform(9, n), sum = 0.0;
      wrong = 0;
      while (wrong < V - 1 && (sum += p[wrong]) <= v) {
        wrong++;
      }
    }
    no_residual[wrong]++;
  }
  /* 5 cells of p > 0: 4 degrees of freedom */
  assert_true(chi_square_of(rule, p, V - 1, N) < critical_999(4));
  assert_true(chi_square_of(no_residual, p, V - 1, N) > critical_999(4));
  assert_true(drafted[V - 1] > 0); /* q's draws: an id p lacks */
  /* acceptance rate: sum of min(p, q) = 0.05+0.25+0.2+0+0.1 = 0.6 */
  assert_true(fabs((double)accepted_count / N - 0.6) < 0.01);
  /* p equal to q: everything accepted */
  bool accepted = false;
  assert_int_equal(fdy_speculative_verdict(p, p, V, 2, 0.999, 0.5, &accepted),
                   2);
  assert_true(accepted);
}

/* Speculative sampling draws the target's distribution: its sequences of 4
 * ids (top-k 2, so at most 16) against the target sampling alone on other
 * seeds pass a two-sample chi-square test at 0.999 (fixed seeds: the
 * outcome is deterministic), while the draft sampling alone fails it
 * against the target (the test tells the two apart). */
static void test_sampling_keeps_distribution(void **state) {
  (void)state;
  fdy_llama_model *target_model = open_fixture("llama3-micro-untied-g32");
  fdy_llama_model *draft_model = open_fixture("llama3-micro-mha-g128");
  fdy_backend *cpu = cpu_backend(1);
  sequences met = {.count = 0};
  uint32_t spec[SAMPLED_CELLS] = {0}, alone[SAMPLED_CELLS] = {0};
  sample_runs(target_model, draft_model, cpu, 1, &met, spec);
  sample_runs(target_model, NULL, cpu, 1000001, &met, alone);
  uint32_t df = 0;
  double x2 = chi_square(spec, alone, &df);
  assert_true(df >= 7);
  assert_true(x2 < critical_999(df));
  uint32_t draft_alone[SAMPLED_CELLS] = {0};
  sample_runs(draft_model, NULL, cpu, 2000001, &met, draft_alone);
  x2 = chi_square(draft_alone, alone, &df);
  assert_true(x2 > critical_999(df));
  fdy_backend_destroy(cpu);
  fdy_llama_close(target_model);
  fdy_llama_close(draft_model);
}

/* A conversation: a second generation with keep_context continues both
 * sessions after the first and equals fdy_llama_generate's continuation
 * bitwise; sessions at different positions are refused. */
static void test_keep_context(void **state) {
  (void)state;
  fdy_llama_model *target_model = open_fixture("llama3-micro-untied-g32");
  fdy_llama_model *draft_model = open_fixture("llama3-micro-mha-g128");
  fdy_backend *cpu = cpu_backend(2);
  fdy_llama_session *alone = session_of(target_model, cpu, 0, CONTEXT);
  fdy_llama_session *target = session_of(target_model, cpu, 5, CONTEXT);
  fdy_llama_session *draft = session_of(draft_model, cpu, 0, CONTEXT);
  const int32_t second[3] = {77, 12, 400};
  fdy_llama_speculative_options spec = {.draft_tokens = 4, .fixed = true};
  fdy_error err;
  for (int turn = 0; turn < 2; turn++) {
    const int32_t *ids = turn ? second : prompt;
    uint32_t count = turn ? 3 : PROMPT_COUNT;
    fdy_llama_generate_options o = {
        .max_tokens = 10, .ignore_eos = true, .keep_context = turn == 1};
    fdy_llama_generation a, b;
    assert_int_equal(fdy_llama_generate(alone, ids, count, &o, &a, &err),
                     FDY_OK);
    assert_int_equal(fdy_llama_generate_speculative(target, draft, ids, count,
                                                    &o, &spec, &b, NULL, &err),
                     FDY_OK);
    assert_int_equal(a.count, b.count);
    assert_memory_equal(a.ids, b.ids, sizeof *a.ids * a.count);
    assert_int_equal(fdy_llama_session_position(target),
                     fdy_llama_session_position(alone));
    assert_int_equal(fdy_llama_session_position(draft),
                     fdy_llama_session_position(alone));
    fdy_llama_generation_free(&a);
    fdy_llama_generation_free(&b);
  }
  /* the draft one position behind */
  assert_int_equal(fdy_llama_session_rewind(
                       draft, 0, fdy_llama_session_position(draft) - 1, &err),
                   FDY_OK);
  fdy_llama_generate_options o = {.max_tokens = 2, .keep_context = true};
  fdy_llama_generation g;
  assert_int_equal(fdy_llama_generate_speculative(target, draft, second, 3, &o,
                                                  &spec, &g, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, fdy_llama_session_position(target));
  assert_int_equal(err.actual, fdy_llama_session_position(draft));
  fdy_llama_session_destroy(alone);
  fdy_llama_session_destroy(target);
  fdy_llama_session_destroy(draft);
  fdy_backend_destroy(cpu);
  fdy_llama_close(target_model);
  fdy_llama_close(draft_model);
}

/* Bad pairs and options, refused before any work with their fields. */
static void test_refused(void **state) {
  (void)state;
  fdy_llama_model *micro = open_fixture("llama3-micro");
  fdy_llama_model *tiny = open_fixture("llama3-tiny");
  fdy_backend *cpu = cpu_backend(2);
  fdy_llama_session *target = session_of(micro, cpu, 5, CONTEXT);
  fdy_llama_session *other = session_of(tiny, cpu, 0, CONTEXT);
  fdy_llama_session *draft = session_of(micro, cpu, 0, 8);
  fdy_llama_generate_options o = {.max_tokens = 4};
  fdy_llama_speculative_options spec = {.draft_tokens = 4, .fixed = true};
  fdy_llama_generation g = {.count = 7};
  fdy_error err;
  /* another vocabulary, naming both sizes */
  assert_int_equal(fdy_llama_generate_speculative(target, other, prompt,
                                                  PROMPT_COUNT, &o, &spec, &g,
                                                  NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 1024);
  assert_int_equal(err.actual, 2048);
  assert_non_null(strstr(err.message, "2048"));
  assert_int_equal(g.count, 0);
  /* K beyond the target's rows (5 rows: K at most 4) */
  spec.draft_tokens = 5;
  assert_int_equal(fdy_llama_generate_speculative(target, draft, prompt,
                                                  PROMPT_COUNT, &o, &spec, &g,
                                                  NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 6);
  assert_int_equal(err.actual, 5);
  spec =
      (fdy_llama_speculative_options){.draft_tokens = 2, .max_draft_tokens = 9};
  assert_int_equal(fdy_llama_generate_speculative(target, draft, prompt,
                                                  PROMPT_COUNT, &o, &spec, &g,
                                                  NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  spec = (fdy_llama_speculative_options){.draft_tokens = 0, .fixed = true};
  assert_int_equal(fdy_llama_generate_speculative(target, draft, prompt,
                                                  PROMPT_COUNT, &o, &spec, &g,
                                                  NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  spec.draft_tokens = 2;
  /* sampling with sessions that return no logits, and bad sampling */
  fdy_sample_params hot = FDY_LLAMA_GREEDY;
  hot.temperature = 0.7f;
  o.sampling = &hot;
  assert_int_equal(fdy_llama_generate_speculative(target, draft, prompt,
                                                  PROMPT_COUNT, &o, &spec, &g,
                                                  NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(err.message, "ids_only"));
  hot.temperature = -1.0f;
  assert_int_equal(fdy_llama_generate_speculative(target, draft, prompt,
                                                  PROMPT_COUNT, &o, &spec, &g,
                                                  NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "temperature");
  o.sampling = NULL;
  /* the draft's context of 8 cannot hold 7 + 4 - 1 positions */
  assert_int_equal(fdy_llama_generate_speculative(target, draft, prompt,
                                                  PROMPT_COUNT, &o, &spec, &g,
                                                  NULL, &err),
                   FDY_ERR_CONTEXT);
  assert_non_null(strstr(err.message, "the draft"));
  assert_int_equal(fdy_llama_session_slot_position(target, 0), 0);
  fdy_llama_session_destroy(target);
  fdy_llama_session_destroy(other);
  fdy_llama_session_destroy(draft);
  fdy_backend_destroy(cpu);
  fdy_llama_close(micro);
  fdy_llama_close(tiny);
}

/* Rounds driven by the caller (fdy_llama_speculator_round and _keep) on
 * slot 2 of a target of 3 sequences (another sequence in slot 0) and slot
 * 1 of a draft of 2: the ids equal the target's own greedy ids alone, the
 * slots hold the prompt and every id but the last afterwards, the stats
 * add up, and a round's refusals come before any work. */
static void test_rounds_on_slots(void **state) {
  (void)state;
  fdy_llama_model *target_model = open_fixture("llama3-micro-untied-g32");
  fdy_llama_model *draft_model = open_fixture("llama3-micro-mha-g128");
  fdy_backend *cpu = cpu_backend(2);
  fdy_llama_generation reference = plain(target_model, cpu, true);
  fdy_llama_session_options o = {.backend = cpu,
                                 .context = CONTEXT,
                                 .max_sequences = 3,
                                 .step_rows = MAX_K + 1,
                                 .ids_only = true};
  fdy_llama_session *target = make_session(target_model, &o);
  o.max_sequences = 2;
  o.step_rows = 0;
  fdy_llama_session *draft = make_session(draft_model, &o);
  fdy_llama_speculator *s = NULL;
  fdy_error err;
  /* a sampled speculator needs logits */
  assert_int_equal(
      fdy_llama_speculator_create(target, draft, MAX_K, true, &s, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      fdy_llama_speculator_create(target, draft, MAX_K + 1, false, &s, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, MAX_K + 2);
  assert_int_equal(
      fdy_llama_speculator_create(target, draft, MAX_K, false, &s, &err),
      FDY_OK);
  const int32_t other[3] = {9, 8, 7};
  assert_int_equal(
      fdy_llama_session_append(target, 0, other, 3, NULL, NULL, &err), FDY_OK);
  assert_int_equal(fdy_llama_session_append(target, 2, prompt, PROMPT_COUNT,
                                            NULL, NULL, &err),
                   FDY_OK);
  int32_t ids[GEN_TOKENS];
  uint32_t count = 0;
  ids[count++] = fdy_llama_session_slot_next(target, 2);
  const int32_t *got = NULL;
  uint32_t n = 0;
  /* the draft's slot holds nothing yet, then fewer positions */
  assert_int_equal(
      fdy_llama_speculator_round(s, 2, 1, ids[0], 3, NULL, &got, &n, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      fdy_llama_session_append(draft, 1, prompt, 3, NULL, NULL, &err), FDY_OK);
  assert_int_equal(
      fdy_llama_speculator_round(s, 2, 1, ids[0], 3, NULL, &got, &n, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, PROMPT_COUNT);
  assert_int_equal(err.actual, 3);
  assert_int_equal(fdy_llama_session_append(draft, 1, prompt + 3,
                                            PROMPT_COUNT - 3, NULL, NULL, &err),
                   FDY_OK);
  assert_int_equal(fdy_llama_speculator_round(s, 2, 1, ids[0], MAX_K + 1, NULL,
                                              &got, &n, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_speculator_keep(s, 1, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  uint32_t k = 3;
  while (count < GEN_TOKENS) {
    uint32_t left = GEN_TOKENS - count - 1;
    uint32_t want = k < left ? k : left;
    assert_int_equal(fdy_llama_speculator_round(s, 2, 1, ids[count - 1], want,
                                                NULL, &got, &n, &err),
                     FDY_OK);
    assert_true(n >= 1 && n <= want + 1);
    uint32_t emitted = 0;
    while (emitted < n && count < GEN_TOKENS) {
      ids[count++] = got[emitted++];
    }
    assert_int_equal(fdy_llama_speculator_keep(s, emitted, &err), FDY_OK);
    assert_int_equal(fdy_llama_session_slot_position(target, 2),
                     PROMPT_COUNT + count - 1);
    assert_int_equal(fdy_llama_session_slot_position(draft, 1),
                     PROMPT_COUNT + count - 1);
    fdy_llama_speculative_options spec = {.draft_tokens = 3,
                                          .max_draft_tokens = MAX_K};
    k = fdy_llama_speculative_next_k(&spec, k, want, n - 1);
    assert_true(k >= 1 && k <= MAX_K);
  }
  assert_int_equal(reference.count, GEN_TOKENS);
  assert_memory_equal(ids, reference.ids, sizeof ids);
  fdy_llama_speculative_stats st = fdy_llama_speculator_stats(s);
  assert_int_equal(st.accepted + st.target_passes, GEN_TOKENS - 1);
  assert_true(st.accepted < st.proposed); /* the draft is mostly wrong */
  /* slot 0 was left alone */
  assert_int_equal(fdy_llama_session_slot_position(target, 0), 3);
  /* keep twice: no round open */
  assert_int_equal(fdy_llama_speculator_keep(s, 1, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  /* the adaptive rule */
  fdy_llama_speculative_options spec = {.draft_tokens = 2,
                                        .max_draft_tokens = 6};
  assert_int_equal(fdy_llama_speculative_next_k(&spec, 4, 4, 4), 6);
  assert_int_equal(fdy_llama_speculative_next_k(&spec, 2, 2, 2), 4);
  assert_int_equal(fdy_llama_speculative_next_k(&spec, 4, 4, 1), 2);
  spec.fixed = true;
  assert_int_equal(fdy_llama_speculative_next_k(&spec, 2, 2, 0), 2);
  fdy_llama_speculator_destroy(s);
  fdy_llama_speculator_destroy(NULL);
  fdy_llama_generation_free(&reference);
  fdy_llama_session_destroy(target);
  fdy_llama_session_destroy(draft);
  fdy_backend_destroy(cpu);
  fdy_llama_close(target_model);
  fdy_llama_close(draft_model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_self_draft),
      cmocka_unit_test(test_other_drafts),
      cmocka_unit_test(test_no_state_leaks),
      cmocka_unit_test(test_append_rows_and_rewind),
      cmocka_unit_test(test_verdict_follows_target),
      cmocka_unit_test(test_sampling_keeps_distribution),
      cmocka_unit_test(test_keep_context),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_rounds_on_slots),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
