#ifndef FOUNDRY_NEW_FILE_H
#define FOUNDRY_NEW_FILE_H
/* Writing a file that must not exist yet, all or nothing: the bytes go to a
 * temporary "PATH.tmp.PID.N" in the same directory (its name shortened so
 * that it fits NAME_MAX, 255 bytes, whatever PATH's name), created
 * exclusively with mode 0666 (so the kernel applies the umask and the
 * directory's default ACL, as for any new file); commit fsyncs it and
 * link()s it to PATH, which fails instead of replacing anything that
 * appeared meanwhile. On every failure the temporary is removed and PATH is
 * untouched. Every error names PATH (err->name) and reads "WHAT 'PATH':
 * strerror". Used for plans, bench reports and traces, and checkpoints
 * (whose directory is a temporary directory made the same way). */
#include <stddef.h>

#include "foundry/core.h"

typedef struct fdy_new_file {
  char *path; /* the final path (owned copy) */
  char *temp; /* the temporary's path (owned), NULL once removed */
  int fd;     /* open on the temporary, -1 once closed */
} fdy_new_file;

/* Creates the temporary for path. FDY_ERR_INVALID_ARGUMENT for a NULL or
 * empty path, one ending in '/' or a name longer than NAME_MAX;
 * FDY_ERR_EXISTS when path exists (also a dangling symlink);
 * FDY_ERR_NOT_FOUND when its directory does not; FDY_ERR_IO when no file
 * can be created there (unwritable directory, read-only file system) and
 * for other failures. On success the caller must end with
 * fdy_new_file_commit or fdy_new_file_discard; on failure *f needs
 * neither. */
fdy_status fdy_new_file_open(fdy_new_file *f, const char *path, fdy_error *err);

/* Proves, before any long work, that path could be written now:
 * fdy_new_file_open then fdy_new_file_discard (a temporary appears and is
 * removed; nothing else changes). Same errors as fdy_new_file_open. */
fdy_status fdy_new_file_check(const char *path, fdy_error *err);

/* Creates an empty temporary directory beside path, named and checked like
 * the temporaries of new files, with mode 0777 so that the kernel applies
 * the umask and the default ACL as for any new directory. *temp is its
 * malloc'd path (the caller frees it); the caller fills it, then renames it
 * to path (renameat2 with RENAME_NOREPLACE) or removes it. Same errors as
 * fdy_new_file_open; on failure *temp is NULL. */
fdy_status fdy_new_dir_temp(const char *path, char **temp, fdy_error *err);

/* Appends len bytes (retrying short writes and EINTR). FDY_ERR_IO on
 * failure; the file stays open so that the caller can discard it. */
fdy_status fdy_new_file_write(fdy_new_file *f, const void *data, size_t len,
                              fdy_error *err);

/* fsync, close and link into place; FDY_ERR_EXISTS when path appeared since
 * open. Releases f on success and on failure (no discard needed after). */
fdy_status fdy_new_file_commit(fdy_new_file *f, fdy_error *err);

/* Closes and removes the temporary and releases f. A no-op on a released f,
 * so it may follow any of the calls above. */
void fdy_new_file_discard(fdy_new_file *f);

/* open, write text and a newline, commit; discards on any failure. */
fdy_status fdy_write_new_text_file(const char *path, const char *text,
                                   fdy_error *err);

#endif
