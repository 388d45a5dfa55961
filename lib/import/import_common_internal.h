/* import/import_common_internal.h -- importer state and the helpers the router-log readers share
 * (import_common.c). Below the dispatcher and the readers; calls back into neither. */
#ifndef MOE_IMPORT_COMMON_INTERNAL_H
#define MOE_IMPORT_COMMON_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "moe/import.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/trace.h"

/* Bytes read from the start of an input to detect its format (and the gzip-inflated view of
 * them). Large enough for the longest comment block and first record of the known logs. */
#define IMP_PEEK_BYTES (64u * 1024u)

/* A binary byte stream over a file: the bytes already read for detection, then the rest of
 * the descriptor, inflated when the input is gzip (any number of members). Used by .npy. */
typedef struct imp_src imp_src_t;

/* Per-format entry points, set by the format's open function. */
typedef struct imp_ops {
    int (*next)(moe_importer_t *im, moe_trace_rec_t *r); /* 1 token, 0 end, < 0 error */
    void (*free)(moe_importer_t *im);                     /* release im->state */
} imp_ops_t;

struct moe_importer {
    moe_import_opts_t opts; /* copy; the meta/weights strings belong to the caller */
    int fmt;                /* enum moe_import_fmt, never AUTO after open */
    char *path;
    uint32_t seq_base;
    moe_trace_hdr_t hdr;    /* shape found so far; hdr.text unused (see text below) */
    char *text;             /* '@CO' lines gathered while opening */
    size_t text_len, text_cap;
    moe_import_report_t rep;
    uint64_t next_token;    /* token id of the next record written */
    int status;             /* sticky: once a call fails, later calls fail the same way */
    int done;               /* the format reported its end */
    char err[512];
    uint8_t *prefix;        /* raw bytes read for detection (kept alive for the line reader) */
    moe_lines_t *lines;     /* text formats */
    imp_src_t *src;         /* binary formats */
    const imp_ops_t *ops;
    void *state;            /* format's own state */
};

/* Record a failure: the one-line reason into im->err as "'PATH': reason", PATH the input's
 * name ('-' for standard input); returns status. This is the one place an import message is
 * given its file's name: readers write the reason alone, and no caller adds the name again. */
int imp_fail(moe_importer_t *im, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* imp_fail for the failures whose message names the file in its own words ("cannot open
 * 'PATH': ..."), left as they are. */
int imp_fail_file(moe_importer_t *im, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fail with "PREFIX: expert id V out of range (...)" (MOE_ERANGE). */
int imp_fail_id(moe_importer_t *im, const char *prefix, uint64_t v);
/* Fail for an error of the line reader (or of a format-level read). */
int imp_fail_read(moe_importer_t *im, const char *what, int status);
/* Append "@CO\t<text>\n" to the header lines (control characters become spaces). */
int imp_comment(moe_importer_t *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The @CO lines "PREFIX: layers a..b are model layers LIST" that map a trace's layers to the
 * model's: imp_layers_add appends trace layers i..j as one item of LIST ("5", "3-7",
 * "mtp0.1"), starting a new line first when the list would pass about 800 characters;
 * imp_layers_end writes the last line, up to trace layer `last` (" of N" after it when
 * model_layers is set). 0 or a negative status. */
typedef struct imp_layers {
    moe_importer_t *im;
    const char *prefix;
    char list[800];
    size_t len;
    uint32_t first;
    uint32_t model_layers; /* > 0: " of N" ends the last line (the model's layer count) */
} imp_layers_t;
int imp_layers_add(imp_layers_t *w, uint32_t i, const char *item);
int imp_layers_end(imp_layers_t *w, uint32_t last);

/* A physical map (--physical-map): per row (layer), the logical expert of each physical slot,
 * for ids recorded after EPLB's logical-to-physical step (SGLang's and vLLM's routed experts
 * with redundant experts). */
typedef struct imp_pmap {
    uint32_t rows, cols;
    int32_t *id; /* [rows][cols], each 0 <= id < MOE_TRACE_MAX_EXPERTS */
} imp_pmap_t;

/* The logical expert of physical slot v in row `row`: 0, or -1 when v is past the slots. */
static inline int imp_pmap_id(const imp_pmap_t *m, uint32_t row, int64_t v, int64_t *out)
{
    if (v < 0 || v >= (int64_t)m->cols)
        return -1;
    *out = m->id[(size_t)row * m->cols + (size_t)v];
    return 0;
}

/* Largest expert id + 1 accepted: opts.experts when given, else what the trace can store. */
uint32_t imp_id_limit(const moe_importer_t *im);
/* Size r for the header shape (experts may still be unknown). Returns 0 or MOE_ENOMEM. */
int imp_rec_size(moe_importer_t *im, moe_trace_rec_t *r);
/* Account for a parsed token with `missing` absent cells: 1 = write it (counted, token id
 * assigned), 0 = drop it (--drop-incomplete). */
int imp_keep(moe_importer_t *im, moe_trace_rec_t *r, uint32_t missing);
/* Fill cell `layer` of r as missing (all ids MOE_EXPERT_NONE, weights 0). */
void imp_set_missing(moe_trace_rec_t *r, uint32_t layer, uint32_t topk, int weights);

/* One cell of K raw ids v[] into ids[0..keff): -1 entries are padding (SGLang pads its (layers,
 * tokens, k) buffers with -1) and are stripped, the rest must be 0 <= id < limit. Returns 0 when
 * the cell holds keff ids (*max_id raised), 1 when it holds fewer (a trace cell holds k ids or
 * none, so it is missing: the caller marks it), or -1 for an id below -1 and -2 for an id past
 * the limit, with the id in *bad (the caller words the error). */
int imp_cell_ids(const int64_t *v, uint32_t K, uint32_t keff, uint32_t limit, uint16_t *ids,
                 uint32_t *max_id, int64_t *bad);
/* Fail for imp_cell_ids's -1 or -2 ("WHERE: ..."). */
int imp_fail_cell(moe_importer_t *im, const char *where, int code, int64_t bad);

/* Last run of digits in the base name of path ("raw/prompt_12_data.csv" -> 12), else dflt. */
uint32_t imp_seq_from_path(const char *path, uint32_t dflt);

/* Sequence names -> numeric ids: a whole number is itself, else the number after the last
 * non-digit ("humaneval/0" -> 0), else the index of the name among distinct names seen. */
typedef struct imp_names {
    char **names;
    size_t n, cap;
    size_t last; /* index of the last hit: names repeat row after row */
} imp_names_t;
int imp_names_seq(imp_names_t *nm, const char *s, size_t len, uint32_t *seq);
void imp_names_free(imp_names_t *nm);

/* Keys of buffered tokens and a hash map from keys to dense indices (insertion order). */
typedef struct imp_key {
    uint64_t k[4];
} imp_key_t;
typedef struct imp_map {
    imp_key_t *keys;
    size_t n, cap;
    uint32_t *tab; /* open addressing: index + 1, 0 = empty */
    size_t tabcap;
} imp_map_t;
/* Index of key, adding it when absent and add != 0; -1 when absent, MOE_ENOMEM. */
long imp_map_get(imp_map_t *m, const imp_key_t *key, int add);
void imp_map_clear(imp_map_t *m);
void imp_map_free(imp_map_t *m);

/* A buffered set of tokens (one sequence, file or step) filled cell by cell in any order and
 * emitted in key order: tokens x layers x topk ids (+ weights) and which cells were seen. */
typedef struct imp_grid {
    uint32_t layers, topk;
    int weights;
    imp_map_t map; /* token key -> slot */
    size_t cap;    /* slots allocated */
    uint16_t *ids;
    float *w;
    uint8_t *have; /* slots x layers */
    uint32_t *order;
    size_t next;   /* emission cursor into order */
} imp_grid_t;
void imp_grid_init(imp_grid_t *g, uint32_t layers, uint32_t topk, int weights);
/* Forget the tokens, keep the allocations. */
void imp_grid_clear(imp_grid_t *g);
void imp_grid_free(imp_grid_t *g);
/* Store a cell of the token with this key. ids/w hold topk values (w may be NULL: zeros);
 * ids NULL only makes sure the token exists (a cell known to be missing). Returns 0, 1 if the
 * cell was already stored (duplicate; nothing changed), or MOE_ENOMEM. */
int imp_grid_put(imp_grid_t *g, const imp_key_t *key, uint32_t layer, const uint16_t *ids,
                 const float *w);
/* Sort the tokens by key for emission. Returns 0 or MOE_ENOMEM. */
int imp_grid_sort(imp_grid_t *g);
/* Move the next kept token into r (ids, weights) and return 1 with *key set; 0 when none is
 * left. Tokens with missing cells are counted, and dropped per opts. */
int imp_grid_next(moe_importer_t *im, imp_grid_t *g, moe_trace_rec_t *r, const imp_key_t **key);

/* Whether the bytes start a gzip member. */
int imp_is_gzip(const uint8_t *b, size_t n);
/* Byte source over (prefix, fd); gzip detected from the prefix. Takes fd; not the prefix. */
imp_src_t *imp_src_new(int fd, const uint8_t *prefix, size_t n);
/* Read exactly n bytes unless the input ends: returns bytes read (< n only at the end), or a
 * negative status. */
ptrdiff_t imp_src_read(imp_src_t *s, void *buf, size_t n);
/* Read up to max bytes (to the end of the input) into a new buffer *out of *n bytes, grown as
 * the bytes arrive, so a size a file states never allocates more than the file holds. Returns
 * 0 or a negative status (*out freed). */
int imp_src_slurp(imp_src_t *s, size_t max, uint8_t **out, size_t *n);
/* Uncompressed bytes delivered so far. */
uint64_t imp_src_bytes(const imp_src_t *s);
/* The descriptor when the input is a regular uncompressed file, for positioned reads, with
 * its size in *size; -1 otherwise (a pipe, gzip). */
int imp_src_file(const imp_src_t *s, uint64_t *size);
void imp_src_free(imp_src_t *s);

#endif
