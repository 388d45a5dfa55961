/* import/import_vllm.c -- vLLM's routed experts as its HTTP API returns them: the JSON
 * response of /v1/completions (or /v1/chat/completions) with --enable-return-routed-experts. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_dense_internal.h"
#include "import_readers_internal.h"
#include "json_internal.h"
#include "util_internal.h"

/*
 * vLLM (docs/training/routed_experts_replay.md, v0.21) adds to each response
 * prompt_routed_experts, [prompt_len][num_moe_layers][top_k] expert ids shared by the choices,
 * and to each choice routed_experts, [gen_len][num_moe_layers][top_k] for its generated
 * tokens; ids of prefix-cached tokens are -1 (their routing was not recomputed), which makes
 * those cells missing. A file holds one response, or several one after the other (a response
 * per line). The prompt's tokens are one sequence; each choice's generated tokens follow them
 * in a sequence of their own, positions counted on from the prompt's. --moe-layers and
 * --first-moe-layer keep layers of arrays over every hidden layer (the merged capturer's),
 * --physical-map maps physical slots.
 */

typedef struct vl_seq {
    size_t off;     /* first number in nums */
    uint64_t T;     /* tokens */
    uint32_t pos0;  /* position of the first */
} vl_seq_t;

typedef struct vl_state {
    double *nums;
    size_t nnum, numcap;
    vl_seq_t *seqs;
    size_t nseqs, seqcap;
    uint32_t L, K;
    uint32_t *sel, nl;
    imp_pmap_t pmap;
    int pmap_by_input;
    int64_t *cell;
    size_t si;
    uint64_t t;
    uint32_t keff;
} vl_state_t;

/* One [tokens][layers][k] array (or an empty list) as a sequence. */
static int add_seq(moe_importer_t *im, vl_state_t *s, const jobj_t *o, const jval_t *v,
                   const char *what, uint32_t pos0)
{
    if (!v || (v->kind == J_ARR && !v->rows && !v->n))
        return 0; /* no routed experts here (an empty prompt, a choice of no tokens) */
    if (v->kind != J_ARR3 || !v->rows || !v->cols)
        return imp_fail(im, MOE_EFORMAT, "%s is not a [tokens][layers][top_k] list of "
                        "expert ids", what);
    if (s->L && (v->rows != s->L || v->cols != s->K))
        return imp_fail(im, MOE_EFORMAT, "%s is [%u][%u][%u], the first array [..][%u][%u]",
                        what, v->planes, v->rows, v->cols, s->L, s->K);
    if (v->rows > MOE_TRACE_MAX_LAYERS * 16u || v->cols > MOE_TRACE_MAX_TOPK)
        return imp_fail(im, MOE_ERANGE, "%s of %u layers, top-%u: out of range", what, v->rows,
                        v->cols);
    s->L = v->rows;
    s->K = v->cols;
    if (util_grow((void **)&s->nums, &s->numcap, s->nnum + v->n, sizeof *s->nums) < 0 ||
        util_grow((void **)&s->seqs, &s->seqcap, s->nseqs + 1, sizeof *s->seqs) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    memcpy(s->nums + s->nnum, o->nums + v->off, v->n * sizeof *s->nums);
    s->seqs[s->nseqs++] = (vl_seq_t){s->nnum, v->planes, pos0};
    s->nnum += v->n;
    return 0;
}

/* The choices of a response: each an object, its routed_experts after the prompt's tokens. */
static int add_choices(moe_importer_t *im, vl_state_t *s, const jval_t *c, uint32_t pos0,
                       size_t resp, int *found)
{
    const char *p = c->s;
    if (*p != '[')
        return imp_fail(im, MOE_EFORMAT, "response %zu: 'choices' is not a list", resp);
    char what[64];
    jobj_t o;
    memset(&o, 0, sizeof o);
    int st = 0;
    for (p = jtok_ws(p + 1); st == 0 && *p != ']'; p = jtok_ws(p)) {
        jval_t v;
        const char *e = *p == '{' ? jtok_value(&o, p, &v) : NULL;
        char *text = e ? malloc((size_t)(e - p) + 1) : NULL;
        if (!e)
            st = imp_fail(im, MOE_EFORMAT, "response %zu: a choice is not an object", resp);
        else if (!text)
            st = imp_fail(im, MOE_ENOMEM, "out of memory");
        if (st == 0) {
            memcpy(text, p, (size_t)(e - p));
            text[e - p] = '\0';
            const char *at;
            if (jtok_obj_parse(&o, text, &at) < 0)
                st = imp_fail(im, o.oom ? MOE_ENOMEM : MOE_EFORMAT, "response %zu: a choice is "
                              "malformed", resp);
            snprintf(what, sizeof what, "response %zu, choice %zu: 'routed_experts'", resp,
                     s->nseqs);
            *found |= st == 0 && jtok_get(&o, "routed_experts") != NULL;
            if (st == 0)
                st = add_seq(im, s, &o, jtok_get(&o, "routed_experts"), what, pos0);
        }
        free(text);
        p = e ? jtok_ws(e) : p;
        if (st == 0 && *p == ',')
            p++;
        else if (st == 0 && *p != ']')
            st = imp_fail(im, MOE_EFORMAT, "response %zu: malformed 'choices'", resp);
    }
    free(o.nums);
    return st;
}

/* Every response of the text, one after the other. */
static int read_responses(moe_importer_t *im, vl_state_t *s, char *text)
{
    jobj_t o;
    memset(&o, 0, sizeof o);
    int st = 0;
    size_t resp = 0;
    for (char *p = (char *)jtok_ws(text); st == 0 && *p; p = (char *)jtok_ws(p), resp++) {
        jval_t v;
        const char *e = *p == '{' ? jtok_value(&o, p, &v) : NULL;
        if (!e) {
            st = imp_fail(im, MOE_EFORMAT, "response %zu: not a JSON object", resp);
            break;
        }
        char keep = *e;
        *(char *)e = '\0';
        const char *at;
        if (jtok_obj_parse(&o, p, &at) < 0) {
            st = o.oom ? imp_fail(im, MOE_ENOMEM, "out of memory")
                       : imp_fail(im, MOE_EFORMAT, "response %zu: malformed JSON at byte %zu",
                                  resp, (size_t)(at - text) + 1);
        } else {
            const jval_t *pr = jtok_get(&o, "prompt_routed_experts"), *ch = jtok_get(&o, "choices");
            size_t before = s->nseqs;
            char what[64];
            snprintf(what, sizeof what, "response %zu: 'prompt_routed_experts'", resp);
            st = add_seq(im, s, &o, pr, what, 0);
            uint32_t P = s->nseqs > before ? (uint32_t)s->seqs[before].T : 0;
            int found = pr != NULL;
            if (st == 0 && ch && ch->kind == J_OTHER)
                st = add_choices(im, s, ch, P, resp, &found);
            if (st == 0 && !found)
                st = imp_fail(im, MOE_EFORMAT, "response %zu: no routed experts (neither "
                              "'prompt_routed_experts' nor a choice's 'routed_experts': serve "
                              "with --enable-return-routed-experts)", resp);
        }
        *(char *)e = keep;
        p = (char *)e;
    }
    free(o.nums);
    if (st == 0 && !s->nseqs)
        st = imp_fail(im, MOE_EEMPTY, "no tokens in input (no routed experts in the "
                      "responses)");
    return st;
}

static int vl_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    vl_state_t *s = im->state;
    uint32_t lim = imp_id_limit(im);
    while (s->si < s->nseqs) {
        const vl_seq_t *q = &s->seqs[s->si];
        if (s->t == q->T) {
            s->si++;
            s->t = 0;
            continue;
        }
        if (s->t == 0)
            im->rep.sequences++;
        uint32_t missing = 0;
        for (uint32_t j = 0; j < s->nl; j++) {
            uint32_t l = s->sel[j];
            const double *v = s->nums + q->off + (s->t * s->L + l) * s->K;
            for (uint32_t k = 0; k < s->K; k++) {
                int64_t x = v[k] >= -1 && v[k] < 1e9 && v[k] == (double)(int64_t)v[k]
                                ? (int64_t)v[k] : -2;
                if (x >= 0 && s->pmap.id && imp_pmap_id(&s->pmap, s->pmap_by_input ? l : j, x,
                                                        &x))
                    return imp_fail(im, MOE_ERANGE, "sequence %zu, token %llu, layer %u: "
                                    "physical slot %g out of range (%u slots)", s->si,
                                    (unsigned long long)s->t, l, v[k], s->pmap.cols);
                s->cell[k] = x;
            }
            int64_t bad;
            int c = imp_cell_ids(s->cell, s->K, s->keff, lim, r->ids + (size_t)j * s->keff,
                                 &im->rep.max_id, &bad);
            if (c < 0) {
                char where[96];
                snprintf(where, sizeof where, "sequence %zu, token %llu, layer %u", s->si,
                         (unsigned long long)s->t, l);
                return imp_fail_cell(im, where, c, bad);
            }
            if (c == 1) {
                imp_set_missing(r, j, s->keff, 0);
                missing++;
            }
        }
        r->seq = im->seq_base + (uint32_t)s->si;
        r->pos = q->pos0 + (uint32_t)s->t++;
        r->step = r->rank = 0;
        if (imp_keep(im, r, missing))
            return 1;
    }
    return 0;
}

static void vl_free(moe_importer_t *im)
{
    vl_state_t *s = im->state;
    if (!s)
        return;
    free(s->nums);
    free(s->seqs);
    free(s->sel);
    free(s->cell);
    imp_pmap_free(&s->pmap);
    free(s);
    im->state = NULL;
}

static const imp_ops_t vl_ops = {vl_next, vl_free};

int imp_vllm_open(moe_importer_t *im)
{
    vl_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->state = s;
    im->ops = &vl_ops;
    char *text = NULL, *line;
    size_t n = 0, cap = 0, len;
    int st;
    while ((st = moe_lines_next(im->lines, &line, &len)) == 1) {
        if (n + len + 2 > ((size_t)1 << 30))
            return imp_fail(im, MOE_ERANGE, "a response of more than 1 GiB");
        if (util_grow((void **)&text, &cap, n + len + 2, 1) < 0) {
            free(text);
            return imp_fail(im, MOE_ENOMEM, "out of memory");
        }
        memcpy(text + n, line, len);
        n += len;
        text[n++] = '\n';
        text[n] = '\0';
    }
    if (st < 0) {
        free(text);
        return imp_fail_read(im, "input", st);
    }
    if (!text)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    st = memchr(text, '\0', n) ? imp_fail(im, MOE_EFORMAT, "a NUL byte in the JSON")
                               : read_responses(im, s, text);
    free(text);
    if (st < 0)
        return st;
    if ((st = imp_select_layers(im, s->L, &s->sel, &s->nl)) < 0 ||
        (st = imp_pmap_load(im, s->L, s->nl, &s->pmap, &s->pmap_by_input)) < 0)
        return st;
    if (!s->nl || s->nl > MOE_TRACE_MAX_LAYERS)
        return imp_fail(im, MOE_ERANGE, "%u layers kept (1..%u supported)", s->nl,
                        MOE_TRACE_MAX_LAYERS);
    /* k: the most ids a cell holds (-1 pads cached rows) */
    uint32_t keff = 0;
    for (size_t i = 0; i < s->nnum && keff < s->K; i += s->K) {
        uint32_t m = 0;
        for (uint32_t k = 0; k < s->K; k++)
            m += s->nums[i + k] != -1;
        keff = m > keff ? m : keff;
    }
    s->keff = keff ? keff : s->K;
    if (!(s->cell = malloc(s->K * sizeof *s->cell)))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->hdr.layers = s->nl;
    im->hdr.topk = s->keff;
    uint64_t tokens = 0;
    for (size_t i = 0; i < s->nseqs; i++)
        tokens += s->seqs[i].T;
    st = imp_comment(im, "vllm: routed experts of %zu sequences (prompt and choices), %llu "
                     "tokens x %u layers x top-%u; -1 (prefix-cached) cells missing", s->nseqs,
                     (unsigned long long)tokens, s->L, s->K);
    if (st == 0 && (im->opts.moe_layers || im->opts.first_moe_given))
        st = imp_layers_comment(im, s->sel, s->nl, s->L);
    if (st == 0 && s->pmap.id)
        st = imp_comment(im, "vllm: ids are physical slots, mapped by --physical-map %.200s",
                         im->opts.physical_map);
    return st;
}
