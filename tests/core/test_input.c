/* foundry/input.h: regular files only, never blocking on a FIFO; whole-file
 * reads with a size limit; the NUL check of JSON text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "foundry/input.h"

typedef struct scratch {
  char dir[64];
  char file[128]; /* a regular file holding "hello" */
  char fifo[128];
} scratch;

static void scratch_make(scratch *s) {
  snprintf(s->dir, sizeof s->dir, "/tmp/fdy-input-XXXXXX");
  assert_non_null(mkdtemp(s->dir));
  snprintf(s->file, sizeof s->file, "%s/file", s->dir);
  snprintf(s->fifo, sizeof s->fifo, "%s/fifo", s->dir);
  FILE *f = fopen(s->file, "wb");
  assert_non_null(f);
  assert_true(fputs("hello", f) >= 0);
  fclose(f);
  assert_int_equal(mkfifo(s->fifo, 0600), 0);
}

static void scratch_remove(const scratch *s) {
  unlink(s->file);
  unlink(s->fifo);
  assert_int_equal(rmdir(s->dir), 0);
}

static void test_regular_file(void **state) {
  (void)state;
  scratch s;
  scratch_make(&s);
  fdy_error err;
  int fd = -1;
  uint64_t size = 0;
  assert_int_equal(fdy_input_open(s.file, "test file", &fd, &size, &err),
                   FDY_OK);
  assert_true(fd >= 0);
  assert_int_equal(size, 5);
  close(fd);
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(fdy_input_read(s.file, "test file", 5, &text, &len, &err),
                   FDY_OK);
  assert_int_equal(len, 5);
  assert_string_equal(text, "hello");
  free(text);
  assert_int_equal(fdy_input_read(s.file, "test file", 4, &text, &len, &err),
                   FDY_ERR_FORMAT);
  assert_null(text);
  assert_int_equal(err.expected, 4);
  assert_int_equal(err.actual, 5);
  assert_string_equal(err.name, s.file);
  scratch_remove(&s);
}

/* A file whose size reads as 0 (/proc) is read to end of file, not as
 * empty (issue #31), and its limit holds for the bytes read. */
static void test_proc_file(void **state) {
  (void)state;
  if (access("/proc/self/status", R_OK) != 0) {
    skip();
  }
  fdy_error err;
  int fd = -1;
  uint64_t size = 1;
  assert_int_equal(
      fdy_input_open("/proc/self/status", "test file", &fd, &size, &err),
      FDY_OK);
  close(fd);
  assert_int_equal(size, 0);
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(fdy_input_read("/proc/self/status", "test file", 1 << 20,
                                  &text, &len, &err),
                   FDY_OK);
  assert_true(len > 0);
  assert_int_equal(strlen(text), len);
  assert_non_null(strstr(text, "Name:"));
  free(text);
  assert_int_equal(
      fdy_input_read("/proc/self/status", "test file", 10, &text, &len, &err),
      FDY_ERR_FORMAT);
  assert_null(text);
  assert_int_equal(err.expected, 10);
  assert_true(err.actual > 10);
  assert_string_equal(err.name, "/proc/self/status");
}

/* A file larger than the first buffer (4096 bytes) is read whole. */
static void test_long_file(void **state) {
  (void)state;
  char path[] = "/tmp/fdy-input-long-XXXXXX";
  const int fd = mkstemp(path);
  assert_true(fd >= 0);
  char block[1000];
  memset(block, 'x', sizeof block);
  for (int i = 0; i < 10; i++) {
    assert_int_equal(write(fd, block, sizeof block), (ssize_t)sizeof block);
  }
  close(fd);
  fdy_error err;
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(fdy_input_read(path, "test file", 10000, &text, &len, &err),
                   FDY_OK);
  assert_int_equal(len, 10000);
  assert_int_equal(strlen(text), 10000);
  free(text);
  assert_int_equal(fdy_input_read(path, "test file", 9999, &text, &len, &err),
                   FDY_ERR_FORMAT);
  assert_int_equal(err.actual, 10000);
  unlink(path);
}

/* A FIFO without a writer, a directory and a device fail at once. */
static void test_not_regular(void **state) {
  (void)state;
  scratch s;
  scratch_make(&s);
  const char *paths[] = {s.fifo, s.dir, "/dev/null"};
  alarm(20); /* a blocked open kills the test instead of hanging it */
  for (size_t i = 0; i < 3; i++) {
    fdy_error err;
    int fd = 7;
    uint64_t size = 0;
    assert_int_equal(fdy_input_open(paths[i], "test file", &fd, &size, &err),
                     FDY_ERR_IO);
    assert_int_equal(fd, -1);
    assert_int_equal(err.kind, FDY_ERR_IO);
    assert_string_equal(err.name, paths[i]);
    char *text = (char *)1;
    size_t len = 0;
    assert_int_equal(
        fdy_input_read(paths[i], "test file", 100, &text, &len, &err),
        FDY_ERR_IO);
    assert_null(text);
  }
  alarm(0);
  scratch_remove(&s);
}

static void test_missing_and_empty(void **state) {
  (void)state;
  fdy_error err;
  int fd = 0;
  uint64_t size = 0;
  assert_int_equal(
      fdy_input_open("/nonexistent/x", "test file", &fd, &size, &err),
      FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, "/nonexistent/x");
  assert_int_equal(fdy_input_open("", "test file", &fd, &size, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_input_open(NULL, "test file", &fd, &size, &err),
                   FDY_ERR_INVALID_ARGUMENT);
}

static void test_json_nul(void **state) {
  (void)state;
  fdy_error err;
  assert_int_equal(fdy_json_check_text("{\"a\": 1}", 8, &err), FDY_OK);
  assert_int_equal(fdy_json_check_text(NULL, 0, &err), FDY_OK);
  static const char number[] = "{\n  \"version\": 1\0,\n}";
  assert_int_equal(fdy_json_check_text(number, sizeof number - 1, &err),
                   FDY_ERR_PARSE);
  assert_int_equal(err.kind, FDY_ERR_PARSE);
  assert_int_equal(err.line, 2);
  assert_int_equal(err.column, 15);
  static const char first[] = "\0{}";
  assert_int_equal(fdy_json_check_text(first, 3, &err), FDY_ERR_PARSE);
  assert_int_equal(err.line, 1);
  assert_int_equal(err.column, 1);
  assert_int_equal(fdy_json_check_text(first, 3, NULL), FDY_ERR_PARSE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_regular_file),
      cmocka_unit_test(test_proc_file),
      cmocka_unit_test(test_long_file),
      cmocka_unit_test(test_not_regular),
      cmocka_unit_test(test_missing_and_empty),
      cmocka_unit_test(test_json_nul),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
