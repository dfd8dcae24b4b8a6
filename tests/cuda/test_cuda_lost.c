/* Device loss on the CUDA backend (label gpu): a launch that faults on the
 * device, the way a kernel bug would, leaves the CUDA context unusable (a
 * sticky error). Its output buffer is misdirected to an address no memory
 * backs (the test hook of cuda_internal.h), so the ADD kernel's stores
 * raise an illegal address. Checked: the error names the faulting launch
 * (backend_op "launch", name "add", ids = its submission number), not the
 * copies and launches submitted after it on its stream or on another one,
 * whether it surfaces at a host wait or at a drain; every later entry
 * fails at once with FDY_ERR_BACKEND naming it again; releases and destroy
 * return (ctest's timeout catches a hang). A sticky error spoils the whole
 * process's context, so each scenario runs in a process of its own: the
 * argument picks it ("host_wait" or "drain"). Exits 77 (skipped) without a
 * CUDA device unless FOUNDRY_REQUIRE_CUDA=1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "cuda_internal.h"
#include "foundry/cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 4
#define COLS 64
/* Below the lowest address a Linux process can map (vm.mmap_min_addr), and
 * outside every device allocation: nothing backs it. */
#define NOWHERE 4096u

/* The backend, its streams, events and buffers, and the submission number
 * of the faulting launch (copies and launches count from 1). */
typedef struct scene {
  fdy_backend *b;
  fdy_backend_stream *s1, *s2;
  fdy_backend_event *e1, *e2, *e3;
  fdy_backend_buffer *step, *ab, *out, *bad;
  float *host; /* ROWS x COLS */
  int64_t faulting;
} scene;

static fdy_op add_op(const scene *sc, fdy_backend_buffer *out) {
  fdy_op op = {.kind = FDY_OP_ADD, .input_count = 3, .output_count = 1};
  op.inputs[0] = (fdy_tensor_view){
      .buffer = sc->step, .dtype = FDY_DTYPE_I32, .shape = FDY_SHAPE(3)};
  op.inputs[1] = (fdy_tensor_view){
      .buffer = sc->ab, .dtype = FDY_DTYPE_F32, .shape = FDY_SHAPE(ROWS, COLS)};
  op.inputs[2] = op.inputs[1];
  op.outputs[0] = op.inputs[1];
  op.outputs[0].buffer = out;
  return op;
}

/* Submissions 1-3 (two copies and a good launch), waited for; then the
 * faulting launch, submission 4, on s1. */
static void setup_and_fault(scene *sc) {
  fdy_error err;
  memset(sc, 0, sizeof *sc);
  assert_int_equal(fdy_cuda_backend_create(NULL, &sc->b, &err), FDY_OK);
  const fdy_backend_ops *o = sc->b->ops;
  fdy_backend *b = sc->b;
  assert_int_equal(o->stream_create(b, &sc->s1, &err), FDY_OK);
  assert_int_equal(o->stream_create(b, &sc->s2, &err), FDY_OK);
  assert_int_equal(o->event_create(b, &sc->e1, &err), FDY_OK);
  assert_int_equal(o->event_create(b, &sc->e2, &err), FDY_OK);
  assert_int_equal(o->event_create(b, &sc->e3, &err), FDY_OK);
  const uint64_t bytes = ROWS * COLS * sizeof(float);
  assert_int_equal(o->buffer_alloc(b, 256, &sc->step, &err), FDY_OK);
  assert_int_equal(o->buffer_alloc(b, bytes, &sc->ab, &err), FDY_OK);
  assert_int_equal(o->buffer_alloc(b, bytes, &sc->out, &err), FDY_OK);
  assert_int_equal(o->buffer_alloc(b, bytes, &sc->bad, &err), FDY_OK);
  static const int32_t step[3] = {ROWS, 0, 0};
  sc->host = malloc(bytes);
  assert_non_null(sc->host);
  for (int i = 0; i < ROWS * COLS; i++) {
    sc->host[i] = 0.25f + (float)(i % 13);
  }
  assert_int_equal(
      o->copy_to_device(b, sc->s1, sc->step, 0, step, sizeof step, &err),
      FDY_OK); /* 1 */
  assert_int_equal(
      o->copy_to_device(b, sc->s1, sc->ab, 0, sc->host, bytes, &err),
      FDY_OK); /* 2 */
  fdy_op good = add_op(sc, sc->out);
  assert_int_equal(o->launch(b, sc->s1, &good, &err), FDY_OK); /* 3 */
  assert_int_equal(o->event_record(b, sc->s1, sc->e1, &err), FDY_OK);
  assert_int_equal(o->host_wait(b, sc->e1, &err), FDY_OK);

  fdy_cuda_test_misdirect_buffer(sc->bad, NOWHERE);
  fdy_op faulting = add_op(sc, sc->bad);
  /* the launch itself is accepted: the fault happens on the device */
  assert_int_equal(o->launch(b, sc->s1, &faulting, &err), FDY_OK); /* 4 */
  sc->faulting = 4;
}

/* err names the faulting launch; op is the entry that reported it. */
static void assert_names_fault(const scene *sc, fdy_status st,
                               const fdy_error *err, const char *op) {
  print_message("%s: %s\n", op, err->message);
  assert_int_equal(st, FDY_ERR_BACKEND);
  assert_int_equal(err->kind, FDY_ERR_BACKEND);
  assert_string_equal(err->backend_op, op);
  assert_string_equal(err->name, "add");
  assert_int_equal(err->ids[0], sc->faulting);
}

/* After the loss: every entry fails at once naming the fault, releases
 * and destroy return, and creating a new backend on the spoilt context
 * fails instead of hanging. */
static void assert_lost_then_destroy(scene *sc) {
  fdy_error err;
  fdy_backend *b = sc->b;
  const fdy_backend_ops *o = b->ops;
  fdy_op good = add_op(sc, sc->out);
  assert_names_fault(sc, o->launch(b, sc->s2, &good, &err), &err, "launch");
  assert_names_fault(
      sc, o->copy_to_device(b, sc->s1, sc->ab, 0, sc->host, 256, &err), &err,
      "copy_to_device");
  assert_names_fault(
      sc, o->copy_to_host(b, sc->s1, sc->host, sc->out, 0, 256, &err), &err,
      "copy_to_host");
  assert_names_fault(sc, o->event_record(b, sc->s1, sc->e1, &err), &err,
                     "event_record");
  assert_names_fault(sc, o->stream_wait(b, sc->s2, sc->e1, &err), &err,
                     "stream_wait");
  assert_names_fault(sc, o->host_wait(b, sc->e1, &err), &err, "host_wait");
  int64_t at = 0;
  assert_names_fault(sc, o->event_time(b, sc->e1, &at, &err), &err,
                     "event_time");
  assert_names_fault(sc, o->drain(b, &err), &err, "drain");
  fdy_device_caps caps;
  assert_names_fault(sc, o->capabilities(b, &caps, &err), &err, "capabilities");
  fdy_backend_buffer *buf = NULL;
  assert_names_fault(sc, o->buffer_alloc(b, 4096, &buf, &err), &err,
                     "buffer_alloc");
  assert_null(buf);
  fdy_backend_stream *s = NULL;
  assert_names_fault(sc, o->stream_create(b, &s, &err), &err, "stream_create");
  assert_null(s);
  fdy_backend_event *e = NULL;
  assert_names_fault(sc, o->event_create(b, &e, &err), &err, "event_create");
  assert_null(e);
  fdy_backend_host *h = NULL;
  assert_names_fault(sc, o->host_register(b, sc->host, 256, &h, &err), &err,
                     "host_register");
  assert_null(h);
  uint64_t used = 0;
  assert_names_fault(sc, fdy_cuda_memory_in_use(b, &used, &err), &err,
                     "memory_in_use");
  double rate = 0;
  assert_names_fault(sc, fdy_cuda_measure_d2d(b, 4096, 1, &rate, &err), &err,
                     "measure_d2d");

  /* releases in any order, some left to destroy */
  o->buffer_release(b, sc->bad);
  o->buffer_release(b, sc->out);
  o->event_destroy(b, sc->e3);
  o->stream_destroy(b, sc->s2);
  fdy_backend_destroy(b);
  free(sc->host);

  fdy_backend *again = NULL;
  fdy_status st = fdy_cuda_backend_create(NULL, &again, &err);
  print_message("create after the loss: %s\n",
                st == FDY_OK ? "ok" : err.message);
  assert_int_not_equal(st, FDY_OK);
  assert_null(again);
}

/* The fault surfaces at a host wait on an event recorded after more work on
 * its stream, with another stream's launch queued meanwhile. */
static void test_fault_seen_by_host_wait(void **state) {
  (void)state;
  scene sc;
  setup_and_fault(&sc);
  fdy_error err;
  fdy_backend *b = sc.b;
  const fdy_backend_ops *o = b->ops;
  /* e2 after it; later work: a copy and a launch on s1 (5, 6), a launch on
   * s2 (7). Any entry may meet the loss first: it names the launch too. */
  fdy_op good = add_op(&sc, sc.out);
  fdy_status st = o->event_record(b, sc.s1, sc.e2, &err);
  if (st == FDY_OK) {
    st = o->copy_to_device(b, sc.s1, sc.ab, 0, sc.host, 256, &err); /* 5 */
  }
  if (st == FDY_OK) {
    st = o->launch(b, sc.s1, &good, &err); /* 6 */
  }
  if (st == FDY_OK) {
    st = o->event_record(b, sc.s1, sc.e3, &err);
  }
  if (st == FDY_OK) {
    st = o->stream_wait(b, sc.s2, sc.e1, &err);
  }
  if (st == FDY_OK) {
    st = o->launch(b, sc.s2, &good, &err); /* 7 */
  }
  if (st == FDY_OK) {
    st = o->host_wait(b, sc.e3, &err);
  }
  assert_names_fault(&sc, st, &err, "launch");
  assert_lost_then_destroy(&sc);
}

/* The fault surfaces at a drain: no event was recorded after it, and a
 * copy follows it on its stream (the range named is 4 to 5). */
static void test_fault_seen_by_drain(void **state) {
  (void)state;
  scene sc;
  setup_and_fault(&sc);
  fdy_error err;
  fdy_backend *b = sc.b;
  const fdy_backend_ops *o = b->ops;
  fdy_status st =
      o->copy_to_host(b, sc.s1, sc.host, sc.out, 0, 256, &err); /* 5 */
  if (st == FDY_OK) {
    st = o->drain(b, &err);
    assert_int_equal(err.ids[1], 5);
  }
  assert_names_fault(&sc, st, &err, "launch");
  assert_lost_then_destroy(&sc);
}

int main(int argc, char **argv) {
  if (fdy_cuda_device_count() == 0) {
    const char *req = getenv("FOUNDRY_REQUIRE_CUDA");
    if (req != NULL && strcmp(req, "1") == 0) {
      fprintf(stderr,
              "test_cuda_lost: FOUNDRY_REQUIRE_CUDA=1 but no CUDA device\n");
      return 1;
    }
    fprintf(stderr, "test_cuda_lost: no CUDA device, skipping\n");
    return 77;
  }
  const char *which = argc > 1 ? argv[1] : "";
  if (strcmp(which, "host_wait") == 0) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fault_seen_by_host_wait)};
    return cmocka_run_group_tests(tests, NULL, NULL);
  }
  if (strcmp(which, "drain") == 0) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fault_seen_by_drain)};
    return cmocka_run_group_tests(tests, NULL, NULL);
  }
  fprintf(stderr, "usage: test_cuda_lost host_wait|drain\n");
  return 2;
}
