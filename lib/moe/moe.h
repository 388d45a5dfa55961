/* moe/moe.h -- libmoecore basics: version, status codes, logging. */
#ifndef MOE_MOE_H
#define MOE_MOE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_VERSION_MAJOR 0
#define MOE_VERSION_MINOR 1
#define MOE_VERSION_PATCH 0
#define MOE_VERSION_STRING "0.1.0"

/* The most ranks (GPUs) a topology, placement or run may have: rank and expert ids are stored in
 * 16 bits in the file formats and the accounting. Every tool and reader checks against this one
 * limit. */
#define MOE_MAX_RANKS 65535u

/* Runtime library version ("X.Y.Z"); compare with MOE_VERSION_STRING to detect a header/library
 * mismatch. */
const char *moe_version(void);

/* Space-separated optional features this library build has ("zlib lpsolve libdeflate mpi ..."). */
const char *moe_features(void);

/* Build the @PG line "@PG\tID:<prog>\tPN:<prog>\tVN:<ver>\tCL:<args>" that records the command
 * line making an output (tabs and newlines in arguments become spaces); malloc'd, NULL on
 * ENOMEM. */
char *moe_pg_line(const char *prog, int argc, char *const *argv);

/* Parse an unsigned integer with optional K/M/G (x1000) or Ki/Mi/Gi (x1024) suffix in
 * [min, max] (no sign, no blanks); returns 0 or -1 (err gets "invalid ..." or "... out of
 * range" text naming `what`). Shared by the tools' options and the library's config readers. */
int moe_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out, const char *what,
                  char *err, size_t errlen);

/* Parse a finite double in [min, max]; returns 0 or -1 with a reason in err. */
int moe_parse_double(const char *s, double min, double max, double *out, const char *what,
                     char *err, size_t errlen);

/* A list of unsigned ids and inclusive ranges, "1-500,612,700-710" (sequence ids, layers). */
typedef struct moe_ranges {
    uint32_t (*r)[2]; /* [first, last] of each item, in the order given */
    size_t n;
} moe_ranges_t;
/* Parse s into l (zeroed by the caller; items are appended): decimal numbers only, no blanks,
 * each value <= max, first <= last. 0, or -1 when s is empty or malformed or out of memory. */
int moe_ranges_parse(moe_ranges_t *l, const char *s, uint32_t max);
/* Is v in one of l's ranges? */
int moe_ranges_has(const moe_ranges_t *l, uint32_t v);
/* Free l's items and empty it. */
void moe_ranges_free(moe_ranges_t *l);
/* A comma-separated list of names, "all" among them for every one, as a set of n <= 32 bits:
 * bit parse(name) for each name (parse returns -1 for an unknown one), empty items skipped,
 * as moe-costmodel simulate's --scheme and --reuse take them. 0, or -1 for an unknown name or
 * an empty set (*bits then undefined). */
int moe_name_set_parse(const char *s, int (*parse)(const char *name), int n, unsigned *bits);

/* Status codes. Library functions return 0 (or a count) on success and one of these negative
 * values on failure; moe_strerror() gives a short lowercase description. Handles that fail keep
 * a more detailed message (file offset, line number, field) retrievable from the handle. */
enum moe_status {
    MOE_OK = 0,
    MOE_ESYS = -1,      /* system call failed; errno holds the cause */
    MOE_ENOMEM = -2,    /* out of memory */
    MOE_EFORMAT = -3,   /* input is not in the expected format */
    MOE_ETRUNC = -4,    /* input ends early (truncated file, missing end-of-file block) */
    MOE_EVERSION = -5,  /* input written by a newer, incompatible format version */
    MOE_ERANGE = -6,    /* a value is outside its allowed range (e.g. expert id >= E) */
    MOE_EINVAL = -7,    /* invalid argument from the caller */
    MOE_ESHAPE = -8,    /* inputs have different shapes (layers, experts, top-k) */
    MOE_ECORRUPT = -9,  /* checksum mismatch or inconsistent internal sizes */
    MOE_EEMPTY = -10,   /* input holds no data at all */
};

/* Short description of a status code, e.g. "truncated input"; never NULL. */
const char *moe_strerror(int status);

/* An expert's feed-forward network (moe-run --expert; the FFN every cost model counts).
 * SwiGLU, as Mixtral's and DeepSeek's experts: y = (silu(x Wg) * (x Wu)) Wd, three H x F
 * matrices; SiLU: y = silu(x W1) W2, two. silu(z) = z / (1 + exp(-z)). */
enum moe_expert {
    MOE_EXPERT_SWIGLU = 0, /* the default */
    MOE_EXPERT_SILU = 1,
};

/* "swiglu" or "silu"; "?" for an unknown kind. */
const char *moe_expert_name(int expert);
/* Parse "swiglu" or "silu" (as --expert takes it). Returns the kind or MOE_EINVAL. */
int moe_expert_parse(const char *s);
/* Weight matrices of H x F elements in one expert: 3 (SwiGLU) or 2 (SiLU); 0 for an unknown
 * kind. One expert copy holds moe_expert_mats * H * F elements. */
unsigned moe_expert_mats(int expert);

/* Log levels: messages at or above the current level are passed to the log sink. */
enum moe_log_level {
    MOE_LOG_DEBUG = 0,
    MOE_LOG_INFO = 1,
    MOE_LOG_WARN = 2,  /* default */
    MOE_LOG_ERROR = 3,
    MOE_LOG_OFF = 4,
};

/* Set the minimum level logged (default MOE_LOG_WARN). Tools map -v/-q onto this. */
void moe_log_set_level(int level);
int moe_log_get_level(void);

/* Set the program name used as prefix of log lines ("moe-trace: warning: ..."). The string is
 * not copied and must outlive the program. */
void moe_log_set_prog(const char *prog);

/* Log a diagnostic to stderr if level >= the current level. The library's only output channel:
 * it never writes to stdout and never exits. */
void moe_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
