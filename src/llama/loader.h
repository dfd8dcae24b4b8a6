/* Private interface of the checkpoint side of src/llama (safetensors.c,
 * safetensors_writer.c, config.c, model.c, graph.c, make_model.c): the
 * streaming safetensors writer, half-precision encoding, error helpers and
 * the JSON parse of checkpoint files.
 * Not installed; nothing outside src/llama includes it. */
#ifndef FOUNDRY_LLAMA_LOADER_H
#define FOUNDRY_LLAMA_LOADER_H

#include <jansson.h>

#include "foundry/llama.h"

/* Produces bytes [offset, offset + len) of tensor `index` into buf. Called
 * for every tensor in order, with consecutive, non-overlapping chunks. */
typedef fdy_status (*fdy_st_fill_fn)(void *ctx, size_t index, uint64_t offset,
                                     void *buf, uint64_t len, fdy_error *err);

/* Writes a safetensors file like fdy_safetensors_write, taking the bytes of
 * each tensor from fill (tensors[i].data is ignored), in chunks so that a
 * file larger than memory can be written. Metadata {"format": "mlx"}. */
fdy_status fdy_st_write_stream(const char *path,
                               const fdy_st_write_tensor *tensors, size_t count,
                               fdy_st_fill_fn fill, void *ctx, fdy_error *err);

/* The bfloat16 encoding of f (round to nearest even; F16: core's
 * fdy_float_to_f16). */
uint16_t fdy_llama_float_to_bf16(float f);

/* Sets err to kind with "PATH: message", and err->name to path. */
fdy_status fdy_llama_file_error(fdy_error *err, fdy_status kind,
                                const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Parses len bytes of text, the JSON of file path (or of its part, e.g.
 * "header"; NULL: the whole file), into *root, a new reference:
 * fdy_json_check_text first, duplicate keys refused. On failure *root is
 * NULL and FDY_ERR_PARSE says "PATH: [PART is ]not valid JSON (line L,
 * column C): ..." (or the NUL byte's place) with err->name, line and
 * column set. */
fdy_status fdy_llama_json_parse(const char *path, const char *part,
                                const char *text, size_t len, json_t **root,
                                fdy_error *err);

#endif
