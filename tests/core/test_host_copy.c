/* foundry/host_copy.h: copies from and to a file mapping whose file shrank
 * under it fail with FDY_ERR_IO instead of killing the process, again and
 * again and on many threads at once; a SIGBUS outside a guarded copy goes
 * to the disposition installed before (a handler of the program's, or the
 * default action), checked in fresh processes (this binary run again with
 * a scenario name). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "foundry/host_copy.h"
#include "shrunk_mapping.h"

static bool sigbus_blocked(void) {
  sigset_t now;
  assert_int_equal(pthread_sigmask(SIG_BLOCK, NULL, &now), 0);
  return sigismember(&now, SIGBUS) == 1;
}

/* ThreadSanitizer reports a SIGBUS itself before any handler of the
 * program runs, so the faults are tested in the normal and ASan builds. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

/* Skips a fault test under ThreadSanitizer (see above). */
#ifdef UNDER_TSAN
#define SKIP_UNDER_TSAN() skip()
#else
#define SKIP_UNDER_TSAN() ((void)0)
#endif

static void test_plain_copies(void **state) {
  (void)state;
  unsigned char src[1000], dst[1000];
  for (size_t i = 0; i < sizeof src; i++) {
    src[i] = shrunk_pattern(i);
  }
  fdy_error err;
  assert_int_equal(fdy_host_copy(dst, src, sizeof src, &err), FDY_OK);
  assert_memory_equal(dst, src, sizeof src);
  assert_int_equal(fdy_host_copy(NULL, NULL, 0, &err), FDY_OK);
  assert_int_equal(fdy_host_copy(dst, src, 1, NULL), FDY_OK);
}

/* Reads across the end of the file, then inside it; every time. */
static void test_read_past_truncation(void **state) {
  SKIP_UNDER_TSAN();
  (void)state;
  shrunk_mapping s;
  assert_int_equal(shrunk_make(&s, false), 0);
  unsigned char *dst = malloc(2 * s.page);
  assert_non_null(dst);
  for (int round = 0; round < 3; round++) {
    fdy_error err;
    fdy_error_clear(&err);
    assert_int_equal(fdy_host_copy(dst, s.map + s.page - 64, 128, &err),
                     FDY_ERR_IO);
    assert_int_equal(err.kind, FDY_ERR_IO);
    assert_true(strlen(err.message) > 0);
    assert_int_equal(fdy_host_copy(dst, s.map + 2 * s.page, 8, NULL),
                     FDY_ERR_IO);
    /* the thread's signal mask is as it was */
    assert_false(sigbus_blocked());
    assert_int_equal(fdy_host_copy(dst, s.map, s.page, &err), FDY_OK);
    for (size_t i = 0; i < s.page; i++) {
      assert_int_equal(dst[i], shrunk_pattern(i));
    }
  }
  free(dst);
  shrunk_remove(&s);
}

static void test_write_past_truncation(void **state) {
  SKIP_UNDER_TSAN();
  (void)state;
  shrunk_mapping s;
  assert_int_equal(shrunk_make(&s, true), 0);
  unsigned char src[256];
  memset(src, 0x5a, sizeof src);
  fdy_error err;
  assert_int_equal(fdy_host_copy(s.map + s.page, src, sizeof src, &err),
                   FDY_ERR_IO);
  assert_int_equal(err.kind, FDY_ERR_IO);
  assert_false(sigbus_blocked());
  assert_int_equal(fdy_host_copy(s.map, src, sizeof src, &err), FDY_OK);
  assert_memory_equal(s.map, src, sizeof src);
  shrunk_remove(&s);
}

typedef struct worker {
  const shrunk_mapping *s;
  int failures, successes;
} worker;

static void *copy_worker(void *arg) {
  worker *w = arg;
  unsigned char dst[512];
  for (int i = 0; i < 200; i++) {
    const unsigned char *src =
        i % 2 ? w->s->map + w->s->page + 16 * (size_t)i : w->s->map + i;
    fdy_status st = fdy_host_copy(dst, src, sizeof dst, NULL);
    if (st == FDY_ERR_IO && i % 2) {
      w->failures++;
    } else if (st == FDY_OK && !(i % 2) &&
               dst[0] == shrunk_pattern((size_t)i)) {
      w->successes++;
    }
  }
  return NULL;
}

/* Four threads fault and copy in turns; each sees only its own faults. */
static void test_threads(void **state) {
  SKIP_UNDER_TSAN();
  (void)state;
  shrunk_mapping s;
  assert_int_equal(shrunk_make(&s, false), 0);
  pthread_t threads[4];
  worker workers[4];
  for (int t = 0; t < 4; t++) {
    workers[t] = (worker){.s = &s};
    assert_int_equal(
        pthread_create(&threads[t], NULL, copy_worker, &workers[t]), 0);
  }
  for (int t = 0; t < 4; t++) {
    assert_int_equal(pthread_join(threads[t], NULL), 0);
    assert_int_equal(workers[t].failures, 100);
    assert_int_equal(workers[t].successes, 100);
  }
  shrunk_remove(&s);
}

/* ---- fresh processes ---------------------------------------------------- */

static void exit_42(int sig) {
  (void)sig;
  _exit(42);
}

/* Exit codes: 10 setup failed, 11 a guarded copy did not fail, 12 a fault
 * outside a guarded copy returned; else the fault's disposition decides. */
static int scenario(const char *name) {
  if (strcmp(name, "previous-handler") == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = exit_42;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) != 0) {
      return 10;
    }
  } else if (strcmp(name, "default") != 0) {
    return 10;
  }
  shrunk_mapping s;
  unsigned char dst[64];
  if (shrunk_make(&s, false) != 0) {
    return 10;
  }
  if (fdy_host_copy(dst, s.map + s.page, sizeof dst, NULL) != FDY_ERR_IO) {
    return 11;
  }
  volatile unsigned char *outside = s.map + 2 * s.page;
  dst[0] = *outside;
  return 12;
}

/* Runs this binary again on scenario name; returns its wait status. */
static int run_scenario(const char *name) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* under AddressSanitizer, keep its own SIGBUS handler out of the way */
    char options[1024];
    const char *asan = getenv("ASAN_OPTIONS");
    snprintf(options, sizeof options, "%s%shandle_sigbus=0", asan ? asan : "",
             asan && *asan ? ":" : "");
    setenv("ASAN_OPTIONS", options, 1);
    /* a death by SIGBUS is expected: no core file */
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    execl("/proc/self/exe", "test_core_host_copy", name, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}

static void test_fault_outside_goes_to_previous_handler(void **state) {
  SKIP_UNDER_TSAN();
  (void)state;
  int status = run_scenario("previous-handler");
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 42);
}

static void test_fault_outside_keeps_default_action(void **state) {
  SKIP_UNDER_TSAN();
  (void)state;
  int status = run_scenario("default");
  if (WIFEXITED(status)) {
    print_error("exit status %d\n", WEXITSTATUS(status));
  }
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGBUS);
}

int main(int argc, char **argv) {
  if (argc == 2) {
    return scenario(argv[1]);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain_copies),
      cmocka_unit_test(test_read_past_truncation),
      cmocka_unit_test(test_write_past_truncation),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_fault_outside_goes_to_previous_handler),
      cmocka_unit_test(test_fault_outside_keeps_default_action),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
