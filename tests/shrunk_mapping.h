/* A test helper shared by the tests of guarded copies (core, cpu, fake): a
 * file of three pages mapped MAP_SHARED and then truncated to one page, so
 * that the first page of the mapping reads and the other two raise SIGBUS.
 * Header only; no cmocka (a test's fresh processes use it too). */
#ifndef FOUNDRY_TESTS_SHRUNK_MAPPING_H
#define FOUNDRY_TESTS_SHRUNK_MAPPING_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct shrunk_mapping {
  char path[64];
  unsigned char *map; /* three pages; only the first is backed */
  size_t page;        /* bytes of a page */
} shrunk_mapping;

/* Byte i of the file as written. */
static inline unsigned char shrunk_pattern(size_t i) {
  return (unsigned char)(i * 7 + 1);
}

/* 0 on success, -1 on any failure (nothing to remove then but the file,
 * which shrunk_remove also handles). */
static inline int shrunk_make(shrunk_mapping *m, bool writable) {
  m->page = (size_t)sysconf(_SC_PAGESIZE);
  m->map = MAP_FAILED;
  snprintf(m->path, sizeof m->path, "/tmp/fdy-shrunk-XXXXXX");
  int fd = mkstemp(m->path);
  if (fd < 0) {
    return -1;
  }
  unsigned char *data = malloc(3 * m->page);
  int rc = data == NULL ? -1 : 0;
  for (size_t i = 0; rc == 0 && i < 3 * m->page; i++) {
    data[i] = shrunk_pattern(i);
  }
  if (rc == 0 && write(fd, data, 3 * m->page) != (ssize_t)(3 * m->page)) {
    rc = -1;
  }
  free(data);
  int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  if (rc == 0) {
    m->map = mmap(NULL, 3 * m->page, prot, MAP_SHARED, fd, 0);
  }
  if (m->map == MAP_FAILED || ftruncate(fd, (off_t)m->page) != 0) {
    rc = -1;
  }
  close(fd);
  return rc;
}

static inline void shrunk_remove(shrunk_mapping *m) {
  if (m->map != MAP_FAILED) {
    munmap(m->map, 3 * m->page);
  }
  unlink(m->path);
}

#endif
