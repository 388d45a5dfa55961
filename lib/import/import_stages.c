/* import/import_stages.c -- pipeline stages joined as layers (moe-trace import
 * --pipeline-stages): each stage's file holds its own layers of the same tokens. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_readers_internal.h"
#include "moe/import.h"
#include "moe/moe.h"
#include "moe/trace.h"
#include "util_internal.h"

/*
 * Megatron-Core with pipeline parallelism gives each stage a TransformerBlock of its own
 * layers; the router tracer (megatron/core/transformer/moe/router_trace.py, RouterTracer.
 * make_hook via _parse_router_module_name) takes a record's layer from the module name
 * "decoder.layers.N.", N the index into the stage's own layer list, and each rank writes its
 * own router_trace_rank{rank}.jsonl. Every stage routes the same micro-batches in the same
 * order, so the stages' files of one pipeline hold the same tokens, each for its own layers.
 * Joined, a token's layers are stage 0's, then stage 1's, ...; its step, position, sequence
 * and rank are stage 0's, and the tokens must agree in step and position, stage by stage.
 * The inputs are whole pipelines in order: stages 0..S-1 of the first, then of the next.
 *
 * Model layers: stage s's local layer l is model layer offset(s) + l. With --model-layers N
 * the stages split the model evenly (Megatron's default: N / S layers each); without it each
 * stage is taken to end with its last MoE layer (offset(s) = the sum of the earlier stages'
 * largest local model layer + 1). --moe-layers gives the joined layers' model layers instead
 * (uneven splits, a last dense layer).
 */

typedef struct stage {
    const char *path;
    moe_importer_t *im;
    moe_trace_hdr_t h;
    moe_trace_rec_t r;
} stage_t;

/* A stage's failure: msg, an importer's message (maybe errbuf itself), which names the input
 * (imp_fail). */
static int stage_err(char *errbuf, size_t errlen, int st, const char *msg)
{
    char why[512];
    snprintf(why, sizeof why, "%s", msg);
    return util_errf(errbuf, errlen, st, "%s", why);
}

/* The joined model layers of the stages into m, options applied. */
static int join_layers(const moe_import_job_t *job, const stage_t *st, uint32_t S,
                       uint32_t layers, moe_layer_map_t *m, char *errbuf, size_t errlen)
{
    const moe_import_opts_t *o = &job->io;
    char why[256];
    int rc = 0;
    moe_layer_map_init(m, layers);
    if (!o->moe_layers) {
        uint32_t per = o->model_layers / S, off = 0, at = 0;
        if (o->model_layers && o->model_layers % S)
            return util_errf(errbuf, errlen, MOE_EINVAL, "--model-layers %u does not split "
                             "evenly into %u stages: give the joined layers' model layers "
                             "with --moe-layers", o->model_layers, S);
        if (!(m->id = malloc(layers * sizeof *m->id)))
            return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
        for (uint32_t s = 0; s < S && !rc; s++) {
            moe_layer_map_t sm;
            if ((rc = moe_layer_map_read(st[s].h.text, st[s].h.layers, &sm, why, sizeof why)))
                rc = util_errf(errbuf, errlen, rc, "'%s': %s", st[s].path, why);
            uint32_t last = 0;
            for (uint32_t l = 0; l < st[s].h.layers && !rc; l++) {
                last = moe_layer_map_model(&sm, l);
                if (per && last >= per)
                    rc = util_errf(errbuf, errlen, MOE_ERANGE, "'%s' (stage %u): layer %u is "
                                   "beyond the %u layers of a stage of --model-layers %u",
                                   st[s].path, s, last, per, o->model_layers);
                m->id[at++] = (per ? s * per : off) + last;
            }
            off += last + 1;
            moe_layer_map_release(&sm);
        }
        if (!rc && off > MOE_LAYER_MAP_MAX)
            rc = util_errf(errbuf, errlen, MOE_ERANGE, "model layer %u out of range", off);
    }
    if (!rc && (rc = moe_layer_map_set(m, o->model_layers,
                                       o->first_moe_given ? (int64_t)o->first_moe_layer : -1,
                                       o->moe_layers, why, sizeof why)) != 0)
        rc = util_errf(errbuf, errlen, rc, "'%s': %s", st[0].path, why);
    return rc;
}

/* The joined header of the first pipeline into j. */
static int join_header(const moe_import_job_t *job, const stage_t *st, uint32_t S,
                       uint32_t experts, moe_trace_hdr_t *j, char *errbuf, size_t errlen)
{
    uint32_t layers = 0;
    for (uint32_t s = 0; s < S; s++)
        layers += st[s].h.layers;
    if (layers > MOE_TRACE_MAX_LAYERS)
        return util_errf(errbuf, errlen, MOE_ERANGE, "%u layers in the stages: at most %u "
                         "are supported", layers, MOE_TRACE_MAX_LAYERS);
    if (moe_trace_hdr_copy(j, &st[0].h) != 0)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    j->layers = layers;
    j->experts = experts;
    j->hidden = job->hidden;
    j->elem_bytes = job->elem_bytes;
    int rc = 0;
    char line[640];
    for (uint32_t s = 0, first = 0; s < S && !rc; first += st[s++].h.layers) {
        snprintf(line, sizeof line, "@CO\tpipeline: stage %u of %u is layers %u..%u: '%.500s'",
                 s, S, first, first + st[s].h.layers - 1, st[s].path);
        for (char *c = line; *c; c++)
            *c = (unsigned char)*c < ' ' && *c != '\t' ? '?' : *c; /* one line */
        rc = moe_trace_hdr_add_line(j, line);
    }
    moe_layer_map_t m;
    if (rc)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    if ((rc = join_layers(job, st, S, layers, &m, errbuf, errlen)) == 0 &&
        (rc = moe_layer_map_comment(&m, j)) != 0)
        rc = util_errf(errbuf, errlen, rc, "out of memory");
    moe_layer_map_release(&m);
    return rc;
}

/* One joined token from every stage's next one into out; 1, 0 at the end, or negative. */
static int join_token(stage_t *st, uint32_t S, moe_trace_rec_t *out, uint32_t topk, int weights,
                      char *errbuf, size_t errlen)
{
    int got0 = 0;
    for (uint32_t s = 0; s < S; s++) {
        int got = moe_import_next(st[s].im, &st[s].r);
        if (got < 0)
            return stage_err(errbuf, errlen, got, moe_import_errmsg(st[s].im));
        if (s == 0)
            got0 = got;
        else if (got != got0)
            return util_errf(errbuf, errlen, MOE_ESHAPE, "'%s' (stage %u) has %s tokens than "
                             "'%s' (stage 0): the stages must hold the same tokens", st[s].path,
                             s, got ? "more" : "fewer", st[0].path);
        else if (got && (st[s].r.step != st[0].r.step || st[s].r.pos != st[0].r.pos))
            return util_errf(errbuf, errlen, MOE_ESHAPE, "'%s' (stage %u): a token of step %u, "
                             "position %u where '%s' (stage 0) has step %u, position %u: the "
                             "stages must hold the same tokens in the same order", st[s].path,
                             s, st[s].r.step, st[s].r.pos, st[0].path, st[0].r.step,
                             st[0].r.pos);
    }
    if (!got0)
        return 0;
    size_t at = 0;
    for (uint32_t s = 0; s < S; s++) {
        size_t n = (size_t)st[s].h.layers * topk;
        memcpy(out->ids + at, st[s].r.ids, n * sizeof *out->ids);
        if (weights)
            memcpy(out->weights + at, st[s].r.weights, n * sizeof *out->weights);
        at += n;
    }
    out->seq = st[0].r.seq;
    out->pos = st[0].r.pos;
    out->step = st[0].r.step;
    out->rank = st[0].r.rank;
    return 1;
}

/* The report of a pipeline: the stages' counts, its tokens counted once. */
static void report(const stage_t *st, uint32_t S, uint64_t tokens, uint64_t incomplete,
                   moe_import_report_t *total)
{
    moe_import_report_t sum = {0};
    for (uint32_t s = 0; s < S; s++)
        if (st[s].im)
            moe_import_report_add(st[s].im, &sum);
    moe_import_report_t first = {0};
    if (st[0].im)
        moe_import_report_add(st[0].im, &first);
    total->tokens += tokens;
    total->incomplete += incomplete;
    total->missing_cells += sum.missing_cells;
    total->bytes_in += sum.bytes_in;
    total->sequences += first.sequences;
    total->skipped_mtp += sum.skipped_mtp;
    total->repeats += sum.repeats;
    if (tokens && sum.max_id > total->max_id)
        total->max_id = sum.max_id;
}

int imp_stages_pass(const moe_import_job_t *job, const moe_trace_sink_t *out, uint32_t experts,
                    moe_import_report_t *total, uint32_t *max_rank, char *errbuf, size_t errlen)
{
    const uint32_t S = job->pipeline_stages;
    memset(total, 0, sizeof *total);
    *max_rank = 0;
    if (job->ninputs % S)
        return util_errf(errbuf, errlen, MOE_EINVAL, "%d inputs are not whole pipelines of %u "
                         "stages", job->ninputs, S);
    if (job->io.drop_incomplete)
        return util_errf(errbuf, errlen, MOE_EINVAL, "--drop-incomplete would drop tokens "
                         "stage by stage and misalign the stages: not with --pipeline-stages");
    stage_t *st = calloc(S, sizeof *st);
    uint32_t *layers = calloc(S, sizeof *layers);
    moe_trace_hdr_t j;
    moe_trace_hdr_init(&j);
    moe_trace_rec_t r = {0};
    uint64_t written = 0;
    int rc = st && layers ? 0 : util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    for (int g = 0; rc == 0 && g < job->ninputs / (int)S; g++) {
        uint64_t tokens = 0, incomplete = 0;
        for (uint32_t s = 0; s < S && rc == 0; s++) {
            stage_t *x = &st[s];
            int i = g * (int)S + (int)s, e;
            x->path = job->inputs[i];
            moe_trace_hdr_init(&x->h);
            if (!(x->im = moe_import_open(&job->io, x->path, (uint32_t)(g * (int)S), &e, errbuf,
                                          errlen)))
                rc = stage_err(errbuf, errlen, e < 0 ? e : MOE_EFORMAT, errbuf);
            else if ((e = moe_import_header(x->im, &x->h)) < 0)
                rc = stage_err(errbuf, errlen, e, moe_import_errmsg(x->im));
            else if (g == 0 ? s > 0 && (x->h.topk != st[0].h.topk ||
                                        (x->h.flags & MOE_TRACE_WEIGHTS) !=
                                            (st[0].h.flags & MOE_TRACE_WEIGHTS))
                            : x->h.layers != layers[s] || x->h.topk != j.topk ||
                                  (x->h.flags & MOE_TRACE_WEIGHTS) !=
                                      (j.flags & MOE_TRACE_WEIGHTS))
                rc = util_errf(errbuf, errlen, MOE_ESHAPE, "'%s' (stage %u): %u layers, top-%u%s,"
                               " unlike '%s' (stage %u)", x->path, s, x->h.layers, x->h.topk,
                               (x->h.flags & MOE_TRACE_WEIGHTS) ? " with weights" : "",
                               job->inputs[g ? (int)s : 0], g ? s : 0);
            layers[s] = g == 0 ? x->h.layers : layers[s];
        }
        if (rc == 0 && g == 0 && (rc = join_header(job, st, S, experts, &j, errbuf, errlen)) == 0)
            rc = moe_trace_rec_init(&r, &j) != 0
                     ? util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory")
                     : out->begin(out->ctx, &j);
        int got;
        while (rc == 0 && (got = join_token(st, S, &r, j.topk, !!(j.flags & MOE_TRACE_WEIGHTS),
                                            errbuf, errlen)) != 0) {
            if (got < 0) {
                rc = got;
                break;
            }
            r.token = written++;
            tokens++;
            *max_rank = r.rank > *max_rank ? r.rank : *max_rank;
            int miss = 0;
            for (size_t k = 0; rc == 0 && k < (size_t)j.layers * j.topk; k++) {
                miss |= r.ids[k] == MOE_EXPERT_NONE;
                if (r.ids[k] != MOE_EXPERT_NONE && r.ids[k] >= experts)
                    rc = util_errf(errbuf, errlen, MOE_ERANGE, "'%s': expert id %u out of "
                                   "range (%u experts)", job->inputs[g * (int)S], r.ids[k],
                                   experts);
            }
            incomplete += miss;
            if (rc == 0)
                rc = out->put(out->ctx, &r);
        }
        report(st, S, tokens, incomplete, total);
        for (uint32_t s = 0; s < S; s++) {
            moe_import_close(st[s].im);
            st[s].im = NULL;
            moe_trace_hdr_release(&st[s].h);
            moe_trace_rec_release(&st[s].r);
        }
        if (job->progress)
            job->progress(job->progress_arg, (uint64_t)(g + 1) * S, (uint64_t)job->ninputs);
    }
    if (rc == 0 && total->tokens == 0)
        rc = util_errf(errbuf, errlen, MOE_EEMPTY, "no tokens in input");
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&j);
    free(st);
    free(layers);
    return rc;
}
