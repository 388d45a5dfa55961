/* run/run_cfg.c -- a run's configuration: defaults, mode names, and the options every rank
 * must hold alike, compared in one exchange before any other communication
 * (moe_run_cfg_agree). */
#include "config.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/cost.h"
#include "moe/moe.h"
#include "moe/run.h"
#include "run_comm_internal.h"

void moe_run_cfg_default(moe_run_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->H = 64;
    c->F = 128;
    c->expert = MOE_EXPERT_SWIGLU;
    c->tokens_per_rank = 64;
    c->iters = 3;
    c->warmup = 1;
    c->seed = 1;
    c->credits = 4;
    c->optimizer = MOE_RUN_SGD;
    c->prefetch = 1;
}

const char *moe_run_cfg_conflict(const moe_run_cfg_t *c)
{
    if (c->chunks_set && c->mode != MOE_RUN_PIPELINED && c->mode != MOE_RUN_HIERARCHICAL)
        return "--chunks applies to pipelined and hierarchical mode";
    if (c->train && c->mode == MOE_RUN_HIERARCHICAL && c->reuse && c->reuse != MOE_REUSE_S4)
        return "--reuse: hierarchical mode restores by re-communication and re-computation "
               "only (S4)";
    if (c->nodes && !c->topology)
        return "--nodes needs --topology";
    if (c->reuse && (!c->train || c->mode == MOE_RUN_DATACENTRIC))
        return "--reuse applies to training in the expert-parallel modes";
    return NULL;
}

static const char *const mode_names[MOE_RUN_MODES] = {"vanilla", "coherent", "pipelined",
                                                  "hierarchical", "datacentric"};

const char *moe_run_mode_name(int mode)
{
    return mode >= 0 && mode < MOE_RUN_MODES ? mode_names[mode] : "?";
}

int moe_run_mode_parse(const char *s)
{
    for (int i = 0; i < MOE_RUN_MODES; i++)
        if (!strcmp(s, mode_names[i]))
            return i;
    return -1;
}

static const char *const optimizer_names[] = {"sgd", "adam"};

const char *moe_run_optimizer_name(int opt)
{
    return opt >= 0 && opt <= MOE_RUN_ADAM ? optimizer_names[opt] : "?";
}

int moe_run_optimizer_parse(const char *s)
{
    for (int i = 0; i <= MOE_RUN_ADAM; i++)
        if (!strcmp(s, optimizer_names[i]))
            return i;
    return -1;
}

/* How a field of moe_run_cfg_t reads as text. */
enum agree_kind {
    AG_U32,     /* uint32_t, 0 = the default */
    AG_INT,     /* int */
    AG_U64,     /* uint64_t */
    AG_FLAG,    /* int, given or not */
    AG_NOFLAG,  /* int, an option that clears it (--no-prefetch) */
    AG_NAMED,   /* int, an enumeration shown by the field's name function */
    AG_FILE,    /* const char *: compared on presence only (ranks may name their own copies) */
    AG_CHUNKS,  /* uint32_t chunks with chunks_set */
    AG_DBL,     /* double, compared as its shortest exact text */
};

/* --reuse: enum moe_mpmoe_reuse or MOE_RUN_REUSE_AUTO */
static const char *reuse_name(int reuse)
{
    return reuse == MOE_RUN_REUSE_AUTO ? "auto" : moe_mpmoe_reuse_name(reuse);
}

/* The one table of what must agree: a rank holding another value would run another loop
 * count, message size or collective sequence and hang or misread its peers. Verbosity and
 * output names are rank-local and are not here. */
static const struct agree_field {
    const char *name;
    int kind;
    size_t off;
    const char *(*named)(int); /* AG_NAMED: the value's name */
} fields[] = {
    {"--mode", AG_NAMED, offsetof(moe_run_cfg_t, mode), moe_run_mode_name},
    {"--layers", AG_U32, offsetof(moe_run_cfg_t, L), NULL},
    {"--experts", AG_U32, offsetof(moe_run_cfg_t, E), NULL},
    {"--topk", AG_U32, offsetof(moe_run_cfg_t, K), NULL},
    {"--hidden", AG_U32, offsetof(moe_run_cfg_t, H), NULL},
    {"--ffn", AG_U32, offsetof(moe_run_cfg_t, F), NULL},
    {"--expert", AG_NAMED, offsetof(moe_run_cfg_t, expert), moe_expert_name},
    {"--tokens-per-rank", AG_U64, offsetof(moe_run_cfg_t, tokens_per_rank), NULL},
    {"--dtype", AG_NAMED, offsetof(moe_run_cfg_t, dtype), moe_dtype_name},
    {"--trace", AG_FILE, offsetof(moe_run_cfg_t, trace), NULL},
    {"--placement", AG_FILE, offsetof(moe_run_cfg_t, placement), NULL},
    {"--topology", AG_FILE, offsetof(moe_run_cfg_t, topology), NULL},
    {"--gpus-per-node", AG_U32, offsetof(moe_run_cfg_t, gpn), NULL},
    {"--nodes", AG_U32, offsetof(moe_run_cfg_t, nodes), NULL},
    {"--iters", AG_INT, offsetof(moe_run_cfg_t, iters), NULL},
    {"--warmup", AG_INT, offsetof(moe_run_cfg_t, warmup), NULL},
    {"--seed", AG_U64, offsetof(moe_run_cfg_t, seed), NULL},
    {"--check", AG_FLAG, offsetof(moe_run_cfg_t, check), NULL},
    {"--chunks", AG_CHUNKS, offsetof(moe_run_cfg_t, chunks), NULL},
    {"--credits", AG_U32, offsetof(moe_run_cfg_t, credits), NULL},
    {"--no-prefetch", AG_NOFLAG, offsetof(moe_run_cfg_t, prefetch), NULL},
    {"--replica-rule", AG_NAMED, offsetof(moe_run_cfg_t, replica_rule), moe_replica_rule_name},
    {"--train", AG_FLAG, offsetof(moe_run_cfg_t, train), NULL},
    {"--optimizer", AG_NAMED, offsetof(moe_run_cfg_t, optimizer), moe_run_optimizer_name},
    {"--lr", AG_DBL, offsetof(moe_run_cfg_t, lr), NULL},
    {"--reuse", AG_NAMED, offsetof(moe_run_cfg_t, reuse), reuse_name},
    {"--measure-wait", AG_FLAG, offsetof(moe_run_cfg_t, measure_wait), NULL},
};
#define NFIELDS (sizeof fields / sizeof *fields)

/* One value as a rank sends it: a comparison key, then the text a message shows. */
typedef struct agree_slot {
    char key[8]; /* files: "0" or "1" (given); empty: the text is the key */
    char text[MOE_RUN_OPT_VALUE];
} agree_slot_t;

static void field_slot(const moe_run_cfg_t *c, const struct agree_field *f, agree_slot_t *s)
{
    const char *p = (const char *)c + f->off;
    uint32_t u;
    uint64_t v;
    int i;
    const char *str;
    switch (f->kind) {
    case AG_U32:
        memcpy(&u, p, sizeof u);
        if (u)
            snprintf(s->text, sizeof s->text, "%" PRIu32, u);
        else
            snprintf(s->text, sizeof s->text, "the default");
        break;
    case AG_INT:
        memcpy(&i, p, sizeof i);
        snprintf(s->text, sizeof s->text, "%d", i);
        break;
    case AG_U64:
        memcpy(&v, p, sizeof v);
        snprintf(s->text, sizeof s->text, "%" PRIu64, v);
        break;
    case AG_FLAG:
    case AG_NOFLAG:
        memcpy(&i, p, sizeof i);
        snprintf(s->text, sizeof s->text, "%s", (f->kind == AG_FLAG) == (i != 0) ? "on" : "off");
        break;
    case AG_NAMED:
        memcpy(&i, p, sizeof i);
        snprintf(s->text, sizeof s->text, "%s", f->named(i));
        break;
    case AG_DBL: {
        double d;
        memcpy(&d, p, sizeof d);
        snprintf(s->text, sizeof s->text, "%.17g", d);
        break;
    }
    case AG_FILE:
        memcpy(&str, p, sizeof str);
        if (str && strlen(str) + 3 <= sizeof s->text)
            snprintf(s->text, sizeof s->text, "'%s'", str);
        else
            snprintf(s->text, sizeof s->text, "%s", str ? "a file" : "none");
        snprintf(s->key, sizeof s->key, "%d", str != NULL);
        break;
    case AG_CHUNKS:
        memcpy(&u, p, sizeof u);
        if (!c->chunks_set)
            snprintf(s->text, sizeof s->text, "the default");
        else if (!u)
            snprintf(s->text, sizeof s->text, "auto");
        else
            snprintf(s->text, sizeof s->text, "%" PRIu32, u);
        break;
    }
}

static int slot_differs(const agree_slot_t *a, const agree_slot_t *b)
{
    if (a->key[0] && b->key[0])
        return strcmp(a->key, b->key) != 0;
    return strcmp(a->text, b->text) != 0;
}

int moe_run_cfg_agree(moe_run_comm_t *c, const moe_run_cfg_t *cfg, const moe_run_opt_t *extra,
                      int nextra, char *errbuf, size_t errlen)
{
    size_t n = NFIELDS + (size_t)(nextra > 0 ? nextra : 0), bytes = n * sizeof(agree_slot_t);
    int G = moe_run_comm_size(c);
    agree_slot_t *mine = calloc(n, sizeof *mine), *all = calloc((size_t)G * n, sizeof *all);
    if (!mine || !all) {
        free(mine);
        free(all);
        snprintf(errbuf, errlen, "%s", moe_strerror(MOE_ENOMEM));
        return MOE_ENOMEM;
    }
    for (size_t i = 0; i < NFIELDS; i++)
        field_slot(cfg, &fields[i], &mine[i]);
    for (size_t i = NFIELDS; i < n; i++) {
        snprintf(mine[i].text, sizeof mine[i].text, "%s", extra[i - NFIELDS].value);
    }
    int rc = run_comm_allgather(c, mine, bytes, all);
    if (rc < 0) {
        snprintf(errbuf, errlen, "comparing the options of the ranks: %s", run_comm_errmsg(c));
        goto out;
    }
    /* every rank sees every value, so every rank finds the same first difference: the first
     * option in table order, rank 0 against the lowest rank that differs */
    for (size_t i = 0; i < n && !rc; i++)
        for (int k = 1; k < G; k++) {
            const agree_slot_t *a = &all[i], *b = &all[(size_t)k * n + i];
            if (!slot_differs(a, b))
                continue;
            const char *name = i < NFIELDS ? fields[i].name : extra[i - NFIELDS].name;
            snprintf(errbuf, errlen, "ranks disagree on %s: rank 0 has %s, rank %d has %s", name,
                     a->text, k, b->text);
            rc = 1;
            break;
        }
out:
    free(mine);
    free(all);
    return rc;
}
