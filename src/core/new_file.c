/* All-or-nothing creation of new files (include/foundry/new_file.h). */
#include "foundry/new_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static fdy_status file_error(fdy_error *err, fdy_status kind, const char *what,
                             const char *path, int errnum) {
  return fdy_error_setf(err, kind, path, 0, 0, "%s '%s': %s", what, path,
                        strerror(errnum));
}

static void release(fdy_new_file *f) {
  free(f->path);
  free(f->temp);
  *f = (fdy_new_file){.fd = -1};
}

/* The checks before any temporary: a file name (not empty, not ending in
 * '/', at most NAME_MAX bytes) that does not exist yet. */
static fdy_status check_target(const char *path, fdy_error *err) {
  const size_t len = path == NULL ? 0 : strlen(path);
  if (len == 0 || path[len - 1] == '/') {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "a new file needs a path that ends in a name, got '%s'",
                  path == NULL ? "" : path);
    if (err != NULL && path != NULL) {
      snprintf(err->name, sizeof err->name, "%s", path);
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if (strlen(base) > NAME_MAX) {
    return file_error(err, FDY_ERR_INVALID_ARGUMENT, "cannot create", path,
                      ENAMETOOLONG);
  }
  struct stat sb;
  if (lstat(path, &sb) == 0) {
    return file_error(err, FDY_ERR_EXISTS, "refusing to overwrite", path,
                      EEXIST);
  }
  if (errno != ENOENT) {
    const int errnum = errno;
    return file_error(err, errnum == ENOTDIR ? FDY_ERR_NOT_FOUND : FDY_ERR_IO,
                      "cannot create", path, errnum);
  }
  return FDY_OK;
}

/* "DIR/BASE.tmp.PID.N" for path "DIR/BASE", BASE shortened so that the name
 * fits NAME_MAX; buf holds strlen(path) + TEMP_EXTRA bytes. */
#define TEMP_EXTRA 48
static void temp_name(const char *path, char *buf, size_t cap) {
  static unsigned counter;
  char suffix[TEMP_EXTRA];
  const int n = snprintf(suffix, sizeof suffix, ".tmp.%ld.%u", (long)getpid(),
                         __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
  const char *slash = strrchr(path, '/');
  const size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
  size_t base_len = strlen(path) - dir_len;
  if (base_len + (size_t)n > NAME_MAX) {
    base_len = NAME_MAX - (size_t)n;
  }
  snprintf(buf, cap, "%.*s%s", (int)(dir_len + base_len), path, suffix);
}

/* Creates the temporary beside path with make (a file or a directory),
 * retrying names that exist; returns the errno of the last attempt or 0. */
static int create_temp(const char *path, char *temp, size_t cap,
                       int (*make)(const char *temp, void *ctx), void *ctx) {
  for (int attempt = 0; attempt < 100; attempt++) {
    temp_name(path, temp, cap);
    if (make(temp, ctx) == 0) {
      return 0;
    }
    if (errno != EEXIST) {
      break;
    }
  }
  return errno;
}

static int make_file(const char *temp, void *ctx) {
  int *fd = ctx;
  *fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  return *fd < 0 ? -1 : 0;
}

static int make_dir(const char *temp, void *ctx) {
  (void)ctx;
  return mkdir(temp, 0777);
}

static fdy_status temp_error(fdy_error *err, const char *what, const char *path,
                             int errnum) {
  return file_error(err, errnum == ENOENT ? FDY_ERR_NOT_FOUND : FDY_ERR_IO,
                    what, path, errnum);
}

fdy_status fdy_new_file_open(fdy_new_file *f, const char *path,
                             fdy_error *err) {
  *f = (fdy_new_file){.fd = -1};
  fdy_status st = check_target(path, err);
  if (st != FDY_OK) {
    return st;
  }
  const size_t size = strlen(path) + TEMP_EXTRA;
  f->path = strdup(path);
  f->temp = malloc(size);
  if (f->path == NULL || f->temp == NULL) {
    release(f);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  const int errnum = create_temp(path, f->temp, size, make_file, &f->fd);
  if (errnum != 0) {
    release(f);
    return temp_error(err, "cannot create a temporary file next to", path,
                      errnum);
  }
  return FDY_OK;
}

fdy_status fdy_new_file_check(const char *path, fdy_error *err) {
  fdy_new_file f;
  fdy_status st = fdy_new_file_open(&f, path, err);
  if (st == FDY_OK) {
    fdy_new_file_discard(&f);
  }
  return st;
}

fdy_status fdy_new_dir_temp(const char *path, char **temp, fdy_error *err) {
  *temp = NULL;
  fdy_status st = check_target(path, err);
  if (st != FDY_OK) {
    return st;
  }
  const size_t size = strlen(path) + TEMP_EXTRA;
  char *name = malloc(size);
  if (name == NULL) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  const int errnum = create_temp(path, name, size, make_dir, NULL);
  if (errnum != 0) {
    free(name);
    return temp_error(err, "cannot create a temporary directory next to", path,
                      errnum);
  }
  *temp = name;
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
