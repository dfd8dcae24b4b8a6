/* safetensors files: a strict reader (memory-mapped, nothing read until
 * needed) and a writer in the layout MLX uses.
 *
 * Reader checks: a regular file (foundry/input.h: a FIFO or a directory
 * fails at once) of at least 8 bytes; header length (u64 little-endian)
 * at most FDY_SAFETENSORS_MAX_HEADER and inside the file; header is a JSON
 * object (jansson; no NUL byte anywhere, fdy_json_check_text) of name (not
 * empty, so that every file read can be written back) ->
 * {dtype, shape, data_offsets} plus an optional "__metadata__" object of
 * strings, or null; known dtype; shape of non-negative
 * integers; data_offsets [begin, end] relative to the first byte after the
 * header, begin <= end, end inside the file, end - begin equal to the
 * dtype/shape size; no two tensors' ranges overlap. Data may be unaligned and
 * in any order. Errors name the file (err->name) and the tensor in the
 * message. The header is read at open with fdy_host_copy (a file truncated
 * meanwhile: FDY_ERR_IO). Thread-safe for concurrent readers once
 * opened. */
#ifndef FOUNDRY_SAFETENSORS_H
#define FOUNDRY_SAFETENSORS_H

#include "foundry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FDY_SAFETENSORS_MAX_HEADER ((uint64_t)100 << 20)

typedef struct fdy_safetensors fdy_safetensors;

/* One tensor of an open file; valid while the file is open. */
typedef struct fdy_st_tensor {
  const char *name;
  fdy_dtype dtype;
  fdy_shape shape;
  uint64_t file_offset; /* absolute byte offset of the data in the file */
  uint64_t bytes;
  const void *data; /* into the read-only mapping; possibly unaligned; read
                       it with fdy_host_copy (foundry/host_copy.h): a file
                       truncated after open raises SIGBUS on a plain read */
  const char *path; /* the file it lives in */
} fdy_st_tensor;

fdy_status fdy_safetensors_open(const char *path, fdy_safetensors **out,
                                fdy_error *err);
/* Unmaps and frees; NULL is a no-op. */
void fdy_safetensors_close(fdy_safetensors *st);
const char *fdy_safetensors_path(const fdy_safetensors *st);
size_t fdy_safetensors_count(const fdy_safetensors *st);
/* Tensors in file-header order; NULL out of range. */
const fdy_st_tensor *fdy_safetensors_at(const fdy_safetensors *st, size_t i);
/* FDY_ERR_NOT_FOUND (name = tensor) when absent. */
fdy_status fdy_safetensors_find(const fdy_safetensors *st, const char *name,
                                const fdy_st_tensor **out, fdy_error *err);

/* A tensor to write. */
typedef struct fdy_st_write_tensor {
  const char *name;
  fdy_dtype dtype;
  fdy_shape shape;
  const void *data; /* exactly dtype/shape bytes */
} fdy_st_write_tensor;

/* Writes a safetensors file (no header padding, data in the given order,
 * header keys sorted as JSON object keys) to path, refusing to overwrite
 * (FDY_ERR_EXISTS) and never leaving a partial file (temporary + link). */
fdy_status fdy_safetensors_write(const char *path,
                                 const fdy_st_write_tensor *tensors,
                                 size_t count, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
