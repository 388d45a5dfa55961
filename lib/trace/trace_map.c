/* trace/trace_map.c -- parallel map over trace records: workers inflate and decode blocks and run
 * the caller's callbacks; an ordering stage restores file order where the caller needs it. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe/bgz.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/trace_map.h"
#include "pool_internal.h"
#include "trace_codec_internal.h"
#include "util_internal.h"

/*
 * The container and payload are read with the same code as the streaming reader: members come
 * whole from moe_bgz_read_member (one reader at a time, under m->mu) and inflate on the workers
 * with moe_bgz_inflate_member; the header and the stored ids are decoded by the binary codec's
 * helpers (trace_codec_internal.h). So a tool reports the same damage the same way whichever path
 * read the file.
 */

#define MAP_SEQ_BATCH 4096u     /* records per batch from the sequential reader */
#define MAP_SEQ_BYTES (16u << 20) /* and at most about this many bytes of them */
#define NO_INDEX UINT64_MAX

/* A batch buffer: the public view and the arrays behind it. */
typedef struct bbuf {
    moe_trace_batch_t b;
    uint64_t *token;
    uint32_t *seq, *pos, *step, *rank;
    uint16_t *ids;
    float *w;
    uint8_t *scratch;
    size_t cap;     /* records the arrays hold */
    size_t ids_cap; /* records `ids` holds (raw batches need it only for a bad record) */
    struct bbuf *next;
} bbuf_t;

/* What a worker holds: its decompressor, the member it read, its payload, a batch buffer. */
typedef struct wstate {
    moe_bgz_inflater_t *inf;
    uint8_t *cbuf, *ubuf;
    size_t ccap, clen, ucap;
    uint64_t coff; /* file offset of the member in cbuf */
    bbuf_t *cur;
    struct moe_trace_map *m;
} wstate_t;

typedef struct done_ent {
    uint64_t index, n;
} done_ent_t;

struct moe_trace_map {
    char *path;
    moe_trace_hdr_t hdr;
    int nworkers;
    unsigned idw;          /* stored bytes per id */
    size_t rec_size;       /* stored record body size (without the length prefix) */
    size_t nid;            /* L * K */
    moe_trace_t *seqr;     /* sequential reader, or NULL on the parallel path */
    /* parallel path: the file */
    int fd;                /* until bz takes it over */
    moe_bgz_t *bz;         /* members are read through it, under mu */
    uint8_t prefix[MOE_BGZ_HEADER_SIZE];
    size_t prefix_len;
    uint64_t size;
    uint8_t *first;        /* payload of the header block; records start at first_off */
    size_t first_len, first_off;
    uint64_t first_coff;
    uint8_t *firstc;       /* or the header block still compressed (first == NULL) */
    size_t firstc_len;
    int first_taken;
    /* a run */
    const moe_trace_map_ops_t *ops;
    void *arg;
    wstate_t *ws;
    pthread_mutex_t mu;    /* file reading, dispatch, errors, the end barrier */
    pthread_cond_t cv_end;
    pthread_mutex_t omu;   /* the ordering stage and the buffer pool */
    pthread_cond_t cv_buf;
    int locks;             /* mutexes initialised */
    uint64_t next_index;
    int stop, err_any;     /* read outside mu: atomics */
    int nexited, ended;
    uint64_t next_ordered, ordered_records;
    bbuf_t *parked;        /* batches waiting for their turn, by index */
    done_ent_t *done;      /* without `ordered`: counts of batches finished early */
    size_t ndone, done_cap;
    bbuf_t *free_bufs;
    int nbufs, max_bufs;
    /* the first failure in file order */
    int err;
    uint64_t err_index;
    uint64_t err_rec;      /* record offset in the batch for record errors, else NO_INDEX */
    char msg[320];
};

/* ------------------------------------------------------------------ errors */

/* Record a failure at batch `index` (NO_INDEX: after every batch); the earliest one in the file
 * wins, so the report does not depend on which worker got there first. Caller holds m->mu. */
static int vfail_at(moe_trace_map_t *m, uint64_t index, uint64_t rec, int rc, const char *fmt,
                    va_list ap)
{
    if (!m->err || index < m->err_index) {
        m->err = rc;
        m->err_index = index;
        m->err_rec = rec;
        vsnprintf(m->msg, sizeof m->msg, fmt, ap);
    }
    __atomic_store_n(&m->err_any, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&m->stop, 1, __ATOMIC_RELEASE);
    return rc;
}

/* Whoever stops a run wakes the workers waiting for a batch buffer (under omu, so the wake-up
 * cannot slip between their check and their wait). */
static _Thread_local int tls_in_omu;

static void wake_waiters(moe_trace_map_t *m)
{
    if (!m->locks)
        return;
    if (!tls_in_omu)
        pthread_mutex_lock(&m->omu);
    pthread_cond_broadcast(&m->cv_buf);
    if (!tls_in_omu)
        pthread_mutex_unlock(&m->omu);
}

static int failed(moe_trace_map_t *m)
{
    return __atomic_load_n(&m->err_any, __ATOMIC_ACQUIRE);
}

static int stopped(moe_trace_map_t *m)
{
    return __atomic_load_n(&m->stop, __ATOMIC_ACQUIRE);
}

static int fail_at(moe_trace_map_t *m, uint64_t index, uint64_t rec, int rc, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail_at(moe_trace_map_t *m, uint64_t index, uint64_t rec, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail_at(m, index, rec, rc, fmt, ap);
    va_end(ap);
    return rc;
}

/* A failure seen outside m->mu (workers). */
static int fail_locked(moe_trace_map_t *m, uint64_t index, uint64_t rec, int rc, const char *fmt,
                       ...) __attribute__((format(printf, 5, 6)));
static int fail_locked(moe_trace_map_t *m, uint64_t index, uint64_t rec, int rc, const char *fmt,
                       ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (m->locks)
        pthread_mutex_lock(&m->mu);
    vfail_at(m, index, rec, rc, fmt, ap);
    if (m->locks)
        pthread_mutex_unlock(&m->mu);
    wake_waiters(m);
    return rc;
}

/* Callbacks report through this; the index is unknown here, so a callback failure ranks after
 * input errors already found in earlier batches but before any later one it stops. */
static _Thread_local uint64_t tls_index = NO_INDEX;

int moe_trace_map_fail(moe_trace_map_t *m, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char why[sizeof m->msg - 64]; /* the caller's reason, named by the trace's file */
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (m->locks)
        pthread_mutex_lock(&m->mu);
    fail_at(m, tls_index, NO_INDEX, rc, "'%s': %s", m->path, why);
    if (m->locks)
        pthread_mutex_unlock(&m->mu);
    wake_waiters(m);
    return rc;
}

const char *moe_trace_map_errmsg(const moe_trace_map_t *m)
{
    return m->msg;
}

/* ------------------------------------------------------------------ header */

static int hdr_fail(moe_trace_map_t *m, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int hdr_fail(moe_trace_map_t *m, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail_at(m, 0, NO_INDEX, rc, fmt, ap);
    va_end(ap);
    return rc;
}

/* Parse the payload header at the start of p[0..n) with the binary codec's decoder; on success
 * m->first_off is where the records start. */
static int parse_header(moe_trace_map_t *m, const uint8_t *p, size_t n)
{
    char msg[sizeof m->msg];
    int rc = trace_bin_parse_header(p, n, m->path, &m->hdr, &m->first_off, msg, sizeof msg);
    return rc ? hdr_fail(m, rc, "%s", msg) : 0;
}

/* ------------------------------------------------------------------ reading members */

/* Read the next non-empty member into w->cbuf (caller holds m->mu). 1 loaded, 0 at the
 * end-of-file marker, or a negative status (recorded at batch `index`). */
static int read_member(moe_trace_map_t *m, wstate_t *w, uint64_t index)
{
    int rc = moe_bgz_read_member(m->bz, &w->cbuf, &w->ccap, &w->clen, &w->coff);
    if (rc == MOE_ENOMEM)
        return fail_at(m, index, NO_INDEX, rc, "'%s': out of memory", m->path);
    if (rc < 0)
        return fail_at(m, index, NO_INDEX, rc, "'%s': %s", m->path, moe_bgz_errmsg(m->bz));
    return rc;
}

/* Inflate the member in w->cbuf into w->ubuf and check its CRC and size. Returns the payload
 * size, or a negative status with the failure recorded at batch `index`. */
static ptrdiff_t inflate_member(moe_trace_map_t *m, wstate_t *w, uint64_t index)
{
    char msg[160];
    ptrdiff_t n = moe_bgz_inflate_member(w->inf, w->cbuf, w->clen, w->coff, &w->ubuf, &w->ucap,
                                         msg, sizeof msg);
    if (n == MOE_ENOMEM)
        return fail_locked(m, index, NO_INDEX, MOE_ENOMEM, "'%s': out of memory", m->path);
    if (n < 0)
        return fail_locked(m, index, NO_INDEX, (int)n, "'%s': %s", m->path, msg);
    return n;
}

/* ------------------------------------------------------------------ batch buffers */

static void bbuf_free(bbuf_t *b)
{
    if (!b)
        return;
    free(b->token);
    free(b->seq);
    free(b->pos);
    free(b->step);
    free(b->rank);
    free(b->ids);
    free(b->w);
    free(b->scratch);
    free(b);
}

/* Make b hold n records; 0 or MOE_ENOMEM. */
static int bbuf_reserve(const moe_trace_map_t *m, bbuf_t *b, size_t n)
{
    if (n <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : n < 256 ? n : 256;
    while (cap < n)
        cap *= 2;
    size_t scratch = m->ops ? m->ops->scratch : 0;
    int weights = (m->hdr.flags & MOE_TRACE_WEIGHTS) != 0;
#define GROW(field, count)                                                                    \
    do {                                                                                      \
        void *p_ = realloc(b->field, (count) * sizeof *b->field);                             \
        if (!p_)                                                                              \
            return MOE_ENOMEM;                                                                \
        b->field = p_;                                                                        \
        util_populate(p_, (count) * sizeof *b->field);                                        \
    } while (0)
    GROW(token, cap);
    GROW(seq, cap);
    GROW(pos, cap);
    GROW(step, cap);
    GROW(rank, cap);
    if (weights)
        GROW(w, cap * m->nid);
    if (scratch)
        GROW(scratch, cap * scratch);
#undef GROW
    b->cap = cap;
    return 0;
}

/* Make b->ids hold n records. */
static int bbuf_reserve_ids(const moe_trace_map_t *m, bbuf_t *b, size_t n)
{
    if (n <= b->ids_cap)
        return 0;
    size_t cap = b->cap > n ? b->cap : n;
    uint16_t *p = realloc(b->ids, cap * m->nid * sizeof *p);
    if (!p)
        return MOE_ENOMEM;
    b->ids = p;
    util_populate(p, cap * m->nid * sizeof *p);
    b->ids_cap = cap;
    return 0;
}

static void bbuf_view(bbuf_t *b, uint64_t index, size_t n)
{
    b->b.raw = NULL;
    b->b.raw_stride = 0;
    b->b.raw_width = 0;
    b->b.user = 0;
    b->b.index = index;
    b->b.first = UINT64_MAX;
    b->b.n = n;
    b->b.token = b->token;
    b->b.seq = b->seq;
    b->b.pos = b->pos;
    b->b.step = b->step;
    b->b.rank = b->rank;
    b->b.ids = b->ids;
    b->b.weights = b->w;
    b->b.scratch = b->scratch;
}

/* ------------------------------------------------------------------ decoding a block */

/* Validate the ids of record r of batch b against the header, as moe_trace_read does; on failure
 * record "token T: layer L: ..." (the record number is added when the run ends). */
static int check_record(moe_trace_map_t *m, const bbuf_t *b, size_t r, uint64_t index)
{
    moe_trace_rec_t rec = {0};
    rec.token = b->token[r];
    rec.ids = b->ids + r * m->nid;
    rec.weights = b->w ? b->w + r * m->nid : NULL;
    rec.cap = (uint32_t)m->nid;
    char msg[200];
    int rc = moe_trace_rec_check(&rec, &m->hdr, msg, sizeof msg);
    if (rc)
        fail_locked(m, index, r, rc, "%s", msg);
    return rc;
}

/* Decode the stored ids of one record into ids[]; nonzero when every id is below E. */
static int decode_ids(const moe_trace_map_t *m, const uint8_t *p, uint16_t *ids)
{
    return trace_decode_ids(p, m->idw, ids, m->nid) < m->hdr.experts;
}

/* Raw mode: is every stored id below E (the common case)? */
static int raw_ids_valid(const moe_trace_map_t *m, const uint8_t *p)
{
    return trace_ids_max(p, m->idw, m->nid) < m->hdr.experts;
}

/* Decode the records of payload p[0..len) into b. Returns the record count or a negative
 * status (recorded at batch `index`). */
static ptrdiff_t decode_block(moe_trace_map_t *m, const uint8_t *p, size_t len, uint64_t coff,
                              bbuf_t *b, uint64_t index)
{
    size_t n = 0;
    int uniform = 1; /* every record of the version 1.0 size (no extensions) */
    for (size_t off = 0; off < len; n++) { /* framing first: count and bound the records */
        size_t left = len - off;
        uint32_t rl = left >= 4 ? trace_get32(p + off) : 0;
        if (left < 4 || rl > left - 4 || rl < m->rec_size)
            return fail_locked(m, index, n, MOE_ECORRUPT,
                               "'%s': corrupt record (block at offset %llu)", m->path,
                               (unsigned long long)coff);
        uniform &= rl == m->rec_size;
        off += 4 + (size_t)rl;
    }
    const int raw = uniform && m->ops->raw_ids;
    if (bbuf_reserve(m, b, n) || (!raw && bbuf_reserve_ids(m, b, n)))
        return fail_locked(m, index, NO_INDEX, MOE_ENOMEM, "'%s': out of memory", m->path);
    const size_t nid = m->nid;
    const unsigned want = m->ops->fields ? m->ops->fields : 0x1f;
    size_t off = 0;
    for (size_t r = 0; r < n; r++) {
        const uint8_t *q = p + off + 4;
        off += 4 + (size_t)trace_get32(p + off);
        b->token[r] = trace_get64(q); /* always: error messages name the token */
        if (want & MOE_MAP_SEQ)
            b->seq[r] = trace_get32(q + 8);
        if (want & MOE_MAP_POS)
            b->pos[r] = trace_get32(q + 12);
        if (want & MOE_MAP_STEP)
            b->step[r] = trace_get32(q + 16);
        if (want & MOE_MAP_RANK)
            b->rank[r] = trace_get32(q + 20);
        int valid = raw ? raw_ids_valid(m, q + TRACE_REC_FIXED)
                        : decode_ids(m, q + TRACE_REC_FIXED, b->ids + r * nid);
        if (b->w) {
            const uint8_t *wq = q + TRACE_REC_FIXED + nid * m->idw;
            for (size_t i = 0; i < nid; i++)
                b->w[r * nid + i] = trace_getf(wq + 4 * i);
            valid = 0; /* weights always get the full check (finite values) */
        }
        if (!valid) { /* the full check, which names a bad id or weight */
            if (raw && bbuf_reserve_ids(m, b, n))
                return fail_locked(m, index, NO_INDEX, MOE_ENOMEM, "'%s': out of memory", m->path);
            if (raw)
                decode_ids(m, q + TRACE_REC_FIXED, b->ids + r * nid);
            if (check_record(m, b, r, index))
                return -1;
        }
    }
    if (raw) {
        b->b.raw = p + 4 + TRACE_REC_FIXED;
        b->b.raw_stride = 4 + m->rec_size;
        b->b.raw_width = m->idw;
    }
    return (ptrdiff_t)n;
}

/* ------------------------------------------------------------------ ordering */

/* Count a finished batch into the file-order bookkeeping (caller holds omu). */
static void order_count(moe_trace_map_t *m, uint64_t index, uint64_t n)
{
    if (index != m->next_ordered) {
        if (m->ndone == m->done_cap) {
            size_t cap = m->done_cap ? 2 * m->done_cap : 16;
            done_ent_t *d = realloc(m->done, cap * sizeof *d);
            if (!d) { /* cannot happen in practice: a handful of entries */
                fail_locked(m, index, NO_INDEX, MOE_ENOMEM, "'%s': out of memory", m->path);
                return;
            }
            m->done = d;
            m->done_cap = cap;
        }
        m->done[m->ndone++] = (done_ent_t){index, n};
        return;
    }
    m->next_ordered++;
    m->ordered_records += n;
    for (size_t i = 0; i < m->ndone;) {
        if (m->done[i].index == m->next_ordered) {
            m->next_ordered++;
            m->ordered_records += m->done[i].n;
            m->done[i] = m->done[--m->ndone];
            i = 0;
        } else {
            i++;
        }
    }
}

/* Give batch buffer b to the caller's `ordered` callback in its turn (caller holds omu). */
static void order_deliver(moe_trace_map_t *m, int wid, bbuf_t *b)
{
    b->b.first = m->ordered_records;
    m->next_ordered++;
    m->ordered_records += b->b.n;
    if (!failed(m)) {
        tls_index = b->b.index;
        int rc = m->ops->ordered(m->arg, wid, &b->b);
        if (rc < 0)
            fail_locked(m, b->b.index, NO_INDEX, rc, "'%s': %s", m->path, moe_strerror(rc));
        tls_index = NO_INDEX;
    }
}

/* After `batch`: pass w->cur through the ordering stage. Without an `ordered` callback this is
 * bookkeeping only; with one, a batch that is early waits (parked) and the worker continues with
 * another buffer. */
static void order_stage(moe_trace_map_t *m, int wid, wstate_t *w)
{
    bbuf_t *b = w->cur;
    if (m->locks)
        pthread_mutex_lock(&m->omu);
    tls_in_omu = 1;
    if (!m->ops->ordered) {
        order_count(m, b->b.index, b->b.n);
    } else if (b->b.index != m->next_ordered) {
        bbuf_t **pp = &m->parked;
        while (*pp && (*pp)->b.index < b->b.index)
            pp = &(*pp)->next;
        b->next = *pp;
        *pp = b;
        w->cur = NULL;
    } else {
        order_deliver(m, wid, b);
        while (m->parked && m->parked->b.index == m->next_ordered) {
            bbuf_t *p = m->parked;
            m->parked = p->next;
            order_deliver(m, wid, p);
            p->next = m->free_bufs;
            m->free_bufs = p;
        }
        if (m->locks)
            pthread_cond_broadcast(&m->cv_buf);
    }
    tls_in_omu = 0;
    if (m->locks)
        pthread_mutex_unlock(&m->omu);
}

/* A batch buffer for the next batch: the worker's own, a free one, a new one, or (at the pool's
 * limit) one freed by the ordering stage. NULL when the run stops. */
static bbuf_t *get_buffer(moe_trace_map_t *m, wstate_t *w)
{
    if (w->cur)
        return w->cur;
    if (m->locks)
        pthread_mutex_lock(&m->omu);
    while (!m->free_bufs && m->nbufs >= m->max_bufs && !stopped(m))
        pthread_cond_wait(&m->cv_buf, &m->omu);
    bbuf_t *b = NULL;
    if (m->free_bufs) {
        b = m->free_bufs;
        m->free_bufs = b->next;
    } else if (!stopped(m) && (b = calloc(1, sizeof *b)) != NULL) {
        m->nbufs++;
    }
    if (m->locks)
        pthread_mutex_unlock(&m->omu);
    if (!b && !stopped(m))
        fail_locked(m, NO_INDEX, NO_INDEX, MOE_ENOMEM, "'%s': out of memory", m->path);
    w->cur = b;
    return b;
}

/* ------------------------------------------------------------------ the parallel path */

enum job { JOB_NONE, JOB_MEMBER, JOB_FIRST };

/* Claim the next batch: the rest of the header block, or the next non-empty member. */
static enum job next_job(moe_trace_map_t *m, wstate_t *w, uint64_t *index)
{
    enum job j = JOB_NONE;
    if (m->locks)
        pthread_mutex_lock(&m->mu);
    while (!stopped(m)) {
        if (!m->first_taken) {
            m->first_taken = 1;
            if (m->firstc || m->first_off < m->first_len) {
                *index = m->next_index++;
                j = JOB_FIRST;
                break;
            }
            continue;
        }
        int rc = read_member(m, w, m->next_index);
        if (rc < 0)
            break;
        if (rc == 0) {
            __atomic_store_n(&m->stop, 1, __ATOMIC_RELEASE); /* the end of the input */
            break;
        }
        *index = m->next_index++;
        j = JOB_MEMBER;
        break;
    }
    if (m->locks)
        pthread_mutex_unlock(&m->mu);
    if (j == JOB_NONE)
        wake_waiters(m);
    return j;
}

static void report_progress(moe_trace_map_t *m, int wid)
{
    if (wid != 0 || !m->ops->progress)
        return;
    if (m->locks)
        pthread_mutex_lock(&m->mu);
    uint64_t done = moe_bgz_tell(m->bz);
    if (m->locks)
        pthread_mutex_unlock(&m->mu);
    m->ops->progress(m->arg, done, m->size);
}

/* Run the callback on one decoded batch; 0 or negative (recorded). */
static int run_batch(moe_trace_map_t *m, int wid, bbuf_t *b)
{
    tls_index = b->b.index;
    int rc = m->ops->batch(m->arg, wid, &b->b);
    tls_index = NO_INDEX;
    if (rc < 0) {
        fail_locked(m, b->b.index, NO_INDEX, rc, "'%s': %s", m->path, moe_strerror(rc));
        return rc;
    }
    return 0;
}

/* After the input: the last worker out makes the final `ordered` call; then all run `finish`. */
static void end_of_input(moe_trace_map_t *m, int wid)
{
    if (m->locks)
        pthread_mutex_lock(&m->mu);
    int last = ++m->nexited == m->nworkers;
    if (m->locks)
        pthread_mutex_unlock(&m->mu);
    if (last) {
        if (m->ops->ordered && !failed(m)) {
            if (m->locks)
                pthread_mutex_lock(&m->omu);
            tls_in_omu = 1;
            int rc = m->ops->ordered(m->arg, wid, NULL);
            tls_in_omu = 0;
            if (m->locks)
                pthread_mutex_unlock(&m->omu);
            if (rc < 0)
                fail_locked(m, NO_INDEX, NO_INDEX, rc, "'%s': %s", m->path, moe_strerror(rc));
        }
        if (m->locks)
            pthread_mutex_lock(&m->mu);
        m->ended = 1;
        if (m->locks) {
            pthread_cond_broadcast(&m->cv_end);
            pthread_mutex_unlock(&m->mu);
        }
    } else {
        pthread_mutex_lock(&m->mu);
        while (!m->ended)
            pthread_cond_wait(&m->cv_end, &m->mu);
        pthread_mutex_unlock(&m->mu);
    }
    if (m->ops->finish && !failed(m)) {
        int rc = m->ops->finish(m->arg, wid);
        if (rc < 0)
            fail_locked(m, NO_INDEX, NO_INDEX, rc, "'%s': %s", m->path, moe_strerror(rc));
    }
}

static void parallel_worker(moe_trace_map_t *m, int wid)
{
    wstate_t *w = &m->ws[wid];
    for (;;) {
        bbuf_t *b = get_buffer(m, w);
        uint64_t index = 0;
        enum job j = b ? next_job(m, w, &index) : JOB_NONE;
        if (j == JOB_NONE)
            break;
        const uint8_t *p;
        size_t len;
        uint64_t coff;
        if (j == JOB_FIRST && !m->firstc) {
            p = m->first + m->first_off;
            len = m->first_len - m->first_off;
            coff = m->first_coff;
        } else if (j == JOB_FIRST) { /* inflate the header block here, in parallel */
            if (w->ccap < m->firstc_len) {
                uint8_t *q = realloc(w->cbuf, m->firstc_len);
                if (!q) {
                    fail_locked(m, index, NO_INDEX, MOE_ENOMEM, "'%s': out of memory", m->path);
                    break;
                }
                w->cbuf = q;
                w->ccap = m->firstc_len;
            }
            memcpy(w->cbuf, m->firstc, m->firstc_len);
            w->clen = m->firstc_len;
            w->coff = m->first_coff;
            ptrdiff_t got = inflate_member(m, w, index);
            if (got < 0)
                break;
            if ((size_t)got < m->first_off) {
                fail_locked(m, index, NO_INDEX, MOE_ECORRUPT, "'%s': corrupt trace header",
                            m->path);
                break;
            }
            p = w->ubuf + m->first_off;
            len = (size_t)got - m->first_off;
            coff = w->coff;
        } else {
            ptrdiff_t got = inflate_member(m, w, index);
            if (got < 0)
                break;
            p = w->ubuf;
            len = (size_t)got;
            coff = w->coff;
        }
        bbuf_view(b, index, 0);
        ptrdiff_t n = decode_block(m, p, len, coff, b, index);
        if (n < 0)
            break;
        b->b.n = (size_t)n;
        b->b.token = b->token; /* the arrays may have moved (grown) */
        b->b.seq = b->seq;
        b->b.pos = b->pos;
        b->b.step = b->step;
        b->b.rank = b->rank;
        b->b.ids = b->b.raw ? NULL : b->ids;
        b->b.weights = b->w;
        b->b.scratch = b->scratch;
        if (n > 0 && run_batch(m, wid, b) < 0)
            break;
        if (n > 0)
            order_stage(m, wid, w);
        report_progress(m, wid);
    }
    end_of_input(m, wid);
}

/* Worker `share` of the map (share 0 is the thread that runs the map). */
static void worker_share(void *arg, int share)
{
    parallel_worker(arg, share);
}

/* ------------------------------------------------------------------ the sequential path */

/* Records per batch of the sequential path: MAP_SEQ_BATCH, or fewer where that many records
 * would pass MAP_SEQ_BYTES (a record of 4096 layers of top-256 ids is 2 MiB). */
static size_t seq_batch_limit(const moe_trace_map_t *m)
{
    size_t per = m->nid * (sizeof(uint16_t) + ((m->hdr.flags & MOE_TRACE_WEIGHTS) ? 4 : 0)) +
                 (m->ops ? m->ops->scratch : 0) + 32;
    size_t n = MAP_SEQ_BYTES / per;
    return n < 1 ? 1 : n > MAP_SEQ_BATCH ? MAP_SEQ_BATCH : n;
}

static void sequential_run(moe_trace_map_t *m)
{
    wstate_t *w = &m->ws[0];
    bbuf_t *b = get_buffer(m, w);
    moe_trace_rec_t r = {0};
    uint64_t index = 0;
    int rc = 1;
    const size_t limit = seq_batch_limit(m);
    while (b && !failed(m) && rc == 1) {
        size_t n = 0;
        /* The arrays grow with the records read, never ahead of them: a header alone
         * (which may declare 4096 layers of top-256) reserves nothing. */
        while (n < limit && (rc = moe_trace_read(m->seqr, &r)) == 1) {
            if (bbuf_reserve(m, b, n + 1) || bbuf_reserve_ids(m, b, n + 1)) {
                fail_at(m, index, NO_INDEX, MOE_ENOMEM, "'%s': out of memory", m->path);
                break;
            }
            b->token[n] = r.token;
            b->seq[n] = r.seq;
            b->pos[n] = r.pos;
            b->step[n] = r.step;
            b->rank[n] = r.rank;
            memcpy(b->ids + n * m->nid, r.ids, m->nid * sizeof *r.ids);
            if (b->w)
                memcpy(b->w + n * m->nid, r.weights, m->nid * sizeof *r.weights);
            n++;
        }
        if (rc < 0) /* the reader's message already carries the record number */
            fail_at(m, index, NO_INDEX, rc, "%s", moe_trace_errmsg(m->seqr));
        if (n == 0 || failed(m))
            break;
        bbuf_view(b, index++, n);
        if (run_batch(m, 0, b) < 0)
            break;
        order_stage(m, 0, w);
        if (m->ops->progress)
            m->ops->progress(m->arg, moe_trace_tell(m->seqr), moe_trace_size(m->seqr));
    }
    moe_trace_rec_release(&r);
    end_of_input(m, 0);
}

/* ------------------------------------------------------------------ open / run / close */

static moe_trace_map_t *open_fail(moe_trace_map_t *m, int rc, int *status, char *errbuf,
                                  size_t errlen)
{
    if (errbuf && errlen && m->msg[0])
        snprintf(errbuf, errlen, "%s", m->msg);
    else if (errbuf && errlen) /* every failure names the file, this one too */
        snprintf(errbuf, errlen, "'%s': %s", m->path ? m->path : "-", moe_strerror(rc));
    *status = rc;
    moe_trace_map_close(m);
    return NULL;
}

/* The sequential reader for inputs that are not regular block-gzip files. */
static int open_sequential(moe_trace_map_t *m, int threads)
{
    int st = 0;
    m->seqr = moe_trace_open(m->path, "r", threads, &st, m->msg, sizeof m->msg);
    if (!m->seqr)
        return st;
    int rc = moe_trace_read_header(m->seqr, &m->hdr);
    if (rc < 0)
        snprintf(m->msg, sizeof m->msg, "%s", moe_trace_errmsg(m->seqr));
    m->size = moe_trace_size(m->seqr);
    return rc < 0 ? rc : 0;
}

/* Inflate the first bytes of the member in w->cbuf with zlib and parse the header from them;
 * on success keep the compressed member for a worker. 0, or nonzero to take the long way. */
static int parse_header_partial(moe_trace_map_t *m, wstate_t *w)
{
    const size_t want = 65536;
    uint32_t isize = moe_bgz_member_isize(w->cbuf, w->clen);
    if (isize > MOE_BGZ_MAX_BLOCK)
        return -1;
    size_t n = isize < want ? isize : want;
    uint8_t *buf = malloc(n + 1);
    if (!buf)
        return -1;
    size_t got = moe_bgz_inflate_prefix(w->cbuf, w->clen, buf, n);
    int rc = -1;
    if (got == n && parse_header(m, buf, got) == 0 && (m->firstc = malloc(w->clen)) != NULL) {
        memcpy(m->firstc, w->cbuf, w->clen);
        m->firstc_len = w->clen;
        m->first_coff = w->coff;
        m->first_len = isize;
        rc = 0;
    }
    free(buf);
    return rc;
}

/* Read members up to the first non-empty one and parse the header in it. */
static int open_parallel(moe_trace_map_t *m)
{
    wstate_t *w = &m->ws[0];
    int rc = read_member(m, w, 0);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return hdr_fail(m, MOE_EEMPTY, "'%s': empty trace (no header)", m->path);
    /* Only the header is needed now: inflate the start of the block (up to 64 KiB) and leave
     * the whole block, CRC check included, to a worker. Whatever does not parse there is
     * inflated whole here, so a damaged block is reported as the sequential reader does. */
    if (parse_header_partial(m, w) == 0)
        return 0;
    moe_trace_hdr_release(&m->hdr);
    moe_trace_hdr_init(&m->hdr);
    free(m->firstc);
    m->firstc = NULL;
    m->err = 0;
    m->err_any = 0;
    m->stop = 0;
    m->msg[0] = '\0';
    ptrdiff_t n = inflate_member(m, w, 0);
    if (n < 0)
        return (int)n;
    m->first = w->ubuf; /* the worker gets a fresh payload buffer */
    m->first_len = (size_t)n;
    m->first_coff = w->coff;
    w->ubuf = NULL;
    w->ucap = 0;
    return parse_header(m, m->first, m->first_len);
}

moe_trace_map_t *moe_trace_map_open(const char *path, int threads, int *status, char *errbuf,
                                    size_t errlen)
{
    int dummy;
    status = status ? status : &dummy;
    moe_trace_map_t *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        *status = MOE_ENOMEM;
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    m->fd = -1;
    m->nworkers = 1 + (threads > 0 ? threads : 0);
    m->ws = calloc((size_t)m->nworkers, sizeof *m->ws);
    if (!m->ws)
        return open_fail(m, MOE_ENOMEM, status, errbuf, errlen);
    int rc = 0;
    struct stat st;
    if (strcmp(path, "-") != 0) {
        m->fd = moe_open_input(path);
        if (m->fd < 0) {
            hdr_fail(m, MOE_ESYS, "cannot open '%s': %s", path, strerror(errno));
            return open_fail(m, MOE_ESYS, status, errbuf, errlen);
        }
        if (fstat(m->fd, &st) == 0 && S_ISREG(st.st_mode)) {
            m->size = (uint64_t)st.st_size;
            ptrdiff_t got = moe_read_full(m->fd, m->prefix, sizeof m->prefix);
            if (got < 0) {
                hdr_fail(m, MOE_ESYS, "cannot read '%s': %s", path, strerror(errno));
                return open_fail(m, MOE_ESYS, status, errbuf, errlen);
            }
            m->prefix_len = (size_t)got;
        }
        if (m->prefix_len == 0 || !moe_bgz_is_bgz(m->prefix, m->prefix_len)) {
            close(m->fd); /* text views, pipes and devices: the sequential reader */
            m->fd = -1;
        }
    }
    if (m->fd >= 0) {
        m->bz = moe_bgz_dopen(m->fd, 'r', 0, 0, path, m->prefix, m->prefix_len, &rc);
        if (m->bz)
            m->fd = -1; /* the handle owns it now */
        for (int i = 0; i < m->nworkers && rc == 0; i++)
            if (!(m->ws[i].inf = moe_bgz_inflater_new()))
                rc = MOE_ENOMEM;
        if (rc == 0)
            rc = open_parallel(m);
    } else {
        rc = open_sequential(m, threads);
        m->nworkers = 1; /* the reader's threads inflate; the callbacks run on the caller */
    }
    if (rc)
        return open_fail(m, rc, status, errbuf, errlen);
    m->nid = (size_t)m->hdr.layers * m->hdr.topk;
    m->idw = trace_id_width(&m->hdr);
    m->rec_size = trace_rec_size(&m->hdr);
    return m;
}

const moe_trace_hdr_t *moe_trace_map_header(const moe_trace_map_t *m)
{
    return &m->hdr;
}

int moe_trace_map_workers(const moe_trace_map_t *m)
{
    return m->nworkers;
}

int moe_trace_map_parallel(const moe_trace_map_t *m)
{
    return m->seqr == NULL;
}

uint64_t moe_trace_map_count(const moe_trace_map_t *m)
{
    return m->ordered_records;
}

/* Resolve the record number of a record error once every earlier batch has been counted. */
static void finish_message(moe_trace_map_t *m)
{
    if (!m->err || m->err_rec == NO_INDEX)
        return;
    char tmp[sizeof m->msg];
    snprintf(tmp, sizeof tmp, "%s", m->msg);
    if (m->next_ordered == m->err_index) {
        unsigned long long rec = (unsigned long long)(m->ordered_records + m->err_rec + 1);
        if (strncmp(tmp, "'", 1) == 0) /* framing: "'path': corrupt record (block ...)" */
            snprintf(m->msg, sizeof m->msg, "'%s': corrupt record %llu", m->path, rec);
        else
            snprintf(m->msg, sizeof m->msg, "'%s': record %llu: %.280s", m->path, rec, tmp);
    }
}

int moe_trace_map_run(moe_trace_map_t *m, const moe_trace_map_ops_t *ops, void *arg)
{
    if (m->ops) /* one run per map */
        return moe_trace_map_fail(m, MOE_EINVAL, "a trace map runs once");
    m->ops = ops;
    m->arg = arg;
    m->max_bufs = ops->ordered ? 2 * m->nworkers + 1 : m->nworkers;
    int par = m->seqr == NULL && m->nworkers > 1;
    if (par) {
        pthread_mutex_init(&m->mu, NULL);
        pthread_mutex_init(&m->omu, NULL);
        pthread_cond_init(&m->cv_end, NULL);
        pthread_cond_init(&m->cv_buf, NULL);
        m->locks = 1;
        for (int i = 1; i < m->nworkers; i++)
            m->ws[i].m = m;
        pool_team_t team;
        int started = pool_team_start(&team, m->nworkers, worker_share, m) == 0 ? team.started : 0;
        if (started < m->nworkers - 1) { /* run with those started; the others count as exited */
            pthread_mutex_lock(&m->mu);
            m->nexited += m->nworkers - 1 - started;
            pthread_mutex_unlock(&m->mu);
        }
        parallel_worker(m, 0);
        pool_team_join(&team, 0);
    } else if (m->seqr) {
        sequential_run(m);
    } else {
        parallel_worker(m, 0);
    }
    finish_message(m);
    if (m->err && !m->msg[0])
        snprintf(m->msg, sizeof m->msg, "'%s': %s", m->path, moe_strerror(m->err));
    return m->err;
}

void moe_trace_map_close(moe_trace_map_t *m)
{
    if (!m)
        return;
    if (m->fd >= 0)
        close(m->fd);
    moe_bgz_close(m->bz);
    moe_trace_close(m->seqr, NULL, 0);
    for (int i = 0; m->ws && i < m->nworkers; i++) {
        moe_bgz_inflater_free(m->ws[i].inf);
        free(m->ws[i].cbuf);
        free(m->ws[i].ubuf);
        bbuf_free(m->ws[i].cur);
    }
    free(m->ws);
    for (bbuf_t *b = m->parked, *nx; b; b = nx) {
        nx = b->next;
        bbuf_free(b);
    }
    for (bbuf_t *b = m->free_bufs, *nx; b; b = nx) {
        nx = b->next;
        bbuf_free(b);
    }
    if (m->locks) {
        pthread_mutex_destroy(&m->mu);
        pthread_mutex_destroy(&m->omu);
        pthread_cond_destroy(&m->cv_end);
        pthread_cond_destroy(&m->cv_buf);
    }
    free(m->done);
    free(m->first);
    free(m->firstc);
    moe_trace_hdr_release(&m->hdr);
    free(m->path);
    free(m);
}
