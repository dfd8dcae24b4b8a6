/* A test helper shared by the tests of guarded copies (core, cpu, fake,
 * cuda): a file of three pages (or any number) mapped MAP_SHARED and then
 * truncated to one page (or any number), so that the pages kept read and
 * the others raise SIGBUS. Header only; no cmocka (a test's fresh
 * processes use it too). */
#ifndef FOUNDRY_TESTS_SHRUNK_MAPPING_H
#define FOUNDRY_TESTS_SHRUNK_MAPPING_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct shrunk_mapping {
  char path[64];
  unsigned char *map; /* `pages` pages; only the first `kept` are backed */
  size_t page;        /* bytes of a page */
  size_t pages, kept;
} shrunk_mapping;

/* Byte i of the file as written. */
static inline unsigned char shrunk_pattern(size_t i) {
  return (unsigned char)(i * 7 + 1);
}

/* A mapping of `pages` pages of which the first `kept` stay backed. 0 on
 * success, -1 on any failure (shrunk_remove cleans up either way). */
static inline int shrunk_make_pages(shrunk_mapping *m, size_t pages,
                                    size_t kept, bool writable) {
  m->page = (size_t)sysconf(_SC_PAGESIZE);
  m->pages = pages;
  m->kept = kept;
  m->map = MAP_FAILED;
  snprintf(m->path, sizeof m->path, "/tmp/fdy-shrunk-XXXXXX");
  int fd = mkstemp(m->path);
  if (fd < 0) {
    return -1;
  }
  unsigned char *data = malloc(m->pages * m->page);
  int rc = data == NULL ? -1 : 0;
  for (size_t i = 0; rc == 0 && i < m->pages * m->page; i++) {
    data[i] = shrunk_pattern(i);
  }
  if (rc == 0 &&
      write(fd, data, m->pages * m->page) != (ssize_t)(m->pages * m->page)) {
    rc = -1;
  }
  free(data);
  int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  if (rc == 0) {
    m->map = mmap(NULL, m->pages * m->page, prot, MAP_SHARED, fd, 0);
  }
  if (m->map == MAP_FAILED || ftruncate(fd, (off_t)(kept * m->page)) != 0) {
    rc = -1;
  }
  close(fd);
  return rc;
}

/* Three pages, the first one kept. */
static inline int shrunk_make(shrunk_mapping *m, bool writable) {
  return shrunk_make_pages(m, 3, 1, writable);
}

static inline void shrunk_remove(shrunk_mapping *m) {
  if (m->map != MAP_FAILED) {
    munmap(m->map, m->pages * m->page);
  }
  unlink(m->path);
}

#endif
