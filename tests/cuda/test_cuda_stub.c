/* The CUDA backend built without CUDA: no devices, and every entry that
 * needs one fails with FDY_ERR_UNSUPPORTED and names itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "foundry/cuda.h"

#include <string.h>

static void test_no_devices(void **state) {
  (void)state;
  assert_int_equal(fdy_cuda_device_count(), 0);
  int rv = -1, dv = -1;
  fdy_cuda_versions(&rv, &dv);
  assert_int_equal(rv, 0);
  assert_int_equal(dv, 0);
  fdy_cuda_versions(NULL, NULL);
}

static void test_create_unsupported(void **state) {
  (void)state;
  fdy_error err;
  fdy_backend *b = (fdy_backend *)&err; /* must be reset to NULL */
  assert_int_equal(fdy_cuda_backend_create(NULL, &b, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_null(b);
  assert_int_equal(err.kind, FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.backend_op, "create");
  assert_int_equal(fdy_cuda_backend_create(NULL, NULL, NULL),
                   FDY_ERR_UNSUPPORTED);
}

static void test_measure_unsupported(void **state) {
  (void)state;
  fdy_error err;
  double rate = -1;
  char src[16] = {1};
  assert_int_equal(fdy_cuda_measure_h2d(NULL, src, 16, 1, &rate, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_true(rate == 0);
  assert_string_equal(err.backend_op, "measure_h2d");
  assert_int_equal(fdy_cuda_measure_d2d(NULL, 16, 1, &rate, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.backend_op, "measure_d2d");
  assert_int_equal(fdy_cuda_measure_checksum(NULL, 16, 1, &rate, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.backend_op, "measure_checksum");
  uint64_t used = 1;
  assert_int_equal(fdy_cuda_memory_in_use(NULL, &used, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_int_equal(used, 0);
}

static void test_host_mode_names(void **state) {
  (void)state;
  assert_string_equal(fdy_cuda_host_mode_name(FDY_CUDA_HOST_REGISTERED),
                      "registered");
  assert_string_equal(fdy_cuda_host_mode_name(FDY_CUDA_HOST_STAGED), "staged");
  assert_string_equal(fdy_cuda_host_mode_name((fdy_cuda_host_mode)42),
                      "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_devices),
      cmocka_unit_test(test_create_unsupported),
      cmocka_unit_test(test_measure_unsupported),
      cmocka_unit_test(test_host_mode_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
