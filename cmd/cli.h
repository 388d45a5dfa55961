/* cmd/cli.h -- what every moeflow tool shares (cmd/libmoetool, linked into the tools and tests
 * only, never installed): common options, help lines, version, messages and exit statuses,
 * output commit, progress meter (the samtools sam_opts.h idea). */
#ifndef MOE_CLI_H
#define MOE_CLI_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "moe/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Option groups a command accepts (bits); select both parsing and help lines. */
enum moe_opt_group {
    MOE_OPT_OUTPUT = 1u << 0,  /* -o FILE */
    MOE_OPT_FORMAT = 1u << 1,  /* -O b|u|t|z, -l LEVEL */
    MOE_OPT_THREADS = 1u << 2, /* -@ N */
    MOE_OPT_PG = 1u << 3,      /* --no-PG */
    MOE_OPT_PROGRESS = 1u << 4, /* --progress, --no-progress */
    MOE_OPT_FORCE = 1u << 5,   /* -f */
    MOE_OPT_ALL = 0x3f,
    MOE_OPT_LAYERS = 1u << 6,  /* --model-layers, --first-moe-layer, --moe-layers (not in
                                * MOE_OPT_ALL: only the commands that map layers take them) */
};

/* Values of the shared options after parsing. */
typedef struct moe_opts {
    const char *out; /* -o: output path, "-" = stdout */
    char fmt;        /* -O: enum moe_trace_fmt letter, 0 = the command's default */
    int level;       /* -l: compression level 0..9, -1 = default */
    int threads;     /* -@: additional threads */
    int verbosity;   /* +1 per -v, -1 per -q */
    int no_pg;       /* --no-PG */
    int force;       /* -f: write binary to a terminal anyway */
    int progress;    /* -1 auto (stderr is a terminal), 0 off, 1 on */
    unsigned allowed; /* groups the command accepts (set before parsing) [MOE_OPT_ALL] */
    uint32_t model_layers;   /* --model-layers: the model's layers, 0 = not given */
    int64_t first_moe_layer; /* --first-moe-layer, -1 = not given */
    const char *moe_layers;  /* --moe-layers LIST, NULL = not given */
} moe_opts_t;

/* Long-option codes above the char range, for tools' own switch statements. */
enum {
    MOE_OPTC_NO_PG = 0x1000,
    MOE_OPTC_PROGRESS,
    MOE_OPTC_NO_PROGRESS,
    MOE_OPTC_HELP,
    MOE_OPTC_VERSION,
    MOE_OPTC_MODEL_LAYERS,
    MOE_OPTC_FIRST_MOE_LAYER,
    MOE_OPTC_MOE_LAYERS,
    MOE_OPTC_TOOL = 0x1100, /* first code free for a tool's own long options */
};

/* getopt short-option letters and long-option entries of the shared options; a tool's own
 * tables are built by concatenation: "n:s:" MOE_OPTS_SHORT and { ..., MOE_OPTS_LONG, {0} }. */
#define MOE_OPTS_SHORT "o:O:l:@:vqf"
#define MOE_OPTS_LONG                                                                         \
    {"output", required_argument, 0, 'o'}, {"output-fmt", required_argument, 0, 'O'},        \
        {"level", required_argument, 0, 'l'}, {"threads", required_argument, 0, '@'},        \
        {"verbose", no_argument, 0, 'v'}, {"quiet", no_argument, 0, 'q'},                    \
        {"force", no_argument, 0, 'f'}, {"no-PG", no_argument, 0, MOE_OPTC_NO_PG},           \
        {"progress", no_argument, 0, MOE_OPTC_PROGRESS},                                     \
        {"no-progress", no_argument, 0, MOE_OPTC_NO_PROGRESS},                               \
        {"help", no_argument, 0, MOE_OPTC_HELP}, {"version", no_argument, 0, MOE_OPTC_VERSION}, \
        {"model-layers", required_argument, 0, MOE_OPTC_MODEL_LAYERS},                       \
        {"first-moe-layer", required_argument, 0, MOE_OPTC_FIRST_MOE_LAYER},                 \
        {"moe-layers", required_argument, 0, MOE_OPTC_MOE_LAYERS}

/* Defaults: out "-", fmt 0, level -1, threads 0, verbosity 0, progress -1, all groups allowed.
 */
void moe_opts_init(moe_opts_t *o);

/* Handle one getopt result if it is a shared option. Returns 1 if handled, 0 if the code is not
 * a shared option, -1 on a bad value or an option outside o->allowed (a one-line reason is
 * written to err). --help and --version are not handled here (the tool prints its own usage). */
int moe_opts_parse(moe_opts_t *o, int c, const char *arg, char *err, size_t errlen);

/* moe_opts_next() result: the caller stops and returns *rc (0 after --help or --version, 2
 * after a usage error, already reported). */
#define MOE_OPT_STOP (-2)

/* getopt_long loop step for a tool (and subcommand `sub`, or NULL): handles the shared options
 * into o, --help (prints `usage` on stdout), --version and bad options (one line plus the
 * "Try ... --help" hint). Returns the code of a tool-specific option, -1 at the end of the
 * options, or MOE_OPT_STOP with *rc set. Call with opterr = 0. */
int moe_opts_next(const char *prog, const char *sub, void (*usage)(FILE *), moe_opts_t *o,
                  int argc, char **argv, const char *shortopts, const struct option *longopts,
                  int *rc);

/* Apply -v/-q to the library's logger. */
void moe_opts_apply_log(const moe_opts_t *o);

/* Print the help lines of the selected groups, GNU layout, two-space indent. */
void moe_opts_usage(FILE *fp, unsigned groups);

/* The MOE_OPT_LAYERS options applied to m, the mapping the input `name` records
 * (moe_layer_map_set). 0, or 1 after a "prog: 'name': reason" message. */
struct moe_layer_map;
int moe_cli_layers(const char *prog, const moe_opts_t *o, const char *name,
                   struct moe_layer_map *m);
/* The same applied to placement p's model layers (moe_placement_set_layers). */
struct moe_placement;
int moe_cli_placement_layers(const char *prog, const moe_opts_t *o, const char *name,
                             struct moe_placement *p);

/* "moe-trace (moeflow) 0.1.0\nlibmoecore 0.1.0\nfeatures: ...\n" */
void moe_print_version(FILE *fp, const char *prog);


/* An option's unsigned value in [min, max] (max <= UINT32_MAX; moe_parse_u64's syntax) for a
 * tool's command line: 0, or 2 (the exit status) after moe_usage_error(prog, sub, ...). */
int moe_cli_u32(const char *prog, const char *sub, const char *arg, uint64_t min, uint64_t max,
                const char *what, uint32_t *out);

/* The same for a 64-bit value in [min, max] (a count, a seed) and for a real number in [min, max]
 * (moe_parse_double's syntax): 0, or 2 after the usage error. */
int moe_cli_u64(const char *prog, const char *sub, const char *arg, uint64_t min, uint64_t max,
                const char *what, uint64_t *out);
int moe_cli_double(const char *prog, const char *sub, const char *arg, double min, double max,
                   const char *what, double *out);

/* --replica-rule=R, which copy of a replicated expert serves a token (moe/acct.h's enum
 * moe_replica_rule), in moe-place eval and fit, moe-costmodel simulate and moe-run: its help
 * lines, the same in every tool, and its parser: 0 with *out set, or 2 (the exit status)
 * after moe_usage_error(prog, sub, ...). */
#define MOE_CLI_REPLICA_RULE_HELP                                                             \
    "      --replica-rule=R   copy of a replicated expert a token uses: nearest (on or\n"      \
    "                         near its home), even (vLLM's EPLB since PR 40810),\n"          \
    "                         positional (vLLM 0.11 to PR 40810) or sglang-static\n"          \
    "                         (SGLang's default) [nearest]\n"
int moe_cli_replica_rule(const char *prog, const char *sub, const char *arg, int *out);
/* --for=T (moe/acct.h's moe_target_t): its help lines, the same in every tool. */
#define MOE_CLI_FOR_HELP                                                                      \
    "      --for=T            the system served with: sglang, vllm or moe-run; sets the\n"    \
    "                         scheme, accounting and replica rule not given (-v says)\n"
/* --accounting=A (moe/acct.h's enum moe_accounting) into *out, setting *set, and --for=T
 * into *out: 0, or 2 after moe_usage_error(prog, sub, ...). */
int moe_cli_accounting(const char *prog, const char *sub, const char *arg, int *out, int *set);
struct moe_target;
int moe_cli_target(const char *prog, const char *sub, const char *arg,
                   const struct moe_target **out);
/* Apply target t (NULL: nothing) to the values whose *_set flag is 0, set the flags, and log
 * at -v what subcommand `sub` models. */
void moe_cli_target_apply(const char *sub, const struct moe_target *t, int *scheme,
                          int *accounting, int *rule, int *scheme_set, int *accounting_set,
                          int *rule_set);

/* --gather-bytes=B|hidden (moe_exflow_gather_parse): 0, or 2 after moe_usage_error. */
int moe_cli_gather_bytes(const char *prog, const char *sub, const char *arg, double *out);

/* Print "prog: message" on stderr after flushing stdout; returns 1, the exit status of a
 * runtime failure, so tools write `return moe_fail(prog, "cannot ...", ...)`. */
int moe_fail(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "prog: message" and "Try 'prog [sub] --help' for more information." on stderr; returns
 * 2, the exit status of a usage error. sub may be NULL. */
int moe_usage_error(const char *prog, const char *sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A tool's text output (moe_textout_open, moe/io.h) with the failure reported: fmt 'z'
 * gzips at `level` (< 0: 6), anything else writes plain text. NULL after "prog: ..." on stderr. */
struct moe_textout *moe_cli_text_open(const char *prog, const char *path, char fmt, int level);
/* Commit (ok) or remove the output. Returns 0, or 1 (the exit status) when !ok or after
 * reporting a failed commit (moe_cli_write_failed's rule). */
int moe_cli_text_close(const char *prog, struct moe_textout *t, const char *path, int ok);
/* The one rule for a failed write of a tool's output `path` (errno says why): a reader that
 * went away (EPIPE: `tool | head`) is no error, the tool stops quietly with status 0, as
 * README promises; anything else prints "prog: write error on 'path': reason" and gives 1.
 * A write deep inside a library operation (a trace sink) calls it too and then fails the
 * operation, so that the operation cleans up what it made (a spool, a temporary output) on
 * its way out: moe_cli_dispatch's status is 0 once a reader went away. */
int moe_cli_write_failed(const char *prog, const char *path);
/* Whether a write of this run found its reader gone (moe_cli_write_failed saw EPIPE). */
int moe_cli_reader_gone(void);
/* End a text output after writing it: werr is the writers' result (0, or nonzero after a
 * failed write with errno set). Commits on success; else removes the output and returns
 * moe_cli_write_failed(). Returns the exit status. */
int moe_cli_text_finish(const char *prog, struct moe_textout *t, const char *path, int werr);

/* A picture output of a tool (--png, --svg, --plot): drawn into memory before any output is
 * opened, written under a temporary name (moe_ofile, moe/io.h) once the tool's other outputs
 * are written, then committed with them or removed. Zero it before use; with path NULL (no
 * picture asked for) every call below does nothing and succeeds. */
struct moe_canvas;
struct moe_ofile;
typedef struct moe_cli_picture {
    const char *path;
    void *data; /* the PNG or SVG document */
    size_t len;
    struct moe_ofile *of; /* written, not yet committed */
} moe_cli_picture_t;
/* Draw canvas c (moe/plot.h) for path as PNG, or as SVG when svg > 0 or (svg < 0) when path ends
 * in ".svg". A NULL c is a drawing that ran out of memory. 0, or 1 after
 * "prog: cannot draw: out of memory". */
int moe_cli_picture_draw(const char *prog, moe_cli_picture_t *p, const char *path,
                         const struct moe_canvas *c, int svg);
/* Write the drawn picture under its temporary name. 0, or 1 after "prog: cannot create ..." or
 * "prog: write error on 'path': reason". */
int moe_cli_picture_write(const char *prog, moe_cli_picture_t *p);
/* Rename the written picture into place. 0, or 1 after "prog: cannot write 'path': reason". */
int moe_cli_picture_commit(const char *prog, moe_cli_picture_t *p);
/* Remove a written picture not committed and free the document. */
void moe_cli_picture_free(moe_cli_picture_t *p);
/* Draw, write and commit c as the picture file path at once (svg as above). 0 or 1. */
int moe_cli_picture_save(const char *prog, const char *path, const struct moe_canvas *c, int svg);

/* One subcommand of a tool: its name, its entry point (argc/argv start at the subcommand's
 * name; returns the exit status) and a one-line summary for the tool's --help. */
typedef struct moe_cli_cmd {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} moe_cli_cmd_t;

/* The start of every tool's main(): argv[0] becomes prog (so @PG lines and messages name the
 * tool, not the path it ran from), the logger takes prog, getopt stays quiet (the tools print
 * their own one-line messages), SIGPIPE is ignored (a closed reader is handled as EPIPE) and
 * temporary outputs are removed on a fatal signal. */
void moe_cli_start(const char *prog, char **argv);
/* main() of a tool made of subcommands: `--help` prints usage(stdout), `--version` the version,
 * a name in cmds[0..n) runs it; anything else is a usage error (status 2). Ends with a checked
 * close of stdout. Returns the exit status. */
int moe_cli_dispatch(const char *prog, int argc, char **argv, const moe_cli_cmd_t *cmds,
                     size_t n, void (*usage)(FILE *));

/* Flush and close stdout, checking for write errors (EPIPE on a closed pipe is not an error for
 * text tools: they exit quietly). Returns 0 or -1 (message printed). */
int moe_close_stdout(const char *prog);

/* Progress meter on stderr: shown if enabled (mode 1) or mode -1 and stderr is a terminal;
 * redrawn at most 5 times a second. total = 0 when unknown. */
typedef struct moe_progress moe_progress_t;
moe_progress_t *moe_progress_new(const char *label, uint64_t total, int mode);
void moe_progress_update(moe_progress_t *p, uint64_t done);
/* moe_progress_update as a library progress callback (ctx: the meter or NULL); a meter made
 * with total 0 takes the callback's total. */
void moe_progress_cb(void *ctx, uint64_t done, uint64_t total);
/* Erase the meter line and free; NULL is a no-op. */
void moe_progress_free(moe_progress_t *p);

/* A file a command reads or writes, for moe_cli_distinct: what names it in messages ("--train",
 * "the input"), its path (NULL: not given) and whether the command writes it. */
typedef struct moe_cli_file {
    const char *what;
    const char *path;
    int output;
} moe_cli_file_t;
/* Usage check for a command with several outputs, before it opens any: no output may be the
 * same file as another output or an input (the same inode when the file exists, else the same
 * path once its directory is resolved; two outputs to "-" share standard output), or the
 * command would overwrite its own data. Returns 0, or 2 (the exit status) after
 * moe_usage_error(prog, sub, "A and B name the same file 'PATH'"). */
int moe_cli_distinct(const char *prog, const char *sub, const moe_cli_file_t *f, size_t n);

/* After moe_acct_inputs(ppath, tpath, ...) failed with status st and message err: where the two
 * files read as each other's kind (given in the wrong order), "prog: 'T' is a routing trace and
 * 'P' a placement: prog sub takes ORDER" (or one of the two halves), else the reader's message
 * err. Returns 1. */
int moe_cli_inputs_failed(const char *prog, const char *sub, const char *order,
                          const char *ppath, const char *tpath, int st, const char *err);

#ifdef __cplusplus
}
#endif
#endif
