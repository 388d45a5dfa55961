/* import/import_sglang.c -- SGLang expert-distribution recorder dumps (torch.save .pt) import. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_readers_internal.h"
#include "pt_internal.h"

/*
 * SGLang (python/sglang/srt/eplb/expert_distribution.py), run with
 * --expert-distribution-recorder-mode per_token, dumps on /dump_expert_distribution_record one
 * torch.save file per rank, expert_distribution_recorder_{time}_{rank}.pt, of
 *   {'records': [one dict per forward pass], 'last_physical_to_logical_map': int (L, P)}
 * where each record holds forward_pass_id, rank, gatherer_key, input_ids, positions (lists, one
 * entry per token), extend_seq_lens (per-request token counts of an extend pass; None in
 * decode), forward_mode, misc_objects, global_physical_count and topk_ids_of_layer: int32
 * (L, T, 8), L the model's layers (dense ones included: they stay -1), 8 columns whatever the
 * top-k (the unused ones -1). With EPLB the ids are physical slots (P = experts + redundant
 * slots); the map sends them to logical experts (the identity without EPLB). per_pass records
 * hold only global_physical_count and stat mode dumps logical_count (steps, L, E): counts, not
 * routing, refused with a message saying so.
 *
 * The file is read whole (the zip's directory is at its end). Layers where no token of the file
 * routed (dense layers) are left out and the model-layer ids kept are recorded in the header;
 * k is narrowed to the most ids any cell holds. Sequences: each request of an extend pass
 * (extend_seq_lens) is one, numbered in file order; a pass without extend_seq_lens (decode) is
 * one. pos = positions[t], step = forward_pass_id, rank = the record's rank.
 */

typedef struct sg_rec {
    const pt_tensor_t *ids;  /* (L, T, K) */
    uint64_t T;
    const pt_val_t *lens;    /* extend_seq_lens list, or NULL */
    const pt_val_t *pos;     /* positions list, or NULL */
    uint32_t pass, rank;
} sg_rec_t;

typedef struct sg_state {
    uint8_t *buf;
    pt_file_t *pt;
    sg_rec_t *recs;
    size_t nrecs;
    uint32_t L, K, keff, P; /* model layers, recorded columns, trace k, physical slots */
    int64_t *map;           /* L x P logical ids, or NULL */
    uint32_t *layers;       /* model layers kept */
    uint32_t nl;
    int64_t *cell;
    /* cursor */
    size_t ri;
    uint64_t t;
    size_t chunk;           /* index into extend_seq_lens */
    uint64_t chunk_left;    /* tokens left in that request */
    uint32_t seq;           /* next sequence id */
    uint32_t cur_seq;
} sg_state_t;

static int int_val(const pt_val_t *v, int64_t *out)
{
    if (!v || v->kind != PT_INT)
        return -1;
    *out = v->i;
    return 0;
}

/* A record's field as a list of T ints (or None/absent: NULL). */
static int int_list(moe_importer_t *im, size_t ri, const pt_val_t *rec, const char *key,
                    uint64_t T, int sum, const pt_val_t **out)
{
    const pt_val_t *v = pt_dict_get(rec, key);
    *out = NULL;
    if (!v || v->kind == PT_NONE)
        return 0;
    if (v->kind != PT_LIST && v->kind != PT_TUPLE)
        return imp_fail(im, MOE_EFORMAT, "record %zu: '%s' is a %s, not a list", ri, key,
                        pt_kind_name(v->kind));
    uint64_t total = 0;
    for (size_t i = 0; i < v->n; i++) {
        int64_t x;
        if (int_val(v->items[i], &x) < 0 || x < 0 || x > UINT32_MAX)
            return imp_fail(im, MOE_EFORMAT, "record %zu: '%s' holds something other than "
                            "32-bit non-negative ints", ri, key);
        total += (uint64_t)x;
    }
    if (sum ? total != T : v->n != T)
        return imp_fail(im, MOE_EFORMAT, "record %zu: '%s' %s %llu, but topk_ids_of_layer has "
                        "%llu tokens", ri, key, sum ? "sums to" : "has length",
                        (unsigned long long)(sum ? total : v->n), (unsigned long long)T);
    *out = v;
    return 0;
}

/* The dump's kind and last_physical_to_logical_map. */
static int read_map(moe_importer_t *im, sg_state_t *s, const pt_val_t *root)
{
    const pt_val_t *m = pt_dict_get(root, "last_physical_to_logical_map");
    if (!m || m->kind == PT_NONE)
        return 0;
    if (m->kind != PT_TENSOR || m->t->ndim != 2 || !pt_tensor_is_int(m))
        return imp_fail(im, MOE_EFORMAT, "'last_physical_to_logical_map' is not a 2-D integer "
                        "tensor");
    const pt_tensor_t *mt = m->t;
    if (mt->shape[0] != s->L)
        return imp_fail(im, MOE_EFORMAT, "'last_physical_to_logical_map' has %llu layers, the "
                        "records %u", (unsigned long long)mt->shape[0], s->L);
    if (mt->shape[1] == 0 || mt->shape[1] > MOE_TRACE_MAX_EXPERTS)
        return imp_fail(im, MOE_ERANGE, "'last_physical_to_logical_map' has %llu slots",
                        (unsigned long long)mt->shape[1]);
    s->P = (uint32_t)mt->shape[1];
    if (!(s->map = malloc((size_t)s->L * s->P * sizeof *s->map)))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    uint64_t idx[2];
    for (idx[0] = 0; idx[0] < s->L; idx[0]++)
        for (idx[1] = 0; idx[1] < s->P; idx[1]++) {
            int64_t v = pt_tensor_i64(mt, idx);
            if (v < 0 || v >= MOE_TRACE_MAX_EXPERTS)
                return imp_fail(im, MOE_ERANGE, "'last_physical_to_logical_map' layer %llu slot "
                                "%llu: logical expert %lld out of range",
                                (unsigned long long)idx[0], (unsigned long long)idx[1],
                                (long long)v);
            s->map[idx[0] * s->P + idx[1]] = v;
        }
    return 0;
}

/* One record: its tensor's shape against the first, its lists against its tokens. */
static int read_record(moe_importer_t *im, sg_state_t *s, size_t ri, const pt_val_t *rec)
{
    sg_rec_t *r = &s->recs[ri];
    const pt_val_t *tv = pt_dict_get(rec, "topk_ids_of_layer");
    if (!tv && pt_dict_get(rec, "global_physical_count"))
        return imp_fail(im, MOE_EFORMAT, "SGLang per_pass dump: its records hold expert counts "
                        "per forward pass (global_physical_count), not per-token routing "
                        "(record with --expert-distribution-recorder-mode per_token)");
    if (!tv || tv->kind != PT_TENSOR)
        return imp_fail(im, MOE_EFORMAT, "record %zu has no 'topk_ids_of_layer' tensor", ri);
    const pt_tensor_t *t = tv->t;
    if (!pt_tensor_is_int(tv))
        return imp_fail(im, MOE_EFORMAT, "record %zu: topk_ids_of_layer is %s, not an integer "
                        "tensor", ri, pt_dtype_name(t->dtype));
    if (t->ndim != 3)
        return imp_fail(im, MOE_EFORMAT, "record %zu: topk_ids_of_layer has %d dimensions, "
                        "not 3 (layers, tokens, k)", ri, t->ndim);
    if (ri == 0) {
        if (t->shape[0] == 0 || t->shape[0] > MOE_TRACE_MAX_LAYERS || t->shape[2] == 0 ||
            t->shape[2] > 4096)
            return imp_fail(im, MOE_ERANGE, "record 0: topk_ids_of_layer of %llu layers, k = "
                            "%llu (1..%u layers, k 1..4096 supported)",
                            (unsigned long long)t->shape[0], (unsigned long long)t->shape[2],
                            MOE_TRACE_MAX_LAYERS);
        s->L = (uint32_t)t->shape[0];
        s->K = (uint32_t)t->shape[2];
    } else if (t->shape[0] != s->L || t->shape[2] != s->K) {
        return imp_fail(im, MOE_EFORMAT, "record %zu: topk_ids_of_layer is (%llu, %llu, %llu), "
                        "record 0's (%u, ..., %u)", ri, (unsigned long long)t->shape[0],
                        (unsigned long long)t->shape[1], (unsigned long long)t->shape[2], s->L,
                        s->K);
    }
    if (t->shape[1] > UINT32_MAX)
        return imp_fail(im, MOE_ERANGE, "record %zu: topk_ids_of_layer has %llu tokens: "
                        "positions are 32-bit", ri, (unsigned long long)t->shape[1]);
    r->ids = t;
    r->T = t->shape[1];
    int64_t v;
    r->pass = int_val(pt_dict_get(rec, "forward_pass_id"), &v) == 0 && v >= 0 &&
                      v <= UINT32_MAX ? (uint32_t)v : (uint32_t)ri;
    r->rank = int_val(pt_dict_get(rec, "rank"), &v) == 0 && v >= 0 && v <= UINT32_MAX
                  ? (uint32_t)v : 0;
    int st = int_list(im, ri, rec, "positions", r->T, 0, &r->pos);
    if (st == 0)
        st = int_list(im, ri, rec, "extend_seq_lens", r->T, 1, &r->lens);
    const pt_val_t *in = pt_dict_get(rec, "input_ids");
    if (st == 0 && in && (in->kind == PT_LIST || in->kind == PT_TUPLE) && in->n != r->T)
        st = imp_fail(im, MOE_EFORMAT, "record %zu: 'input_ids' has %zu tokens, "
                      "topk_ids_of_layer %llu", ri, in->n, (unsigned long long)r->T);
    return st;
}

/* Cell (l, t) of record r: K raw ids, physical slots mapped to logical experts. */
static int get_cell(moe_importer_t *im, sg_state_t *s, size_t ri, uint32_t l, uint64_t t)
{
    uint64_t idx[3] = {l, t, 0};
    for (uint32_t k = 0; k < s->K; k++) {
        idx[2] = k;
        int64_t v = pt_tensor_i64(s->recs[ri].ids, idx);
        if (v >= 0 && s->map) {
            if (v >= s->P)
                return imp_fail(im, MOE_ERANGE, "record %zu, token %llu, layer %u: physical "
                                "slot %lld out of range (%u slots in "
                                "last_physical_to_logical_map)", ri, (unsigned long long)t, l,
                                (long long)v, s->P);
            v = s->map[(size_t)l * s->P + (size_t)v];
        }
        s->cell[k] = v;
    }
    return 0;
}

/* Over every cell: the layers that route some token and the most ids a cell holds. */
static int scan(moe_importer_t *im, sg_state_t *s)
{
    uint8_t *used = calloc(s->L, 1);
    if (!used)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    uint32_t keff = 0;
    int st = 0;
    for (size_t ri = 0; st == 0 && ri < s->nrecs; ri++)
        for (uint32_t l = 0; st == 0 && l < s->L; l++)
            for (uint64_t t = 0; st == 0 && t < s->recs[ri].T; t++) {
                if ((st = get_cell(im, s, ri, l, t)) < 0)
                    break;
                uint32_t n = 0;
                for (uint32_t k = 0; k < s->K; k++) {
                    if (s->cell[k] < -1)
                        st = imp_fail(im, MOE_ERANGE, "record %zu, token %llu, layer %u: expert "
                                      "id %lld is negative (only -1, padding, may be)", ri,
                                      (unsigned long long)t, l, (long long)s->cell[k]);
                    n += s->cell[k] != -1;
                }
                keff = n > keff ? n : keff;
                used[l] |= n > 0;
            }
    for (uint32_t l = 0; st == 0 && l < s->L; l++)
        if (used[l])
            s->layers[s->nl++] = l;
    free(used);
    if (st == 0 && s->nl == 0)
        st = imp_fail(im, MOE_EEMPTY, "no tokens in input (every id is -1 padding)");
    if (st == 0 && keff > MOE_TRACE_MAX_TOPK)
        st = imp_fail(im, MOE_ERANGE, "cells of %u expert ids: at most %u are supported", keff,
                      MOE_TRACE_MAX_TOPK);
    s->keff = keff;
    return st;
}

/* "0-2,5,7-60": the kept model layers, for the header. */
static void layer_ranges(const sg_state_t *s, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < s->nl && len + 24 < cap;) {
        uint32_t j = i;
        while (j + 1 < s->nl && s->layers[j + 1] == s->layers[j] + 1)
            j++;
        len += (size_t)(j > i ? snprintf(out + len, cap - len, "%s%u-%u", i ? "," : "",
                                         s->layers[i], s->layers[j])
                              : snprintf(out + len, cap - len, "%s%u", i ? "," : "",
                                         s->layers[i]));
        i = j + 1;
    }
}

static int header(moe_importer_t *im, sg_state_t *s)
{
    uint64_t tokens = 0, extend = 0;
    for (size_t i = 0; i < s->nrecs; i++) {
        tokens += s->recs[i].T;
        extend += s->recs[i].lens != NULL;
    }
    char ranges[512];
    layer_ranges(s, ranges, sizeof ranges);
    int st = imp_comment(im, "sglang: expert-distribution recorder dump (per_token), archive "
                         "'%s': %zu records (forward passes, %llu with extend_seq_lens), %llu "
                         "tokens", pt_archive_name(s->pt), s->nrecs, (unsigned long long)extend,
                         (unsigned long long)tokens);
    if (st == 0)
        st = imp_comment(im, "sglang: model layers %s of %u (trace layer i = the i-th of "
                         "them; the others route no token: dense layers)", ranges, s->L);
    if (st == 0 && s->keff < s->K)
        st = imp_comment(im, "sglang: -1 padding: top-%u of %u recorded columns", s->keff,
                         s->K);
    int identity = 1;
    for (size_t i = 0; s->map && i < (size_t)s->L * s->P; i++)
        identity &= s->map[i] == (int64_t)(i % s->P);
    if (st == 0 && s->map)
        st = imp_comment(im, "sglang: ids are physical slots (%u per layer) mapped to logical "
                         "experts through last_physical_to_logical_map%s", s->P,
                         identity ? " (the identity)" : "");
    else if (st == 0)
        st = imp_comment(im, "sglang: no last_physical_to_logical_map: ids taken as logical");
    return st;
}

static int sg_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    sg_state_t *s = im->state;
    uint32_t lim = imp_id_limit(im);
    while (s->ri < s->nrecs) {
        const sg_rec_t *rc = &s->recs[s->ri];
        if (s->t == rc->T) {
            s->ri++;
            s->t = 0;
            s->chunk = 0;
            s->chunk_left = 0;
            continue;
        }
        /* A new sequence at each request of an extend pass, or at the start of a pass. */
        if (rc->lens ? s->chunk_left == 0 : s->t == 0) {
            if (rc->lens)
                while (s->chunk < rc->lens->n && (s->chunk_left = (uint64_t)
                                                      rc->lens->items[s->chunk++]->i) == 0)
                    ;
            s->cur_seq = s->seq++;
            im->rep.sequences++;
        }
        uint32_t missing = 0;
        for (uint32_t j = 0; j < s->nl; j++) {
            int st = get_cell(im, s, s->ri, s->layers[j], s->t);
            if (st < 0)
                return st;
            int64_t bad;
            int c = imp_cell_ids(s->cell, s->K, s->keff, lim, r->ids + (size_t)j * s->keff,
                                 &im->rep.max_id, &bad);
            if (c < 0) {
                char where[96];
                snprintf(where, sizeof where, "record %zu, token %llu, layer %u", s->ri,
                         (unsigned long long)s->t, s->layers[j]);
                return imp_fail_cell(im, where, c, bad);
            }
            if (c == 1) {
                imp_set_missing(r, j, s->keff, 0);
                missing++;
            }
        }
        r->seq = s->cur_seq;
        r->pos = rc->pos ? (uint32_t)rc->pos->items[s->t]->i : (uint32_t)s->t;
        r->step = rc->pass;
        r->rank = rc->rank;
        s->t++;
        if (rc->lens)
            s->chunk_left--;
        if (imp_keep(im, r, missing))
            return 1;
    }
    return 0;
}

static void sg_free(moe_importer_t *im)
{
    sg_state_t *s = im->state;
    if (!s)
        return;
    pt_free(s->pt);
    free(s->buf);
    free(s->recs);
    free(s->map);
    free(s->layers);
    free(s->cell);
    free(s);
    im->state = NULL;
}

static const imp_ops_t sg_ops = {sg_next, sg_free};

/* The dump's records, or the reason this archive holds none. */
static int read_records(moe_importer_t *im, sg_state_t *s, const pt_val_t *root,
                        size_t bytes)
{
    if (root->kind != PT_DICT)
        return imp_fail(im, MOE_EFORMAT, "torch.save archive holds a %s, not an SGLang "
                        "expert-distribution dump (a dict with 'records')",
                        pt_kind_name(root->kind));
    if (pt_dict_get(root, "logical_count"))
        return imp_fail(im, MOE_EFORMAT, "SGLang stat-mode dump: 'logical_count' holds expert "
                        "counts (steps x layers x experts), not per-token routing (record with "
                        "--expert-distribution-recorder-mode per_token)");
    const pt_val_t *recs = pt_dict_get(root, "records");
    if (!recs)
        return imp_fail(im, MOE_EFORMAT, "torch.save archive is not an SGLang "
                        "expert-distribution dump (no 'records' key)");
    if (recs->kind != PT_LIST)
        return imp_fail(im, MOE_EFORMAT, "'records' is a %s, not a list",
                        pt_kind_name(recs->kind));
    if (recs->n == 0)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input (no records)");
    if (!(s->recs = calloc(recs->n, sizeof *s->recs)))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    s->nrecs = recs->n;
    uint64_t cells = 0;
    for (size_t i = 0; i < recs->n; i++) {
        if (recs->items[i]->kind != PT_DICT)
            return imp_fail(im, MOE_EFORMAT, "record %zu is a %s, not a dict", i,
                            pt_kind_name(recs->items[i]->kind));
        int st = read_record(im, s, i, recs->items[i]);
        if (st < 0)
            return st;
        /* Every id the records declare is read: with a record repeated through the pickle's
         * memo, a few bytes would stand for any number of tokens. Each id the file really
         * holds takes at least a byte of it, so more ids than bytes is refused. */
        uint64_t per = (uint64_t)s->L * s->K; /* <= 2^28: L and K are bounded above */
        if (s->recs[i].T > (bytes - cells) / per)
            return imp_fail(im, MOE_EFORMAT, "record %zu: the records declare more expert ids "
                            "than the file has bytes (%zu): a record or tensor repeated", i,
                            bytes);
        cells += per * s->recs[i].T;
    }
    return 0;
}

int imp_sglang_open(moe_importer_t *im)
{
    sg_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->state = s;
    im->ops = &sg_ops;
    size_t n;
    int st = imp_torch_load(im, &s->buf, &s->pt, &n);
    if (st < 0)
        return st;
    const pt_val_t *root = pt_root(s->pt);
    if ((st = read_records(im, s, root, n)) < 0 || (st = read_map(im, s, root)) < 0)
        return st;
    if (!(s->cell = malloc(s->K * sizeof *s->cell)) ||
        !(s->layers = malloc(s->L * sizeof *s->layers)))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    if ((st = scan(im, s)) < 0)
        return st;
    im->hdr.layers = s->nl;
    im->hdr.topk = s->keff;
    return header(im, s);
}
