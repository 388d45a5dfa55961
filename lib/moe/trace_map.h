/* moe/trace_map.h -- parallel map over the records of a routing trace, block by block. */
#ifndef MOE_TRACE_MAP_H
#define MOE_TRACE_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "moe/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * moe_trace_read hands out one record at a time on one thread: block inflation can run on
 * worker threads, but whatever the caller does with the records is serial. A trace map runs
 * the caller's work on the workers too. Each worker takes the next compressed block of a
 * binary trace (file reading is the only serialised step), inflates it with its own
 * decompressor, decodes and validates its records exactly as moe_trace_read does, and passes
 * them as one batch to the caller's `batch` callback, which accumulates into per-worker state
 * that the caller merges at the end. Batches reach `batch` in any order, so that callback suits
 * order-independent statistics (counts, sums, maxima).
 *
 * Work that needs file order goes into the optional `ordered` callback: it sees every batch in
 * file order, one call at a time, after `batch` has returned for it, together with the index of
 * the batch's first record in the trace. Keep it short (it is the serial part of the pipeline);
 * `batch` can leave per-record results for it in the batch's scratch area.
 *
 * Inputs the map cannot split into blocks -- text views, standard input, pipes -- are read with
 * moe_trace_read on the calling thread (its block inflation still uses the threads) and cut into
 * batches of up to 4096 records; callers see the same callbacks, so results cannot depend on the
 * input format. Memory is bounded by the number of workers and the block size, never by the
 * number of records.
 */

/* A batch of consecutive records of the trace, decoded into arrays (structure of arrays). The
 * arrays are owned by the map and valid until the callback returns (`ordered` included). */
typedef struct moe_trace_batch {
    uint64_t index;            /* position of the batch in the file: 0, 1, 2, ... */
    uint64_t first;            /* record number (0-based) of the first record; only known in
                                * `ordered` (UINT64_MAX in `batch`) */
    size_t n;                  /* records in the batch, >= 1 */
    const uint64_t *token;     /* n token ids */
    const uint32_t *seq, *pos, *step, *rank; /* n values each */
    const uint16_t *ids;       /* n * L * K expert ids, record-major then layer-major, as in
                                * moe_trace_rec_t; a missing cell holds MOE_EXPERT_NONE */
    const float *weights;      /* n * L * K gate weights, or NULL without the weights flag */
    /* With moe_trace_map_ops_t.raw_ids: the ids as stored, record r's at raw + r * raw_stride,
     * raw_width bytes each (1: 0xff marks a missing cell; 2: little endian, 0xffff), already
     * validated; `ids` is then NULL. Valid in `batch` only. NULL when the map had to decode
     * (records of unequal length, the sequential reader): use `ids`. */
    const uint8_t *raw;
    size_t raw_stride;
    unsigned raw_width;
    uint8_t *scratch;          /* n * moe_trace_map_ops_t.scratch bytes for the caller, passed
                                * from `batch` to `ordered` untouched; NULL if scratch is 0 */
    uint64_t user;             /* a word for the caller, likewise passed on (0 in `batch`) */
} moe_trace_batch_t;

/* The caller's work. `arg` is moe_trace_map_run's; `worker` is in [0, moe_trace_map_workers()),
 * and one worker never runs two callbacks at once, so per-worker state needs no locking.
 * Callbacks return 0, or a negative status that stops the run (moe_trace_map_run returns it;
 * a message set with moe_trace_map_fail is reported, else moe_strerror's). */
typedef struct moe_trace_map_ops {
    /* Every batch, in any order, on all workers at once. Required. */
    int (*batch)(void *arg, int worker, moe_trace_batch_t *b);
    /* Every batch in file order, one call at a time, then once more with b == NULL at the end of
     * the input. Optional. */
    int (*ordered)(void *arg, int worker, moe_trace_batch_t *b);
    /* Once on each worker after the last `ordered` call, all workers at once: for final work
     * that should run in parallel too. Optional. */
    int (*finish)(void *arg, int worker);
    /* Called now and then on worker 0 with the compressed bytes consumed so far and the input
     * size (0 if unknown), for a progress meter. Optional. */
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    size_t scratch;            /* scratch bytes per record (see moe_trace_batch_t) */
    int raw_ids;               /* the callbacks read `raw` when it is set: the map then skips
                                * widening the ids to 16 bits */
    unsigned fields;           /* which of token, seq, pos, step, rank the callbacks read
                                * (MOE_MAP_* bits); the others are left unset. 0: all */
} moe_trace_map_ops_t;

/* Bits of moe_trace_map_ops_t.fields. */
enum moe_trace_map_field {
    MOE_MAP_TOKEN = 1u << 0,
    MOE_MAP_SEQ = 1u << 1,
    MOE_MAP_POS = 1u << 2,
    MOE_MAP_STEP = 1u << 3,
    MOE_MAP_RANK = 1u << 4,
    MOE_MAP_NO_FIELDS = 1u << 5, /* none of them */
};

typedef struct moe_trace_map moe_trace_map_t;

/* Open a trace (path, or "-" for standard input) and read its header. `threads` is the number of
 * additional worker threads (-@), so threads + 1 workers run the callbacks. Returns NULL on
 * failure with *status set and a one-line reason in errbuf, worded as moe_trace_open's and
 * moe_trace_read_header's. */
moe_trace_map_t *moe_trace_map_open(const char *path, int threads, int *status, char *errbuf,
                                    size_t errlen);
/* The trace header (owned by the map). */
const moe_trace_hdr_t *moe_trace_map_header(const moe_trace_map_t *m);
/* Number of workers: the `worker` argument of the callbacks ranges over [0, workers). */
int moe_trace_map_workers(const moe_trace_map_t *m);
/* Is the input read block-parallel (1) or with the sequential reader (0)? */
int moe_trace_map_parallel(const moe_trace_map_t *m);
/* Run once over all records. Returns 0, or the first failure: a read, decode or validation
 * error of the input (the one earliest in the file when several workers fail), or a callback's
 * status. The message is then in moe_trace_map_errmsg. */
int moe_trace_map_run(moe_trace_map_t *m, const moe_trace_map_ops_t *ops, void *arg);
/* Records delivered by the last run. */
uint64_t moe_trace_map_count(const moe_trace_map_t *m);
/* For callbacks: record why they are about to fail (printf-style; the first message wins): the
 * reason alone, the map puts the trace's name in front. Returns rc. */
int moe_trace_map_fail(moe_trace_map_t *m, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* One-line reason of the last failure, "" if none. It names the trace's file, as every message
 * of a reader does (doc/ARCHITECTURE, "Messages"): "'PATH': reason" ("'PATH': record N: ..."
 * for a bad record), or "cannot open 'PATH': ..." and the like; callers print it as it is. */
const char *moe_trace_map_errmsg(const moe_trace_map_t *m);
/* Close; NULL is a no-op. */
void moe_trace_map_close(moe_trace_map_t *m);

#ifdef __cplusplus
}
#endif
#endif
