/* tests/fuzz/fuzz_pt.c -- libFuzzer target: the torch.save reader (zip + pickle subset) alone,
 * then every integer tensor it finds read end to end. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "import/pt_internal.h"
#include "moe/moe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Read every element of the integer tensors reachable through lists, tuples and dicts
 * (depth-bounded: the memo can make cycles). The reader's rule (tests/README): no tensor view
 * holds more elements than its storage, so a walk of each is bounded by the bytes the file
 * holds; a view past it is a finding. The walk's budget is per input (*budget elements in
 * all, for the views of one storage the memo can repeat), not per tensor. */
static uint64_t walk(const pt_val_t *v, int depth, uint64_t *budget)
{
    uint64_t sum = 0;
    if (!v || depth > 8 || *budget == 0)
        return 0;
    --*budget; /* a visit costs as an element does: the memo can share a list any number of
                * times */
    if (v->kind == PT_TENSOR && pt_tensor_is_int(v)) {
        const pt_tensor_t *t = v->t;
        uint64_t n = 1, idx[PT_MAX_DIMS] = {0};
        for (int d = 0; d < t->ndim; d++)
            n = t->shape[d] && n > UINT64_MAX / t->shape[d] ? UINT64_MAX : n * t->shape[d];
        if (n > t->numel)
            __builtin_trap(); /* a view of more elements than its storage was accepted */
        for (uint64_t i = 0; i < n && *budget > 0; i++, --*budget) {
            uint64_t r = i;
            for (int d = t->ndim; d-- > 0;) {
                idx[d] = r % t->shape[d];
                r /= t->shape[d];
            }
            sum += (uint64_t)pt_tensor_i64(t, idx);
        }
    }
    size_t items = v->kind == PT_DICT ? 2 * v->n : v->kind == PT_LIST || v->kind == PT_TUPLE
                                                       ? v->n : 0;
    for (size_t i = 0; i < items && *budget > 0; i++)
        sum += walk(v->items[i], depth + 1, budget);
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    int st;
    pt_file_t *f = pt_open(data, size, &st, err, sizeof err);
    if (!f)
        return 0;
    uint64_t budget = 64 * (uint64_t)size + 65536;
    volatile uint64_t sink = walk(pt_root(f), 0, &budget);
    (void)sink;
    pt_free(f);
    return 0;
}
