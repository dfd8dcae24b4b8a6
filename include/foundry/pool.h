/* The one host thread pool: a fixed set of threads - 1 workers plus the
 * calling thread, on which a run processes its items. The CPU backend runs
 * every op on one; the CUDA backend fills its staging buffers on another.
 * Every item of a run is processed by exactly one thread with the same
 * code, so results never depend on the thread count. */
#ifndef FOUNDRY_POOL_H
#define FOUNDRY_POOL_H

#include <stdint.h>

#include "foundry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Processes items [begin, end) on pool thread `thread` (0 = the caller). */
typedef void (*fdy_pool_task_fn)(void *ctx, uint32_t begin, uint32_t end,
                                 uint32_t thread);

typedef struct fdy_pool fdy_pool;

/* Starts threads - 1 workers (threads >= 1, else FDY_ERR_INVALID_ARGUMENT).
 * A failed pthread primitive or thread start is FDY_ERR_BACKEND naming the
 * call and its error; FDY_ERR_OUT_OF_MEMORY when the pool cannot be
 * allocated. *out is NULL on failure. */
fdy_status fdy_pool_create(uint32_t threads, fdy_pool **out, fdy_error *err);
/* Stops and joins the workers. No run may be in progress. NULL is a no-op. */
void fdy_pool_destroy(fdy_pool *pool);
/* Threads of the pool, the caller included. */
uint32_t fdy_pool_threads(const fdy_pool *pool);
/* Runs fn over items [0, count) in chunks of `chunk` (>= 1) items and
 * returns when all are done. Thread-safe: runs from several threads (such
 * as the CPU backend's stream workers) are serialized, so the pool is never
 * re-entered; a run of at most one chunk runs on the caller alone, as thread 0.
 */
void fdy_pool_run(fdy_pool *pool, uint32_t count, uint32_t chunk,
                  fdy_pool_task_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
