/* foundry/new_file.h: all-or-nothing creation of new files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "foundry/new_file.h"

typedef struct scratch {
  char dir[64];
  char path[128];
} scratch;

static void scratch_make(scratch *s) {
  snprintf(s->dir, sizeof s->dir, "/tmp/fdy-new-file-XXXXXX");
  assert_non_null(mkdtemp(s->dir));
  snprintf(s->path, sizeof s->path, "%s/out.txt", s->dir);
}

/* Number of entries in the scratch directory (temporaries included). */
static int entries(const scratch *s) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "exit $(ls -A '%s' | wc -l)", s->dir);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void scratch_remove(scratch *s) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
  assert_int_equal(system(cmd), 0);
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char buf[256];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void test_text_file_written_once(void **state) {
  (void)state;
  scratch s;
  scratch_make(&s);
  fdy_error err;
  assert_int_equal(fdy_write_new_text_file(s.path, "{}", &err), FDY_OK);
  assert_string_equal(read_all(s.path), "{}\n");
  assert_int_equal(fdy_write_new_text_file(s.path, "[1]", &err),
                   FDY_ERR_EXISTS);
  assert_string_equal(err.name, s.path);
  assert_non_null(strstr(err.message, "refusing to overwrite"));
  assert_string_equal(read_all(s.path), "{}\n");
  assert_int_equal(entries(&s), 1); /* no temporary left */
  scratch_remove(&s);
}

static void test_mode_follows_umask(void **state) {
  (void)state;
  scratch s;
  scratch_make(&s);
  fdy_error err;
  mode_t old = umask(022);
  assert_int_equal(fdy_write_new_text_file(s.path, "a", &err), FDY_OK);
  umask(077);
  char other[160];
  snprintf(other, sizeof other, "%s/private.txt", s.dir);
  assert_int_equal(fdy_write_new_text_file(other, "b", &err), FDY_OK);
  umask(old);
  struct stat sb;
  assert_int_equal(stat(s.path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0644);
  assert_int_equal(stat(other, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  scratch_remove(&s);
}

static void test_refusals(void **state) {
  (void)state;
  scratch s;
  scratch_make(&s);
  fdy_error err;
  char missing[160];
  snprintf(missing, sizeof missing, "%s/no/such/file", s.dir);
  assert_int_equal(fdy_write_new_text_file(missing, "x", &err),
                   FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, missing);
  /* a dangling symlink counts as existing: nothing is written through it */
  char target[160];
  snprintf(target, sizeof target, "%s/target", s.dir);
  assert_int_equal(symlink(target, s.path), 0);
  assert_int_equal(fdy_write_new_text_file(s.path, "x", &err), FDY_ERR_EXISTS);
  assert_int_equal(access(target, F_OK), -1);
  assert_int_equal(fdy_write_new_text_file("", "x", &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_write_new_text_file(NULL, "x", &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(entries(&s), 1);
  scratch_remove(&s);
}

/* The path appears between open and commit: commit refuses, the other file
 * is untouched and the temporary is gone. */
static void test_commit_race(void **state) {
  (void)state;
  scratch s;
  scratch_make(&s);
  fdy_error err;
  fdy_new_file f;
  assert_int_equal(fdy_new_file_open(&f, s.path, &err), FDY_OK);
  assert_int_equal(fdy_new_file_write(&f, "mine", 4, &err), FDY_OK);
  assert_int_equal(entries(&s), 1); /* the temporary */
  FILE *other = fopen(s.path, "wx");
  assert_non_null(other);
  fputs("theirs", other);
  fclose(other);
  assert_int_equal(fdy_new_file_commit(&f, &err), FDY_ERR_EXISTS);
  assert_string_equal(err.name, s.path);
  assert_string_equal(read_all(s.path), "theirs");
  assert_int_equal(entries(&s), 1);
  fdy_new_file_discard(&f); /* harmless after commit */
  scratch_remove(&s);
}

static void test_discard_leaves_nothing(void **state) {
  (void)state;
  scratch s;
  scratch_make(&s);
  fdy_error err;
  fdy_new_file f;
  assert_int_equal(fdy_new_file_open(&f, s.path, &err), FDY_OK);
  assert_int_equal(fdy_new_file_write(&f, "partial", 7, &err), FDY_OK);
  fdy_new_file_discard(&f);
  fdy_new_file_discard(&f);
  assert_int_equal(entries(&s), 0);
  scratch_remove(&s);
}

/* A name of n bytes ("nnn...") in the scratch directory. */
static void long_name(const scratch *s, size_t n, char *out, size_t cap) {
  int len = snprintf(out, cap, "%s/", s->dir);
  assert_true(len > 0 && (size_t)len + n < cap);
  memset(out + len, 'n', n);
  out[len + n] = '\0';
}

/* Any legal name works: the temporary beside it is shortened to fit
 * NAME_MAX. A name above NAME_MAX is refused before anything is created. */
static void test_long_names(void **state) {
  (void)state;
  scratch s;
  scratch_make(&s);
  fdy_error err;
  char path[512];
  static const size_t ok[] = {250, 255};
  for (size_t i = 0; i < 2; i++) {
    long_name(&s, ok[i], path, sizeof path);
    assert_int_equal(fdy_new_file_check(path, &err), FDY_OK);
    assert_int_equal(fdy_write_new_text_file(path, "x", &err), FDY_OK);
    assert_string_equal(read_all(path), "x\n");
  }
  assert_int_equal(entries(&s), 2);
  long_name(&s, 256, path, sizeof path);
  assert_int_equal(fdy_new_file_check(path, &err), FDY_ERR_INVALID_ARGUMENT);
  /* err->name holds the path's first FDY_ERROR_NAME_MAX - 1 bytes */
  assert_int_equal(strncmp(err.name, path, sizeof err.name - 1), 0);
  assert_int_equal(fdy_write_new_text_file(path, "x", &err),
                   FDY_ERR_INVALID_ARGUMENT);
  char *temp = NULL;
  assert_int_equal(fdy_new_dir_temp(path, &temp, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(temp);
  assert_int_equal(entries(&s), 2);
  scratch_remove(&s);
}

/* A directory where no file can be created: 0555 for a user, and for root
 * (who may write anywhere) /sys, where nobody may create a file; NULL when
 * neither refuses. */
static const char *unwritable_dir(const scratch *s, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/ro", s->dir);
  assert_int_equal(mkdir(buf, 0555), 0);
  char probe[256];
  snprintf(probe, sizeof probe, "%s/probe", buf);
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    return buf;
  }
  close(fd);
  unlink(probe);
  fd = open("/sys/fdy-new-file-probe", O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0 && errno != ENOENT) {
    return "/sys";
  }
  if (fd >= 0) {
    close(fd);
    unlink("/sys/fdy-new-file-probe");
  }
  return NULL;
}

static void test_check(void **state) {
  (void)state;
  scratch s;
  scratch_make(&s);
  fdy_error err;
  assert_int_equal(fdy_new_file_check(s.path, &err), FDY_OK);
  assert_int_equal(entries(&s), 0); /* the probe is gone */
  char missing[160];
  snprintf(missing, sizeof missing, "%s/no/file", s.dir);
  assert_int_equal(fdy_new_file_check(missing, &err), FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, missing);
  char ends[160];
  snprintf(ends, sizeof ends, "%s/", s.dir);
  assert_int_equal(fdy_new_file_check(ends, &err), FDY_ERR_INVALID_ARGUMENT);
  char ro[160], path[192];
  const char *dir = unwritable_dir(&s, ro, sizeof ro);
  if (dir) {
    snprintf(path, sizeof path, "%s/out.json", dir);
    assert_int_equal(fdy_new_file_check(path, &err), FDY_ERR_IO);
    assert_int_equal(err.kind, FDY_ERR_IO);
    assert_string_equal(err.name, path);
    char *temp = NULL;
    assert_int_equal(fdy_new_dir_temp(path, &temp, &err), FDY_ERR_IO);
    assert_null(temp);
  } else {
    print_message("no unwritable directory here; skipping that check\n");
  }
  assert_int_equal(rmdir(ro), 0);
  assert_int_equal(fdy_write_new_text_file(s.path, "x", &err), FDY_OK);
  assert_int_equal(fdy_new_file_check(s.path, &err), FDY_ERR_EXISTS);
  scratch_remove(&s);
}

/* The temporary directory follows the umask, as files do. */
static void test_temp_dir(void **state) {
  (void)state;
  scratch s;
  scratch_make(&s);
  fdy_error err;
  char *temp = NULL;
  mode_t old = umask(027);
  fdy_status st = fdy_new_dir_temp(s.path, &temp, &err);
  umask(old);
  assert_int_equal(st, FDY_OK);
  assert_int_equal(strncmp(temp, s.path, strlen(s.path)), 0);
  assert_int_equal(strncmp(temp + strlen(s.path), ".tmp.", 5), 0);
  struct stat sb;
  assert_int_equal(stat(temp, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  assert_int_equal(sb.st_mode & 0777, 0750);
  assert_int_equal(rmdir(temp), 0);
  free(temp);
  char path[512];
  long_name(&s, 255, path, sizeof path);
  assert_int_equal(fdy_new_dir_temp(path, &temp, &err), FDY_OK);
  assert_int_equal(rmdir(temp), 0);
  free(temp);
  assert_int_equal(mkdir(s.path, 0700), 0);
  assert_int_equal(fdy_new_dir_temp(s.path, &temp, &err), FDY_ERR_EXISTS);
  assert_null(temp);
  assert_int_equal(entries(&s), 1);
  scratch_remove(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_text_file_written_once),
      cmocka_unit_test(test_mode_follows_umask),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_commit_race),
      cmocka_unit_test(test_discard_leaves_nothing),
      cmocka_unit_test(test_long_names),
      cmocka_unit_test(test_check),
      cmocka_unit_test(test_temp_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
