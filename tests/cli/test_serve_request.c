/* The request parser of `foundry serve` (src/cli/serve_request.h): every
 * field's types and ranges, the refusals' status, type and param, fields
 * ignored and fields refused, and max_tokens fitted to the context. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/serve_request.h"

static const fdy_serve_limits limits = {
    .model_id = "micro",
    .vocab = 1000,
    .sampling = {.temperature = 1.0f, .top_p = 1.0f}};

static fdy_status parse(const char *body, bool chat, fdy_serve_request *r,
                        fdy_serve_error *e) {
  return fdy_serve_request_parse(body, strlen(body), chat, &limits, r, e);
}

/* body is refused with status and param (NULL: none); r holds nothing. */
static void refused(const char *body, bool chat, fdy_status kind,
                    unsigned status, const char *param) {
  fdy_serve_request r;
  fdy_serve_error e;
  fdy_status st = parse(body, chat, &r, &e);
  if (st != kind) {
    fail_msg("%s: status %d, expected %d (%s)", body, st, kind, e.message);
  }
  assert_int_equal(e.status, status);
  assert_string_equal(e.param, param ? param : "");
  assert_non_null(e.type);
  assert_true(e.message[0] != '\0');
  assert_null(r.ids);
  assert_null(r.text);
  assert_int_equal(r.stop_count, 0);
}

static void test_completion(void **state) {
  (void)state;
  fdy_serve_request r;
  fdy_serve_error e;
  assert_int_equal(parse("{\"model\":\"micro\",\"prompt\":[1,2,999],"
                         "\"max_tokens\":7,\"temperature\":0,\"top_k\":40,"
                         "\"top_p\":0.5,\"min_p\":0.1,\"seed\":9,"
                         "\"stream\":true,\"user\":\"u\",\"extra\":{\"a\":[]},"
                         "\"n\":1,\"echo\":false,\"logit_bias\":{}}",
                         false, &r, &e),
                   FDY_OK);
  assert_false(r.chat);
  assert_int_equal(r.id_count, 3);
  assert_int_equal(r.ids[2], 999);
  assert_null(r.text);
  assert_true(r.max_tokens_given);
  assert_int_equal(r.max_tokens, 7);
  assert_true(r.sampling.temperature == 0.0f);
  assert_int_equal(r.sampling.top_k, 40);
  assert_true(r.sampling.top_p == 0.5f);
  assert_true(r.sampling.min_p == 0.1f);
  assert_true(r.seed_given);
  assert_int_equal(r.sampling.seed, 9);
  assert_true(r.stream);
  fdy_serve_request_free(&r);
  assert_null(r.ids);

  /* a text prompt; defaults from the limits; null fields as absent */
  assert_int_equal(parse("{\"prompt\":\"h\\u00e9llo\",\"temperature\":null,"
                         "\"stop\":null,\"max_tokens\":null}",
                         false, &r, &e),
                   FDY_OK);
  assert_string_equal(r.text, "h\xc3\xa9llo");
  assert_null(r.ids);
  assert_false(r.max_tokens_given);
  assert_false(r.seed_given);
  assert_true(r.sampling.temperature == 1.0f);
  assert_false(r.stream);
  fdy_serve_request_free(&r);
}

static void test_chat(void **state) {
  (void)state;
  fdy_serve_request r;
  fdy_serve_error e;
  assert_int_equal(
      parse("{\"messages\":[{\"role\":\"system\",\"content\":\"Be\"},"
            "{\"role\":\"user\",\"content\":\"Hi\"}],"
            "\"max_completion_tokens\":5}",
            true, &r, &e),
      FDY_OK);
  assert_true(r.chat);
  assert_string_equal(r.system, "Be");
  assert_string_equal(r.text, "Hi");
  assert_int_equal(r.max_tokens, 5);
  fdy_serve_request_free(&r);
  assert_int_equal(
      parse("{\"messages\":[{\"role\":\"user\",\"content\":\"\"}]}", true, &r,
            &e),
      FDY_OK);
  assert_null(r.system);
  assert_string_equal(r.text, "");
  fdy_serve_request_free(&r);
  /* a conversation: earlier exchanges in order, the last user message */
  assert_int_equal(
      parse("{\"messages\":[{\"role\":\"developer\",\"content\":\"Be\"},"
            "{\"role\":\"user\",\"content\":\"u1\"},"
            "{\"role\":\"assistant\",\"content\":\"a1\"},"
            "{\"role\":\"user\",\"content\":\"u2\"},"
            "{\"role\":\"assistant\",\"content\":\"\"},"
            "{\"role\":\"user\",\"content\":\"u3\"}]}",
            true, &r, &e),
      FDY_OK);
  assert_string_equal(r.system, "Be");
  assert_int_equal(r.exchange_count, 2);
  assert_string_equal(r.history[0], "u1");
  assert_string_equal(r.history[1], "a1");
  assert_string_equal(r.history[2], "u2");
  assert_string_equal(r.history[3], "");
  assert_string_equal(r.text, "u3");
  fdy_serve_request_free(&r);
  assert_int_equal(
      parse("{\"messages\":[{\"role\":\"user\",\"content\":\"u1\"},"
            "{\"role\":\"assistant\",\"content\":\"a1\"},"
            "{\"role\":\"user\",\"content\":\"u2\"}]}",
            true, &r, &e),
      FDY_OK);
  assert_null(r.system);
  assert_int_equal(r.exchange_count, 1);
  assert_string_equal(r.text, "u2");
  fdy_serve_request_free(&r);
  /* out of turn: two users, an assistant first, a system in the middle */
  refused("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
          "{\"role\":\"user\",\"content\":\"b\"},"
          "{\"role\":\"user\",\"content\":\"c\"}]}",
          true, FDY_ERR_INVALID_ARGUMENT, 400, "messages");
  refused("{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"},"
          "{\"role\":\"user\",\"content\":\"b\"},"
          "{\"role\":\"user\",\"content\":\"c\"}]}",
          true, FDY_ERR_INVALID_ARGUMENT, 400, "messages");
  refused("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
          "{\"role\":\"system\",\"content\":\"b\"},"
          "{\"role\":\"user\",\"content\":\"c\"}]}",
          true, FDY_ERR_INVALID_ARGUMENT, 400, "messages");
  refused("{\"messages\":\"Hello\"}", true, FDY_ERR_INVALID_ARGUMENT, 400,
          "messages");
  refused("{\"messages\":[]}", true, FDY_ERR_INVALID_ARGUMENT, 400, "messages");
  refused("{\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", true,
          FDY_ERR_INVALID_ARGUMENT, 400, "messages");
  refused("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
          "{\"role\":\"assistant\",\"content\":\"b\"}]}",
          true, FDY_ERR_INVALID_ARGUMENT, 400, "messages");
  refused("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", true,
          FDY_ERR_INVALID_ARGUMENT, 400, "messages");
  refused("{\"messages\":[\"x\"]}", true, FDY_ERR_INVALID_ARGUMENT, 400,
          "messages");
  /* the chat endpoint takes messages, not prompt */
  refused("{\"prompt\":[1]}", true, FDY_ERR_INVALID_ARGUMENT, 400, "messages");
}

static void test_syntax(void **state) {
  (void)state;
  refused("", false, FDY_ERR_PARSE, 400, NULL);
  refused("{\"prompt\":[5,6", false, FDY_ERR_PARSE, 400, NULL);
  refused("[1,2]", false, FDY_ERR_PARSE, 400, NULL);
  refused("\"x\"", false, FDY_ERR_PARSE, 400, NULL);
  refused("{\"prompt\":[1]} x", false, FDY_ERR_PARSE, 400, NULL);
  refused("{\"prompt\":\"a\\u0000b\"}", false, FDY_ERR_PARSE, 400, NULL);
  refused("{\"prompt\":\"\xff\xfe\"}", false, FDY_ERR_PARSE, 400, NULL);
  refused("{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}", true,
          FDY_ERR_PARSE, 400, NULL);
  refused("{\"prompt\":[1],\"max_tokens\":99999999999999999999999}", false,
          FDY_ERR_PARSE, 400, NULL);
  refused("{\"prompt\":[1],\"temperature\":1e999}", false, FDY_ERR_PARSE, 400,
          NULL);
  /* a NUL byte inside the body's length */
  fdy_serve_request r;
  fdy_serve_error e;
  static const char nul[] = "{\"prompt\":[1]}\0{}";
  assert_int_equal(
      fdy_serve_request_parse(nul, sizeof nul - 1, false, &limits, &r, &e),
      FDY_ERR_PARSE);
  assert_int_equal(e.status, 400);
  /* NULL body of 0 bytes */
  assert_int_equal(fdy_serve_request_parse(NULL, 0, false, &limits, &r, &e),
                   FDY_ERR_PARSE);
}

static void test_fields(void **state) {
  (void)state;
  refused("{\"model\":\"other\",\"prompt\":[1]}", false, FDY_ERR_NOT_FOUND, 404,
          "model");
  refused("{\"model\":5,\"prompt\":[1]}", false, FDY_ERR_INVALID_ARGUMENT, 400,
          "model");
  refused("{}", false, FDY_ERR_INVALID_ARGUMENT, 400, "prompt");
  refused("{\"prompt\":[]}", false, FDY_ERR_INVALID_ARGUMENT, 400, "prompt");
  refused("{\"prompt\":5}", false, FDY_ERR_INVALID_ARGUMENT, 400, "prompt");
  refused("{\"prompt\":[1,1000]}", false, FDY_ERR_INVALID_ARGUMENT, 400,
          "prompt");
  refused("{\"prompt\":[1,-1]}", false, FDY_ERR_INVALID_ARGUMENT, 400,
          "prompt");
  refused("{\"prompt\":[1,2.5]}", false, FDY_ERR_INVALID_ARGUMENT, 400,
          "prompt");
  refused("{\"prompt\":[1],\"max_tokens\":\"7\"}", false,
          FDY_ERR_INVALID_ARGUMENT, 400, "max_tokens");
  refused("{\"prompt\":[1],\"max_tokens\":0}", false, FDY_ERR_INVALID_ARGUMENT,
          400, "max_tokens");
  refused("{\"prompt\":[1],\"max_tokens\":-3}", false, FDY_ERR_INVALID_ARGUMENT,
          400, "max_tokens");
  refused("{\"prompt\":[1],\"max_tokens\":4294967296}", false,
          FDY_ERR_INVALID_ARGUMENT, 400, "max_tokens");
  refused("{\"prompt\":[1],\"max_tokens\":9223372036854775807}", false,
          FDY_ERR_INVALID_ARGUMENT, 400, "max_tokens");
  refused("{\"prompt\":[1],\"max_tokens\":1.5}", false,
          FDY_ERR_INVALID_ARGUMENT, 400, "max_tokens");
  refused("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
          "\"max_completion_tokens\":0}",
          true, FDY_ERR_INVALID_ARGUMENT, 400, "max_completion_tokens");
  refused("{\"prompt\":[1],\"temperature\":\"hot\"}", false,
          FDY_ERR_INVALID_ARGUMENT, 400, "temperature");
  refused("{\"prompt\":[1],\"top_p\":true}", false, FDY_ERR_INVALID_ARGUMENT,
          400, "top_p");
  refused("{\"prompt\":[1],\"min_p\":[]}", false, FDY_ERR_INVALID_ARGUMENT, 400,
          "min_p");
  refused("{\"prompt\":[1],\"top_k\":-1}", false, FDY_ERR_INVALID_ARGUMENT, 400,
          "top_k");
  refused("{\"prompt\":[1],\"top_k\":0.5}", false, FDY_ERR_INVALID_ARGUMENT,
          400, "top_k");
  refused("{\"prompt\":[1],\"seed\":-1}", false, FDY_ERR_INVALID_ARGUMENT, 400,
          "seed");
  refused("{\"prompt\":[1],\"stream\":1}", false, FDY_ERR_INVALID_ARGUMENT, 400,
          "stream");
}

static void test_stop(void **state) {
  (void)state;
  fdy_serve_request r;
  fdy_serve_error e;
  assert_int_equal(parse("{\"prompt\":[1],\"stop\":\"\\n\\n\"}", false, &r, &e),
                   FDY_OK);
  assert_int_equal(r.stop_count, 1);
  assert_string_equal(r.stop[0], "\n\n");
  fdy_serve_request_free(&r);
  assert_int_equal(
      parse("{\"prompt\":[1],\"stop\":[\"a\",\"\\u00e9t\\u00e9\",\"c\",\"d\"]}",
            false, &r, &e),
      FDY_OK);
  assert_int_equal(r.stop_count, 4);
  assert_string_equal(r.stop[1], "\xc3\xa9t\xc3\xa9");
  fdy_serve_request_free(&r);
  assert_int_equal(parse("{\"prompt\":[1],\"stop\":[]}", false, &r, &e),
                   FDY_OK);
  assert_int_equal(r.stop_count, 0);
  fdy_serve_request_free(&r);
  refused("{\"prompt\":[1],\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", false,
          FDY_ERR_INVALID_ARGUMENT, 400, "stop");
  refused("{\"prompt\":[1],\"stop\":\"\"}", false, FDY_ERR_INVALID_ARGUMENT,
          400, "stop");
  refused("{\"prompt\":[1],\"stop\":[\"a\",7]}", false,
          FDY_ERR_INVALID_ARGUMENT, 400, "stop");
  refused("{\"prompt\":[1],\"stop\":5}", false, FDY_ERR_INVALID_ARGUMENT, 400,
          "stop");
}

static void test_unsupported(void **state) {
  (void)state;
  static const char *const fields[][2] = {
      {"n", "2"},
      {"best_of", "3"},
      {"echo", "true"},
      {"logprobs", "5"},
      {"top_logprobs", "2"},
      {"logit_bias", "{\"5\":100}"},
      {"suffix", "\"x\""},
      {"presence_penalty", "0.5"},
      {"frequency_penalty", "-1"},
      {"tools", "[{}]"},
      {"tool_choice", "\"auto\""},
      {"functions", "[{}]"},
      {"function_call", "\"auto\""},
      {"response_format", "{\"type\":\"json_object\"}"},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    char body[128];
    snprintf(body, sizeof body, "{\"prompt\":[1],\"%s\":%s}", fields[i][0],
             fields[i][1]);
    refused(body, false, FDY_ERR_UNSUPPORTED, 400, fields[i][0]);
  }
  /* their defaults are accepted */
  fdy_serve_request r;
  fdy_serve_error e;
  assert_int_equal(
      parse("{\"prompt\":[1],\"n\":1,\"best_of\":1,\"echo\":false,"
            "\"logprobs\":null,\"presence_penalty\":0,\"frequency_penalty\":0,"
            "\"tools\":[],\"response_format\":{\"type\":\"text\"},"
            "\"stream_options\":{\"include_usage\":true},\"metadata\":{}}",
            false, &r, &e),
      FDY_OK);
  fdy_serve_request_free(&r);
}

static void test_fit(void **state) {
  (void)state;
  fdy_serve_request r;
  fdy_serve_error e;
  assert_int_equal(parse("{\"prompt\":[1]}", false, &r, &e), FDY_OK);
  assert_int_equal(fdy_serve_request_fit(&r, 10, 64, &e), FDY_OK);
  assert_int_equal(r.max_tokens, FDY_SERVE_DEFAULT_MAX_TOKENS);
  fdy_serve_request_free(&r);
  /* chat: the rest of the context; the last id needs no position */
  assert_int_equal(
      parse("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", true, &r,
            &e),
      FDY_OK);
  assert_int_equal(fdy_serve_request_fit(&r, 10, 64, &e), FDY_OK);
  assert_int_equal(r.max_tokens, 55);
  assert_int_equal(fdy_serve_request_fit(&r, 64, 64, &e), FDY_OK);
  fdy_serve_request_free(&r);
  assert_int_equal(
      parse("{\"prompt\":[5,6],\"max_tokens\":5000}", false, &r, &e), FDY_OK);
  assert_int_equal(fdy_serve_request_fit(&r, 2, 4096, &e), FDY_ERR_CONTEXT);
  assert_int_equal(e.status, 400);
  assert_string_equal(e.param, "max_tokens");
  assert_non_null(strstr(e.message, "5000"));
  assert_non_null(strstr(e.message, "5001"));
  assert_non_null(strstr(e.message, "4096"));
  assert_int_equal(fdy_serve_request_fit(&r, 2, 5001, &e), FDY_OK);
  assert_int_equal(fdy_serve_request_fit(&r, 5002, 5001, &e), FDY_ERR_CONTEXT);
  assert_string_equal(e.param, "prompt");
  assert_non_null(strstr(e.message, "5002"));
  fdy_serve_request_free(&r);
  fdy_serve_request_free(NULL);
}

/* The seed corpus of fuzz_serve_request holds what its names say:
 * valid-* parses for one endpoint at least, bad-* for neither. */
static void test_fuzz_seeds(void **state) {
  (void)state;
  const char *root = getenv("FOUNDRY_SOURCE_DIR");
  assert_non_null(root);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/fuzz/corpus/serve_request", root);
  DIR *d = opendir(dir);
  assert_non_null(d);
  unsigned seeds = 0;
  struct dirent *entry;
  while ((entry = readdir(d))) {
    bool valid = strncmp(entry->d_name, "valid-", 6) == 0;
    if (!valid && strncmp(entry->d_name, "bad-", 4) != 0) {
      continue;
    }
    char path[8192], body[4096];
    snprintf(path, sizeof path, "%s/%s", dir, entry->d_name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t len = fread(body, 1, sizeof body, f);
    fclose(f);
    bool parsed = false;
    for (int chat = 0; chat < 2; chat++) {
      fdy_serve_request r;
      fdy_serve_error e;
      if (fdy_serve_request_parse(body, len, chat, &limits, &r, &e) == FDY_OK) {
        parsed = true;
        fdy_serve_request_free(&r);
      }
    }
    if (parsed != valid) {
      fail_msg("%s: %s", entry->d_name, parsed ? "parses" : "is refused");
    }
    seeds++;
  }
  closedir(d);
  assert_true(seeds >= 10);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_completion), cmocka_unit_test(test_chat),
      cmocka_unit_test(test_syntax),     cmocka_unit_test(test_fields),
      cmocka_unit_test(test_stop),       cmocka_unit_test(test_unsupported),
      cmocka_unit_test(test_fit),        cmocka_unit_test(test_fuzz_seeds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
