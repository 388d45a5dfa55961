/* import/import_loads.c -- other systems' per-layer expert loads: vLLM's EPLB load window
 * (safetensors) and SGLang's logical_count (JSON), slots mapped to logical experts. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "import_dense_internal.h"
#include "import_readers_internal.h"
#include "json_internal.h"

/* A table as a tensor (the shapes and numbers moved). */
static void from_table(moe_table_t *tb, imp_tensor_t *t)
{
    t->nd = tb->nd;
    memcpy(t->dim, tb->dim, sizeof tb->dim);
    t->n = tb->n;
    t->v = tb->v;
    tb->v = NULL;
}

int imp_loads_read(moe_importer_t *im, const char *text, moe_importer_t *map, moe_table_t *mt,
                   uint32_t experts, moe_loads_t *out)
{
    static const char *const count_keys[] = {"logical_count"};
    imp_tensor_t t = {0}, m = {0};
    moe_table_t tb;
    memset(&tb, 0, sizeof tb);
    int st = text ? imp_table_json(im, text, count_keys, 1, &tb)
             : im->prefix[0] == '{' || !memcmp(im->prefix, "PK\3\4", 4)
                 ? imp_table_read(im, count_keys, 1, &tb) /* SGLang: JSON, .pt, stat dump */
                 : imp_safetensors_tensor(im, "expert_load_window", &t);
    if (st == 0 && tb.v)
        from_table(&tb, &t);
    moe_table_free(&tb);
    if (st == 0 && mt)
        from_table(mt, &m);
    if (st == 0 && t.nd != 2 && t.nd != 3)
        st = imp_fail(im, MOE_EFORMAT, "loads must be [windows, layers, slots] or [layers, "
                      "slots], not %u-D", t.nd);
    int ok = st == 0; /* t.dim holds a shape of 2 or 3 dimensions */
    uint64_t W = t.nd == 3 ? t.dim[0] : 1, L = ok ? t.dim[t.nd - 2] : 0,
             P = ok ? t.dim[t.nd - 1] : 0;
    if (st == 0 && (W == 0 || L == 0 || P == 0 || L > MOE_TRACE_MAX_LAYERS ||
                    P > 255u * MOE_TRACE_MAX_EXPERTS))
        st = imp_fail(im, MOE_EFORMAT, "loads of shape [%llu, %llu, %llu] out of range",
                      (unsigned long long)W, (unsigned long long)L, (unsigned long long)P);
    if (st == 0 && mt) {
        if (m.nd != 2 || m.dim[0] != L || m.dim[1] != P)
            st = imp_fail(map, MOE_EFORMAT, "the physical map must be [%llu layers][%llu "
                          "slots], as the loads", (unsigned long long)L, (unsigned long long)P);
        uint32_t top = 0;
        for (uint64_t i = 0; st == 0 && i < m.n; i++) {
            double e = m.v[i];
            if (!(e >= 0 && e < MOE_TRACE_MAX_EXPERTS && e == floor(e)))
                st = imp_fail(map, MOE_EFORMAT, "layer %llu slot %llu: %g is not an expert id",
                              (unsigned long long)(i / P), (unsigned long long)(i % P), e);
            else if ((uint32_t)e + 1 > top)
                top = (uint32_t)e + 1;
        }
        if (st == 0 && experts && top > experts)
            st = imp_fail(map, MOE_ERANGE, "the physical map names expert %u, beyond --experts "
                          "%u", top - 1, experts);
        experts = experts ? experts : top;
    } else if (st == 0 && experts && P != experts) {
        st = imp_fail(im, MOE_EINVAL, "%llu slots per layer for %u experts: give the slots' "
                      "experts with a physical map", (unsigned long long)P, experts);
    }
    if (st == 0 && !mt)
        experts = (uint32_t)P;
    if (st == 0 && !(out->load = calloc(L * experts, sizeof *out->load)))
        st = imp_fail(im, MOE_ENOMEM, "out of memory");
    for (uint64_t i = 0; st == 0 && i < t.n; i++) {
        double x = t.v[i];
        uint64_t l = i / P % L, s = i % P;
        if (!(x >= 0 && x < 9.0e15))
            st = imp_fail(im, MOE_EFORMAT, "window %llu layer %llu slot %llu: load %g is not "
                          "a count", (unsigned long long)(i / P / L), (unsigned long long)l,
                          (unsigned long long)s, x);
        else {
            uint64_t *to = &out->load[l * experts + (mt ? (uint32_t)m.v[l * P + s] : s)];
            uint64_t add = (uint64_t)llround(x);
            if (*to > UINT64_MAX - add) /* a sum over windows and slots past 2^64 */
                st = imp_fail(im, MOE_ERANGE, "layer %llu: an expert's load summed over the "
                              "windows and slots passes 2^64", (unsigned long long)l);
            else
                *to += add;
        }
    }
    if (st == 0) {
        out->layers = (uint32_t)L;
        out->experts = experts;
        out->windows = W;
    } else {
        free(out->load);
        out->load = NULL;
    }
    free(t.v);
    free(m.v);
    return st;
}
