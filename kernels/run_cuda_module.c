/* kernels/run_cuda_module.c -- the entry of moerun-cuda.so, the CUDA + NCCL backend of moe-run
 * as a module that moe_run_backend_module opens only when a run asks for --backend cuda. */
#include "config.h"

#include "moe/run_backend.h"

const char *moe_run_module_version = PACKAGE_VERSION;

moe_run_backend_t *moe_run_module_backend(moe_run_comm_t *c, int dtype, int transport,
                                          char *errbuf, size_t errlen);

moe_run_backend_t *moe_run_module_backend(moe_run_comm_t *c, int dtype, int transport,
                                          char *errbuf, size_t errlen)
{
    return moe_run_backend_cuda(c, dtype, transport, errbuf, errlen);
}
