/* Plan files: loading a plan JSON file (regular files only: opened
 * non-blocking so that a FIFO or a device is refused at once instead of
 * blocking), and saving one through foundry/new_file.h (never over an
 * existing file, never a partial one; mode 0666 & ~umask). */
#include "plan_internal.h"

#include "foundry/new_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "WHAT 'PATH': REASON" with name = path. */
static fdy_status io_error(fdy_error *err, fdy_status kind, const char *path,
                           const char *what, const char *reason) {
  fdy_error_set(err, kind, "%s '%s': %s", what, path, reason);
  if (err != NULL) {
    snprintf(err->name, sizeof(err->name), "%s", path);
  }
  return kind;
}

fdy_status fdy_plan_load(const char *path, fdy_plan **out, fdy_error *err) {
  char *text = NULL;
  fdy_status st = FDY_OK;
  int fd = -1;
  if (path == NULL || out == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan load needs a path and an output pointer");
  }
  *out = NULL;
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    st = io_error(err, errno == ENOENT ? FDY_ERR_NOT_FOUND : FDY_ERR_IO, path,
                  "cannot open plan file", strerror(errno));
    goto cleanup;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    st = io_error(err, FDY_ERR_IO, path, "cannot stat plan file",
                  strerror(errno));
    goto cleanup;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = io_error(err, FDY_ERR_IO, path, "cannot read plan file",
                  "not a regular file");
    goto cleanup;
  }
  size_t size = (size_t)sb.st_size;
  text = malloc(size + 1);
  if (text == NULL) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                       "out of memory reading '%s' (%zu bytes)", path, size);
    goto cleanup;
  }
  size_t done = 0;
  while (done < size) {
    ssize_t n = read(fd, text + done, size - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      st = io_error(err, FDY_ERR_IO, path, "cannot read plan file",
                    strerror(errno));
      goto cleanup;
    }
    if (n == 0) {
      break;
    }
    done += (size_t)n;
  }
  st = fdy_plan_from_json(text, done, out, err);
  if (st != FDY_OK) {
    fdy_error_prefix(err, "%s", path);
  }
cleanup:
  if (fd >= 0) {
    close(fd);
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
