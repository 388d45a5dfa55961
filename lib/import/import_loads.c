/* import/import_loads.c -- other systems' per-layer expert loads: vLLM's EPLB load window
 * (safetensors) and SGLang's logical_count (JSON), slots mapped to logical experts. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "import_dense.h"
#include "import_internal.h"
#include "json_internal.h"

/* A JSON input's text, NUL-terminated (at most 1 GiB). */
static int json_text(moe_importer_t *im, char **text)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    int st = imp_src_slurp(im->src, (size_t)1 << 30, &buf, &n);
    if (st < 0)
        return imp_fail_read(im, "input", st);
    char *t = realloc(buf, n + 1);
    if (!t) {
        free(buf);
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    }
    t[n] = '\0';
    *text = t;
    return 0;
}

/* The first of keys[] that the object holds as a 2-D or 3-D array of numbers, as a tensor. */
static int json_array(moe_importer_t *im, const char *const *keys, int nkeys, imp_tensor_t *out)
{
    char *text = NULL;
    int st = json_text(im, &text);
    jobj_t o = {0};
    const char *at;
    if (st == 0 && jtok_obj_parse(&o, text, &at) < 0)
        st = o.oom ? imp_fail(im, MOE_ENOMEM, "out of memory")
                   : imp_fail(im, MOE_EFORMAT, "malformed JSON at byte %zu",
                              (size_t)(at - text));
    const jval_t *v = NULL;
    for (int i = 0; st == 0 && !v && i < nkeys; i++)
        v = jtok_get(&o, keys[i]);
    if (st == 0 && (!v || (v->kind != J_ARR3 && (v->kind != J_ARR || !v->rows))))
        st = imp_fail(im, MOE_EFORMAT, "no \"%s\" array of [layers][experts] (or [steps]"
                      "[layers][experts]) numbers", keys[0]);
    if (st == 0 && !(out->v = malloc((v->n ? v->n : 1) * sizeof *out->v)))
        st = imp_fail(im, MOE_ENOMEM, "out of memory");
    if (st == 0) {
        out->nd = v->kind == J_ARR3 ? 3 : 2;
        out->dim[0] = v->kind == J_ARR3 ? v->planes : v->rows;
        out->dim[1] = v->kind == J_ARR3 ? v->rows : v->cols;
        out->dim[2] = v->cols;
        out->n = v->n;
        if (v->n) /* an empty array has no numbers at all (o.nums NULL) */
            memcpy(out->v, o.nums + v->off, v->n * sizeof *out->v);
    }
    free(o.nums);
    free(text);
    return st;
}

int imp_loads_read(moe_importer_t *im, moe_importer_t *map, uint32_t experts, moe_loads_t *out)
{
    static const char *const count_keys[] = {"logical_count"};
    static const char *const map_keys[] = {"physical_to_logical_map", "phy2log"};
    imp_tensor_t t = {0}, m = {0};
    int st = im->prefix[0] == '{' ? json_array(im, count_keys, 1, &t)
                                  : imp_safetensors_tensor(im, "expert_load_window", &t);
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
    if (st == 0 && map) {
        st = json_array(map, map_keys, 2, &m);
        if (st == 0 && (m.nd != 2 || m.dim[0] != L || m.dim[1] != P))
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
    if (st == 0 && !map)
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
            uint64_t *to = &out->load[l * experts + (map ? (uint32_t)m.v[l * P + s] : s)];
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
