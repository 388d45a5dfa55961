/* import/import_torch.c -- torch.save archives that are not SGLang dumps: a tuple or list of
 * one [tokens, experts] tensor per MoE layer, as Hugging Face models return their router
 * logits (output_router_logits=True), or of [tokens, k] expert ids. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "import_dense_internal.h"
#include "import_readers_internal.h"
#include "pt_internal.h"

/*
 * transformers' MoE models (Mixtral, Qwen2-MoE, DeepSeek, ...) return with
 * output_router_logits=True a tuple router_logits of one (batch * sequence, num_experts)
 * tensor per MoE layer; users torch.save it as it comes. The tensors (float: logits, read with
 * --topk; integer: the ids of each token's experts) are copied, element by element through
 * their strides and byte order, into one buffer of planes that the dense-array reader walks
 * (import_dense.c). The tuple holds the MoE layers only, so --moe-layers and
 * --first-moe-layer label its layers (moe_import_run) rather than select them.
 */

typedef struct torch_state {
    uint8_t *buf;
    pt_file_t *pt;
    imp_dense_t d;
} torch_state_t;

static int torch_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    torch_state_t *s = im->state;
    return imp_dense_next(im, &s->d, r);
}

static void torch_free(moe_importer_t *im)
{
    torch_state_t *s = im->state;
    if (!s)
        return;
    imp_dense_free(&s->d);
    pt_free(s->pt);
    free(s->buf);
    free(s);
    im->state = NULL;
}

static const imp_ops_t torch_ops = {torch_next, torch_free};

/* The layer tensors: every item a 2-D tensor of one kind (float or integer) and shape. */
static int check_layers(moe_importer_t *im, const pt_val_t *root, uint64_t *T, uint64_t *W,
                        int *logits)
{
    if ((root->kind != PT_TUPLE && root->kind != PT_LIST) || !root->n)
        return imp_fail(im, MOE_EFORMAT, "torch.save archive holds a %s, neither an SGLang "
                        "dump (a dict) nor a tuple of per-layer tensors (router logits)",
                        root->n || root->kind == PT_DICT ? pt_kind_name(root->kind) : "empty "
                        "sequence");
    if (root->n > MOE_TRACE_MAX_LAYERS)
        return imp_fail(im, MOE_ERANGE, "%zu layer tensors: at most %u layers are supported",
                        root->n, MOE_TRACE_MAX_LAYERS);
    for (size_t l = 0; l < root->n; l++) {
        const pt_val_t *v = root->items[l];
        if (v->kind != PT_TENSOR || v->t->ndim != 2)
            return imp_fail(im, MOE_EFORMAT, "item %zu of the %s is %s, not a 2-D tensor "
                            "[tokens, experts]", l, pt_kind_name(root->kind),
                            v->kind == PT_TENSOR ? "a tensor of another rank"
                                                 : pt_kind_name(v->kind));
        int f = !pt_tensor_is_int(v) && v->t->dtype != PT_BOOL8;
        if (l == 0) {
            *T = v->t->shape[0];
            *W = v->t->shape[1];
            *logits = f;
        } else if (v->t->shape[0] != *T || v->t->shape[1] != *W || f != *logits) {
            return imp_fail(im, MOE_EFORMAT, "item %zu of the %s is a [%llu, %llu] %s tensor, "
                            "item 0 a [%llu, %llu] %s one", l, pt_kind_name(root->kind),
                            (unsigned long long)v->t->shape[0],
                            (unsigned long long)v->t->shape[1], f ? "float" : "integer",
                            (unsigned long long)*T, (unsigned long long)*W,
                            *logits ? "float" : "integer");
        }
    }
    if (!*T)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    if (*T > UINT32_MAX || !*W || *W > MOE_TRACE_MAX_EXPERTS ||
        *T * *W * root->n > ((uint64_t)1 << 31))
        return imp_fail(im, MOE_ERANGE, "layer tensors of [%llu, %llu] out of range",
                        (unsigned long long)*T, (unsigned long long)*W);
    return 0;
}

/* The tensors as planes of little-endian float32 (logits) or int32 (ids) rows. */
static int copy_planes(moe_importer_t *im, torch_state_t *s, const pt_val_t *root, uint64_t T,
                       uint64_t W, int logits)
{
    imp_dense_t *d = &s->d;
    size_t plane = (size_t)(T * W * 4), L = root->n;
    if (!(d->own = malloc(plane * L)) || !(d->base = malloc(L * sizeof *d->base)))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    uint8_t *o = d->own;
    for (size_t l = 0; l < L; l++) {
        const pt_tensor_t *t = root->items[l]->t;
        d->base[l] = (uint64_t)(l * plane);
        uint64_t idx[2];
        for (idx[0] = 0; idx[0] < T; idx[0]++)
            for (idx[1] = 0; idx[1] < W; idx[1]++) {
                union {
                    float f;
                    int32_t i;
                    uint32_t u;
                } x;
                double v = imp_pt_double(t, idx);
                if (logits)
                    x.f = (float)v;
                else
                    x.i = v < -1 ? -2 : v > (double)MOE_TRACE_MAX_EXPERTS
                                            ? (int32_t)MOE_TRACE_MAX_EXPERTS : (int32_t)v;
                for (int b = 0; b < 4; b++)
                    *o++ = (uint8_t)(x.u >> (8 * b));
            }
    }
    d->mode = IMP_DENSE_MEM;
    d->mem = d->own;
    d->mem_off = 0;
    d->mem_len = plane * L;
    return 0;
}

int imp_torch_load(moe_importer_t *im, uint8_t **buf, pt_file_t **pt, size_t *n)
{
    int st = imp_src_slurp(im->src, SIZE_MAX, buf, n);
    if (st < 0)
        return imp_fail_read(im, "input", st);
    char err[200];
    if (!(*pt = pt_open(*buf, *n, &st, err, sizeof err)))
        return imp_fail(im, st, "%s", err);
    return 0;
}

int imp_torch_open(moe_importer_t *im)
{
    torch_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->state = s;
    im->ops = &torch_ops;
    size_t n;
    int st = imp_torch_load(im, &s->buf, &s->pt, &n);
    if (st < 0)
        return st;
    const pt_val_t *root = pt_root(s->pt);
    uint64_t T = 0, W = 0;
    int logits = 0;
    if ((st = check_layers(im, root, &T, &W, &logits)) < 0 ||
        (st = copy_planes(im, s, root, T, W, logits)) < 0)
        return st;
    imp_dense_t *d = &s->d;
    d->dtype = logits ? IMP_F32 : IMP_I32;
    d->tokens = T;
    d->in_layers = (uint32_t)root->n;
    d->width = (uint32_t)W;
    d->planes = (uint32_t)root->n;
    d->seq = im->seq_base;
    im->rep.sequences = 1;
    if ((st = imp_comment(im, "torch: a %s of %zu [%llu, %llu] %s tensors (one per MoE "
                          "layer%s)", pt_kind_name(root->kind), root->n, (unsigned long long)T,
                          (unsigned long long)W, logits ? "float" : "integer",
                          logits ? ": router logits, Hugging Face's output_router_logits" : "")) < 0)
        return st;
    /* the tuple holds the MoE layers only: the layer options label them (moe_import_run) */
    const char *moe_layers = im->opts.moe_layers;
    int first = im->opts.first_moe_given;
    uint32_t model = im->opts.model_layers;
    im->opts.moe_layers = NULL;
    im->opts.first_moe_given = 0;
    im->opts.model_layers = 0;
    st = imp_dense_start(im, d);
    im->opts.moe_layers = moe_layers;
    im->opts.first_moe_given = first;
    im->opts.model_layers = model;
    return st;
}
