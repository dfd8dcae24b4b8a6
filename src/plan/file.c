/* Plan files: loading a plan JSON file (a regular file only, read through
 * foundry/input.h), and saving one through
 * foundry/new_file.h (never over an existing file, never a partial one;
 * mode 0666 & ~umask). */
#include "plan_internal.h"

#include "foundry/input.h"
#include "foundry/new_file.h"

#include <stdlib.h>

fdy_status fdy_plan_load(const char *path, fdy_plan **out, fdy_error *err) {
  if (path == NULL || out == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan load needs a path and an output pointer");
  }
  *out = NULL;
  char *text = NULL;
  size_t len = 0;
  fdy_status st =
      fdy_input_read(path, "plan file", UINT64_MAX, &text, &len, err);
  if (st == FDY_OK) {
    st = fdy_plan_from_json(text, len, out, err);
    if (st != FDY_OK) {
      fdy_error_prefix(err, "%s", path);
    }
  }
  free(text);
  return st;
}

fdy_status fdy_plan_save(const fdy_plan *plan, const char *path,
                         fdy_error *err) {
  if (plan == NULL || path == NULL || path[0] == '\0') {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan save needs a plan and a path");
  }
  char *text = NULL;
  fdy_status st = fdy_plan_to_json(plan, &text, err);
  if (st == FDY_OK) {
    st = fdy_write_new_text_file(path, text, err);
  }
  free(text);
  return st;
}
