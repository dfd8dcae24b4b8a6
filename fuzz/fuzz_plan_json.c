/* libFuzzer target for the plan JSON decoder (seed corpus:
 * fuzz/corpus/plan_json). Any input must decode or fail with an error,
 * never crash or leak. A decoded plan must validate or fail cleanly, and
 * must survive a round trip: its encoding (when it has one) decodes to a
 * plan that encodes to the same text and validates with the same result. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fdy_plan *plan = NULL;
  fdy_plan *again = NULL;
  char *text = NULL;
  char *text2 = NULL;
  fdy_error err;
  if (fdy_plan_from_json((const char *)data, size, &plan, &err) != FDY_OK) {
    return 0;
  }
  fdy_status valid = fdy_plan_validate(plan, NULL, &err);
  if (fdy_plan_to_json(plan, &text, &err) == FDY_OK) {
    /* A round trip that does not reproduce itself is a bug. */
    if (fdy_plan_from_json(text, strlen(text), &again, &err) != FDY_OK ||
        fdy_plan_to_json(again, &text2, &err) != FDY_OK ||
        strcmp(text, text2) != 0 ||
        fdy_plan_validate(again, NULL, &err) != valid) {
      abort();
    }
  }
  free(text);
  free(text2);
  fdy_plan_destroy(again);
  fdy_plan_destroy(plan);
  return 0;
}
