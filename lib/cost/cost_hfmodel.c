/* cost/cost_hfmodel.c -- a model's shapes from a Hugging Face config.json, and its parameters and
 * FLOPs per token. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_internal.h"
#include "moe/io.h"
#include "moe/mcore.h"
#include "moe/moe.h"
#include "util_internal.h"

/* Largest config.json read: real ones are a few kilobytes. */
#define MAX_CONFIG (1u << 20)

/* The text of a file, lines joined by '\n', NUL-terminated; NULL with *rc and err. */
static char *slurp(const char *path, int *rc, char *err, size_t errlen)
{
    moe_lines_t *l = moe_lines_open(path, rc, err, errlen);
    char *buf = NULL, *line;
    size_t n = 0, len;
    int st;
    if (!l)
        return NULL;
    while ((st = moe_lines_next(l, &line, &len)) == 1) {
        char *b = n + len + 2 <= MAX_CONFIG ? realloc(buf, n + len + 2) : NULL;
        if (!b) {
            st = n + len + 2 > MAX_CONFIG ? MOE_ERANGE : MOE_ENOMEM;
            break;
        }
        buf = b;
        memcpy(buf + n, line, len);
        n += len;
        buf[n++] = '\n';
        buf[n] = '\0';
    }
    moe_lines_close(l);
    if (st < 0 || (st == 0 && !buf)) {
        free(buf);
        *rc = st < 0 ? st : MOE_EFORMAT;
        util_errf(err, errlen, *rc, "'%s': %s", path, st == MOE_ERANGE ? "larger than 1 MiB, "
                  "not a config.json" : st < 0 ? moe_strerror(st) : "empty");
        return NULL;
    }
    return buf;
}

typedef struct hfr {
    const jobj_t *o;
    const char *name;
    char *err;
    size_t errlen;
} hfr_t;

/* A whole number field, the first of the names present (NULL-terminated), into *v; `need`: a
 * missing field is an error. 0, or MOE_EINVAL with the reason. */
static int whole(const hfr_t *r, const char *const *names, int need, uint32_t *v)
{
    for (; *names; names++) {
        const jval_t *x = jtok_get(r->o, *names);
        if (!x)
            continue;
        if (x->kind != J_NUM || !(x->num >= 0 && x->num <= 16777216) || x->num != floor(x->num))
            return util_errf(r->err, r->errlen, MOE_EINVAL, "'%s': %s is not a whole number "
                             "from 0 to 2^24", r->name, *names);
        *v = (uint32_t)x->num;
        return 0;
    }
    return need ? util_errf(r->err, r->errlen, MOE_EINVAL, "'%s': no %s", r->name, names[-1])
                : 0;
}

#define FIELD(need, v, ...)                                                                 \
    do {                                                                                   \
        static const char *const n_[] = {__VA_ARGS__, NULL};                               \
        if ((rc = whole(&r, n_, need, v)) != 0)                                            \
            return rc;                                                                     \
    } while (0)

/* The fields every model has. */
static int read_core(const hfr_t *r0, moe_model_t *m)
{
    hfr_t r = *r0;
    int rc;
    FIELD(1, &m->layers, "num_hidden_layers");
    FIELD(1, &m->hidden, "hidden_size");
    FIELD(1, &m->heads, "num_attention_heads");
    FIELD(1, &m->vocab, "vocab_size");
    FIELD(1, &m->ffn, "intermediate_size");
    m->kv_heads = m->heads;
    FIELD(0, &m->kv_heads, "num_key_value_heads");
    m->head_dim = m->heads ? m->hidden / m->heads : 0;
    FIELD(0, &m->head_dim, "head_dim");
    return 0;
}

/* The routed and shared experts and where they are. */
static int read_moe(const hfr_t *r0, moe_model_t *m)
{
    hfr_t r = *r0;
    int rc;
    uint32_t shared = 0;
    FIELD(0, &m->experts, "n_routed_experts", "num_local_experts", "num_experts");
    FIELD(0, &m->topk, "num_experts_per_tok");
    m->moe_ffn = m->ffn;
    FIELD(0, &m->moe_ffn, "moe_intermediate_size");
    FIELD(0, &shared, "n_shared_experts");
    m->shared_ffn = shared * m->moe_ffn;
    FIELD(0, &m->shared_ffn, "shared_expert_intermediate_size");
    FIELD(0, &m->first_dense, "first_k_dense_replace");
    m->moe_every = 1;
    FIELD(0, &m->moe_every, "moe_layer_freq", "decoder_sparse_step");
    FIELD(0, &m->groups, "n_group");
    FIELD(0, &m->topk_groups, "topk_group");
    FIELD(0, &m->mtp, "num_nextn_predict_layers");
    return 0;
}

/* Multi-head latent attention (DeepSeek-V2/V3): present when kv_lora_rank is. */
static int read_mla(const hfr_t *r0, moe_model_t *m)
{
    hfr_t r = *r0;
    int rc;
    FIELD(0, &m->q_lora, "q_lora_rank");
    FIELD(0, &m->kv_lora, "kv_lora_rank");
    if (!m->kv_lora)
        return 0;
    FIELD(1, &m->qk_nope, "qk_nope_head_dim");
    FIELD(1, &m->qk_rope, "qk_rope_head_dim");
    FIELD(1, &m->v_head, "v_head_dim");
    return 0;
}
#undef FIELD

/* The shapes must make a model. */
static int check(const hfr_t *r, const moe_model_t *m)
{
#define BAD(...) util_errf(r->err, r->errlen, MOE_EINVAL, __VA_ARGS__)
    if (!m->layers || !m->hidden || !m->heads || !m->vocab || !m->ffn || !m->head_dim)
        return BAD("'%s': num_hidden_layers, hidden_size, num_attention_heads, vocab_size, "
                   "intermediate_size and head_dim must not be 0", r->name);
    if (!m->kv_lora && (!m->kv_heads || m->heads % m->kv_heads))
        return BAD("'%s': num_key_value_heads (%u) does not divide num_attention_heads (%u)",
                   r->name, m->kv_heads, m->heads);
    if (m->experts && (!m->topk || m->topk > m->experts))
        return BAD("'%s': num_experts_per_tok (%u) must be 1 to the %u experts", r->name,
                   m->topk, m->experts);
    if (m->experts && (!m->moe_ffn || !m->moe_every || m->first_dense >= m->layers))
        return BAD("'%s': moe_intermediate_size and the MoE layer frequency must not be 0, "
                   "first_k_dense_replace (%u) must leave a layer of the %u", r->name,
                   m->first_dense, m->layers);
    if (m->groups && (m->experts % m->groups || !m->topk_groups ||
                      m->topk_groups > m->groups))
        return BAD("'%s': n_group (%u) must divide the %u experts and topk_group (%u) be 1 to "
                   "it", r->name, m->groups, m->experts, m->topk_groups);
    if (m->kv_lora && (!m->qk_nope && !m->qk_rope))
        return BAD("'%s': MLA without query/key head dimensions", r->name);
    return 0;
#undef BAD
}

/* The model type, else the file's base name, for reports. */
static void name_of(const jobj_t *o, const char *path, char *dst, size_t n)
{
    const jval_t *v = jtok_get(o, "model_type");
    const char *s = path, *b = strrchr(path, '/');
    size_t len;
    if (v && v->kind == J_STR) {
        s = v->s;
        len = v->len;
    } else {
        s = b && b[1] ? b + 1 : path;
        len = strlen(s);
    }
    len = len < n - 1 ? len : n - 1;
    for (size_t i = 0; i < len; i++)
        dst[i] = (unsigned char)s[i] > ' ' && s[i] != '"' && s[i] != '\\' ? s[i] : '_';
    dst[len] = '\0';
}

/* tie_word_embeddings: true, false or absent (false). */
static int tied(const jobj_t *o)
{
    for (int i = 0; i < o->n; i++)
        if (o->f[i].klen == 19 && !memcmp(o->f[i].key, "tie_word_embeddings", 19))
            return o->f[i].v.kind == J_OTHER && !strncmp(o->f[i].v.s, "true", 4);
    return 0;
}

int moe_model_parse(moe_model_t *m, const char *text, size_t len, const char *name, char *err,
                    size_t errlen)
{
    char *buf = malloc(len + 1);
    if (!buf)
        return util_errf(err, errlen, MOE_ENOMEM, "%s", moe_strerror(MOE_ENOMEM));
    memcpy(buf, text, len);
    buf[len] = '\0';
    jobj_t o;
    memset(&o, 0, sizeof o);
    const char *at = buf;
    hfr_t r = {&o, name ? name : "(memory)", err, errlen};
    int rc = strlen(buf) != len ? MOE_EFORMAT : jtok_obj_parse(&o, buf, &at) < 0 ? MOE_EFORMAT : 0;
    if (o.oom)
        rc = util_errf(err, errlen, MOE_ENOMEM, "%s", moe_strerror(MOE_ENOMEM));
    else if (rc)
        util_errf(err, errlen, rc, "'%s': not a config.json (malformed JSON at byte %zu)",
                  r.name, (size_t)(at - buf));
    moe_model_t x;
    memset(&x, 0, sizeof x);
    if (!rc && !(rc = read_core(&r, &x)) && !(rc = read_moe(&r, &x)) &&
        !(rc = read_mla(&r, &x)) && !(rc = check(&r, &x))) {
        x.tied = tied(&o);
        name_of(&o, r.name, x.name, sizeof x.name);
        *m = x;
    }
    free(o.nums);
    free(buf);
    return rc;
}

int moe_model_read(moe_model_t *m, const char *path, char *err, size_t errlen)
{
    int rc = 0;
    char *text = slurp(path, &rc, err, errlen);
    if (!text)
        return rc;
    rc = moe_model_parse(m, text, strlen(text), path, err, errlen);
    free(text);
    return rc;
}

/* ------------------------------------------------------------------ counts */

int moe_model_is_moe(const moe_model_t *m, uint32_t layer)
{
    if (!m->experts || layer < m->first_dense || layer >= m->layers)
        return 0;
    return (layer - m->first_dense) % m->moe_every == m->moe_every - 1;
}

uint32_t moe_model_moe_layers(const moe_model_t *m)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->layers; i++)
        n += (uint32_t)moe_model_is_moe(m, i);
    return n;
}

/* One layer's attention: parameters and forward FLOPs per token (projections as 2 FLOPs a
 * weight; QK^T and AV over s / 2 keys on average, causal), the two RMSNorms' weights. */
static void attention(const moe_model_t *m, double s, double *params, double *flops)
{
    double h = m->hidden, a = m->heads, p, core;
    if (m->kv_lora) {
        double qk = m->qk_nope + m->qk_rope;
        double q = m->q_lora ? h * m->q_lora + m->q_lora * a * qk + m->q_lora : h * a * qk;
        double kv = h * (m->kv_lora + m->qk_rope) + m->kv_lora * a * (m->qk_nope + m->v_head) +
                    m->kv_lora;
        p = q + kv + a * m->v_head * h;
        core = a * s / 2 * 2 * (qk + m->v_head);
    } else {
        double d = m->head_dim, g = m->kv_heads;
        p = h * (a * d + 2 * g * d) + a * d * h;
        core = a * s / 2 * 2 * (2 * d);
    }
    *params = p + 2 * h;
    *flops = 2 * p + core;
}

void moe_model_count(const moe_model_t *m, double seq, moe_model_count_t *c)
{
    double h = m->hidden, L = m->layers, nmoe = moe_model_moe_layers(m);
    memset(c, 0, sizeof *c);
    attention(m, seq, &c->attn_params, &c->attn_flops);
    c->dense_params = 3 * h * m->ffn;
    c->dense_flops = 2 * c->dense_params;
    c->expert_params = 3 * h * m->moe_ffn;
    c->moe_shared_params = 3 * h * m->shared_ffn + h * m->experts;
    c->moe_flops = 2 * (m->topk * c->expert_params + c->moe_shared_params);
    c->embed_params = (double)m->vocab * h;
    c->head_params = m->tied ? 0 : c->embed_params;
    c->head_flops = 2 * (double)m->vocab * h;
    /* an MTP module: norms of the embedding and the hidden state, the 2h -> h projection, one
     * layer (an MoE one when the model's last is), the output layer shared but run again */
    int last_moe = moe_model_is_moe(m, m->layers - 1);
    double layer_p = c->attn_params + (last_moe ? c->moe_shared_params +
                                       m->experts * c->expert_params : c->dense_params);
    double layer_f = c->attn_flops + (last_moe ? c->moe_flops : c->dense_flops);
    c->mtp_params = m->mtp * (layer_p + 2 * h * h + 2 * h);
    c->mtp_flops = m->mtp * (layer_f + 2 * 2 * h * h + c->head_flops);
    double moe_p = c->moe_shared_params + m->experts * c->expert_params;
    c->params = L * c->attn_params + (L - nmoe) * c->dense_params + nmoe * moe_p +
                c->embed_params + c->head_params + h + c->mtp_params;
    c->active_params = c->params - nmoe * (m->experts - m->topk) * c->expert_params;
    c->fwd_flops = L * c->attn_flops + (L - nmoe) * c->dense_flops + nmoe * c->moe_flops +
                   c->head_flops + c->mtp_flops;
}
