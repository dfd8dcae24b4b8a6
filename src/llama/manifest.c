/* Checkpoint manifests (include/foundry/manifest.h): the files of a
 * directory hashed with OpenSSL's SHA-256, the manifest file read and
 * written with jansson, and a pinned manifest compared with a directory's. */
#include "foundry/manifest.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "foundry/input.h"

/* Bytes read from a file at a time while hashing. */
#define HASH_CHUNK (4u << 20)
/* The largest manifest file read. */
#define MANIFEST_MAX_BYTES (16u << 20)

void fdy_manifest_free(fdy_manifest *manifest) {
  if (!manifest) {
    return;
  }
  for (size_t i = 0; manifest->files && i < manifest->count; i++) {
    free(manifest->files[i].name);
  }
  free(manifest->files);
  memset(manifest, 0, sizeof *manifest);
}

/* err->name = name (err may be NULL). */
static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const fdy_manifest_file *)a)->name,
                ((const fdy_manifest_file *)b)->name);
}

/* The SHA-256 of the regular file path, as lowercase hex, and its size. */
static fdy_status hash_file(const char *path, unsigned char *buffer,
                            fdy_manifest_file *file, fdy_error *err) {
  int fd = -1;
  uint64_t size = 0;
  fdy_status st = fdy_input_open(path, "checkpoint file", &fd, &size, err);
  if (st != FDY_OK) {
    return st;
  }
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                       "cannot start a SHA-256 (OpenSSL)");
  }
  uint64_t total = 0;
  while (st == FDY_OK) {
    ssize_t n = read(fd, buffer, HASH_CHUNK);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      st = fdy_error_setf(err, FDY_ERR_IO, path, 0, 0,
                          "cannot read checkpoint file '%s': %s", path,
                          strerror(errno));
      break;
    }
    if (n == 0) {
      break;
    }
    if (EVP_DigestUpdate(ctx, buffer, (size_t)n) != 1) {
      st = fdy_error_set(err, FDY_ERR_IO, "SHA-256 of '%s' failed (OpenSSL)",
                         path);
    }
    total += (uint64_t)n;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (st == FDY_OK && (EVP_DigestFinal_ex(ctx, digest, &length) != 1 ||
                       length * 2 != FDY_SHA256_HEX)) {
    st = fdy_error_set(err, FDY_ERR_IO, "SHA-256 of '%s' failed (OpenSSL)",
                       path);
  }
  for (unsigned int i = 0; st == FDY_OK && i < length; i++) {
    snprintf(file->sha256 + 2 * i, 3, "%02x", digest[i]);
  }
  file->bytes = total;
  EVP_MD_CTX_free(ctx);
  close(fd);
  return st;
}

/* Whether path is a regular file (symbolic links followed). */
static bool is_regular(const char *path) {
  struct stat s;
  return stat(path, &s) == 0 && S_ISREG(s.st_mode);
}

/* The names of the files of dir (see manifest.h) into out->files. */
static fdy_status list_files(const char *dir, fdy_manifest *out,
                             fdy_error *err) {
  DIR *d = opendir(dir);
  if (!d) {
    fdy_status kind = errno == ENOENT ? FDY_ERR_NOT_FOUND : FDY_ERR_IO;
    fdy_error_setf(err, kind, dir, 0, 0,
                   "cannot open checkpoint directory '%s': %s", dir,
                   strerror(errno));
    return kind;
  }
  size_t cap = 0;
  fdy_status st = FDY_OK;
  for (struct dirent *e = readdir(d); st == FDY_OK && e; e = readdir(d)) {
    if (e->d_name[0] == '.') {
      continue;
    }
    char *path = fdy_path_join(dir, e->d_name);
    if (!path) {
      st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    bool regular = is_regular(path);
    free(path);
    if (!regular) {
      continue;
    }
    if (out->count == cap) {
      size_t grown = cap ? 2 * cap : 16;
      fdy_manifest_file *files = realloc(out->files, grown * sizeof *files);
      if (!files) {
        st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
        break;
      }
      out->files = files;
      cap = grown;
    }
    fdy_manifest_file *f = &out->files[out->count];
    memset(f, 0, sizeof *f);
    f->name = strdup(e->d_name);
    if (!f->name) {
      st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    out->count++;
  }
  closedir(d);
  if (st == FDY_OK && out->count == 0) {
    st = fdy_error_set(err, FDY_ERR_NOT_FOUND,
                       "checkpoint directory '%s' holds no files", dir);
  }
  if (st == FDY_OK) {
    qsort(out->files, out->count, sizeof *out->files, by_name);
  }
  return st;
}

fdy_status fdy_manifest_of_dir(const char *dir, fdy_manifest *out,
                               fdy_error *err) {
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_manifest_of_dir needs an output");
  }
  memset(out, 0, sizeof *out);
  if (!dir || !dir[0]) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_manifest_of_dir needs a directory");
  }
  double start = now_seconds();
  fdy_status st = list_files(dir, out, err);
  unsigned char *buffer = st == FDY_OK ? malloc(HASH_CHUNK) : NULL;
  if (st == FDY_OK && !buffer) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (size_t i = 0; st == FDY_OK && i < out->count; i++) {
    char *path = fdy_path_join(dir, out->files[i].name);
    if (!path) {
      st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    st = hash_file(path, buffer, &out->files[i], err);
    free(path);
  }
  free(buffer);
  if (st != FDY_OK) {
    fdy_manifest_free(out);
    return st;
  }
  out->hash_seconds = now_seconds() - start;
  return FDY_OK;
}

/* FDY_ERR_SCHEMA for the manifest file path: "PATH: message". */
static fdy_status schema_error(fdy_error *err, const char *path,
                               const char *field, const char *what) {
  fdy_error_setf(err, FDY_ERR_SCHEMA, path, 0, 0, "manifest '%s': %s %s", path,
                 field, what);
  return FDY_ERR_SCHEMA;
}

static bool is_hex_digest(const char *s) {
  if (strlen(s) != FDY_SHA256_HEX) {
    return false;
  }
  for (const char *c = s; *c; c++) {
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) {
      return false;
    }
  }
  return true;
}

/* Entry i of the manifest's "files" into file. */
static fdy_status read_entry(const char *path, json_t *entry, size_t i,
                             fdy_manifest_file *file, fdy_error *err) {
  char field[64];
  snprintf(field, sizeof field, "files[%zu]", i);
  json_t *name = json_object_get(entry, "name");
  json_t *bytes = json_object_get(entry, "bytes");
  json_t *sha = json_object_get(entry, "sha256");
  if (!json_is_object(entry) || json_object_size(entry) != 3) {
    return schema_error(err, path, field,
                        "must be an object of name, bytes and sha256");
  }
  if (!json_is_string(name) || json_string_length(name) == 0 ||
      strchr(json_string_value(name), '/') ||
      strlen(json_string_value(name)) != json_string_length(name)) {
    return schema_error(err, path, field,
                        "needs a name: a file name without '/' or NUL");
  }
  if (!json_is_integer(bytes) || json_integer_value(bytes) < 0) {
    return schema_error(err, path, field,
                        "needs bytes: a non-negative integer");
  }
  if (!json_is_string(sha) || !is_hex_digest(json_string_value(sha))) {
    return schema_error(err, path, field,
                        "needs sha256: 64 lowercase hex digits");
  }
  file->name = strdup(json_string_value(name));
  if (!file->name) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  file->bytes = (uint64_t)json_integer_value(bytes);
  memcpy(file->sha256, json_string_value(sha), FDY_SHA256_HEX + 1);
  return FDY_OK;
}

static fdy_status read_root(const char *path, json_t *root, fdy_manifest *out,
                            fdy_error *err) {
  json_t *format = json_object_get(root, "format");
  json_t *version = json_object_get(root, "version");
  json_t *files = json_object_get(root, "files");
  if (!json_is_object(root) || !json_is_string(format) ||
      strcmp(json_string_value(format), FDY_MANIFEST_FORMAT) != 0) {
    return schema_error(err, path, "format",
                        "must be \"" FDY_MANIFEST_FORMAT "\"");
  }
  if (!json_is_integer(version) ||
      json_integer_value(version) != FDY_MANIFEST_VERSION) {
    return schema_error(err, path, "version", "must be 1");
  }
  if (!json_is_array(files) || json_array_size(files) == 0) {
    return schema_error(err, path, "files", "must be a non-empty array");
  }
  out->files = calloc(json_array_size(files), sizeof *out->files);
  if (!out->files) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_status st = FDY_OK;
  for (size_t i = 0; st == FDY_OK && i < json_array_size(files); i++) {
    st = read_entry(path, json_array_get(files, i), i, &out->files[i], err);
    if (st == FDY_OK) {
      out->count++;
    }
    for (size_t k = 0; st == FDY_OK && k < i; k++) {
      if (strcmp(out->files[k].name, out->files[i].name) == 0) {
        char field[64];
        snprintf(field, sizeof field, "files[%zu]", i);
        st = schema_error(err, path, field, "repeats a file name");
      }
    }
  }
  if (st == FDY_OK) {
    qsort(out->files, out->count, sizeof *out->files, by_name);
  }
  return st;
}

fdy_status fdy_manifest_read(const char *path, fdy_manifest *out,
                             fdy_error *err) {
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_manifest_read needs an output");
  }
  memset(out, 0, sizeof *out);
  char *text = NULL;
  size_t len = 0;
  fdy_status st =
      fdy_input_read(path, "manifest", MANIFEST_MAX_BYTES, &text, &len, err);
  if (st == FDY_OK) {
    st = fdy_json_check_text(text, len, err);
    if (st != FDY_OK) {
      fdy_error_prefix(err, "manifest '%s'", path);
    }
  }
  json_t *root = NULL;
  if (st == FDY_OK) {
    json_error_t jerr;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
      st = fdy_error_setf(err, FDY_ERR_PARSE, path, 0, 0,
                          "manifest '%s' is not valid JSON (line %d, column "
                          "%d): %s",
                          path, jerr.line, jerr.column, jerr.text);
      if (err) {
        err->line = jerr.line;
        err->column = jerr.column;
      }
    }
  }
  if (st == FDY_OK) {
    st = read_root(path, root, out, err);
  }
  json_decref(root);
  free(text);
  if (st != FDY_OK) {
    fdy_manifest_free(out);
  }
  return st;
}

char *fdy_manifest_json(const fdy_manifest *manifest) {
  json_t *root = json_object();
  json_t *files = json_array();
  for (size_t i = 0; root && files && i < manifest->count; i++) {
    const fdy_manifest_file *f = &manifest->files[i];
    json_array_append_new(files,
                          json_pack("{s:s, s:I, s:s}", "name", f->name, "bytes",
                                    (json_int_t)f->bytes, "sha256", f->sha256));
  }
  char *text = NULL;
  if (root && files) {
    json_object_set_new(root, "format", json_string(FDY_MANIFEST_FORMAT));
    json_object_set_new(root, "version", json_integer(FDY_MANIFEST_VERSION));
    json_object_set(root, "files", files);
    text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  }
  json_decref(files);
  json_decref(root);
  return text;
}

/* The file named name in m (sorted by name), or NULL. */
static const fdy_manifest_file *find(const fdy_manifest *m, const char *name) {
  fdy_manifest_file key = {.name = (char *)name};
  return bsearch(&key, m->files, m->count, sizeof *m->files, by_name);
}

fdy_status fdy_manifest_check(const fdy_manifest *pinned,
                              const fdy_manifest *actual, fdy_error *err) {
  if (!pinned || !actual) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_manifest_check needs two manifests");
  }
  for (size_t i = 0; i < pinned->count; i++) {
    const fdy_manifest_file *p = &pinned->files[i];
    const fdy_manifest_file *a = find(actual, p->name);
    if (!a) {
      fdy_error_setf(err, FDY_ERR_CHECKSUM, p->name, 0, 0,
                     "checkpoint file '%s' of the manifest is missing",
                     p->name);
      return FDY_ERR_CHECKSUM;
    }
    if (strcmp(p->sha256, a->sha256) != 0 || p->bytes != a->bytes) {
      fdy_error_setf(err, FDY_ERR_CHECKSUM, p->name, p->bytes, a->bytes,
                     "checkpoint file '%s' differs from the manifest: sha256 "
                     "%s (%llu bytes), the manifest's %s (%llu bytes)",
                     p->name, a->sha256, (unsigned long long)a->bytes,
                     p->sha256, (unsigned long long)p->bytes);
      return FDY_ERR_CHECKSUM;
    }
  }
  for (size_t i = 0; i < actual->count; i++) {
    const fdy_manifest_file *a = &actual->files[i];
    if (!find(pinned, a->name)) {
      fdy_error_setf(err, FDY_ERR_CHECKSUM, a->name, 0, 0,
                     "checkpoint file '%s' (sha256 %s) is not in the manifest",
                     a->name, a->sha256);
      return FDY_ERR_CHECKSUM;
    }
  }
  return FDY_OK;
}
