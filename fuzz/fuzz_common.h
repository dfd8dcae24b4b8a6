/* Helpers the fuzz targets share: a private temporary directory per run
 * (removed with its files when the run exits) and writing an input there,
 * for parsers that read files. A failure here is the fuzzer's own and
 * aborts. */
#ifndef FOUNDRY_FUZZ_COMMON_H
#define FOUNDRY_FUZZ_COMMON_H

#include <stddef.h>

/* The run's directory, made on first use under $TMPDIR (default /tmp) and
 * named after `target`. */
const char *fuzz_dir(const char *target);

/* The path of file `name` in the run's directory; valid until the next
 * call. */
const char *fuzz_path(const char *target, const char *name);

/* Writes size bytes to path, replacing it. */
void fuzz_write_file(const char *path, const void *data, size_t size);

#endif
