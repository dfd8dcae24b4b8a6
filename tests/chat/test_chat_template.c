/* The Jinja chat template interpreter (foundry/chat_template.h): every case
 * of tests/data/chat_templates/cases.json (the templates of Llama 3.x,
 * SmolLM2, Qwen2.5, Qwen3, Mistral v0.3, Phi-3 and a template of every
 * construct, rendered by transformers' own renderer:
 * scripts/make_chat_template_tests.py) renders to the same text or fails
 * the same way; the origin of each output byte; templates refused at parse
 * (each kind of construct outside the subset, malformed sources) and
 * renders refused (raise_exception, type errors, budgets, bad variables),
 * each with its error kind, name and line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "foundry/chat_template.h"

static const char *data_dir(void) {
  const char *dir = getenv("FOUNDRY_TEST_DATA");
  return dir ? dir : "tests/data";
}

static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  char *s = malloc((size_t)n + 1);
  assert_non_null(s);
  assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = '\0';
  fclose(f);
  *len = (size_t)n;
  return s;
}

static fdy_jinja *parse_ok(const char *source) {
  fdy_jinja *t = NULL;
  fdy_error err;
  fdy_status s = fdy_jinja_parse(source, strlen(source), &t, &err);
  if (s != FDY_OK) {
    print_error("%s\n", err.message);
  }
  assert_int_equal(s, FDY_OK);
  return t;
}

/* Renders source for one user message "hi" (and variables). */
static fdy_status render_text(const char *source, const char *variables,
                              fdy_jinja_output *out, fdy_error *err) {
  fdy_jinja *t = parse_ok(source);
  fdy_jinja_message m = {"user", "hi", 2};
  fdy_jinja_input in = {.messages = &m,
                        .message_count = 1,
                        .add_generation_prompt = true,
                        .bos_token = "<s>",
                        .variables = variables};
  fdy_status s = fdy_jinja_render(t, &in, out, err);
  fdy_jinja_destroy(t);
  return s;
}

/* ---- the cases transformers rendered ------------------------------------ */

static void test_cases(void **state) {
  (void)state;
  char path[600];
  snprintf(path, sizeof path, "%s/chat_templates/cases.json", data_dir());
  json_error_t je;
  json_t *cases = json_load_file(path, 0, &je);
  assert_non_null(cases);
  size_t i, checked = 0, refused = 0;
  json_t *c;
  json_array_foreach(cases, i, c) {
    const char *name = json_string_value(json_object_get(c, "template"));
    snprintf(path, sizeof path, "%s/chat_templates/%s", data_dir(), name);
    size_t len;
    char *source = read_text(path, &len);
    fdy_jinja *t = NULL;
    fdy_error err;
    fdy_status s = fdy_jinja_parse(source, len, &t, &err);
    if (s != FDY_OK) {
      print_error("%s: %s\n", name, err.message);
    }
    assert_int_equal(s, FDY_OK);

    json_t *msgs = json_object_get(c, "messages");
    size_t n = json_array_size(msgs);
    fdy_jinja_message *m = calloc(n ? n : 1, sizeof *m);
    assert_non_null(m);
    for (size_t k = 0; k < n; k++) {
      json_t *msg = json_array_get(msgs, k);
      m[k].role = json_string_value(json_object_get(msg, "role"));
      m[k].content = json_string_value(json_object_get(msg, "content"));
      m[k].content_len = json_string_length(json_object_get(msg, "content"));
    }
    char *vars = json_dumps(json_object_get(c, "variables"), 0);
    fdy_jinja_input in = {
        .messages = m,
        .message_count = n,
        .add_generation_prompt =
            json_is_true(json_object_get(c, "add_generation_prompt")),
        .bos_token = json_string_value(json_object_get(c, "bos_token")),
        .eos_token = json_string_value(json_object_get(c, "eos_token")),
        .variables = vars};
    fdy_jinja_output out = {0};
    s = fdy_jinja_render(t, &in, &out, &err);
    json_t *expected = json_object_get(c, "expected");
    const char *conv = json_string_value(json_object_get(c, "conversation"));
    if (expected) {
      if (s != FDY_OK) {
        print_error("%s %s: %s\n", name, conv, err.message);
      }
      assert_int_equal(s, FDY_OK);
      const char *want = json_string_value(expected);
      size_t want_len = json_string_length(expected);
      if (out.len != want_len || memcmp(out.text, want, want_len) != 0) {
        size_t at = 0;
        while (at < out.len && at < want_len && out.text[at] == want[at]) {
          at++;
        }
        print_error("%s %s (generation prompt %d): differs at byte %zu\n"
                    "want: %.80s\ngot:  %.80s\n",
                    name, conv, in.add_generation_prompt, at, want + at,
                    out.text + at);
        fail();
      }
      checked++;
    } else {
      const char *kind = json_string_value(json_object_get(c, "error"));
      assert_int_equal(s, FDY_ERR_INVALID_ARGUMENT);
      assert_null(out.text);
      if (strcmp(kind, "TemplateError") == 0) { /* raise_exception */
        assert_string_equal(err.name, "raise_exception");
        const char *msg = json_string_value(json_object_get(c, "message"));
        assert_non_null(strstr(err.message, msg));
      }
      refused++;
    }
    fdy_jinja_output_free(&out);
    free(vars);
    free(m);
    fdy_jinja_destroy(t);
    free(source);
  }
  json_decref(cases);
  assert_true(checked >= 150);
  assert_true(refused >= 10);
}

/* ---- where each byte comes from ----------------------------------------- */

static void test_origins(void **state) {
  (void)state;
  fdy_jinja *t = parse_ok(
      "{{ bos_token }}{% for m in messages %}[{{ m.role + ':' + m.content | "
      "trim + '<|x|>' }}]{% endfor %}{{ messages[0].content[1:] ~ 'L' }}");
  fdy_jinja_message m = {"user", " <|x|> ", 7};
  fdy_jinja_input in = {.messages = &m, .message_count = 1, .bos_token = "<s>"};
  fdy_jinja_output out = {0};
  fdy_error err;
  assert_int_equal(fdy_jinja_render(t, &in, &out, &err), FDY_OK);
  static const char want[] = "<s>[user:<|x|><|x|>]<|x|> L";
  static const char origin[] = "111100001000001111110000001";
  assert_int_equal(out.len, sizeof want - 1);
  assert_memory_equal(out.text, want, out.len);
  assert_int_equal(out.text[out.len], '\0');
  for (size_t k = 0; k < out.len; k++) {
    if (out.from_template[k] != origin[k] - '0') {
      print_error("byte %zu ('%c'): origin %d\n", k, out.text[k],
                  out.from_template[k]);
      fail();
    }
  }
  fdy_jinja_output_free(&out);
  fdy_jinja_output_free(&out); /* a second free of a zeroed output */
  /* an empty rendering is an empty string */
  in.message_count = 0;
  fdy_jinja_destroy(t);
  t = parse_ok("{% if messages %}x{% endif %}");
  assert_int_equal(fdy_jinja_render(t, &in, &out, &err), FDY_OK);
  assert_int_equal(out.len, 0);
  assert_string_equal(out.text, "");
  fdy_jinja_output_free(&out);
  fdy_jinja_destroy(t);
}

/* map('f') applies the filter without arguments: tojson's optional ones
 * are absent (this dereferenced NULL before) */
static void test_map_filter(void **state) {
  (void)state;
  fdy_jinja *t = parse_ok("{{ [{'a': 1}, 'x'] | map('tojson') | join(',') }}"
                          "|{{ ['a ', ' b'] | map('trim') | join }}");
  fdy_jinja_input in = {0};
  fdy_jinja_output out = {0};
  fdy_error err;
  assert_int_equal(fdy_jinja_render(t, &in, &out, &err), FDY_OK);
  assert_string_equal(out.text, "{\"a\": 1},\"x\"|ab");
  fdy_jinja_output_free(&out);
  fdy_jinja_destroy(t);
}

/* strftime_now formats the local time (Llama 3.2's date line) */
static void test_strftime_now(void **state) {
  (void)state;
  fdy_jinja_output out = {0};
  fdy_error err;
  time_t before = time(NULL);
  assert_int_equal(render_text("{% if strftime_now is defined %}"
                               "{{ strftime_now('%d %b %Y') }}{% endif %}",
                               NULL, &out, &err),
                   FDY_OK);
  time_t after = time(NULL);
  char a[32], b[32];
  struct tm tm;
  strftime(a, sizeof a, "%d %b %Y", localtime_r(&before, &tm));
  strftime(b, sizeof b, "%d %b %Y", localtime_r(&after, &tm));
  assert_true(strcmp(out.text, a) == 0 || strcmp(out.text, b) == 0);
  fdy_jinja_output_free(&out);
  /* a variable replaces what the template would compute */
  assert_int_equal(render_text("{{ date_string | default('none') }} "
                               "{{ enable_thinking }} {{ tools[0].name }}",
                               "{\"date_string\": \"26 Jul 2024\", "
                               "\"enable_thinking\": false, "
                               "\"tools\": [{\"name\": \"f\"}]}",
                               &out, &err),
                   FDY_OK);
  assert_string_equal(out.text, "26 Jul 2024 False f");
  fdy_jinja_output_free(&out);
}

/* ---- refused at parse ------------------------------------------------------
 */

typedef struct refusal {
  const char *source;
  fdy_status kind;
  const char *name; /* err->name for UNSUPPORTED */
  int line;
} refusal;

static void test_refused_templates(void **state) {
  (void)state;
  static const refusal cases[] = {
      /* outside the subset, named */
      {"{% macro m() %}x{% endmacro %}", FDY_ERR_UNSUPPORTED, "macro", 1},
      {"a\n{{ x | indent(2) }}", FDY_ERR_UNSUPPORTED, "filter indent", 2},
      {"{% if x is divisibleby 3 %}{% endif %}", FDY_ERR_UNSUPPORTED,
       "test divisibleby", 1},
      {"{{ 'a'.title() }}", FDY_ERR_UNSUPPORTED, "method title", 1},
      {"{% for i in range(3) %}{% endfor %}", FDY_ERR_UNSUPPORTED,
       "function range", 1},
      {"{{ loop.cycle('a', 'b') }}", FDY_ERR_UNSUPPORTED, "method cycle", 1},
      {"{{ (x)[0]() }}", FDY_ERR_UNSUPPORTED, "a call of an expression", 1},
      {"{% include 'x.jinja' %}", FDY_ERR_UNSUPPORTED, "include", 1},
      {"{% call foo() %}{% endcall %}", FDY_ERR_UNSUPPORTED, "call", 1},
      {"{% raw %}{{ x }}{% endraw %}", FDY_ERR_UNSUPPORTED, "raw", 1},
      {"{% generation %}x{% endgeneration %}", FDY_ERR_UNSUPPORTED,
       "generation", 1},
      {"{% for x in y recursive %}{% endfor %}", FDY_ERR_UNSUPPORTED,
       "recursive", 1},
      {"{% set x %}body{% endset %}", FDY_ERR_UNSUPPORTED, "set block", 1},
      {"{% set a, b = 1, 2 %}", FDY_ERR_UNSUPPORTED, "set of several names", 1},
      {"{{ f(*args) }}", FDY_ERR_UNSUPPORTED, "function f", 1},
      {"{{ '\\N{DASH}' }}", FDY_ERR_UNSUPPORTED, "escape \\N{...}", 1},
      /* malformed */
      {"{% if x %}never closed", FDY_ERR_PARSE, NULL, 1},
      {"\n{% for m in messages %}{% if m %}{% endfor %}", FDY_ERR_PARSE, NULL,
       2},
      {"{# never closed", FDY_ERR_PARSE, NULL, 1},
      {"{{ x ", FDY_ERR_PARSE, NULL, 1},
      {"{{ 'open }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ 1 + }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ a b }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ x[] }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ x. }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ $ }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ '\\x4' }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ '\\ud800' }}", FDY_ERR_PARSE, NULL, 1},
      {"{% endif %}", FDY_ERR_PARSE, NULL, 1},
      {"{% else %}", FDY_ERR_PARSE, NULL, 1},
      {"{% if x %}{% endfor %}", FDY_ERR_PARSE, NULL, 1},
      {"{% break %}", FDY_ERR_PARSE, NULL, 1},
      {"{% frobnicate %}", FDY_ERR_PARSE, NULL, 1},
      {"{% for in x %}{% endfor %}", FDY_ERR_PARSE, NULL, 1},
      {"{% for x y %}{% endfor %}", FDY_ERR_PARSE, NULL, 1},
      {"{% set = 1 %}", FDY_ERR_PARSE, NULL, 1},
      {"{% set x 1 %}", FDY_ERR_PARSE, NULL, 1},
      {"{% if %}{% endif %}", FDY_ERR_PARSE, NULL, 1},
      {"{% if x %}{% else %}{% else %}{% endif %}", FDY_ERR_PARSE, NULL, 1},
      {"{{ x | }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ x is }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ namespace(a=) }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ [1, 2 }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ {'a' 1} }}", FDY_ERR_PARSE, NULL, 1},
      {"{{ 99999999999999999999 }}", FDY_ERR_OVERFLOW, NULL, 1},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const refusal *c = &cases[k];
    fdy_jinja *t = (fdy_jinja *)&t;
    fdy_error err;
    fdy_status s = fdy_jinja_parse(c->source, strlen(c->source), &t, &err);
    if (s != c->kind) {
      print_error("%s: status %d (%s)\n", c->source, s,
                  s ? err.message : "parsed");
    }
    assert_int_equal(s, c->kind);
    assert_null(t);
    assert_int_equal(err.kind, c->kind);
    assert_non_null(strstr(err.message, "chat template line"));
    if (c->name) {
      assert_string_equal(err.name, c->name);
    }
    if (c->kind != FDY_ERR_OVERFLOW) {
      assert_int_equal(err.line, c->line);
      assert_true(err.column >= 1);
    }
  }
  /* nested deeper than 256 */
  char deep[2000];
  size_t n = 0;
  n += (size_t)snprintf(deep, sizeof deep, "{{ ");
  for (int k = 0; k < 300; k++) {
    deep[n++] = '(';
  }
  deep[n++] = '1';
  for (int k = 0; k < 300; k++) {
    deep[n++] = ')';
  }
  memcpy(deep + n, " }}", 4);
  fdy_jinja *t = NULL;
  fdy_error err;
  assert_int_equal(fdy_jinja_parse(deep, strlen(deep), &t, &err),
                   FDY_ERR_OVERFLOW);
  assert_null(t);
  /* bad arguments */
  assert_int_equal(fdy_jinja_parse(NULL, 3, &t, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_jinja_parse("x", 1, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_jinja_destroy(NULL);
}

/* ---- refused at render ----------------------------------------------------
 */

typedef struct render_refusal {
  const char *source;
  const char *variables;
  fdy_status kind;
  const char *name;
  int line;
} render_refusal;

static void test_refused_renders(void **state) {
  (void)state;
  static const render_refusal cases[] = {
      {"x\n{{ raise_exception('no ' ~ messages[0].role) }}", NULL,
       FDY_ERR_INVALID_ARGUMENT, "raise_exception", 2},
      {"{{ nothing.attr }}", NULL, FDY_ERR_INVALID_ARGUMENT, "an attribute", 1},
      {"{{ messages[5].role }}", NULL, FDY_ERR_INVALID_ARGUMENT, "an attribute",
       1},
      {"{{ 'a' + 1 }}", NULL, FDY_ERR_INVALID_ARGUMENT, "+", 1},
      {"{{ 1 < 'a' }}", NULL, FDY_ERR_INVALID_ARGUMENT, "a comparison", 1},
      {"{{ 1 // 0 }}", NULL, FDY_ERR_INVALID_ARGUMENT, "//", 1},
      {"{{ 1 in 3 }}", NULL, FDY_ERR_INVALID_ARGUMENT, "'in'", 1},
      {"{{ 'abc'[::0] }}", NULL, FDY_ERR_INVALID_ARGUMENT, "a slice", 1},
      {"{{ none | trim }}", NULL, FDY_ERR_INVALID_ARGUMENT, "trim", 1},
      {"{{ 3.startswith('a') }}", NULL, FDY_ERR_INVALID_ARGUMENT, "startswith",
       1},
      {"{% set x = 1 %}{% set x.a = 2 %}", NULL, FDY_ERR_INVALID_ARGUMENT,
       "set", 1},
      {"{% for a, b in [1] %}{% endfor %}", NULL, FDY_ERR_INVALID_ARGUMENT,
       "unpacking two loop variables", 1},
      {"{{ [1] | map('indent') | list }}", NULL, FDY_ERR_UNSUPPORTED, "map", 1},
      {"{{ [1] | select('divisibleby') | list }}", NULL, FDY_ERR_UNSUPPORTED,
       "test", 1},
      {"{{ {} | tojson(separators=1) }}", NULL, FDY_ERR_UNSUPPORTED, "tojson",
       1},
      {"{{ 9223372036854775807 + 1 }}", NULL, FDY_ERR_OVERFLOW, "+", 1},
      {"{{ 2 ** 64 }}", NULL, FDY_ERR_OVERFLOW, "**", 1},
      {"{{ -(-9223372036854775807 - 1) }}", NULL, FDY_ERR_OVERFLOW, "unary -",
       1},
      {"{{ 'ab' * 200000000 }}", NULL, FDY_ERR_BUDGET, "*", 1},
      {"{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}"
       "{% for i in 'abcdefghijklmnopqrstuvwxyz' %}"
       "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
       NULL, FDY_ERR_BUDGET, NULL, 1},
      {"{{ x }}", "[1, 2]", FDY_ERR_PARSE, "variables", 1},
      {"{{ x }}", "{\"x\": ", FDY_ERR_PARSE, "variables", 1},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const render_refusal *c = &cases[k];
    fdy_jinja_output out = {0};
    fdy_error err;
    fdy_status s = render_text(c->source, c->variables, &out, &err);
    if (s != c->kind) {
      print_error("%s: status %d (%s)\n", c->source, s,
                  s ? err.message : out.text);
    }
    assert_int_equal(s, c->kind);
    assert_null(out.text);
    assert_null(out.from_template);
    if (c->name) {
      assert_string_equal(err.name, c->name);
    }
    if (c->kind != FDY_ERR_PARSE) {
      assert_int_equal(err.line, c->line);
    }
  }
  /* raise_exception's message is quoted */
  fdy_jinja_output out = {0};
  fdy_error err;
  assert_int_equal(render_text("{{ raise_exception('roles must alternate') }}",
                               NULL, &out, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(err.message, "roles must alternate"));
  /* bad arguments */
  fdy_jinja *t = parse_ok("x");
  assert_int_equal(fdy_jinja_render(t, NULL, &out, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_jinja_input in = {.message_count = 1};
  assert_int_equal(fdy_jinja_render(t, &in, &out, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_jinja_render(t, &in, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_jinja_render(NULL, &in, &out, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_jinja_destroy(t);
}

/* fuzz/corpus/chat_template: each "valid-*" seed's template (up to a NUL)
 * parses and each "bad-*" one is refused, so that the seeds stay what
 * their names say. */
static void test_fuzz_seeds(void **state) {
  (void)state;
  const char *root = getenv("FOUNDRY_SOURCE_DIR");
  if (root == NULL) {
    skip();
  }
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/fuzz/corpus/chat_template", root);
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t counts[2] = {0, 0};
  for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
    if (e->d_name[0] == '.') {
      continue;
    }
    bool valid = strncmp(e->d_name, "valid-", 6) == 0;
    if (!valid && strncmp(e->d_name, "bad-", 4) != 0) {
      fail_msg("%s/%s is named neither valid-* nor bad-*", dir, e->d_name);
    }
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t len;
    char *source = read_text(path, &len);
    fdy_jinja *t = NULL;
    fdy_error err;
    fdy_status got = fdy_jinja_parse(source, strnlen(source, len), &t, &err);
    if ((got == FDY_OK) != valid) {
      fail_msg("%s: got %s: %s", e->d_name, fdy_status_name(got),
               got ? err.message : "parsed");
    }
    fdy_jinja_destroy(t);
    free(source);
    counts[valid]++;
  }
  closedir(d);
  assert_true(counts[0] >= 3 && counts[1] >= 10);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cases),
      cmocka_unit_test(test_origins),
      cmocka_unit_test(test_map_filter),
      cmocka_unit_test(test_strftime_now),
      cmocka_unit_test(test_refused_templates),
      cmocka_unit_test(test_refused_renders),
      cmocka_unit_test(test_fuzz_seeds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
