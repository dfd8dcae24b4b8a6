/* The helpers every llama_infer test shares: a fixture of tests/data (or
 * of FOUNDRY_TEST_DATA) opened, a CPU backend, a session created, each
 * failing the test with the error's message. Include after cmocka.h. */
#ifndef FOUNDRY_TESTS_LLAMA_FIXTURES_H
#define FOUNDRY_TESTS_LLAMA_FIXTURES_H

#include <stdio.h>
#include <stdlib.h>

#include "foundry/cpu.h"
#include "foundry/llama_session.h"

/* The model of fixture `fixture` (tests/data/<fixture>/model). */
static inline fdy_llama_model *open_fixture(const char *fixture) {
  const char *data = getenv("FOUNDRY_TEST_DATA");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/%s/model", data ? data : "tests/data", fixture);
  fdy_llama_model *model = NULL;
  fdy_error err;
  fdy_status st = fdy_llama_open(dir, &model, &err);
  if (st != FDY_OK) {
    print_error("open %s: %s\n", dir, err.message);
  }
  assert_int_equal(st, FDY_OK);
  return model;
}

/* A CPU backend of `threads` threads (0: every online CPU). */
static inline fdy_backend *cpu_backend(uint32_t threads) {
  fdy_cpu_options options = {.threads = threads};
  fdy_backend *backend = NULL;
  fdy_error err;
  assert_int_equal(fdy_cpu_backend_create(&options, &backend, &err), FDY_OK);
  if (threads) {
    assert_int_equal(fdy_cpu_backend_threads(backend), threads);
  }
  return backend;
}

static inline fdy_llama_session *
make_session(const fdy_llama_model *model, const fdy_llama_session_options *o) {
  fdy_llama_session *session = NULL;
  fdy_error err;
  fdy_status st = fdy_llama_session_create(model, o, &session, &err);
  if (st != FDY_OK) {
    print_error("session: %s\n", err.message);
  }
  assert_int_equal(st, FDY_OK);
  return session;
}

#endif
