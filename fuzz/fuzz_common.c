/* Shared helpers of the fuzz targets (fuzz_common.h). */
#include "fuzz_common.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[512];

/* Removes the run's directory and the files in it (the targets make no
 * subdirectories). */
static void remove_dir(void) {
  DIR *d = opendir(dir);
  if (d) {
    char path[512];
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

const char *fuzz_dir(const char *target) {
  if (!dir[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/%s_XXXXXX", tmp && *tmp ? tmp : "/tmp",
             target);
    if (!mkdtemp(dir) || atexit(remove_dir) != 0) {
      abort();
    }
  }
  return dir;
}

const char *fuzz_path(const char *target, const char *name) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", fuzz_dir(target), name);
  return path;
}

void fuzz_write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
    abort();
  }
}
