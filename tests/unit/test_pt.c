/* tests/unit/test_pt.c -- the torch.save reader (zip + pickle subset): the SGLang samples that
 * tests/data/import/make_sglang_pt.py writes, and archives built here byte by byte. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "import/pt_internal.h"
#include "moe/moe.h"
#include "unit.h"

static uint8_t *slurp(const char *name, size_t *n)
{
    char path[1024];
    const char *top = getenv("top_srcdir");
    snprintf(path, sizeof path, "%s/tests/data/import/%s", top ? top : ".", name);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    rewind(fp);
    uint8_t *b = malloc((size_t)len);
    *n = b ? fread(b, 1, (size_t)len, fp) : 0;
    fclose(fp);
    return b;
}

static int64_t at3(const pt_val_t *v, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t idx[3] = {a, b, c};
    return pt_tensor_i64(v->t, idx);
}

static int64_t at2(const pt_val_t *v, uint64_t a, uint64_t b)
{
    uint64_t idx[2] = {a, b};
    return pt_tensor_i64(v->t, idx);
}

/* The script's per_token object, whatever the container (stored, deflated, strided map). */
static void check_sample(const char *file, const char *archive)
{
    size_t n = 0;
    uint8_t *buf = slurp(file, &n);
    CHECK(buf != NULL);
    char err[256] = "";
    int st;
    pt_file_t *f = pt_open(buf, n, &st, err, sizeof err);
    CHECK_STR(err, "");
    CHECK_EQ_INT(st, 0);
    if (!f) {
        free(buf);
        return;
    }
    CHECK_STR(pt_archive_name(f), archive);
    const pt_val_t *root = pt_root(f), *recs = pt_dict_get(root, "records");
    CHECK(recs && recs->kind == PT_LIST && recs->n == 2);
    const pt_val_t *r0 = recs->items[0], *r1 = recs->items[1];
    CHECK_EQ_INT(pt_dict_get(r0, "forward_pass_id")->i, 7);
    CHECK_EQ_INT(pt_dict_get(r1, "forward_pass_id")->i, 8);
    CHECK(pt_str_eq(pt_dict_get(r0, "gatherer_key"), "primary"));
    CHECK_EQ_INT(pt_dict_get(r1, "extend_seq_lens")->kind, PT_NONE);
    const pt_val_t *lens = pt_dict_get(r0, "extend_seq_lens");
    CHECK(lens->kind == PT_LIST && lens->n == 2 && lens->items[0]->i == 3 &&
          lens->items[1]->i == 2);
    const pt_val_t *ids = pt_dict_get(r0, "input_ids");
    CHECK(ids->n == 5 && ids->items[4]->i == 1004); /* BININT2 */
    const pt_val_t *misc = pt_dict_get(r0, "misc_objects");
    CHECK(misc->kind == PT_LIST && misc->n == 0);
    const pt_val_t *t = pt_dict_get(r0, "topk_ids_of_layer");
    CHECK(t->kind == PT_TENSOR && t->t->dtype == PT_I32 && t->t->ndim == 3);
    CHECK(t->t->shape[0] == 4 && t->t->shape[1] == 5 && t->t->shape[2] == 8);
    CHECK(t->t->stride[0] == 40 && t->t->stride[1] == 8 && t->t->stride[2] == 1);
    /* R0: layer l token t holds slots (t + l) % 6, (t + 2l + 1) % 6, then -1 */
    CHECK_EQ_INT(at3(t, 0, 0, 0), -1);
    CHECK_EQ_INT(at3(t, 1, 0, 0), 1);
    CHECK_EQ_INT(at3(t, 1, 0, 1), 3);
    CHECK_EQ_INT(at3(t, 1, 0, 2), -1);
    CHECK_EQ_INT(at3(t, 3, 2, 1), (2 + 7) % 6);
    CHECK_EQ_INT(at3(t, 2, 4, 1), 5);
    CHECK_EQ_INT(at3(t, 2, 4, 3), 0);
    const pt_val_t *m = pt_dict_get(root, "last_physical_to_logical_map");
    CHECK(m->kind == PT_TENSOR && m->t->ndim == 2 && m->t->shape[0] == 4 &&
          m->t->shape[1] == 6);
    static const int phys2log[4][6] = {
        {0, 1, 2, 3, 0, 1}, {0, 1, 2, 3, 3, 2}, {3, 2, 1, 0, 1, 1}, {0, 1, 2, 3, 0, 0}};
    int same = 1;
    for (int l = 0; l < 4; l++)
        for (int p = 0; p < 6; p++)
            same &= at2(m, (uint64_t)l, (uint64_t)p) == phys2log[l][p];
    CHECK(same);
    pt_free(f);
    free(buf);
}

/* ------------------------------------------------------------------ archives built here */

typedef struct member {
    const char *name;
    const void *data;
    size_t len;
} member_t;

static size_t put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    return 2;
}

static size_t put32(uint8_t *p, uint32_t v)
{
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
    return 4;
}

/* A stored zip of the members into out (cap bytes); returns its size. */
static size_t make_zip(uint8_t *out, const member_t *m, int nm)
{
    size_t o = 0, lho[8];
    for (int i = 0; i < nm; i++) {
        size_t nl = strlen(m[i].name);
        uint32_t crc = (uint32_t)crc32(0, m[i].data, (uInt)m[i].len);
        lho[i] = o;
        memcpy(out + o, "PK\3\4", 4);
        memset(out + o + 4, 0, 26);
        put16(out + o + 4, 20);
        put32(out + o + 14, crc);
        put32(out + o + 18, (uint32_t)m[i].len);
        put32(out + o + 22, (uint32_t)m[i].len);
        put16(out + o + 26, (uint32_t)nl);
        memcpy(out + o + 30, m[i].name, nl);
        memcpy(out + o + 30 + nl, m[i].data, m[i].len);
        o += 30 + nl + m[i].len;
    }
    size_t cd = o;
    for (int i = 0; i < nm; i++) {
        size_t nl = strlen(m[i].name);
        memcpy(out + o, "PK\1\2", 4);
        memset(out + o + 4, 0, 42);
        put32(out + o + 16, (uint32_t)crc32(0, m[i].data, (uInt)m[i].len));
        put32(out + o + 20, (uint32_t)m[i].len);
        put32(out + o + 24, (uint32_t)m[i].len);
        put16(out + o + 28, (uint32_t)nl);
        put32(out + o + 42, (uint32_t)lho[i]);
        memcpy(out + o + 46, m[i].name, nl);
        o += 46 + nl;
    }
    memcpy(out + o, "PK\5\6", 4);
    memset(out + o + 4, 0, 18);
    put16(out + o + 8, (uint32_t)nm);
    put16(out + o + 10, (uint32_t)nm);
    put32(out + o + 12, (uint32_t)(o - cd));
    put32(out + o + 16, (uint32_t)cd);
    return o + 22;
}

static uint8_t zbuf[1 << 16];

/* Open an archive of data.pkl = pkl (plus a storage member and byteorder when given); returns
 * the status, with the error in err. The file is freed unless *keep is wanted. */
static int open_pkl(const char *pkl, size_t len, const void *st0, size_t st0_len,
                    const char *order, char *err, pt_file_t **keep)
{
    member_t m[3] = {{"archive/data.pkl", pkl, len}, {"archive/data/0", st0, st0_len},
                     {"archive/byteorder", order, order ? strlen(order) : 0}};
    int nm = order ? 3 : st0 ? 2 : 1;
    size_t n = make_zip(zbuf, m, nm);
    int st;
    err[0] = '\0';
    pt_file_t *f = pt_open(zbuf, n, &st, err, 256);
    if (keep)
        *keep = f;
    else
        pt_free(f);
    return st;
}

#define PKL(s) s, sizeof s - 1

static void test_pickles(void)
{
    char err[256];
    pt_file_t *f;
    /* {'a': A, 'b': (1.5, True, None), 'c': A}, A = [-2, 300, 70000, -(2^40)] memoized, as
     * Python's pickle writes it with protocol 2 */
    static const char ok[] =
        "\x80\x02}q\x00(X\x01\x00\x00\x00" "aq\x01]q\x02(J\xfe\xff\xff\xffM,\x01Jp\x11\x01\x00"
        "\x8a\x06\x00\x00\x00\x00\x00\xff" "eX\x01\x00\x00\x00" "bG?\xf8\x00\x00\x00\x00\x00\x00"
        "\x88N\x87X\x01\x00\x00\x00" "ch\x02u.";
    CHECK_EQ_INT(open_pkl(PKL(ok), NULL, 0, NULL, err, &f), 0);
    CHECK_STR(err, "");
    if (f) {
        const pt_val_t *a = pt_dict_get(pt_root(f), "a"), *b = pt_dict_get(pt_root(f), "b");
        CHECK(a && a->kind == PT_LIST && a->n == 4);
        CHECK(a && a->items[0]->i == -2 && a->items[1]->i == 300 && a->items[2]->i == 70000);
        CHECK(a && a->items[3]->i == -(INT64_C(1) << 40));
        CHECK(b && b->kind == PT_TUPLE && b->n == 3 && b->items[0]->f == 1.5);
        CHECK(b && b->items[1]->kind == PT_BOOL && b->items[1]->i == 1);
        CHECK(b && b->items[2]->kind == PT_NONE);
        CHECK(pt_dict_get(pt_root(f), "c") == a);
        CHECK(pt_dict_get(pt_root(f), "d") == NULL);
        pt_free(f);
    }
    /* a big-endian int16 tensor of shape (2, 2) at offset 1 of a 5-element storage */
    static const char tens[] =
        "\x80\x02" "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
        "ctorch\nShortStorage\nX\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK\x05tQK\x01K\x02"
        "K\x02\x86K\x02K\x01\x86\x89" "ccollections\nOrderedDict\n)RtR.";
    static const uint8_t be16[10] = {0, 9, 0, 1, 0, 2, 0xff, 0xfd, 0x01, 0x00};
    CHECK_EQ_INT(open_pkl(PKL(tens), be16, sizeof be16, "big", err, &f), 0);
    CHECK_STR(err, "");
    if (f) {
        const pt_val_t *t = pt_root(f);
        CHECK(t->kind == PT_TENSOR && t->t->dtype == PT_I16 && t->t->ndim == 2);
        CHECK(at2(t, 0, 0) == 1 && at2(t, 0, 1) == 2 && at2(t, 1, 0) == -3 &&
              at2(t, 1, 1) == 256);
        pt_free(f);
    }
    /* the same storage too short: 5 int16 in 8 bytes */
    CHECK_EQ_INT(open_pkl(PKL(tens), be16, 8, "big", err, NULL), MOE_EFORMAT);
    CHECK_STR(err, "storage '0': 5 elements of 2 bytes, but 'archive/data/0' holds 8 bytes");
    CHECK_EQ_INT(open_pkl(PKL(tens), NULL, 0, NULL, err, NULL), MOE_EFORMAT);
    CHECK_STR(err, "storage '0': no member 'archive/data/0' in the archive");
    CHECK_EQ_INT(open_pkl(PKL(tens), be16, sizeof be16, "middle", err, NULL), MOE_EFORMAT);
    CHECK_STR(err, "'archive/byteorder' is neither 'little' nor 'big'");

    static const struct {
        const char *pkl;
        size_t len;
        const char *err;
    } bad[] = {
        {PKL("\x80\x02V1\n."), "data.pkl: unsupported pickle opcode 0x56 (UNICODE) at byte 2"},
        {PKL("\x80\x02\xff."), "data.pkl: unsupported pickle opcode 0xff (not a pickle opcode) "
                               "at byte 2"},
        {PKL("\x80\x02]q\x00"), "data.pkl: truncated (no STOP)"},
        {PKL("\x80\x02X\xff\x00\x00\x00" "ab."), "data.pkl: truncated at byte 2 (BINUNICODE)"},
        {PKL("\x80\x02h\x05."), "data.pkl: memo index 5 was never stored"},
        {PKL("\x80\x02Nr\xff\xff\xff\x7f."), "data.pkl: memo index 2147483647 out of range"},
        {PKL("\x80\x02NNe."), "data.pkl: APPENDS without MARK"},
        {PKL("\x80\x02(Ne."), "data.pkl: APPENDS with no container"},
        {PKL("\x80\x02}Na."), "data.pkl: APPEND to a dict"},
        {PKL("\x80\x02NN."), "data.pkl: STOP with 2 values on the stack"},
        {PKL("\x80\x02" "cos\nsystem\nX\x02\x00\x00\x00ls\x85R."),
         "data.pkl: unsupported callable os.system"},
        {PKL("\x80\x02K\x01\x85Q."), "data.pkl: a persistent id is not ('storage', type, key, "
                                     "location, numel)"},
        {PKL("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."),
         "data.pkl: integer of 9 bytes is too large"},
        {PKL("\x80\x09N."), "data.pkl: pickle protocol 9"},
        {PKL("\x80\x02\x86."), "data.pkl: TUPLE2 on a stack too short"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(open_pkl(bad[i].pkl, bad[i].len, NULL, 0, NULL, err, NULL), MOE_EFORMAT +
                     (strstr(bad[i].err, "too large") ? MOE_ERANGE - MOE_EFORMAT : 0));
        CHECK_STR(err, bad[i].err);
    }
}

static void test_zip(void)
{
    char err[256];
    int st;
    static const char pkl[] = "\x80\x02N.";
    member_t m[1] = {{"archive/data.pkl", pkl, sizeof pkl - 1}};
    size_t n = make_zip(zbuf, m, 1);
    pt_file_t *f = pt_open(zbuf, n, &st, err, sizeof err);
    CHECK(f && pt_root(f)->kind == PT_NONE);
    pt_free(f);
    /* the same archive with zip64 end records (PK\6\6, PK\6\7) and a saturated end record */
    uint8_t z64[512];
    size_t e = n - 22;
    memcpy(z64, zbuf, e);
    memcpy(z64 + e, "PK\6\6", 4);
    memset(z64 + e + 4, 0, 52);
    z64[e + 4] = 44;
    z64[e + 24] = z64[e + 32] = 1;                    /* entries */
    memcpy(z64 + e + 40, zbuf + e + 12, 4);          /* directory size */
    memcpy(z64 + e + 48, zbuf + e + 16, 4);          /* directory offset */
    memcpy(z64 + e + 56, "PK\6\7\0\0\0\0", 8);
    memset(z64 + e + 64, 0, 12);
    put32(z64 + e + 64, (uint32_t)e);                /* zip64 end record offset */
    z64[e + 72] = 1;
    memcpy(z64 + e + 76, zbuf + e, 22);
    put16(z64 + e + 76 + 8, 0xffff);
    put16(z64 + e + 76 + 10, 0xffff);
    put32(z64 + e + 76 + 12, 0xffffffffu);
    put32(z64 + e + 76 + 16, 0xffffffffu);
    f = pt_open(z64, e + 98, &st, err, sizeof err);
    CHECK(f && pt_root(f)->kind == PT_NONE);
    pt_free(f);
    put32(z64 + e + 64, 3); /* a locator pointing elsewhere */
    CHECK(pt_open(z64, e + 98, &st, err, sizeof err) == NULL);
    CHECK_STR(err, "bad zip64 end record offset");
    /* every cut is refused with one line, never read past the end */
    int refused = 1;
    for (size_t cut = 0; cut < n; cut++)
        if ((f = pt_open(zbuf, cut, &st, err, sizeof err)) != NULL || st >= 0 || !err[0] ||
            strchr(err, '\n')) {
            pt_free(f);
            refused = 0;
        }
    CHECK(refused);
    /* a flipped data byte fails the CRC */
    zbuf[30 + 16 + 2] ^= 0x20;
    CHECK(pt_open(zbuf, n, &st, err, sizeof err) == NULL);
    CHECK_STR(err, "zip member 'archive/data.pkl': CRC-32 mismatch (e831f6af, expected "
                   "7db5d20d): damaged archive");
    zbuf[30 + 16 + 2] ^= 0x20;
    /* an entry count the directory cannot hold */
    put16(zbuf + n - 22 + 10, 60000);
    CHECK(pt_open(zbuf, n, &st, err, sizeof err) == NULL);
    CHECK_STR(err, "zip central directory of 62 bytes cannot hold 60000 entries");
    put16(zbuf + n - 22 + 10, 1);
    /* a member said to lie past the end */
    put32(zbuf + n - 22 - 62 + 20, 1u << 30);
    put32(zbuf + n - 22 - 62 + 24, 1u << 30);
    CHECK(pt_open(zbuf, n, &st, err, sizeof err) == NULL);
    CHECK_STR(err, "zip member 'archive/data.pkl' extends past the end of the file (truncated "
                   "archive)");
    /* no folder, no data.pkl */
    member_t flat[1] = {{"data.pkl", pkl, sizeof pkl - 1}};
    n = make_zip(zbuf, flat, 1);
    CHECK(pt_open(zbuf, n, &st, err, sizeof err) == NULL);
    CHECK_STR(err, "not a torch.save archive (its first member 'data.pkl' lies in no folder)");
    member_t other[1] = {{"x/y.txt", pkl, sizeof pkl - 1}};
    n = make_zip(zbuf, other, 1);
    CHECK(pt_open(zbuf, n, &st, err, sizeof err) == NULL);
    CHECK_STR(err, "not a torch.save archive (no member 'x/data.pkl')");
}

/* Storage keys and classes as a hostile pickle may spell them (issue 42 items 1, 5, 9): a key
 * of 61 bytes whose first 60 name another member, a class the reader does not know, and a
 * view that repeats its storage's one element. */
static void test_storages(void)
{
    char err[256];
    int st;
    static const char a60[] = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    char pkl[512], mem[128];
    /* _rebuild_tensor_v2((storage, IntStorage, KEY, 'cpu', 1), 0, (1,), (1,), False, OD()) */
    static const char pre[] = "\x80\x02" "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00"
                              "storagectorch\n";
    static const char post[] = "X\x03\x00\x00\x00" "cpuK\x01tQK\x00K\x01\x85K\x01\x85\x89"
                               "ccollections\nOrderedDict\n)RtR.";
    /* size (4,), stride (0,): expand() of the one element */
    static const char wide[] = "X\x03\x00\x00\x00" "cpuK\x01tQK\x00K\x04\x85K\x00\x85\x89"
                               "ccollections\nOrderedDict\n)RtR.";
    const int32_t one = 7;
    for (int c = 0; c < 3; c++) {
        const char *cls = c == 1 ? "ComplexFloatStorage\n" : "IntStorage\n";
        const char *key = c == 0 ? "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB"
                                 : "0";
        size_t n = 0, kl = strlen(key);
        memcpy(pkl, pre, sizeof pre - 1), n += sizeof pre - 1;
        memcpy(pkl + n, cls, strlen(cls)), n += strlen(cls);
        pkl[n++] = 'X';
        pkl[n++] = (char)kl, pkl[n++] = 0, pkl[n++] = 0, pkl[n++] = 0;
        memcpy(pkl + n, key, kl), n += kl;
        const char *tail = c == 2 ? wide : post;
        memcpy(pkl + n, tail, sizeof post - 1), n += sizeof post - 1;
        snprintf(mem, sizeof mem, "archive/data/%s", c == 0 ? a60 : "0");
        member_t m[2] = {{"archive/data.pkl", pkl, n}, {mem, &one, sizeof one}};
        size_t zn = make_zip(zbuf, m, 2);
        pt_file_t *f = pt_open(zbuf, zn, &st, err, sizeof err);
        CHECK(f == NULL && st == MOE_EFORMAT);
        pt_free(f);
        if (c == 0) /* the 60-byte prefix names a member, the whole key none */
            CHECK_STR(err, "storage 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
                           "...': no member 'archive/data/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
                           "AAAAAAAAAAAAAAAAAAAAAA...' in the archive");
        else if (c == 1) /* one line, module.name */
            CHECK_STR(err, "data.pkl: unsupported storage type 'torch.ComplexFloatStorage'");
        else
            CHECK_STR(err, "data.pkl: tensor view of more elements than its storage of 1 (a "
                           "stride-0 or overlapping view, as expand() makes): save it with "
                           ".contiguous()");
    }
}

int main(void)
{
    check_sample("sglang_per_token.pt", "expert_distribution_recorder_1732000000.25_0");
    check_sample("sglang_deflated.pt", "archive");
    check_sample("sglang_strided.pt", "archive");
    test_pickles();
    test_zip();
    test_storages();
    return unit_done("test_pt");
}
