/* Op helpers every backend shares: the rope inverse frequency, the rope
 * parameters of an op, filling step tensors and SAMPLE's params tensors,
 * and SAMPLE's shared arithmetic (sample_math.h). The op kinds themselves
 * (names, operands, parameters, checks) are the op table's
 * (src/core/op_table.c). */
#include "foundry/ops.h"

#include "sample_math.h"

#include <math.h>
#include <string.h>

/* Ported from the Llama session's rope tables (the transformers rule for
 * llama3: long wavelengths divided by factor, short ones kept, the band in
 * between interpolated); the double arithmetic is unchanged. */
double fdy_rope_inverse_frequency(const fdy_op_params *params, uint32_t j) {
  double inv = 1.0 / pow(params->rope.theta, (2.0 * j) / params->rope.head_dim);
  if (!params->rope.llama3) {
    return inv;
  }
  double old = (double)params->rope.original_max_position;
  double low_wavelen = old / params->rope.low_freq_factor;
  double high_wavelen = old / params->rope.high_freq_factor;
  double wavelen = 2.0 * M_PI / inv;
  if (wavelen < high_wavelen) {
    return inv;
  }
  if (wavelen > low_wavelen) {
    return inv / params->rope.factor;
  }
  double smooth =
      (old / wavelen - params->rope.low_freq_factor) /
      (params->rope.high_freq_factor - params->rope.low_freq_factor);
  return (1.0 - smooth) * inv / params->rope.factor + smooth * inv;
}

fdy_op_params fdy_rope_params_of(const fdy_op *op) {
  fdy_op_params p;
  memset(&p, 0, sizeof p);
  if (op->kind == FDY_OP_ROPE) {
    p.rope = op->params.rope;
  } else if (op->kind == FDY_OP_ROPE_ATTENTION) {
    p.rope = op->params.rope_attention.rope;
  }
  return p;
}

void fdy_step_set_row(int32_t *step, uint32_t t, int32_t id, uint32_t sequence,
                      uint32_t position) {
  step[FDY_STEP_ID(t)] = id;
  step[FDY_STEP_POSITION(t)] = (int32_t)position;
  step[FDY_STEP_SEQUENCE(t)] = (int32_t)sequence;
}

void fdy_step_set_chunk(int32_t *step, const int32_t *ids, uint32_t count,
                        uint32_t sequence, uint32_t position) {
  step[FDY_STEP_COUNT] = (int32_t)count;
  for (uint32_t t = 0; t < count; t++) {
    fdy_step_set_row(step, t, ids[t], sequence, position + t);
  }
}

void fdy_sample_set_row(uint32_t *params, uint32_t t,
                        const fdy_sample_params *p, uint32_t counter) {
  uint32_t *w = params + (uint64_t)t * FDY_SAMPLE_FIELDS;
  memcpy(&w[FDY_SAMPLE_TEMPERATURE], &p->temperature, sizeof(float));
  w[FDY_SAMPLE_TOP_K] = p->top_k;
  memcpy(&w[FDY_SAMPLE_TOP_P], &p->top_p, sizeof(float));
  memcpy(&w[FDY_SAMPLE_MIN_P], &p->min_p, sizeof(float));
  w[FDY_SAMPLE_SEED_LOW] = (uint32_t)p->seed;
  w[FDY_SAMPLE_SEED_HIGH] = (uint32_t)(p->seed >> 32);
  w[FDY_SAMPLE_COUNTER] = counter;
}

double fdy_sample_uniform(uint64_t seed, uint32_t counter) {
  return fdy_sample_uniform_of(seed, counter);
}

double fdy_sample_exp(double y) {
  return fdy_sample_exp_of(y);
}
