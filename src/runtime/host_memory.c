/* The executor's host memory: the checkpoint files mapped, host memory
 * registered with the backend, streamed weights packed into page-locked
 * images, and the staging of step inputs and outputs. */
#include "executor_internal.h"

#include "foundry/host_copy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- host memory: mappings, registrations, staging
 * ---------------------------- */

static const ex_mapping *find_mapping(const fdy_executor *x, const char *path) {
  for (size_t i = 0; i < x->map_count; i++) {
    if (strcmp(x->maps[i].path, path) == 0) {
      return &x->maps[i];
    }
  }
  return NULL;
}

static fdy_status map_error(fdy_error *e, fdy_status kind, const char *path,
                            uint64_t size, uint64_t need) {
  fdy_error_set(e, kind, "%s holds %llu bytes, a weight needs %llu", path,
                (unsigned long long)size, (unsigned long long)need);
  e->expected = need;
  e->actual = size;
  snprintf(e->name, sizeof(e->name), "%s", path);
  return kind;
}

/* Registers [ptr, ptr + bytes) with the backend (when the executor
 * registers host memory and the backend can); *out (may be NULL) the
 * registration, or NULL when none was made. */
static fdy_status register_host(fdy_executor *x, const void *ptr,
                                uint64_t bytes, fdy_backend_host **out,
                                fdy_error *e) {
  if (out != NULL) {
    *out = NULL;
  }
  if (!x->registers_host || x->ops->host_register == NULL || bytes == 0) {
    return FDY_OK;
  }
  if (x->host_count == x->host_cap) {
    size_t cap = x->host_cap ? x->host_cap * 2 : 16;
    fdy_backend_host **grown = realloc(x->hosts, cap * sizeof(*grown));
    if (grown == NULL) {
      return ex_oom(e);
    }
    x->hosts = grown;
    x->host_cap = cap;
  }
  fdy_backend_host *host = NULL;
  fdy_status st = x->ops->host_register(x->b, ptr, bytes, &host, e);
  if (st != FDY_OK) {
    return ex_backend_failed(e, st, -1, "host_register");
  }
  x->hosts[x->host_count++] = host;
  x->stats.registered_bytes += bytes;
  if (out != NULL) {
    *out = host;
  }
  return FDY_OK;
}

/* Maps the file at path once (the mapping in *out), registering it with
 * the backend when `registered` (unpacked copies read it), also when an
 * earlier call mapped it without. */
static fdy_status map_file(fdy_executor *x, const char *path, uint64_t need,
                           bool registered, ex_mapping **out, fdy_error *e) {
  ex_mapping *have = (ex_mapping *)find_mapping(x, path);
  if (have) {
    if (have->size < need) {
      return map_error(e, FDY_ERR_GRAPH_FILE_RANGE, path, have->size, need);
    }
    *out = have;
    return registered && have->host == NULL
               ? register_host(x, have->base, have->size, &have->host, e)
               : FDY_OK;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    int code = errno;
    if (fd >= 0) {
      close(fd);
    }
    fdy_error_set(e, FDY_ERR_IO, "cannot open %s: %s", path, strerror(code));
    snprintf(e->name, sizeof(e->name), "%s", path);
    return FDY_ERR_IO;
  }
  uint64_t size = (uint64_t)sb.st_size;
  if (!S_ISREG(sb.st_mode) || size < need || size == 0) {
    close(fd);
    return map_error(e, FDY_ERR_GRAPH_FILE_RANGE, path, size, need);
  }
  void *base = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
  int code = errno;
  close(fd);
  if (base == MAP_FAILED) {
    fdy_error_set(e, FDY_ERR_IO, "cannot map %s: %s", path, strerror(code));
    snprintf(e->name, sizeof(e->name), "%s", path);
    return FDY_ERR_IO;
  }
  ex_mapping *m = &x->maps[x->map_count++];
  *m = (ex_mapping){.path = path, .base = base, .size = size};
  x->stats.mapped_bytes += size;
  *out = m;
  return registered ? register_host(x, base, size, &m->host, e) : FDY_OK;
}

/* Resolves prefetch command i of weight `info` into one copy per
 * non-padding extent from the mapped files (registered) and host extents
 * (registered once per distinct pointer). */
static fdy_status resolve_extent_copies(fdy_executor *x, size_t i,
                                        const fdy_tensor_info *info,
                                        bool in_step, fdy_error *e) {
  ex_command *rc = &x->cmds[i];
  rc->first_copy = x->copy_count;
  uint64_t at = 0;
  fdy_status st = FDY_OK;
  for (size_t k = 0; st == FDY_OK && k < info->extent_count; k++) {
    const fdy_extent *ext = &info->extents[k];
    const void *src = NULL;
    if (ext->kind == FDY_EXTENT_FILE) {
      ex_mapping *m = NULL;
      st = map_file(x, ext->path, ext->offset + ext->length, true, &m, e);
      if (st == FDY_OK) {
        m->step_use = m->step_use || in_step;
        src = (const unsigned char *)m->base + ext->offset;
      }
    } else if (ext->kind == FDY_EXTENT_HOST) {
      src = ext->host;
      bool seen = false;
      for (size_t j = 0; j < x->copy_count && !seen; j++) {
        seen = x->copies[j].src == src;
      }
      if (!seen) {
        st = register_host(x, src, ext->length, NULL, e);
      }
    }
    if (st == FDY_OK && src != NULL) {
      x->copies[x->copy_count++] = (ex_copy){src, at, ext->length};
      rc->copy_count++;
    }
    at += ext->length;
  }
  return st;
}

/* The packed image of weight w: an owned, page-aligned host buffer laid
 * out exactly as the weight's bytes in its slot (extents in order, padding
 * zeroed), filled once with guarded copies (a file truncated under its
 * mapping is FDY_ERR_IO, never a SIGBUS) and registered with the backend. */
static fdy_status pack_weight(fdy_executor *x, uint32_t w,
                              const fdy_tensor_info *info, fdy_error *e) {
  uint64_t bytes = 0;
  fdy_status st = fdy_align_up(info->bytes, STAGING_ALIGNMENT, &bytes, e);
  if (st != FDY_OK) {
    return st;
  }
  if (bytes > SIZE_MAX ||
      posix_memalign(&x->packed[w], STAGING_ALIGNMENT, (size_t)bytes) != 0) {
    x->packed[w] = NULL;
    return ex_oom(e);
  }
  unsigned char *image = x->packed[w];
  x->stats.packed_bytes += bytes;
  uint64_t at = 0;
  for (size_t k = 0; st == FDY_OK && k < info->extent_count; k++) {
    const fdy_extent *ext = &info->extents[k];
    if (ext->kind == FDY_EXTENT_FILE) {
      ex_mapping *m = NULL;
      st = map_file(x, ext->path, ext->offset + ext->length, false, &m, e);
      if (st == FDY_OK) {
        st = fdy_host_copy(image + at,
                           (const unsigned char *)m->base + ext->offset,
                           ext->length, e);
      }
      if (st != FDY_OK) {
        snprintf(e->name, sizeof(e->name), "%s", ext->path);
        fdy_error_prefix(e, "packing weight %s from %s", info->name, ext->path);
      }
    } else if (ext->kind == FDY_EXTENT_HOST) {
      st = fdy_host_copy(image + at, ext->host, ext->length, e);
    } else {
      memset(image + at, 0, (size_t)ext->length);
    }
    at += ext->length;
  }
  if (st == FDY_OK) {
    memset(image + info->bytes, 0, (size_t)(bytes - info->bytes));
    st = register_host(x, image, bytes, NULL, e);
  }
  return st;
}

/* Whether weight w is packed: a streamed weight (prefetched by a step) of
 * more than one extent to copy, when the executor packs. */
static bool packs(const fdy_executor *x, const bool *streamed,
                  const fdy_tensor_info *info, uint32_t w) {
  size_t pieces = 0;
  for (size_t k = 0; k < info->extent_count; k++) {
    pieces += info->extents[k].kind != FDY_EXTENT_PADDING;
  }
  return x->packs_streamed && streamed[w] && pieces > 1;
}

/* Maps every file a prefetched weight reads (once per path), packs the
 * streamed weights that take more than one copy (one copy per prefetch from
 * their packed image), registers the mappings unpacked copies read and the
 * host extents, and resolves every prefetch into copies. */
fdy_status ex_prepare_weights(fdy_executor *x, fdy_error *e) {
  size_t extents = 0;
  size_t setup_end = fdy_plan_section(x->plan, 0)->count;
  x->packed = calloc(x->tensor_count + 1, sizeof(*x->packed));
  bool *streamed = calloc(x->tensor_count + 1, sizeof(bool));
  fdy_status st = x->packed && streamed ? FDY_OK : ex_oom(e);
  for (size_t i = 0; st == FDY_OK && i < x->command_count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    fdy_tensor_info info;
    if (c->kind != FDY_CMD_PREFETCH) {
      continue;
    }
    st = ex_tensor_info(x->graph, c->u.prefetch.weight.v, &info, e);
    extents += info.extent_count;
    streamed[c->u.prefetch.weight.v] |= i >= setup_end;
  }
  if (st == FDY_OK) {
    x->maps = calloc(extents + 1, sizeof(*x->maps));
    x->copies = calloc(extents + 1, sizeof(*x->copies));
    st = x->maps && x->copies ? FDY_OK : ex_oom(e);
  }
  /* Unpacked weights first, so that the mappings they read are registered
   * before packing reads the files. */
  for (int packed = 0; packed < 2 && st == FDY_OK; packed++) {
    for (size_t i = 0; st == FDY_OK && i < x->command_count; i++) {
      const fdy_command *c = fdy_plan_command(x->plan, i);
      if (c->kind != FDY_CMD_PREFETCH) {
        continue;
      }
      uint32_t w = c->u.prefetch.weight.v;
      fdy_tensor_info info;
      st = ex_tensor_info(x->graph, w, &info, e);
      if (st != FDY_OK || packs(x, streamed, &info, w) != (packed == 1)) {
        continue;
      }
      if (!packed) {
        st = resolve_extent_copies(x, i, &info, i >= setup_end, e);
      } else {
        if (x->packed[w] == NULL) {
          st = pack_weight(x, w, &info, e);
        }
        x->cmds[i].first_copy = x->copy_count;
        x->cmds[i].copy_count = 1;
        x->copies[x->copy_count++] = (ex_copy){x->packed[w], 0, info.bytes};
      }
      if (st != FDY_OK) {
        e->command_index = (int64_t)i;
      }
    }
  }
  free(streamed);
  return st;
}

/* After setup: unmaps (and unregisters) the files no step reads any more
 * (those only resident uploads and packing read), so that runs never touch
 * them. */
void ex_release_setup_mappings(fdy_executor *x) {
  size_t kept = 0;
  for (size_t i = 0; i < x->map_count; i++) {
    ex_mapping *m = &x->maps[i];
    if (m->step_use) {
      x->maps[kept++] = *m;
      continue;
    }
    for (size_t h = 0; m->host != NULL && h < x->host_count; h++) {
      if (x->hosts[h] == m->host) {
        x->ops->host_unregister(x->b, m->host);
        x->hosts[h] = x->hosts[--x->host_count];
        x->stats.registered_bytes -= m->size;
        break;
      }
    }
    munmap(m->base, (size_t)m->size);
  }
  x->map_count = kept;
}

/* Page-aligned host staging for every tensor a step copies in or out. */
fdy_status ex_prepare_staging(fdy_executor *x, fdy_error *e) {
  x->staging = calloc(x->tensor_count + 1, sizeof(*x->staging));
  if (!x->staging) {
    return ex_oom(e);
  }
  for (size_t i = 0; i < x->command_count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    if (c->kind != FDY_CMD_COPY_INPUT && c->kind != FDY_CMD_COPY_OUTPUT) {
      continue;
    }
    uint32_t t = c->u.copy.tensor.v;
    ex_staging *s = &x->staging[t];
    if (s->data == NULL) {
      fdy_tensor_info info;
      fdy_status st = ex_tensor_info(x->graph, t, &info, e);
      if (st != FDY_OK) {
        return st;
      }
      uint64_t bytes = 0;
      st = fdy_align_up(info.bytes, STAGING_ALIGNMENT, &bytes, e);
      if (st != FDY_OK) {
        return st;
      }
      if (bytes > SIZE_MAX ||
          posix_memalign(&s->data, STAGING_ALIGNMENT, (size_t)bytes) != 0) {
        s->data = NULL;
        return ex_oom(e);
      }
      memset(s->data, 0, (size_t)bytes);
      s->bytes = info.bytes;
      x->stats.staging_bytes += bytes;
      st = register_host(x, s->data, bytes, NULL, e);
      if (st != FDY_OK) {
        return st;
      }
    }
    s->input = s->input || c->kind == FDY_CMD_COPY_INPUT;
    s->output = s->output || c->kind == FDY_CMD_COPY_OUTPUT;
    fdy_placement p = fdy_plan_placement(x->plan, c->u.copy.tensor);
    x->cmds[i].host = s->data;
    x->cmds[i].offset = p.offset;
    x->cmds[i].bytes = s->bytes;
  }
  return FDY_OK;
}
