/* cmd/cli.c -- libmoetool, the tools' command-line plumbing (not in libmoecore: it prints and
 * sets process-wide state): common options, version, error messages, output commit and the
 * broken-pipe rule, picture outputs, the progress meter. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "moe/acct.h"
#include "moe/cost.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/plot.h"

void moe_opts_init(moe_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->out = "-";
    o->level = -1;
    o->progress = -1;
    o->allowed = MOE_OPT_ALL;
    o->first_moe_layer = -1;
}

/* The group of a shared option code and its name for messages; 0 if not shared. */
static unsigned opt_group(int c, const char **name)
{
    switch (c) {
    case 'o': *name = "-o/--output"; return MOE_OPT_OUTPUT;
    case 'O': *name = "-O/--output-fmt"; return MOE_OPT_FORMAT;
    case 'l': *name = "-l/--level"; return MOE_OPT_FORMAT;
    case '@': *name = "-@/--threads"; return MOE_OPT_THREADS;
    case 'f': *name = "-f/--force"; return MOE_OPT_FORCE;
    case MOE_OPTC_NO_PG: *name = "--no-PG"; return MOE_OPT_PG;
    case MOE_OPTC_PROGRESS: *name = "--progress"; return MOE_OPT_PROGRESS;
    case MOE_OPTC_NO_PROGRESS: *name = "--no-progress"; return MOE_OPT_PROGRESS;
    case MOE_OPTC_MODEL_LAYERS: *name = "--model-layers"; return MOE_OPT_LAYERS;
    case MOE_OPTC_FIRST_MOE_LAYER: *name = "--first-moe-layer"; return MOE_OPT_LAYERS;
    case MOE_OPTC_MOE_LAYERS: *name = "--moe-layers"; return MOE_OPT_LAYERS;
    default: return 0;
    }
}

int moe_opts_parse(moe_opts_t *o, int c, const char *arg, char *err, size_t errlen)
{
    uint64_t v;
    const char *name = "";
    unsigned group = opt_group(c, &name);
    if (group && !(o->allowed & group)) {
        snprintf(err, errlen, "option %s does not apply to this command", name);
        return -1;
    }
    switch (c) {
    case 'o':
        o->out = arg;
        return 1;
    case 'O':
        if (strlen(arg) != 1 || !strchr("butz", arg[0])) {
            snprintf(err, errlen, "invalid output format '%s' (expected b, u, t or z)", arg);
            return -1;
        }
        o->fmt = arg[0];
        return 1;
    case 'l':
        if (moe_parse_u64(arg, 0, 9, &v, "compression level", err, errlen))
            return -1;
        o->level = (int)v;
        return 1;
    case '@':
        if (moe_parse_u64(arg, 0, 1024, &v, "thread count", err, errlen))
            return -1;
        o->threads = (int)v;
        return 1;
    case 'v': o->verbosity++; return 1;
    case 'q': o->verbosity--; return 1;
    case 'f': o->force = 1; return 1;
    case MOE_OPTC_NO_PG: o->no_pg = 1; return 1;
    case MOE_OPTC_PROGRESS: o->progress = 1; return 1;
    case MOE_OPTC_NO_PROGRESS: o->progress = 0; return 1;
    case MOE_OPTC_MODEL_LAYERS:
        if (moe_parse_u64(arg, 1, MOE_LAYER_MAP_MAX, &v, "model layer count", err, errlen))
            return -1;
        o->model_layers = (uint32_t)v;
        return 1;
    case MOE_OPTC_FIRST_MOE_LAYER:
        if (moe_parse_u64(arg, 0, MOE_LAYER_MAP_MAX - 1, &v, "first MoE layer", err, errlen))
            return -1;
        o->first_moe_layer = (int64_t)v;
        return 1;
    case MOE_OPTC_MOE_LAYERS: o->moe_layers = arg; return 1;
    default: return 0;
    }
}

int moe_cli_placement_layers(const char *prog, const moe_opts_t *o, const char *name,
                             moe_placement_t *p)
{
    moe_layer_map_t m;
    char err[256];
    if (moe_placement_layers(p, &m))
        return moe_fail(prog, "out of memory");
    int rc = moe_cli_layers(prog, o, name, &m);
    if (!rc && moe_placement_set_layers(p, &m, err, sizeof err))
        rc = moe_fail(prog, "'%s': %s", name, err);
    moe_layer_map_release(&m);
    return rc;
}

int moe_cli_layers(const char *prog, const moe_opts_t *o, const char *name,
                   moe_layer_map_t *m)
{
    char err[256];
    if (!o->model_layers && o->first_moe_layer < 0 && !o->moe_layers)
        return 0;
    if (moe_layer_map_set(m, o->model_layers, o->first_moe_layer, o->moe_layers, err,
                          sizeof err))
        return moe_fail(prog, "'%s': %s", name, err);
    return 0;
}

void moe_opts_apply_log(const moe_opts_t *o)
{
    moe_log_set_level(MOE_LOG_WARN - o->verbosity);
}

void moe_opts_usage(FILE *fp, unsigned groups)
{
    if (groups & MOE_OPT_OUTPUT)
        fputs("  -o, --output=FILE      write to FILE [-: standard output]\n", fp);
    if (groups & MOE_OPT_FORCE)
        fputs("  -f, --force            write binary output to a terminal\n", fp);
    if (groups & MOE_OPT_FORMAT)
        fputs("  -O, --output-fmt=F     b binary, u uncompressed binary, t text, z gzipped text\n"
              "  -l, --level=N          compression level 0-9 [6]\n", fp);
    if (groups & MOE_OPT_THREADS)
        fputs("  -@, --threads=N        additional threads for (de)compression [0]\n", fp);
    if (groups & MOE_OPT_PG)
        fputs("      --no-PG            do not add a @PG line with this command line\n", fp);
    if (groups & MOE_OPT_PROGRESS)
        fputs("      --progress         show a progress meter on standard error\n"
              "      --no-progress      never show the progress meter [shown on a terminal]\n",
              fp);
    if (groups & MOE_OPT_LAYERS)
        fputs("      --model-layers=N   the model's layers, dense ones included [the input's]\n"
              "      --first-moe-layer=F  the MoE layers are model layers F, F+1, ... [the\n"
              "                         input's; else 0]\n"
              "      --moe-layers=LIST  the MoE layers' model layers ('1-3,5'); of an input\n"
              "                         holding every layer, the ones kept [the input's]\n", fp);
    fputs("  -v, --verbose          more messages (repeatable)\n"
          "  -q, --quiet            fewer messages (errors only)\n"
          "      --help             display this help and exit\n"
          "      --version          output version information and exit\n", fp);
}

void moe_print_version(FILE *fp, const char *prog)
{
    fprintf(fp, "%s (moeflow) %s\nlibmoecore %s\nfeatures: %s\n", prog, PACKAGE_VERSION,
            moe_version(), moe_features());
}

static void vmessage(const char *prog, const char *fmt, va_list ap)
{
    fflush(stdout);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int moe_fail(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(prog, fmt, ap);
    va_end(ap);
    return 1;
}

int moe_cli_u64(const char *prog, const char *sub, const char *arg, uint64_t min, uint64_t max,
                const char *what, uint64_t *out)
{
    char err[256];
    if (moe_parse_u64(arg, min, max, out, what, err, sizeof err))
        return moe_usage_error(prog, sub, "%s", err);
    return 0;
}

int moe_cli_u32(const char *prog, const char *sub, const char *arg, uint64_t min, uint64_t max,
                const char *what, uint32_t *out)
{
    uint64_t v;
    int rc = moe_cli_u64(prog, sub, arg, min, max <= UINT32_MAX ? max : UINT32_MAX, what, &v);
    if (!rc)
        *out = (uint32_t)v;
    return rc;
}

int moe_cli_double(const char *prog, const char *sub, const char *arg, double min, double max,
                   const char *what, double *out)
{
    char err[256];
    if (moe_parse_double(arg, min, max, out, what, err, sizeof err))
        return moe_usage_error(prog, sub, "%s", err);
    return 0;
}

int moe_cli_replica_rule(const char *prog, const char *sub, const char *arg, int *out)
{
    int r = moe_replica_rule_parse(arg);
    if (r < 0)
        return moe_usage_error(prog, sub, "unknown replica rule '%s' (nearest, even, "
                               "positional, sglang-static)", arg);
    *out = r;
    return 0;
}

int moe_cli_accounting(const char *prog, const char *sub, const char *arg, int *out, int *set)
{
    *set = 1;
    if ((*out = moe_accounting_parse(arg)) < 0)
        return moe_usage_error(prog, sub, "unknown accounting '%s' (rank, deepep, deepep-ll)",
                               arg);
    return 0;
}

int moe_cli_target(const char *prog, const char *sub, const char *arg, const moe_target_t **out)
{
    if (!(*out = moe_target_find(arg)))
        return moe_usage_error(prog, sub, "unknown target '%s' (sglang, vllm, moe-run)", arg);
    return 0;
}

void moe_cli_target_apply(const char *sub, const moe_target_t *t, int *scheme, int *accounting,
                          int *rule, int *scheme_set, int *accounting_set, int *rule_set)
{
    if (!t)
        return;
    if (!*scheme_set)
        *scheme = t->scheme;
    if (!*accounting_set)
        *accounting = t->accounting;
    if (!*rule_set)
        *rule = t->replica_rule;
    *scheme_set = *accounting_set = *rule_set = 1;
    moe_log(MOE_LOG_INFO, "%s --for %s: scheme %s, accounting %s, replica rule %s", sub,
            t->name, moe_scheme_name(*scheme), moe_accounting_name(*accounting),
            moe_replica_rule_name(*rule));
}

int moe_cli_gather_bytes(const char *prog, const char *sub, const char *arg, double *out)
{
    char err[256];
    return moe_exflow_gather_parse(arg, out, err, sizeof err)
               ? moe_usage_error(prog, sub, "%s", err) : 0;
}

int moe_usage_error(const char *prog, const char *sub, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(prog, fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try '%s%s%s --help' for more information.\n", prog, sub ? " " : "",
            sub ? sub : "");
    return 2;
}

void moe_cli_start(const char *prog, char **argv)
{
    argv[0] = (char *)prog;
    moe_log_set_prog(prog);
    opterr = 0;
    signal(SIGPIPE, SIG_IGN);
    moe_ofile_cleanup_on_signal();
}

/* A write of this run found its reader gone (moe_cli_write_failed, moe_close_stdout). */
static int reader_gone;

int moe_cli_reader_gone(void)
{
    return reader_gone;
}

int moe_cli_dispatch(const char *prog, int argc, char **argv, const moe_cli_cmd_t *cmds,
                     size_t n, void (*usage)(FILE *))
{
    int rc = -1;
    if (argc < 2)
        return moe_usage_error(prog, NULL, "missing command");
    if (!strcmp(argv[1], "--help"))
        usage(stdout), rc = 0;
    else if (!strcmp(argv[1], "--version"))
        moe_print_version(stdout, prog), rc = 0;
    for (size_t i = 0; rc < 0 && i < n; i++)
        if (!strcmp(argv[1], cmds[i].name))
            rc = cmds[i].run(argc - 1, argv + 1);
    if (rc < 0)
        return moe_usage_error(prog, NULL, "unknown command '%s'", argv[1]);
    if (moe_close_stdout(prog) && rc == 0)
        rc = 1;
    return reader_gone ? 0 : rc; /* the command stopped because its reader went away */
}

int moe_close_stdout(const char *prog)
{
    int bad = ferror(stdout);
    if (fclose(stdout) != 0 || bad) {
        if (errno == EPIPE) {
            reader_gone = 1;
            return 0;
        }
        fprintf(stderr, "%s: write error on standard output: %s\n", prog, strerror(errno));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ progress */

struct moe_progress {
    char label[32];
    uint64_t total;
    double start, last;
    int shown;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

moe_progress_t *moe_progress_new(const char *label, uint64_t total, int mode)
{
    if (mode == 0 || (mode < 0 && !isatty(STDERR_FILENO)))
        return NULL;
    moe_progress_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    snprintf(p->label, sizeof p->label, "%s", label);
    p->total = total;
    p->start = p->last = now_s();
    return p;
}

void moe_progress_update(moe_progress_t *p, uint64_t done)
{
    if (!p)
        return;
    double t = now_s();
    if (t - p->last < 0.2 && !(p->total && done >= p->total)) /* the end is always shown */
        return;
    p->last = t;
    p->shown = 1;
    double el = t - p->start;
    if (p->total) {
        double f = (double)done / (double)p->total;
        f = f > 1 ? 1 : f;
        int w = (int)(f * 30);
        fprintf(stderr, "\r%s [%.*s%*s] %5.1f%%  %.0fs", p->label, w,
                "==============================", 30 - w, "", 100 * f, el);
        if (f > 0.01)
            fprintf(stderr, " (eta %.0fs)   ", el / f - el);
    } else {
        fprintf(stderr, "\r%s %llu  %.0fs   ", p->label, (unsigned long long)done, el);
    }
}

void moe_progress_cb(void *ctx, uint64_t done, uint64_t total)
{
    moe_progress_t *p = ctx;
    if (p && total) /* the latest: a fit learns its count of folds to run as it goes */
        p->total = total;
    moe_progress_update(p, done);
}

void moe_progress_free(moe_progress_t *p)
{
    if (!p)
        return;
    if (p->shown)
        fputs("\r\033[K", stderr);
    free(p);
}

int moe_opts_next(const char *prog, const char *sub, void (*usage)(FILE *), moe_opts_t *o,
                  int argc, char **argv, const char *shortopts, const struct option *longopts,
                  int *rc)
{
    char err[256];
    for (;;) {
        int c = getopt_long(argc, argv, shortopts, longopts, NULL);
        if (c == -1)
            return -1;
        *rc = 0;
        if (c == MOE_OPTC_HELP) {
            usage(stdout);
            return MOE_OPT_STOP;
        }
        if (c == MOE_OPTC_VERSION) {
            moe_print_version(stdout, prog);
            return MOE_OPT_STOP;
        }
        if (c == '?' || c == ':') {
            *rc = moe_usage_error(prog, sub, "invalid or incomplete option '%s'",
                                  argv[optind - 1]);
            return MOE_OPT_STOP;
        }
        int h = moe_opts_parse(o, c, optarg, err, sizeof err);
        if (h < 0) {
            *rc = moe_usage_error(prog, sub, "%s", err);
            return MOE_OPT_STOP;
        }
        if (h == 0)
            return c;
    }
}

struct moe_textout *moe_cli_text_open(const char *prog, const char *path, char fmt, int level)
{
    char err[512];
    int st;
    moe_textout_t *t = moe_textout_open(path, fmt == 'z' ? (level < 0 ? 6 : level) : -1, &st,
                                        err, sizeof err);
    if (!t)
        moe_fail(prog, "%s", err);
    return t;
}

int moe_cli_text_close(const char *prog, struct moe_textout *t, const char *path, int ok)
{
    if (moe_textout_close(t, ok) == 0)
        return ok ? 0 : 1;
    return moe_cli_write_failed(prog, path);
}

int moe_cli_write_failed(const char *prog, const char *path)
{
    if (errno == EPIPE) { /* the reader went away (`| head`): the tool is done, quietly */
        reader_gone = 1;
        return 0;
    }
    return moe_fail(prog, "write error on '%s': %s", path, strerror(errno));
}

int moe_cli_text_finish(const char *prog, struct moe_textout *t, const char *path, int werr)
{
    if (!werr)
        return moe_cli_text_close(prog, t, path, 1);
    int e = errno, rc = moe_cli_write_failed(prog, path);
    moe_textout_close(t, 0);
    errno = e;
    return rc;
}

/* ------------------------------------------------------------------ pictures */

int moe_cli_picture_draw(const char *prog, moe_cli_picture_t *p, const char *path,
                         const moe_canvas_t *c, int svg)
{
    memset(p, 0, sizeof *p);
    if (!path)
        return 0;
    size_t n = strlen(path);
    if (svg < 0)
        svg = n >= 4 && !strcmp(path + n - 4, ".svg");
    p->path = path;
    char *doc = NULL;
    uint8_t *png = NULL;
    int bad = !c || (svg ? moe_canvas_svg(c, &doc, &p->len) : moe_canvas_png(c, &png, &p->len));
    p->data = svg ? (void *)doc : (void *)png;
    return bad ? moe_fail(prog, "cannot draw: out of memory") : 0;
}

int moe_cli_picture_write(const char *prog, moe_cli_picture_t *p)
{
    char err[512];
    int st;
    if (!p->path)
        return 0;
    if (!(p->of = moe_ofile_open(p->path, &st, err, sizeof err)))
        return moe_fail(prog, "%s", err);
    if (moe_write_full(moe_ofile_fd(p->of), p->data, p->len))
        return moe_fail(prog, "write error on '%s': %s", p->path, strerror(errno));
    return 0;
}

int moe_cli_picture_commit(const char *prog, moe_cli_picture_t *p)
{
    moe_ofile_t *of = p->of;
    p->of = NULL; /* committed or removed by moe_ofile_commit */
    if (of && moe_ofile_commit(of))
        return moe_fail(prog, "cannot write '%s': %s", p->path, strerror(errno));
    return 0;
}

void moe_cli_picture_free(moe_cli_picture_t *p)
{
    moe_ofile_abort(p->of);
    free(p->data);
    memset(p, 0, sizeof *p);
}

int moe_cli_picture_save(const char *prog, const char *path, const moe_canvas_t *c, int svg)
{
    moe_cli_picture_t p;
    int rc = moe_cli_picture_draw(prog, &p, path, c, svg) || moe_cli_picture_write(prog, &p) ||
             moe_cli_picture_commit(prog, &p);
    moe_cli_picture_free(&p);
    return rc;
}

/* A file's identity for moe_cli_distinct: device and inode when it exists, else its path with
 * the directory resolved (realpath), so "a.moet" and "./dir/../a.moet" match before either is
 * written. Returns 1 (exists: *st set), 0 (name in buf), -1 (no room). */
static int file_identity(const char *path, struct stat *st, char *buf, size_t len)
{
    if (stat(path, st) == 0)
        return 1;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char dir[PATH_MAX], *real;
    int n = slash ? snprintf(dir, sizeof dir, "%.*s", (int)(slash - path + 1), path)
                  : snprintf(dir, sizeof dir, ".");
    if (n < 0 || (size_t)n >= sizeof dir || !(real = realpath(dir, NULL)))
        return snprintf(buf, len, "%s", path) < (int)len ? 0 : -1;
    n = snprintf(buf, len, "%s/%s", real, base);
    free(real);
    return n >= 0 && (size_t)n < len ? 0 : -1;
}

/* Whether a and b are one file to write through: the same regular file (a device such as
 * /dev/null may take two outputs), the same resolved name of a file not yet made, or both
 * standard output. */
static int same_file(const moe_cli_file_t *a, const moe_cli_file_t *b)
{
    if (!strcmp(a->path, "-") || !strcmp(b->path, "-"))
        return !strcmp(a->path, b->path) && a->output && b->output;
    struct stat sa, sb;
    char na[PATH_MAX + 256], nb[PATH_MAX + 256];
    int ea = file_identity(a->path, &sa, na, sizeof na);
    int eb = file_identity(b->path, &sb, nb, sizeof nb);
    if (ea == 1 && eb == 1)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && S_ISREG(sa.st_mode);
    if (ea == 0 && eb == 0)
        return !strcmp(na, nb);
    return ea < 0 && eb < 0 && !strcmp(a->path, b->path);
}

int moe_cli_distinct(const char *prog, const char *sub, const moe_cli_file_t *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (f[i].path && f[j].path && (f[i].output || f[j].output) && same_file(&f[i], &f[j]))
                return moe_usage_error(prog, sub, "%s and %s name the same file '%s'", f[i].what,
                                       f[j].what, f[j].path);
    return 0;
}

int moe_cli_inputs_failed(const char *prog, const char *sub, const char *order,
                          const char *ppath, const char *tpath, int st, const char *err)
{
    if (st != MOE_ESYS && st != MOE_ENOMEM) {
        const char *pk = moe_acct_input_kind(ppath), *tk = moe_acct_input_kind(tpath);
        int p_is_trace = pk && !strcmp(pk, "a routing trace");
        int t_is_placement = tk && !strcmp(tk, "a placement");
        if (p_is_trace && t_is_placement)
            return moe_fail(prog, "'%s' is a routing trace and '%s' a placement: %s %s takes %s",
                            ppath, tpath, prog, sub, order);
        if (p_is_trace)
            return moe_fail(prog, "'%s' is a routing trace, not a placement: %s %s takes %s",
                            ppath, prog, sub, order);
        if (t_is_placement)
            return moe_fail(prog, "'%s' is a placement, not a moeflow trace: %s %s takes %s",
                            tpath, prog, sub, order);
    }
    return moe_fail(prog, "%s", err);
}
