/* Build provenance recorded at build time (cmake/build_info.cmake). */
#ifndef FOUNDRY_BUILD_INFO_H
#define FOUNDRY_BUILD_INFO_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fdy_build_info {
  const char *version;
  const char *git_commit; /* full hash, or "unknown" outside a checkout */
  int git_dirty;          /* 1 when tracked files had uncommitted changes */
  const char *compiler;   /* "GNU 12.2.0" */
  /* C flags of the build type and warnings; with CUDA also ", CUDA
   * VERSION: " and the CUDA flags, warnings and architectures */
  const char *flags;
  const char *build_type;
  const char *sanitizers; /* "ON" or "OFF" */
  const char *cuda;       /* "ON" when the CUDA backend is built */
  /* Why, in words: the nvcc version and architectures when built, else
   * "configured with FOUNDRY_CUDA=OFF: ..." or "no CUDA compiler found at
   * configure time: put nvcc on PATH or set CUDACXX, then configure a fresh
   * build directory" */
  const char *cuda_note;
} fdy_build_info;

/* Static data; never NULL. */
const fdy_build_info *fdy_build_info_get(void);

#ifdef __cplusplus
}
#endif
#endif
