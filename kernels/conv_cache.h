/* kernels/conv_cache.h -- the CUDA backend's converted copies of fp32 weight matrices (bf16
 * or fp16 for the tensor-core FFN), as plain C over three callbacks, so that the CPU test suite
 * (tests/unit/test_conv_cache) checks when it allocates, converts and frees without a GPU.
 *
 * A copy is made on a matrix's first use. When bytes of its fp32 source are written (an
 * upload, a copy, a kernel's output, an all-to-all that lands there) the copy goes stale but
 * keeps its memory, and the next use converts into it again: the data-centric mode fetches
 * other experts into the same buffers every layer, and freeing and allocating their copies
 * each time would stall the device (cudaFree waits for it) for nothing. Memory is released
 * when the source buffer is freed, or when a stale copy is too small for the matrix now
 * asked for at its source. */
#ifndef MOE_CONV_CACHE_H
#define MOE_CONV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct moe_conv_ops {
    void *ctx;
    /* device memory for n converted elements; NULL on failure */
    void *(*alloc)(void *ctx, size_t n);
    void (*free)(void *ctx, void *p);
    /* convert n floats at src into dst; 0 or an error code */
    int (*convert)(void *ctx, const float *src, size_t n, void *dst);
} moe_conv_ops_t;

typedef struct moe_conv_entry {
    const float *src;
    size_t n, cap; /* elements converted, elements the memory holds */
    void *conv;
    int stale;
} moe_conv_entry_t;

typedef struct moe_conv_cache {
    moe_conv_ops_t ops;
    moe_conv_entry_t *e;
    size_t n, cap;
} moe_conv_cache_t;

/* An empty cache using ops. */
void moe_conv_init(moe_conv_cache_t *c, const moe_conv_ops_t *ops);
/* The converted copy of the n floats at src (made, or made again if stale). Returns NULL and
 * the callbacks' error in *err (or -1 for host memory) on failure. */
const void *moe_conv_get(moe_conv_cache_t *c, const float *src, size_t n, int *err);
/* Bytes [p, p + bytes) of some fp32 buffer were written: copies of sources overlapping them are
 * stale. */
void moe_conv_written(moe_conv_cache_t *c, const void *p, size_t bytes);
/* The buffer at p is freed: its copies' memory is released. */
void moe_conv_freed(moe_conv_cache_t *c, const void *p);
/* Release every copy and the cache's own memory. */
void moe_conv_release(moe_conv_cache_t *c);

#ifdef __cplusplus
}
#endif
#endif
