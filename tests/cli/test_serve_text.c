/* The released text of `foundry serve`'s answers (src/cli/serve_text.h),
 * fed hand-built token texts: characters split across tokens are held
 * until whole, the start of a stop string is held until decided, a stop
 * string spanning tokens ends the text where it starts and is never
 * released, and finishing releases what is held. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "cli/serve_text.h"

/* Pushes tokens[i] and checks the released text after each against
 * released[i]. */
static void feed(fdy_serve_text *t, const char *const *tokens,
                 const char *const *released, size_t count) {
  fdy_error err;
  for (size_t i = 0; i < count; i++) {
    assert_int_equal(fdy_serve_text_push(t, tokens[i], strlen(tokens[i]), &err),
                     FDY_OK);
    if (t->released != strlen(released[i]) ||
        memcmp(t->buf, released[i], t->released) != 0) {
      fail_msg("after token %zu ('%s'): released '%.*s', expected '%s'", i,
               tokens[i], (int)t->released, t->buf ? t->buf : "", released[i]);
    }
  }
}

static void test_no_stop(void **state) {
  (void)state;
  fdy_serve_text t;
  fdy_serve_text_init(&t, NULL, 0);
  /* é (C3 A9) split, € (E2 82 AC) in three, 😀 (F0 9F 98 80) in two */
  static const char *const tokens[] = {"caf\xc3", "\xa9 ",    "\xe2",    "\x82",
                                       "\xac!",   "\xf0\x9f", "\x98\x80"};
  static const char *const released[] = {
      "caf",
      "caf\xc3\xa9 ",
      "caf\xc3\xa9 ",
      "caf\xc3\xa9 ",
      "caf\xc3\xa9 \xe2\x82\xac!",
      "caf\xc3\xa9 \xe2\x82\xac!",
      "caf\xc3\xa9 \xe2\x82\xac!\xf0\x9f\x98\x80"};
  feed(&t, tokens, released, 7);
  assert_false(t.stopped);
  fdy_serve_text_destroy(&t);

  /* bytes that can never complete a character go out at once: a lone
   * continuation, an overlong lead, a surrogate's lead and second byte */
  fdy_serve_text_init(&t, NULL, 0);
  static const char *const bad[] = {"a\x80", "\xc0", "\xed\xa0", "\xc3"};
  static const char *const bad_released[] = {
      "a\x80", "a\x80\xc0", "a\x80\xc0\xed\xa0", "a\x80\xc0\xed\xa0"};
  feed(&t, bad, bad_released, 4);
  /* an incomplete character at the end goes out raw when finished */
  fdy_serve_text_finish(&t);
  assert_int_equal(t.released, 6);
  assert_int_equal((unsigned char)t.buf[5], 0xc3);
  fdy_serve_text_destroy(&t);
}

static void test_stop_spanning_tokens(void **state) {
  (void)state;
  char *stop[] = {"<END>", "\xc3\xa9t\xc3\xa9"};
  fdy_serve_text t;
  fdy_serve_text_init(&t, stop, 2);
  /* "<END>" across 3 tokens; what follows it in the last one is dropped */
  static const char *const tokens[] = {"Hi <", "EN", "D> more", "ignored"};
  static const char *const released[] = {"Hi ", "Hi ", "Hi ", "Hi "};
  feed(&t, tokens, released, 4);
  assert_true(t.stopped);
  assert_int_equal(t.len, 3);
  assert_string_equal(t.buf, "Hi ");
  fdy_serve_text_destroy(&t);

  /* "été" across 3 tokens that split its characters */
  fdy_serve_text_init(&t, stop, 2);
  static const char *const split[] = {"l'\xc3", "\xa9t", "\xc3", "\xa9!"};
  static const char *const split_released[] = {"l'", "l'", "l'", "l'"};
  feed(&t, split, split_released, 4);
  assert_true(t.stopped);
  assert_string_equal(t.buf, "l'");
  fdy_serve_text_destroy(&t);
}

static void test_held_then_released(void **state) {
  (void)state;
  char *stop[] = {"STOP"};
  fdy_serve_text t;
  fdy_serve_text_init(&t, stop, 1);
  /* "ST" may start STOP: held; "STA" cannot: released, then "S" held
   * again; finishing releases the held "S" */
  static const char *const tokens[] = {"a S", "T", "A", "S"};
  static const char *const released[] = {"a ", "a ", "a STA", "a STA"};
  feed(&t, tokens, released, 4);
  assert_false(t.stopped);
  fdy_serve_text_finish(&t);
  assert_int_equal(t.released, 6);
  assert_string_equal(t.buf, "a STAS");
  fdy_serve_text_destroy(&t);

  /* a stop string inside one token, after a partial match of another:
   * the earliest whole one ends the text */
  char *two[] = {"abcd", "bc"};
  fdy_serve_text_init(&t, two, 2);
  static const char *const t2[] = {"xa", "bc"};
  static const char *const r2[] = {"x", "xa"};
  feed(&t, t2, r2, 2);
  assert_true(t.stopped);
  assert_string_equal(t.buf, "xa");
  fdy_serve_text_destroy(&t);

  /* a stop string at the very start: nothing is released */
  fdy_serve_text_init(&t, stop, 1);
  static const char *const t3[] = {"STOP"};
  static const char *const r3[] = {""};
  feed(&t, t3, r3, 1);
  assert_true(t.stopped);
  assert_int_equal(t.len, 0);
  fdy_serve_text_destroy(&t);

  /* empty pushes change nothing; a long text grows the buffer */
  fdy_serve_text_init(&t, stop, 1);
  fdy_error err;
  assert_int_equal(fdy_serve_text_push(&t, "", 0, &err), FDY_OK);
  assert_int_equal(t.released, 0);
  char chunk[1000];
  memset(chunk, 'x', sizeof chunk);
  for (int i = 0; i < 10; i++) {
    assert_int_equal(fdy_serve_text_push(&t, chunk, sizeof chunk, &err),
                     FDY_OK);
  }
  assert_int_equal(t.released, 10000);
  fdy_serve_text_destroy(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_stop),
      cmocka_unit_test(test_stop_spanning_tokens),
      cmocka_unit_test(test_held_then_released),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
