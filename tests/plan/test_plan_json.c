/* Plan JSON and file tests: exact round trips, strict decoding of malformed
 * documents (each with its kind and position or JSON path), plans for another
 * graph, and saving without overwriting or leaving partial files. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "plan_helpers.h"

static fdy_plan *triple_plan(uint32_t layers) {
  fdy_graph *g = NULL;
  fdy_plan *plan = NULL;
  assert_int_equal(fdy_synthetic_graph_create(layers, 4096, NULL, &g, NULL),
                   FDY_OK);
  assert_int_equal(fdy_plan_streaming(g, FDY_MIB, 3, 256, &plan, NULL), FDY_OK);
  fdy_graph_destroy(g);
  return plan;
}

static char *encode(const fdy_plan *plan) {
  char *text = NULL;
  fdy_error err;
  assert_int_equal(fdy_plan_to_json(plan, &text, &err), FDY_OK);
  assert_non_null(text);
  return text;
}

static void assert_same_plan(const fdy_plan *a, const fdy_plan *b) {
  assert_int_equal(fdy_plan_budget(a), fdy_plan_budget(b));
  assert_int_equal(fdy_plan_stream_count(a), fdy_plan_stream_count(b));
  assert_int_equal(fdy_plan_slot_count(a), fdy_plan_slot_count(b));
  assert_int_equal(fdy_plan_event_count(a), fdy_plan_event_count(b));
  assert_int_equal(fdy_plan_command_count(a), fdy_plan_command_count(b));
  for (size_t i = 0; i < fdy_plan_command_count(a); i++) {
    assert_true(
        fdy_command_equal(fdy_plan_command(a, i), fdy_plan_command(b, i)));
  }
  assert_true(fdy_graph_same_structure(fdy_plan_graph(a), fdy_plan_graph(b)));
  assert_int_equal(fdy_plan_check_graph(a, fdy_plan_graph(b), NULL), FDY_OK);
}

static void round_trip(const fdy_plan *plan) {
  char *text = encode(plan);
  fdy_plan *decoded = NULL;
  fdy_error err;
  if (fdy_plan_from_json(text, strlen(text), &decoded, &err) != FDY_OK) {
    fail_msg("decode failed: %s", err.message);
  }
  assert_same_plan(plan, decoded);
  char *again = encode(decoded);
  assert_string_equal(text, again);
  free(again);
  free(text);
  fdy_plan_destroy(decoded);
}

static void test_round_trip_planner(void **state) {
  (void)state;
  for (uint32_t layers = 0; layers <= 6; layers += 3) {
    fdy_plan *plan = triple_plan(layers);
    round_trip(plan);
    fdy_plan_destroy(plan);
  }
}

/* Every command kind and field, including stream waits, host waits and a
 * launch with two bindings, plus tensors of every role and large integers. */
static void test_round_trip_every_field(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_tensor_id a, b, x, y;
  fdy_op_id op;
  assert_int_equal(fdy_graph_create("every \"field\"", &g, NULL), FDY_OK);
  assert_int_equal(fdy_graph_add_weight(g, "a", FDY_DTYPE_BF16,
                                        FDY_SHAPE(3, 5, 7), NULL, 0, &a, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight(g, "b", FDY_DTYPE_U8,
                                        FDY_SHAPE(1ull << 40), NULL, 0, &b,
                                        NULL),
                   FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(g, "x", FDY_DTYPE_F32, FDY_SHAPE(2, 2), &x, NULL),
      FDY_OK);
  assert_int_equal(
      fdy_graph_add_activation(g, "y", FDY_DTYPE_I64, FDY_SHAPE(1), &y, NULL),
      FDY_OK);
  fdy_tensor_id reads[3] = {x, a, b};
  fdy_op_desc desc = {.name = "op",
                      .kind = "test.kind",
                      .param = 1ull << 62,
                      .reads = reads,
                      .read_count = 3,
                      .writes = &y,
                      .write_count = 1};
  assert_int_equal(fdy_graph_add_op(g, &desc, &op, NULL), FDY_OK);
  fdy_plan *plan = NULL;
  uint64_t big = 1ull << 41;
  assert_int_equal(fdy_plan_create(g, big, 3, 4, 9, &plan, NULL), FDY_OK);
  fdy_command cmds[] = {
      c_alloc(0, 256),
      c_alloc(3, 1ull << 40),
      c_prefetch(a.v, 0, 2, 0),
      c_prefetch(b.v, 3, 0, 1),
      c_wait_stream(0, 1),
      c_wait_stream(1, 1),
      c_launch(op.v, 1, 2, 2, b.v, 3, a.v, 0),
      c_wait_host(2),
      c_release(3),
      c_release(0),
  };
  for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
    assert_int_equal(fdy_plan_append(plan, &cmds[i], NULL), FDY_OK);
  }
  fdy_error err;
  assert_int_equal(fdy_plan_validate(plan, NULL, &err), FDY_OK);
  round_trip(plan);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

static void test_encode_rejects_unrepresentable(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_plan *plan = NULL;
  char *text = NULL;
  fdy_error err;
  assert_int_equal(fdy_synthetic_graph_create(1, 8, NULL, &g, NULL), FDY_OK);
  assert_int_equal(fdy_plan_create(g, UINT64_MAX, 1, 1, 1, &plan, NULL),
                   FDY_OK);
  assert_int_equal(fdy_plan_to_json(plan, &text, &err), FDY_ERR_UNSUPPORTED);
  assert_null(text);
  assert_string_equal(err.name, "budget_bytes");
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

/* ---- malformed documents ----------------------------------------------------
 */

static void expect_decode(const char *text, size_t length, fdy_status kind,
                          const char *name, int64_t command_index) {
  fdy_plan *plan = (fdy_plan *)&plan;
  fdy_error err;
  assert_int_equal(fdy_plan_from_json(text, length, &plan, &err), kind);
  assert_null(plan);
  assert_int_equal(err.kind, kind);
  assert_true(strlen(err.message) > 0);
  if (kind == FDY_ERR_PARSE) {
    assert_true(err.line >= 1);
    assert_true(err.column >= 0);
  }
  if (name != NULL) {
    assert_string_equal(err.name, name);
  }
  assert_int_equal(err.command_index, command_index);
}

static void expect_decode_str(const char *text, fdy_status kind,
                              const char *name, int64_t command_index) {
  expect_decode(text, strlen(text), kind, name, command_index);
}

/* Decodes the encoding of a small valid plan, lets `edit` change it, and
 * expects the decoder to reject the result. */
static void expect_edited(void (*edit)(json_t *root), fdy_status kind,
                          const char *name, int64_t command_index) {
  fdy_plan *plan = triple_plan(2);
  char *text = encode(plan);
  json_t *root = json_loads(text, 0, NULL);
  assert_non_null(root);
  edit(root);
  char *edited = json_dumps(root, JSON_INDENT(2));
  assert_non_null(edited);
  expect_decode_str(edited, kind, name, command_index);
  free(edited);
  json_decref(root);
  free(text);
  fdy_plan_destroy(plan);
}

static json_t *command(json_t *root, size_t i) {
  json_t *c = json_array_get(json_object_get(root, "commands"), i);
  assert_non_null(c);
  return c;
}

static void edit_unknown_top(json_t *root) {
  json_object_set_new(root, "extra", json_integer(1));
}
static void edit_unknown_command_field(json_t *root) {
  json_object_set_new(command(root, 2), "bogus", json_true());
}
static void edit_unknown_tensor_field(json_t *root) {
  json_t *t = json_array_get(
      json_object_get(json_object_get(root, "graph"), "tensors"), 1);
  json_object_set_new(t, "extents", json_array());
}
static void edit_wrong_type(json_t *root) {
  json_object_set_new(command(root, 0), "slot", json_string("0"));
}
static void edit_real_for_int(json_t *root) {
  json_object_set_new(command(root, 0), "bytes", json_real(256.0));
}
static void edit_negative(json_t *root) {
  json_object_set_new(command(root, 1), "slot", json_integer(-1));
}
static void edit_too_large(json_t *root) {
  json_object_set_new(command(root, 3), "signal",
                      json_integer((json_int_t)1 << 32));
}
static void edit_too_many_streams(json_t *root) {
  json_object_set_new(root, "streams", json_integer(FDY_PLAN_MAX_STREAMS + 1));
}
static void edit_zero_streams(json_t *root) {
  json_object_set_new(root, "streams", json_integer(0));
}
static void edit_unknown_kind(json_t *root) {
  json_object_set_new(command(root, 4), "kind", json_string("teleport"));
}
static void edit_missing_field(json_t *root) {
  json_object_del(command(root, 0), "bytes");
}
static void edit_wrong_version(json_t *root) {
  json_object_set_new(root, "version", json_integer(2));
}
static void edit_wrong_format(json_t *root) {
  json_object_set_new(root, "format", json_string("other.plan"));
}
static void edit_commands_not_array(json_t *root) {
  json_object_set_new(root, "commands", json_object());
}
static void edit_command_not_object(json_t *root) {
  json_array_set_new(json_object_get(root, "commands"), 1, json_integer(3));
}
static void edit_wait_both(json_t *root) {
  /* The first wait in a triple-buffer plan of 2 layers is command 4. */
  json_t *c = command(root, 4);
  assert_string_equal(json_string_value(json_object_get(c, "kind")), "wait");
  json_object_set_new(c, "host", json_true());
}
static void edit_wait_host_false(json_t *root) {
  json_t *c = command(root, 4);
  json_object_del(c, "stream");
  json_object_set_new(c, "host", json_false());
}
static void edit_binding_field(json_t *root) {
  json_t *c = command(root, 5);
  assert_string_equal(json_string_value(json_object_get(c, "kind")), "launch");
  json_t *b = json_array_get(json_object_get(c, "bindings"), 0);
  json_object_set_new(b, "offset", json_integer(0));
}
static void edit_tensor_shape(json_t *root) {
  /* A different graph under the same fingerprint. */
  json_t *t = json_array_get(
      json_object_get(json_object_get(root, "graph"), "tensors"), 0);
  json_object_set_new(t, "shape", json_pack("[i]", 8192));
}
static void edit_fingerprint_syntax(json_t *root) {
  json_object_set_new(json_object_get(root, "graph"), "fingerprint",
                      json_string("xyz"));
}
static void edit_unknown_dtype(json_t *root) {
  json_t *t = json_array_get(
      json_object_get(json_object_get(root, "graph"), "tensors"), 0);
  json_object_set_new(t, "dtype", json_string("F12"));
}
static void edit_unknown_role(json_t *root) {
  json_t *t = json_array_get(
      json_object_get(json_object_get(root, "graph"), "tensors"), 0);
  json_object_set_new(t, "role", json_string("ghost"));
}
static void edit_op_reads_unknown_tensor(json_t *root) {
  json_t *o =
      json_array_get(json_object_get(json_object_get(root, "graph"), "ops"), 0);
  json_object_set_new(o, "reads", json_pack("[i]", 77));
}

static void test_decode_schema_errors(void **state) {
  (void)state;
  expect_edited(edit_unknown_top, FDY_ERR_SCHEMA, "extra", -1);
  expect_edited(edit_unknown_command_field, FDY_ERR_SCHEMA, "commands[2].bogus",
                2);
  expect_edited(edit_unknown_tensor_field, FDY_ERR_SCHEMA,
                "graph.tensors[1].extents", -1);
  expect_edited(edit_wrong_type, FDY_ERR_SCHEMA, "commands[0].slot", 0);
  expect_edited(edit_real_for_int, FDY_ERR_SCHEMA, "commands[0].bytes", 0);
  expect_edited(edit_negative, FDY_ERR_SCHEMA, "commands[1].slot", 1);
  expect_edited(edit_too_large, FDY_ERR_SCHEMA, "commands[3].signal", 3);
  expect_edited(edit_too_many_streams, FDY_ERR_SCHEMA, "streams", -1);
  expect_edited(edit_zero_streams, FDY_ERR_SCHEMA, "streams", -1);
  expect_edited(edit_unknown_kind, FDY_ERR_SCHEMA, "commands[4].kind", 4);
  expect_edited(edit_missing_field, FDY_ERR_SCHEMA, "commands[0].bytes", 0);
  expect_edited(edit_wrong_version, FDY_ERR_SCHEMA, "version", -1);
  expect_edited(edit_wrong_format, FDY_ERR_SCHEMA, "format", -1);
  expect_edited(edit_commands_not_array, FDY_ERR_SCHEMA, "commands", -1);
  expect_edited(edit_command_not_object, FDY_ERR_SCHEMA, "commands[1]", 1);
  expect_edited(edit_wait_both, FDY_ERR_SCHEMA, "commands[4]", 4);
  expect_edited(edit_wait_host_false, FDY_ERR_SCHEMA, "commands[4].host", 4);
  expect_edited(edit_binding_field, FDY_ERR_SCHEMA,
                "commands[5].bindings[0].offset", 5);
  expect_edited(edit_tensor_shape, FDY_ERR_SCHEMA, "graph.fingerprint", -1);
  expect_edited(edit_fingerprint_syntax, FDY_ERR_SCHEMA, "graph.fingerprint",
                -1);
  expect_edited(edit_unknown_dtype, FDY_ERR_SCHEMA, "graph.tensors[0].dtype",
                -1);
  expect_edited(edit_unknown_role, FDY_ERR_SCHEMA, "graph.tensors[0].role", -1);
}

static void test_decode_graph_errors_keep_kind(void **state) {
  (void)state;
  fdy_plan *plan = triple_plan(2);
  char *text = encode(plan);
  json_t *root = json_loads(text, 0, NULL);
  edit_op_reads_unknown_tensor(root);
  char *edited = json_dumps(root, 0);
  expect_decode_str(edited, FDY_ERR_GRAPH_UNKNOWN_TENSOR, "graph.ops[0]", -1);
  free(edited);
  json_decref(root);
  free(text);
  fdy_plan_destroy(plan);
}

static void test_decode_parse_errors(void **state) {
  (void)state;
  fdy_plan *plan = triple_plan(2);
  char *text = encode(plan);
  size_t len = strlen(text);
  /* Truncated at many points: always a clean parse error. */
  for (size_t cut = 0; cut < len; cut += len / 37 + 1) {
    expect_decode(text, cut, FDY_ERR_PARSE, NULL, -1);
  }
  expect_decode(text, len - 1, FDY_ERR_PARSE, NULL, -1);
  free(text);
  fdy_plan_destroy(plan);

  fdy_error err;
  fdy_plan *out = NULL;
  const char *dup = "{\"format\": \"foundry.plan\",\n \"format\": \"x\"}";
  assert_int_equal(fdy_plan_from_json(dup, strlen(dup), &out, &err),
                   FDY_ERR_PARSE);
  assert_int_equal(err.line, 2);
  assert_true(err.column > 0);
  expect_decode_str("{\"format\": \"foundry.plan\"} trailing", FDY_ERR_PARSE,
                    NULL, -1);
  expect_decode_str("{\"commands\": [{\"bytes\": 99999999999999999999}]}",
                    FDY_ERR_PARSE, NULL, -1);
  expect_decode_str("{\"name\": \"a\\u0000b\"}", FDY_ERR_PARSE, NULL, -1);
  expect_decode_str("", FDY_ERR_PARSE, NULL, -1);
  expect_decode_str("42", FDY_ERR_PARSE, NULL, -1);
  /* Well-formed but not an object. */
  expect_decode_str("[1, 2]", FDY_ERR_SCHEMA, "$", -1);
  expect_decode_str("{}", FDY_ERR_SCHEMA, "format", -1);
  assert_int_equal(fdy_plan_from_json(NULL, 0, &out, &err), FDY_ERR_PARSE);
  assert_int_equal(fdy_plan_from_json(NULL, 3, &out, &err),
                   FDY_ERR_INVALID_ARGUMENT);
}

/* A decoded plan refers to its own graph: run against another, it is
 * rejected; decoded commands still validate. */
static void test_decoded_plan_against_other_graph(void **state) {
  (void)state;
  fdy_plan *plan = triple_plan(3);
  char *text = encode(plan);
  fdy_plan *decoded = NULL;
  fdy_graph *other = NULL;
  fdy_error err;
  assert_int_equal(fdy_plan_from_json(text, strlen(text), &decoded, &err),
                   FDY_OK);
  assert_int_equal(fdy_plan_validate(decoded, NULL, &err), FDY_OK);
  assert_int_equal(fdy_synthetic_graph_create(3, 4097, NULL, &other, NULL),
                   FDY_OK);
  assert_int_equal(fdy_plan_check_graph(decoded, other, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, fdy_graph_fingerprint(fdy_plan_graph(plan)));
  fdy_graph_destroy(other);
  fdy_plan_destroy(decoded);
  free(text);
  fdy_plan_destroy(plan);
}

/* ---- files
 * -------------------------------------------------------------------- */

static char *temp_dir(void) {
  char tmpl[] = "/tmp/foundry-plan-test-XXXXXX";
  char *dir = mkdtemp(tmpl);
  assert_non_null(dir);
  return strdup(dir);
}

static size_t dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      n++;
    }
  }
  closedir(d);
  return n;
}

static void test_save_load(void **state) {
  (void)state;
  char *dir = temp_dir();
  char path[512], missing[512];
  snprintf(path, sizeof(path), "%s/plan.json", dir);
  snprintf(missing, sizeof(missing), "%s/none.json", dir);
  fdy_plan *plan = triple_plan(4);
  fdy_plan *loaded = NULL;
  fdy_error err;
  assert_int_equal(fdy_plan_save(plan, path, &err), FDY_OK);
  assert_int_equal(dir_entries(dir), 1);
  assert_int_equal(fdy_plan_load(path, &loaded, &err), FDY_OK);
  assert_same_plan(plan, loaded);
  assert_int_equal(fdy_plan_validate(loaded, NULL, &err), FDY_OK);
  fdy_plan_destroy(loaded);

  /* Never overwrites, leaves no temporary behind. */
  assert_int_equal(fdy_plan_save(plan, path, &err), FDY_ERR_EXISTS);
  assert_string_equal(err.name, path);
  assert_int_equal(dir_entries(dir), 1);

  assert_int_equal(fdy_plan_load(missing, &loaded, &err), FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, missing);
  assert_null(loaded);

  /* A truncated file is a parse error with a position. */
  FILE *src = fopen(path, "rb");
  assert_non_null(src);
  char buf[300];
  size_t n = fread(buf, 1, sizeof(buf), src);
  fclose(src);
  FILE *dst = fopen(missing, "wb");
  assert_non_null(dst);
  assert_int_equal(fwrite(buf, 1, n, dst), n);
  fclose(dst);
  assert_int_equal(fdy_plan_load(missing, &loaded, &err), FDY_ERR_PARSE);
  assert_true(err.line > 0);
  assert_null(loaded);

  /* Saving into a missing directory fails cleanly. */
  char bad[600];
  snprintf(bad, sizeof(bad), "%s/no/such/plan.json", dir);
  assert_int_equal(fdy_plan_save(plan, bad, &err), FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, bad);
  assert_int_equal(fdy_plan_load(dir, &loaded, &err), FDY_ERR_IO);

  unlink(path);
  unlink(missing);
  assert_int_equal(rmdir(dir), 0);
  free(dir);
  fdy_plan_destroy(plan);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_planner),
      cmocka_unit_test(test_round_trip_every_field),
      cmocka_unit_test(test_encode_rejects_unrepresentable),
      cmocka_unit_test(test_decode_schema_errors),
      cmocka_unit_test(test_decode_graph_errors_keep_kind),
      cmocka_unit_test(test_decode_parse_errors),
      cmocka_unit_test(test_decoded_plan_against_other_graph),
      cmocka_unit_test(test_save_load),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
