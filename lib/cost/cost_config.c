/* lib/cost/cost_config.c -- the cost models' keys: names, value syntax and ranges, the
 * KEY = VALUE config-file reader and the topology the keys describe. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/costcfg.h"
#include "moe/io.h"
#include "moe/mcore.h"
#include "moe/moe.h"
#include "util_internal.h"

/* Longest config line (bytes before the newline). */
#define MAX_LINE 4094
/* Deepest nesting of config files. */
#define MAX_DEPTH 4

/* How a key's value reads. */
enum kind {
    K_CONFIG, K_FLAG, K_STR, K_U32, K_QTY, K_FRAC, K_EFF, K_ALPHA, K_LIST, K_ZERO, K_ACT,
    K_REUSE, K_SOURCE, K_TIME, K_GATHER, K_RECOMPUTE, K_DTYPE
};

typedef struct key {
    const char *name;
    int kind;
    size_t off;      /* the field in moe_costcfg_t */
    double min, max; /* range of numbers (K_U32, K_QTY, K_FRAC) */
    const char *what;
} ckey_t;

#define F(field) offsetof(moe_costcfg_t, field)
/* The upper bounds keep every printed figure to a few digits: no model has a sequence of
 * 10^300 tokens, and a value that large would only print as a 300-digit number. */
#define TOKENS 1099511627776.0 /* 2^40 tokens, sequence length, batch */
#define DIM 16777216.0         /* 2^24: hidden and FFN sizes, heads, layers, experts */
#define BYTES 1.152921504606846976e18 /* 2^60 bytes: volumes, chunks, memory */
#define RATE 1e18              /* bytes or FLOP per second */
static const ckey_t keys[MOE_CK_COUNT] = {
    [MOE_CK_CONFIG] = {"config", K_CONFIG, 0, 0, 0, NULL},
    [MOE_CK_JSON] = {"json", K_FLAG, F(json), 0, 0, NULL},
    [MOE_CK_TOPOLOGY] = {"topology", K_STR, F(topology), 0, 0, NULL},
    [MOE_CK_NODES] = {"nodes", K_U32, F(nodes), 1, MOE_MAX_RANKS, "node count"},
    [MOE_CK_GPN] = {"gpus-per-node", K_U32, F(gpn), 1, MOE_MAX_RANKS, "GPUs per node"},
    [MOE_CK_BW_INTRA] = {"bw-intra", K_QTY, F(bw[MOE_LINK_INTRA]), 1, RATE, "bandwidth"},
    [MOE_CK_BW_INTER] = {"bw-inter", K_QTY, F(bw[MOE_LINK_INTER]), 1, RATE, "bandwidth"},
    [MOE_CK_BW_HOST] = {"bw-host", K_QTY, F(bw[MOE_LINK_HOST]), 0, RATE, "bandwidth"},
    [MOE_CK_BW_HBM] = {"bw-hbm", K_QTY, F(hbm), 1, RATE, "bandwidth"},
    [MOE_CK_FLOPS] = {"flops", K_QTY, F(flops), 1, RATE, "compute rate"},
    [MOE_CK_TRACE] = {"trace", K_STR, F(trace), 0, 0, NULL},
    [MOE_CK_PLACEMENT] = {"placement", K_STR, F(placement), 0, 0, NULL},
    [MOE_CK_TOPK] = {"topk", K_U32, F(topk), 1, 256, "top-k"},
    [MOE_CK_RANKS] = {"ranks", K_U32, F(ranks), 1, 1u << 24, "rank count"},
    [MOE_CK_TPR] = {"tokens-per-rank", K_QTY, F(tpr), 0, TOKENS, "token count"},
    [MOE_CK_LAYERS] = {"layers", K_QTY, F(layers), 0, DIM, "layer count"},
    [MOE_CK_P] = {"p", K_FRAC, F(p), 0, 1, "fraction p"},
    [MOE_CK_P_TOPO] = {"p-topo", K_FRAC, F(p_topo), 0, 1, "fraction p_topo"},
    [MOE_CK_P_STAR] = {"p-star", K_FRAC, F(p_star), 0, 2, "fraction p*"},
    [MOE_CK_HIDDEN] = {"hidden", K_QTY, F(hidden), 1, DIM, "hidden size"},
    [MOE_CK_ELEM_BYTES] = {"elem-bytes", K_QTY, F(elem_bytes), 1e-3, 64, "element size"},
    [MOE_CK_BATCH] = {"batch", K_QTY, F(batch), 1e-9, TOKENS, "batch size"},
    [MOE_CK_SEQ] = {"seq", K_QTY, F(seq), 1, TOKENS, "sequence length"},
    [MOE_CK_VOLUME] = {"volume", K_QTY, F(volume), 1, BYTES, "volume"},
    [MOE_CK_TP] = {"tp", K_U32, F(tp), 1, 1u << 20, "tensor-parallel degree"},
    [MOE_CK_EP] = {"ep", K_U32, F(ep), 1, 1u << 20, "expert-parallel degree"},
    [MOE_CK_PP] = {"pp", K_U32, F(pp), 1, 1u << 20, "pipeline-parallel degree"},
    [MOE_CK_R1] = {"r1", K_EFF, F(r[0]), 0, 0, "efficiency r1"},
    [MOE_CK_R2] = {"r2", K_EFF, F(r[1]), 0, 0, "efficiency r2"},
    [MOE_CK_R3] = {"r3", K_EFF, F(r[2]), 0, 0, "efficiency r3"},
    [MOE_CK_MIN_CHUNK] = {"min-chunk", K_QTY, F(min_chunk), 1, BYTES, "chunk size"},
    [MOE_CK_CHUNKS] = {"chunks", K_U32, F(chunks), 1, 1u << 20, "chunk count"},
    [MOE_CK_MAX_CHUNKS] = {"max-chunks", K_U32, F(max_chunks), 1, 1u << 20, "chunk count"},
    [MOE_CK_PLOT] = {"plot", K_STR, F(plot), 0, 0, NULL},
    [MOE_CK_HEADS] = {"heads", K_QTY, F(heads), 0, DIM, "head count"},
    [MOE_CK_PARAMS_DENSE] = {"params-dense", K_QTY, F(params_dense), 0, BYTES,
                             "parameter count"},
    [MOE_CK_PARAMS_MOE] = {"params-moe", K_QTY, F(params_moe), 0, BYTES, "parameter count"},
    [MOE_CK_ZERO] = {"zero", K_ZERO, F(zero), 0, 3, "ZeRO stage"},
    [MOE_CK_ACTIVATION] = {"activation", K_ACT, F(act), 0, 0, NULL},
    [MOE_CK_SEQ_PER_NODE] = {"seq-per-node", K_QTY, F(seq_per_node), 1, TOKENS,
                             "sequence length"},
    [MOE_CK_SWITCH_PORTS] = {"switch-ports", K_U32, F(switch_ports), 1, 1u << 30,
                             "port count"},
    [MOE_CK_TOKENS] = {"tokens", K_QTY, F(tokens), 1, TOKENS, "token count"},
    [MOE_CK_FFN] = {"ffn", K_QTY, F(ffn), 1, DIM, "FFN size"},
    [MOE_CK_EXPERTS] = {"experts", K_QTY, F(experts), 1, DIM, "expert count"},
    [MOE_CK_PARTITIONS] = {"partitions", K_U32, F(partitions), 1, 4096, "partition count"},
    [MOE_CK_REUSE] = {"reuse", K_REUSE, F(reuse), 0, 0, NULL},
    [MOE_CK_MIN_PART] = {"min-partitions", K_U32, F(min_part), 1, 4096, "partition count"},
    [MOE_CK_MAX_PART] = {"max-partitions", K_U32, F(max_part), 1, 4096, "partition count"},
    [MOE_CK_MEM_LIMIT] = {"memory-limit", K_QTY, F(mem_limit), 1, BYTES, "memory size"},
    [MOE_CK_ALPHA] = {"alpha", K_ALPHA, 0, 0, 0, NULL},
    [MOE_CK_PROFILE] = {"profile", K_STR, F(profile), 0, 0, NULL},
    [MOE_CK_EPW] = {"experts-per-worker", K_LIST, 0, 0, 0, NULL},
    [MOE_CK_BLOCKS] = {"blocks", K_U32, F(blocks), 1, MOE_COSTCFG_MAX_LIST, "block count"},
    [MOE_CK_THRESHOLD] = {"threshold", K_QTY, F(threshold), 0, RATE, "threshold"},
    [MOE_CK_PREFETCH] = {"prefetch", K_QTY, F(prefetch), 0, 1e9, "prefetch window"},
    [MOE_CK_SOURCE] = {"source", K_SOURCE, F(source), 0, 0, NULL},
    /* Janus's paths and `iteration` */
    [MOE_CK_SKEW] = {"skew", K_QTY, F(skew), 1, 1e6, "skew"},
    [MOE_CK_PER_SWITCH] = {"gpus-per-switch", K_U32, F(per_switch), 1, 64, "GPUs per switch"},
    [MOE_CK_INFERENCE] = {"inference", K_FLAG, F(inference), 0, 0, NULL},
    /* MoNTA and MPMoE (issue 20) */
    [MOE_CK_R2_O3] = {"r2-o3", K_EFF, F(r_o3[0]), 0, 0, "efficiency r2 of O3"},
    [MOE_CK_R3_O3] = {"r3-o3", K_EFF, F(r_o3[1]), 0, 0, "efficiency r3 of O3"},
    [MOE_CK_LAT_INTRA] = {"latency-intra", K_TIME, F(lat[0]), 0, 1e3, "latency"},
    [MOE_CK_LAT_INTER] = {"latency-inter", K_TIME, F(lat[1]), 0, 1e3, "latency"},
    [MOE_CK_LAT_HBM] = {"latency-hbm", K_TIME, F(lat[2]), 0, 1e3, "latency"},
    [MOE_CK_DP] = {"dp", K_U32, F(dp), 1, 1u << 24, "data-parallel degree"},
    [MOE_CK_LAUNCH] = {"launch-overhead", K_TIME, F(launch), 0, 1e3, "launch overhead"},
    [MOE_CK_COMPUTE_EFF] = {"compute-eff", K_EFF, F(compute_eff), 0, 0, "compute efficiency"},
    /* ExFlow's pricing (issue 20) */
    [MOE_CK_GATHER_BYTES] = {"gather-bytes", K_GATHER, F(gather_bytes), 0, 0, NULL},
    [MOE_CK_P_INTER] = {"p-inter", K_FRAC, F(p_inter), 0, 1, "fraction p_inter"},
    [MOE_CK_P_STAR_INTER] = {"p-star-inter", K_FRAC, F(p_star_inter), 0, 2,
                             "fraction p*_inter"},
    /* iteration --model (issue 41) */
    [MOE_CK_MODEL] = {"model", K_STR, F(model), 0, 0, NULL},
    [MOE_CK_PARALLEL] = {"parallel", K_STR, F(parallel), 0, 0, NULL},
    [MOE_CK_MICRO_BATCH] = {"micro-batch", K_U32, F(micro_batch), 1, 1u << 24, "micro-batch"},
    [MOE_CK_GLOBAL_BATCH] = {"global-batch", K_U32, F(global_batch), 1, 1u << 30,
                             "global batch"},
    [MOE_CK_RECOMPUTE] = {"recompute", K_RECOMPUTE, F(recompute), 0, 0, NULL},
    [MOE_CK_DIST_OPT] = {"distributed-optimizer", K_FLAG, F(dist_opt), 0, 0, NULL},
    [MOE_CK_DTYPE] = {"dtype", K_DTYPE, F(fp8), 0, 0, NULL},
    [MOE_CK_GRAD_BF16] = {"grad-reduce-in-bf16", K_FLAG, F(grad_bf16), 0, 0, NULL},
};

const char *moe_costcfg_key_name(int key, int *has_arg)
{
    if (key < 1 || key >= MOE_CK_COUNT)
        return NULL;
    if (has_arg)
        *has_arg = keys[key].kind != K_FLAG;
    return keys[key].name;
}

int moe_costcfg_key_find(const char *name)
{
    for (int k = 1; k < MOE_CK_COUNT; k++)
        if (!strcmp(keys[k].name, name))
            return k;
    return -1;
}

void moe_costcfg_init(moe_costcfg_t *g)
{
    memset(g, 0, sizeof *g);
    for (int k = 1; k < MOE_CK_COUNT; k++)
        if (keys[k].kind == K_QTY || keys[k].kind == K_FRAC || keys[k].kind == K_TIME ||
            keys[k].kind == K_GATHER)
            *(double *)((char *)g + keys[k].off) = NAN;
    g->act = g->reuse = g->zero = g->recompute = g->fp8 = -1;
    for (int y = 0; y < MOE_MP_STREAMS; y++)
        for (int x = 0; x < 4; x++)
            g->alpha[y][x] = 1;
}

void moe_costcfg_release(moe_costcfg_t *g)
{
    for (size_t i = 0; i < g->nkept; i++)
        free(g->kept[i]);
    free(g->kept);
    g->kept = NULL;
    g->nkept = 0;
}

/* ------------------------------------------------------------------ values */

#define bad(...) util_errf(err, errlen, MOE_EINVAL, __VA_ARGS__)

/* A non-negative number with an optional decimal (K M G T P: 10^3 ...) or binary (Ki Mi Gi
 * Ti: 2^10 ...) suffix; a trailing "B", "B/s" or "/s" is allowed, "b/s" or "bit/s" means bits. */
int moe_costcfg_qty(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0)
        return -1;
    static const char pre[] = "KMGTP";
    const char *q = *end ? strchr(pre, *end) : NULL;
    if (q) {
        int bin = end[1] == 'i';
        v *= pow(bin ? 1024.0 : 1000.0, (double)(q - pre + 1));
        end += 1 + bin;
    }
    if (!strcmp(end, "b/s") || !strcmp(end, "bit/s"))
        v /= 8, end += strlen(end);
    else if (!strcmp(end, "B") || !strcmp(end, "B/s") || !strcmp(end, "/s"))
        end += strlen(end);
    if (*end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* Seconds with an optional unit s, ms, us or ns (5us, 0.02ms, 3e-6). */
static int parse_time(const char *s, double *out)
{
    static const char *const unit[] = {"s", "ms", "us", "ns"};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0)
        return -1;
    for (int i = 0; *end && i < 4; i++)
        if (!strcmp(end, unit[i])) {
            v /= pow(1000.0, i);
            end += strlen(end);
        }
    if (*end)
        return -1;
    *out = v;
    return 0;
}

/* r1 0.741 (a fixed efficiency) or 8M:0.427,32M:0.633,256M:0.741 (a curve, sizes
 * increasing). */
static int set_eff(const char *arg, const char *what, moe_costcfg_eff_t *e, char *err,
                   size_t errlen)
{
    char buf[2048];
    int fail = strlen(arg) >= sizeof buf, fixed = 0;
    e->n = 0;
    if (!fail)
        strcpy(buf, arg);
    for (char *save = NULL, *tok = fail ? NULL : strtok_r(buf, ",", &save); tok && !fail;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        double size = 0, eff;
        if (colon)
            *colon = 0;
        fixed |= !colon;
        fail = e->n == MOE_TOPO_MAX_CURVE || (colon && moe_costcfg_qty(tok, &size)) ||
               moe_costcfg_qty(colon ? colon + 1 : tok, &eff) || !(eff > 0 && eff <= 1) ||
               (e->n && !(size > e->size[e->n - 1]));
        if (!fail) {
            e->size[e->n] = size;
            e->eff[e->n++] = eff;
        }
    }
    if (fail || !e->n || (fixed && e->n > 1))
        return bad("invalid %s '%s' (a number in (0, 1] or SIZE:EFF,...)", what, arg);
    return 0;
}

/* comm,comp=0.8: the slowdown factor of stream y beside x (x may be "all"). */
static int set_alpha(moe_costcfg_t *g, const char *arg, char *err, size_t errlen)
{
    static const char *const names[] = {"comm", "comp", "mem", "all"};
    char y[16], x[16];
    double v;
    int n = 0;
    if (sscanf(arg, "%15[a-z],%15[a-z]=%lf%n", y, x, &v, &n) != 3 || arg[n] ||
        !(v > 0 && v <= 1))
        return bad("invalid slowdown factor '%s' (Y,X=V with V in (0, 1])", arg);
    int yi = -1, xi = -1;
    for (int i = 0; i < 4; i++) {
        if (!strcmp(y, names[i]) && i < 3)
            yi = i;
        if (!strcmp(x, names[i]))
            xi = i;
    }
    if (yi < 0 || xi < 0 || xi == yi)
        return bad("invalid slowdown factor '%s' (streams comm, comp, mem, all)", arg);
    g->alpha[yi][xi] = v;
    return 0;
}

static int set_list(moe_costcfg_t *g, const char *arg, char *err, size_t errlen)
{
    char buf[4096];
    if (strlen(arg) >= sizeof buf)
        return bad("invalid expert list '%s'", arg);
    strcpy(buf, arg);
    g->nepw = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        double v;
        if (g->nepw == MOE_COSTCFG_MAX_LIST || moe_costcfg_qty(tok, &v) || !(v > 0) || v > DIM)
            return bad("invalid expert list '%s'", arg);
        g->epw[g->nepw++] = v;
    }
    return g->nepw ? 0 : bad("invalid expert list '%s'", arg);
}

static int set_word(int *out, int v, const char *msg, const char *arg, char *err,
                    size_t errlen)
{
    if (v < 0)
        return bad("%s '%s' (%s)", msg, arg, strchr(msg, '\0') + 1);
    *out = v;
    return 0;
}

static int source_parse(const char *s)
{
    static const char *const sources[] = {"auto", "recorded", "sequence", "token"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, sources[i]))
            return i;
    return -1;
}

int moe_costcfg_set(moe_costcfg_t *g, int key, const char *val, const int *takes,
                    const char *sub, char *err, size_t errlen)
{
    if (key < 1 || key >= MOE_CK_COUNT)
        return bad("unknown key");
    const ckey_t *k = &keys[key];
    void *field = (char *)g + k->off;
    uint64_t u;
    switch (k->kind) {
    case K_CONFIG: return moe_costcfg_read(g, val, takes, sub, err, errlen);
    case K_FLAG: *(int *)field = 1; return 0;
    case K_STR: *(const char **)field = val; return 0;
    case K_U32:
    case K_ZERO:
        if (moe_parse_u64(val, (uint64_t)k->min, (uint64_t)k->max, &u, k->what, err, errlen))
            return MOE_EINVAL;
        if (k->kind == K_ZERO)
            *(int *)field = (int)u;
        else
            *(uint32_t *)field = (uint32_t)u;
        return 0;
    case K_QTY:
        if (moe_costcfg_qty(val, field) || *(double *)field < k->min) {
            *(double *)field = NAN;
            return bad("invalid %s '%s'", k->what, val);
        }
        if (*(double *)field > k->max) {
            *(double *)field = NAN;
            return bad("%s '%s' out of range (at most %g)", k->what, val, k->max);
        }
        return 0;
    case K_TIME:
        if (parse_time(val, field) || *(double *)field > k->max) {
            *(double *)field = NAN;
            return bad("invalid %s '%s' (seconds, or a number with s, ms, us or ns, at most "
                       "%g s)", k->what, val, k->max);
        }
        return 0;
    case K_FRAC:
        return moe_parse_double(val, k->min, k->max, field, k->what, err, errlen) ? MOE_EINVAL
                                                                                  : 0;
    case K_EFF: return set_eff(val, k->what, field, err, errlen);
    case K_ALPHA: return set_alpha(g, val, err, errlen);
    case K_LIST: return set_list(g, val, err, errlen);
    case K_ACT:
        return set_word(field, moe_monta_act_parse(val), "unknown activation row\0none, tp, "
                        "sp, selective, full", val, err, errlen);
    case K_REUSE:
        return set_word(field, moe_mpmoe_reuse_parse(val), "unknown reuse strategy\0none, S1, "
                        "S2, S3, S4", val, err, errlen);
    case K_GATHER: return moe_exflow_gather_parse(val, field, err, errlen);
    case K_RECOMPUTE:
        return set_word(field, moe_recompute_parse(val), "unknown recompute granularity\0none, "
                        "selective, full", val, err, errlen);
    case K_DTYPE:
        return set_word(field, !strcmp(val, "bf16") ? 0 : !strcmp(val, "fp8") ? 1 : -1,
                        "unknown dtype\0bf16, fp8", val, err, errlen);
    default:
        return set_word(field, source_parse(val), "unknown source\0auto, recorded, sequence, "
                        "token", val, err, errlen);
    }
}

/* ------------------------------------------------------------------ config files */

/* Strip blanks at both ends in place. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = 0;
    return s;
}

/* A copy of a value that outlives the file's line buffer (paths are kept as strings). */
static char *keep(moe_costcfg_t *g, const char *s)
{
    char **k = realloc(g->kept, (g->nkept + 1) * sizeof *k);
    if (!k)
        return NULL;
    g->kept = k;
    return (k[g->nkept] = strdup(s)) ? k[g->nkept++] : NULL;
}

/* Apply one "key = value" line. A bad value there is a data error of that file: the value's
 * message after "'FILE' line N: ". */
static int config_line(moe_costcfg_t *g, const char *path, uint64_t lineno, char *line,
                       const int *takes, const char *sub, char *err, size_t errlen)
{
    char *hash = strchr(line, '#');
    if (hash)
        *hash = 0;
    char *s = trim(line);
    if (!*s)
        return 0;
    char *eq = strchr(s, '=');
    if (eq)
        *eq = 0;
    char *name = trim(s), *val = eq ? trim(eq + 1) : NULL;
    int has_arg = 0, key = moe_costcfg_key_find(name), ok = key == MOE_CK_CONFIG;
    for (const int *t = takes; key > 0 && t && *t && !ok; t++)
        ok = *t == key;
    moe_costcfg_key_name(key, &has_arg);
#define LFAIL(...) util_errf(err, errlen, MOE_EFORMAT, "'%s' line %" PRIu64 ": " __VA_ARGS__)
    if (key < 0 || !ok)
        return LFAIL("unknown key '%s' for %s", path, lineno, name, sub);
    if (has_arg && (!val || !*val))
        return LFAIL("key '%s' needs a value", path, lineno, name);
    if (!has_arg && val && strcmp(val, "1") && strcmp(val, "yes") && strcmp(val, "true"))
        return LFAIL("key '%s' takes no value (or yes)", path, lineno, name);
    if (key == MOE_CK_CONFIG && g->depth >= MAX_DEPTH)
        return LFAIL("config files nested too deeply", path, lineno);
    const char *v = val ? keep(g, val) : NULL;
    if (val && !v)
        return util_errf(err, errlen, MOE_ENOMEM, "%s", moe_strerror(MOE_ENOMEM));
    char msg[1024];
    g->depth++;
    int rc = moe_costcfg_set(g, key, v, takes, sub, msg, sizeof msg);
    g->depth--;
    if (rc == MOE_EINVAL)
        return LFAIL("%s", path, lineno, msg);
#undef LFAIL
    if (rc)
        util_errf(err, errlen, rc, "%s", msg);
    return rc;
}

static int config_run(moe_costcfg_t *g, moe_lines_t *l, const char *path, const int *takes,
                      const char *sub, char *err, size_t errlen)
{
    char *line;
    size_t len;
    int rc, body = 0;
    while ((rc = moe_lines_next(l, &line, &len)) == 1) {
        uint64_t n = moe_lines_lineno(l);
        if (strlen(line) != len)
            rc = util_errf(err, errlen, MOE_EFORMAT, "'%s' line %" PRIu64 ": NUL byte in line",
                           path, n);
        else if (len > MAX_LINE)
            rc = util_errf(err, errlen, MOE_EFORMAT, "'%s' line %" PRIu64 ": line too long",
                           path, n);
        else
            rc = config_line(g, path, n, line, takes, sub, err, errlen);
        if (rc) {
            body = 1;
            break;
        }
    }
    if (rc < 0 && !body) /* the line reader's error */
        util_errf(err, errlen, rc, "cannot read '%s': %s", path,
                  rc == MOE_ESYS ? strerror(errno) : moe_strerror(rc));
    moe_lines_close(l);
    return rc < 0 ? rc : 0;
}

int moe_costcfg_read(moe_costcfg_t *g, const char *path, const int *takes, const char *sub,
                     char *err, size_t errlen)
{
    int st;
    moe_lines_t *l = moe_lines_open(path, &st, err, errlen);
    if (!l)
        return st;
    err[0] = 0;
    return config_run(g, l, path, takes, sub, err, errlen);
}

int moe_costcfg_parse(moe_costcfg_t *g, const char *text, size_t len, const char *name,
                      const int *takes, const char *sub, char *err, size_t errlen)
{
    int st;
    moe_lines_t *l = moe_lines_dopen(-1, (const uint8_t *)text, len, &st);
    if (!l)
        return util_errf(err, errlen, st, "'%s': %s", name, moe_strerror(st));
    err[0] = 0;
    return config_run(g, l, name, takes, sub, err, errlen);
}

/* ------------------------------------------------------------------ topology */

/* A curve given as a key over a topology's curve. */
static void put_curve(moe_link_t *l, const moe_costcfg_eff_t *e)
{
    if (!e->n)
        return;
    l->npoints = e->n;
    memcpy(l->size, e->size, sizeof l->size);
    memcpy(l->eff, e->eff, sizeof l->eff);
}

/* The MoNTA and MPMoE keys over the topology: latencies, launch overhead, curves. */
static void cfg_model_topo(const moe_costcfg_t *g, moe_topo_t *t)
{
    moe_link_t *lat[3] = {&t->link[MOE_LINK_INTRA], &t->link[MOE_LINK_INTER], &t->hbm};
    for (int i = 0; i < 3; i++)
        if (!isnan(g->lat[i]))
            lat[i]->latency = g->lat[i];
    if (!isnan(g->launch))
        t->launch = g->launch;
    put_curve(&t->compute, &g->compute_eff);
    put_curve(&t->intra_o3, &g->r_o3[0]);
    put_curve(&t->hbm_o3, &g->r_o3[1]);
}

int moe_costcfg_topo(const moe_costcfg_t *g, moe_topo_t *t, char *err, size_t errlen)
{
    int rc;
    if (g->topology) {
        if ((rc = moe_topo_load(t, g->topology, err, errlen)) != 0)
            return rc;
    } else if (moe_topo_uniform(t, 1, g->gpn ? g->gpn : 1)) {
        return util_errf(err, errlen, MOE_EINVAL, "invalid topology");
    }
    if (moe_topo_resize(t, g->nodes, g->gpn))
        return util_errf(err, errlen, MOE_ERANGE, "topology of %u x %u ranks is too large",
                         g->nodes ? g->nodes : t->nodes, g->gpn ? g->gpn : t->gpus_per_node);
    for (int c = MOE_LINK_INTRA; c < MOE_LINK_CLASSES; c++)
        if (g->bw[c] > 0)
            t->link[c].bw = g->bw[c];
    if (g->hbm > 0)
        t->hbm_bw = g->hbm;
    if (g->flops > 0)
        t->flops = g->flops;
    cfg_model_topo(g, t);
    moe_topo_update_cost(t);
    return 0;
}

static double or_nan(double v, double d)
{
    return isnan(v) ? d : v;
}

/* A MoNTA resource: a link's cost, with an efficiency key over its curve. */
static void monta_res(moe_monta_res_t *r, moe_link_t l, double bw, const moe_costcfg_eff_t *e)
{
    *r = l;
    r->bw = bw;
    put_curve(r, e);
}

static void monta_mem(const moe_costcfg_t *g, const moe_monta_in_t *in, moe_monta_mem_in_t *m)
{
    memset(m, 0, sizeof *m);
    m->P1 = or_nan(g->params_dense, 0);
    m->P2 = or_nan(g->params_moe, 0);
    m->b = in->b, m->s = in->s, m->h = in->h;
    m->a = or_nan(g->heads, 0);
    m->l = or_nan(g->layers, 0);
    m->k = g->topk ? g->topk : 1;
    m->p = g->pp ? g->pp : 1;
    m->t = in->t;
    m->c = in->e;
    m->zero = g->zero < 0 ? 0 : g->zero;
    m->act = g->act < 0 ? MOE_ACT_SP : g->act;
}

int moe_costcfg_monta(const moe_costcfg_t *g, const moe_topo_t *t, moe_monta_in_t *in,
                      moe_monta_mem_in_t *mem, int *have_mem, char *err, size_t errlen)
{
    memset(in, 0, sizeof *in);
    in->b = or_nan(g->batch, 1);
    in->s = or_nan(g->seq, 0);
    in->h = or_nan(g->hidden, 0);
    in->bpe = or_nan(g->elem_bytes, 2);
    in->volume = or_nan(g->volume, 0);
    if (!(in->volume > 0) && !(in->s > 0 && in->h > 0))
        return bad("give --seq and --hidden (or --volume)");
    in->t = g->tp ? g->tp : t->gpus_per_node;
    in->e = g->ep ? g->ep : t->nodes;
    monta_res(&in->aa, moe_topo_coll(t, MOE_COLL_ALLTOALL, MOE_LINK_INTER),
              t->link[MOE_LINK_INTER].bw, &g->r[0]);
    monta_res(&in->ag, moe_topo_coll(t, MOE_COLL_ALLGATHER, MOE_LINK_INTRA),
              t->link[MOE_LINK_INTRA].bw, &g->r[1]);
    monta_res(&in->d2d, t->hbm, t->hbm_bw, &g->r[2]);
    in->ag_o3 = t->intra_o3, in->d2d_o3 = t->hbm_o3;
    in->i_minimal = or_nan(g->min_chunk, 1048576);
    in->max_chunks = g->max_chunks;
    *have_mem = !isnan(g->params_dense) || !isnan(g->params_moe) || !isnan(g->layers);
    if (*have_mem)
        monta_mem(g, in, mem);
    const char *miss = !(in->aa.bw > 0) ? "inter-node (B1, --bw-inter)"
                       : !(in->ag.bw > 0) ? "intra-node (B2, --bw-intra)"
                       : !(in->d2d.bw > 0) ? "memory (B3, --bw-hbm)" : NULL;
    return miss ? util_errf(err, errlen, MOE_ERANGE, "the %s bandwidth is unknown: give "
                            "--topology or the option", miss) : 0;
}

int moe_costcfg_janus_topo(const moe_costcfg_t *g, moe_topo_t *t, char *err, size_t errlen)
{
    if (g->topology) {
        int rc = moe_costcfg_topo(g, t, err, errlen);
        return rc == MOE_EINVAL ? MOE_ERANGE : rc;
    }
    if (!g->nodes)
        return bad("--nodes (or --topology) is required");
    if (moe_topo_uniform(t, g->nodes, g->gpn ? g->gpn : 8))
        return bad("%u machines of %u workers is more than %u ranks", g->nodes,
                   g->gpn ? g->gpn : 8, MOE_MAX_RANKS);
    /* unset bandwidths stay 0 (unknown), never NaN: the times then are left out */
    for (int c = MOE_LINK_INTER; c <= MOE_LINK_HOST; c++)
        t->link[c].bw = g->bw[c] > 0 ? g->bw[c] : 0;
    moe_topo_update_cost(t);
    return 0;
}

/* A part given on the command line, else the measured one, else unknown (-1: uniform). */
static double part_of(double given, const moe_exflow_meas_t *ms, double measured)
{
    return !isnan(given) ? given : ms->have ? measured : -1;
}

int moe_costcfg_exflow(const moe_costcfg_t *g, const moe_exflow_meas_t *ms, moe_topo_t *topo,
                       moe_exflow_in_t *in, moe_exflow_pricing_t *pr, char *err,
                       size_t errlen)
{
    pr->gather_bytes = isnan(g->gather_bytes) ? 0 : g->gather_bytes;
    if (ms->have && (!isnan(g->p_inter) || !isnan(g->p_star_inter)))
        return bad("--p-inter and --p-star-inter go with --p and --p-star, not with a trace");
    pr->p_inter = part_of(g->p_inter, ms, ms->p_inter);
    pr->p_star_inter = part_of(g->p_star_inter, ms, ms->p_star_inter);
    pr->topo = NULL;
    if (!g->topology && !g->nodes && !g->gpn)
        return 0;
    int rc = moe_costcfg_topo(g, topo, err, errlen);
    if (rc)
        return rc;
    double R = moe_topo_ranks(topo);
    if (!(in->G >= 1))
        in->G = R;
    if (in->G != R)
        return bad("%g ranks, the topology has %g (nodes x gpus-per-node)", in->G, R);
    if (ms->have && ms->gpus_per_node != topo->gpus_per_node)
        return util_errf(err, errlen, MOE_ESHAPE, "the placement has %u GPUs per node, the "
                         "topology %u", ms->gpus_per_node, topo->gpus_per_node);
    pr->topo = topo;
    return 0;
}
