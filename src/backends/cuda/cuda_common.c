/* Parts of the CUDA backend's API that need no CUDA: built in both
 * configurations. */
#include "foundry/cuda.h"

const char *fdy_cuda_host_mode_name(fdy_cuda_host_mode mode) {
  switch (mode) {
  case FDY_CUDA_HOST_REGISTERED:
    return "registered";
  case FDY_CUDA_HOST_STAGED:
    return "staged";
  }
  return "unknown";
}
