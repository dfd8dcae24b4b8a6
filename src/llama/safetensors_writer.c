/* The safetensors writer, in the layout MLX uses: u64 little-endian header
 * length, the compact JSON header with sorted keys and no padding, then the
 * data of every tensor in the order given. The file is written through
 * foundry/new_file.h, so the target never exists half-written and an
 * existing file is never replaced. Data comes
 * from a fill callback in bounded chunks, so files larger than memory can
 * be written. Also the half-precision encoders used by make-model. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/new_file.h"
#include "loader.h"

#define CHUNK_BYTES ((uint64_t)4 << 20)

uint16_t fdy_llama_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return (uint16_t)((x >> 16) | 0x40u);
  }
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* Builds the header JSON; *out is malloc'd. */
static fdy_status build_header(const fdy_st_write_tensor *tensors, size_t count,
                               char **out, size_t *len, fdy_error *err) {
  fdy_status status = FDY_OK;
  json_t *root = json_object();
  json_t *meta = json_pack("{s:s}", "format", "mlx");
  if (!root || !meta || json_object_set_new(root, "__metadata__", meta)) {
    json_decref(root);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < count; i++) {
    const fdy_st_write_tensor *t = &tensors[i];
    uint64_t bytes = 0, end = 0;
    if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0 ||
        !fdy_utf8_valid(t->name) || json_object_get(root, t->name)) {
      status = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                             "tensor %zu has an empty, reserved, duplicate or "
                             "not UTF-8 name '%s'",
                             i, t->name ? t->name : "");
      goto cleanup;
    }
    if (fdy_dtype_size(t->dtype) == 0 ||
        fdy_tensor_bytes(t->dtype, t->shape, &bytes, err) != FDY_OK ||
        fdy_add_u64(offset, bytes, &end, err) != FDY_OK ||
        end > (uint64_t)INT64_MAX) {
      status =
          fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                        "tensor '%s' has an invalid dtype or size", t->name);
      goto cleanup;
    }
    json_t *shape = json_array();
    json_t *entry = json_pack(
        "{s:s, s:o, s:[I, I]}", "dtype", fdy_dtype_name(t->dtype), "shape",
        shape, "data_offsets", (json_int_t)offset, (json_int_t)end);
    if (!entry) {
      status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      goto cleanup;
    }
    for (uint32_t d = 0; d < t->shape.rank; d++) {
      if (json_array_append_new(shape,
                                json_integer((json_int_t)t->shape.dims[d]))) {
        json_decref(entry);
        status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
        goto cleanup;
      }
    }
    if (json_object_set_new(root, t->name, entry)) {
      status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      goto cleanup;
    }
    offset = end;
  }
  *out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
  if (!*out) {
    status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  *len = strlen(*out);
cleanup:
  json_decref(root);
  return status;
}

static fdy_status write_body(fdy_new_file *f, const char *header,
                             size_t header_len,
                             const fdy_st_write_tensor *tensors, size_t count,
                             fdy_st_fill_fn fill, void *ctx, fdy_error *err) {
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; i++) {
    len_bytes[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
  }
  fdy_status status = fdy_new_file_write(f, len_bytes, 8, err);
  if (status == FDY_OK) {
    status = fdy_new_file_write(f, header, header_len, err);
  }
  if (status != FDY_OK) {
    return status;
  }
  uint64_t largest = 0;
  for (size_t i = 0; i < count; i++) {
    uint64_t bytes = 0;
    fdy_tensor_bytes(tensors[i].dtype, tensors[i].shape, &bytes, NULL);
    largest = bytes > largest ? bytes : largest;
  }
  uint64_t cap = largest < CHUNK_BYTES ? largest : CHUNK_BYTES;
  void *buf = malloc(cap ? (size_t)cap : 1);
  if (!buf) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (size_t i = 0; i < count && status == FDY_OK; i++) {
    uint64_t bytes = 0;
    fdy_tensor_bytes(tensors[i].dtype, tensors[i].shape, &bytes, NULL);
    for (uint64_t off = 0; off < bytes && status == FDY_OK; off += cap) {
      uint64_t n = bytes - off < cap ? bytes - off : cap;
      status = fill(ctx, i, off, buf, n, err);
      if (status == FDY_OK) {
        status = fdy_new_file_write(f, buf, (size_t)n, err);
      }
    }
  }
  free(buf);
  return status;
}

fdy_status fdy_st_write_stream(const char *path,
                               const fdy_st_write_tensor *tensors, size_t count,
                               fdy_st_fill_fn fill, void *ctx, fdy_error *err) {
  char *header = NULL;
  size_t header_len = 0;
  fdy_status status = build_header(tensors, count, &header, &header_len, err);
  fdy_new_file f;
  if (status == FDY_OK) {
    status = fdy_new_file_open(&f, path, err);
    if (status == FDY_OK) {
      status =
          write_body(&f, header, header_len, tensors, count, fill, ctx, err);
      if (status == FDY_OK) {
        status = fdy_new_file_commit(&f, err);
      } else {
        fdy_new_file_discard(&f);
      }
    }
  }
  free(header);
  return status;
}

static fdy_status copy_fill(void *ctx, size_t index, uint64_t offset, void *buf,
                            uint64_t len, fdy_error *err) {
  (void)err;
  const fdy_st_write_tensor *tensors = ctx;
  memcpy(buf, (const unsigned char *)tensors[index].data + offset, (size_t)len);
  return FDY_OK;
}

fdy_status fdy_safetensors_write(const char *path,
                                 const fdy_st_write_tensor *tensors,
                                 size_t count, fdy_error *err) {
  for (size_t i = 0; i < count; i++) {
    uint64_t bytes = 0;
    if (fdy_tensor_bytes(tensors[i].dtype, tensors[i].shape, &bytes, NULL) ==
            FDY_OK &&
        bytes > 0 && !tensors[i].data) {
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "tensor '%s' has no data",
                           tensors[i].name ? tensors[i].name : "");
    }
  }
  return fdy_st_write_stream(path, tensors, count, copy_fill, (void *)tensors,
                             err);
}
