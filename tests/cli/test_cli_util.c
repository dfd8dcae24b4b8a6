/* The CLI's shared parsers (src/cli/cli_util.h): integers, the one parser
 * of comma-separated lists, whose every failure names the item (its index
 * in ids[0]) and the list, and the session flags with the explanation of
 * an impossible weight budget; and the loop that reads the commands' flag
 * tables (src/cli/cli_options.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_util.h"

static void test_uint(void **state) {
  (void)state;
  fdy_error err;
  uint64_t v = 0;
  assert_int_equal(
      fdy_cli_parse_uint("--n", "0000000000000000000042", 0, 100, &v, &err),
      FDY_OK);
  assert_int_equal(v, 42);
  static const char *const bad[] = {"",   "-1", "+1",  " 1",
                                    "1 ", "1x", "101", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(fdy_cli_parse_uint("--n", bad[i], 0, 100, &v, &err),
                     FDY_ERR_INVALID_ARGUMENT);
  }
}

static void test_list(void **state) {
  (void)state;
  fdy_error err;
  uint64_t *v = NULL;
  uint32_t n = 0;
  /* 15 and 16 characters, and longer: the same path */
  assert_int_equal(fdy_cli_parse_list("--ids",
                                      "000000000000001,0000000000000001,"
                                      "00000000000000000000000000000000007",
                                      0, INT32_MAX, &v, &n, &err),
                   FDY_OK);
  assert_int_equal(n, 3);
  assert_int_equal(v[0], 1);
  assert_int_equal(v[1], 1);
  assert_int_equal(v[2], 7);
  free(v);
  static const struct {
    const char *text;
    int64_t item;
  } bad[] = {
      {"1, 2", 1},       {"1,,2", 1},
      {"", 0},           {"1,", 1},
      {",1", 0},         {"1,-2", 1},
      {"x", 0},          {"1,2,2147483648", 2},
      {"1,2,3,4,5 ", 4}, {"12345678901234567890", 0},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = (uint64_t *)&n;
    n = 9;
    assert_int_equal(
        fdy_cli_parse_list("--ids", bad[i].text, 0, INT32_MAX, &v, &n, &err),
        FDY_ERR_INVALID_ARGUMENT);
    assert_null(v);
    assert_int_equal(n, 0);
    assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
    assert_int_equal(err.ids[0], bad[i].item);
    assert_string_equal(err.name, "--ids");
  }
}

static void test_ids(void **state) {
  (void)state;
  fdy_error err;
  int32_t *ids = NULL;
  uint32_t n = 0;
  assert_int_equal(
      fdy_cli_parse_ids("--prompt-ids", "5,0,2147483647", &ids, &n, &err),
      FDY_OK);
  assert_int_equal(n, 3);
  assert_int_equal(ids[0], 5);
  assert_int_equal(ids[1], 0);
  assert_int_equal(ids[2], INT32_MAX);
  free(ids);
  assert_int_equal(fdy_cli_parse_ids("--prompt-ids", "1, 2", &ids, &n, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(ids);
  assert_int_equal(err.ids[0], 1);
}

static void test_empty_arguments(void **state) {
  (void)state;
  char *ok[] = {"inspect", "--json", "dir", NULL};
  assert_int_equal(fdy_cli_check_arguments("inspect", 3, ok), FDY_EXIT_OK);
  char *empty_value[] = {"verify", "--model", "", NULL};
  assert_int_equal(fdy_cli_check_arguments("verify", 3, empty_value),
                   FDY_EXIT_USAGE);
  char *empty_eq[] = {"verify", "--model=", NULL};
  assert_int_equal(fdy_cli_check_arguments("verify", 2, empty_eq),
                   FDY_EXIT_USAGE);
  char *empty_positional[] = {"inspect", "", NULL};
  assert_int_equal(fdy_cli_check_arguments("inspect", 2, empty_positional),
                   FDY_EXIT_USAGE);
}

/* Size flags: positive sizes up to 2^63 - 1 (the largest integer a JSON
 * report holds); everything else is INVALID_ARGUMENT naming the flag, the
 * value untouched (issue #31: 2^63 was reported as a negative number). */
static void test_size(void **state) {
  (void)state;
  fdy_error err;
  uint64_t v = 0;
  assert_int_equal(fdy_cli_parse_size("--s", "2GiB", &v, &err), FDY_OK);
  assert_true(v == 2 * FDY_GIB);
  assert_int_equal(fdy_cli_parse_size("--s", "9223372036854775807", &v, &err),
                   FDY_OK);
  assert_true(v == FDY_CLI_MAX_BYTES);
  assert_true(FDY_CLI_MAX_BYTES == (uint64_t)INT64_MAX);
  static const struct {
    const char *text;
    uint64_t actual; /* 0: not parsed */
  } above[] = {{"9223372036854775808", (uint64_t)1 << 63},
               {"18446744073709551615", UINT64_MAX},
               {"8388608TiB", (uint64_t)1 << 63}};
  for (size_t i = 0; i < sizeof above / sizeof above[0]; i++) {
    v = 7;
    assert_int_equal(fdy_cli_parse_size("--s", above[i].text, &v, &err),
                     FDY_ERR_INVALID_ARGUMENT);
    assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
    assert_string_equal(err.name, "--s");
    assert_true(err.expected == FDY_CLI_MAX_BYTES);
    assert_true(err.actual == above[i].actual);
    assert_int_equal(v, 7);
  }
  static const char *const bad[] = {"0",
                                    "0MiB",
                                    "-1",
                                    "1.5GiB",
                                    "2gib",
                                    "",
                                    "1XB",
                                    "18446744073709551616",
                                    "99999999999GiB"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(fdy_cli_parse_size("--s", bad[i], &v, &err),
                     FDY_ERR_INVALID_ARGUMENT);
    assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
    assert_string_equal(err.name, "--s");
    assert_int_equal(v, 7);
  }
}

/* Writes len bytes to a new temporary file; returns its path (static). */
static const char *temp_file(const char *bytes, size_t len) {
  static char path[] = "/tmp/fdy_ids_XXXXXX";
  strcpy(path, "/tmp/fdy_ids_XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, bytes, len), (ssize_t)len);
  close(fd);
  return path;
}

/* Id-list files: blanks around the list dropped; a NUL byte anywhere is
 * FDY_ERR_PARSE naming the file and the NUL's byte offset (issue #31: it
 * ended the list early); an empty file only where allowed. */
static void test_ids_file(void **state) {
  (void)state;
  fdy_error err;
  int32_t *ids = NULL;
  uint32_t count = 0;
  const char *path = temp_file(" 5,6,7\n", 7);
  assert_int_equal(
      fdy_cli_read_ids_file(path, "--f", false, &ids, &count, &err), FDY_OK);
  assert_int_equal(count, 3);
  assert_int_equal(ids[2], 7);
  free(ids);
  unlink(path);
  static const struct {
    const char *bytes;
    size_t len;
    uint64_t offset;
  } nul[] = {{"1,2\0,3", 7, 3},
             {"40,41\0,42", 10, 5},
             {"\0", 1, 0},
             {"1,2\n\0", 5, 4},
             {"1,2,3\0", 6, 5}};
  for (size_t i = 0; i < sizeof nul / sizeof nul[0]; i++) {
    path = temp_file(nul[i].bytes, nul[i].len);
    ids = (int32_t *)&count; /* must come back NULL */
    assert_int_equal(
        fdy_cli_read_ids_file(path, "--f", true, &ids, &count, &err),
        FDY_ERR_PARSE);
    assert_int_equal(err.kind, FDY_ERR_PARSE);
    assert_string_equal(err.name, path);
    assert_true(err.actual == nul[i].offset);
    assert_null(ids);
    assert_int_equal(count, 0);
    unlink(path);
  }
  path = temp_file(" \n", 2);
  assert_int_equal(fdy_cli_read_ids_file(path, "--f", true, &ids, &count, &err),
                   FDY_OK);
  assert_null(ids);
  assert_int_equal(count, 0);
  assert_int_equal(
      fdy_cli_read_ids_file(path, "--f", false, &ids, &count, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "--f");
  unlink(path);
  assert_int_equal(fdy_cli_read_ids_file("/nonexistent/ids", "--f", true, &ids,
                                         &count, &err),
                   FDY_ERR_NOT_FOUND);
}

/* --weight-budget takes sizes in bytes or binary units, --buffers and
 * --prefill-rows integers in their ranges, --dependent-launch on or off;
 * every bad value is a usage error naming the flag, the flags untouched. */
static void test_session_flags(void **state) {
  (void)state;
  fdy_cli_session_flags flags = FDY_CLI_SESSION_FLAGS_DEFAULT;
  fdy_error err;
  static const struct {
    const char *text;
    uint64_t bytes;
  } sizes[] = {{"512MiB", 512 * FDY_MIB},
               {"2GiB", 2 * FDY_GIB},
               {"1048577", 1048577},
               {"7 MiB", 7 * FDY_MIB}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    assert_int_equal(fdy_cli_flag_set(fdy_cli_engine_rows, "weight-budget",
                                      sizes[i].text, &flags, &err),
                     FDY_OK);
    assert_int_equal(flags.weight_budget, sizes[i].bytes);
  }
  static const char *const bad_sizes[] = {"0",    "0MiB", "-1",  "1.5GiB",
                                          "2gib", "x",    "1XB", ""};
  for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
    assert_int_equal(fdy_cli_flag_set(fdy_cli_engine_rows, "weight-budget",
                                      bad_sizes[i], &flags, &err),
                     FDY_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "--weight-budget"));
    assert_int_equal(flags.weight_budget, 7 * FDY_MIB);
  }
  assert_int_equal(
      fdy_cli_flag_set(fdy_cli_engine_rows, "buffers", "3", &flags, &err),
      FDY_OK);
  assert_int_equal(flags.buffers, 3);
  assert_int_equal(fdy_cli_flag_set(fdy_cli_engine_rows, "prefill-rows", "512",
                                    &flags, &err),
                   FDY_OK);
  assert_int_equal(flags.prefill_rows, 512);
  static const struct {
    const char *name, *text, *flag;
  } bad[] = {{"buffers", "0", "--buffers"},
             {"buffers", "65", "--buffers"},
             {"prefill-rows", "0", "--prefill-rows"},
             {"prefill-rows", "65537", "--prefill-rows"},
             {"dependent-launch", "no", "--dependent-launch"},
             {"dependent-launch", "", "--dependent-launch"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(fdy_cli_flag_set(fdy_cli_engine_rows, bad[i].name,
                                      bad[i].text, &flags, &err),
                     FDY_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, bad[i].flag));
  }
  assert_int_equal(flags.buffers, 3);
  assert_int_equal(flags.prefill_rows, 512);
  assert_false(flags.serial_launch);
  assert_int_equal(fdy_cli_flag_set(fdy_cli_engine_rows, "dependent-launch",
                                    "off", &flags, &err),
                   FDY_OK);
  assert_true(flags.serial_launch);
  assert_int_equal(fdy_cli_flag_set(fdy_cli_engine_rows, "dependent-launch",
                                    "on", &flags, &err),
                   FDY_OK);
  assert_false(flags.serial_launch);
  fdy_llama_session_options o = fdy_cli_session_options(&flags, NULL);
  assert_int_equal(o.weight_budget, 7 * FDY_MIB);
  assert_int_equal(o.buffers, 3);
  assert_int_equal(o.prefill_rows, 512);
  assert_false(o.all_logits);
  assert_false(o.collect_timings);
  assert_int_equal(
      fdy_cli_flag_set(fdy_cli_session_rows, "buffers", "3", &flags, &err),
      FDY_ERR_NOT_FOUND);
}

/* The planner's budget error gains the minimum in binary units and the
 * buffer count in force; other errors are left alone. */
static void test_explain_budget(void **state) {
  (void)state;
  fdy_cli_session_flags flags = FDY_CLI_SESSION_FLAGS_DEFAULT;
  fdy_error err;
  fdy_error_set(&err, FDY_ERR_BUDGET, "too small");
  err.expected = FDY_MIB;
  err.actual = 7084032;
  fdy_cli_explain_budget(&flags, &err);
  assert_string_equal(err.message,
                      "too small (--weight-budget 1 MiB is too small for "
                      "--buffers 2: at least 6.76 MiB)");
  flags.buffers = 1;
  fdy_error_set(&err, FDY_ERR_BUDGET, "too small");
  err.expected = 3 * FDY_MIB;
  err.actual = 4 * FDY_MIB;
  fdy_cli_explain_budget(&flags, &err);
  assert_non_null(strstr(err.message, "--buffers 1: at least 4 MiB"));
  fdy_error_set(&err, FDY_ERR_IO, "unchanged");
  fdy_cli_explain_budget(&flags, &err);
  assert_string_equal(err.message, "unchanged");
}

/* A flag given twice is a usage error however it is spelled (issue #31);
 * one of each is fine, an alias (same val) counts as the same flag, and
 * argv is left as it was (getopt_long permutes only the copy). */
static void test_repeats(void **state) {
  (void)state;
  static const struct option options[] = {
      {"alpha", required_argument, NULL, 300},
      {"beta", no_argument, NULL, 301},
      {"also-alpha", required_argument, NULL, 300},
      {NULL, 0, NULL, 0},
  };
  char *ok[] = {"cmd", "pos", "--alpha", "1", "--beta", "--unknown", NULL};
  assert_int_equal(fdy_cli_check_repeats("cmd", 6, ok, options), FDY_EXIT_OK);
  assert_string_equal(ok[1], "pos");
  assert_string_equal(ok[2], "--alpha");
  char *twice[] = {"cmd", "--alpha", "1", "pos", "--alpha=2", NULL};
  assert_int_equal(fdy_cli_check_repeats("cmd", 5, twice, options),
                   FDY_EXIT_USAGE);
  assert_string_equal(twice[3], "pos");
  char *abbreviated[] = {"cmd", "--beta", "--be", NULL};
  assert_int_equal(fdy_cli_check_repeats("cmd", 3, abbreviated, options),
                   FDY_EXIT_USAGE);
  char *alias[] = {"cmd", "--alpha", "1", "--also-alpha", "2", NULL};
  assert_int_equal(fdy_cli_check_repeats("cmd", 5, alias, options),
                   FDY_EXIT_USAGE);
  char *after_dashes[] = {"cmd", "--beta", "--", "--beta", NULL};
  assert_int_equal(fdy_cli_check_repeats("cmd", 4, after_dashes, options),
                   FDY_EXIT_OK);
}

/* The options of a command made up for test_flag_table. */
typedef struct table_args {
  const char *name;
  uint64_t count;
  uint32_t small;
  bool on, off, count_given;
  fdy_cli_session_flags session;
} table_args;

static const fdy_cli_flag table_rows[] = {
    {FDY_CLI_TEXT("name", table_args, name)},
    {FDY_CLI_U64("count", table_args, count, 1, 10),
     FDY_CLI_GIVEN(table_args, count_given)},
    {FDY_CLI_U32("small", table_args, small, 0, 7)},
    {FDY_CLI_SET("on", table_args, on)},
    {FDY_CLI_CLEAR("off", table_args, off)},
    {FDY_CLI_SESSION_ROWS(table_args, session)},
    {FDY_CLI_END},
};

static const fdy_cli_flag refusing_rows[] = {
    {FDY_CLI_MODE("mode")},
    {FDY_CLI_END, .refusal = "does not apply to --mode"},
};

/* One table, read by one loop: each kind into its field, a group's rows
 * into the group's struct, the given bool, operands; a bad or missing
 * value, an unknown option (or one the table refuses), a repeated flag
 * and an unexpected operand are usage errors. */
static void test_flag_table(void **state) {
  (void)state;
  table_args a = {.off = true, .session = FDY_CLI_SESSION_FLAGS_DEFAULT};
  char *ok[] = {"cmd", "--name", "x",     "--count=3", "pos", "--small",
                "7",   "--on",   "--off", "--threads", "4",   NULL};
  int operand = 0;
  assert_int_equal(fdy_cli_parse_flags("cmd", 11, ok, table_rows, &a, &operand),
                   FDY_EXIT_OK);
  assert_string_equal(a.name, "x");
  assert_int_equal(a.count, 3);
  assert_true(a.count_given);
  assert_int_equal(a.small, 7);
  assert_true(a.on);
  assert_false(a.off);
  assert_int_equal(a.session.threads, 4);
  assert_int_equal(operand, 10);
  assert_string_equal(ok[operand], "pos");
  char *operands[] = {"cmd", "pos", NULL};
  assert_int_equal(
      fdy_cli_parse_flags("cmd", 2, operands, table_rows, &a, NULL),
      FDY_EXIT_USAGE);
  char *bad[][3] = {{"cmd", "--count", "11"},   {"cmd", "--small", "8"},
                    {"cmd", "--bogus", "1"},    {"cmd", "--on", "--on"},
                    {"cmd", "--kv-dtype", "x"}, {"cmd", "--threads", "0"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *argv[] = {bad[i][0], bad[i][1], bad[i][2], NULL};
    assert_int_equal(fdy_cli_parse_flags("cmd", 3, argv, table_rows, &a, NULL),
                     FDY_EXIT_USAGE);
  }
  char *missing[] = {"cmd", "--count", NULL};
  assert_int_equal(fdy_cli_parse_flags("cmd", 2, missing, table_rows, &a, NULL),
                   FDY_EXIT_USAGE);
  assert_int_equal(a.count, 3);
  assert_int_equal(a.small, 7);
  char *refused[] = {"cmd", "--mode", "--name", "x", NULL};
  assert_int_equal(
      fdy_cli_parse_flags("cmd", 4, refused, refusing_rows, &a, NULL),
      FDY_EXIT_USAGE);
  fdy_error err;
  assert_int_equal(fdy_cli_flag_set(table_rows, "kv-dtype", "f16", &a, &err),
                   FDY_OK);
  assert_int_equal(a.session.kv_dtype, FDY_DTYPE_F16);
  assert_int_equal(fdy_cli_flag_set(table_rows, "kv-dtype", "f8", &a, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.message, "--kv-dtype must be f32 or f16, got 'f8'");
  assert_int_equal(a.session.kv_dtype, FDY_DTYPE_F16);
}

/* --prefill-rows above the context runs as the context (issue #31: 65,536
 * rows of activations were allocated, and the failure blamed
 * --weight-budget): the explicit context, else max_position_embeddings
 * capped at FDY_LLAMA_DEFAULT_CONTEXT. */
static void test_cap_prefill_rows(void **state) {
  (void)state;
  fdy_llama_config config = {.max_position_embeddings = 131072};
  fdy_llama_session_options o = {.context = 64, .prefill_rows = 65536};
  fdy_cli_cap_prefill_rows(&o, &config);
  assert_int_equal(o.prefill_rows, 64);
  o = (fdy_llama_session_options){.context = 64, .prefill_rows = 5};
  fdy_cli_cap_prefill_rows(&o, &config);
  assert_int_equal(o.prefill_rows, 5);
  o = (fdy_llama_session_options){.prefill_rows = 65536};
  fdy_cli_cap_prefill_rows(&o, &config);
  assert_int_equal(o.prefill_rows, FDY_LLAMA_DEFAULT_CONTEXT);
  assert_int_equal(o.context, 0);
  config.max_position_embeddings = 100;
  fdy_cli_cap_prefill_rows(&o, &config);
  assert_int_equal(o.prefill_rows, 100);
  o = (fdy_llama_session_options){.context = 64};
  fdy_cli_cap_prefill_rows(&o, &config);
  assert_int_equal(o.prefill_rows, 0); /* the session's default */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uint),
      cmocka_unit_test(test_list),
      cmocka_unit_test(test_ids),
      cmocka_unit_test(test_size),
      cmocka_unit_test(test_ids_file),
      cmocka_unit_test(test_empty_arguments),
      cmocka_unit_test(test_session_flags),
      cmocka_unit_test(test_explain_budget),
      cmocka_unit_test(test_cap_prefill_rows),
      cmocka_unit_test(test_repeats),
      cmocka_unit_test(test_flag_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
