/* All-or-nothing creation of new files (include/foundry/new_file.h). */
#include "foundry/new_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static fdy_status file_error(fdy_error *err, fdy_status kind, const char *what,
                             const char *path, int errnum) {
  fdy_error_set(err, kind, "%s '%s': %s", what, path, strerror(errnum));
  if (err != NULL) {
    snprintf(err->name, sizeof err->name, "%s", path);
  }
  return kind;
}

static void release(fdy_new_file *f) {
  free(f->path);
  free(f->temp);
  *f = (fdy_new_file){.fd = -1};
}

fdy_status fdy_new_file_open(fdy_new_file *f, const char *path,
                             fdy_error *err) {
  *f = (fdy_new_file){.fd = -1};
  if (path == NULL || path[0] == '\0') {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a new file needs a non-empty path");
  }
  struct stat sb;
  if (lstat(path, &sb) == 0) {
    return file_error(err, FDY_ERR_EXISTS, "refusing to overwrite", path,
                      EEXIST);
  }
  const size_t size = strlen(path) + 48; /* ".tmp." and two numbers */
  f->path = strdup(path);
  f->temp = malloc(size);
  if (f->path == NULL || f->temp == NULL) {
    release(f);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  static unsigned counter;
  for (int attempt = 0; attempt < 100 && f->fd < 0; attempt++) {
    snprintf(f->temp, size, "%s.tmp.%ld.%u", path, (long)getpid(),
             __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    f->fd = open(f->temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (f->fd < 0 && errno != EEXIST) {
      break;
    }
  }
  if (f->fd < 0) {
    const int errnum = errno;
    release(f);
    return file_error(err, errnum == ENOENT ? FDY_ERR_NOT_FOUND : FDY_ERR_IO,
                      "cannot create a temporary file next to", path, errnum);
  }
  return FDY_OK;
}

fdy_status fdy_new_file_write(fdy_new_file *f, const void *data, size_t len,
                              fdy_error *err) {
  const char *p = data;
  while (len > 0) {
    ssize_t n = write(f->fd, p, len);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return file_error(err, FDY_ERR_IO, "cannot write", f->path, errno);
    }
    p += n;
    len -= (size_t)n;
  }
  return FDY_OK;
}

fdy_status fdy_new_file_commit(fdy_new_file *f, fdy_error *err) {
  fdy_status st = FDY_OK;
  if (fsync(f->fd) != 0) {
    st = file_error(err, FDY_ERR_IO, "cannot fsync", f->path, errno);
  }
  const int rc = close(f->fd);
  f->fd = -1;
  if (st == FDY_OK && rc != 0) {
    st = file_error(err, FDY_ERR_IO, "cannot close", f->path, errno);
  }
  if (st == FDY_OK && link(f->temp, f->path) != 0) {
    st = errno == EEXIST ? file_error(err, FDY_ERR_EXISTS,
                                      "refusing to overwrite", f->path, EEXIST)
                         : file_error(err, FDY_ERR_IO, "cannot link into place",
                                      f->path, errno);
  }
  fdy_new_file_discard(f);
  return st;
}

void fdy_new_file_discard(fdy_new_file *f) {
  if (f->fd >= 0) {
    close(f->fd);
  }
  if (f->temp != NULL) {
    unlink(f->temp);
  }
  release(f);
}

fdy_status fdy_write_new_text_file(const char *path, const char *text,
                                   fdy_error *err) {
  fdy_new_file f;
  fdy_status st = fdy_new_file_open(&f, path, err);
  if (st != FDY_OK) {
    return st;
  }
  st = fdy_new_file_write(&f, text, strlen(text), err);
  if (st == FDY_OK) {
    st = fdy_new_file_write(&f, "\n", 1, err);
  }
  if (st != FDY_OK) {
    fdy_new_file_discard(&f);
    return st;
  }
  return fdy_new_file_commit(&f, err);
}
