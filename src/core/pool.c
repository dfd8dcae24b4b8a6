/* The host thread pool (foundry/pool.h): workers sleep on a condition variable,
 * a run bumps a generation counter and hands out chunks of items through an
 * atomic cursor; the caller works too and then waits until every worker has
 * finished the generation. A second mutex serializes runs so that ops of
 * several streams never re-enter the pool. */
#include "foundry/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct pool_worker {
  struct fdy_pool *pool;
  uint32_t index;
} pool_worker;

struct fdy_pool {
  uint32_t threads;
  uint32_t started; /* workers running */
  pthread_t *handles;
  pool_worker *workers;
  pthread_mutex_t run_lock; /* held for a whole run */
  pthread_mutex_t mutex;    /* guards the fields below */
  pthread_cond_t wake;      /* a new generation, or stop */
  pthread_cond_t done;      /* busy dropped to 0 */
  bool run_lock_ready, mutex_ready, wake_ready, done_ready;
  uint64_t generation;
  uint32_t busy; /* workers still in the current generation */
  bool stop;
  fdy_pool_task_fn fn;
  void *ctx;
  uint32_t count;
  uint32_t chunk;
  atomic_uint next; /* first item not yet handed out */
};

static void pool_work(struct fdy_pool *pool, uint32_t thread) {
  for (;;) {
    uint32_t begin = atomic_fetch_add(&pool->next, pool->chunk);
    if (begin >= pool->count) {
      return;
    }
    uint32_t end =
        pool->count - begin < pool->chunk ? pool->count : begin + pool->chunk;
    pool->fn(pool->ctx, begin, end, thread);
  }
}

static void *pool_main(void *arg) {
  pool_worker *worker = arg;
  struct fdy_pool *pool = worker->pool;
  uint64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&pool->mutex);
    while (!pool->stop && pool->generation == seen) {
      pthread_cond_wait(&pool->wake, &pool->mutex);
    }
    if (pool->stop) {
      pthread_mutex_unlock(&pool->mutex);
      return NULL;
    }
    seen = pool->generation;
    pthread_mutex_unlock(&pool->mutex);
    pool_work(pool, worker->index);
    pthread_mutex_lock(&pool->mutex);
    if (--pool->busy == 0) {
      pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mutex);
  }
}

/* Fails with FDY_ERR_BACKEND when a pthread call returned rc != 0. */
static fdy_status pthread_check(int rc, const char *call, fdy_error *err) {
  if (rc == 0) {
    return FDY_OK;
  }
  return fdy_error_set(err, FDY_ERR_BACKEND, "thread pool: %s failed: %s", call,
                       strerror(rc));
}

fdy_status fdy_pool_create(uint32_t threads, fdy_pool **out, fdy_error *err) {
  struct fdy_pool *pool = NULL;
  fdy_status st = FDY_OK;
  *out = NULL;
  if (threads == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a thread pool needs at least one thread");
  }
  pool = calloc(1, sizeof *pool);
  if (pool == NULL) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "cannot allocate a thread pool");
  }
  pool->threads = threads;
  atomic_init(&pool->next, 0);
  if ((st = pthread_check(pthread_mutex_init(&pool->run_lock, NULL),
                          "pthread_mutex_init", err)) != FDY_OK) {
    goto cleanup;
  }
  pool->run_lock_ready = true;
  if ((st = pthread_check(pthread_mutex_init(&pool->mutex, NULL),
                          "pthread_mutex_init", err)) != FDY_OK) {
    goto cleanup;
  }
  pool->mutex_ready = true;
  if ((st = pthread_check(pthread_cond_init(&pool->wake, NULL),
                          "pthread_cond_init", err)) != FDY_OK) {
    goto cleanup;
  }
  pool->wake_ready = true;
  if ((st = pthread_check(pthread_cond_init(&pool->done, NULL),
                          "pthread_cond_init", err)) != FDY_OK) {
    goto cleanup;
  }
  pool->done_ready = true;
  if (threads > 1) {
    pool->handles = calloc(threads - 1, sizeof *pool->handles);
    pool->workers = calloc(threads - 1, sizeof *pool->workers);
    if (pool->handles == NULL || pool->workers == NULL) {
      st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "cannot allocate %u thread handles", threads - 1);
      goto cleanup;
    }
  }
  for (uint32_t i = 0; i + 1 < threads; i++) {
    pool->workers[i] = (pool_worker){pool, i + 1};
    int rc =
        pthread_create(&pool->handles[i], NULL, pool_main, &pool->workers[i]);
    if (rc != 0) {
      st = fdy_error_set(err, FDY_ERR_BACKEND,
                         "thread pool: pthread_create failed for worker "
                         "%u of %u: %s",
                         i + 1, threads - 1, strerror(rc));
      goto cleanup;
    }
    pool->started++;
  }
  *out = pool;
  return FDY_OK;

cleanup:
  fdy_pool_destroy(pool);
  return st;
}

void fdy_pool_destroy(fdy_pool *pool) {
  if (pool == NULL) {
    return;
  }
  if (pool->started > 0) {
    pthread_mutex_lock(&pool->mutex);
    pool->stop = true;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (uint32_t i = 0; i < pool->started; i++) {
      pthread_join(pool->handles[i], NULL);
    }
  }
  if (pool->done_ready) {
    pthread_cond_destroy(&pool->done);
  }
  if (pool->wake_ready) {
    pthread_cond_destroy(&pool->wake);
  }
  if (pool->mutex_ready) {
    pthread_mutex_destroy(&pool->mutex);
  }
  if (pool->run_lock_ready) {
    pthread_mutex_destroy(&pool->run_lock);
  }
  free(pool->handles);
  free(pool->workers);
  free(pool);
}

uint32_t fdy_pool_threads(const fdy_pool *pool) {
  return pool->threads;
}

void fdy_pool_run(fdy_pool *pool, uint32_t count, uint32_t chunk,
                  fdy_pool_task_fn fn, void *ctx) {
  if (count == 0) {
    return;
  }
  if (pool->started == 0 || count <= chunk) {
    fn(ctx, 0, count, 0);
    return;
  }
  pthread_mutex_lock(&pool->run_lock);
  pthread_mutex_lock(&pool->mutex);
  pool->fn = fn;
  pool->ctx = ctx;
  pool->count = count;
  pool->chunk = chunk;
  atomic_store(&pool->next, 0);
  pool->busy = pool->started;
  pool->generation++;
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mutex);
  pool_work(pool, 0);
  pthread_mutex_lock(&pool->mutex);
  while (pool->busy != 0) {
    pthread_cond_wait(&pool->done, &pool->mutex);
  }
  pthread_mutex_unlock(&pool->mutex);
  pthread_mutex_unlock(&pool->run_lock);
}
