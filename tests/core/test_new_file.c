/* foundry/new_file.h: all-or-nothing creation of new files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_text_file_written_once),
      cmocka_unit_test(test_mode_follows_umask),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_commit_race),
      cmocka_unit_test(test_discard_leaves_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
