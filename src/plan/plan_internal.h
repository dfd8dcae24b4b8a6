/* Private layout of fdy_plan, shared by the plan module's source files. */
#ifndef FOUNDRY_PLAN_INTERNAL_H
#define FOUNDRY_PLAN_INTERNAL_H

#include "foundry/plan.h"

struct fdy_plan {
  fdy_graph *graph; /* owned deep copy */
  uint64_t budget_bytes;
  uint32_t stream_count;
  uint32_t buffer_count;
  fdy_plan_buffer *buffers;  /* buffer_count entries */
  fdy_placement *placements; /* one per graph tensor */
  uint32_t event_count;
  size_t section_count;
  fdy_section sections[FDY_PLAN_MAX_SECTIONS];
  size_t command_count;
  size_t command_cap;
  fdy_command *commands;
};

/* fdy_plan_validate, also storing in *log_visits (when not NULL, whatever
 * the result) how many access-log records the replay visited: a measure
 * of its work that tests hold near linear in the plan's length
 * (tests/plan/test_plan_scaling.c). */
fdy_status fdy_plan_validate_counted(const fdy_plan *plan,
                                     fdy_plan_summary *summary,
                                     uint64_t *log_visits, fdy_error *err);

#endif
