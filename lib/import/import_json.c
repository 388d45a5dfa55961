/* import/import_json.c -- JSONL router logs: a vLLM patch's (speculative-moe) and
 * Megatron-Core's router traces. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "import_readers_internal.h"
#include "json_internal.h"
#include "util_internal.h"

/*
 * Both formats hold one JSON object per line and one (layer, token) cell or one (layer, batch
 * of tokens) block per object, so tokens are assembled in a buffer (imp_grid_t) one *unit* at a
 * time: memory follows the unit, not the file. A unit's records must be contiguous; a unit key
 * seen again after another unit is an error rather than a silent second sequence.
 *
 * "vLLM" below is the format named jsonl: the routing log of one research project's vLLM patch
 * (speculative-moe: an expert-selection logger added to vLLM's fused-MoE layer and a collection
 * script), not anything stock vLLM writes; the vl_ names are kept for it.
 * vLLM ({"dataset", "problem_id", "layer", "experts", "gating_probs", "token_idx"|"token_pos"}):
 * a unit is a sequence = (dataset, problem_id). Two record orders exist. Files grouped by
 * layer (token index restarting at each layer, layers non-decreasing) hold one pass per
 * problem. Files in execution order hold a prefill pass over all layers and then one pass per
 * decode step, each starting over at layer 0 with token_pos 0. The order is decided per problem
 * once it is buffered: if its layers never go down it is grouped, else a new pass starts each
 * time the layer goes down. Tokens are (pass, token index) and are written in that order with
 * pos = their rank in it (counting tokens later dropped, so positions stay true). seq =
 * problem_id (a number, or the names rule of imp_names_seq); the problems of a second dataset
 * are shifted past the largest seq already used so sequences stay distinct.
 *
 * Megatron-Core ({"step", "block", "mtp_idx", "layer", "rank", "num_tokens", "topk",
 * "top_indices", "top_probs"|"scores", "token"|"token_idx", "seq", "micro_batch"}; the router
 * tracer of megatron/core/transformer/moe/router_trace.py writes step, stage, block, layer,
 * rank, num_tokens, topk and a [tokens][K] top_indices, plus mtp_idx on MTP records): a unit
 * is one training (or decode) step. top_indices is a list of K ids (one token) or a [tokens][K]
 * list (a batch). A token is (rank, micro_batch, seq, token index); its index is the explicit
 * token/token_idx (the first row's, for a batch) or else counts the tokens already given for
 * the same (rank, micro_batch, seq, layer), so records written layer by layer for the same
 * batch line up. Tokens are written in key order with step and rank from the record, pos =
 * token index, and seq = seq_base + a running index of the (step, rank, micro_batch, seq)
 * groups, because a sample index alone repeats from step to step. Weights come from
 * top_probs, else from scores when it has top_indices' shape (a scores list over all experts
 * is the router's full output and is not a per-choice weight).
 *
 * Megatron layers: only the MoE layers have a router, so the layer ids of a model with dense
 * layers between them are sparse; the distinct ids of the first step, sorted, become layers
 * 0..L-1 (an @CO line records them) and every token is complete. Multi-token-prediction
 * records (block "mtp") route the same tokens through the MTP heads' own MoE layers; they are
 * skipped (and counted) unless opts.mtp, which keeps them as layers after the decoder's, in
 * (mtp_idx, layer) order. Activation recompute runs a layer's forward again in the backward
 * pass and the tracer's hook fires again: a record repeating one of its step (explicit token
 * indices: a (layer, token) cell given twice; counted ones: the same ids for the same layer,
 * rank, micro_batch and seq as an earlier record of the step) is skipped, counted and warned
 * about once through the logger; the first one is kept.
 *
 * vLLM: layers are numbered from the smallest layer id of the first problem. Both: L and K
 * come from the first unit, and a negative id marks a missing cell.
 */

/* Megatron layer ids: decoder layers as written, MTP layers after all of them. */
#define MG_MTP (1ull << 63)

/* ------------------------------------------------------------------ importer state */

typedef struct jent {
    uint64_t layer; /* as in the file */
    imp_key_t key;  /* token key (vLLM: pass, index; Megatron: rank, mb, seq, index) */
    uint64_t line;
    int missing;    /* a negative id: the cell is known missing */
} jent_t;

typedef struct jstate {
    int megatron;
    jobj_t obj;
    const char *line;       /* the line last parsed (s->obj points into it) */
    char *pending;          /* the first line of the next unit, read while ending this one */
    size_t pend_cap;
    uint64_t pend_line;
    int has_pending;
    char *unit, *cand;      /* key of the current unit, and of the line being looked at */
    size_t unit_len, cand_len, unit_cap, cand_cap;
    imp_map_t seen;         /* units already finished (hash, length) */
    jent_t *ent;            /* the unit's records */
    uint16_t *ids;
    float *w;
    size_t n, cap;
    uint32_t L, K;
    uint64_t layer_off;
    int weights, shaped;
    imp_grid_t grid;
    uint32_t *slotpos;      /* vLLM: position of each buffered token */
    size_t slotpos_cap;
    uint32_t seq;           /* vLLM: seq of the unit; Megatron: next group index */
    uint64_t seq_end;       /* vLLM: largest seq used + 1 */
    imp_map_t datasets;     /* vLLM: dataset hash -> index */
    uint32_t *ds_off;
    size_t ds_cap;
    imp_names_t names;
    uint64_t step;          /* Megatron: step of the unit */
    imp_map_t counters;     /* Megatron: (rank, mb, seq, layer) -> tokens given so far */
    uint64_t *cnt;
    size_t cnt_cap;
    imp_key_t group;        /* Megatron: group of the last token written */
    int have_group;
    uint64_t *lids;         /* Megatron: the layer ids of trace layers 0..L-1, ascending */
    imp_map_t recs;         /* Megatron: (ids hash, rank|mb, seq, layer) of the step's records */
    int warned;             /* Megatron: the recompute warning was given */
} jstate_t;

static uint64_t fnv64(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}


static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (util_grow((void **)buf, cap, *len + n + 1, 1) < 0)
        return MOE_ENOMEM;
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

/* A non-negative integer field (absent: dflt, or an error when dflt is negative). */
static int juint(moe_importer_t *im, const jobj_t *o, const char *key, int64_t dflt,
                 uint64_t max, uint64_t lineno, uint64_t *out)
{
    const jval_t *v = jtok_get(o, key);
    if (!v && dflt >= 0) {
        *out = (uint64_t)dflt;
        return 0;
    }
    if (!v)
        return imp_fail(im, MOE_EFORMAT, "line %llu: no '%s'", (unsigned long long)lineno, key);
    if (v->kind != J_NUM || v->num < 0 || v->num > (double)max ||
        v->num != (double)(uint64_t)v->num)
        return imp_fail(im, MOE_EFORMAT, "line %llu: '%s' is not a valid count: '%.*s'",
                        (unsigned long long)lineno, key, (int)(v->len < 40 ? v->len : 40), v->s);
    *out = (uint64_t)v->num;
    return 0;
}

/* K numbers of a list into one cell; returns 1 if an id is negative (missing cell). */
static int cell_ids(moe_importer_t *im, const double *x, uint32_t K, uint64_t lineno,
                    const char *key, uint16_t *ids)
{
    uint32_t lim = imp_id_limit(im);
    int missing = 0;
    for (uint32_t k = 0; k < K; k++) {
        if (!(x[k] > -1e9 && x[k] < 1e9) || x[k] != (double)(int64_t)x[k])
            return imp_fail(im, MOE_EFORMAT, "line %llu: '%s': %g is not an expert id",
                            (unsigned long long)lineno, key, x[k]);
        if (x[k] < 0) {
            missing = 1;
        } else if (x[k] >= lim) {
            char where[80];
            snprintf(where, sizeof where, "line %llu: '%s'", (unsigned long long)lineno, key);
            return imp_fail_id(im, where, (uint64_t)x[k]);
        } else {
            ids[k] = (uint16_t)x[k];
            im->rep.max_id = ids[k] > im->rep.max_id ? ids[k] : im->rep.max_id;
        }
    }
    if (missing)
        for (uint32_t k = 0; k < K; k++)
            ids[k] = MOE_EXPERT_NONE;
    return missing;
}

/* Append one cell to the unit; x holds K ids, wx K weights or NULL. */
static int add_cell(moe_importer_t *im, jstate_t *s, uint64_t layer, const imp_key_t *key,
                    const double *x, const double *wx, uint64_t lineno, const char *idkey)
{
    size_t cap = s->cap;
    if (util_grow((void **)&s->ent, &cap, s->n + 1, sizeof *s->ent) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    if (cap != s->cap) {
        uint16_t *ids = realloc(s->ids, cap * s->K * sizeof *ids);
        float *w = s->weights ? realloc(s->w, cap * s->K * sizeof *w) : NULL;
        if (ids)
            s->ids = ids;
        if (w)
            s->w = w;
        if (!ids || (s->weights && !w))
            return imp_fail(im, MOE_ENOMEM, "out of memory");
        s->cap = cap;
    }
    jent_t *e = &s->ent[s->n];
    e->layer = layer;
    e->key = *key;
    e->line = lineno;
    e->missing = cell_ids(im, x, s->K, lineno, idkey, s->ids + s->n * s->K);
    if (e->missing < 0)
        return e->missing;
    for (uint32_t k = 0; s->weights && k < s->K; k++)
        s->w[s->n * s->K + k] = e->missing ? 0.0f : (float)wx[k];
    s->n++;
    return 0;
}

/* The unit's first shape: K and weights from its first record (checked on every record). */
static int check_k(moe_importer_t *im, jstate_t *s, uint32_t k, int has_w, uint64_t lineno,
                   const char *key)
{
    if (s->K == 0) {
        if (k == 0 || k > MOE_TRACE_MAX_TOPK)
            return imp_fail(im, MOE_EFORMAT, "line %llu: '%s' has %u ids (1..%u supported)",
                            (unsigned long long)lineno, key, k, MOE_TRACE_MAX_TOPK);
        s->K = k;
        s->weights = has_w;
    }
    if (k != s->K)
        return imp_fail(im, MOE_EFORMAT, "line %llu: '%s' has %u ids, expected %u",
                        (unsigned long long)lineno, key, k, s->K);
    if (s->weights && !has_w)
        return imp_fail(im, MOE_EFORMAT, "line %llu: no gate weights (the first record has "
                        "them)", (unsigned long long)lineno);
    return 0;
}

/* ------------------------------------------------------------------ vLLM records */

/* The unit key of a vLLM record: (dataset, problem_id) as written. */
static int vl_unit(jstate_t *s)
{
    const jval_t *ds = jtok_get(&s->obj, "dataset"), *pid = jtok_get(&s->obj, "problem_id");
    s->cand_len = 0;
    if ((ds && append(&s->cand, &s->cand_len, &s->cand_cap, ds->s, ds->len) < 0) ||
        append(&s->cand, &s->cand_len, &s->cand_cap, "\x01", 1) < 0 ||
        (pid && append(&s->cand, &s->cand_len, &s->cand_cap, pid->s, pid->len) < 0))
        return MOE_ENOMEM;
    return 0;
}

/* seq of a new vLLM problem: problem_id, shifted for a dataset after the first. */
static int vl_seq(moe_importer_t *im, jstate_t *s, uint64_t lineno)
{
    const jval_t *ds = jtok_get(&s->obj, "dataset"), *pid = jtok_get(&s->obj, "problem_id");
    imp_key_t dk = {{ds ? fnv64(ds->s, ds->len) : 0, ds ? ds->len : 0, 0, 0}};
    size_t nds = s->datasets.n;
    long d = imp_map_get(&s->datasets, &dk, 1);
    uint32_t seq = im->seq_base;
    if (d < 0 || util_grow((void **)&s->ds_off, &s->ds_cap, s->datasets.n, sizeof *s->ds_off) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    if (s->datasets.n != nds)
        s->ds_off[d] = d == 0 ? 0 : (uint32_t)s->seq_end;
    if (pid && pid->kind == J_NUM) {
        uint64_t v;
        if (juint(im, &s->obj, "problem_id", 0, UINT32_MAX, lineno, &v) < 0)
            return im->status;
        seq = (uint32_t)v;
    } else if (pid && imp_names_seq(&s->names, pid->s, pid->len, &seq) < 0) {
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    }
    if ((uint64_t)seq + s->ds_off[d] > UINT32_MAX)
        return imp_fail(im, MOE_ERANGE, "line %llu: sequence id too large",
                        (unsigned long long)lineno);
    s->seq = seq + s->ds_off[d];
    s->seq_end = s->seq + 1ull > s->seq_end ? s->seq + 1ull : s->seq_end;
    return 0;
}

static int vl_add(moe_importer_t *im, jstate_t *s, uint64_t lineno)
{
    const jobj_t *o = &s->obj;
    const jval_t *ex = jtok_get(o, "experts"), *gp = jtok_get(o, "gating_probs");
    uint64_t layer, tok;
    const char *tk = jtok_get(o, "token_idx") ? "token_idx" : "token_pos";
    int st;
    if ((st = juint(im, o, "layer", -1, UINT32_MAX, lineno, &layer)) < 0 ||
        (st = juint(im, o, tk, -1, UINT32_MAX, lineno, &tok)) < 0)
        return st;
    if (!ex || ex->kind != J_ARR || ex->rows)
        return imp_fail(im, MOE_EFORMAT, "line %llu: 'experts' is not a list of ids",
                        (unsigned long long)lineno);
    if (gp && (gp->kind != J_ARR || gp->rows || gp->n != ex->n))
        return imp_fail(im, MOE_EFORMAT, "line %llu: 'gating_probs' does not match 'experts'",
                        (unsigned long long)lineno);
    if ((st = check_k(im, s, (uint32_t)ex->n, gp != NULL, lineno, "experts")) < 0)
        return st;
    imp_key_t key = {{0, tok, 0, 0}}; /* the pass is set once the problem is complete */
    return add_cell(im, s, layer, &key, o->nums + ex->off, gp ? o->nums + gp->off : NULL,
                    lineno, "experts");
}

/* Passes of a buffered problem (see the top of the file). */
static void vl_passes(jstate_t *s)
{
    size_t i = 1;
    while (i < s->n && s->ent[i].layer >= s->ent[i - 1].layer)
        i++;
    if (i == s->n)
        return; /* grouped by layer: one pass */
    uint64_t pass = 0;
    for (i = 0; i < s->n; i++) {
        pass += i > 0 && s->ent[i].layer < s->ent[i - 1].layer;
        s->ent[i].key.k[0] = pass;
    }
}

/* ------------------------------------------------------------------ Megatron records */

static int mg_unit(moe_importer_t *im, jstate_t *s, uint64_t lineno)
{
    uint64_t step;
    int st = juint(im, &s->obj, "step", 0, UINT32_MAX, lineno, &step);
    if (st < 0)
        return st;
    s->cand_len = 0;
    return append(&s->cand, &s->cand_len, &s->cand_cap, (const char *)&step, sizeof step) < 0
               ? imp_fail(im, MOE_ENOMEM, "out of memory")
               : 0;
}

/* Index of the first token of a record: explicit, or counted per (rank, mb, seq, layer). */
static int mg_first_token(moe_importer_t *im, jstate_t *s, const imp_key_t *grp, uint64_t layer,
                          uint64_t rows, uint64_t lineno, uint64_t *tok)
{
    const char *tk = jtok_get(&s->obj, "token") ? "token" : "token_idx";
    if (jtok_get(&s->obj, tk))
        return juint(im, &s->obj, tk, 0, UINT32_MAX, lineno, tok);
    imp_key_t ck = {{grp->k[0], grp->k[1], grp->k[2], layer}};
    size_t before = s->counters.n;
    long c = imp_map_get(&s->counters, &ck, 1);
    if (c < 0 || util_grow((void **)&s->cnt, &s->cnt_cap, s->counters.n, sizeof *s->cnt) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    if (s->counters.n != before)
        s->cnt[c] = 0;
    *tok = s->cnt[c];
    s->cnt[c] += rows;
    return 0;
}

static int mg_shape(moe_importer_t *im, jstate_t *s, const jval_t *ix, const jval_t *wv,
                    uint64_t lineno)
{
    uint64_t topk;
    uint32_t k = ix->rows ? ix->cols : (uint32_t)ix->n;
    int st = check_k(im, s, k, wv != NULL, lineno, "top_indices");
    if (st < 0 || (st = juint(im, &s->obj, "topk", k, UINT32_MAX, lineno, &topk)) < 0)
        return st;
    if (topk != k)
        return imp_fail(im, MOE_EFORMAT, "line %llu: 'topk' is %llu but 'top_indices' has %u "
                        "ids per token", (unsigned long long)lineno, (unsigned long long)topk, k);
    if (wv && (wv->kind != J_ARR || wv->rows != ix->rows || wv->n != ix->n))
        return imp_fail(im, MOE_EFORMAT, "line %llu: gate weights do not match 'top_indices'",
                        (unsigned long long)lineno);
    return 0;
}

/* "12", or "mtp0.1" for layer 1 of MTP head 0. */
static void lid_str(uint64_t lid, char *buf, size_t n)
{
    if (lid & MG_MTP)
        snprintf(buf, n, "mtp%llu.%llu", (unsigned long long)((lid & ~MG_MTP) >> 32),
                 (unsigned long long)(lid & 0xffffffffu));
    else
        snprintf(buf, n, "%llu", (unsigned long long)lid);
}

/* A record repeating a (layer, token) of its step: counted, warned about once, skipped. */
static void mg_repeat(moe_importer_t *im, jstate_t *s, uint64_t lineno, uint64_t lid,
                      uint64_t cells)
{
    im->rep.repeats += cells;
    if (s->warned)
        return;
    char l[48];
    lid_str(lid, l, sizeof l);
    s->warned = 1;
    moe_log(MOE_LOG_WARN, "'%s' line %llu: step %llu gives layer %s of the same tokens again "
            "(activation recompute?): the first records are kept", im->path,
            (unsigned long long)lineno, (unsigned long long)s->step, l);
}

/* The record's block: 0 decoder (also when absent), 1 MTP; negative on error. */
static int mg_block(moe_importer_t *im, const jobj_t *o, uint64_t lineno)
{
    const jval_t *b = jtok_get(o, "block");
    if (!b)
        return 0;
    if (b->kind == J_STR && b->len == 7 && memcmp(b->s, "decoder", 7) == 0)
        return 0;
    if (b->kind == J_STR && b->len == 3 && memcmp(b->s, "mtp", 3) == 0)
        return 1;
    return imp_fail(im, MOE_EFORMAT, "line %llu: 'block' is not \"decoder\" or \"mtp\": "
                    "'%.*s'", (unsigned long long)lineno, (int)(b->len < 40 ? b->len : 40), b->s);
}

/* Whether a counted record repeats an earlier one of the step (same ids, layer and group). */
static int mg_seen(moe_importer_t *im, jstate_t *s, const jval_t *ix, const imp_key_t *grp,
                   uint64_t lid)
{
    /* The numbers' bits: they are not checked to be ids yet, so no conversion to integers. */
    uint64_t h = 0xcbf29ce484222325ull ^ ix->rows;
    for (size_t i = 0; i < ix->n; i++) {
        uint64_t bits;
        memcpy(&bits, &s->obj.nums[ix->off + i], sizeof bits);
        h = (h ^ bits) * 0x100000001b3ull;
    }
    imp_key_t k = {{h, grp->k[0] << 32 | grp->k[1], grp->k[2], lid}};
    size_t before = s->recs.n;
    if (imp_map_get(&s->recs, &k, 1) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    return s->recs.n == before;
}

static int mg_add(moe_importer_t *im, jstate_t *s, uint64_t lineno)
{
    const jobj_t *o = &s->obj;
    const jval_t *ix = jtok_get(o, "top_indices"), *wv = jtok_get(o, "top_probs");
    uint64_t layer, tok, ntok, head = 0;
    imp_key_t grp = {{0, 0, 0, 0}};
    int st, mtp = mg_block(im, o, lineno);
    if (mtp < 0)
        return mtp;
    if (mtp && !im->opts.mtp) {
        im->rep.skipped_mtp++;
        return 0;
    }
    if (mtp && (st = juint(im, o, "mtp_idx", 0, INT32_MAX, lineno, &head)) < 0)
        return st;
    if (!wv && ix && (wv = jtok_get(o, "scores")) != NULL &&
        (wv->kind != J_ARR || wv->rows != ix->rows || wv->n != ix->n))
        wv = NULL; /* full router scores over all experts, not the chosen ones' weights */
    if (!ix || ix->kind != J_ARR)
        return imp_fail(im, MOE_EFORMAT, "line %llu: 'top_indices' is not a list of ids or a "
                        "list of equal-length lists", (unsigned long long)lineno);
    if ((st = juint(im, o, "layer", -1, UINT32_MAX, lineno, &layer)) < 0 ||
        (st = juint(im, o, "rank", 0, UINT32_MAX, lineno, &grp.k[0])) < 0 ||
        (st = juint(im, o, "micro_batch", 0, UINT32_MAX, lineno, &grp.k[1])) < 0 ||
        (st = juint(im, o, "seq", 0, UINT32_MAX, lineno, &grp.k[2])) < 0)
        return st;
    uint64_t rows = ix->rows ? ix->rows : ix->n > 0;
    if ((st = juint(im, o, "num_tokens", (int64_t)rows, UINT32_MAX, lineno, &ntok)) < 0)
        return st;
    if (ntok != rows)
        return imp_fail(im, MOE_EFORMAT, "line %llu: 'num_tokens' is %llu but 'top_indices' "
                        "has %llu tokens", (unsigned long long)lineno, (unsigned long long)ntok,
                        (unsigned long long)rows);
    if (rows == 0)
        return 0; /* a batch of no tokens (an empty "top_indices": []) */
    if ((st = mg_shape(im, s, ix, wv, lineno)) < 0)
        return st;
    uint64_t lid = mtp ? MG_MTP | head << 32 | layer : layer;
    if (!jtok_get(o, "token") && !jtok_get(o, "token_idx")) {
        if ((st = mg_seen(im, s, ix, &grp, lid)) != 0) {
            if (st > 0)
                mg_repeat(im, s, lineno, lid, rows);
            return st < 0 ? st : 0;
        }
    }
    layer = lid;
    if ((st = mg_first_token(im, s, &grp, layer, rows, lineno, &tok)) < 0)
        return st;
    for (uint64_t i = 0; i < rows; i++) {
        imp_key_t key = {{grp.k[0], grp.k[1], grp.k[2], tok + i}};
        size_t at = (size_t)i * s->K;
        st = add_cell(im, s, layer, &key, o->nums + ix->off + at,
                      s->weights ? o->nums + wv->off + at : NULL, lineno, "top_indices");
        if (st < 0)
            return st;
    }
    return 0;
}

/* ------------------------------------------------------------------ units */

/* The next JSON line (the stashed one first), parsed into s->obj; 0 at the end. */
static int next_obj(moe_importer_t *im, jstate_t *s, uint64_t *lineno)
{
    char *line;
    size_t len;
    int st = 1;
    if (s->has_pending) {
        s->has_pending = 0;
        line = s->pending;
        *lineno = s->pend_line;
    } else {
        do {
            st = moe_lines_next(im->lines, &line, &len);
        } while (st == 1 && (*jtok_ws(line) == '\0' || *jtok_ws(line) == '#'));
        *lineno = moe_lines_lineno(im->lines);
    }
    if (st <= 0)
        return st < 0 ? imp_fail(im, st, "line %llu: %s", (unsigned long long)*lineno + 1,
                                 moe_strerror(st))
                      : 0;
    const char *at = line;
    if (jtok_obj_parse(&s->obj, line, &at) < 0) {
        unsigned long long col = (unsigned long long)(at - line) + 1;
        if (s->obj.dup && !s->obj.oom)
            return imp_fail(im, MOE_EFORMAT, "line %llu: duplicate key \"%.*s\" at column %llu",
                            (unsigned long long)*lineno,
                            (int)(s->obj.duplen < 40 ? s->obj.duplen : 40), s->obj.dup, col);
        return imp_fail(im, s->obj.oom ? MOE_ENOMEM : MOE_EFORMAT,
                        "line %llu: malformed JSON at column %llu", (unsigned long long)*lineno,
                        col);
    }
    s->line = line;
    return 1;
}

/* Keep the line just parsed: it starts the next unit and is parsed again then. It is never
 * the pending buffer itself, as a pending line always starts a unit. */
static int stash(moe_importer_t *im, jstate_t *s, uint64_t lineno)
{
    size_t n = strlen(s->line);
    if (util_grow((void **)&s->pending, &s->pend_cap, n + 1, 1) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    memcpy(s->pending, s->line, n + 1);
    s->pend_line = lineno;
    s->has_pending = 1;
    return 1;
}

/* Start a unit with the key in s->cand, refusing one seen before. */
static int start_unit(moe_importer_t *im, jstate_t *s, uint64_t lineno)
{
    imp_key_t k = {{fnv64(s->cand, s->cand_len), s->cand_len, 0, 0}};
    size_t before = s->seen.n;
    if (imp_map_get(&s->seen, &k, 1) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    if (s->seen.n == before)
        return imp_fail(im, MOE_EFORMAT, "line %llu: %s appears again after other records "
                        "(the records of one %s must be contiguous)", (unsigned long long)lineno,
                        s->megatron ? "step" : "problem", s->megatron ? "step" : "problem");
    s->unit_len = 0;
    if (append(&s->unit, &s->unit_len, &s->unit_cap, s->cand, s->cand_len) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    if (!s->megatron)
        return vl_seq(im, s, lineno);
    memcpy(&s->step, s->cand, sizeof s->step);
    imp_map_clear(&s->counters);
    imp_map_clear(&s->recs);
    return 0;
}

/* Buffer the records of the next unit; 1 if there is one, 0 at the end. */
static int collect(moe_importer_t *im, jstate_t *s)
{
    uint64_t lineno;
    int st, started = 0;
    s->n = 0;
    while ((st = next_obj(im, s, &lineno)) == 1) {
        st = s->megatron ? mg_unit(im, s, lineno) : vl_unit(s);
        if (st < 0)
            return st == MOE_ENOMEM ? imp_fail(im, st, "out of memory") : st;
        if (started && (s->cand_len != s->unit_len || memcmp(s->cand, s->unit, s->unit_len))) {
            if (s->n > 0)
                return stash(im, s, lineno);
            started = 0; /* a step of skipped records only (MTP, repeats, empty batches) */
        }
        if (!started && (st = start_unit(im, s, lineno)) < 0)
            return st;
        started = 1;
        if ((st = s->megatron ? mg_add(im, s, lineno) : vl_add(im, s, lineno)) < 0)
            return st;
    }
    return st < 0 ? st : s->n > 0;
}

/* Record the model layers of the trace's layers in @CO lines ("1,3-5,mtp0.1"; runs of
 * consecutive decoder ids shortened), several lines when the list is long. */
static int mg_comment(moe_importer_t *im, const jstate_t *s)
{
    imp_layers_t w = {.im = im, .prefix = "megatron"};
    char id[48];
    for (uint32_t i = 0; i < s->L; i++) {
        uint32_t j = i;
        while (!(s->lids[i] & MG_MTP) && j + 1 < s->L && s->lids[j + 1] == s->lids[j] + 1)
            j++;
        lid_str(s->lids[i], id, sizeof id);
        size_t n = strlen(id);
        if (j > i + 1)
            snprintf(id + n, sizeof id - n, "-%llu", (unsigned long long)s->lids[j]);
        else
            j = i;
        int st = imp_layers_add(&w, i, id);
        if (st < 0)
            return st;
        i = j;
    }
    return imp_layers_end(&w, s->L - 1);
}

/* Megatron: the distinct layer ids of the first step, ascending, are layers 0..L-1. */
static int mg_layers(moe_importer_t *im, jstate_t *s)
{
    uint64_t *v = malloc(s->n * sizeof *v);
    if (!v)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    for (size_t i = 0; i < s->n; i++)
        v[i] = s->ent[i].layer;
    qsort(v, s->n, sizeof *v, util_cmp_u64);
    size_t L = 0;
    for (size_t i = 0; i < s->n; i++)
        if (L == 0 || v[i] != v[L - 1])
            v[L++] = v[i];
    if (L > MOE_TRACE_MAX_LAYERS) {
        free(v);
        return imp_fail(im, MOE_ERANGE, "%zu MoE layers: at most %u are supported", L,
                        MOE_TRACE_MAX_LAYERS);
    }
    s->lids = v;
    s->L = (uint32_t)L;
    return 0;
}

/* Trace layer of a Megatron layer id; -1 if the first step had none. */
static long mg_index(const jstate_t *s, uint64_t lid)
{
    size_t lo = 0, hi = s->L;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->lids[mid] < lid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->L && s->lids[lo] == lid ? (long)lo : -1;
}

/* vLLM: layers lo..hi of the first problem, lo = layer 0. */
static int vl_layers(moe_importer_t *im, jstate_t *s)
{
    uint64_t lo = s->ent[0].layer, hi = lo;
    for (size_t i = 1; i < s->n; i++) {
        lo = s->ent[i].layer < lo ? s->ent[i].layer : lo;
        hi = s->ent[i].layer > hi ? s->ent[i].layer : hi;
    }
    if (hi - lo >= MOE_TRACE_MAX_LAYERS)
        return imp_fail(im, MOE_ERANGE, "layers %llu..%llu: at most %u layers are supported",
                        (unsigned long long)lo, (unsigned long long)hi, MOE_TRACE_MAX_LAYERS);
    s->layer_off = lo;
    s->L = (uint32_t)(hi - lo + 1);
    return 0;
}

/* Layers of the first unit fix the numbering and L (vl_layers, mg_layers). */
static int set_shape(moe_importer_t *im, jstate_t *s)
{
    int st = s->megatron ? mg_layers(im, s) : vl_layers(im, s);
    if (st < 0)
        return st;
    imp_grid_init(&s->grid, s->L, s->K, s->weights);
    s->shaped = 1;
    im->hdr.layers = s->L;
    im->hdr.topk = s->K;
    if (s->weights)
        im->hdr.flags |= MOE_TRACE_WEIGHTS;
    return s->megatron ? mg_comment(im, s) : 0;
}

/* Fill the grid from the buffered records and order its tokens. */
static int build(moe_importer_t *im, jstate_t *s)
{
    int st;
    if (!s->shaped && (st = set_shape(im, s)) < 0)
        return st;
    if (!s->megatron)
        vl_passes(s);
    imp_grid_clear(&s->grid);
    for (size_t i = 0; i < s->n; i++) {
        const jent_t *e = &s->ent[i];
        long li = s->megatron ? mg_index(s, e->layer) : (long)(e->layer - s->layer_off);
        if (s->megatron && li < 0) {
            char l[48];
            lid_str(e->layer, l, sizeof l);
            return imp_fail(im, MOE_EFORMAT, "line %llu: layer %s is not one of the %u layers "
                            "of the first step", (unsigned long long)e->line, l, s->L);
        }
        if (!s->megatron && (e->layer < s->layer_off || e->layer - s->layer_off >= s->L))
            return imp_fail(im, MOE_EFORMAT, "line %llu: layer %llu outside the layers of the "
                            "first %s (%llu..%llu)", (unsigned long long)e->line,
                            (unsigned long long)e->layer, "problem",
                            (unsigned long long)s->layer_off,
                            (unsigned long long)(s->layer_off + s->L - 1));
        st = imp_grid_put(&s->grid, &e->key, (uint32_t)li,
                          e->missing ? NULL : s->ids + i * s->K,
                          s->weights ? s->w + i * s->K : NULL);
        if (st < 0)
            return imp_fail(im, st, "out of memory");
        if (st == 1 && s->megatron) {
            mg_repeat(im, s, e->line, e->layer, 1);
            continue;
        }
        if (st == 1)
            return imp_fail(im, MOE_EFORMAT, "line %llu: duplicate record for layer %llu of "
                            "token %llu", (unsigned long long)e->line,
                            (unsigned long long)e->layer,
                            (unsigned long long)e->key.k[s->megatron ? 3 : 1]);
    }
    if (imp_grid_sort(&s->grid) < 0 ||
        util_grow((void **)&s->slotpos, &s->slotpos_cap, s->grid.map.n, sizeof *s->slotpos) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    for (size_t i = 0; i < s->grid.map.n; i++)
        s->slotpos[s->grid.order[i]] = (uint32_t)i;
    return 0;
}

/* Record fields from a buffered token's key. */
static void fill_rec(moe_importer_t *im, jstate_t *s, const imp_key_t *key, moe_trace_rec_t *r)
{
    r->step = 0;
    r->rank = 0;
    if (!s->megatron) {
        r->seq = s->seq;
        r->pos = s->slotpos[key - s->grid.map.keys];
        return;
    }
    imp_key_t grp = {{key->k[0], key->k[1], key->k[2], 0}};
    if (!s->have_group || memcmp(&grp, &s->group, sizeof grp) != 0) {
        s->group = grp;
        s->have_group = 1;
        s->seq++;
        im->rep.sequences++;
    }
    r->seq = im->seq_base + s->seq - 1;
    r->pos = (uint32_t)key->k[3];
    r->step = (uint32_t)s->step;
    r->rank = (uint32_t)key->k[0];
}

static int json_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    jstate_t *s = im->state;
    for (;;) {
        const imp_key_t *key;
        if (s->shaped && imp_grid_next(im, &s->grid, r, &key)) {
            fill_rec(im, s, key, r);
            return 1;
        }
        int st = collect(im, s);
        if (st <= 0 || (st = build(im, s)) < 0)
            return st;
        s->have_group = 0; /* a new step starts new groups */
        if (!s->megatron)
            im->rep.sequences++;
    }
}

static void json_free(moe_importer_t *im)
{
    jstate_t *s = im->state;
    if (!s)
        return;
    free(s->obj.nums);
    free(s->pending);
    free(s->unit);
    free(s->cand);
    imp_map_free(&s->seen);
    free(s->ent);
    free(s->ids);
    free(s->w);
    imp_grid_free(&s->grid);
    free(s->slotpos);
    imp_map_free(&s->datasets);
    free(s->ds_off);
    imp_names_free(&s->names);
    imp_map_free(&s->counters);
    free(s->cnt);
    free(s->lids);
    imp_map_free(&s->recs);
    free(s);
    im->state = NULL;
}

static const imp_ops_t json_ops = {json_next, json_free};

/* Buffer the first unit now: it gives the shape the header needs. */
static int json_open(moe_importer_t *im, int megatron)
{
    jstate_t *s = calloc(1, sizeof *s);
    if (!s)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    s->megatron = megatron;
    im->state = s;
    im->ops = &json_ops;
    int st = collect(im, s);
    if (st == 0 && im->rep.skipped_mtp)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input (%llu MTP records skipped: --mtp "
                        "keeps them)", (unsigned long long)im->rep.skipped_mtp);
    if (st == 0)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    if (st < 0 || (st = build(im, s)) < 0)
        return st;
    if (!megatron)
        im->rep.sequences++;
    return 0;
}

int imp_jsonl_open(moe_importer_t *im)
{
    return json_open(im, 0);
}

int imp_megatron_open(moe_importer_t *im)
{
    return json_open(im, 1);
}
