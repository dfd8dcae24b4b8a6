/* Continuous batching: generation of many prompts on one session, every
 * slot sampling alike (greedy by default).
 * Every prompt is checked before any work. When no sequence is in the
 * session, the next prompt is admitted alone (the prefill step, whose
 * drawn id is its first id). Otherwise each step of the batch
 * (fdy_llama_session_step) carries a decode row for every sequence whose
 * prompt is in, feeding its last id, and fills its other rows with prompt
 * chunks: of prompts begun, then of waiting prompts taking free slots; the
 * step that feeds a prompt's last id gives its first generated id. A
 * sequence that ends (its max_tokens, a stop id, the callback) frees its
 * slot at once for the next step. The last id of a sequence is never fed
 * back, as in generate.c. Prefill time covers the prompts admitted alone,
 * decode time the steps of the batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"

/* The owner of a free slot. */
#define NO_PROMPT UINT32_MAX

void fdy_llama_batch_generation_free(fdy_llama_batch_generation *generation) {
  if (!generation) {
    return;
  }
  for (uint32_t i = 0; generation->sequences && i < generation->count; i++) {
    free(generation->sequences[i].ids);
  }
  free(generation->sequences);
  memset(generation, 0, sizeof *generation);
}

/* Every prompt against the context and the vocabulary; err->ids[0] = the
 * prompt's index. */
static fdy_status check_prompts(const fdy_llama_session *s,
                                const fdy_llama_batch_prompt *prompts,
                                uint32_t count, fdy_error *err) {
  for (uint32_t i = 0; i < count; i++) {
    const fdy_llama_batch_prompt *p = &prompts[i];
    if (!p->ids || p->count == 0) {
      fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                    "prompt %u is empty: give at least one token id", i);
      if (err) {
        err->ids[0] = i;
      }
      return FDY_ERR_INVALID_ARGUMENT;
    }
    /* the prompt and every generated id but the last are fed */
    uint64_t needed =
        (uint64_t)p->count + (p->max_tokens ? p->max_tokens - 1 : 0);
    if (needed > s->context) {
      fdy_error_set(err, FDY_ERR_CONTEXT,
                    "prompt %u: %u ids and up to %u new ids need %llu "
                    "positions (every id but the last is fed back), but the "
                    "context holds %u",
                    i, p->count, p->max_tokens, (unsigned long long)needed,
                    s->context);
      if (err) {
        err->ids[0] = i;
        err->expected = s->context;
        err->actual = needed;
      }
      return FDY_ERR_CONTEXT;
    }
    fdy_status st = fdy_llama_session_check(s, p->ids, p->count, 0, 0, err);
    if (st != FDY_OK) {
      if (err) {
        err->ids[1] = err->ids[0];
        err->ids[0] = i;
      }
      fdy_error_prefix(err, "prompt %u", i);
      return st;
    }
  }
  return FDY_OK;
}

/* One generation in progress. */
typedef struct batch {
  fdy_llama_session *session;
  const fdy_llama_batch_prompt *prompts;
  const fdy_llama_batch_options *options;
  fdy_llama_batch_generation *out;
  uint32_t *owner;  /* [max_sequences]: the prompt in each slot, or
                       NO_PROMPT */
  uint32_t *fed;    /* [max_sequences]: the owner's prompt ids fed so far */
  uint32_t active;  /* slots in use */
  uint32_t waiting; /* the next prompt to admit */
  fdy_llama_step_part *parts; /* [max_sequences]: the parts of a step */
  int32_t *next;              /* [max_sequences] */
  int64_t prefill_ns, decode_ns;
} batch;

/* Adds id to the sequence in slot and hands it to the callback; when the
 * sequence has ended, releases the slot. */
static fdy_status take(batch *b, uint32_t slot, int32_t id, fdy_error *err) {
  uint32_t index = b->owner[slot];
  const fdy_llama_batch_options *o = b->options;
  fdy_llama_batch_sequence *seq = &b->out->sequences[index];
  seq->ids[seq->count++] = id;
  bool stop =
      !o->ignore_eos &&
      fdy_llama_is_stop(b->session->config, o->stop_ids, o->stop_count, id);
  bool more = !o->on_token || o->on_token(o->ctx, index, id);
  seq->stopped_at_eos = stop;
  seq->interrupted = !more;
  if (more && !stop && seq->count < b->prompts[index].max_tokens) {
    return FDY_OK;
  }
  b->owner[slot] = NO_PROMPT;
  b->active--;
  return fdy_llama_session_release(b->session, slot, err);
}

/* The next waiting prompt that generates anything, or prompt_count. */
static uint32_t next_waiting(batch *b, uint32_t prompt_count) {
  while (b->waiting < prompt_count && b->prompts[b->waiting].max_tokens == 0) {
    b->waiting++;
  }
  return b->waiting;
}

/* Admits the next waiting prompt alone, through the prefill step (nothing
 * is decoding, so that no sequence waits for it). */
static fdy_status admit_alone(batch *b, fdy_error *err) {
  uint32_t index = b->waiting++;
  const fdy_llama_batch_prompt *p = &b->prompts[index];
  uint32_t slot = 0;
  int64_t t0 = fdy_now_ns();
  fdy_status st =
      fdy_llama_session_admit(b->session, p->ids, p->count, &slot, err);
  b->prefill_ns += fdy_now_ns() - t0;
  if (st != FDY_OK) {
    return st;
  }
  b->out->prefill_tokens += p->count;
  b->owner[slot] = index;
  b->fed[slot] = p->count;
  b->active++;
  return take(b, slot, fdy_llama_session_slot_next(b->session, slot), err);
}

/* The parts of the next step: a decode row for every sequence whose
 * prompt is in, then the rest of the step's rows for prompt chunks, first
 * of the prompts begun, then of waiting prompts admitted into free slots;
 * *decode_rows = the decode rows. */
static uint32_t plan_step(batch *b, uint32_t prompt_count,
                          uint32_t *decode_rows) {
  fdy_llama_session *s = b->session;
  uint32_t count = 0;
  for (uint32_t slot = 0; slot < s->max_sequences; slot++) {
    uint32_t index = b->owner[slot];
    if (index != NO_PROMPT && b->fed[slot] == b->prompts[index].count) {
      const fdy_llama_batch_sequence *seq = &b->out->sequences[index];
      b->parts[count++] = (fdy_llama_step_part){
          .slot = slot, .ids = &seq->ids[seq->count - 1], .count = 1};
    }
  }
  *decode_rows = count;
  uint32_t room = s->step_rows - count;
  for (uint32_t slot = 0; room > 0 && slot < s->max_sequences; slot++) {
    uint32_t index = b->owner[slot];
    if (index == NO_PROMPT && next_waiting(b, prompt_count) < prompt_count) {
      index = b->owner[slot] = b->waiting++;
      b->fed[slot] = 0;
      b->active++;
    }
    const fdy_llama_batch_prompt *p =
        index == NO_PROMPT ? NULL : &b->prompts[index];
    if (p && b->fed[slot] < p->count) {
      uint32_t n =
          p->count - b->fed[slot] < room ? p->count - b->fed[slot] : room;
      b->parts[count++] = (fdy_llama_step_part){
          .slot = slot, .ids = p->ids + b->fed[slot], .count = n};
      room -= n;
    }
  }
  return count;
}

/* One step of the batch: the decode rows and prompt chunks of plan_step;
 * each part that ends a prompt gives that prompt's first id. */
static fdy_status step(batch *b, uint32_t prompt_count, fdy_error *err) {
  uint32_t decode_rows = 0;
  uint32_t count = plan_step(b, prompt_count, &decode_rows);
  int64_t t0 = fdy_now_ns();
  fdy_status st =
      fdy_llama_session_step(b->session, b->parts, count, b->next, NULL, err);
  b->decode_ns += fdy_now_ns() - t0;
  if (st != FDY_OK) {
    return st;
  }
  fdy_llama_batch_generation *out = b->out;
  out->decode_steps++;
  out->decode_tokens += decode_rows;
  out->max_rows = decode_rows > out->max_rows ? decode_rows : out->max_rows;
  for (uint32_t i = 0; st == FDY_OK && i < count; i++) {
    const fdy_llama_step_part *part = &b->parts[i];
    uint32_t slot = part->slot;
    if (i < decode_rows) {
      st = take(b, slot, b->next[i], err);
      continue;
    }
    out->prefill_tokens += part->count;
    out->chunked_tokens += part->count;
    b->fed[slot] += part->count;
    if (b->fed[slot] == b->prompts[b->owner[slot]].count) {
      st = take(b, slot, b->next[i], err);
    }
  }
  return st;
}

fdy_status fdy_llama_generate_batch(fdy_llama_session *session,
                                    const fdy_llama_batch_prompt *prompts,
                                    uint32_t prompt_count,
                                    const fdy_llama_batch_options *options,
                                    fdy_llama_batch_generation *out,
                                    fdy_error *err) {
  if (out) {
    memset(out, 0, sizeof *out);
  }
  if (!session || !options || !out || !prompts || prompt_count == 0 ||
      (options->stop_count > 0 && !options->stop_ids)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_generate_batch needs a session, at least "
                         "one prompt, options (with stop_ids when stop_count "
                         "> 0) and an output");
  }
  fdy_status st = check_prompts(session, prompts, prompt_count, err);
  if (st == FDY_OK && options->sampling) {
    st = fdy_llama_sampling_check(options->sampling, err);
  }
  for (uint32_t slot = 0; st == FDY_OK && slot < session->max_sequences;
       slot++) {
    st = fdy_llama_session_set_sampling(session, slot, options->sampling, err);
  }
  if (st != FDY_OK) {
    return st;
  }
  uint32_t slots = session->max_sequences;
  batch b = {
      .session = session, .prompts = prompts, .options = options, .out = out};
  b.owner = malloc(sizeof *b.owner * slots);
  b.fed = malloc(sizeof *b.fed * slots);
  b.parts = malloc(sizeof *b.parts * slots);
  b.next = malloc(sizeof *b.next * slots);
  out->sequences = calloc(prompt_count, sizeof *out->sequences);
  if (out->sequences) {
    out->count = prompt_count;
  }
  for (uint32_t i = 0; out->sequences && i < prompt_count; i++) {
    uint32_t n = prompts[i].max_tokens ? prompts[i].max_tokens : 1;
    out->sequences[i].ids = malloc(sizeof *out->sequences[i].ids * n);
    if (!out->sequences[i].ids) {
      st = FDY_ERR_OUT_OF_MEMORY;
    }
  }
  if (st != FDY_OK || !b.owner || !b.fed || !b.parts || !b.next ||
      !out->sequences) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  for (uint32_t slot = 0; slot < slots; slot++) {
    b.owner[slot] = NO_PROMPT;
  }

  fdy_llama_session_reset(session);
  while (st == FDY_OK &&
         (b.active > 0 || next_waiting(&b, prompt_count) < prompt_count)) {
    st = b.active == 0 ? admit_alone(&b, err) : step(&b, prompt_count, err);
  }
  out->prefill_seconds = (double)b.prefill_ns * 1e-9;
  out->decode_seconds = (double)b.decode_ns * 1e-9;
  out->decode_tokens_per_second =
      out->decode_seconds > 0 && out->decode_tokens > 0
          ? (double)out->decode_tokens / out->decode_seconds
          : 0.0;

cleanup:
  if (st != FDY_OK) {
    fdy_llama_batch_generation_free(out);
  }
  free(b.owner);
  free(b.fed);
  free(b.parts);
  free(b.next);
  return st;
}
