/* import/import_map.c -- a table of numbers under a known key, in every form SGLang's
 * --init-expert-location takes (a torch.save dict, a JSON file, inline JSON) and EPLB's JSON:
 * the expert maps and loads that placements and load fits read. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "import_dense_internal.h"
#include "import_readers_internal.h"
#include "json_internal.h"
#include "pt_internal.h"

/*
 * SGLang (python/sglang/srt/eplb/expert_location.py, compute_initial_expert_location_metadata)
 * reads --init-expert-location as torch.load(weights_only=True) for a name ending in .pt,
 * json.loads of the file for .json and of the string itself otherwise, and looks in the dict
 * for physical_to_logical_map (init_by_mapping, every key passed on as a keyword argument) or
 * logical_count (init_by_eplb); the stat recorder's own dump (expert_distribution.py,
 * _StatAccumulator.dump: {'rank', 'logical_count', 'average_utilization_rate_over_window'}) is
 * such a file. Values are tensors or (nested) lists. Here the form comes from the content:
 * a zip archive is torch.save's, anything else JSON; a name that is no file and starts with
 * '{' is the JSON itself.
 */

#define TABLE_MAX_CELLS ((uint64_t)1 << 30)

/* Which of keys[] names k (klen bytes); -1 if none. */
static int key_index(const char *k, size_t klen, const char *const *keys, int nkeys)
{
    for (int i = 0; i < nkeys; i++)
        if (strlen(keys[i]) == klen && !memcmp(keys[i], k, klen))
            return i;
    return -1;
}

/* ------------------------------------------------------------------ JSON */

int imp_table_json(moe_importer_t *im, const char *text, const char *const *keys, int nkeys,
                   moe_table_t *out)
{
    jobj_t o;
    memset(&o, 0, sizeof o);
    const char *at = text;
    int st = 0;
    if (*jtok_ws(text) != '{')
        st = imp_fail(im, MOE_EFORMAT, "not a JSON object (expected a dict with '%s')",
                      keys[0]);
    else if (jtok_obj_parse(&o, text, &at) < 0)
        st = o.oom ? imp_fail(im, MOE_ENOMEM, "out of memory")
             : o.dup ? imp_fail(im, MOE_EFORMAT, "duplicate key \"%.*s\"",
                                (int)(o.duplen < 40 ? o.duplen : 40), o.dup)
                     : imp_fail(im, MOE_EFORMAT, "malformed JSON at byte %zu",
                                (size_t)(at - text) + 1);
    const jval_t *v = NULL;
    out->nkeys = st ? 0 : (uint32_t)o.n;
    for (int i = 0; !st && i < o.n; i++) {
        int k = key_index(o.f[i].key, o.f[i].klen, keys, nkeys);
        if (k >= 0 && !v) {
            v = &o.f[i].v;
            out->key = k;
        } else if (k < 0 && !out->other[0]) {
            snprintf(out->other, sizeof out->other, "%.*s",
                     (int)(o.f[i].klen < 40 ? o.f[i].klen : 40), o.f[i].key);
        }
    }
    if (!st && !v)
        st = imp_fail(im, MOE_EFORMAT, "no '%s'%s%s", keys[0], nkeys > 1 ? " or '" : "",
                      nkeys > 1 ? keys[1] : "");
    if (!st && v->kind != J_ARR3 && (v->kind != J_ARR || !v->rows))
        st = imp_fail(im, MOE_EFORMAT, "'%s' is not a list of equally long lists of numbers "
                      "(2 or 3 levels)", keys[out->key]);
    if (!st) {
        out->nd = v->kind == J_ARR3 ? 3 : 2;
        out->dim[0] = v->kind == J_ARR3 ? v->planes : v->rows;
        out->dim[1] = v->kind == J_ARR3 ? v->rows : v->cols;
        out->dim[2] = v->kind == J_ARR3 ? v->cols : 1;
        out->n = v->n;
        if (!(out->v = malloc((v->n ? v->n : 1) * sizeof *out->v)))
            st = imp_fail(im, MOE_ENOMEM, "out of memory");
        else if (v->n)
            memcpy(out->v, o.nums + v->off, v->n * sizeof *out->v);
    }
    free(o.nums);
    return st;
}

/* ------------------------------------------------------------------ torch.save */

double imp_pt_double(const pt_tensor_t *t, const uint64_t *idx)
{
    if (t->dtype <= PT_I64 || t->dtype == PT_BOOL8)
        return (double)pt_tensor_i64(t, idx);
    uint64_t u = pt_tensor_bits(t, idx);
    int kind = t->dtype == PT_F16 ? IMP_F16 : t->dtype == PT_BF16 ? IMP_BF16
               : t->dtype == PT_F32 ? IMP_F32 : IMP_F64;
    return imp_float_bits(kind, u);
}

/* Numbers of a value: a 2-D or 3-D tensor, or lists of lists (of lists) of ints or floats, in
 * C order; the shape into out. */
static int pt_numbers(moe_importer_t *im, const pt_val_t *v, const char *key, moe_table_t *out)
{
    if (v->kind == PT_TENSOR) {
        const pt_tensor_t *t = v->t;
        if (t->ndim != 2 && t->ndim != 3)
            return imp_fail(im, MOE_EFORMAT, "'%s' is a %d-D tensor, not 2-D or 3-D", key,
                            t->ndim);
        uint64_t n = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (!t->shape[d] || t->shape[d] > TABLE_MAX_CELLS || (n *= t->shape[d]) > TABLE_MAX_CELLS)
                return imp_fail(im, MOE_ERANGE, "'%s' of an empty or too large shape", key);
            out->dim[d] = t->shape[d];
        }
        out->nd = (uint32_t)t->ndim;
        out->dim[2] = t->ndim == 3 ? t->shape[2] : 1;
        if (!(out->v = malloc(n * sizeof *out->v)))
            return imp_fail(im, MOE_ENOMEM, "out of memory");
        out->n = n;
        uint64_t idx[3] = {0, 0, 0};
        for (uint64_t i = 0; i < n; i++) {
            out->v[i] = imp_pt_double(t, idx);
            for (int d = t->ndim - 1; d >= 0 && ++idx[d] == t->shape[d]; d--)
                idx[d] = 0;
        }
        return 0;
    }
    /* nested lists: rows of equal length, each a list of numbers (or of such rows) */
    if ((v->kind != PT_LIST && v->kind != PT_TUPLE) || !v->n)
        return imp_fail(im, MOE_EFORMAT, "'%s' is a %s, not a tensor or a list of lists", key,
                        pt_kind_name(v->kind));
    const pt_val_t *r0 = v->items[0];
    int deep = (r0->kind == PT_LIST || r0->kind == PT_TUPLE) && r0->n &&
               (r0->items[0]->kind == PT_LIST || r0->items[0]->kind == PT_TUPLE);
    uint64_t d1 = (r0->kind == PT_LIST || r0->kind == PT_TUPLE) ? r0->n : 0;
    uint64_t d2 = deep ? r0->items[0]->n : 1;
    if (!d1 || !d2 || (uint64_t)v->n * d1 * d2 > TABLE_MAX_CELLS)
        return imp_fail(im, MOE_EFORMAT, "'%s' is not a list of equally long lists", key);
    out->nd = deep ? 3 : 2;
    out->dim[0] = v->n, out->dim[1] = d1, out->dim[2] = d2;
    out->n = v->n * d1 * d2;
    if (!(out->v = malloc(out->n * sizeof *out->v)))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    size_t at = 0;
    for (size_t i = 0; i < v->n; i++) {
        const pt_val_t *r = v->items[i];
        if ((r->kind != PT_LIST && r->kind != PT_TUPLE) || r->n != d1)
            return imp_fail(im, MOE_EFORMAT, "'%s': row %zu is not a list of %llu", key, i,
                            (unsigned long long)d1);
        for (size_t j = 0; j < d1; j++) {
            const pt_val_t *c = r->items[j];
            for (size_t k = 0; k < d2; k++) {
                const pt_val_t *x = deep ? ((c->kind == PT_LIST || c->kind == PT_TUPLE) &&
                                            c->n == d2 ? c->items[k] : NULL) : c;
                if (!x || (x->kind != PT_INT && x->kind != PT_FLOAT && x->kind != PT_BOOL))
                    return imp_fail(im, MOE_EFORMAT, "'%s': row %zu holds something other "
                                    "than numbers in equally long lists", key, i);
                out->v[at++] = x->kind == PT_FLOAT ? x->f : (double)x->i;
            }
        }
    }
    return 0;
}

static int table_torch(moe_importer_t *im, const uint8_t *buf, size_t n,
                       const char *const *keys, int nkeys, moe_table_t *out)
{
    char err[200];
    int st;
    pt_file_t *pt = pt_open(buf, n, &st, err, sizeof err);
    if (!pt)
        return imp_fail(im, st, "%s", err);
    const pt_val_t *root = pt_root(pt), *v = NULL;
    if (root->kind != PT_DICT)
        st = imp_fail(im, MOE_EFORMAT, "torch.save archive holds a %s, not a dict with '%s'",
                      pt_kind_name(root->kind), keys[0]);
    out->nkeys = st ? 0 : (uint32_t)root->n;
    for (size_t i = 0; !st && i < root->n; i++) {
        const pt_val_t *k = root->items[2 * i];
        int ki = k->kind == PT_STR ? key_index(k->s, k->n, keys, nkeys) : -1;
        if (ki >= 0 && !v) {
            v = root->items[2 * i + 1];
            out->key = ki;
        } else if (ki < 0 && !out->other[0]) {
            snprintf(out->other, sizeof out->other, "%.*s",
                     k->kind == PT_STR ? (int)(k->n < 40 ? k->n : 40) : 3,
                     k->kind == PT_STR ? k->s : "(?)");
        }
    }
    if (!st && !v)
        st = imp_fail(im, MOE_EFORMAT, "torch.save dict without '%s'%s%s%s", keys[0],
                      nkeys > 1 ? " or '" : "", nkeys > 1 ? keys[1] : "", nkeys > 1 ? "'" : "");
    if (!st)
        st = pt_numbers(im, v, keys[out->key], out);
    out->torch = 1;
    pt_free(pt);
    return st;
}

int imp_table_read(moe_importer_t *im, const char *const *keys, int nkeys, moe_table_t *out)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    int st = imp_src_slurp(im->src, (size_t)1 << 30, &buf, &n);
    if (st < 0)
        return imp_fail_read(im, "input", st);
    if (n >= 4 && !memcmp(buf, "PK\3\4", 4)) {
        st = table_torch(im, buf, n, keys, nkeys, out);
    } else {
        char *t = realloc(buf, n + 1);
        if (!t) {
            free(buf);
            return imp_fail(im, MOE_ENOMEM, "out of memory");
        }
        buf = (uint8_t *)t;
        t[n] = '\0';
        st = memchr(t, '\0', n) ? imp_fail(im, MOE_EFORMAT, "not JSON (a NUL byte) nor a "
                                           "torch.save archive")
                                : imp_table_json(im, t, keys, nkeys, out);
    }
    free(buf);
    return st;
}

int imp_pmap_load(moe_importer_t *im, uint32_t in_layers, uint32_t kept, imp_pmap_t *m,
                  int *by_input)
{
    static const char *const keys[] = {"physical_to_logical_map", "phy2log",
                                       "last_physical_to_logical_map"};
    const char *path = im->opts.physical_map;
    memset(m, 0, sizeof *m);
    *by_input = 0;
    if (!path)
        return 0;
    moe_table_t t;
    memset(&t, 0, sizeof t);
    moe_importer_t sub; /* the map's own reading, its messages named after it */
    memset(&sub, 0, sizeof sub);
    int st = 0;
    const char *p = path;
    while (*p == ' ' || *p == '\n' || *p == '\t')
        p++;
    int fd = *p == '{' ? -1 : moe_open_input(path);
    if (*p == '{') {
        st = imp_table_json(&sub, path, keys, 3, &t);
    } else if (fd < 0) {
        return imp_fail(im, MOE_ESYS, "--physical-map: cannot open '%s': %s", path,
                        strerror(errno));
    } else if (!(sub.src = imp_src_new(fd, NULL, 0))) {
        close(fd);
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    } else {
        st = imp_table_read(&sub, keys, 3, &t);
    }
    imp_src_free(sub.src);
    if (fd > 2)
        close(fd);
    if (st < 0) {
        st = imp_fail(im, st, "--physical-map '%.200s': %s", *p == '{' ? "(inline)" : path,
                      sub.err);
    } else if (t.nd != 2 || (t.dim[0] != in_layers && t.dim[0] != kept) || !t.dim[1] ||
               t.dim[1] > MOE_TRACE_MAX_EXPERTS) {
        st = imp_fail(im, MOE_EFORMAT, "--physical-map: '%s' must be [layers][slots], a row "
                      "per input layer (%u) or per kept layer (%u): it is %s%llu x %llu",
                      keys[t.key], in_layers, kept, t.nd == 3 ? "3-D, " : "",
                      (unsigned long long)t.dim[0], (unsigned long long)t.dim[1]);
    } else if (!(m->id = malloc(t.n * sizeof *m->id))) {
        st = imp_fail(im, MOE_ENOMEM, "out of memory");
    } else {
        m->rows = (uint32_t)t.dim[0];
        m->cols = (uint32_t)t.dim[1];
        *by_input = t.dim[0] == in_layers;
        for (uint64_t i = 0; i < t.n && st == 0; i++) {
            double v = t.v[i];
            if (!(v >= 0 && v < MOE_TRACE_MAX_EXPERTS && v == (double)(int32_t)v))
                st = imp_fail(im, MOE_EFORMAT, "--physical-map: row %llu slot %llu: %g is not "
                              "an expert id", (unsigned long long)(i / m->cols),
                              (unsigned long long)(i % m->cols), v);
            else
                m->id[i] = (int32_t)v;
        }
    }
    moe_table_free(&t);
    if (st < 0)
        imp_pmap_free(m);
    return st;
}

void imp_pmap_free(imp_pmap_t *m)
{
    free(m->id);
    memset(m, 0, sizeof *m);
}

void moe_table_free(moe_table_t *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}
