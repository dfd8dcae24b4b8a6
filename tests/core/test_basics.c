/* Tests of the plain-data core: errors, checked arithmetic, alignment, byte
 * units, dtypes, shapes, budgets, time, version and build info. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "foundry/build_info.h"
#include "foundry/core.h"

static void test_error_clear_and_set(void **state) {
  (void)state;
  fdy_error err;
  memset(&err, 0x5a, sizeof(err));
  fdy_error_clear(&err);
  assert_int_equal(err.kind, FDY_OK);
  assert_int_equal(err.command_index, -1);
  assert_int_equal(err.ids[0], -1);
  assert_int_equal(err.ids[1], -1);
  assert_int_equal(err.line, -1);
  assert_int_equal(err.column, -1);
  assert_int_equal(err.expected, 0);
  assert_int_equal(err.actual, 0);
  assert_string_equal(err.name, "");
  assert_string_equal(err.message, "");
  assert_int_equal(err.cleanup_kind, FDY_OK);
  fdy_error_clear(NULL);
  assert_int_equal(fdy_error_set(&err, FDY_ERR_IO, "x %d", 3), FDY_ERR_IO);
  assert_int_equal(err.kind, FDY_ERR_IO);
  assert_string_equal(err.message, "x 3");
  assert_int_equal(fdy_error_set(NULL, FDY_ERR_PARSE, "y"), FDY_ERR_PARSE);
  fdy_error_prefix(&err, "file %s", "a");
  assert_string_equal(err.message, "file a: x 3");
  fdy_error_prefix(NULL, "z");
}

static void test_error_prefix_truncates(void **state) {
  (void)state;
  fdy_error err;
  char longmsg[FDY_ERROR_MESSAGE_MAX + 100];
  memset(longmsg, 'm', sizeof(longmsg) - 1);
  longmsg[sizeof(longmsg) - 1] = '\0';
  fdy_error_set(&err, FDY_ERR_IO, "%s", longmsg);
  assert_int_equal(strlen(err.message), FDY_ERROR_MESSAGE_MAX - 1);
  fdy_error_prefix(&err, "pre");
  assert_int_equal(strlen(err.message), FDY_ERROR_MESSAGE_MAX - 1);
  assert_memory_equal(err.message, "pre: mmm", 8);
  fdy_error_prefix(&err, "%s", longmsg);
  assert_int_equal(strlen(err.message), FDY_ERROR_MESSAGE_MAX - 1);
}

/* Control bytes are escaped as C writes them, UTF-8 is kept, and a
 * truncation never cuts an escape (issue #31: a shard name with a newline
 * broke the error line). */
static void test_escape_controls(void **state) {
  (void)state;
  char buf[64];
  assert_string_equal(
      fdy_escape_controls("a\nb\r\tc\x1b[31m\x7f\xc3\xa9\\", buf, sizeof buf),
      "a\\nb\\r\\tc\\x1b[31m\\x7f\xc3\xa9\\");
  assert_string_equal(fdy_escape_controls("plain", buf, sizeof buf), "plain");
  assert_string_equal(fdy_escape_controls("", buf, sizeof buf), "");
  assert_string_equal(fdy_escape_controls("ab\x01", buf, 6), "ab");
  assert_string_equal(fdy_escape_controls("ab\x01", buf, 7), "ab\\x01");
  assert_string_equal(fdy_escape_controls("a\n", buf, 3), "a");
  buf[0] = 'x';
  fdy_escape_controls("abc", buf, 0);
  assert_int_equal(buf[0], 'x');
}

static void test_status_names(void **state) {
  (void)state;
  assert_string_equal(fdy_status_name(FDY_OK), "ok");
  assert_string_equal(fdy_status_name(FDY_ERR_PLAN_SLOT_BUSY),
                      "plan_slot_busy");
  for (int s = 0; s < FDY_STATUS_COUNT; s++) {
    const char *name = fdy_status_name((fdy_status)s);
    assert_non_null(name);
    assert_string_not_equal(name, "unknown_status");
    for (int t = 0; t < s; t++) {
      assert_string_not_equal(name, fdy_status_name((fdy_status)t));
    }
  }
  assert_non_null(fdy_status_name(FDY_STATUS_COUNT));
  assert_non_null(fdy_status_name((fdy_status)-1));
}

static void test_add_mul(void **state) {
  (void)state;
  fdy_error err;
  uint64_t out = 7;
  assert_int_equal(fdy_add_u64(UINT64_MAX - 1, 1, &out, &err), FDY_OK);
  assert_true(out == UINT64_MAX);
  out = 7;
  assert_int_equal(fdy_add_u64(UINT64_MAX, 1, &out, &err), FDY_ERR_OVERFLOW);
  assert_int_equal(err.kind, FDY_ERR_OVERFLOW);
  assert_int_equal(out, 7);
  assert_int_equal(fdy_add_u64(1, UINT64_MAX, &out, NULL), FDY_ERR_OVERFLOW);
  assert_int_equal(fdy_mul_u64(UINT64_MAX, 1, &out, &err), FDY_OK);
  assert_true(out == UINT64_MAX);
  assert_int_equal(fdy_mul_u64(UINT64_MAX, 0, &out, &err), FDY_OK);
  assert_int_equal(out, 0);
  out = 7;
  assert_int_equal(fdy_mul_u64(UINT64_MAX, 2, &out, &err), FDY_ERR_OVERFLOW);
  assert_int_equal(out, 7);
  assert_int_equal(
      fdy_mul_u64((uint64_t)1 << 32, (uint64_t)1 << 32, &out, &err),
      FDY_ERR_OVERFLOW);
  assert_int_equal(
      fdy_mul_u64((uint64_t)1 << 32, ((uint64_t)1 << 32) - 1, &out, &err),
      FDY_OK);
}

static void test_align_up(void **state) {
  (void)state;
  fdy_error err;
  uint64_t out = 7;
  assert_true(fdy_is_power_of_two(1));
  assert_true(fdy_is_power_of_two((uint64_t)1 << 63));
  assert_false(fdy_is_power_of_two(0));
  assert_false(fdy_is_power_of_two(3));
  assert_false(fdy_is_power_of_two(UINT64_MAX));
  assert_int_equal(fdy_align_up(0, 256, &out, &err), FDY_OK);
  assert_int_equal(out, 0);
  assert_int_equal(fdy_align_up(1, 256, &out, &err), FDY_OK);
  assert_int_equal(out, 256);
  assert_int_equal(fdy_align_up(256, 256, &out, &err), FDY_OK);
  assert_int_equal(out, 256);
  assert_int_equal(fdy_align_up(257, 256, &out, &err), FDY_OK);
  assert_int_equal(out, 512);
  out = 7;
  assert_int_equal(fdy_align_up(10, 0, &out, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_align_up(10, 24, &out, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(out, 7);
  assert_int_equal(fdy_align_up(UINT64_MAX, 2, &out, &err), FDY_ERR_OVERFLOW);
  assert_int_equal(fdy_align_up(UINT64_MAX - 255, 256, &out, &err), FDY_OK);
  assert_true(out == UINT64_MAX - 255);
  assert_int_equal(fdy_align_up(UINT64_MAX - 254, 256, &out, &err),
                   FDY_ERR_OVERFLOW);
  assert_int_equal(fdy_align_up(UINT64_MAX, 1, &out, &err), FDY_OK);
  assert_true(out == UINT64_MAX);
  assert_int_equal(fdy_align_up(1, (uint64_t)1 << 63, &out, &err), FDY_OK);
  assert_true(out == (uint64_t)1 << 63);
  assert_int_equal(out % 2, 0);
}

static void expect_parse(const char *text, uint64_t want) {
  fdy_error err;
  uint64_t out = 0;
  assert_int_equal(fdy_parse_bytes(text, &out, &err), FDY_OK);
  assert_true(out == want);
}

static void expect_parse_fail(const char *text, fdy_status kind) {
  fdy_error err;
  uint64_t out = 12345;
  assert_int_equal(fdy_parse_bytes(text, &out, &err), kind);
  assert_int_equal(err.kind, kind);
  assert_int_equal(out, 12345);
}

static void test_parse_bytes(void **state) {
  (void)state;
  expect_parse("123", 123);
  expect_parse("0", 0);
  expect_parse("123B", 123);
  expect_parse("64KiB", 64 * FDY_KIB);
  expect_parse("450MiB", 450 * FDY_MIB);
  expect_parse("450 MiB", 450 * FDY_MIB);
  expect_parse("4GiB", 4 * FDY_GIB);
  expect_parse("1TiB", FDY_GIB * 1024);
  expect_parse("18446744073709551615", UINT64_MAX);
  expect_parse("16777215TiB", 16777215ull << 40);
  expect_parse_fail("", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail(NULL, FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("12XB", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("-1", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("+1", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("1.5GiB", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("4gib", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("4GB", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("GiB", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail(" 4GiB", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("4GiB ", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("4  GiB", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("4 ", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("4\tGiB", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("4\n", FDY_ERR_INVALID_ARGUMENT);
  expect_parse_fail("99999999999GiB", FDY_ERR_OVERFLOW);
  expect_parse_fail("16777216TiB", FDY_ERR_OVERFLOW);
  expect_parse_fail("18446744073709551616", FDY_ERR_OVERFLOW);
  expect_parse_fail("99999999999999999999999", FDY_ERR_OVERFLOW);
}

static void test_format_bytes(void **state) {
  (void)state;
  char buf[64];
  assert_string_equal(fdy_format_bytes(0, buf, sizeof(buf)), "0 B");
  assert_string_equal(fdy_format_bytes(17, buf, sizeof(buf)), "17 B");
  assert_string_equal(fdy_format_bytes(1023, buf, sizeof(buf)), "1023 B");
  assert_string_equal(fdy_format_bytes(1024, buf, sizeof(buf)), "1 KiB");
  assert_string_equal(fdy_format_bytes(450 * FDY_MIB, buf, sizeof(buf)),
                      "450 MiB");
  assert_string_equal(fdy_format_bytes(3 * FDY_GIB / 2, buf, sizeof(buf)),
                      "1.50 GiB");
  assert_string_equal(fdy_format_bytes(1536, buf, sizeof(buf)), "1.50 KiB");
  assert_string_equal(fdy_format_bytes(48 * 450 * FDY_MIB, buf, sizeof(buf)),
                      "21.09 GiB");
  assert_string_equal(fdy_format_bytes(FDY_GIB * 1024, buf, sizeof(buf)),
                      "1 TiB");
  assert_string_equal(fdy_format_bytes(UINT64_MAX, buf, sizeof(buf)),
                      "16777216.00 TiB");
  /* Truncation keeps a terminator; cap 0 writes nothing. */
  char small[4] = {'x', 'x', 'x', 'x'};
  fdy_format_bytes(450 * FDY_MIB, small, sizeof(small));
  assert_string_equal(small, "450");
  char none = 'q';
  fdy_format_bytes(1, &none, 0);
  assert_int_equal(none, 'q');
  /* Round trip of exact values through parse. */
  uint64_t vals[] = {17, 64 * FDY_KIB, 450 * FDY_MIB, 4 * FDY_GIB};
  for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
    uint64_t back = 0;
    fdy_format_bytes(vals[i], buf, sizeof(buf));
    assert_int_equal(fdy_parse_bytes(buf, &back, NULL), FDY_OK);
    assert_true(back == vals[i]);
  }
}

static void test_dtypes(void **state) {
  (void)state;
  static const struct {
    fdy_dtype d;
    const char *name;
    uint64_t size;
  } want[] = {
      {FDY_DTYPE_F32, "F32", 4},   {FDY_DTYPE_F16, "F16", 2},
      {FDY_DTYPE_BF16, "BF16", 2}, {FDY_DTYPE_F64, "F64", 8},
      {FDY_DTYPE_U32, "U32", 4},   {FDY_DTYPE_I32, "I32", 4},
      {FDY_DTYPE_I64, "I64", 8},   {FDY_DTYPE_U64, "U64", 8},
      {FDY_DTYPE_U8, "U8", 1},     {FDY_DTYPE_I8, "I8", 1},
  };
  assert_int_equal(sizeof(want) / sizeof(want[0]), FDY_DTYPE_COUNT);
  for (size_t i = 0; i < FDY_DTYPE_COUNT; i++) {
    assert_int_equal(fdy_dtype_size(want[i].d), want[i].size);
    assert_string_equal(fdy_dtype_name(want[i].d), want[i].name);
    fdy_dtype back = FDY_DTYPE_COUNT;
    assert_int_equal(fdy_dtype_parse(want[i].name, &back, NULL), FDY_OK);
    assert_int_equal(back, want[i].d);
  }
  assert_int_equal(fdy_dtype_size(FDY_DTYPE_COUNT), 0);
  assert_int_equal(fdy_dtype_size((fdy_dtype)-1), 0);
  assert_non_null(fdy_dtype_name(FDY_DTYPE_COUNT));
  fdy_error err;
  fdy_dtype out = FDY_DTYPE_I8;
  assert_int_equal(fdy_dtype_parse("F8_E4M3", &out, &err), FDY_ERR_UNSUPPORTED);
  assert_int_equal(err.kind, FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.name, "F8_E4M3");
  assert_int_equal(out, FDY_DTYPE_I8);
  assert_int_equal(fdy_dtype_parse("f32", &out, &err), FDY_ERR_UNSUPPORTED);
  assert_int_equal(fdy_dtype_parse("", &out, &err), FDY_ERR_UNSUPPORTED);
  assert_int_equal(fdy_dtype_parse(NULL, &out, &err), FDY_ERR_UNSUPPORTED);
}

static void test_shapes(void **state) {
  (void)state;
  fdy_error err;
  uint64_t n = 0;
  fdy_shape s = FDY_SHAPE(28, 3072);
  assert_int_equal(s.rank, 2);
  assert_int_equal(s.dims[2], 0);
  assert_int_equal(fdy_shape_elements(s, &n, &err), FDY_OK);
  assert_int_equal(n, 28 * 3072);
  assert_int_equal(fdy_tensor_bytes(FDY_DTYPE_BF16, s, &n, &err), FDY_OK);
  assert_int_equal(n, 28 * 3072 * 2);
  fdy_shape scalar = fdy_shape_make(0, NULL);
  assert_int_equal(fdy_shape_elements(scalar, &n, &err), FDY_OK);
  assert_int_equal(n, 1);
  fdy_shape zero = FDY_SHAPE(4, 0);
  assert_int_equal(fdy_tensor_bytes(FDY_DTYPE_F32, zero, &n, &err), FDY_OK);
  assert_int_equal(n, 0);
  assert_true(fdy_shape_equal(s, FDY_SHAPE(28, 3072)));
  assert_false(fdy_shape_equal(s, FDY_SHAPE(28, 3071)));
  assert_false(fdy_shape_equal(s, FDY_SHAPE(28, 3072, 1)));

  n = 99;
  fdy_shape big = FDY_SHAPE((uint64_t)1 << 32, (uint64_t)1 << 32);
  assert_int_equal(fdy_shape_elements(big, &n, &err), FDY_ERR_OVERFLOW);
  assert_int_equal(err.kind, FDY_ERR_OVERFLOW);
  assert_int_equal(n, 99);
  fdy_shape edge = FDY_SHAPE(UINT64_MAX);
  assert_int_equal(fdy_shape_elements(edge, &n, &err), FDY_OK);
  assert_true(n == UINT64_MAX);
  assert_int_equal(fdy_tensor_bytes(FDY_DTYPE_U8, edge, &n, &err), FDY_OK);
  n = 99;
  assert_int_equal(fdy_tensor_bytes(FDY_DTYPE_F16, edge, &n, &err),
                   FDY_ERR_OVERFLOW);
  assert_int_equal(n, 99);
  assert_int_equal(fdy_tensor_bytes(FDY_DTYPE_COUNT, s, &n, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_shape bad = s;
  bad.rank = FDY_MAX_RANK + 1;
  assert_int_equal(fdy_shape_elements(bad, &n, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_tensor_bytes(FDY_DTYPE_F32, bad, &n, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  char buf[64];
  assert_string_equal(fdy_shape_format(s, buf, sizeof(buf)), "[28, 3072]");
  assert_string_equal(fdy_shape_format(scalar, buf, sizeof(buf)), "[]");
  assert_string_equal(fdy_shape_format(FDY_SHAPE(7), buf, sizeof(buf)), "[7]");
  char small[5];
  fdy_shape_format(s, small, sizeof(small));
  assert_string_equal(small, "[28,");
  uint64_t dims[FDY_MAX_RANK] = {1, 2, 3, 4, 5, 6, 7, 8};
  fdy_shape full = fdy_shape_make(FDY_MAX_RANK, dims);
  assert_string_equal(fdy_shape_format(full, buf, sizeof(buf)),
                      "[1, 2, 3, 4, 5, 6, 7, 8]");
  assert_int_equal(fdy_shape_elements(full, &n, &err), FDY_OK);
  assert_int_equal(n, 40320);
}

static void test_budget(void **state) {
  (void)state;
  fdy_error err;
  fdy_budget b = fdy_budget_make(FDY_SPACE_DEVICE, 4 * FDY_GIB);
  assert_int_equal(b.space, FDY_SPACE_DEVICE);
  assert_int_equal(b.used, 0);
  assert_int_equal(b.peak, 0);
  assert_int_equal(fdy_budget_reserve(&b, 3 * FDY_GIB, &err), FDY_OK);
  assert_int_equal(fdy_budget_reserve(&b, FDY_GIB, &err), FDY_OK);
  assert_int_equal(b.used, 4 * FDY_GIB);
  assert_int_equal(b.peak, 4 * FDY_GIB);
  assert_int_equal(fdy_budget_reserve(&b, 1, &err), FDY_ERR_BUDGET);
  assert_int_equal(err.kind, FDY_ERR_BUDGET);
  assert_int_equal(err.expected, 4 * FDY_GIB);
  assert_int_equal(err.actual, 4 * FDY_GIB + 1);
  assert_int_equal(b.used, 4 * FDY_GIB);
  fdy_budget_release(&b, 3 * FDY_GIB);
  assert_int_equal(b.used, FDY_GIB);
  assert_int_equal(b.peak, 4 * FDY_GIB);
  assert_int_equal(fdy_budget_reserve(&b, 0, &err), FDY_OK);
  assert_int_equal(fdy_budget_reserve(&b, UINT64_MAX, &err), FDY_ERR_OVERFLOW);
  assert_int_equal(b.used, FDY_GIB);
  fdy_budget_release(&b, FDY_GIB);
  assert_int_equal(b.used, 0);
  assert_int_equal(b.peak, 4 * FDY_GIB);

  fdy_budget max = fdy_budget_make(FDY_SPACE_HOST, UINT64_MAX);
  assert_int_equal(fdy_budget_reserve(&max, UINT64_MAX, &err), FDY_OK);
  assert_int_equal(fdy_budget_reserve(&max, 1, &err), FDY_ERR_OVERFLOW);
  fdy_budget empty = fdy_budget_make(FDY_SPACE_HOST, 0);
  assert_int_equal(fdy_budget_reserve(&empty, 0, &err), FDY_OK);
  assert_int_equal(fdy_budget_reserve(&empty, 1, NULL), FDY_ERR_BUDGET);
  assert_string_equal(fdy_memory_space_name(FDY_SPACE_HOST), "host");
  assert_string_equal(fdy_memory_space_name(FDY_SPACE_DEVICE), "device");
}

static void test_utf8(void **state) {
  (void)state;
  static const char *const valid[] = {"",
                                      "plain/ascii.json",
                                      "caf\xc3\xa9",
                                      "\xe2\x82\xac",
                                      "\xf0\x9f\x98\x80",
                                      "\xef\xbf\xbd",
                                      "\xf4\x8f\xbf\xbf"};
  for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
    assert_true(fdy_utf8_valid(valid[i]));
    char *copy = fdy_utf8_sanitize(valid[i]);
    assert_string_equal(copy, valid[i]);
    free(copy);
  }
  static const struct {
    const char *in, *out;
  } invalid[] = {
      {"a\xff"
       "b",
       "a\xef\xbf\xbd"
       "b"},                                    /* never a UTF-8 byte */
      {"\xc3", "\xef\xbf\xbd"},                 /* truncated */
      {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"}, /* overlong '/' */
      {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
      {"\xf4\x90\x80\x80",
       "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
      {"x\x80y\xe2\x82", "x\xef\xbf\xbdy\xef\xbf\xbd\xef\xbf\xbd"},
  };
  for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
    assert_false(fdy_utf8_valid(invalid[i].in));
    char *copy = fdy_utf8_sanitize(invalid[i].in);
    assert_string_equal(copy, invalid[i].out);
    assert_true(fdy_utf8_valid(copy));
    free(copy);
  }
  assert_false(fdy_utf8_valid(NULL));
  assert_null(fdy_utf8_sanitize(NULL));
}

static void test_time_version_build_info(void **state) {
  (void)state;
  int64_t a = fdy_now_ns();
  int64_t b = fdy_now_ns();
  assert_true(a > 0);
  assert_true(b >= a);
  assert_string_equal(fdy_version(), FDY_VERSION_STRING);
  const fdy_build_info *info = fdy_build_info_get();
  assert_non_null(info);
  assert_string_equal(info->version, FDY_VERSION_STRING);
  assert_non_null(info->git_commit);
  assert_true(strcmp(info->git_commit, "unknown") == 0 ||
              strlen(info->git_commit) == 40);
  assert_true(info->git_dirty == 0 || info->git_dirty == 1);
  assert_non_null(info->compiler);
  assert_non_null(info->flags);
  assert_non_null(info->build_type);
  assert_true(strcmp(info->sanitizers, "ON") == 0 ||
              strcmp(info->sanitizers, "OFF") == 0);
  assert_true(strcmp(info->cuda, "ON") == 0 || strcmp(info->cuda, "OFF") == 0);
  /* why the CUDA backend is or is not built, in words (issue #31) */
  assert_non_null(info->cuda_note);
  assert_true(strcmp(info->cuda, "ON") == 0
                  ? strstr(info->cuda_note, "nvcc") != NULL
                  : strstr(info->cuda_note, "FOUNDRY_CUDA=OFF") != NULL ||
                        strstr(info->cuda_note, "no CUDA compiler") != NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_error_clear_and_set),
      cmocka_unit_test(test_error_prefix_truncates),
      cmocka_unit_test(test_escape_controls),
      cmocka_unit_test(test_status_names),
      cmocka_unit_test(test_add_mul),
      cmocka_unit_test(test_align_up),
      cmocka_unit_test(test_parse_bytes),
      cmocka_unit_test(test_format_bytes),
      cmocka_unit_test(test_dtypes),
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_budget),
      cmocka_unit_test(test_utf8),
      cmocka_unit_test(test_time_version_build_info),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
