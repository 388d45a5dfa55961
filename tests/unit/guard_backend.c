/* tests/unit/guard_backend.c -- the CPU backend under a GPU's memory rules (guard_backend.h). */
#include "config.h"

#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "guard_backend.h"

/* ------------------------------------------------------------------ the arena */

/* Address space reserved for every guard's buffers: the addresses the runtime is given, never
 * accessible, and their shadow at a fixed distance, where the operations compute; pages are
 * backed only once touched. */
#define ARENA_BYTES ((size_t)1 << 34)

typedef struct blk {
    size_t at, size; /* offset in the arena and bytes (pages, for free blocks; asked, for
                      * buffers in use) */
} blk_t;

static struct {
    char *base, *shadow; /* the addresses handed out (PROT_NONE), their shadow (read-write) */
    size_t hi, page; /* the high-water mark (bytes from base ever handed out), the page size */
    blk_t *used, *free; /* buffers in use sorted by offset; free page runs */
    size_t nused, capused, nfree, capfree;
} A;

static guard_counts_t counts;
static const moe_run_backend_ops_t *cpu; /* the CPU backend's operations, which compute */

const guard_counts_t *guard_counts(void)
{
    return &counts;
}

int guard_owns(const void *p)
{
    const char *c = p;
    return A.base && c >= A.base && c < A.base + ARENA_BYTES;
}

static size_t pages(size_t bytes)
{
    return (bytes + A.page - 1) / A.page * A.page;
}

/* Where the operations find the bytes of backend address p (NULL and host memory as they
 * are). */
static void *sh(const void *p)
{
    return guard_owns(p) ? A.shadow + ((const char *)p - A.base) : (void *)p;
}

/* A fault in the arena: the runtime touched backend memory itself. */
static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (!guard_owns(si->si_addr)) {
        signal(sig, SIG_DFL); /* not ours: fault again, as without the guard */
        return;
    }
    static const char msg[] = "guard: the runtime read or wrote backend memory outside the "
                              "backend's operations, at:\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(3);
    void *fr[64];
    backtrace_symbols_fd(fr, backtrace(fr, 64), 2);
    _exit(3);
}

static int arena_init(void)
{
    if (A.base)
        return 0;
    A.page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    void *q = p == MAP_FAILED ? MAP_FAILED
                              : mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (q == MAP_FAILED)
        return MOE_ENOMEM;
    A.base = p;
    A.shadow = q;
    void *fr[1];
    backtrace(fr, 1); /* loads what backtrace needs now, not in the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGSEGV, &sa, NULL) ? MOE_EINVAL : 0;
}

static int push(blk_t **v, size_t *n, size_t *cap, size_t at, blk_t b)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 256;
        blk_t *t = realloc(*v, c * sizeof *t);
        if (!t)
            return -1;
        *v = t;
        *cap = c;
    }
    memmove(*v + at + 1, *v + at, (*n - at) * sizeof **v);
    (*v)[at] = b;
    (*n)++;
    return 0;
}

/* The first buffer in use at or after offset `at` (binary search). */
static size_t find_used(size_t at)
{
    size_t lo = 0, hi = A.nused;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (A.used[mid].at < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void *arena_alloc(size_t bytes)
{
    size_t want = pages(bytes ? bytes : 1), at = SIZE_MAX;
    for (size_t i = 0; i < A.nfree && at == SIZE_MAX; i++)
        if (A.free[i].size >= want) { /* first fit: the run's head */
            at = A.free[i].at;
            A.free[i].at += want;
            A.free[i].size -= want;
            if (!A.free[i].size)
                memmove(A.free + i, A.free + i + 1, (--A.nfree - i) * sizeof *A.free);
        }
    if (at == SIZE_MAX) {
        if (A.hi + want > ARENA_BYTES)
            return NULL;
        at = A.hi;
        A.hi += want;
    }
    if (push(&A.used, &A.nused, &A.capused, find_used(at), (blk_t){at, bytes ? bytes : 1}))
        return NULL;
    return A.base + at;
}

static void arena_free(void *p)
{
    size_t at = (size_t)((char *)p - A.base), i = find_used(at);
    if (i == A.nused || A.used[i].at != at) {
        fprintf(stderr, "guard: free of %p, not a buffer of the backend\n", p);
        counts.violations++;
        return;
    }
    size_t size = pages(A.used[i].size);
    memmove(A.used + i, A.used + i + 1, (--A.nused - i) * sizeof *A.used);
    madvise(A.shadow + at, size, MADV_DONTNEED); /* its pages back to the system, zeroed */
    if (push(&A.free, &A.nfree, &A.capfree, A.nfree, (blk_t){at, size}))
        abort();
}

/* ------------------------------------------------------------------ argument checks */

static int bad(const char *op, const char *arg, const void *p, size_t bytes, const char *why)
{
    counts.violations++;
    fprintf(stderr, "guard: %s: %s = %p (%zu bytes) %s\n", op, arg, p, bytes, why);
    return MOE_EINVAL;
}

/* [p, p + bytes) lies in one buffer from alloc (nothing to check for no bytes). */
static int dev(const char *op, const char *arg, const void *p, size_t bytes)
{
    if (!bytes)
        return 0;
    if (!guard_owns(p))
        return bad(op, arg, p, bytes, "is not backend memory");
    size_t at = (size_t)((const char *)p - A.base), i = find_used(at + 1);
    if (i == 0 || A.used[i - 1].at > at ||
        at + bytes > A.used[i - 1].at + A.used[i - 1].size)
        return bad(op, arg, p, bytes, "is not within one buffer of the backend");
    return 0;
}

static int host(const char *op, const char *arg, const void *p, size_t bytes)
{
    return bytes && guard_owns(p) ? bad(op, arg, p, bytes, "is backend memory, not host") : 0;
}

/* The extent of a buffer sent or received by an all-to-all: the end of its last block. */
static size_t extent(const size_t *count, const size_t *displ, int n)
{
    size_t e = 0;
    for (int r = 0; r < n; r++)
        if (count[r] && displ[r] + count[r] > e)
            e = displ[r] + count[r];
    return e;
}

/* Rows [off[0], off[G]) of width floats at p. */
static int rows(const char *op, const char *arg, const float *p, uint32_t G, const size_t *off,
                size_t width)
{
    return p ? dev(op, arg, p + off[0] * width, (off[G] - off[0]) * width * sizeof *p) : 0;
}

/* The weight tables of the groups with rows: n floats each. */
static int table(const char *op, const char *arg, const float *const *t, uint32_t G,
                 const size_t *off, size_t n)
{
    int rc = host(op, arg, t, G * sizeof *t);
    for (uint32_t g = 0; t && !rc && g < G; g++)
        if (off[g + 1] > off[g])
            rc = dev(op, arg, t[g], n * sizeof(float));
    return rc;
}

/* The largest index + 1 of n indices (idx checked already). */
static size_t span_of(const uint32_t *idx, size_t n)
{
    const uint32_t *v = sh(idx);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if ((size_t)v[i] + 1 > m)
            m = (size_t)v[i] + 1;
    return m;
}

/* A host table of n backend pointers in their shadow (slot 0-3 of the tables of one call). */
static const void **shadow_table(int slot, const void *const *t, uint32_t n)
{
    static const void **tab[4];
    static size_t cap[4];
    if (!t)
        return NULL;
    if (n > cap[slot]) {
        const void **v = realloc(tab[slot], n * sizeof *v);
        if (!v)
            abort();
        tab[slot] = v;
        cap[slot] = n;
    }
    for (uint32_t i = 0; i < n; i++)
        tab[slot][i] = sh(t[i]);
    return tab[slot];
}
#define SHT(slot, t, n) ((const float *const *)shadow_table((slot), (const void *const *)(t), (n)))
#define SHW(slot, t, n) ((float *const *)shadow_table((slot), (const void *const *)(t), (n)))

/* Run the CPU backend's operation on the shadows, rc the checks' verdict first. */
#define GUARDED(rc, call)                                                                      \
    do {                                                                                       \
        if (rc)                                                                                \
            return rc;                                                                         \
        return (call);                                                                         \
    } while (0)

/* ------------------------------------------------------------------ operations */

static void *g_alloc(moe_run_backend_t *b, size_t bytes)
{
    b->allocs++;
    return arena_alloc(bytes);
}

static void g_free(moe_run_backend_t *b, void *p)
{
    (void)b;
    if (p)
        arena_free(p);
}

static int g_upload(moe_run_backend_t *b, void *d, const void *s, size_t n)
{
    int rc = dev("upload", "dst", d, n);
    rc = rc ? rc : host("upload", "src", s, n);
    GUARDED(rc, cpu->upload(b, sh(d), s, n));
}

static int g_download(moe_run_backend_t *b, void *d, const void *s, size_t n)
{
    int rc = dev("download", "src", s, n);
    rc = rc ? rc : host("download", "dst", d, n);
    GUARDED(rc, cpu->download(b, d, sh(s), n));
}

static int g_copy(moe_run_backend_t *b, void *d, const void *s, size_t n)
{
    int rc = dev("copy", "dst", d, n);
    rc = rc ? rc : dev("copy", "src", s, n);
    GUARDED(rc, cpu->copy(b, sh(d), sh(s), n));
}

static int g_zero(moe_run_backend_t *b, void *d, size_t n)
{
    int rc = dev("zero", "dst", d, n);
    GUARDED(rc, cpu->zero(b, sh(d), n));
}

static int g_mixer(moe_run_backend_t *b, float *x, size_t n, uint32_t H, const float *m)
{
    int rc = dev("mixer", "x", x, n * H * 4);
    rc = rc ? rc : dev("mixer", "m", m, (size_t)H * 4);
    GUARDED(rc, cpu->mixer(b, sh(x), n, H, sh(m)));
}

static int g_gate(moe_run_backend_t *b, const float *x, size_t n, uint32_t H, const float *Wg,
                  uint32_t E, uint32_t K, int32_t *ids, float *w)
{
    int rc = dev("gate", "x", x, n * H * 4);
    rc = rc ? rc : dev("gate", "Wg", Wg, (size_t)H * E * 4);
    rc = rc ? rc : dev("gate", "ids", ids, n * K * 4);
    rc = rc ? rc : dev("gate", "w", w, n * K * 4);
    GUARDED(rc, cpu->gate(b, sh(x), n, H, sh(Wg), E, K, sh(ids), sh(w)));
}

static int g_gather(moe_run_backend_t *b, const float *src, const uint32_t *idx, size_t n,
                    uint32_t H, float *dst)
{
    int rc = dev("gather", "idx", idx, n * 4);
    rc = rc ? rc : dev("gather", "dst", dst, n * H * 4);
    if (!rc)
        rc = dev("gather", "src", src, span_of(idx, n) * H * 4);
    GUARDED(rc, cpu->gather(b, sh(src), sh(idx), n, H, sh(dst)));
}

static int g_scatter_add(moe_run_backend_t *b, const float *y, const uint32_t *idx,
                         const float *w, size_t n, uint32_t H, float *out)
{
    int rc = dev("scatter_add", "y", y, n * H * 4);
    rc = rc ? rc : dev("scatter_add", "idx", idx, n * 4);
    rc = rc || !w ? rc : dev("scatter_add", "w", w, n * 4);
    if (!rc)
        rc = dev("scatter_add", "out", out, span_of(idx, n) * H * 4);
    GUARDED(rc, cpu->scatter_add(b, sh(y), sh(idx), sh(w), n, H, sh(out)));
}

/* The checks of a grouped FFN's arguments (x, y or act NULL: not checked). */
static int ffn_args(const char *op, const float *x, uint32_t G, const size_t *off, uint32_t H,
                    uint32_t F, int expert, const float *const *W1, const float *const *W2,
                    const float *y, const float *act)
{
    size_t C = moe_kern_w1_cols(F, expert);
    for (uint32_t g = 0; g < G; g++)
        if (off[g + 1] < off[g])
            return 0; /* the CPU backend refuses them */
    int rc = host(op, "off", off, (G + 1) * sizeof *off);
    rc = rc || !G ? rc : rows(op, "x", x, G, off, H);
    rc = rc || !G ? rc : rows(op, "y", y, G, off, H);
    rc = rc || !G ? rc : rows(op, "act", act, G, off, C);
    rc = rc ? rc : table(op, "W1", W1, G, off, H * C);
    return rc ? rc : table(op, "W2", W2, G, off, (size_t)F * H);
}

static int g_ffn_grouped(moe_run_backend_t *b, const float *x, uint32_t G, const size_t *off,
                         uint32_t H, uint32_t F, int expert, const float *const *W1,
                         const float *const *W2, float *y)
{
    int rc = ffn_args("ffn_grouped", x, G, off, H, F, expert, W1, W2, y, NULL);
    GUARDED(rc, cpu->ffn_grouped(b, sh(x), G, off, H, F, expert, SHT(0, W1, G),
                                     SHT(1, W2, G), sh(y)));
}

static int g_ffn_grouped_act(moe_run_backend_t *b, const float *x, uint32_t G,
                             const size_t *off, uint32_t H, uint32_t F, int expert,
                             const float *const *W1, const float *const *W2, float *y,
                             float *act)
{
    counts.ffn_grouped_act++;
    int rc = ffn_args("ffn_grouped_act", x, G, off, H, F, expert, W1, W2, y, act);
    GUARDED(rc, cpu->ffn_grouped_act(b, sh(x), G, off, H, F, expert, SHT(0, W1, G),
                                         SHT(1, W2, G), sh(y), sh(act)));
}

static int g_pack(moe_run_backend_t *b, const float *src, size_t n, int dtype, void *dst)
{
    int rc = dev("pack", "src", src, n * 4);
    rc = rc ? rc : dev("pack", "dst", dst, n * moe_dtype_size(dtype));
    GUARDED(rc, cpu->pack(b, sh(src), n, dtype, sh(dst)));
}

static int g_unpack(moe_run_backend_t *b, const void *src, size_t n, int dtype, float *dst)
{
    int rc = dev("unpack", "src", src, n * moe_dtype_size(dtype));
    rc = rc ? rc : dev("unpack", "dst", dst, n * 4);
    GUARDED(rc, cpu->unpack(b, sh(src), n, dtype, sh(dst)));
}

static int a2a_args(moe_run_backend_t *b, const char *op, const void *s, const size_t *sc,
                    const size_t *sd, void *r, const size_t *rc, const size_t *rd)
{
    int e = dev(op, "send", s, extent(sc, sd, b->size));
    return e ? e : dev(op, "recv", r, extent(rc, rd, b->size));
}

static int g_alltoallv(moe_run_backend_t *b, const void *s, const size_t *sc, const size_t *sd,
                       void *r, const size_t *rc, const size_t *rd)
{
    int e = a2a_args(b, "alltoallv", s, sc, sd, r, rc, rd);
    GUARDED(e, cpu->alltoallv(b, sh(s), sc, sd, sh(r), rc, rd));
}

/* Completed within the call, so that no transfer reaches the arena between operations. */
static int g_ialltoallv(moe_run_backend_t *b, const void *s, const size_t *sc,
                        const size_t *sd, void *r, const size_t *rc, const size_t *rd,
                        moe_run_req_t **q)
{
    int e = a2a_args(b, "ialltoallv", s, sc, sd, r, rc, rd);
    if (e)
        return e;
    e = cpu->alltoallv(b, sh(s), sc, sd, sh(r), rc, rd);
    *q = e ? NULL : malloc(1);
    return e ? e : *q ? 0 : MOE_ENOMEM;
}

/* The group's all-to-all on the shadows, completed at once as g_ialltoallv's. */
static int g_ialltoallv_group(moe_run_backend_t *b, int group, const void *s, const size_t *sc,
                              const size_t *sd, void *r, const size_t *rc, const size_t *rd,
                              moe_run_req_t **q)
{
    int e = a2a_args(b, "ialltoallv_group", s, sc, sd, r, rc, rd);
    moe_run_req_t *cq = NULL;
    if (e)
        return e;
    e = cpu->ialltoallv_group(b, group, sh(s), sc, sd, sh(r), rc, rd, &cq);
    e = e ? e : cpu->wait(b, cq);
    *q = e ? NULL : malloc(1);
    return e ? e : *q ? 0 : MOE_ENOMEM;
}

static int g_wait(moe_run_backend_t *b, moe_run_req_t *q)
{
    (void)b;
    free(q);
    return 0;
}

static int g_allgather(moe_run_backend_t *b, const void *s, size_t n, void *r)
{
    int rc = dev("allgather", "send", s, n);
    rc = rc ? rc : dev("allgather", "recv", r, n * (size_t)b->size);
    GUARDED(rc, cpu->allgather(b, sh(s), n, sh(r)));
}

static int g_allreduce(moe_run_backend_t *b, double *v, int n, int op)
{
    int rc = host("allreduce", "v", v, n > 0 ? (size_t)n * sizeof *v : 0);
    return rc ? rc : cpu->allreduce(b, v, n, op);
}

static int g_loss_grad(moe_run_backend_t *b, const float *y, const float *t, size_t n,
                       uint32_t H, double scale, float *dy, double *sum)
{
    counts.loss_grad++;
    int rc = dev("loss_grad", "y", y, n * H * 4);
    rc = rc ? rc : dev("loss_grad", "t", t, n * H * 4);
    rc = rc ? rc : dev("loss_grad", "dy", dy, n * H * 4);
    rc = rc ? rc : host("loss_grad", "sum", sum, sizeof *sum);
    GUARDED(rc, cpu->loss_grad(b, sh(y), sh(t), n, H, scale, sh(dy), sum));
}

static int g_update(moe_run_backend_t *b, int adam, int t, float lr, float *w, const float *g,
                    float *m, float *v, size_t n)
{
    counts.update++;
    int rc = dev("update", "w", w, n * 4);
    rc = rc ? rc : dev("update", "g", g, n * 4);
    rc = rc || !adam ? rc : dev("update", "m", m, n * 4);
    rc = rc || !adam ? rc : dev("update", "v", v, n * 4);
    GUARDED(rc, cpu->update(b, adam, t, lr, sh(w), sh(g), sh(m), sh(v), n));
}

static int g_mixer_backward(moe_run_backend_t *b, const float *x, size_t n, uint32_t H,
                            const float *m, const float *dy, float *dx, float *dm)
{
    counts.mixer_backward++;
    int rc = dev("mixer_backward", "x", x, n * H * 4);
    rc = rc ? rc : dev("mixer_backward", "m", m, (size_t)H * 4);
    rc = rc ? rc : dev("mixer_backward", "dy", dy, n * H * 4);
    rc = rc ? rc : dev("mixer_backward", "dx", dx, n * H * 4);
    rc = rc || !dm ? rc : dev("mixer_backward", "dm", dm, (size_t)H * 4);
    GUARDED(rc, cpu->mixer_backward(b, sh(x), n, H, sh(m), sh(dy), sh(dx), sh(dm)));
}

static int g_gate_backward(moe_run_backend_t *b, const float *x, size_t n, uint32_t H,
                           const float *Wg, uint32_t E, uint32_t K, const int32_t *ids,
                           const float *w, const float *dw, float *dx, float *dWg)
{
    counts.gate_backward++;
    const char *op = "gate_backward";
    int rc = dev(op, "x", x, n * H * 4);
    rc = rc ? rc : dev(op, "Wg", Wg, (size_t)H * E * 4);
    rc = rc ? rc : dev(op, "ids", ids, n * K * 4);
    rc = rc ? rc : dev(op, "w", w, n * K * 4);
    rc = rc ? rc : dev(op, "dw", dw, n * K * 4);
    rc = rc || !dx ? rc : dev(op, "dx", dx, n * H * 4);
    rc = rc || !dWg ? rc : dev(op, "dWg", dWg, (size_t)H * E * 4);
    GUARDED(rc, cpu->gate_backward(b, sh(x), n, H, sh(Wg), E, K, sh(ids), sh(w), sh(dw),
                                       sh(dx), sh(dWg)));
}

static int g_ffn_backward_grouped(moe_run_backend_t *b, const float *x, const float *a,
                                  uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                                  int expert, const float *const *W1, const float *const *W2,
                                  const float *dy, const float *s, float *dx,
                                  float *const *dW1, float *const *dW2, float *ds)
{
    counts.ffn_backward_grouped++;
    const char *op = "ffn_backward_grouped";
    size_t C = moe_kern_w1_cols(F, expert);
    int rc = ffn_args(op, x, G, off, H, F, expert, W1, W2, dy, a);
    rc = rc || !G ? rc : rows(op, "s", s, G, off, 1);
    rc = rc || !G ? rc : rows(op, "dx", dx, G, off, H);
    rc = rc || !G ? rc : rows(op, "ds", ds, G, off, 1);
    rc = rc ? rc : table(op, "dW1", (const float *const *)dW1, G, off, H * C);
    rc = rc ? rc : table(op, "dW2", (const float *const *)dW2, G, off, (size_t)F * H);
    GUARDED(rc, cpu->ffn_backward_grouped(b, sh(x), sh(a), G, off, H, F, expert,
                                          SHT(0, W1, G), SHT(1, W2, G), sh(dy), sh(s),
                                          sh(dx), SHW(2, dW1, G), SHW(3, dW2, G), sh(ds)));
}

static moe_run_backend_ops_t ops;

moe_run_backend_t *guard_backend(moe_run_comm_t *c, char *errbuf, size_t errlen)
{
    if (arena_init()) {
        snprintf(errbuf, errlen, "guard: cannot reserve the arena");
        return NULL;
    }
    moe_run_backend_t *b = moe_run_backend_cpu(c, errbuf, errlen);
    if (!b)
        return NULL;
    cpu = b->ops;
    ops = *cpu;
    ops.alloc = g_alloc;
    ops.free = g_free;
    ops.upload = g_upload;
    ops.download = g_download;
    ops.copy = g_copy;
    ops.zero = g_zero;
    ops.mixer = g_mixer;
    ops.gate = g_gate;
    ops.gather = g_gather;
    ops.scatter_add = g_scatter_add;
    ops.ffn_grouped = g_ffn_grouped;
    ops.ffn_grouped_act = g_ffn_grouped_act;
    ops.pack = g_pack;
    ops.unpack = g_unpack;
    ops.alltoallv = g_alltoallv;
    ops.ialltoallv = g_ialltoallv;
    ops.ialltoallv_group = cpu->ialltoallv_group ? g_ialltoallv_group : NULL;
    ops.wait = g_wait;
    ops.test = NULL; /* its ialltoallv has completed when it returns */
    ops.allgather = g_allgather;
    ops.allreduce = g_allreduce;
    ops.loss_grad = g_loss_grad;
    ops.update = g_update;
    ops.mixer_backward = g_mixer_backward;
    ops.gate_backward = g_gate_backward;
    ops.ffn_backward_grouped = g_ffn_backward_grouped;
    b->ops = &ops;
    b->name = "guard";
    return b;
}
