/* Checkpoint manifests: every file of a model directory with its size and
 * SHA-256, so that a run can say exactly which files it ran (every
 * infer-bench report records them) and refuse files that differ from a
 * pinned manifest before any work (--manifest on infer-bench, generate and
 * verify; `foundry manifest DIR` writes one).
 *
 * The files of a directory are its regular files (symbolic links followed,
 * as in a Hugging Face snapshot) whose names do not start with '.', in
 * byte order of their names; subdirectories are not entered.
 *
 * The manifest file (JSON):
 *   {"format": "foundry.manifest", "version": 1,
 *    "files": [{"name": "config.json", "bytes": 612,
 *               "sha256": "<64 lowercase hex digits>"}, ...]} */
#ifndef FOUNDRY_MANIFEST_H
#define FOUNDRY_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "foundry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FDY_MANIFEST_FORMAT  "foundry.manifest"
#define FDY_MANIFEST_VERSION 1
/* Hex digits of a SHA-256, NUL excluded. */
#define FDY_SHA256_HEX 64

typedef struct fdy_manifest_file {
  char *name; /* the file's name in the directory (owned) */
  uint64_t bytes;
  char sha256[FDY_SHA256_HEX + 1]; /* lowercase hex, NUL-terminated */
} fdy_manifest_file;

typedef struct fdy_manifest {
  fdy_manifest_file *files; /* [count], in byte order of their names */
  size_t count;
  double hash_seconds; /* fdy_manifest_of_dir: the time it took */
} fdy_manifest;

/* Frees the files and zeroes *manifest; NULL is a no-op. */
void fdy_manifest_free(fdy_manifest *manifest);

/* Hashes every file of dir (see the top of this file). Errors: dir not a
 * readable directory (FDY_ERR_NOT_FOUND / FDY_ERR_IO, err->name = dir), a
 * file that cannot be read (FDY_ERR_IO, err->name = its path), no files
 * (FDY_ERR_NOT_FOUND). On failure *out is zeroed. */
fdy_status fdy_manifest_of_dir(const char *dir, fdy_manifest *out,
                               fdy_error *err);

/* Reads a manifest file. Errors: the file's own (FDY_ERR_NOT_FOUND,
 * FDY_ERR_IO), JSON that is not a manifest of this format and version, a
 * file entry without a name, with a name containing '/' or repeated, a
 * negative or fractional size, or a sha256 that is not 64 hex digits
 * (FDY_ERR_SCHEMA, err->name = the path, the message naming the field). On
 * failure *out is zeroed. */
fdy_status fdy_manifest_read(const char *path, fdy_manifest *out,
                             fdy_error *err);

/* The manifest as JSON text (the format above, indented, no trailing
 * newline); malloc'd, NULL when out of memory. */
char *fdy_manifest_json(const fdy_manifest *manifest);

/* Whether the files of `actual` (fdy_manifest_of_dir of a checkpoint) are
 * exactly those of `pinned`: FDY_OK, else FDY_ERR_CHECKSUM naming the
 * first difference (err->name = the file): a file of the manifest missing,
 * a file the manifest does not list, or a size or SHA-256 that differs
 * (the message gives both hashes). */
fdy_status fdy_manifest_check(const fdy_manifest *pinned,
                              const fdy_manifest *actual, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
