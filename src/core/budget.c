/* Memory spaces and byte budgets. */
#include "foundry/core.h"

#include <assert.h>
#include <inttypes.h>

const char *fdy_memory_space_name(fdy_memory_space space) {
  switch (space) {
  case FDY_SPACE_HOST:
    return "host";
  case FDY_SPACE_DEVICE:
    return "device";
  }
  return "invalid";
}

fdy_budget fdy_budget_make(fdy_memory_space space, uint64_t capacity) {
  fdy_budget b = {.space = space, .capacity = capacity, .used = 0, .peak = 0};
  return b;
}

fdy_status fdy_budget_reserve(fdy_budget *budget, uint64_t bytes,
                              fdy_error *err) {
  uint64_t next;
  if (__builtin_add_overflow(budget->used, bytes, &next)) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "%s budget use overflows 64 bits",
                         fdy_memory_space_name(budget->space));
  }
  if (next > budget->capacity) {
    fdy_status s = fdy_error_set(
        err, FDY_ERR_BUDGET,
        "%s budget exceeded: %" PRIu64 " bytes needed, capacity %" PRIu64,
        fdy_memory_space_name(budget->space), next, budget->capacity);
    if (err) {
      err->expected = budget->capacity;
      err->actual = next;
    }
    return s;
  }
  budget->used = next;
  if (next > budget->peak) {
    budget->peak = next;
  }
  return FDY_OK;
}

void fdy_budget_release(fdy_budget *budget, uint64_t bytes) {
  assert(bytes <= budget->used);
  budget->used -= bytes;
}
