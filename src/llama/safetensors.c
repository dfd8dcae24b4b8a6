/* The strict safetensors reader: maps a file read-only, parses and checks
 * its JSON header (see safetensors.h for every rule) and serves tensor views
 * into the mapping. Nothing beyond the header is read at open; the header
 * is copied out with fdy_host_copy, so a file truncated meanwhile fails
 * with FDY_ERR_IO instead of SIGBUS. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "foundry/host_copy.h"
#include "foundry/input.h"
#include "loader.h"

struct fdy_safetensors {
  char *path;
  void *map;
  uint64_t size;          /* bytes of the file */
  fdy_st_tensor *tensors; /* count, in header order; names owned */
  size_t count;
  size_t *by_name; /* indices into tensors sorted by name */
};

fdy_status fdy_llama_file_error(fdy_error *err, fdy_status kind,
                                const char *path, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fdy_error_vsetf(err, kind, path, 0, 0, fmt, args);
  va_end(args);
  fdy_error_prefix(err, "%s", path);
  return kind;
}

fdy_status fdy_llama_json_parse(const char *path, const char *part,
                                const char *text, size_t len, json_t **root,
                                fdy_error *err) {
  *root = NULL;
  if (fdy_json_check_text(text, len, err) != FDY_OK) {
    if (part) {
      fdy_error_prefix(err, "%s: %s", path, part);
    } else {
      fdy_error_prefix(err, "%s", path);
    }
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", path);
    }
    return FDY_ERR_PARSE;
  }
  json_error_t jerr;
  *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!*root) {
    fdy_llama_file_error(err, FDY_ERR_PARSE, path,
                         "%s%snot valid JSON (line %d, column %d): %s",
                         part ? part : "", part ? " is " : "", jerr.line,
                         jerr.column, jerr.text);
    if (err) {
      err->line = jerr.line;
      err->column = jerr.column;
    }
    return FDY_ERR_PARSE;
  }
  return FDY_OK;
}

const char *fdy_safetensors_path(const fdy_safetensors *st) {
  return st->path;
}

size_t fdy_safetensors_count(const fdy_safetensors *st) {
  return st->count;
}

const fdy_st_tensor *fdy_safetensors_at(const fdy_safetensors *st, size_t i) {
  return i < st->count ? &st->tensors[i] : NULL;
}

fdy_status fdy_safetensors_find(const fdy_safetensors *st, const char *name,
                                const fdy_st_tensor **out, fdy_error *err) {
  size_t lo = 0, hi = st->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const fdy_st_tensor *t = &st->tensors[st->by_name[mid]];
    int c = strcmp(t->name, name);
    if (c == 0) {
      *out = t;
      return FDY_OK;
    }
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  fdy_error_set(err, FDY_ERR_NOT_FOUND, "%s: no tensor '%s'", st->path, name);
  if (err) {
    snprintf(err->name, sizeof err->name, "%s", name);
  }
  return FDY_ERR_NOT_FOUND;
}

void fdy_safetensors_close(fdy_safetensors *st) {
  if (!st) {
    return;
  }
  if (st->map) {
    munmap(st->map, (size_t)st->size);
  }
  for (size_t i = 0; i < st->count; i++) {
    free((char *)st->tensors[i].name);
  }
  free(st->tensors);
  free(st->by_name);
  free(st->path);
  free(st);
}

/* qsort context: the tensor table being sorted (qsort has no user pointer). */
static _Thread_local const fdy_st_tensor *sort_tensors;

static int by_name_cmp(const void *a, const void *b) {
  return strcmp(sort_tensors[*(const size_t *)a].name,
                sort_tensors[*(const size_t *)b].name);
}

static int by_range_cmp(const void *a, const void *b) {
  const fdy_st_tensor *x = &sort_tensors[*(const size_t *)a];
  const fdy_st_tensor *y = &sort_tensors[*(const size_t *)b];
  if (x->file_offset != y->file_offset) {
    return x->file_offset < y->file_offset ? -1 : 1;
  }
  return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

static fdy_status tensor_error(fdy_error *err, fdy_status kind,
                               const char *path, const char *tensor,
                               const char *what) {
  return fdy_llama_file_error(err, kind, path, "tensor '%s': %s", tensor, what);
}

/* Reads a non-negative JSON integer. */
static bool json_u64(const json_t *v, uint64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0) {
    return false;
  }
  *out = (uint64_t)json_integer_value(v);
  return true;
}

/* "__metadata__": an object of strings, or null (MLX writes null, and the
 * reference reader accepts it). */
static fdy_status parse_metadata(const fdy_safetensors *st, json_t *meta,
                                 fdy_error *err) {
  if (json_is_null(meta)) {
    return FDY_OK;
  }
  if (!json_is_object(meta)) {
    return fdy_llama_file_error(err, FDY_ERR_FORMAT, st->path,
                                "__metadata__ is neither an object nor null");
  }
  const char *key;
  json_t *value;
  json_object_foreach(meta, key, value) {
    if (!json_is_string(value)) {
      return fdy_llama_file_error(err, FDY_ERR_FORMAT, st->path,
                                  "__metadata__ value '%s' is not a string",
                                  key);
    }
  }
  return FDY_OK;
}

/* Parses one header entry into t (name already set). */
static fdy_status parse_entry(const fdy_safetensors *st, json_t *entry,
                              uint64_t data_start, uint64_t data_size,
                              fdy_st_tensor *t, fdy_error *err) {
  const char *path = st->path;
  json_t *shape = NULL, *offsets = NULL;
  const char *dtype = NULL;
  json_error_t jerr;
  if (!json_is_object(entry) ||
      json_unpack_ex(entry, &jerr, JSON_STRICT, "{s:s, s:o, s:o}", "dtype",
                     &dtype, "shape", &shape, "data_offsets", &offsets) != 0) {
    return tensor_error(err, FDY_ERR_FORMAT, path, t->name,
                        "entry is not {dtype, shape, data_offsets}");
  }
  if (fdy_dtype_parse(dtype, &t->dtype, NULL) != FDY_OK) {
    char what[96];
    snprintf(what, sizeof what, "unsupported dtype '%.40s'", dtype);
    return tensor_error(err, FDY_ERR_UNSUPPORTED, path, t->name, what);
  }
  if (!json_is_array(shape) || json_array_size(shape) > FDY_MAX_RANK) {
    return tensor_error(err, FDY_ERR_FORMAT, path, t->name,
                        "shape is not an array of at most 8 dimensions");
  }
  t->shape.rank = (uint32_t)json_array_size(shape);
  for (uint32_t d = 0; d < t->shape.rank; d++) {
    if (!json_u64(json_array_get(shape, d), &t->shape.dims[d])) {
      return tensor_error(err, FDY_ERR_FORMAT, path, t->name,
                          "shape holds a value that is not a non-negative "
                          "integer");
    }
  }
  uint64_t begin = 0, end = 0;
  if (!json_is_array(offsets) || json_array_size(offsets) != 2 ||
      !json_u64(json_array_get(offsets, 0), &begin) ||
      !json_u64(json_array_get(offsets, 1), &end)) {
    return tensor_error(err, FDY_ERR_FORMAT, path, t->name,
                        "data_offsets is not [begin, end] of non-negative "
                        "integers");
  }
  if (begin > end) {
    return tensor_error(err, FDY_ERR_FORMAT, path, t->name,
                        "data_offsets begin after their end");
  }
  if (end > data_size) {
    fdy_llama_file_error(err, FDY_ERR_FORMAT, path,
                         "tensor '%s': data_offsets end %llu is outside the "
                         "%llu data bytes of the file",
                         t->name, (unsigned long long)end,
                         (unsigned long long)data_size);
    if (err) {
      err->expected = data_size;
      err->actual = end;
    }
    return FDY_ERR_FORMAT;
  }
  uint64_t bytes = 0;
  if (fdy_tensor_bytes(t->dtype, t->shape, &bytes, NULL) != FDY_OK) {
    return tensor_error(err, FDY_ERR_FORMAT, path, t->name,
                        "shape size overflows 64 bits");
  }
  if (bytes != end - begin) {
    fdy_llama_file_error(err, FDY_ERR_FORMAT, path,
                         "tensor '%s': data_offsets span %llu bytes but "
                         "dtype and shape need %llu",
                         t->name, (unsigned long long)(end - begin),
                         (unsigned long long)bytes);
    if (err) {
      err->expected = bytes;
      err->actual = end - begin;
    }
    return FDY_ERR_FORMAT;
  }
  t->file_offset = data_start + begin;
  t->bytes = bytes;
  t->data = (const unsigned char *)st->map + t->file_offset;
  t->path = st->path;
  return FDY_OK;
}

static fdy_status check_overlaps(const fdy_safetensors *st, fdy_error *err) {
  size_t *order = malloc((st->count ? st->count : 1) * sizeof *order);
  if (!order) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  size_t n = 0;
  for (size_t i = 0; i < st->count; i++) {
    if (st->tensors[i].bytes > 0) {
      order[n++] = i;
    }
  }
  sort_tensors = st->tensors;
  qsort(order, n, sizeof *order, by_range_cmp);
  fdy_status status = FDY_OK;
  for (size_t i = 1; i < n; i++) {
    const fdy_st_tensor *a = &st->tensors[order[i - 1]];
    const fdy_st_tensor *b = &st->tensors[order[i]];
    if (a->file_offset + a->bytes > b->file_offset) {
      status = fdy_llama_file_error(
          err, FDY_ERR_FORMAT, st->path,
          "tensor '%s' overlaps tensor '%s' in the data section", b->name,
          a->name);
      break;
    }
  }
  free(order);
  return status;
}

/* Copies bytes [offset, offset + bytes) of the header region out of the
 * mapping; FDY_ERR_IO naming the file when it shrank below them. */
static fdy_status read_header(const fdy_safetensors *st, uint64_t offset,
                              uint64_t bytes, void *dst, fdy_error *err) {
  fdy_status status =
      fdy_host_copy(dst, (const unsigned char *)st->map + offset, bytes, err);
  if (status != FDY_OK && err) {
    fdy_error_prefix(err, "%s: header", st->path);
    snprintf(err->name, sizeof err->name, "%s", st->path);
  }
  return status;
}

static fdy_status parse_header(fdy_safetensors *st, const char *text,
                               uint64_t header_len, fdy_error *err) {
  json_t *root = NULL;
  if (fdy_llama_json_parse(st->path, "header", text, (size_t)header_len, &root,
                           err) != FDY_OK) {
    return FDY_ERR_PARSE;
  }
  fdy_status status = FDY_OK;
  if (!json_is_object(root)) {
    status = fdy_llama_file_error(err, FDY_ERR_FORMAT, st->path,
                                  "header is not a JSON object");
    goto cleanup;
  }
  size_t entries = json_object_size(root);
  st->tensors = calloc(entries ? entries : 1, sizeof *st->tensors);
  st->by_name = calloc(entries ? entries : 1, sizeof *st->by_name);
  if (!st->tensors || !st->by_name) {
    status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  uint64_t data_start = 8 + header_len;
  uint64_t data_size = st->size - data_start;
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    if (strcmp(key, "__metadata__") == 0) {
      status = parse_metadata(st, value, err);
      if (status != FDY_OK) {
        goto cleanup;
      }
      continue;
    }
    if (key[0] == '\0') {
      status = fdy_llama_file_error(err, FDY_ERR_FORMAT, st->path,
                                    "a tensor has an empty name");
      goto cleanup;
    }
    fdy_st_tensor *t = &st->tensors[st->count];
    t->name = strdup(key);
    if (!t->name) {
      status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      goto cleanup;
    }
    st->count++;
    status = parse_entry(st, value, data_start, data_size, t, err);
    if (status != FDY_OK) {
      goto cleanup;
    }
  }
  for (size_t i = 0; i < st->count; i++) {
    st->by_name[i] = i;
  }
  sort_tensors = st->tensors;
  qsort(st->by_name, st->count, sizeof *st->by_name, by_name_cmp);
  status = check_overlaps(st, err);
cleanup:
  json_decref(root);
  return status;
}

fdy_status fdy_safetensors_open(const char *path, fdy_safetensors **out,
                                fdy_error *err) {
  *out = NULL;
  int fd = -1;
  fdy_status status = FDY_OK;
  char *header = NULL;
  fdy_safetensors *st = calloc(1, sizeof *st);
  if (!st || !(st->path = strdup(path))) {
    status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  status = fdy_input_open(path, "safetensors file", &fd, &st->size, err);
  if (status != FDY_OK) {
    goto cleanup;
  }
  if (st->size < 8) {
    status = fdy_llama_file_error(err, FDY_ERR_FORMAT, path,
                                  "truncated: %llu bytes, shorter than the "
                                  "8-byte header length",
                                  (unsigned long long)st->size);
    goto cleanup;
  }
  if (st->size > SIZE_MAX) {
    status = fdy_llama_file_error(err, FDY_ERR_UNSUPPORTED, path,
                                  "file too large to map");
    goto cleanup;
  }
  st->map = mmap(NULL, (size_t)st->size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (st->map == MAP_FAILED) {
    st->map = NULL;
    status = fdy_llama_file_error(err, FDY_ERR_IO, path, "cannot map: %s",
                                  strerror(errno));
    goto cleanup;
  }
  unsigned char length[8];
  status = read_header(st, 0, sizeof length, length, err);
  if (status != FDY_OK) {
    goto cleanup;
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; i--) {
    header_len = header_len << 8 | length[i];
  }
  if (header_len > FDY_SAFETENSORS_MAX_HEADER || header_len > st->size - 8) {
    status = fdy_llama_file_error(
        err, FDY_ERR_FORMAT, path,
        "header length %llu exceeds %s (file of %llu bytes, limit %llu)",
        (unsigned long long)header_len,
        header_len > st->size - 8 ? "the file" : "the limit",
        (unsigned long long)st->size,
        (unsigned long long)FDY_SAFETENSORS_MAX_HEADER);
    if (err) {
      err->actual = header_len;
      err->expected = st->size - 8 < FDY_SAFETENSORS_MAX_HEADER
                          ? st->size - 8
                          : FDY_SAFETENSORS_MAX_HEADER;
    }
    goto cleanup;
  }
  header = malloc(header_len ? (size_t)header_len : 1);
  if (!header) {
    status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  status = read_header(st, 8, header_len, header, err);
  if (status == FDY_OK) {
    status = parse_header(st, header, header_len, err);
  }
  if (status != FDY_OK) {
    goto cleanup;
  }
  *out = st;
  st = NULL;
cleanup:
  free(header);
  if (fd >= 0) {
    close(fd);
  }
  fdy_safetensors_close(st);
  return status;
}
