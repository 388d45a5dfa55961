/* moe/trace.h -- routing traces: header, records, streaming reader and writer. */
#ifndef MOE_TRACE_H
#define MOE_TRACE_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A routing trace records, for each token of a real or synthetic run, the K experts its router
 * chose in each of the L MoE layers (and optionally the gate weights). Binary traces are
 * block-gzip files (moe/bgz.h) whose payload is: the header (magic "MOEF", kind 'T', major and
 * minor version, shape, flags, '@' text lines), then one length-prefixed record per token, each
 * block holding whole records. The text view is tab-separated with the same '@' header lines.
 * The layout is specified in moe-trace(5).
 */
#define MOE_TRACE_MAJOR 1
#define MOE_TRACE_MINOR 0
#define MOE_EXPERT_NONE 0xFFFFu     /* id of a missing (layer, token) cell */
#define MOE_TRACE_MAX_EXPERTS 65535u /* ids are 0 .. 65534 */
#define MOE_TRACE_MAX_LAYERS 4096u
#define MOE_TRACE_MAX_TOPK 256u

/* Header flags. Bits 0-15 change how records are read: a reader rejects a trace with one it
 * does not know. Bits 16-31 are advisory: a newer minor version may set them, readers ignore
 * the ones they do not know. */
enum moe_trace_flag {
    MOE_TRACE_WEIGHTS = 1u << 0, /* records carry one float32 gate weight per expert id */
    MOE_TRACE_REQUIRED_FLAGS = 0xffffu,
};

/* Formats of a trace stream, also the letters of -O. */
enum moe_trace_fmt {
    MOE_FMT_BINARY = 'b', /* block-gzip binary, compressed */
    MOE_FMT_UNCOMP = 'u', /* block-gzip binary, stored blocks (fast, for pipes) */
    MOE_FMT_TEXT = 't',   /* text view */
    MOE_FMT_TEXTGZ = 'z', /* gzipped text view */
};

/* Trace header: the model shape and provenance. */
typedef struct moe_trace_hdr {
    uint32_t layers;     /* MoE layers L (>= 1) */
    uint32_t experts;    /* experts per layer E (1 .. MOE_TRACE_MAX_EXPERTS) */
    uint32_t topk;       /* experts chosen per token per layer K (1 .. min(E, 256)) */
    uint32_t hidden;     /* hidden size H, 0 if unknown */
    uint32_t elem_bytes; /* bytes per hidden-state element, 0 if unknown */
    uint32_t ranks;      /* data-parallel source ranks recorded, 0 if unknown */
    uint32_t flags;      /* enum moe_trace_flag bits */
    char *text;          /* '@' lines (each '\n'-terminated), NUL-terminated; NULL = none */
} moe_trace_hdr_t;

/* One token. `ids` holds layers*topk expert ids, layer-major; a missing cell has all K ids equal
 * to MOE_EXPERT_NONE (and weights 0). `weights` is non-NULL iff the header has the flag. */
typedef struct moe_trace_rec {
    uint64_t token; /* token id, unique within the trace by convention */
    uint32_t seq;   /* sequence (prompt, sample) id */
    uint32_t pos;   /* position within the sequence */
    uint32_t step;  /* iteration / training step at which it was recorded */
    uint32_t rank;  /* data-parallel rank owning the token */
    uint16_t *ids;
    float *weights;
    uint32_t cap;   /* allocated ids/weights entries (internal bookkeeping) */
} moe_trace_rec_t;

typedef struct moe_trace moe_trace_t;

/* Zero a header. */
void moe_trace_hdr_init(moe_trace_hdr_t *h);
/* Free a header's text and zero it. */
void moe_trace_hdr_release(moe_trace_hdr_t *h);
/* Deep copy; returns 0 or MOE_ENOMEM. */
int moe_trace_hdr_copy(moe_trace_hdr_t *dst, const moe_trace_hdr_t *src);
/* Validate shape and text (each text line starts with '@', no NUL); 0 or MOE_ERANGE/EFORMAT. */
int moe_trace_hdr_check(const moe_trace_hdr_t *h);
/* Append one text line (without '\n'; it must start with '@'). Returns 0 or MOE_ENOMEM. */
int moe_trace_hdr_add_line(moe_trace_hdr_t *h, const char *line);
/* Append the @PG line recording a command line (moe_pg_line). Returns 0 or MOE_ENOMEM. */
int moe_trace_hdr_add_pg(moe_trace_hdr_t *h, const char *prog, int argc, char *const *argv);
/* Do the two headers describe the same shape (L, E, K, weights flag)? */
int moe_trace_hdr_same_shape(const moe_trace_hdr_t *a, const moe_trace_hdr_t *b);

/* Size a record's arrays for a header (reallocating as needed). Returns 0 or MOE_ENOMEM. */
int moe_trace_rec_init(moe_trace_rec_t *r, const moe_trace_hdr_t *h);
/* Free a record's arrays; the struct may be reused after moe_trace_rec_init. */
void moe_trace_rec_release(moe_trace_rec_t *r);
/* Validate ids against the header: each cell complete (ids < E) or wholly missing. Returns 0 or
 * MOE_ERANGE/MOE_EFORMAT and, when msg is non-NULL, writes a one-line reason to msg[0..n). */
int moe_trace_rec_check(const moe_trace_rec_t *r, const moe_trace_hdr_t *h, char *msg, size_t n);

/*
 * Open a trace. path "-" is stdin/stdout. mode:
 *   "r"      read; the format (binary, text, gzipped text) is detected from content.
 *   "wb[0-9]" binary, compressed at the given level (default 6); "wu" binary, stored blocks;
 *   "wt"     text view; "wz[0-9]" gzipped text.
 * Files opened for writing are written under a temporary name in the same directory and renamed
 * into place by a successful moe_trace_close; moe_trace_abort (or a failed close) removes them.
 * threads: additional worker threads for block (de)compression (0 = none).
 * Returns NULL on failure with *status set and, if errbuf is non-NULL, a one-line reason.
 */
moe_trace_t *moe_trace_open(const char *path, const char *mode, int threads, int *status,
                            char *errbuf, size_t errlen);

/* Read the header (call once, first). Returns 0 or a negative status. */
int moe_trace_read_header(moe_trace_t *t, moe_trace_hdr_t *h);
/* Read the next record into r (sized automatically). Returns 1, 0 at end, or a negative status;
 * ids are validated against the header. */
int moe_trace_read(moe_trace_t *t, moe_trace_rec_t *r);
/* Write the header (call once, first); validated with moe_trace_hdr_check. */
int moe_trace_write_header(moe_trace_t *t, const moe_trace_hdr_t *h);
/* Write one record; validated with moe_trace_rec_check. Returns 0 or a negative status. */
int moe_trace_write(moe_trace_t *t, const moe_trace_rec_t *r);
/* Close and free. Writers flush, write the end-of-file block and commit the file; returns 0 or
 * the first error seen (then the output is removed) with its one-line reason copied to errbuf
 * when non-NULL. NULL is a no-op. */
int moe_trace_close(moe_trace_t *t, char *errbuf, size_t errlen);
/* Close a writer discarding its output (temporary file removed). NULL is a no-op. */
void moe_trace_abort(moe_trace_t *t);
/* One-line reason of the last failure, naming the file (doc/ARCHITECTURE, "Messages"), e.g.
 * "'t.moet': record 12: layer 3: expert id 70 out of range (64 experts)". */
const char *moe_trace_errmsg(const moe_trace_t *t);
/* Format of the open stream (enum moe_trace_fmt). */
int moe_trace_format(const moe_trace_t *t);
/* Records read or written so far. */
uint64_t moe_trace_count(const moe_trace_t *t);
/* Compressed input bytes consumed so far (for progress), 0 if unknown. */
uint64_t moe_trace_tell(const moe_trace_t *t);
/* Size of the input file in bytes, 0 if unknown (pipe). */
uint64_t moe_trace_size(const moe_trace_t *t);

/* ------------------------------------------------------------------ model layers */

/*
 * Which layers of the model a trace's MoE layers are. DeepSeek-V2-Lite has 27 layers, the
 * first dense: its 26 MoE layers are model layers 1..26. SGLang indexes its expert maps and
 * loads by model layer (num_hidden_layers rows, dense ones included: FusedMoE.weight_loader
 * asks logical_to_all_physical(self.layer_id, ...)), so a placement handed to it must say where
 * each of its layers goes. Traces record the mapping in @CO lines (the Megatron, SGLang and
 * dense-array importers write them, moe-trace import --model-layers/--first-moe-layer adds
 * one); placements in their @PL line (moe-place(5)).
 */
#define MOE_LAYER_MAP_MAX (1u << 20) /* model layer ids and counts stay below this */

typedef struct moe_layer_map {
    uint32_t layers;       /* MoE layers L */
    uint32_t model_layers; /* the model's layers, dense ones included; 0: unknown */
    uint32_t *id;          /* [L] model layer of each MoE layer, strictly ascending; NULL:
                            * unknown (MoE layer i taken as model layer i) */
} moe_layer_map_t;

/* An unknown mapping of `layers` MoE layers. */
void moe_layer_map_init(moe_layer_map_t *m, uint32_t layers);
/* Free the ids (the mapping becomes unknown). */
void moe_layer_map_release(moe_layer_map_t *m);
/* Deep copy; 0 or MOE_ENOMEM. */
int moe_layer_map_copy(moe_layer_map_t *dst, const moe_layer_map_t *src);
/* Ids ascending and below the model's layer count; a known count other than L needs the ids.
 * 0 or a negative status with a one-line reason. */
int moe_layer_map_check(const moe_layer_map_t *m, char *err, size_t errlen);
/* Model layer of MoE layer i (i itself when unknown). */
uint32_t moe_layer_map_model(const moe_layer_map_t *m, uint32_t layer);
/* Whether MoE layer i is model layer i for every i and no dense layer follows (all that a
 * mapping can say is "no dense layers"). */
int moe_layer_map_identity(const moe_layer_map_t *m);
/* The mapping of a header's text (the @CO lines above) for `layers` MoE layers: unknown when
 * the text records none; MOE_EFORMAT with a reason when its lines do not map every layer to one
 * decoder layer (MTP layers, a cut list) or disagree. */
int moe_layer_map_read(const char *text, uint32_t layers, moe_layer_map_t *m, char *err,
                       size_t errlen);
/* Apply the options: model_layers (0: not given), first (-1: not given: MoE layers first,
 * first + 1, ...) or list (NULL: not given; "1-3,5": the model layers of the MoE layers, as many
 * as there are). What m already records must agree. 0 or MOE_EINVAL/ERANGE with a reason. */
int moe_layer_map_set(moe_layer_map_t *m, uint32_t model_layers, int64_t first, const char *list,
                      char *err, size_t errlen);
/* The model layers as a list of ids and ranges ("1-26"), malloc'd; NULL when out of memory. */
char *moe_layer_map_list(const moe_layer_map_t *m);
/* Append "@CO\tmodel-layers: layers A..B are model layers LIST[ of N]" lines to h (none for an
 * unknown mapping). 0 or MOE_ENOMEM. */
int moe_layer_map_comment(const moe_layer_map_t *m, moe_trace_hdr_t *h);
/* The header of layers first .. first + count - 1 of a trace of header `in` (moe-trace slice):
 * a copy of `in` with that layer count and, when `in` records its model layers, model-layers
 * lines saying which those layers are. 0 or MOE_ENOMEM (out released). */
int moe_layer_map_slice(const moe_trace_hdr_t *in, uint32_t first, uint32_t count,
                        moe_trace_hdr_t *out);

/* Write the text form of a header (the @MT line and text lines) to fp; 0 or MOE_ESYS. */
int moe_trace_hdr_print(FILE *fp, const moe_trace_hdr_t *h);
/* Write the text form of one record (one line) to fp; 0 or MOE_ESYS. */
int moe_trace_rec_print(FILE *fp, const moe_trace_hdr_t *h, const moe_trace_rec_t *r);

/* ------------------------------------------------------------------ operations over records */

/* Where a trace operation (copy, sample, import) writes its result: `begin` takes the output's
 * header once, before any record, and `put` each record in order. Each returns 0 or a negative
 * status; a failure stops the operation, which returns that status and leaves errbuf as it was
 * (the sink reports its own failures). */
typedef struct moe_trace_sink {
    int (*begin)(void *ctx, const moe_trace_hdr_t *h);
    int (*put)(void *ctx, const moe_trace_rec_t *r);
    void *ctx;
} moe_trace_sink_t;

/* A record filter of moe_trace_copy: nonzero keeps r, which it may rewrite in place (in the
 * shape of the output's header). */
typedef int (*moe_trace_keep_fn)(void *ctx, const moe_trace_hdr_t *h, moe_trace_rec_t *r);

/* Copy the records of `in` (header h read) to out->put until the end of `in` or until `limit`
 * were written, those `keep` keeps (NULL: all). out->begin is not called: the caller begins the
 * output, so that several inputs can go to one. `progress` (optional) is called every 4096
 * records written with the input bytes consumed and the file's size (records read and 0 when
 * the size is unknown). 0, a negative status with the input's one-line reason in errbuf, or
 * the sink's status. */
int moe_trace_copy(moe_trace_t *in, const moe_trace_hdr_t *h, moe_trace_keep_fn keep,
                   void *keep_ctx, uint64_t limit, const moe_trace_sink_t *out,
                   void (*progress)(void *arg, uint64_t done, uint64_t total), void *arg,
                   char *errbuf, size_t errlen);

struct moe_ranges;
/* moe-trace split: the records of in (header h read) into two outputs, both begun with h (train
 * first). A record goes to train when its sequence is in ids (moe/moe.h), or, when ids is NULL
 * or empty, when moe_hash_keep(seed, sequence, ratio) keeps it (moe/rng.h); else to test. 0, a
 * negative status with the input's one-line reason in errbuf, or a sink's status. */
int moe_trace_split(moe_trace_t *in, const moe_trace_hdr_t *h, const struct moe_ranges *ids,
                    uint64_t seed, double ratio, const moe_trace_sink_t *train,
                    const moe_trace_sink_t *test, char *errbuf, size_t errlen);

/* ------------------------------------------------------------------ stats (moe-trace stats) */

/* Counts of a trace's records: tokens, distinct sequences, steps and source ranks (memory grows
 * with the distinct values, not the tokens), missing cells, and each layer's expert load. */
typedef struct moe_trace_stats moe_trace_stats_t;
struct moe_textout;
/* Empty counts for traces of header h's shape; NULL when out of memory. */
moe_trace_stats_t *moe_trace_stats_new(const moe_trace_hdr_t *h);
/* Count one record (of the shape given to moe_trace_stats_new); 0 or MOE_ENOMEM. */
int moe_trace_stats_add(moe_trace_stats_t *s, const moe_trace_rec_t *r);
struct moe_trace_map;
/* Count every record of the trace map m into s (of m's header's shape) on all of m's workers:
 * each counts its blocks into counts of its own, merged into s at the end, so s is the same as
 * with moe_trace_stats_add over the records in order. `progress` (optional) is called as in
 * moe_trace_map_ops_t. Returns 0, or moe_trace_map_run's failure (reason in
 * moe_trace_map_errmsg(m)). */
int moe_trace_stats_scan(moe_trace_stats_t *s, struct moe_trace_map *m,
                         void (*progress)(void *arg, uint64_t done, uint64_t total), void *arg);
/* The report into the text sink t (moe/io.h): the counts as "name value" lines, one line per
 * layer with its load's min, max, mean, max/mean, coefficient of variation and hottest expert,
 * and with `loads` every expert's load per layer. 0 or the sink's first error. */
int moe_trace_stats_write(const moe_trace_stats_t *s, int loads, struct moe_textout *t);
/* The forms moe_trace_stats_write_as writes. */
enum moe_stats_form {
    MOE_STATS_TEXT = 0,   /* moe_trace_stats_write's report */
    MOE_STATS_JSON = 1,   /* the same figures as one JSON object (moe-trace(1), --json) */
    MOE_STATS_SGLANG = 2, /* SGLang's {"logical_count": [steps][layers][experts]} for its
                           * --init-expert-location: one step holding the whole trace's
                           * tokens routed to each (layer, expert), top-k picks each counted,
                           * missing cells not */
};
/* The report in one of those forms (`loads` adds the per-expert loads to TEXT and JSON). 0, the
 * sink's first error, or MOE_EINVAL for an unknown form. */
int moe_trace_stats_write_as(const moe_trace_stats_t *s, int form, int loads,
                             struct moe_textout *t);
/* SGLang's logical_count indexed, as SGLang indexes it, by model layer: a row per model layer
 * of the trace of header h (its @CO lines, moe_layer_map_read, with the options model_layers,
 * first and list of moe_layer_map_set applied), the rows of layers the trace does not hold
 * (dense ones) zero, as its own recorder leaves them (_LayerBasedCpuSinglePassGatherer.
 * _collect_objects, expert_distribution.py); the trace's layers when it records none. Nothing
 * written and MOE_EINVAL with a reason in err for a mapping that cannot be read or completed
 * (the model layers known, not how many the model has); else 0 or the sink's first error. */
int moe_trace_stats_write_sglang(const moe_trace_stats_t *s, const moe_trace_hdr_t *h,
                                 uint32_t model_layers, int64_t first, const char *list,
                                 struct moe_textout *t, char *err, size_t errlen);
/* Number of distinct sequence ids counted. */
size_t moe_trace_stats_sequences(const moe_trace_stats_t *s);
/* The distinct sequence ids, in no particular order, into ids (room for
 * moe_trace_stats_sequences); returns their number. */
size_t moe_trace_stats_seq_ids(const moe_trace_stats_t *s, uint32_t *ids);
/* Free s; NULL is a no-op. */
void moe_trace_stats_free(moe_trace_stats_t *s);
/* vLLM's EPLB load window of the trace in (opened for reading, header not read yet): the
 * tokens routed to each (layer, expert) per window of `window` tokens in trace order (0: one
 * window of all tokens; top-k picks each counted, missing cells not), written to fn as a
 * safetensors file holding one I64 tensor "expert_load_window" [windows, layers, experts]
 * (no redundant experts: slot e is expert e). 0, or a negative status with a one-line reason
 * in errbuf; a failure of fn returns its status and leaves errbuf as it was. */
int moe_trace_load_window(moe_trace_t *in, uint64_t window,
                          int (*fn)(void *ctx, const void *buf, size_t len), void *ctx,
                          char *errbuf, size_t errlen);

/* ------------------------------------------------------------------ exact-size samples */

/* A uniform sample of exactly n records of a stream, seeded (reservoir sampling, algorithm R):
 * memory grows with min(n, records offered), so n far above the trace's length is harmless. */
typedef struct moe_trace_reservoir moe_trace_reservoir_t;
/* An empty reservoir of n slots; NULL when out of memory. */
moe_trace_reservoir_t *moe_trace_reservoir_new(uint64_t n, uint64_t seed);
/* Offer the next record. When it is kept its buffers move into the reservoir and *r takes those
 * of the record it replaces (empty ones at first), so the caller reads into *r again without
 * copying ids. 0 or MOE_ENOMEM. */
int moe_trace_reservoir_add(moe_trace_reservoir_t *s, moe_trace_rec_t *r);
/* Records offered so far. */
uint64_t moe_trace_reservoir_seen(const moe_trace_reservoir_t *s);
/* The kept records, min(n, offered) of them, sorted into input order; *out points into s and
 * stays valid until the next call on s. Returns their number. */
size_t moe_trace_reservoir_sorted(moe_trace_reservoir_t *s, const moe_trace_rec_t **out);
/* Free s and the records it holds; NULL is a no-op. */
void moe_trace_reservoir_free(moe_trace_reservoir_t *s);

/* The cut that keeps exactly min(n, sequences) of the sequences counted in s: sequence q is kept
 * when n > 0 and moe_hash64(seed, q) <= *cut (moe/rng.h). 0 or MOE_ENOMEM. */
int moe_trace_stats_seq_cut(const moe_trace_stats_t *s, uint64_t n, uint64_t seed, uint64_t *cut);

/* moe-trace sample -n N: a uniform seeded sample of exactly min(n, records) records of `in`
 * (header h read), the reservoir above, written to out (header h) in input order once all of
 * `in` is read. 0, a negative status with a one-line reason in errbuf, or the sink's status. */
int moe_trace_sample_tokens(moe_trace_t *in, const moe_trace_hdr_t *h, uint64_t n,
                            uint64_t seed, const moe_trace_sink_t *out, char *errbuf,
                            size_t errlen);
/* moe-trace sample -n N --by-sequence: exactly min(n, sequences) whole sequences, those with
 * the smallest seeded hash (moe_trace_stats_seq_cut). Two passes: `in` (header h read) is
 * counted, then the file `path` it was opened from (not standard input) is opened again with
 * `threads` and its kept records written to out with its header. 0, a negative status with a
 * one-line reason in errbuf, or the sink's status. */
int moe_trace_sample_seqs(moe_trace_t *in, const moe_trace_hdr_t *h, const char *path,
                          int threads, uint64_t n, uint64_t seed, const moe_trace_sink_t *out,
                          char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
