#ifndef FOUNDRY_HOST_COPY_H
#define FOUNDRY_HOST_COPY_H
/* Copies between host memory that may be a file mapping, turning the SIGBUS
 * of a mapping whose file was truncated (or whose storage failed) after it
 * was mapped into an FDY_ERR_IO instead of the death of the process.
 *
 * Every read of caller host memory that may be mapped goes through
 * fdy_host_copy: the backends' copies to and from caller memory (the
 * executor maps weight files) and the readers of mapped safetensors files.
 *
 * Mechanism: a process-wide SIGBUS handler (sigaction, SA_SIGINFO |
 * SA_ONSTACK), installed by the first copy and installed again by any
 * copy that finds another handler in its place (test frameworks and
 * programs install their own), chaining to it. A copy arms a thread-local
 * jump buffer for its duration only; a SIGBUS raised by the kernel on that
 * thread at an address inside the copy's source or destination jumps out
 * of the copy (siglongjmp, from memcpy, which is async-signal-safe) and the
 * call fails. Any other SIGBUS (outside a guarded copy, on another thread,
 * sent with kill) goes to the disposition that was installed before:
 * its handler is called, or the default action (terminate with a core
 * dump) is restored and the signal raised again; an ignored SIGBUS is
 * treated as the default, since a fault cannot be ignored.
 *
 * Limits: a handler installed by someone else while a copy runs takes that
 * copy's fault (the next copy installs ours again). The handler reads only
 * thread-local state of initial-exec TLS, written by the copy before it
 * starts, so nothing is allocated in it. A device's DMA from page-locked
 * (registered) memory does not go through the CPU and is not guarded
 * (foundry/cuda.h). */
#include <stdint.h>

#include "foundry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies n bytes from src to dst (as memcpy: the ranges must not overlap;
 * with n = 0 the pointers may be NULL). FDY_ERR_IO when a page of either
 * range cannot be read or written (a file mapping whose file shrank below
 * it, a storage error): the message names the address and the direction;
 * the bytes of dst are then partly written. Thread-safe; may be called from
 * any thread, concurrently. */
fdy_status fdy_host_copy(void *dst, const void *src, uint64_t n,
                         fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
