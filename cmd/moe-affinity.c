/* cmd/moe-affinity.c -- moe-affinity: inter-layer expert affinity tables and heatmaps. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/affinity.h"
#include "cli.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/plot.h"
#include "moe/trace.h"

static const char *prog = "moe-affinity";
static int g_argc;
static char **g_argv;
static char errbuf[512];

/* The options every mode accepts besides its own: text output, threads, @PG, progress. */
#define AFF_OPTS (MOE_OPT_OUTPUT | MOE_OPT_FORMAT | MOE_OPT_THREADS | MOE_OPT_PG | \
                  MOE_OPT_PROGRESS)

/* Error reporting in the house style: "moe-affinity: ..." (status 1) and usage errors with
 * the --help hint (status 2). */
#define fail(...) moe_fail(prog, __VA_ARGS__)
#define usage_error(sub, ...) moe_usage_error(prog, sub, __VA_ARGS__)

/* Help lines of the common options; `pg`: the mode writes a table with a @PG line. */
static void common_usage(FILE *fp, int pg)
{
    fputs("  -o, --output=FILE      write to FILE [-: standard output]\n"
          "  -O, --output-fmt=F     t text, z gzipped text [t]\n"
          "  -l, --level=N          gzip level 0-9 for -O z [6]\n"
          "  -@, --threads=N        additional threads reading and counting [0]\n", fp);
    moe_opts_usage(fp, (pg ? MOE_OPT_PG : 0) | MOE_OPT_PROGRESS);
}

/* ------------------------------------------------------------------ options */

enum {
    O_HOPS = MOE_OPTC_TOOL, O_TOP1, O_NO_COACT, O_NO_SHUFFLE, O_WINDOW, O_BY_STEP, O_PNG, O_SVG,
    O_PLOT, O_PAIR, O_LAYER, O_SHUFFLED, O_LEVELS, O_KERNEL,
};

typedef struct job {
    moe_opts_t o;
    moe_affinity_opts_t ao;
    int summary;
    const char *png, *svg;
    int plot_kind;          /* -1: the mode's default */
    uint32_t *pairs;
    size_t npairs;
    uint32_t layer;
    int shuffled;
    int have_out;           /* -o given */
} job_t;

/* Parse "0,3-5" into layer indices. */
static int parse_pairs(job_t *j, const char *arg, char *err, size_t errlen)
{
    moe_ranges_t rg = {0};
    const char *why = NULL;
    if (moe_ranges_parse(&rg, arg, MOE_TRACE_MAX_LAYERS - 1)) {
        moe_ranges_free(&rg);
        snprintf(err, errlen, "invalid pair list '%s' (expected layers like 0,3-5)", arg);
        return -1;
    }
    for (size_t i = 0; !why && i < rg.n; i++)
        for (uint32_t k = rg.r[i][0]; !why && k <= rg.r[i][1]; k++) {
            uint32_t *q = j->npairs < 64 ? realloc(j->pairs, (j->npairs + 1) * sizeof *q) : NULL;
            if (q)
                (j->pairs = q)[j->npairs++] = k;
            else
                why = j->npairs < 64 ? "out of memory" : "--pair: at most 64 pairs";
        }
    moe_ranges_free(&rg);
    if (why)
        snprintf(err, errlen, "%s", why);
    return why ? -1 : 0;
}

/* The options of all modes in one table; each mode rejects those that do not apply. */
static const struct option long_opts[] = {
    {"hops", required_argument, 0, O_HOPS}, {"top1", no_argument, 0, O_TOP1},
    {"no-coact", no_argument, 0, O_NO_COACT}, {"no-shuffle", no_argument, 0, O_NO_SHUFFLE},
    {"seed", required_argument, 0, 'S'}, {"window", required_argument, 0, O_WINDOW},
    {"by-step", required_argument, 0, O_BY_STEP}, {"summary", no_argument, 0, 's'},
    {"png", required_argument, 0, O_PNG}, {"svg", required_argument, 0, O_SVG},
    {"plot", required_argument, 0, O_PLOT}, {"pair", required_argument, 0, O_PAIR},
    {"layer", required_argument, 0, O_LAYER}, {"shuffled", no_argument, 0, O_SHUFFLED},
    {"levels", required_argument, 0, O_LEVELS}, {"kernel", required_argument, 0, O_KERNEL},
    MOE_OPTS_LONG, {0}};

/* Which options each mode takes (bit per option code past MOE_OPTC_TOOL, plus 'S', 's'). */
static int allowed(const char *sub, int c)
{
    if (c == 'S' || c == O_TOP1 || c == O_KERNEL)
        return 1;
    if (!sub)
        return c != O_LEVELS;
    if (strcmp(sub, "converge") == 0)
        return c == O_LEVELS;
    /* compare */
    return c == 's' || c == O_WINDOW;
}

static const char *opt_name(int c)
{
    for (const struct option *o = long_opts; o->name; o++)
        if (o->val == c)
            return o->name;
    return "?";
}

/* One name out of names[n] into *out (its index): 0, or 2 after the usage error. */
static int pick(const char *sub, const char *arg, const char *what, const char *const *names,
                int n, int *out)
{
    for (int k = 0; k < n; k++)
        if (strcmp(arg, names[k]) == 0) {
            *out = k;
            return 0;
        }
    return usage_error(sub, "unknown %s '%s' (%s, %s, %s or %s)", what, arg, names[0], names[1],
                       names[2], names[3]);
}

/* One mode-specific option c (value optarg) into j: 0, or 2 after the usage error. */
static int take_opt(const char *sub, job_t *j, int c)
{
    static const char *const kinds[] = {"pair", "grid", "load", "steps"};
    static const char *const kernels[] = {"auto", "scalar", "avx2", "avx512"};
    char err[256];
    uint64_t v;
    switch (c) {
    case O_HOPS:
        return moe_cli_u32(prog, sub, optarg, 1, MOE_AFF_MAX_HOPS, "hop count", &j->ao.hops);
    case O_TOP1: j->ao.top1 = 1; return 0;
    case O_NO_COACT: j->ao.coact = 0; return 0;
    case O_NO_SHUFFLE: j->ao.shuffle = 0; return 0;
    case 'S':
        if (moe_cli_u64(prog, sub, optarg, 0, UINT64_MAX, "seed", &v))
            return 2;
        j->ao.seed = v;
        return 0;
    case O_WINDOW:
        return moe_cli_u32(prog, sub, optarg, 2, 1u << 24, "shuffle window", &j->ao.window);
    case O_BY_STEP:
        return moe_cli_u32(prog, sub, optarg, 1, UINT32_MAX, "step window", &j->ao.step_window);
    case 's': j->summary = 1; return 0;
    case O_PNG: j->png = optarg; return 0;
    case O_SVG: j->svg = optarg; return 0;
    case O_PLOT: return pick(sub, optarg, "plot", kinds, 4, &j->plot_kind);
    case O_PAIR:
        return parse_pairs(j, optarg, err, sizeof err) ? usage_error(sub, "%s", err) : 0;
    case O_LAYER:
        return moe_cli_u32(prog, sub, optarg, 0, MOE_TRACE_MAX_LAYERS - 1, "layer", &j->layer);
    case O_SHUFFLED: j->shuffled = 1; return 0;
    case O_LEVELS: return moe_cli_u32(prog, sub, optarg, 1, 30, "level count", &j->ao.bands);
    case O_KERNEL: return pick(sub, optarg, "kernel", kernels, 4, &j->ao.kernel);
    default: return usage_error(sub, "unexpected option");
    }
}

/* parse's work: 0, or 1 after --help/--version or a usage error, with *rc the exit status. The
 * shared option loop (moe_opts_next) as in the other tools. */
static int parse_opts(const char *sub, int argc, char **argv, job_t *j, void (*usage)(FILE *),
                      int *rc)
{
    moe_opts_init(&j->o);
    j->o.allowed = sub ? AFF_OPTS & ~(unsigned)MOE_OPT_PG : AFF_OPTS; /* reports: no @PG */
    j->o.out = NULL;                                                   /* to see whether -o came */
    moe_affinity_opts_default(&j->ao);
    j->plot_kind = -1;
    j->layer = UINT32_MAX;
    int c;
    opterr = 0;
    while ((c = moe_opts_next(prog, sub, usage, &j->o, argc, argv, "sS:" MOE_OPTS_SHORT,
                              long_opts, rc)) != -1) {
        if (c == MOE_OPT_STOP)
            return 1;
        if (!allowed(sub, c)) {
            *rc = usage_error(sub, "option --%s does not apply to %s", opt_name(c),
                              sub ? sub : "the table mode");
            return 1;
        }
        if ((*rc = take_opt(sub, j, c)))
            return 1;
    }
    j->have_out = j->o.out != NULL;
    if (!j->o.out)
        j->o.out = "-";
    if (j->o.fmt && j->o.fmt != 't' && j->o.fmt != 'z') {
        *rc = usage_error(sub, "tables are text: -O t or -O z");
        return 1;
    }
    if (j->o.force) {
        *rc = usage_error(sub, "option -f/--force does not apply: the output is text");
        return 1;
    }
    return 0;
}

/* Parse the command line of a mode into a fresh job and apply -v/-q. Returns 0 to go on, else
 * nonzero with *rc the exit status (0 after --help/--version, 2 after a usage error) and
 * nothing left to free. */
static int parse(const char *sub, int argc, char **argv, job_t *j, void (*usage)(FILE *),
                 int *rc)
{
    memset(j, 0, sizeof *j);
    *rc = 0;
    int st = parse_opts(sub, argc, argv, j, usage, rc);
    if (st) {
        free(j->pairs);
        return 1;
    }
    moe_opts_apply_log(&j->o);
    return 0;
}

/* ------------------------------------------------------------------ output */

/* The text output of the options (-o, -O, -l); NULL after a message. */
static moe_textout_t *textout_open(const moe_opts_t *o)
{
    return moe_cli_text_open(prog, o->out, o->fmt, o->level);
}

/* Draw the pictures asked for (--png, --svg) into memory, before any file is opened. */
static int render(const job_t *j, const moe_affinity_t *a, int kind, moe_cli_picture_t pic[2])
{
    memset(pic, 0, 2 * sizeof *pic);
    if (!j->png && !j->svg)
        return 0;
    moe_affinity_plot_t po = {kind, j->pairs, j->npairs, j->shuffled, j->layer};
    moe_canvas_t *c = NULL;
    if (moe_affinity_plot(a, &po, &c, errbuf, sizeof errbuf) != 0)
        return fail("cannot draw: %s", errbuf);
    int rc = moe_cli_picture_draw(prog, &pic[0], j->png, c, 0) ||
             moe_cli_picture_draw(prog, &pic[1], j->svg, c, 1);
    moe_canvas_free(c);
    return rc;
}

/* ------------------------------------------------------------------ counting */

/* Count a trace into a new affinity object, or with `either` read an affinity table instead
 * when path holds one (told apart by the first line). NULL after printing the error. */
static moe_affinity_t *count_trace(const char *path, const job_t *j, int either)
{
    int st;
    void (*cb)(void *, uint64_t, uint64_t) = NULL;
    moe_progress_t *pg = moe_progress_new("affinity", 0, j->o.progress);
    if (pg)
        cb = moe_progress_cb;
    moe_affinity_t *a = either ? moe_affinity_read_any(path, &j->ao, j->o.threads, cb, pg, NULL,
                                                       &st, errbuf, sizeof errbuf)
                               : moe_affinity_count(path, &j->ao, j->o.threads, cb, pg, &st,
                                                    errbuf, sizeof errbuf);
    moe_progress_free(pg);
    if (!a)
        fail("%s", errbuf);
    return a;
}

/* '@' lines for a table: the input's own, then this command's @PG line. */
static char *table_text(const job_t *j, const moe_affinity_t *a)
{
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    if (moe_trace_hdr_add_line(&h, "@CO\tmoe-affinity table") != 0)
        return NULL;
    const char *t = moe_affinity_text(a);
    if (*t) {
        size_t n = strlen(h.text) + strlen(t) + 1;
        char *x = realloc(h.text, n);
        if (!x) {
            moe_trace_hdr_release(&h);
            return NULL;
        }
        strcat(x, t);
        h.text = x;
    }
    if (!j->o.no_pg && moe_trace_hdr_add_pg(&h, prog, g_argc, g_argv) != 0) {
        moe_trace_hdr_release(&h);
        return NULL;
    }
    return h.text;
}

/* ------------------------------------------------------------------ the table mode */

static void main_usage(FILE *fp)
{
    fprintf(fp,
            "Usage: %s [options] [TRACE]\n"
            "       %s converge [options] [TRACE]\n"
            "       %s compare [options] A B\n"
            "Measure inter-layer expert affinity in a routing trace: per-layer expert loads,\n"
            "transitions between layers over the top-k sets, conditional probabilities\n"
            "P(next | this), most affiliated experts, mutual information and same-layer\n"
            "co-activation, each next to a shuffled no-affinity baseline.\n\n"
            "Statistics:\n"
            "      --hops=D           count transitions j -> j+d for d = 1..D [1]\n"
            "      --top1             use each cell's top-1 expert (highest weight, else the\n"
            "                         first id) instead of the top-k set\n"
            "      --no-coact         skip same-layer co-activation counts\n"
            "      --no-shuffle       skip the shuffled baseline\n"
            "  -S, --seed=N           seed of the shuffle [1]\n"
            "      --window=N         shuffle within windows of N records [8192]\n"
            "      --by-step=W        report loads and affinity per window of W steps\n"
            "  -s, --summary          one line per statistic instead of the table\n"
            "      --kernel=K         counting kernel: auto, scalar, avx2, avx512 [auto]\n"
            "Pictures:\n"
            "      --png=FILE         draw a heatmap as PNG\n"
            "      --svg=FILE         draw a heatmap as SVG\n"
            "      --plot=KIND        pair, grid, load or steps [pair; steps with --by-step]\n"
            "      --pair=LIST        layers j of the pairs j -> j+1 drawn, e.g. 0,5-7 [0]\n"
            "      --layer=J          layer whose loads the steps plot shows [the last]\n"
            "      --shuffled         draw the shuffled baseline instead of the trace\n"
            "Output and common options:\n",
            prog, prog, prog);
    common_usage(fp, 1);
    fprintf(fp, "\nWith --png or --svg and no -o, only the pictures are written. TRACE is a\n"
                "binary trace, a text view, or '-' for standard input [-].\n\n"
                "Commands:\n"
                "  converge  affinity of growing samples of sequences against the whole trace\n"
                "  compare   how well the affinity of trace A predicts trace B\n\n"
                "'%s COMMAND --help' lists a command's options. Exit status: 0 success,\n"
                "1 failure (input, data or I/O), 2 usage error. See moe-affinity(1),\n"
                "moe-affinity(5).\n", prog);
}

static int run_table(int argc, char **argv)
{
    job_t j;
    int rc;
    if (parse(NULL, argc, argv, &j, main_usage, &rc))
        return rc;
    int kind = j.plot_kind >= 0 ? j.plot_kind : j.ao.step_window ? MOE_AFF_PLOT_STEPS
                                                                 : MOE_AFF_PLOT_PAIR;
    const char *bad =
        argc - optind > 1 ? "too many arguments"
        : j.ao.step_window && j.summary ? "--by-step and --summary exclude each other"
        : (kind == MOE_AFF_PLOT_STEPS) != (j.ao.step_window != 0) && (j.png || j.svg)
            ? "--plot steps goes with --by-step, the other plots without"
        : j.shuffled && !j.ao.shuffle ? "--shuffled needs the baseline (drop --no-shuffle)"
                                      : NULL;
    if (bad) {
        free(j.pairs);
        return usage_error(NULL, "%s", bad);
    }
    const char *in = optind < argc ? argv[optind] : "-";
    int want_text = j.summary || j.have_out || (!j.png && !j.svg);
    const moe_cli_file_t files[] = {{"--output", want_text ? j.o.out : NULL, 1},
                                    {"--png", j.png, 1}, {"--svg", j.svg, 1},
                                    {"the input", in, 0}};
    if ((rc = moe_cli_distinct(prog, NULL, files, 4))) {
        free(j.pairs);
        return rc;
    }
    moe_affinity_t *a = count_trace(in, &j, 0);
    if (!a) {
        free(j.pairs);
        return 1;
    }
    moe_cli_picture_t pics[2];
    rc = render(&j, a, kind, pics);
    moe_textout_t *out = NULL;
    if (!rc) /* written under temporary names, committed last */
        rc = moe_cli_picture_write(prog, &pics[0]) || moe_cli_picture_write(prog, &pics[1]);
    if (!rc && want_text)
        rc = (out = textout_open(&j.o)) == NULL;
    int wrc = 0;
    if (!rc && want_text) {
        char *text = NULL;
        if (j.summary) {
            wrc = moe_affinity_write_summary(a, moe_textout_write, out);
        } else if (j.ao.step_window) {
            wrc = moe_affinity_write_steps(a, moe_textout_write, out);
        } else {
            text = table_text(&j, a);
            wrc = text ? moe_affinity_write(a, text, moe_textout_write, out) : MOE_ENOMEM;
        }
        free(text);
        if (wrc) { /* nothing is committed then, not even the pictures */
            rc = wrc == MOE_ESYS ? moe_cli_write_failed(prog, j.o.out)
                                 : fail("write error on '%s': %s", j.o.out, moe_strerror(wrc));
            moe_textout_close(out, 0);
            out = NULL;
        }
    }
    /* everything written: commit all, or remove all */
    if (out)
        rc = moe_cli_text_close(prog, out, j.o.out, rc == 0) || rc;
    if (!rc && !wrc)
        rc = moe_cli_picture_commit(prog, &pics[0]) | moe_cli_picture_commit(prog, &pics[1]);
    moe_cli_picture_free(&pics[0]);
    moe_cli_picture_free(&pics[1]);
    moe_affinity_free(a);
    free(j.pairs);
    return rc;
}

/* ------------------------------------------------------------------ converge */

static void converge_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s converge [options] [TRACE]\n"
                "How many tokens does the affinity need? Sequences are sampled by a seeded hash\n"
                "into nested samples of 1/2, 1/4, ... of the trace; for each sample the table\n"
                "gives the mean total-variation distance of its conditional rows P(next | i)\n"
                "to the whole trace's, and the share of experts whose most affiliated expert\n"
                "is unchanged (layer pairs j -> j+1).\n\n"
                "      --levels=N         smallest sample 1/2^N of the sequences [12]\n"
                "      --top1             use each cell's top-1 expert instead of the set\n"
                "  -S, --seed=N           seed of the sampling [1]\n"
                "      --kernel=K         counting kernel: auto, scalar, avx2, avx512 [auto]\n",
            prog);
    common_usage(fp, 0);
}

static int run_converge(int argc, char **argv)
{
    job_t j;
    int rc;
    if (parse("converge", argc, argv, &j, converge_usage, &rc))
        return rc;
    if (argc - optind > 1)
        return usage_error("converge", "too many arguments");
    if (!j.ao.bands)
        j.ao.bands = 12;
    moe_affinity_t *a = count_trace(optind < argc ? argv[optind] : "-", &j, 0);
    if (!a)
        return 1;
    moe_textout_t *out = textout_open(&j.o);
    rc = out ? moe_cli_text_finish(prog, out, j.o.out,
                                   moe_affinity_write_converge(a, moe_textout_write, out)) : 1;
    moe_affinity_free(a);
    return rc;
}

/* ------------------------------------------------------------------ compare */

static void compare_usage(FILE *fp)
{
    fprintf(fp, "Usage: %s compare [options] A B\n"
                "How well does the affinity measured on A predict B (ExFlow Table III)? Per\n"
                "layer pair j -> j+1: the mean total-variation distance between the rows\n"
                "P(next | i) of A and B, the log2-likelihood per transition of B under A's\n"
                "rows and under A's shuffled baseline (their difference is the gain of the\n"
                "affinity), and the share of experts with the same most affiliated expert.\n"
                "A and B are traces or affinity tables; A needs its shuffled baseline.\n\n"
                "  -s, --summary          only the means over the layer pairs\n"
                "      --top1             use each cell's top-1 expert instead of the set\n"
                "  -S, --seed=N           seed of A's shuffle [1]\n"
                "      --window=N         shuffle within windows of N records [8192]\n"
                "      --kernel=K         counting kernel: auto, scalar, avx2, avx512 [auto]\n",
            prog);
    common_usage(fp, 0);
}

static int run_compare(int argc, char **argv)
{
    job_t j;
    int rc;
    if (parse("compare", argc, argv, &j, compare_usage, &rc))
        return rc;
    if (argc - optind != 2)
        return usage_error("compare", "expected two inputs, A and B");
    moe_affinity_t *a = count_trace(argv[optind], &j, 1), *b = NULL;
    if (a)
        b = count_trace(argv[optind + 1], &j, 1);
    if (!a || !b) {
        moe_affinity_free(a);
        return 1;
    }
    moe_affinity_info_t ia, ib;
    moe_affinity_info(a, &ia);
    moe_affinity_info(b, &ib);
    if (ia.layers != ib.layers || ia.experts != ib.experts) {
        rc = fail("'%s' has %u layers and %u experts, '%s' %u and %u", argv[optind], ia.layers,
                  ia.experts, argv[optind + 1], ib.layers, ib.experts);
    } else if (!ia.shuffled) {
        rc = fail("'%s': the table has no shuffled baseline", argv[optind]);
    } else if (ia.layers < 2) {
        rc = fail("'%s': a single layer has no layer pairs", argv[optind]);
    } else {
        moe_textout_t *out = textout_open(&j.o);
        rc = out ? moe_cli_text_finish(prog, out, j.o.out, moe_affinity_write_compare(
                                           a, b, j.summary, moe_textout_write, out)) : 1;
    }
    moe_affinity_free(a);
    moe_affinity_free(b);
    return rc;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    g_argc = argc;
    g_argv = argv;
    moe_cli_start(prog, argv);
    int rc;
    if (argc > 1 && strcmp(argv[1], "converge") == 0)
        rc = run_converge(argc - 1, argv + 1);
    else if (argc > 1 && strcmp(argv[1], "compare") == 0)
        rc = run_compare(argc - 1, argv + 1);
    else
        rc = run_table(argc, argv);
    if (moe_close_stdout(prog) && rc == 0)
        rc = 1;
    return rc;
}
