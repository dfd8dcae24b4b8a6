/* `foundry infer-bench`: end-to-end Llama inference measured the way a user
 * runs it (docs/infer-bench.md). One session of `batch` sequences is
 * created once (setup reported apart); each execution resets it, prefills
 * each sequence's prompt into its slot (one fdy_llama_session_append per
 * sequence) and decodes gen_tokens greedy ids per sequence with EOS ignored:
 * gen_tokens - 1 decode steps of `batch` rows (fdy_llama_session_decode),
 * each timed. warmup executions are discarded, iterations measured. The
 * console summary and the JSON report (format FDY_INFER_REPORT_FORMAT) give
 * the end-to-end median with a bootstrap interval (foundry/bench.h
 * statistics), prefill time and tokens/s, time to first token, decode
 * tokens/s per sequence and in aggregate, the decode step's percentiles,
 * device memory per class, the achieved decode bandwidth against the
 * device-memory bandwidth measured in the same run, the weights resident
 * and streamed under the weight budget with the bytes streamed per decode
 * step, host memory, and (cuda, weights streamed) decode tokens/s against
 * the bound of the host-to-device ceiling measured in the same run. With a
 * trace path, one more (unmeasured) execution on a session that times every
 * command is written as a Chrome trace.
 *
 * Prompt ids of the protocol (reproduced by scripts/torch_baseline.py):
 * a SplitMix64 (foundry/bench.h) whose initial state is
 * fdy_bench_stream_seed(seed, FDY_INFER_PROMPT_STREAM); each id is
 * next() % vocab_size, drawn again while it is the BOS id or an EOS id of
 * config.json. Sequence k of a batch takes the prompt of seed + k (mod
 * 2^64), so sequence 0's is the prompt of a batch of one. */
#ifndef FOUNDRY_INFER_BENCH_H
#define FOUNDRY_INFER_BENCH_H

#include <stdio.h>

#include "foundry/llama_session.h"
#include "foundry/manifest.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FDY_INFER_REPORT_FORMAT  "foundry.infer.report"
#define FDY_INFER_REPORT_VERSION 3
#define FDY_INFER_PROTOCOL       "token-ids-512x128-v1"
#define FDY_INFER_PROMPT_TOKENS  512u
#define FDY_INFER_GEN_TOKENS     128u
/* Stream of the prompt ids (the bootstrap of the end-to-end median uses
 * stream 0). */
#define FDY_INFER_PROMPT_STREAM ((uint64_t)2 << 32)
/* Bytes of each buffer of the device-to-device ceiling (cuda). */
#define FDY_INFER_CEILING_BYTES ((uint64_t)512 << 20)

/* The protocol's prompt: count ids from seed (rule above). */
void fdy_infer_prompt_ids(const fdy_llama_config *config, uint64_t seed,
                          int32_t *ids, uint32_t count);

/* Weight bytes one decode token reads: over the launches of the plan's
 * step "decode", the bytes of every weight and weight view the op reads,
 * one row of the table for an embedding lookup. FDY_ERR_NOT_FOUND when the
 * plan has no step "decode". */
fdy_status fdy_infer_decode_weight_bytes(const fdy_plan *plan, uint64_t *out,
                                         fdy_error *err);

/* Weight bytes the plan's section `section` copies from the host (its
 * prefetch commands) into *bytes, and the largest single copy into
 * *largest (may be NULL): for a step ("prefill", "decode") the weights it
 * streams, every run; for "setup" the resident weights. Both 0 when the
 * section copies none. FDY_ERR_NOT_FOUND when the plan has no such
 * section. */
fdy_status fdy_infer_copied_weight_bytes(const fdy_plan *plan,
                                         const char *section, uint64_t *bytes,
                                         uint64_t *largest, fdy_error *err);

/* Everything `foundry infer-bench` was given. Borrowed for the call. */
typedef struct fdy_infer_options {
  const fdy_llama_model *model;
  const char *model_dir;          /* --model, recorded */
  const fdy_manifest *checkpoint; /* the files of model_dir with their
                                     SHA-256 and the time hashing took,
                                     recorded; NULL = not recorded */
  const char *pinned_manifest;    /* --manifest the checkpoint was checked
                                     against, recorded; NULL = none */
  fdy_backend *backend;           /* runs the session (cpu or cuda) */
  const char *backend_name;       /* "cpu" or "cuda", recorded */
  const int32_t *prompt;   /* batch x prompt_count ids: sequence k's prompt
                              at prompt + k x prompt_count (from seed + k
                              by the rule above without a file) */
  uint32_t prompt_count;   /* > 0: ids of each sequence's prompt */
  const char *prompt_file; /* their file, or NULL: from seed */
  uint64_t seed;           /* prompt (without a file) and bootstrap */
  const fdy_llama_model *draft_model; /* speculative decoding: the draft
                                         (resident, same backend); NULL =
                                         none (batch must be 1 with one) */
  const char *draft_dir;              /* --draft-model, recorded */
  uint32_t draft_tokens;              /* K (fdy_llama_speculative_options): 1 to
                                         FDY_LLAMA_MAX_DRAFT_TOKENS */
  bool draft_fixed;                   /* K fixed, else adaptive up to 2 K */
  uint32_t batch;         /* sequences decoded together: the session's
                             max_sequences and the rows of each decode
                             step, 1 to FDY_LLAMA_MAX_SEQUENCES */
  uint32_t gen_tokens;    /* > 0: ids generated per execution */
  uint32_t warmup;        /* discarded executions */
  uint32_t iterations;    /* > 0: measured executions */
  uint32_t context;       /* KV positions; 0 = prompt + gen_tokens */
  uint64_t weight_budget; /* device bytes for weights; 0 = the device's
                             memory (everything resident when it fits) */
  uint32_t buffers;       /* slots of streamed weights; 0 = the default */
  bool skip_packing;      /* streamed units copied extent by extent
                             (--pack-streamed off; fdy_executor_options) */
  uint32_t prefill_rows;  /* tokens per prefill run; 0 = the default */
  fdy_dtype kv_dtype;     /* KV cache: F32 (the zero value) or F16 */
  bool no_graphs;         /* steps run command by command (--graphs off) */
  bool serial_launch;     /* the backend was created with serial
                             launches (--dependent-launch off): recorded */
  uint32_t bootstrap_resamples;
  const char *report_path; /* required: never overwritten */
  const char *trace_path;  /* NULL = no trace; never overwritten */
  int argc;                /* invocation recorded in the report */
  char *const *argv;
  FILE *console; /* summary; NULL = none */
  bool progress; /* a line per execution on stderr */
} fdy_infer_options;

/* Checks that leave nothing behind: prompt_count, gen_tokens and iterations
 * positive, batch from 1 to FDY_LLAMA_MAX_SEQUENCES (1 with a
 * prompt_file), warmup + iterations within 32 bits
 * (FDY_ERR_INVALID_ARGUMENT, name = the flag), a trace path naming another
 * file than the report (FDY_ERR_INVALID_ARGUMENT), then the report and
 * trace paths as fdy_bench_check_options does (FDY_ERR_EXISTS,
 * FDY_ERR_NOT_FOUND, FDY_ERR_IO, name = the path). */
fdy_status fdy_infer_check_options(const fdy_infer_options *options,
                                   fdy_error *err);

/* Creates one session of options->batch sequences on options->backend,
 * measures the ceilings (cuda: device bandwidth; host-to-device from pinned
 * memory when weights are streamed), runs the executions, and with a trace
 * path replaces the session by one that collects timings and runs one more
 * execution, the same ids, for the trace. Prints the summary and writes the
 * trace and the report (the report also, with status "failed" and the error,
 * for a failure after the checks; the trace only on success). *written (may be
 * NULL) says whether this run put the report in place. Errors:
 * fdy_infer_check_options, the prompts' ids against the vocabulary and the
 * context (FDY_ERR_CONTEXT: prompt_count + gen_tokens - 1 positions above
 * the context), and whatever the session reports (an impossible weight budget:
 * FDY_ERR_BUDGET with expected = the budget, actual = the least one). */
fdy_status fdy_infer_bench_run(const fdy_infer_options *options, bool *written,
                               fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
