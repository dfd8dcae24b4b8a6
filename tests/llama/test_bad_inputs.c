/* Bad inputs for every reader: the corpus of tests/data/bad (MANIFEST names
 * the reader and the status of each file), the fuzzers' seed corpora of
 * fuzz/corpus (valid seeds accepted, bad ones refused), and FIFOs,
 * directories and devices given as a plan, config.json, index, shard,
 * reference or tokenizer file, which must fail at once (an alarm turns a
 * blocked open into a failure). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "foundry/cpu.h"
#include "foundry/llama.h"
#include "foundry/llama_session.h"
#include "foundry/plan.h"
#include "foundry/safetensors.h"
#include "foundry/tokenizer.h"

static const char *data_root;

static const char *const model_files[] = {"config.json", "model.safetensors",
                                          "model.safetensors.index.json"};

/* The shards copy_micro adds, as fuzz/fuzz_index.c makes them: layer 0 and
 * the embedding in the first, the rest in the second. */
static const char *const shard_files[] = {"model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors"};

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  assert_int_equal(fseek(f, 0, SEEK_SET), 0);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  buf[n] = '\0';
  *len = (size_t)n;
  return buf;
}

static void copy_file(const char *from, const char *to) {
  size_t len = 0;
  char *data = read_all(from, &len);
  FILE *f = fopen(to, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
  free(data);
}

/* Writes the tensors of dir/model.safetensors split into shard_files. */
static void write_shards(const char *dir) {
  char path[1024];
  fdy_safetensors *st = NULL;
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  assert_int_equal(fdy_safetensors_open(path, &st, NULL), FDY_OK);
  size_t n = fdy_safetensors_count(st), counts[2] = {0, 0};
  fdy_st_write_tensor *parts[2] = {calloc(n, sizeof(fdy_st_write_tensor)),
                                   calloc(n, sizeof(fdy_st_write_tensor))};
  assert_non_null(parts[0]);
  assert_non_null(parts[1]);
  for (size_t i = 0; i < n; i++) {
    const fdy_st_tensor *t = fdy_safetensors_at(st, i);
    int which = strstr(t->name, "layers.0.") == NULL &&
                strstr(t->name, "embed_tokens") == NULL;
    parts[which][counts[which]++] = (fdy_st_write_tensor){
        .name = t->name, .dtype = t->dtype, .shape = t->shape, .data = t->data};
  }
  for (int w = 0; w < 2; w++) {
    snprintf(path, sizeof path, "%s/%s", dir, shard_files[w]);
    assert_int_equal(fdy_safetensors_write(path, parts[w], counts[w], NULL),
                     FDY_OK);
    free(parts[w]);
  }
  fdy_safetensors_close(st);
}

/* A fresh directory holding a copy of the llama3-micro checkpoint and the
 * same tensors in two shards (shard_files), which its index does not
 * name. */
static void copy_micro(char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/fdy_bad_inputs_XXXXXX");
  assert_non_null(mkdtemp(dir));
  for (int i = 0; i < 3; i++) {
    char src[1024], dst[1024];
    snprintf(src, sizeof src, "%s/llama3-micro/model/%s", data_root,
             model_files[i]);
    snprintf(dst, sizeof dst, "%s/%s", dir, model_files[i]);
    copy_file(src, dst);
  }
  write_shards(dir);
}

static void remove_micro(const char *dir) {
  char path[1024];
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, model_files[i]);
    unlink(path);
    rmdir(path); /* a test may have put a directory there */
  }
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, shard_files[i]);
    assert_int_equal(unlink(path), 0);
  }
  assert_int_equal(rmdir(dir), 0);
}

/* fdy_status_name's inverse, for the manifest. */
static fdy_status status_named(const char *name) {
  for (int s = 0; s < FDY_STATUS_COUNT; s++) {
    if (strcmp(fdy_status_name((fdy_status)s), name) == 0) {
      return (fdy_status)s;
    }
  }
  fail_msg("unknown status '%s' in the manifest", name);
  return FDY_STATUS_COUNT;
}

static fdy_status read_with(const char *reader, const char *path,
                            fdy_error *err) {
  if (strcmp(reader, "plan") == 0) {
    fdy_plan *plan = NULL;
    fdy_status s = fdy_plan_load(path, &plan, err);
    fdy_plan_destroy(plan);
    return s;
  }
  if (strcmp(reader, "config") == 0) {
    size_t len = 0;
    char *text = read_all(path, &len);
    fdy_llama_config config;
    fdy_status s = fdy_llama_config_parse(text, len, path, &config, err);
    free(text);
    return s;
  }
  if (strcmp(reader, "index") == 0) {
    char dir[256], dst[1024];
    copy_micro(dir, sizeof dir);
    snprintf(dst, sizeof dst, "%s/model.safetensors.index.json", dir);
    copy_file(path, dst);
    fdy_llama_model *m = NULL;
    fdy_status s = fdy_llama_open(dir, &m, err);
    fdy_llama_close(m);
    remove_micro(dir);
    return s;
  }
  if (strcmp(reader, "safetensors") == 0) {
    fdy_safetensors *st = NULL;
    fdy_status s = fdy_safetensors_open(path, &st, err);
    fdy_safetensors_close(st);
    return s;
  }
  if (strcmp(reader, "reference") == 0) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/llama3-micro/model", data_root);
    fdy_llama_model *m = NULL;
    fdy_llama_session *session = NULL;
    fdy_backend *cpu = NULL;
    assert_int_equal(fdy_cpu_backend_create(NULL, &cpu, err), FDY_OK);
    fdy_llama_session_options options = {
        .backend = cpu, .context = 16, .all_logits = true};
    assert_int_equal(fdy_llama_open(dir, &m, err), FDY_OK);
    assert_int_equal(fdy_llama_session_create(m, &options, &session, err),
                     FDY_OK);
    fdy_llama_verify_result result;
    fdy_status s = fdy_llama_verify(session, path, 1e-4, &result, err);
    fdy_llama_session_destroy(session);
    fdy_backend_destroy(cpu);
    fdy_llama_close(m);
    return s;
  }
  if (strcmp(reader, "tokenizer") == 0 || strcmp(reader, "tok_config") == 0) {
    char json[1024];
    snprintf(json, sizeof json, "%s/tokenizer/tiny/tokenizer.json", data_root);
    bool config = strcmp(reader, "tok_config") == 0;
    fdy_tokenizer *tok = NULL;
    fdy_status s = fdy_tokenizer_load_hf(config ? json : path,
                                         config ? path : NULL, &tok, err);
    fdy_tokenizer_destroy(tok);
    return s;
  }
  fail_msg("unknown reader '%s' in the manifest", reader);
  return FDY_STATUS_COUNT;
}

static void test_corpus(void **state) {
  (void)state;
  char manifest[1024];
  snprintf(manifest, sizeof manifest, "%s/bad/MANIFEST", data_root);
  FILE *f = fopen(manifest, "r");
  assert_non_null(f);
  char line[512];
  int cases = 0;
  while (fgets(line, sizeof line, f)) {
    char reader[32], file[256], status[64];
    if (line[0] == '#' || line[0] == '\n') {
      continue;
    }
    assert_int_equal(sscanf(line, "%31s %255s %63s", reader, file, status), 3);
    char path[1024];
    snprintf(path, sizeof path, "%s/bad/%s", data_root, file);
    fdy_error err;
    fdy_error_clear(&err);
    fdy_status want = status_named(status);
    fdy_status got = read_with(reader, path, &err);
    if (got != want) {
      fail_msg("%s %s: got %s, expected %s: %s", reader, file,
               fdy_status_name(got), status, err.message);
    }
    if (want != FDY_OK) {
      assert_int_equal(err.kind, want);
      assert_true(err.message[0] != '\0');
    }
    if (want == FDY_ERR_PARSE) {
      assert_true(err.line >= 1);
      assert_true(err.column >= 1);
    }
    cases++;
  }
  fclose(f);
  assert_true(cases > 0);
}

/* fuzz/corpus/TARGET of the readers fuzzed from here: each "valid-*" seed
 * is accepted and each "bad-*" seed refused with an error, so that the
 * seeds stay what their names say. */
static void test_fuzz_seeds(void **state) {
  (void)state;
  const char *root = getenv("FOUNDRY_SOURCE_DIR");
  if (root == NULL) {
    skip();
  }
  static const char *const readers[] = {"safetensors", "config", "index",
                                        "reference"};
  for (size_t r = 0; r < sizeof readers / sizeof readers[0]; r++) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/fuzz/corpus/%s", root, readers[r]);
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
      fdy_error err;
      fdy_error_clear(&err);
      fdy_status got = read_with(readers[r], path, &err);
      if ((got == FDY_OK) != valid) {
        fail_msg("%s %s: got %s: %s", readers[r], e->d_name,
                 fdy_status_name(got), err.message);
      }
      if (!valid) {
        assert_int_equal(err.kind, got);
        assert_true(err.message[0] != '\0');
      }
      counts[valid]++;
    }
    closedir(d);
    assert_true(counts[0] >= 5 && counts[1] >= 2);
  }
}

/* Replaces dir/file by a FIFO (mode "fifo") or a directory ("dir"). */
static void make_special(const char *dir, const char *file, const char *mode,
                         char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", dir, file);
  unlink(path);
  if (strcmp(mode, "fifo") == 0) {
    assert_int_equal(mkfifo(path, 0600), 0);
  } else {
    assert_int_equal(mkdir(path, 0700), 0);
  }
}

static void expect_io_named(fdy_status s, const fdy_error *err,
                            const char *path) {
  if (s != FDY_ERR_IO) {
    fail_msg("got %s: %s", fdy_status_name(s), err->message);
  }
  assert_int_equal(err->kind, FDY_ERR_IO);
  assert_string_equal(err->name, path);
}

/* config.json, the index and the shard of a checkpoint as a FIFO or a
 * directory: FDY_ERR_IO naming that file, without blocking. */
static void test_special_checkpoint_files(void **state) {
  (void)state;
  static const char *const modes[] = {"fifo", "dir"};
  for (int m = 0; m < 2; m++) {
    for (int i = 0; i < 3; i++) {
      char dir[256], path[1024];
      copy_micro(dir, sizeof dir);
      make_special(dir, model_files[i], modes[m], path, sizeof path);
      alarm(20);
      fdy_error err;
      fdy_llama_model *model = NULL;
      fdy_status s = fdy_llama_open(dir, &model, &err);
      alarm(0);
      assert_null(model);
      expect_io_named(s, &err, path);
      remove_micro(dir);
    }
  }
}

/* A plan file and a reference as a FIFO, and /dev/null (a device). */
static void test_special_plan_and_reference(void **state) {
  (void)state;
  char dir[] = "/tmp/fdy_bad_fifo_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/input", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  fdy_error err;
  alarm(20);
  fdy_plan *plan = NULL;
  expect_io_named(fdy_plan_load(path, &plan, &err), &err, path);
  assert_null(plan);
  expect_io_named(fdy_plan_load("/dev/null", &plan, &err), &err, "/dev/null");
  fdy_safetensors *st = NULL;
  expect_io_named(fdy_safetensors_open(path, &st, &err), &err, path);
  assert_null(st);

  char model_dir[1024];
  snprintf(model_dir, sizeof model_dir, "%s/llama3-micro/model", data_root);
  fdy_llama_model *model = NULL;
  fdy_llama_session *session = NULL;
  fdy_backend *cpu = NULL;
  assert_int_equal(fdy_cpu_backend_create(NULL, &cpu, &err), FDY_OK);
  fdy_llama_session_options options = {
      .backend = cpu, .context = 16, .all_logits = true};
  assert_int_equal(fdy_llama_open(model_dir, &model, &err), FDY_OK);
  assert_int_equal(fdy_llama_session_create(model, &options, &session, &err),
                   FDY_OK);
  fdy_llama_verify_result result;
  expect_io_named(fdy_llama_verify(session, path, 1e-4, &result, &err), &err,
                  path);
  alarm(0);
  fdy_llama_session_destroy(session);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
  unlink(path);
  assert_int_equal(rmdir(dir), 0);
}

/* Tokenizer files as a FIFO, given directly or found in a model directory:
 * FDY_ERR_IO naming the FIFO, without blocking. */
static void test_special_tokenizer_files(void **state) {
  (void)state;
  char dir[] = "/tmp/fdy_bad_tokenizer_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char fifo[256], json[1024];
  snprintf(fifo, sizeof fifo, "%s/tokenizer.json", dir);
  snprintf(json, sizeof json, "%s/tokenizer/tiny/tokenizer.json", data_root);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  fdy_error err;
  fdy_tokenizer *tok = NULL;
  alarm(20);
  expect_io_named(fdy_tokenizer_load_tiktoken(fifo, &tok, &err), &err, fifo);
  expect_io_named(fdy_tokenizer_load_hf(fifo, NULL, &tok, &err), &err, fifo);
  expect_io_named(fdy_tokenizer_load_hf(json, fifo, &tok, &err), &err, fifo);
  expect_io_named(fdy_tokenizer_open(fifo, &tok, &err), &err, fifo);
  expect_io_named(fdy_tokenizer_open(dir, &tok, &err), &err, fifo);
  alarm(0);
  assert_null(tok);
  unlink(fifo);
  assert_int_equal(rmdir(dir), 0);
}

int main(void) {
  data_root = getenv("FOUNDRY_TEST_DATA");
  if (!data_root) {
    data_root = "tests/data";
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_corpus),
      cmocka_unit_test(test_fuzz_seeds),
      cmocka_unit_test(test_special_checkpoint_files),
      cmocka_unit_test(test_special_plan_and_reference),
      cmocka_unit_test(test_special_tokenizer_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
