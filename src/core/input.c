/* Reading input files, checking JSON text and joining paths
 * (include/foundry/input.h). */
#include "foundry/input.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_type(mode_t mode) {
  if (S_ISDIR(mode)) {
    return "a directory";
  }
  if (S_ISFIFO(mode)) {
    return "a FIFO";
  }
  if (S_ISCHR(mode)) {
    return "a character device";
  }
  if (S_ISBLK(mode)) {
    return "a block device";
  }
  if (S_ISSOCK(mode)) {
    return "a socket";
  }
  return "not a file";
}

fdy_status fdy_input_open(const char *path, const char *what, int *fd,
                          uint64_t *size, fdy_error *err) {
  *fd = -1;
  if (path == NULL || path[0] == '\0') {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "reading %s needs a non-empty path", what);
  }
  /* O_NONBLOCK: opening a FIFO without a writer returns at once. */
  int f = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (f < 0) {
    const int errnum = errno;
    return fdy_error_setf(
        err, errnum == ENOENT ? FDY_ERR_NOT_FOUND : FDY_ERR_IO, path, 0, 0,
        "cannot open %s '%s': %s", what, path, strerror(errnum));
  }
  struct stat sb;
  if (fstat(f, &sb) != 0) {
    const int errnum = errno;
    close(f);
    return fdy_error_setf(err, FDY_ERR_IO, path, 0, 0,
                          "cannot stat %s '%s': %s", what, path,
                          strerror(errnum));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(f);
    return fdy_error_setf(err, FDY_ERR_IO, path, 0, 0,
                          "%s '%s' is not a regular file (%s)", what, path,
                          file_type(sb.st_mode));
  }
  const int flags = fcntl(f, F_GETFL);
  if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int errnum = errno;
    close(f);
    return fdy_error_setf(err, FDY_ERR_IO, path, 0, 0,
                          "cannot open %s '%s': %s", what, path,
                          strerror(errnum));
  }
  *fd = f;
  *size = (uint64_t)sb.st_size;
  return FDY_OK;
}

/* FDY_ERR_FORMAT for a file of more than limit bytes (size: its size, or
 * the bytes read before the limit was passed). */
static fdy_status too_large(fdy_error *err, const char *what, const char *path,
                            uint64_t limit, uint64_t size) {
  char bytes[32];
  fdy_format_bytes(limit, bytes, sizeof bytes);
  return fdy_error_setf(err, FDY_ERR_FORMAT, path, limit, size,
                        "%s '%s' is larger than the limit of %s (%llu bytes)",
                        what, path, bytes, (unsigned long long)limit);
}

fdy_status fdy_input_read(const char *path, const char *what, uint64_t limit,
                          char **text, size_t *len, fdy_error *err) {
  *text = NULL;
  *len = 0;
  int fd = -1;
  uint64_t size = 0;
  fdy_status st = fdy_input_open(path, what, &fd, &size, err);
  if (st != FDY_OK) {
    return st;
  }
  char *buf = NULL;
  size_t done = 0;
  if (size > limit || size >= SIZE_MAX - 2) {
    st = too_large(err, what, path, limit, size);
    goto cleanup;
  }
  /* Reads to end of file, not to the size fstat gave: a /proc file
   * reports 0 bytes and a file may grow while it is read; the limit holds
   * for what is read. Room for the stated size, one byte more (so that
   * the read finding end of file needs no growth) and the NUL. */
  size_t cap = size < 4096 ? 4096 : (size_t)size + 2;
  buf = malloc(cap);
  for (;;) {
    if (buf != NULL && done + 1 == cap) {
      char *grown = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
      if (grown == NULL) {
        free(buf);
        buf = NULL;
      } else {
        buf = grown;
        cap *= 2;
      }
    }
    if (buf == NULL) {
      st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory reading %s '%s' (%zu bytes read)", what,
                         path, done);
      goto cleanup;
    }
    ssize_t n = read(fd, buf + done, cap - 1 - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      st =
          fdy_error_setf(err, FDY_ERR_IO, path, 0, 0, "cannot read %s '%s': %s",
                         what, path, strerror(errno));
      goto cleanup;
    }
    if (n == 0) {
      break; /* end of file (also of one that shrank: the parser sees what
                is there) */
    }
    done += (size_t)n;
    if (done > limit) {
      st = too_large(err, what, path, limit, done);
      goto cleanup;
    }
  }
  buf[done] = '\0';
  *text = buf;
  *len = done;
  buf = NULL;
cleanup:
  free(buf);
  close(fd);
  return st;
}

fdy_status fdy_json_check_text(const char *text, size_t len, fdy_error *err) {
  const char *nul = len > 0 ? memchr(text, '\0', len) : NULL;
  if (nul == NULL) {
    return FDY_OK;
  }
  int64_t line = 1, column = 1;
  for (const char *p = text; p < nul; p++) {
    if (*p == '\n') {
      line++;
      column = 1;
    } else {
      column++;
    }
  }
  fdy_error_set(err, FDY_ERR_PARSE,
                "NUL byte at line %lld, column %lld (JSON text cannot contain "
                "one)",
                (long long)line, (long long)column);
  if (err != NULL) {
    err->line = line;
    err->column = column;
  }
  return FDY_ERR_PARSE;
}

char *fdy_path_join(const char *dir, const char *file) {
  size_t n = strlen(dir) + strlen(file) + 2;
  char *path = malloc(n);
  if (path) {
    snprintf(path, n, "%s/%s", dir, file);
  }
  return path;
}
