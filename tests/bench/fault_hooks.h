/* bench_hooks that run a bench through the fault backend (foundry/fault.h)
 * wrapped around its real backend, and keep the wrapper's counters. */
#ifndef FOUNDRY_TEST_FAULT_HOOKS_H
#define FOUNDRY_TEST_FAULT_HOOKS_H

#include "bench_internal.h"
#include "foundry/fault.h"

typedef struct fault_hooks {
  const fdy_fault_options *options; /* in */
  fdy_fault_stats stats;            /* out: the wrapper's counters at the end */
} fault_hooks;

static fdy_status fault_hooks_wrap(bench_hooks *h, fdy_backend *inner,
                                   fdy_backend **out, fdy_error *err) {
  const fault_hooks *f = h->ctx;
  return fdy_fault_backend_create(inner, f->options, out, err);
}

static void fault_hooks_unwrap(bench_hooks *h, fdy_backend *wrapper) {
  fault_hooks *f = h->ctx;
  f->stats = fdy_fault_get_stats(wrapper);
}

/* Makes h wrap its run's backend in the fault backend with options. */
static inline void fault_hooks_use(bench_hooks *h, fault_hooks *f,
                                   const fdy_fault_options *options) {
  *f = (fault_hooks){.options = options};
  h->wrap = fault_hooks_wrap;
  h->unwrap = fault_hooks_unwrap;
  h->ctx = f;
}

#endif
