/* Plan files: loading a plan JSON file and saving one without ever
 * overwriting an existing file or leaving a partial one behind (temporary
 * file in the same directory, fsync, link into place). The temporary is
 * created with mode 0666 like any new file, so the saved plan gets
 * 0666 & ~umask (and the directory's default ACL), not mkstemp's 0600. */
#include "plan_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static fdy_status io_error(fdy_error *err, fdy_status kind, const char *path,
                           const char *what, int errnum) {
  fdy_error_set(err, kind, "%s '%s': %s", what, path, strerror(errnum));
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
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    st = io_error(err, errno == ENOENT ? FDY_ERR_NOT_FOUND : FDY_ERR_IO, path,
                  "cannot open plan file", errno);
    goto cleanup;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    st = io_error(err, FDY_ERR_IO, path, "cannot stat plan file", errno);
    goto cleanup;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = io_error(err, FDY_ERR_IO, path, "plan file is not a regular file",
                  EINVAL);
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
      st = io_error(err, FDY_ERR_IO, path, "cannot read plan file", errno);
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

static int write_all(int fd, const char *data, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return -1;
    }
    done += (size_t)n;
  }
  return 0;
}

/* Creates the temporary "<path>.tmp.<pid>.<n>" in tmp (size bytes)
 * exclusively (O_EXCL: never through an existing file or symlink) with mode
 * 0666, which the kernel reduces by the umask as for any new file. mkstemp
 * would fix the mode at 0600, and reading the umask to fchmod afterwards is
 * not thread-safe (umask(2) reads it only by changing it). A name left over
 * by a crashed writer is skipped. Returns the descriptor, or -1 with errno
 * set. */
static int create_temp(const char *path, char *tmp, size_t size) {
  static unsigned counter;
  for (int attempt = 0; attempt < 100; attempt++) {
    snprintf(tmp, size, "%s.tmp.%ld.%u", path, (long)getpid(),
             __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) {
      return fd;
    }
  }
  errno = EEXIST;
  return -1;
}

fdy_status fdy_plan_save(const fdy_plan *plan, const char *path,
                         fdy_error *err) {
  char *text = NULL;
  char *tmp = NULL;
  int fd = -1;
  bool tmp_created = false;
  fdy_status st = FDY_OK;
  if (plan == NULL || path == NULL || path[0] == '\0') {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan save needs a plan and a path");
  }
  if (access(path, F_OK) == 0) {
    st = io_error(err, FDY_ERR_EXISTS, path, "refusing to overwrite", EEXIST);
    goto cleanup;
  }
  st = fdy_plan_to_json(plan, &text, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  size_t tmp_size = strlen(path) + 48; /* ".tmp." + two decimal numbers */
  tmp = malloc(tmp_size);
  if (tmp == NULL) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  fd = create_temp(path, tmp, tmp_size);
  if (fd < 0) {
    st = io_error(err, FDY_ERR_IO, path, "cannot create a temporary file for",
                  errno);
    goto cleanup;
  }
  tmp_created = true;
  if (write_all(fd, text, strlen(text)) != 0 || write_all(fd, "\n", 1) != 0) {
    st = io_error(err, FDY_ERR_IO, path, "cannot write", errno);
    goto cleanup;
  }
  if (fsync(fd) != 0) {
    st = io_error(err, FDY_ERR_IO, path, "cannot fsync", errno);
    goto cleanup;
  }
  int rc = close(fd);
  fd = -1;
  if (rc != 0) {
    st = io_error(err, FDY_ERR_IO, path, "cannot close", errno);
    goto cleanup;
  }
  if (link(tmp, path) != 0) {
    st = io_error(err, errno == EEXIST ? FDY_ERR_EXISTS : FDY_ERR_IO, path,
                  errno == EEXIST ? "refusing to overwrite"
                                  : "cannot link into place",
                  errno);
    goto cleanup;
  }
cleanup:
  if (fd >= 0) {
    close(fd);
  }
  if (tmp_created) {
    unlink(tmp);
  }
  free(tmp);
  free(text);
  return st;
}
