/* Finding a tokenizer: in a model directory (tokenizer.json with its
 * tokenizer_config.json, else a tiktoken tokenizer.model) or as a file
 * whose format is told by its first byte. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "foundry/input.h"
#include "tokenizer_internal.h"

/* Present in any form: a FIFO or a directory under a tokenizer file's name
 * is used, and its loader fails at once naming it (fdy_input_read), rather
 * than being taken for an absent file. */
static bool exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* True when the first non-blank byte of the file, after a UTF-8 byte-order
 * mark, is '{' (a tiktoken file is base64, never either). The file must be
 * a regular one (fdy_input_open: a FIFO fails at once). */
static fdy_status looks_like_json(const char *path, bool *json,
                                  fdy_error *err) {
  int fd = -1;
  uint64_t size = 0;
  fdy_status s = fdy_input_open(path, "tokenizer file", &fd, &size, err);
  if (s != FDY_OK) {
    return s;
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    fdy_error_set(err, FDY_ERR_IO, "%s: cannot read: %s", path,
                  strerror(errno));
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", path);
    }
    return FDY_ERR_IO;
  }
  int c = getc(f);
  if (c == 0xEF && getc(f) == 0xBB && getc(f) == 0xBF) {
    c = getc(f); /* the byte-order mark, which load_json skips too */
  }
  while (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
    c = getc(f);
  }
  fclose(f);
  *json = c == '{';
  return FDY_OK;
}

/* path/tokenizer.json (+ path/tokenizer_config.json when present). */
static fdy_status open_hf(const char *json_path, const char *dir,
                          fdy_tokenizer **out, fdy_error *err) {
  char *config = fdy_path_join(dir, "tokenizer_config.json");
  if (!config) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_status s = fdy_tokenizer_load_hf(
      json_path, exists(config) ? config : NULL, out, err);
  free(config);
  return s;
}

fdy_status fdy_tokenizer_open(const char *path, fdy_tokenizer **out,
                              fdy_error *err) {
  *out = NULL;
  struct stat sb;
  if (stat(path, &sb) != 0) {
    fdy_error_set(err, errno == ENOENT ? FDY_ERR_NOT_FOUND : FDY_ERR_IO,
                  "%s: cannot open: %s", path, strerror(errno));
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", path);
    }
    return err ? err->kind : FDY_ERR_IO;
  }
  fdy_status s = FDY_OK;
  if (!S_ISDIR(sb.st_mode)) {
    bool json = false;
    s = looks_like_json(path, &json, err);
    if (s != FDY_OK) {
      return s;
    }
    if (!json) {
      return fdy_tokenizer_load_tiktoken(path, out, err);
    }
    char *copy = strdup(path);
    if (!copy) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    char *slash = strrchr(copy, '/');
    const char *dir = ".";
    if (slash) {
      *slash = '\0';
      dir = slash == copy ? "/" : copy;
    }
    s = open_hf(path, dir, out, err);
    free(copy);
    return s;
  }
  char *json_path = fdy_path_join(path, "tokenizer.json");
  char *model_path = fdy_path_join(path, "tokenizer.model");
  if (!json_path || !model_path) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  } else if (exists(json_path)) {
    s = open_hf(json_path, path, out, err);
  } else if (exists(model_path)) {
    s = fdy_tokenizer_load_tiktoken(model_path, out, err);
  } else {
    s = fdy_error_set(err, FDY_ERR_NOT_FOUND,
                      "%s: no tokenizer: neither tokenizer.json nor "
                      "tokenizer.model is there (give one with --tokenizer "
                      "FILE)",
                      path);
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", path);
    }
  }
  free(json_path);
  free(model_path);
  return s;
}
