/* cmd/moe-trace.c -- moe-trace: make, import, inspect and cut MoE routing traces. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "moe/gen.h"
#include "moe/import.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "moe/trace.h"
#include "moe/trace_map.h"

static const char *prog = "moe-trace";
static int g_argc;        /* whole command line, for @PG lines */
static char **g_argv;
static char errbuf[512];

/* ------------------------------------------------------------------ shared plumbing */

#define fail(...) moe_fail(prog, __VA_ARGS__)
#define usage_error(sub, ...) moe_usage_error(prog, sub, __VA_ARGS__)

/* An open input trace with its header. */
typedef struct input {
    moe_trace_t *t;
    moe_trace_hdr_t h;
    const char *path;
} input_t;

static int input_open(input_t *in, const char *path, int threads)
{
    int st;
    moe_trace_hdr_init(&in->h);
    in->path = path;
    in->t = moe_trace_open(path, "r", threads, &st, errbuf, sizeof errbuf);
    if (!in->t)
        return fail("%s", errbuf);
    if (moe_trace_read_header(in->t, &in->h) < 0) {
        fail("%s", moe_trace_errmsg(in->t));
        moe_trace_close(in->t, NULL, 0);
        in->t = NULL;
        moe_trace_hdr_release(&in->h);
        return 1;
    }
    return 0;
}

static void input_close(input_t *in)
{
    moe_trace_close(in->t, NULL, 0);
    moe_trace_hdr_release(&in->h);
    in->t = NULL;
}

/* Read the next record; 1, 0 at end, or -1 after printing the error. */
static int input_next(input_t *in, moe_trace_rec_t *r)
{
    int rc = moe_trace_read(in->t, r);
    if (rc < 0) {
        fail("%s", moe_trace_errmsg(in->t));
        return -1;
    }
    return rc;
}

/* Open an output trace for header h (copied, with this command's @PG line added). */
static moe_trace_t *output_open(const moe_opts_t *o, const char *path, const moe_trace_hdr_t *h,
                                char deffmt)
{
    char fmt = o->fmt ? o->fmt : deffmt;
    if ((fmt == 'b' || fmt == 'u') && strcmp(path, "-") == 0 && isatty(STDOUT_FILENO) &&
        !o->force) {
        fail("refusing to write binary data to a terminal (use -o FILE, -O t, or -f)");
        return NULL;
    }
    char mode[4] = {'w', fmt, o->level >= 0 ? (char)('0' + o->level) : '\0', '\0'};
    char err[512]; /* not errbuf: this runs inside library operations (output_sink) */
    int st;
    moe_trace_t *t = moe_trace_open(path, mode, o->threads, &st, err, sizeof err);
    if (!t) {
        fail("%s", err);
        return NULL;
    }
    moe_trace_hdr_t hh;
    moe_trace_hdr_init(&hh);
    int rc = moe_trace_hdr_copy(&hh, h);
    if (!rc && !o->no_pg)
        rc = moe_trace_hdr_add_pg(&hh, prog, g_argc, g_argv);
    if (!rc)
        rc = moe_trace_write_header(t, &hh);
    moe_trace_hdr_release(&hh);
    if (rc) {
        fail("%s", moe_trace_errmsg(t));
        moe_trace_abort(t);
        return NULL;
    }
    return t;
}

/* Write one record; -1 after printing the error. */
static int output_write(moe_trace_t *t, const moe_trace_rec_t *r)
{
    if (moe_trace_write(t, r) == 0)
        return 0;
    if (errno == EPIPE) /* the reader went away: fail the operation, which cleans up, quietly */
        moe_cli_write_failed(prog, "-");
    else
        fail("%s", moe_trace_errmsg(t));
    return -1;
}

/* Commit an output; returns 0 or 1 after printing the error. With ok == 0 the output is
 * discarded. */
static int output_close(moe_trace_t *t, int ok)
{
    if (!t)
        return ok ? 0 : 1;
    if (!ok) {
        moe_trace_abort(t);
        return 1;
    }
    if (moe_trace_close(t, errbuf, sizeof errbuf) != 0)
        return errno == EPIPE ? moe_cli_write_failed(prog, "-") : fail("%s", errbuf);
    return 0;
}

/* A command's trace output as the sink of a library operation: opened by output_open with the
 * header the operation begins it with, written by output_write, ended by output_close. */
typedef struct output {
    const moe_opts_t *o;
    const char *path;
    char deffmt;
    moe_trace_t *t;
} output_t;

static int output_begin(void *ctx, const moe_trace_hdr_t *h)
{
    output_t *out = ctx;
    out->t = output_open(out->o, out->path, h, out->deffmt);
    return out->t ? 0 : MOE_ESYS;
}

static int output_put(void *ctx, const moe_trace_rec_t *r)
{
    output_t *out = ctx;
    return output_write(out->t, r) ? MOE_ESYS : 0;
}

/* The sink of out. The sink prints its own failures and the operation then leaves errbuf as it
 * was: cleared here, so op_failed knows. */
static moe_trace_sink_t output_sink(output_t *out)
{
    errbuf[0] = '\0';
    return (moe_trace_sink_t){output_begin, output_put, out};
}

/* Print the failure of a library operation that wrote to an output_sink, unless the sink
 * printed it (errbuf still empty). Returns st. */
static int op_failed(int st)
{
    if (st < 0 && errbuf[0])
        fail("%s", errbuf);
    return st;
}

#define OPT_STOP MOE_OPT_STOP

/* The shared option loop (moe_opts_next) for a subcommand of moe-trace. */
static int next_opt(const char *sub, void (*usage)(FILE *), moe_opts_t *o, int argc, char **argv,
                    const char *shortopts, const struct option *longopts, int *rc)
{
    return moe_opts_next(prog, sub, usage, o, argc, argv, shortopts, longopts, rc);
}

/* After the options of a one-input command: at most one argument (default "-"), apply -v/-q and
 * open the input. Returns 0, or the exit status (1, or 2 for a usage error). */
static int open_single_input(const char *sub, const moe_opts_t *o, int argc, char **argv,
                             input_t *in)
{
    if (argc - optind > 1)
        return usage_error(sub, "too many arguments");
    moe_opts_apply_log(o);
    return input_open(in, optind < argc ? argv[optind] : "-", o->threads);
}

/* Progress for a loop over an input trace. */
static void progress_tick(moe_progress_t *pg, const moe_trace_t *t, uint64_t n)
{
    if (pg && (n & 4095) == 0)
        moe_progress_update(pg, moe_trace_size(t) ? moe_trace_tell(t) : n);
}

static moe_progress_t *progress_for(const moe_opts_t *o, const char *label, const moe_trace_t *t)
{
    return moe_progress_new(label, moe_trace_size(t), o->progress);
}

/* A text report or view written atomically to -o (or stdout). */
typedef struct textout {
    FILE *fp;
    moe_ofile_t *of;
} textout_t;

static int textout_open(textout_t *o, const char *path)
{
    int st;
    o->of = moe_ofile_open(path, &st, errbuf, sizeof errbuf);
    if (!o->of)
        return fail("%s", errbuf);
    o->fp = fdopen(moe_ofile_fd(o->of), "w");
    if (!o->fp) {
        moe_ofile_abort(o->of);
        return fail("cannot write '%s': %s", path, strerror(errno));
    }
    moe_ofile_release_fd(o->of);
    return 0;
}

static int textout_close(textout_t *o, const char *path, int ok)
{
    int bad = ferror(o->fp);
    if (fclose(o->fp) != 0 || bad)
        ok = ok ? !moe_cli_write_failed(prog, path) && errno != EPIPE : 0;
    if (!ok) {
        moe_ofile_abort(o->of);
        return 1;
    }
    if (moe_ofile_commit(o->of) != 0)
        return fail("cannot write '%s': %s", path, strerror(errno));
    return 0;
}

/* ------------------------------------------------------------------ view */

static void view_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s view [options] [TRACE]\n"
                "Print a routing trace as text (or convert between trace formats).\n\n"
                "  -h, --with-header      print the header and the records [default]\n"
                "  -H, --header-only      print only the header\n"
                "      --no-header        print only the records\n", prog);
    moe_opts_usage(fp, MOE_OPT_ALL);
    fputs("\nTRACE is a binary trace, a text view, or '-' for standard input [-].\n"
          "Output defaults to text (-O t); -O b converts a text view back to binary.\n", fp);
}

static int view_text_only(input_t *in, const moe_opts_t *o, int header, int records)
{
    textout_t out;
    if (textout_open(&out, o->out))
        return 1;
    int ok = 1;
    moe_trace_hdr_t hh;
    moe_trace_hdr_init(&hh);
    if (header) {
        ok = moe_trace_hdr_copy(&hh, &in->h) == 0 &&
             (o->no_pg || moe_trace_hdr_add_pg(&hh, prog, g_argc, g_argv) == 0) &&
             moe_trace_hdr_print(out.fp, &hh) == 0;
    }
    moe_trace_rec_t r = {0};
    moe_progress_t *pg = progress_for(o, "view", in->t);
    int rc = 0;
    while (ok && records && (rc = input_next(in, &r)) == 1) {
        if (moe_trace_rec_print(out.fp, &in->h, &r) != 0)
            ok = 0;
        progress_tick(pg, in->t, moe_trace_count(in->t));
    }
    moe_progress_free(pg);
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&hh);
    return textout_close(&out, o->out, ok && rc >= 0);
}

/* Copy in's records to out (begun) through keep (NULL: all), at most limit of them, with the
 * progress meter. 0, or negative after printing the error. */
static int copy_records(input_t *in, const moe_trace_sink_t *out, const moe_opts_t *o,
                        moe_trace_keep_fn keep, void *ctx, uint64_t limit)
{
    moe_progress_t *pg = progress_for(o, "records", in->t);
    errbuf[0] = '\0';
    int st = moe_trace_copy(in->t, &in->h, keep, ctx, limit, out, pg ? moe_progress_cb : NULL,
                            pg, errbuf, sizeof errbuf);
    moe_progress_free(pg);
    return op_failed(st);
}

/* Run a one-input, one-output subcommand: open (the format deffmt without -O), copy through
 * `keep`, close. */
static int filter_run(const moe_opts_t *o, char deffmt, const moe_trace_hdr_t *outh,
                      moe_trace_keep_fn keep, void *ctx, uint64_t limit, input_t *in)
{
    output_t out = {o, o->out, deffmt, NULL};
    moe_trace_sink_t sink = output_sink(&out);
    int st = output_begin(&out, outh ? outh : &in->h);
    if (st == 0)
        st = copy_records(in, &sink, o, keep, ctx, limit);
    return output_close(out.t, st == 0);
}

static int cmd_view(int argc, char **argv)
{
    /* The short options mean what they mean to samtools view: -h with the header, -H the
     * header only; records only has no short option (samtools: --no-header). */
    enum { O_NOHDR = MOE_OPTC_TOOL };
    static const struct option lo[] = {{"with-header", no_argument, 0, 'h'},
                                       {"header-only", no_argument, 0, 'H'},
                                       {"no-header", no_argument, 0, O_NOHDR}, MOE_OPTS_LONG, {0}};
    moe_opts_t o;
    moe_opts_init(&o);
    int with_header = 0, header_only = 0, no_header = 0, c, rc = 0;
    while ((c = next_opt("view", view_usage, &o, argc, argv, "hH" MOE_OPTS_SHORT, lo, &rc)) != -1) {
        switch (c) {
        case 'h': with_header = 1; break;
        case 'H': header_only = 1; break;
        case O_NOHDR: no_header = 1; break;
        case OPT_STOP: return rc;
        }
    }
    if (argc - optind > 1)
        return usage_error("view", "too many arguments");
    if ((header_only || with_header) && no_header)
        return usage_error("view", "--%s and --no-header exclude each other",
                           header_only ? "header-only" : "with-header");
    moe_opts_apply_log(&o);
    input_t in;
    if (input_open(&in, optind < argc ? argv[optind] : "-", o.threads))
        return 1;
    char fmt = o.fmt ? o.fmt : 't';
    if (header_only || no_header) {
        if (fmt != 't') {
            input_close(&in);
            return usage_error("view", "--header-only and --no-header write text only");
        }
        rc = view_text_only(&in, &o, !no_header, !header_only);
    } else {
        rc = filter_run(&o, 't', NULL, NULL, NULL, UINT64_MAX, &in);
    }
    input_close(&in);
    return rc;
}

/* ------------------------------------------------------------------ stats */

/* stats writes a text report: no trace-format or @PG options. */
#define STATS_OPTS (MOE_OPT_OUTPUT | MOE_OPT_THREADS | MOE_OPT_PROGRESS | MOE_OPT_FORCE | \
                    MOE_OPT_LAYERS)

static void stats_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s stats [options] [TRACE]\n"
                "Summarise a routing trace: counts, per-layer expert load and skew, missing "
                "cells.\n\n"
                "      --loads            also print every expert's load, one line per layer\n"
                "      --json             write JSON instead of the report (--format=json)\n"
                "      --format=F         text, json, sglang (SGLang's logical_count JSON:\n"
                "                         every expert's load) or vllm (vLLM's EPLB\n"
                "                         expert_load_window, safetensors) [text]\n"
                "      --window=N         vllm: a window per N tokens [0: one of all]\n",
            prog);
    moe_opts_usage(fp, STATS_OPTS);
}

/* --format=vllm: the load window, binary (refused on a terminal without -f). */
static int stats_vllm(const char *path, const moe_opts_t *o, uint64_t window)
{
    const char *out = o->out ? o->out : "-";
    if (!strcmp(out, "-") && isatty(STDOUT_FILENO) && !o->force)
        return fail("refusing to write binary data to a terminal (use -o FILE or -f)");
    int st;
    moe_trace_t *in = moe_trace_open(path, "r", o->threads, &st, errbuf, sizeof errbuf);
    if (!in)
        return fail("%s", errbuf);
    moe_textout_t *t = moe_cli_text_open(prog, out, 'u', -1);
    int rc = 1;
    errbuf[0] = '\0';
    st = t ? moe_trace_load_window(in, window, moe_textout_write, t, errbuf, sizeof errbuf) : 0;
    if (t && st < 0 && errbuf[0]) /* the trace's failure: no output */
        rc = fail("%s", errbuf), moe_textout_close(t, 0);
    else if (t)
        rc = moe_cli_text_finish(prog, t, out, st < 0);
    moe_trace_close(in, NULL, 0);
    return rc;
}

static int cmd_stats(int argc, char **argv)
{
    static const struct option lo[] = {{"loads", no_argument, 0, MOE_OPTC_TOOL},
                                       {"json", no_argument, 0, MOE_OPTC_TOOL + 1},
                                       {"format", required_argument, 0, MOE_OPTC_TOOL + 2},
                                       {"window", required_argument, 0, MOE_OPTC_TOOL + 3},
                                       MOE_OPTS_LONG, {0}};
    static const char *const forms[] = {"text", "json", "sglang", "vllm"}; /* + vllm: 3 */
    moe_opts_t o;
    moe_opts_init(&o);
    o.allowed = STATS_OPTS;
    int loads = 0, form = 0, c, rc = 0;
    uint64_t window = 0;
    while ((c = next_opt("stats", stats_usage, &o, argc, argv, MOE_OPTS_SHORT, lo, &rc)) != -1) {
        switch (c) {
        case MOE_OPTC_TOOL: loads = 1; break;
        case MOE_OPTC_TOOL + 1: form = MOE_STATS_JSON; break;
        case MOE_OPTC_TOOL + 2:
            for (form = 3; form >= 0 && strcmp(optarg, forms[form]); form--)
                ;
            if (form < 0)
                return usage_error("stats", "unknown format '%s' (text, json, sglang, vllm)",
                                   optarg);
            break;
        case MOE_OPTC_TOOL + 3:
            if ((rc = moe_cli_u64(prog, "stats", optarg, 0, UINT64_MAX, "window", &window)))
                return rc;
            break;
        case OPT_STOP: return rc;
        }
    }
    if (argc - optind > 1)
        return usage_error("stats", "too many arguments");
    if ((window || o.force) && form != 3)
        return usage_error("stats", "--window and -f apply to --format=vllm");
    if ((o.model_layers || o.first_moe_layer >= 0 || o.moe_layers) && form != MOE_STATS_SGLANG)
        return usage_error("stats", "the model-layer options apply to --format=sglang");
    moe_opts_apply_log(&o);
    const char *path = optind < argc ? argv[optind] : "-";
    if (form == 3)
        return stats_vllm(path, &o, window);
    int st;
    moe_trace_map_t *m = moe_trace_map_open(path, o.threads, &st, errbuf, sizeof errbuf);
    if (!m)
        return fail("%s", errbuf);
    moe_trace_stats_t *s = moe_trace_stats_new(moe_trace_map_header(m));
    moe_progress_t *pg = moe_progress_new("stats", 0, o.progress);
    if (!s)
        rc = fail("out of memory");
    else if (moe_trace_stats_scan(s, m, pg ? moe_progress_cb : NULL, pg)) {
        rc = fail("%s", moe_trace_map_errmsg(m)); /* it names the file (doc/ARCHITECTURE) */
    }
    moe_progress_free(pg);
    moe_textout_t *t = rc ? NULL : moe_cli_text_open(prog, o.out ? o.out : "-", 't', -1);
    if (t) { /* SGLang's rows are the model's layers */
        int w = form != MOE_STATS_SGLANG ? moe_trace_stats_write_as(s, form, loads, t)
                : moe_trace_stats_write_sglang(s, moe_trace_map_header(m), o.model_layers,
                                               o.first_moe_layer, o.moe_layers, t, errbuf,
                                               sizeof errbuf);
        rc = w == MOE_EINVAL ? (fail("'%s': %s", path, errbuf), moe_textout_close(t, 0), 1)
             : moe_cli_text_finish(prog, t, o.out ? o.out : "-", w);
    } else if (rc == 0) {
        rc = 1;
    }
    moe_trace_stats_free(s);
    moe_trace_map_close(m);
    return rc;
}

/* ------------------------------------------------------------------ head, slice, cat */

static void head_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s head [options] [TRACE]\n"
                "Write the first N tokens of a trace.\n\n"
                "  -n, --tokens=N         number of tokens [10]\n", prog);
    moe_opts_usage(fp, MOE_OPT_ALL);
}

static int cmd_head(int argc, char **argv)
{
    static const struct option lo[] = {{"tokens", required_argument, 0, 'n'}, MOE_OPTS_LONG,
                                       {0}};
    moe_opts_t o;
    moe_opts_init(&o);
    uint64_t n = 10;
    int c, rc = 0;
    while ((c = next_opt("head", head_usage, &o, argc, argv, "n:" MOE_OPTS_SHORT, lo, &rc)) != -1) {
        switch (c) {
        case 'n':
            if ((rc = moe_cli_u64(prog, "head", optarg, 0, UINT64_MAX, "token count", &n)))
                return rc;
            break;
        case OPT_STOP: return rc;
        }
    }
    input_t in;
    if ((rc = open_single_input("head", &o, argc, argv, &in)))
        return rc;
    rc = filter_run(&o, 'b', NULL, NULL, NULL, n, &in);
    input_close(&in);
    return rc;
}

typedef struct slice_ctx {
    uint32_t first, count, topk;
} slice_ctx_t;

static int slice_keep(void *ctx, const moe_trace_hdr_t *h, moe_trace_rec_t *r)
{
    const slice_ctx_t *s = ctx;
    size_t off = (size_t)s->first * s->topk, n = (size_t)s->count * s->topk;
    (void)h;
    memmove(r->ids, r->ids + off, n * sizeof *r->ids);
    if (r->weights)
        memmove(r->weights, r->weights + off, n * sizeof *r->weights);
    return 1;
}

static void slice_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s slice --layers=A-B [options] [TRACE]\n"
                "Keep MoE layers A to B (0-based, inclusive) of every token.\n\n"
                "      --layers=A-B       layer range to keep (a single layer: A)\n", prog);
    moe_opts_usage(fp, MOE_OPT_ALL);
}

static int cmd_slice(int argc, char **argv)
{
    static const struct option lo[] = {{"layers", required_argument, 0, MOE_OPTC_TOOL},
                                       MOE_OPTS_LONG, {0}};
    moe_opts_t o;
    moe_opts_init(&o);
    moe_ranges_t range = {0};
    uint32_t a = 0, b = 0;
    int have = 0, c, rc = 0;
    while ((c = next_opt("slice", slice_usage, &o, argc, argv, MOE_OPTS_SHORT, lo, &rc)) != -1) {
        switch (c) {
        case MOE_OPTC_TOOL:
            if (moe_ranges_parse(&range, optarg, MOE_TRACE_MAX_LAYERS - 1) || range.n != 1) {
                moe_ranges_free(&range);
                return usage_error("slice", "invalid layer range '%s' (expected A-B)", optarg);
            }
            a = range.r[0][0], b = range.r[0][1];
            moe_ranges_free(&range);
            have = 1;
            break;
        case OPT_STOP: return rc;
        }
    }
    if (!have)
        return usage_error("slice", "--layers is required");
    input_t in;
    if ((rc = open_single_input("slice", &o, argc, argv, &in)))
        return rc;
    if (b >= in.h.layers) {
        rc = fail("'%s': layer range %u-%u outside the trace's %u layers", in.path, a, b,
                  in.h.layers);
    } else {
        moe_trace_hdr_t oh; /* the same text, which model layers these are added */
        slice_ctx_t ctx = {a, b - a + 1, in.h.topk};
        rc = moe_layer_map_slice(&in.h, a, b - a + 1, &oh) ? fail("out of memory")
             : filter_run(&o, 'b', &oh, slice_keep, &ctx, UINT64_MAX, &in);
        moe_trace_hdr_release(&oh);
    }
    input_close(&in);
    return rc;
}

static void cat_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s cat [options] TRACE...\n"
                "Concatenate traces of the same shape (layers, experts, top-k, weights).\n\n",
            prog);
    moe_opts_usage(fp, MOE_OPT_ALL);
}

static int cmd_cat(int argc, char **argv)
{
    static const struct option lo[] = {MOE_OPTS_LONG, {0}};
    moe_opts_t o;
    moe_opts_init(&o);
    int c, rc = 0;
    while ((c = next_opt("cat", cat_usage, &o, argc, argv, MOE_OPTS_SHORT, lo, &rc)) != -1) {
        switch (c) {
        case OPT_STOP: return rc;
        }
    }
    if (optind >= argc)
        return usage_error("cat", "no input traces");
    moe_opts_apply_log(&o);
    input_t first;
    if (input_open(&first, argv[optind], o.threads))
        return 1;
    output_t out = {&o, o.out, 'b', NULL};
    moe_trace_sink_t sink = output_sink(&out);
    int ok = output_begin(&out, &first.h) == 0 &&
             copy_records(&first, &sink, &o, NULL, NULL, UINT64_MAX) == 0;
    for (int i = optind + 1; ok && i < argc; i++) {
        input_t in;
        if (input_open(&in, argv[i], o.threads)) {
            ok = 0;
            break;
        }
        if (!moe_trace_hdr_same_shape(&in.h, &first.h)) {
            fail("'%s': shape %u layers, %u experts, top-%u%s differs from '%s' (%u, %u, top-%u%s)",
                 in.path, in.h.layers, in.h.experts, in.h.topk,
                 (in.h.flags & MOE_TRACE_WEIGHTS) ? ", weights" : "", first.path,
                 first.h.layers, first.h.experts, first.h.topk,
                 (first.h.flags & MOE_TRACE_WEIGHTS) ? ", weights" : "");
            ok = 0;
        } else {
            ok = copy_records(&in, &sink, &o, NULL, NULL, UINT64_MAX) == 0;
        }
        input_close(&in);
    }
    rc = output_close(out.t, ok);
    input_close(&first);
    return rc;
}

/* ------------------------------------------------------------------ sample, split */

typedef struct sample_ctx {
    uint64_t seed;
    double fraction;
    int by_seq;
} sample_ctx_t;

static int sample_keep(void *ctx, const moe_trace_hdr_t *h, moe_trace_rec_t *r)
{
    const sample_ctx_t *s = ctx;
    (void)h;
    return moe_hash_keep(s->seed, s->by_seq ? r->seq : r->token, s->fraction);
}

static void sample_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s sample (-p F | -n N) [options] [TRACE]\n"
                "Write a seeded random sample of the tokens (or sequences) of a trace.\n\n"
                "  -p, --fraction=F       keep each token (sequence) with probability F\n"
                "  -n, --count=N          keep exactly N tokens (N sequences with --by-sequence;\n"
                "                         then TRACE must be a file: it is read twice)\n"
                "      --by-sequence      sample whole sequences instead of tokens\n"
                "  -S, --seed=N           random seed [1]\n", prog);
    moe_opts_usage(fp, MOE_OPT_ALL);
}

/* sample -n: exactly n tokens, or n sequences (two passes over a file). */
static int sample_count(input_t *in, const moe_opts_t *o, uint64_t n, uint64_t seed, int by_seq)
{
    if (by_seq && strcmp(in->path, "-") == 0)
        return fail("sample -n with --by-sequence needs a file, not standard input");
    output_t out = {o, o->out, 'b', NULL};
    moe_trace_sink_t sink = output_sink(&out);
    int st = by_seq ? moe_trace_sample_seqs(in->t, &in->h, in->path, o->threads, n, seed, &sink,
                                            errbuf, sizeof errbuf)
                    : moe_trace_sample_tokens(in->t, &in->h, n, seed, &sink, errbuf,
                                              sizeof errbuf);
    return output_close(out.t, op_failed(st) == 0);
}

static int cmd_sample(int argc, char **argv)
{
    static const struct option lo[] = {
        {"fraction", required_argument, 0, 'p'}, {"count", required_argument, 0, 'n'},
        {"by-sequence", no_argument, 0, MOE_OPTC_TOOL}, {"seed", required_argument, 0, 'S'},
        MOE_OPTS_LONG, {0}};
    moe_opts_t o;
    moe_opts_init(&o);
    sample_ctx_t ctx = {1, -1, 0};
    uint64_t count = UINT64_MAX;
    int c, rc = 0;
    while ((c = next_opt("sample", sample_usage, &o, argc, argv, "p:n:S:" MOE_OPTS_SHORT, lo, &rc)) != -1) {
        switch (c) {
        case 'p':
            rc = moe_cli_double(prog, "sample", optarg, 0, 1, "fraction", &ctx.fraction);
            break;
        case 'n':
            rc = moe_cli_u64(prog, "sample", optarg, 0, UINT64_MAX - 1, "count", &count);
            break;
        case 'S':
            rc = moe_cli_u64(prog, "sample", optarg, 0, UINT64_MAX, "seed", &ctx.seed);
            break;
        case MOE_OPTC_TOOL: ctx.by_seq = 1; break;
        case OPT_STOP: return rc;
        }
        if (rc)
            return rc;
    }
    if ((ctx.fraction < 0) == (count == UINT64_MAX))
        return usage_error("sample", "give exactly one of --fraction and --count");
    input_t in;
    if ((rc = open_single_input("sample", &o, argc, argv, &in)))
        return rc;
    if (ctx.fraction >= 0)
        rc = filter_run(&o, 'b', NULL, sample_keep, &ctx, UINT64_MAX, &in);
    else
        rc = sample_count(&in, &o, count, ctx.seed, ctx.by_seq);
    input_close(&in);
    return rc;
}

/* split writes two files named by --train and --test: no -o. */
#define SPLIT_OPTS (MOE_OPT_ALL & ~MOE_OPT_OUTPUT)

static void split_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s split (--ratio R | --ids LIST) --train FILE --test FILE [options] "
                "[TRACE]\n"
                "Split a trace by sequence into a training part and a test part.\n\n"
                "      --ratio=R          put each sequence in the training part with "
                "probability R\n"
                "      --ids=LIST         training sequences: ids and ranges, e.g. 1-500,612\n"
                "      --train=FILE       output for the training part\n"
                "      --test=FILE        output for the test part\n"
                "  -S, --seed=N           random seed for --ratio [1]\n", prog);
    moe_opts_usage(fp, SPLIT_OPTS);
}

static int cmd_split(int argc, char **argv)
{
    enum { O_RATIO = MOE_OPTC_TOOL, O_IDS, O_TRAIN, O_TEST };
    static const struct option lo[] = {
        {"ratio", required_argument, 0, O_RATIO}, {"ids", required_argument, 0, O_IDS},
        {"train", required_argument, 0, O_TRAIN}, {"test", required_argument, 0, O_TEST},
        {"seed", required_argument, 0, 'S'}, MOE_OPTS_LONG, {0}};
    moe_opts_t o;
    moe_opts_init(&o);
    o.allowed = SPLIT_OPTS;
    double ratio = -1;
    uint64_t seed = 1;
    moe_ranges_t ids = {0};
    const char *train = NULL, *test = NULL;
    int c, rc = 0;
    while ((c = next_opt("split", split_usage, &o, argc, argv, "S:" MOE_OPTS_SHORT, lo, &rc)) != -1) {
        switch (c) {
        case O_RATIO:
            if ((rc = moe_cli_double(prog, "split", optarg, 0, 1, "ratio", &ratio)))
                goto out;
            break;
        case O_IDS:
            if (moe_ranges_parse(&ids, optarg, UINT32_MAX)) {
                rc = usage_error("split", "invalid id list '%s' (expected e.g. 1-500,612)",
                                 optarg);
                goto out;
            }
            break;
        case O_TRAIN: train = optarg; break;
        case O_TEST: test = optarg; break;
        case 'S':
            if ((rc = moe_cli_u64(prog, "split", optarg, 0, UINT64_MAX, "seed", &seed)))
                goto out;
            break;
        case OPT_STOP: goto out;
        }
    }
    if ((ratio < 0) == (ids.n == 0)) {
        rc = usage_error("split", "give exactly one of --ratio and --ids");
        goto out;
    }
    if (!train || !test || argc - optind > 1) {
        rc = usage_error("split", !train || !test ? "--train and --test are required"
                                                  : "too many arguments");
        goto out;
    }
    const char *input = optind < argc ? argv[optind] : "-";
    const moe_cli_file_t files[] = {{"--train", train, 1}, {"--test", test, 1},
                                    {"the input", input, 0}};
    if ((rc = moe_cli_distinct(prog, "split", files, 3)))
        goto out;
    moe_opts_apply_log(&o);
    input_t in;
    if (input_open(&in, input, o.threads)) {
        rc = 1;
        goto out;
    }
    output_t ot = {&o, train, 'b', NULL}, os = {&o, test, 'b', NULL};
    moe_trace_sink_t to_train = output_sink(&ot), to_test = output_sink(&os);
    int ok = op_failed(moe_trace_split(in.t, &in.h, &ids, seed, ratio, &to_train, &to_test,
                                       errbuf, sizeof errbuf)) == 0;
    rc = output_close(ot.t, ok);
    rc |= output_close(os.t, ok && rc == 0);
    input_close(&in);
out:
    moe_ranges_free(&ids);
    return rc;
}

/* ------------------------------------------------------------------ gen */

static void gen_usage(FILE *fp)
{
    moe_gen_params_t d;
    moe_gen_params_default(&d);
    fprintf(fp, "Usage: %s gen [options]\n"
                "Generate a seeded synthetic routing trace (model: moe-trace(1), GENERATOR).\n\n"
                "  -L, --layers=N         MoE layers [%u]\n"
                "  -E, --experts=N        experts per layer [%u]\n"
                "  -k, --topk=N           experts per token per layer [%u]\n"
                "  -n, --tokens=N         tokens (K/M/G suffixes) [%llu]\n"
                "  -s, --sequences=N      sequences the tokens are split into [%u]\n"
                "  -r, --ranks=N          source (data-parallel) ranks [%u]\n"
                "      --steps=N          steps (iterations) the sequences span [%u]\n"
                "      --zipf=S           expert-load skew exponent, 0 = uniform [0.8 up to 64\n"
                "                         experts, 0.15 above]\n"
                "      --affinity=A       inter-layer affinity strength, 0..1 [%g]\n"
                "      --fanout=N         preferred successors per expert [%u]\n"
                "      --coact=C          top-k co-activation strength, 0..1 [%g]\n"
                "      --hot-ranks=N      ranks that own more sequences [%u]\n"
                "      --hot-factor=F     how many times more [%g]\n"
                "  -w, --weights          record gate weights\n"
                "      --hidden=H         hidden size recorded in the header [0: unknown]\n"
                "      --elem-bytes=B     bytes per element recorded in the header [0]\n"
                "  -S, --seed=N           random seed [%llu]\n",
            prog, d.layers, d.experts, d.topk, (unsigned long long)d.tokens, d.sequences,
            d.ranks, d.steps, d.affinity, d.fanout, d.coact, d.hot_ranks, d.hot_factor,
            (unsigned long long)d.seed);
    moe_opts_usage(fp, MOE_OPT_ALL);
}

static int gen_parse(int argc, char **argv, moe_gen_params_t *p, moe_opts_t *o, int *rc)
{
    enum { O_STEPS = MOE_OPTC_TOOL, O_ZIPF, O_AFF, O_FAN, O_COACT, O_HOTR, O_HOTF, O_HID, O_EB };
    static const struct option lo[] = {
        {"layers", required_argument, 0, 'L'}, {"experts", required_argument, 0, 'E'},
        {"topk", required_argument, 0, 'k'}, {"tokens", required_argument, 0, 'n'},
        {"sequences", required_argument, 0, 's'}, {"ranks", required_argument, 0, 'r'},
        {"steps", required_argument, 0, O_STEPS}, {"zipf", required_argument, 0, O_ZIPF},
        {"affinity", required_argument, 0, O_AFF}, {"fanout", required_argument, 0, O_FAN},
        {"coact", required_argument, 0, O_COACT}, {"hot-ranks", required_argument, 0, O_HOTR},
        {"hot-factor", required_argument, 0, O_HOTF}, {"weights", no_argument, 0, 'w'},
        {"hidden", required_argument, 0, O_HID}, {"elem-bytes", required_argument, 0, O_EB},
        {"seed", required_argument, 0, 'S'}, MOE_OPTS_LONG, {0}};
    const char *sub = "gen";
    int c;
    while ((c = next_opt(sub, gen_usage, o, argc, argv, "L:E:k:n:s:r:wS:" MOE_OPTS_SHORT, lo, rc)) != -1) {
        switch (c) {
        case 'L': *rc = moe_cli_u32(prog, sub, optarg, 1, MOE_TRACE_MAX_LAYERS, "layer count", &p->layers); break;
        case 'E': *rc = moe_cli_u32(prog, sub, optarg, 1, MOE_TRACE_MAX_EXPERTS, "expert count", &p->experts); break;
        case 'k': *rc = moe_cli_u32(prog, sub, optarg, 1, MOE_TRACE_MAX_TOPK, "top-k", &p->topk); break;
        case 'n': *rc = moe_cli_u64(prog, sub, optarg, 1, UINT64_MAX / 2, "token count", &p->tokens); break;
        case 's': *rc = moe_cli_u32(prog, sub, optarg, 1, UINT32_MAX, "sequence count", &p->sequences); break;
        case 'r': *rc = moe_cli_u32(prog, sub, optarg, 1, 1u << 20, "rank count", &p->ranks); break;
        case O_STEPS: *rc = moe_cli_u32(prog, sub, optarg, 1, UINT32_MAX, "step count", &p->steps); break;
        case O_ZIPF: *rc = moe_cli_double(prog, sub, optarg, 0, 10, "zipf exponent", &p->zipf); break;
        case O_AFF: *rc = moe_cli_double(prog, sub, optarg, 0, 1, "affinity", &p->affinity); break;
        case O_FAN: *rc = moe_cli_u32(prog, sub, optarg, 1, MOE_TRACE_MAX_EXPERTS, "fanout", &p->fanout); break;
        case O_COACT: *rc = moe_cli_double(prog, sub, optarg, 0, 1, "coact", &p->coact); break;
        case O_HOTR: *rc = moe_cli_u32(prog, sub, optarg, 0, 1u << 20, "hot rank count", &p->hot_ranks); break;
        case O_HOTF: *rc = moe_cli_double(prog, sub, optarg, 1e-6, 1e6, "hot factor", &p->hot_factor); break;
        case O_HID: *rc = moe_cli_u32(prog, sub, optarg, 0, UINT32_MAX, "hidden size", &p->hidden); break;
        case O_EB: *rc = moe_cli_u32(prog, sub, optarg, 0, 64, "element bytes", &p->elem_bytes); break;
        case 'w': p->weights = 1; break;
        case 'S': *rc = moe_cli_u64(prog, sub, optarg, 0, UINT64_MAX, "seed", &p->seed); break;
        case OPT_STOP: return *rc ? -1 : 1;
        }
        if (*rc)
            return -1;
    }
    if (optind < argc)
        return *rc = usage_error(sub, "unexpected argument '%s'", argv[optind]), -1;
    return 0;
}

static int cmd_gen(int argc, char **argv)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    moe_opts_t o;
    moe_opts_init(&o);
    int rc = 0, st = gen_parse(argc, argv, &p, &o, &rc);
    if (st != 0)
        return st > 0 ? 0 : rc;
    moe_opts_apply_log(&o);
    moe_gen_t *g = moe_gen_new(&p, &st, errbuf, sizeof errbuf);
    if (!g) /* contradictory parameters are usage errors; running out of memory is not */
        return st == MOE_EINVAL ? usage_error("gen", "%s", errbuf) : fail("gen: %s", errbuf);
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    moe_gen_header(g, &h);
    moe_trace_t *out = output_open(&o, o.out, &h, 'b');
    int ok = out != NULL;
    moe_trace_rec_t r = {0};
    ok = ok && moe_trace_rec_init(&r, &h) == 0;
    moe_progress_t *pg = moe_progress_new("gen", p.tokens, o.progress);
    for (uint64_t n = 0; ok && moe_gen_next(g, &r) == 1; n++) {
        ok = output_write(out, &r) == 0;
        if ((n & 4095) == 0)
            moe_progress_update(pg, n);
    }
    moe_progress_free(pg);
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&h);
    moe_gen_free(g);
    return output_close(out, ok);
}

/* ------------------------------------------------------------------ import */

static void import_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s import [options] INPUT...\n"
                "Convert router logs of other systems into a routing trace.\n\n"
                "      --format=F         auto, tokens, jsonl, csv, npy, megatron, sglang,\n"
                "                         safetensors, torch, vllm, raw or base64 [auto]\n"
                "      --meta=FILE        tokens format: 'sequence phase position' per row\n"
                "      --weights=FILE     tokens format: gate weights, same shape as the ids\n"
                "      --experts=E        experts per layer [inferred: largest id + 1]\n"
                "      --drop-incomplete  drop tokens with missing (layer, token) cells\n"
                "                         [keep them, marked missing]\n"
                "      --layout=A         npy, safetensors: axis order TLK (tokens, layers, k)\n"
                "                         or LTK (SGLang's layers, tokens, k) [TLK]\n"
                "      --mtp              megatron: keep the multi-token-prediction records as\n"
                "                         layers after the decoder's [skip them]\n"
                "      --tensor=NAME      safetensors: the tensor to read; 'PREFIX*': one per\n"
                "                         layer, ordered by their names' last number [the only]\n"
                "      --shape=[T,]L,K    raw, base64: the array's shape [T from the size]\n"
                "      --dtype=TYPE       raw, base64: int8..int64, uint8..uint64, float16,\n"
                "                         bfloat16, float32, float64\n"
                "      --physical-map=FILE  ids are physical slots (EPLB): SGLang's or EPLB's map\n"
                "                         of them (JSON, .pt, inline JSON; raw, base64, npy,\n"
                "                         safetensors, torch)\n"
                "      --topk=K           float router logits: take each token's top K experts,\n"
                "                         gate weights from the softmax\n"
                "      --no-renorm        softmax over all experts [renormalised over the K]\n"
                "      --hidden=H         hidden size recorded in the header [0: unknown]\n"
                "      --elem-bytes=B     bytes per element recorded in the header [0]\n"
                "      --pipeline-stages=S  the inputs are pipelines of S stage files, in\n"
                "                         stage order, joined as layers (megatron) [1]\n", prog);
    moe_opts_usage(fp, MOE_OPT_ALL | MOE_OPT_LAYERS);
}

static int cmd_import(int argc, char **argv)
{
    enum { O_FMT = MOE_OPTC_TOOL, O_META, O_W, O_E, O_DROP, O_HID, O_EB, O_MTP, O_TENSOR,
           O_SHAPE, O_DTYPE, O_LAYOUT, O_TOPK, O_NORENORM, O_PMAP, O_PP };
    static const struct option lo[] = {
        {"format", required_argument, 0, O_FMT}, {"meta", required_argument, 0, O_META},
        {"weights", required_argument, 0, O_W}, {"experts", required_argument, 0, O_E},
        {"drop-incomplete", no_argument, 0, O_DROP}, {"hidden", required_argument, 0, O_HID},
        {"elem-bytes", required_argument, 0, O_EB}, {"mtp", no_argument, 0, O_MTP},
        {"tensor", required_argument, 0, O_TENSOR}, {"shape", required_argument, 0, O_SHAPE},
        {"dtype", required_argument, 0, O_DTYPE}, {"layout", required_argument, 0, O_LAYOUT},
        {"topk", required_argument, 0, O_TOPK}, {"physical-map", required_argument, 0, O_PMAP},
        {"no-renorm", no_argument, 0, O_NORENORM}, {"pipeline-stages", required_argument, 0, O_PP},
        MOE_OPTS_LONG, {0}};
    const char *sub = "import";
    moe_opts_t o;
    moe_opts_init(&o);
    o.allowed |= MOE_OPT_LAYERS;
    moe_import_job_t job;
    memset(&job, 0, sizeof job);
    int c, rc = 0;
    while ((c = next_opt(sub, import_usage, &o, argc, argv, MOE_OPTS_SHORT, lo, &rc)) != -1) {
        switch (c) {
        case O_FMT:
            job.io.format = moe_import_fmt_parse(optarg);
            if (job.io.format < 0)
                return usage_error(sub, "unknown format '%s'", optarg);
            break;
        case O_META: job.io.meta = optarg; break;
        case O_W: job.io.weights = optarg; break;
        case O_E:
            rc = moe_cli_u32(prog, sub, optarg, 1, MOE_TRACE_MAX_EXPERTS, "expert count",
                             &job.io.experts);
            break;
        case O_DROP: job.io.drop_incomplete = 1; break;
        case O_MTP: job.io.mtp = 1; break;
        case O_TENSOR: job.io.tensor = optarg; break;
        case O_SHAPE: job.io.shape = optarg; break;
        case O_DTYPE: job.io.dtype = optarg; break;
        case O_NORENORM: job.io.no_renorm = 1; break;
        case O_PMAP: job.io.physical_map = optarg; break;
        case O_LAYOUT:
            if ((job.io.layout = moe_import_layout_parse(optarg)) < 0)
                return usage_error(sub, "unknown layout '%s' (TLK or LTK)", optarg);
            break;
        case O_TOPK:
            rc = moe_cli_u32(prog, sub, optarg, 1, MOE_TRACE_MAX_TOPK, "top-k", &job.io.topk);
            break;
        case O_PP:
            rc = moe_cli_u32(prog, sub, optarg, 1, 4096, "stage count", &job.pipeline_stages);
            break;
        case O_HID:
            rc = moe_cli_u32(prog, sub, optarg, 0, UINT32_MAX, "hidden size", &job.hidden);
            break;
        case O_EB:
            rc = moe_cli_u32(prog, sub, optarg, 0, 64, "element bytes", &job.elem_bytes);
            break;
        case OPT_STOP: return rc;
        }
        if (rc)
            return rc;
    }
    if (optind >= argc)
        return usage_error(sub, "no input files");
    if ((job.io.meta || job.io.weights) && argc - optind > 1)
        return usage_error(sub, "--meta and --weights take a single input");
    moe_opts_apply_log(&o);
    job.io.moe_layers = o.moe_layers;
    job.io.model_layers = o.model_layers;
    job.io.first_moe_given = o.first_moe_layer >= 0;
    job.io.first_moe_layer = (uint32_t)(o.first_moe_layer < 0 ? 0 : o.first_moe_layer);
    job.inputs = argv + optind;
    job.ninputs = argc - optind;
    moe_progress_t *pg = moe_progress_new("import", (uint64_t)job.ninputs, o.progress);
    job.progress = pg ? moe_progress_cb : NULL;
    job.progress_arg = pg;
    output_t out = {&o, o.out, 'b', NULL}; /* -O, else binary; with or without --experts */
    moe_trace_sink_t sink = output_sink(&out);
    moe_import_report_t total = {0};
    int st = moe_import_run(&job, &sink, &total, errbuf, sizeof errbuf);
    moe_progress_free(pg);
    rc = output_close(out.t, op_failed(st) == 0);
    const moe_import_report_t *t = &total;
    if (rc == 0 && (t->incomplete || o.verbosity > 0) && o.verbosity >= 0)
        fprintf(stderr, "%s: import: %llu tokens (%llu incomplete, %llu missing cells, "
                        "%llu dropped)\n", prog, (unsigned long long)t->tokens,
                (unsigned long long)t->incomplete, (unsigned long long)t->missing_cells,
                (unsigned long long)t->dropped);
    if (rc == 0 && t->skipped_mtp && o.verbosity >= 0)
        fprintf(stderr, "%s: import: skipped %llu MTP records (--mtp keeps them)\n", prog,
                (unsigned long long)t->skipped_mtp);
    if (rc == 0 && t->repeats && o.verbosity >= 0)
        fprintf(stderr, "%s: import: skipped %llu repeated (layer, token) cells (activation "
                        "recompute; the first are kept)\n", prog,
                (unsigned long long)t->repeats);
    return rc;
}

/* ------------------------------------------------------------------ main */

static const moe_cli_cmd_t subcommands[] = {
    {"gen", cmd_gen, "generate a seeded synthetic trace"},
    {"import", cmd_import, "convert other systems' router logs (SGLang, Megatron, npy, ...)"},
    {"view", cmd_view, "print a trace as text, or convert between formats"},
    {"stats", cmd_stats, "token, sequence and per-layer load statistics"},
    {"head", cmd_head, "the first N tokens"},
    {"sample", cmd_sample, "a seeded random sample of tokens or sequences"},
    {"split", cmd_split, "split by sequence into train and test parts"},
    {"cat", cmd_cat, "concatenate traces of the same shape"},
    {"slice", cmd_slice, "keep a range of layers"},
};

static void main_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s COMMAND [options] [ARGS]\n"
                "Make, import, inspect and cut Mixture-of-Experts routing traces.\n\n"
                "Commands:\n", prog);
    for (size_t i = 0; i < sizeof subcommands / sizeof *subcommands; i++)
        fprintf(fp, "  %-8s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(fp, "\n      --help             display this help and exit\n"
                "      --version          output version information and exit\n\n"
                "'%s COMMAND --help' lists a command's options. Exit status: 0 success,\n"
                "1 failure (input, data or I/O), 2 usage error. See moe-trace(1), "
                "moe-trace(5).\n", prog);
}

int main(int argc, char **argv)
{
    g_argc = argc;
    g_argv = argv;
    moe_cli_start(prog, argv);
    return moe_cli_dispatch(prog, argc, argv, subcommands,
                            sizeof subcommands / sizeof *subcommands, main_usage);
}
