/* The guarded host copy (foundry/host_copy.h): memcpy under a thread-local
 * jump buffer that a process-wide SIGBUS handler jumps to when the copy
 * touches a page that cannot be read or written (a file mapping whose file
 * was truncated, or whose storage failed), so that the copy fails with
 * FDY_ERR_IO. Faults that are not a guarded copy's go to the disposition
 * installed before this handler.
 *
 * Async-signal-safety: the handler touches only this file's thread-local
 * variables (initial-exec TLS: no lazy allocation in the handler),
 * sigaction, raise, the previous handler and siglongjmp; it jumps out of
 * memcpy, which is async-signal-safe (POSIX.1-2008 TC2). A copy makes one
 * system call (sigaction, reading the disposition): the jump buffer does
 * not save the signal mask, and the failure path unblocks SIGBUS again
 * (the handler blocked it; it was unblocked before, or the kernel would
 * have killed the process instead of calling the handler). */
#include "foundry/host_copy.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#define FDY_TLS __attribute__((tls_model("initial-exec"))) _Thread_local

/* The armed copy of this thread: its landing point (NULL when no copy is
 * armed) and its ranges; the faulting address once the handler jumped. */
static FDY_TLS sigjmp_buf *volatile guard_jump;
static FDY_TLS uintptr_t guard_src, guard_dst, guard_bytes;
static FDY_TLS void *volatile guard_fault;

static pthread_mutex_t install_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction previous; /* the SIGBUS disposition ours replaced */

static bool inside(uintptr_t addr, uintptr_t begin, uintptr_t bytes) {
  return addr - begin < bytes;
}

/* Hands a fault that is not a guarded copy's to the previous disposition:
 * its handler, or the default action (terminate, core dump). */
static void chain(int sig, siginfo_t *info, void *context) {
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    if (previous.sa_flags & SA_SIGINFO) {
      previous.sa_sigaction(sig, info, context);
    } else {
      previous.sa_handler(sig);
    }
    return;
  }
  struct sigaction fallback;
  memset(&fallback, 0, sizeof fallback);
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(sig, &fallback, NULL);
  /* pending until the handler returns (SIGBUS is blocked in it); a fault
   * raised by the kernel would also fault again on return */
  raise(sig);
}

static void on_sigbus(int sig, siginfo_t *info, void *context) {
  sigjmp_buf *jump = guard_jump;
  uintptr_t addr = (uintptr_t)info->si_addr;
  /* si_code > 0: raised by the kernel for a fault, not sent by a process */
  if (jump != NULL && info->si_code > 0 &&
      (inside(addr, guard_src, guard_bytes) ||
       inside(addr, guard_dst, guard_bytes))) {
    guard_jump = NULL;
    guard_fault = info->si_addr;
    siglongjmp(*jump, 1);
  }
  chain(sig, info, context);
}

static bool is_ours(const struct sigaction *sa) {
  return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == on_sigbus;
}

/* Makes on_sigbus the SIGBUS handler unless it is, chaining to the
 * disposition it replaces (checked at every copy: test frameworks and
 * programs install their own handlers after ours). False when sigaction
 * fails, which it cannot for SIGBUS. */
static bool ensure_installed(void) {
  struct sigaction now;
  if (sigaction(SIGBUS, NULL, &now) != 0) {
    return false;
  }
  if (is_ours(&now)) {
    return true;
  }
  pthread_mutex_lock(&install_mu);
  bool ok = sigaction(SIGBUS, NULL, &now) == 0;
  if (ok && !is_ours(&now)) {
    /* previous is in place before our handler can run */
    previous = now;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ok = sigaction(SIGBUS, &sa, NULL) == 0;
  }
  pthread_mutex_unlock(&install_mu);
  return ok;
}

static fdy_status copy_failed(const void *dst, uint64_t n, fdy_error *err) {
  sigset_t bus;
  sigemptyset(&bus);
  sigaddset(&bus, SIGBUS);
  pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
  void *addr = guard_fault;
  bool writing = inside((uintptr_t)addr, (uintptr_t)dst, (uintptr_t)n);
  return fdy_error_set(err, FDY_ERR_IO,
                       "%s mapped memory at %p failed (the file behind it "
                       "was truncated or its storage failed)",
                       writing ? "writing" : "reading", addr);
}

fdy_status fdy_host_copy(void *dst, const void *src, uint64_t n,
                         fdy_error *err) {
  if (n == 0) {
    return FDY_OK;
  }
  if (!ensure_installed()) {
    /* were sigaction to fail, the copy runs unguarded */
    memcpy(dst, src, (size_t)n);
    return FDY_OK;
  }
  sigjmp_buf jump;
  guard_src = (uintptr_t)src;
  guard_dst = (uintptr_t)dst;
  guard_bytes = (uintptr_t)n;
  if (sigsetjmp(jump, 0) != 0) {
    return copy_failed(dst, n, err);
  }
  guard_jump = &jump;
  atomic_signal_fence(memory_order_seq_cst);
  memcpy(dst, src, (size_t)n);
  atomic_signal_fence(memory_order_seq_cst);
  guard_jump = NULL;
  return FDY_OK;
}
