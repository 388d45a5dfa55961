/* import/import_run.c -- an import of several inputs into one trace (moe-trace import): the
 * shape checks across inputs, token numbering, and the spool that lets E be inferred. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_readers_internal.h"
#include "moe/import.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/trace.h"
#include "util_internal.h"

/* An importer's failure: its message names the input (imp_fail). */
static int input_err(char *errbuf, size_t errlen, int st, const char *msg)
{
    char why[512];
    snprintf(why, sizeof why, "%s", msg); /* msg may be errbuf itself */
    return util_errf(errbuf, errlen, st, "%s", why);
}

/* A failed status for an importer that reported none (a 0 from moe_import_header is success). */
static int failed(int st)
{
    return st < 0 ? st : MOE_EFORMAT;
}

/* The model layers the options give (io.moe_layers, first_moe_layer, model_layers) added to
 * h as @CO lines where the input's own lines record less; they must agree with them. */
static int label_layers(const moe_import_job_t *job, const char *in, moe_trace_hdr_t *h,
                        char *errbuf, size_t errlen)
{
    const moe_import_opts_t *o = &job->io;
    if (!o->moe_layers && !o->model_layers && !o->first_moe_given)
        return 0;
    moe_layer_map_t m;
    char why[256];
    int rc = moe_layer_map_read(h->text, h->layers, &m, why, sizeof why);
    uint32_t had_n = m.model_layers;
    int had_ids = m.id != NULL;
    if (!rc)
        rc = moe_layer_map_set(&m, o->model_layers,
                               o->first_moe_given ? (int64_t)o->first_moe_layer : -1,
                               o->moe_layers, why, sizeof why);
    if (rc == MOE_ENOMEM)
        rc = util_errf(errbuf, errlen, rc, "out of memory");
    else if (rc)
        rc = util_errf(errbuf, errlen, rc, "'%s': %s", in, why);
    else if (((!had_ids && m.id) || had_n != m.model_layers) &&
             (rc = moe_layer_map_comment(&m, h)) != 0)
        rc = util_errf(errbuf, errlen, rc, "out of memory");
    moe_layer_map_release(&m);
    return rc;
}

/* One pass over every input into out, whose header is the first input's shape with E =
 * experts. *max_rank receives the largest source rank seen. */
static int import_pass(const moe_import_job_t *job, const moe_trace_sink_t *out,
                       uint32_t experts, moe_import_report_t *total, uint32_t *max_rank,
                       char *errbuf, size_t errlen)
{
    if (job->pipeline_stages > 1)
        return imp_stages_pass(job, out, experts, total, max_rank, errbuf, errlen);
    moe_trace_hdr_t first, h;
    moe_trace_hdr_init(&first);
    moe_trace_rec_t r = {0};
    uint64_t written = 0; /* tokens written so far: the next token id */
    int rc = 0;
    memset(total, 0, sizeof *total);
    *max_rank = 0;
    for (int i = 0; rc == 0 && i < job->ninputs; i++) {
        const char *in = job->inputs[i];
        int st;
        moe_importer_t *im = moe_import_open(&job->io, in, (uint32_t)i, &st, errbuf, errlen);
        moe_trace_hdr_init(&h);
        if (!im) {
            rc = input_err(errbuf, errlen, failed(st), errbuf);
        } else if ((st = moe_import_header(im, &h)) < 0) {
            rc = input_err(errbuf, errlen, st, moe_import_errmsg(im));
        } else if (i == 0) {
            h.experts = experts;
            h.hidden = job->hidden;
            h.elem_bytes = job->elem_bytes;
            if ((rc = label_layers(job, in, &h, errbuf, errlen)) != 0)
                ;
            else if (moe_trace_hdr_copy(&first, &h) != 0)
                rc = util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
            else
                rc = out->begin(out->ctx, &first);
        } else if (h.layers != first.layers || h.topk != first.topk ||
                   (h.flags & MOE_TRACE_WEIGHTS) != (first.flags & MOE_TRACE_WEIGHTS)) {
            rc = util_errf(errbuf, errlen, MOE_ESHAPE,
                           "'%s': %u layers, top-%u%s, but '%s' has %u layers, top-%u%s", in,
                           h.layers, h.topk, (h.flags & MOE_TRACE_WEIGHTS) ? " with weights" : "",
                           job->inputs[0], first.layers, first.topk,
                           (first.flags & MOE_TRACE_WEIGHTS) ? " with weights" : "");
        }
        while (rc == 0 && (st = moe_import_next(im, &r)) == 1) {
            /* Token ids number the output's tokens: unique across several inputs. */
            r.token = written++;
            *max_rank = r.rank > *max_rank ? r.rank : *max_rank;
            for (size_t k = 0; rc == 0 && k < (size_t)first.layers * first.topk; k++)
                if (r.ids[k] != MOE_EXPERT_NONE && r.ids[k] >= experts)
                    rc = util_errf(errbuf, errlen, MOE_ERANGE,
                                   "'%s': expert id %u out of range (%u experts)", in, r.ids[k],
                                   experts);
            if (rc == 0)
                rc = out->put(out->ctx, &r);
        }
        if (rc == 0 && st < 0)
            rc = input_err(errbuf, errlen, st, moe_import_errmsg(im));
        if (im)
            moe_import_report_add(im, total);
        moe_import_close(im);
        moe_trace_hdr_release(&h);
        if (job->progress)
            job->progress(job->progress_arg, (uint64_t)i + 1, (uint64_t)job->ninputs);
    }
    if (rc == 0 && total->tokens == 0)
        rc = util_errf(errbuf, errlen, MOE_EEMPTY, "no tokens in input");
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&first);
    return rc;
}

/* The spool: a scratch trace of stored blocks, without @PG (the real output adds it). */
typedef struct spool {
    const char *path;
    moe_trace_t *t;
    char *errbuf;
    size_t errlen;
} spool_t;

static int spool_begin(void *ctx, const moe_trace_hdr_t *h)
{
    spool_t *s = ctx;
    int st;
    s->t = moe_trace_open(s->path, "wu0", 0, &st, s->errbuf, s->errlen);
    if (!s->t)
        return st;
    if ((st = moe_trace_write_header(s->t, h)) != 0)
        return util_errf(s->errbuf, s->errlen, st, "%s", moe_trace_errmsg(s->t));
    return 0;
}

static int spool_put(void *ctx, const moe_trace_rec_t *r)
{
    spool_t *s = ctx;
    int st = moe_trace_write(s->t, r);
    return st ? util_errf(s->errbuf, s->errlen, st, "%s", moe_trace_errmsg(s->t)) : 0;
}

/* Import into the spool at `path`, then copy it to out with the E and ranks now known. */
static int import_via(const moe_import_job_t *job, const char *path, const moe_trace_sink_t *out,
                      moe_import_report_t *total, char *errbuf, size_t errlen)
{
    spool_t s = {path, NULL, errbuf, errlen};
    const moe_trace_sink_t to_spool = {spool_begin, spool_put, &s};
    uint32_t max_rank;
    int rc = import_pass(job, &to_spool, MOE_TRACE_MAX_EXPERTS, total, &max_rank, errbuf,
                         errlen);
    if (rc != 0) {
        moe_trace_abort(s.t);
        return rc;
    }
    if ((rc = moe_trace_close(s.t, errbuf, errlen)) != 0)
        return rc;
    moe_trace_t *in = moe_trace_open(path, "r", 0, &rc, errbuf, errlen);
    if (!in)
        return rc;
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    if ((rc = moe_trace_read_header(in, &h)) < 0) {
        rc = util_errf(errbuf, errlen, rc, "%s", moe_trace_errmsg(in));
    } else {
        h.experts = total->max_id + 1;
        h.ranks = max_rank + 1;
        if (h.topk > h.experts)
            h.experts = h.topk;
        if ((rc = out->begin(out->ctx, &h)) == 0)
            rc = moe_trace_copy(in, &h, NULL, NULL, UINT64_MAX, out, NULL, NULL, errbuf,
                                errlen);
    }
    moe_trace_hdr_release(&h);
    moe_trace_close(in, NULL, 0);
    return rc;
}

int moe_import_run(const moe_import_job_t *job, const moe_trace_sink_t *out,
                   moe_import_report_t *total, char *errbuf, size_t errlen)
{
    uint32_t max_rank;
    if (job->io.experts)
        return import_pass(job, out, job->io.experts, total, &max_rank, errbuf, errlen);
    /* Without E it is known only at the end: spool with 16-bit ids, then copy. */
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/moe-import-XXXXXX", dir);
    if (moe_scratch_create(path) != 0)
        return util_errf(errbuf, errlen, MOE_ESYS, "cannot create a temporary file in '%s': %s",
                         dir, strerror(errno));
    int rc = import_via(job, path, out, total, errbuf, errlen);
    moe_scratch_remove(path);
    return rc;
}
