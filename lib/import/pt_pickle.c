/* import/pt_pickle.c -- torch.save archives: data.pkl's pickle subset into values and tensors. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "pt_internal.h"
#include "util_internal.h"

/*
 * torch.save (torch/serialization.py, new zipfile format) writes a zip whose members share one
 * folder, ARCHIVE ("archive", or the base name of the saved file): ARCHIVE/data.pkl, a pickle of
 * protocol 2 (DEFAULT_PROTOCOL) of the saved object, ARCHIVE/data/KEY holding the raw bytes of
 * each storage, ARCHIVE/byteorder ("little" or "big"; absent in old files: little) and
 * ARCHIVE/version. A tensor pickles through its __reduce_ex__ as
 *   REDUCE(GLOBAL torch._utils._rebuild_tensor_v2,
 *          (storage, storage_offset, size tuple, stride tuple, requires_grad,
 *           collections.OrderedDict() [, metadata]))
 * with the storage a persistent id (BINPERSID) of the tuple
 *   ('storage', GLOBAL torch.<Type>Storage, KEY, location, numel).
 * Python's pickler writes dicts as EMPTY_DICT [BINPUT] MARK k v ... SETITEMS (SETITEM for one),
 * lists likewise with APPENDS/APPEND, tuples as EMPTY_TUPLE, TUPLE1..3 or MARK ... TUPLE,
 * integers as BININT1/BININT2/BININT/LONG1, floats as BINFLOAT, str as BINUNICODE, and memoizes
 * with BINPUT/LONG_BINPUT (BINGET/LONG_BINGET on repeats). That is the subset read here; any
 * other opcode is named in the error. Values live in an arena freed at once; strings point into
 * data.pkl, storages into their member (or its inflated copy).
 */

#define ARENA_CHUNK 1024

typedef struct arena_blk {
    struct arena_blk *next;
    size_t used;
    pt_val_t v[ARENA_CHUNK];
} arena_blk_t;

struct pt_file {
    pt_zip_t zip;
    char name[256];       /* archive folder */
    int big;              /* byteorder */
    const uint8_t *pkl;
    size_t pkl_n;
    uint8_t **owned;      /* inflated members */
    const uint8_t **mdata; /* per member: its bytes once read (storages shared by tensors) */
    size_t nowned, owned_cap;
    arena_blk_t *arena;
    const pt_val_t *root;
    /* the machine */
    pt_val_t **stack;
    size_t sp, stack_cap;
    size_t *marks;
    size_t nmarks, marks_cap;
    pt_val_t **memo;
    size_t memo_cap;
    char *err;
    size_t errlen;
};

static const struct {
    uint8_t op;
    const char *name;
} op_names[] = {
    {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"},
    {'F', "FLOAT"}, {'I', "INT"}, {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"},
    {'M', "BININT2"}, {'N', "NONE"}, {'P', "PERSID"}, {'Q', "BINPERSID"}, {'R', "REDUCE"},
    {'S', "STRING"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"}, {'V', "UNICODE"},
    {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"}, {'c', "GLOBAL"}, {'d', "DICT"},
    {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"}, {'i', "INST"},
    {'j', "LONG_BINGET"}, {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"},
    {'q', "BINPUT"}, {'r', "LONG_BINPUT"}, {'s', "SETITEM"}, {'t', "TUPLE"},
    {')', "EMPTY_TUPLE"}, {'u', "SETITEMS"}, {'G', "BINFLOAT"}, {0x80, "PROTO"},
    {0x81, "NEWOBJ"}, {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"}, {0x85, "TUPLE1"},
    {0x86, "TUPLE2"}, {0x87, "TUPLE3"}, {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"},
    {0x8a, "LONG1"}, {0x8b, "LONG4"}, {'B', "BINBYTES"}, {'C', "SHORT_BINBYTES"},
    {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"}, {0x8e, "BINBYTES8"},
    {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"}, {0x95, "FRAME"}, {0x96, "BYTEARRAY8"},
    {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"},
};

static const char *op_name(uint8_t op)
{
    for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
        if (op_names[i].op == op)
            return op_names[i].name;
    return "not a pickle opcode";
}

static const struct {
    const char *cls; /* "torch\n<Type>Storage" */
    int dtype;
    unsigned elem;
} storage_types[] = {
    {"torch\nByteStorage", PT_U8, 1},     {"torch\nCharStorage", PT_I8, 1},
    {"torch\nShortStorage", PT_I16, 2},   {"torch\nIntStorage", PT_I32, 4},
    {"torch\nLongStorage", PT_I64, 8},    {"torch\nBoolStorage", PT_BOOL8, 1},
    {"torch\nHalfStorage", PT_F16, 2},    {"torch\nBFloat16Storage", PT_BF16, 2},
    {"torch\nFloatStorage", PT_F32, 4},   {"torch\nDoubleStorage", PT_F64, 8},
};

static const char *const dtype_names[] = {"uint8", "int8", "int16", "int32", "int64", "bool",
                                          "float16", "bfloat16", "float32", "float64"};
static const char *const kind_names[] = {"None", "bool", "int", "float", "str", "tuple", "list",
                                         "dict", "global", "storage", "tensor"};

const char *pt_dtype_name(int dtype)
{
    return dtype >= 0 && dtype <= PT_F64 ? dtype_names[dtype] : "?";
}

const char *pt_kind_name(int kind)
{
    return kind >= 0 && kind <= PT_TENSOR ? kind_names[kind] : "?";
}

static int fail(pt_file_t *f, int st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(pt_file_t *f, int st, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return util_errf(f->err, f->errlen, st, "%s", msg);
}

static pt_val_t *new_val(pt_file_t *f, int kind)
{
    if (!f->arena || f->arena->used == ARENA_CHUNK) {
        arena_blk_t *b = malloc(sizeof *b);
        if (!b)
            return NULL;
        b->next = f->arena;
        b->used = 0;
        f->arena = b;
    }
    pt_val_t *v = &f->arena->v[f->arena->used++];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    return v;
}

static int push(pt_file_t *f, pt_val_t *v)
{
    if (!v || util_grow((void **)&f->stack, &f->stack_cap, f->sp + 1, sizeof *f->stack) < 0)
        return fail(f, MOE_ENOMEM, "out of memory");
    f->stack[f->sp++] = v;
    return 0;
}

/* Append n values to a list, tuple or dict (pairs: n even). */
static int add_items(pt_file_t *f, pt_val_t *c, pt_val_t *const *v, size_t n)
{
    size_t have = c->kind == PT_DICT ? 2 * c->n : c->n;
    /* Not util_grow's first 64 entries: a dump holds tuples of 2 to 5 by the thousand. */
    if (have + n > c->cap) {
        size_t cap = c->cap * 2 > have + n ? c->cap * 2 : have + n;
        pt_val_t **items = realloc(c->items, cap * sizeof *items);
        if (!items)
            return fail(f, MOE_ENOMEM, "out of memory");
        c->items = items;
        c->cap = cap;
    }
    memcpy(c->items + have, v, n * sizeof *v);
    c->n += c->kind == PT_DICT ? n / 2 : n;
    return 0;
}

/* The stack above the last MARK (which is popped); *n items start at the returned index. */
static int pop_mark(pt_file_t *f, size_t *at, uint8_t op)
{
    if (f->nmarks == 0)
        return fail(f, MOE_EFORMAT, "data.pkl: %s without MARK", op_name(op));
    *at = f->marks[--f->nmarks];
    return 0;
}

static int need_stack(pt_file_t *f, size_t n, uint8_t op)
{
    size_t floor = f->nmarks ? f->marks[f->nmarks - 1] : 0;
    if (f->sp < floor + n)
        return fail(f, MOE_EFORMAT, "data.pkl: %s on a stack too short", op_name(op));
    return 0;
}

/* Build a tuple of the stack items from `at` on. */
static int make_tuple(pt_file_t *f, size_t at)
{
    pt_val_t *t = new_val(f, PT_TUPLE);
    if (!t)
        return fail(f, MOE_ENOMEM, "out of memory");
    int st = add_items(f, t, f->stack + at, f->sp - at);
    f->sp = at;
    return st < 0 ? st : push(f, t);
}

static int int_of(const pt_val_t *v, int64_t *out)
{
    if (!v || (v->kind != PT_INT && v->kind != PT_BOOL))
        return -1;
    *out = v->i;
    return 0;
}

/* BINPERSID ('storage', torch.XStorage, key, location, numel) -> the storage's bytes. */
static int persistent_load(pt_file_t *f, const pt_val_t *pid, pt_val_t **out)
{
    int64_t numel;
    *out = NULL;
    if (pid->kind != PT_TUPLE || pid->n != 5 || !pt_str_eq(pid->items[0], "storage") ||
        pid->items[1]->kind != PT_GLOBAL || pid->items[2]->kind != PT_STR ||
        int_of(pid->items[4], &numel) < 0 || numel < 0)
        return fail(f, MOE_EFORMAT, "data.pkl: a persistent id is not ('storage', type, key, "
                    "location, numel)");
    const pt_val_t *cls = pid->items[1], *key = pid->items[2];
    size_t t = 0, nt = sizeof storage_types / sizeof storage_types[0];
    while (t < nt && !(strlen(storage_types[t].cls) == cls->n &&
                       memcmp(storage_types[t].cls, cls->s, cls->n) == 0))
        t++;
    if (t == nt) { /* GLOBAL names are "module\nname": shown as module.name, one line */
        const char *nl = memchr(cls->s, '\n', cls->n);
        int ml = nl ? (int)(nl - cls->s) : 0, nlen = (int)cls->n - (nl ? ml + 1 : 0);
        return fail(f, MOE_EFORMAT, "data.pkl: unsupported storage type '%.*s%s%.*s'",
                    ml < 60 ? ml : 60, cls->s, nl ? "." : "", nlen < 60 ? nlen : 60,
                    nl ? nl + 1 : cls->s);
    }
    /* The member's name from the whole key (a key cut short could name another member);
     * messages show at most 60 bytes of it. */
    int kl = (int)(key->n < 60 ? key->n : 60);
    const char *more = key->n > 60 ? "..." : "";
    size_t cap = strlen(f->name) + key->n + 8;
    char *name = malloc(cap);
    if (!name)
        return fail(f, MOE_ENOMEM, "out of memory");
    int len = snprintf(name, cap, "%s/data/%.*s", f->name, (int)key->n, key->s);
    long m = memchr(key->s, '\0', key->n) ? -1 : pt_zip_find(&f->zip, name, (size_t)len);
    free(name);
    if (m < 0)
        return fail(f, MOE_EFORMAT, "storage '%.*s%s': no member '%s/data/%.*s%s' in the "
                    "archive", kl, key->s, more, f->name, kl, key->s, more);
    if ((uint64_t)numel > f->zip.ents[m].usize / storage_types[t].elem)
        return fail(f, MOE_EFORMAT, "storage '%.*s%s': %lld elements of %u bytes, but "
                    "'%s/data/%.*s%s' holds %llu bytes", kl, key->s, more, (long long)numel,
                    storage_types[t].elem, f->name, kl, key->s, more,
                    (unsigned long long)f->zip.ents[m].usize);
    const uint8_t *data = f->mdata[m];
    uint8_t *owned = NULL;
    int st = data ? 0 : pt_zip_data(&f->zip, (size_t)m, &data, &owned, f->err, f->errlen);
    if (st < 0)
        return st;
    f->mdata[m] = data;
    if (owned) {
        if (util_grow((void **)&f->owned, &f->owned_cap, f->nowned + 1, sizeof *f->owned) < 0) {
            free(owned);
            return fail(f, MOE_ENOMEM, "out of memory");
        }
        f->owned[f->nowned++] = owned;
    }
    pt_val_t *v = new_val(f, PT_STORAGE);
    pt_tensor_t *s = v ? (v->t = calloc(1, sizeof *v->t)) : NULL;
    if (!s)
        return fail(f, MOE_ENOMEM, "out of memory");
    s->dtype = storage_types[t].dtype;
    s->elem = storage_types[t].elem;
    s->data = data;
    s->numel = (uint64_t)numel;
    s->big = f->big;
    *out = v;
    return 0;
}

/* A tuple of non-negative ints into dims[]; returns the count or -1. */
static int dims_of(const pt_val_t *t, uint64_t *dims)
{
    if (!t || t->kind != PT_TUPLE || t->n > PT_MAX_DIMS)
        return -1;
    for (size_t i = 0; i < t->n; i++) {
        int64_t v;
        if (int_of(t->items[i], &v) < 0 || v < 0)
            return -1;
        dims[i] = (uint64_t)v;
    }
    return (int)t->n;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]). */
static int rebuild_tensor(pt_file_t *f, const pt_val_t *args, pt_val_t **out)
{
    int64_t off;
    if (args->kind != PT_TUPLE || args->n < 4 || args->items[0]->kind != PT_STORAGE ||
        int_of(args->items[1], &off) < 0 || off < 0)
        return fail(f, MOE_EFORMAT, "data.pkl: bad arguments to _rebuild_tensor_v2");
    pt_val_t *v = new_val(f, PT_TENSOR);
    pt_tensor_t *t = v ? (v->t = malloc(sizeof *v->t)) : NULL;
    if (!t)
        return fail(f, MOE_ENOMEM, "out of memory");
    *t = *args->items[0]->t;
    t->offset = (uint64_t)off;
    int nd = dims_of(args->items[2], t->shape), ns = dims_of(args->items[3], t->stride);
    if (nd < 0 || ns != nd)
        return fail(f, MOE_EFORMAT, "data.pkl: tensor size and stride are not tuples of as "
                    "many non-negative ints (at most %d)", PT_MAX_DIMS);
    t->ndim = nd;
    /* The last element addressed must lie in the storage (an empty tensor addresses none). */
    uint64_t last = t->offset, empty = 0;
    for (int d = 0; d < nd; d++) {
        empty |= t->shape[d] == 0;
        if (t->shape[d] > 1 && t->stride[d] > (UINT64_MAX - last) / (t->shape[d] - 1))
            last = UINT64_MAX;
        else if (t->shape[d] > 1)
            last += (t->shape[d] - 1) * t->stride[d];
    }
    if (!empty && last >= t->numel)
        return fail(f, MOE_EFORMAT, "data.pkl: tensor reaches past its storage of %llu "
                    "elements", (unsigned long long)t->numel);
    /* A view of more elements than its storage repeats some (stride 0: torch's expand()):
     * legal in torch, but then the shape, not the file, would bound a reader's work. */
    uint64_t count = empty ? 0 : 1;
    for (int d = 0; d < nd && count; d++)
        count = count > t->numel / t->shape[d] ? UINT64_MAX : count * t->shape[d];
    if (count > t->numel)
        return fail(f, MOE_EFORMAT, "data.pkl: tensor view of more elements than its storage "
                    "of %llu (a stride-0 or overlapping view, as expand() makes): save it "
                    "with .contiguous()", (unsigned long long)t->numel);
    *out = v;
    return 0;
}

static int global_is(const pt_val_t *g, const char *name)
{
    return g->kind == PT_GLOBAL && strlen(name) == g->n && memcmp(g->s, name, g->n) == 0;
}

static int reduce(pt_file_t *f)
{
    if (need_stack(f, 2, 'R') < 0)
        return MOE_EFORMAT;
    pt_val_t *fn = f->stack[f->sp - 2], *args = f->stack[f->sp - 1], *v = NULL;
    f->sp -= 2;
    int st = 0;
    if (global_is(fn, "torch._utils\n_rebuild_tensor_v2"))
        st = rebuild_tensor(f, args, &v);
    else if (global_is(fn, "collections\nOrderedDict") && args->kind == PT_TUPLE && !args->n)
        st = (v = new_val(f, PT_DICT)) ? 0 : fail(f, MOE_ENOMEM, "out of memory");
    else if (fn->kind == PT_GLOBAL) {
        const char *nl = memchr(fn->s, '\n', fn->n);
        int ml = (int)(nl - fn->s), nlen = (int)(fn->n - (size_t)ml - 1);
        st = fail(f, MOE_EFORMAT, "data.pkl: unsupported callable %.*s.%.*s", ml < 60 ? ml : 60,
                  fn->s, nlen < 60 ? nlen : 60, nl + 1);
    } else
        st = fail(f, MOE_EFORMAT, "data.pkl: REDUCE of a %s", pt_kind_name(fn->kind));
    return st < 0 ? st : push(f, v);
}

static int memo_put(pt_file_t *f, uint64_t idx)
{
    if (f->sp == 0 || (f->nmarks && f->marks[f->nmarks - 1] == f->sp))
        return fail(f, MOE_EFORMAT, "data.pkl: memo put of an empty stack");
    /* Python numbers the memo from 0 in order: an index past the pickle's length is bogus
     * (and would make the memo table as large as the index says). */
    if (idx >= f->pkl_n)
        return fail(f, MOE_EFORMAT, "data.pkl: memo index %llu out of range",
                    (unsigned long long)idx);
    size_t old = f->memo_cap;
    if (idx >= f->memo_cap) {
        if (util_grow((void **)&f->memo, &f->memo_cap, (size_t)idx + 1, sizeof *f->memo) < 0)
            return fail(f, MOE_ENOMEM, "out of memory");
        memset(f->memo + old, 0, (f->memo_cap - old) * sizeof *f->memo);
    }
    f->memo[idx] = f->stack[f->sp - 1];
    return 0;
}

static int memo_get(pt_file_t *f, uint64_t idx)
{
    if (idx >= f->memo_cap || !f->memo[idx])
        return fail(f, MOE_EFORMAT, "data.pkl: memo index %llu was never stored",
                    (unsigned long long)idx);
    return push(f, f->memo[idx]);
}

/* Run the pickle machine over data.pkl to its STOP. */
static int unpickle(pt_file_t *f)
{
    const uint8_t *p = f->pkl, *end = p + f->pkl_n;
#define NEED(k)                                                                                \
    do {                                                                                       \
        if ((size_t)(end - p) < (size_t)(k))                                                   \
            return fail(f, MOE_EFORMAT, "data.pkl: truncated at byte %zu (%s)", at,           \
                        op_name(op));                                                          \
    } while (0)
    while (p < end) {
        uint8_t op = *p++;
        size_t at = (size_t)(p - f->pkl) - 1, len;
        int st = 0;
        pt_val_t *v;
        switch (op) {
        case 0x80: /* PROTO */
            NEED(1);
            if (*p < 2 || *p > 5)
                return fail(f, MOE_EFORMAT, "data.pkl: pickle protocol %u", *p);
            p++;
            break;
        case '.': /* STOP */
            if (f->sp != 1 || f->nmarks)
                return fail(f, MOE_EFORMAT, "data.pkl: STOP with %zu values on the stack",
                            f->sp);
            f->root = f->stack[0];
            return 0;
        case '(': /* MARK */
            if (util_grow((void **)&f->marks, &f->marks_cap, f->nmarks + 1, sizeof *f->marks))
                return fail(f, MOE_ENOMEM, "out of memory");
            f->marks[f->nmarks++] = f->sp;
            break;
        case 'N': st = push(f, new_val(f, PT_NONE)); break;
        case 0x88: case 0x89: /* NEWTRUE, NEWFALSE */
            if ((v = new_val(f, PT_BOOL)) != NULL)
                v->i = op == 0x88;
            st = push(f, v);
            break;
        case 'K': case 'M': case 'J': /* BININT1, BININT2, BININT */
            len = op == 'K' ? 1 : op == 'M' ? 2 : 4;
            NEED(len);
            if ((v = new_val(f, PT_INT)) != NULL) {
                uint32_t u = 0;
                for (size_t i = len; i-- > 0;)
                    u = u << 8 | p[i];
                v->i = op == 'J' ? (int64_t)(int32_t)u : (int64_t)u;
            }
            p += len;
            st = push(f, v);
            break;
        case 0x8a: /* LONG1: n bytes of little-endian two's complement */
            NEED(1);
            len = *p++;
            NEED(len);
            if (len > 8)
                return fail(f, MOE_ERANGE, "data.pkl: integer of %zu bytes is too large", len);
            if ((v = new_val(f, PT_INT)) != NULL) {
                uint64_t u = 0;
                for (size_t i = len; i-- > 0;)
                    u = u << 8 | p[i];
                if (len > 0 && len < 8 && (p[len - 1] & 0x80))
                    u |= ~0ull << (8 * len);
                v->i = (int64_t)u;
            }
            p += len;
            st = push(f, v);
            break;
        case 'G': /* BINFLOAT: big-endian double */
            NEED(8);
            if ((v = new_val(f, PT_FLOAT)) != NULL) {
                uint64_t u = 0;
                for (int i = 0; i < 8; i++)
                    u = u << 8 | p[i];
                memcpy(&v->f, &u, sizeof v->f);
            }
            p += 8;
            st = push(f, v);
            break;
        case 'X': case 'U': /* BINUNICODE, SHORT_BINSTRING */
            NEED(op == 'X' ? 4 : 1);
            len = op == 'X' ? (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 |
                                  (size_t)p[3] << 24
                            : p[0];
            p += op == 'X' ? 4 : 1;
            NEED(len);
            if ((v = new_val(f, PT_STR)) != NULL) {
                v->s = (const char *)p;
                v->n = len;
            }
            p += len;
            st = push(f, v);
            break;
        case 'c': { /* GLOBAL "module\nname\n" */
            const uint8_t *nl1 = memchr(p, '\n', (size_t)(end - p));
            const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(end - nl1 - 1)) : NULL;
            if (!nl2)
                return fail(f, MOE_EFORMAT, "data.pkl: truncated GLOBAL at byte %zu", at);
            if ((v = new_val(f, PT_GLOBAL)) != NULL) {
                v->s = (const char *)p;
                v->n = (size_t)(nl2 - p);
            }
            p = nl2 + 1;
            st = push(f, v);
            break;
        }
        case '}': st = push(f, new_val(f, PT_DICT)); break;
        case ']': st = push(f, new_val(f, PT_LIST)); break;
        case ')': st = push(f, new_val(f, PT_TUPLE)); break;
        case 0x85: case 0x86: case 0x87: /* TUPLE1..3 */
            len = (size_t)(op - 0x84);
            if ((st = need_stack(f, len, op)) == 0)
                st = make_tuple(f, f->sp - len);
            break;
        case 't': /* TUPLE */
            if ((st = pop_mark(f, &len, op)) == 0)
                st = make_tuple(f, len);
            break;
        case 'a': case 's': /* APPEND, SETITEM */
            len = op == 'a' ? 1 : 2;
            if ((st = need_stack(f, len + 1, op)) < 0)
                break;
            v = f->stack[f->sp - len - 1];
            if (v->kind != (op == 'a' ? PT_LIST : PT_DICT))
                return fail(f, MOE_EFORMAT, "data.pkl: %s to a %s", op_name(op),
                            pt_kind_name(v->kind));
            st = add_items(f, v, f->stack + f->sp - len, len);
            f->sp -= len;
            break;
        case 'e': case 'u': /* APPENDS, SETITEMS */
            if ((st = pop_mark(f, &len, op)) < 0)
                break;
            if (len == 0 || ((f->nmarks && f->marks[f->nmarks - 1] >= len)))
                return fail(f, MOE_EFORMAT, "data.pkl: %s with no container", op_name(op));
            v = f->stack[len - 1];
            if (v->kind != (op == 'e' ? PT_LIST : PT_DICT) || (op == 'u' && (f->sp - len) % 2))
                return fail(f, MOE_EFORMAT, "data.pkl: %s to a %s", op_name(op),
                            pt_kind_name(v->kind));
            st = add_items(f, v, f->stack + len, f->sp - len);
            f->sp = len;
            break;
        case 'Q': /* BINPERSID */
            if ((st = need_stack(f, 1, op)) < 0)
                break;
            if ((st = persistent_load(f, f->stack[f->sp - 1], &v)) == 0)
                f->stack[f->sp - 1] = v;
            break;
        case 'R': st = reduce(f); break;
        case 'q': case 'r': case 'h': case 'j': { /* BINPUT, LONG_BINPUT, BINGET, LONG_BINGET */
            len = op == 'q' || op == 'h' ? 1 : 4;
            NEED(len);
            uint64_t idx = 0;
            for (size_t i = len; i-- > 0;)
                idx = idx << 8 | p[i];
            p += len;
            st = op == 'q' || op == 'r' ? memo_put(f, idx) : memo_get(f, idx);
            break;
        }
        default:
            return fail(f, MOE_EFORMAT, "data.pkl: unsupported pickle opcode 0x%02x (%s) at "
                        "byte %zu", op, op_name(op), at);
        }
        if (st < 0)
            return st;
    }
#undef NEED
    return fail(f, MOE_EFORMAT, "data.pkl: truncated (no STOP)");
}

/* The members' common folder, byteorder and data.pkl. */
static int open_members(pt_file_t *f)
{
    if (f->zip.nents == 0)
        return fail(f, MOE_EFORMAT, "empty zip archive");
    const pt_zip_ent_t *e0 = &f->zip.ents[0];
    const char *slash = memchr(e0->name, '/', e0->name_len);
    size_t nl = slash ? (size_t)(slash - e0->name) : 0;
    if (!slash || nl >= sizeof f->name - 20 || memchr(e0->name, '\0', nl))
        return fail(f, MOE_EFORMAT, "not a torch.save archive (its first member '%.*s' lies in "
                    "no folder)", (int)(e0->name_len < 80 ? e0->name_len : 80), e0->name);
    memcpy(f->name, e0->name, nl);
    f->name[nl] = '\0';
    char path[300];
    int len = snprintf(path, sizeof path, "%s/data.pkl", f->name);
    long m = pt_zip_find(&f->zip, path, (size_t)len);
    if (m < 0)
        return fail(f, MOE_EFORMAT, "not a torch.save archive (no member '%s')", path);
    uint8_t *owned;
    int st = pt_zip_data(&f->zip, (size_t)m, &f->pkl, &owned, f->err, f->errlen);
    if (st < 0)
        return st;
    f->pkl_n = (size_t)f->zip.ents[m].usize;
    if (owned) {
        if (util_grow((void **)&f->owned, &f->owned_cap, 1, sizeof *f->owned) < 0) {
            free(owned);
            return fail(f, MOE_ENOMEM, "out of memory");
        }
        f->owned[f->nowned++] = owned;
    }
    len = snprintf(path, sizeof path, "%s/byteorder", f->name);
    if ((m = pt_zip_find(&f->zip, path, (size_t)len)) >= 0) {
        const uint8_t *b;
        if ((st = pt_zip_data(&f->zip, (size_t)m, &b, &owned, f->err, f->errlen)) < 0)
            return st;
        size_t n = (size_t)f->zip.ents[m].usize;
        int little = n == 6 && memcmp(b, "little", 6) == 0, big = n == 3 && !memcmp(b, "big", 3);
        free(owned);
        if (!little && !big)
            return fail(f, MOE_EFORMAT, "'%s' is neither 'little' nor 'big'", path);
        f->big = big;
    }
    return 0;
}

pt_file_t *pt_open(const uint8_t *buf, size_t n, int *status, char *err, size_t errlen)
{
    pt_file_t *f = calloc(1, sizeof *f);
    if (!f) {
        *status = util_errf(err, errlen, MOE_ENOMEM, "out of memory");
        return NULL;
    }
    f->err = err;
    f->errlen = errlen;
    int st = pt_zip_open(&f->zip, buf, n, err, errlen);
    if (st == 0 && !(f->mdata = calloc(f->zip.nents + 1, sizeof *f->mdata)))
        st = util_errf(err, errlen, MOE_ENOMEM, "out of memory");
    if (st == 0)
        st = open_members(f);
    if (st == 0)
        st = unpickle(f);
    /* The machine's tables are not needed once the root is built. */
    free(f->stack);
    free(f->marks);
    free(f->memo);
    f->stack = NULL;
    f->marks = NULL;
    f->memo = NULL;
    *status = st;
    if (st < 0) {
        pt_free(f);
        return NULL;
    }
    return f;
}

const pt_val_t *pt_root(const pt_file_t *f)
{
    return f->root;
}

const char *pt_archive_name(const pt_file_t *f)
{
    return f->name;
}

void pt_free(pt_file_t *f)
{
    if (!f)
        return;
    for (arena_blk_t *b = f->arena, *next; b; b = next) {
        next = b->next;
        for (size_t i = 0; i < b->used; i++) {
            free(b->v[i].items);
            free(b->v[i].t);
        }
        free(b);
    }
    for (size_t i = 0; i < f->nowned; i++)
        free(f->owned[i]);
    free(f->owned);
    free(f->mdata);
    free(f->stack);
    free(f->marks);
    free(f->memo);
    pt_zip_free(&f->zip);
    free(f);
}

int pt_str_eq(const pt_val_t *v, const char *s)
{
    return v && v->kind == PT_STR && strlen(s) == v->n && memcmp(v->s, s, v->n) == 0;
}

const pt_val_t *pt_dict_get(const pt_val_t *d, const char *key)
{
    if (!d || d->kind != PT_DICT)
        return NULL;
    /* The last of repeated keys wins, as in Python. */
    for (size_t i = d->n; i-- > 0;)
        if (pt_str_eq(d->items[2 * i], key))
            return d->items[2 * i + 1];
    return NULL;
}

int pt_tensor_is_int(const pt_val_t *v)
{
    return v->kind == PT_TENSOR && v->t->dtype <= PT_I64;
}

uint64_t pt_tensor_bits(const pt_tensor_t *t, const uint64_t *idx)
{
    uint64_t e = t->offset;
    for (int d = 0; d < t->ndim; d++)
        e += idx[d] * t->stride[d];
    const uint8_t *b = t->data + e * t->elem;
    uint64_t u = 0;
    for (unsigned j = 0; j < t->elem; j++)
        u = u << 8 | b[t->big ? j : t->elem - 1 - j];
    return u;
}

int64_t pt_tensor_i64(const pt_tensor_t *t, const uint64_t *idx)
{
    uint64_t u = pt_tensor_bits(t, idx);
    if (t->dtype != PT_U8 && t->elem < 8 && (u >> (8 * t->elem - 1)) & 1)
        u |= ~0ull << (8 * t->elem); /* sign extension */
    return (int64_t)u;
}
