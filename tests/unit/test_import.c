/* tests/unit/test_import.c -- router-log importers: each format, detection, error messages. */
#include "config.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/bgz.h"
#include "moe/import.h"
#include "moe/moe.h"
#include "moe/trace.h"
#include "unit.h"
#include "unit_tmp.h"

/* A fixture of tests/data/import (top_srcdir is set by make check). */
static const char *data_path(const char *name)
{
    static char buf[4][1024];
    static int i;
    const char *top = getenv("top_srcdir");
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/tests/data/import/%s", top ? top : ".", name);
    return buf[i];
}

#define write_tmp tmp_write

#define write_text tmp_write_text

/* Write bytes gzip-compressed, as several gzip members (the block-gzip writer), split at
 * `split` so a reader must carry on across members. */
static const char *write_gz(const char *name, const void *data, size_t len, size_t split)
{
    const char *path = tmp_path(name);
    int st = 0, fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    moe_bgz_t *bz = fd >= 0 ? moe_bgz_dopen(fd, 'w', 6, 0, path, NULL, 0, &st) : NULL;
    CHECK(bz != NULL);
    if (!bz)
        return path;
    CHECK_EQ_INT(moe_bgz_write(bz, data, split), 0);
    CHECK_EQ_INT(moe_bgz_flush(bz), 0);
    CHECK_EQ_INT(moe_bgz_write(bz, (const char *)data + split, len - split), 0);
    CHECK_EQ_INT(moe_bgz_close(bz), 0);
    return path;
}

/* What one import gave: status and message, header, report and the records rendered one per
 * line as "token seq pos step rank" and a cell per layer ("3,1", "3:0.75,1:0.25" or "."). */
typedef struct result {
    int status;
    char err[640];
    moe_trace_hdr_t h;
    moe_import_report_t rep;
    char text[8192];
} result_t;

static void render(result_t *res, const moe_trace_rec_t *r)
{
    size_t off = strlen(res->text), cap = sizeof res->text;
    off += (size_t)snprintf(res->text + off, cap - off, "%llu %u %u %u %u",
                            (unsigned long long)r->token, r->seq, r->pos, r->step, r->rank);
    for (uint32_t l = 0; l < res->h.layers && off < cap; l++) {
        const uint16_t *ids = r->ids + (size_t)l * res->h.topk;
        if (ids[0] == MOE_EXPERT_NONE) {
            off += (size_t)snprintf(res->text + off, cap - off, " .");
            continue;
        }
        for (uint32_t k = 0; k < res->h.topk && off < cap; k++) {
            off += (size_t)snprintf(res->text + off, cap - off, "%c%u", k ? ',' : ' ', ids[k]);
            if (r->weights && off < cap)
                off += (size_t)snprintf(res->text + off, cap - off, ":%g",
                                        r->weights[(size_t)l * res->h.topk + k]);
        }
    }
    if (off < cap)
        snprintf(res->text + off, cap - off, "\n");
}

/* The library names the input first ("'PATH': reason", imp_fail's rule; messages that name it
 * in their own words are those of "cannot open/read 'PATH'"): checked here, and the reason
 * kept for the cases to compare. */
static void strip_name(result_t *res, const char *path)
{
    char pre[1100];
    snprintf(pre, sizeof pre, "'%s': ", path);
    size_t n = strlen(pre);
    if (strncmp(res->err, pre, n) == 0)
        memmove(res->err, res->err + n, strlen(res->err + n) + 1);
    else
        CHECK(strncmp(res->err, "cannot ", 7) == 0 && strstr(res->err, path) != NULL);
}

/* Import a whole file. */
static void run(result_t *res, const moe_import_opts_t *o, const char *path, uint32_t seq_base)
{
    memset(res, 0, sizeof *res);
    moe_trace_hdr_init(&res->h);
    moe_importer_t *im = moe_import_open(o, path, seq_base, &res->status, res->err,
                                         sizeof res->err);
    if (!im) {
        CHECK(res->status < 0);
        strip_name(res, path);
        return;
    }
    CHECK_EQ_INT(moe_import_header(im, &res->h), 0);
    moe_trace_rec_t r = {0};
    int st;
    while ((st = moe_import_next(im, &r)) == 1)
        render(res, &r);
    res->status = st;
    if (st < 0) {
        snprintf(res->err, sizeof res->err, "%s", moe_import_errmsg(im));
        strip_name(res, path);
    }
    moe_import_report(im, &res->rep);
    moe_trace_rec_release(&r);
    moe_import_close(im);
}

static void res_release(result_t *res)
{
    moe_trace_hdr_release(&res->h);
}

static moe_import_opts_t opts(int fmt)
{
    moe_import_opts_t o;
    memset(&o, 0, sizeof o);
    o.format = fmt;
    return o;
}

/* Import text content with the given format and expect a failure. */
static void expect_fail(int fmt, uint32_t experts, const char *content, int status,
                        const char *msg)
{
    moe_import_opts_t o = opts(fmt);
    o.experts = experts;
    result_t res;
    run(&res, &o, write_text("bad.txt", content), 0);
    CHECK_EQ_INT(res.status, status);
    CHECK_STR(res.err, msg);
    res_release(&res);
}

static int has_line(const moe_trace_hdr_t *h, const char *line)
{
    return h->text && strstr(h->text, line) != NULL;
}

static void test_names(void)
{
    static const char *const names[] = {"auto", "tokens", "jsonl", "csv", "npy", "megatron",
                                         "sglang", "safetensors", "raw", "base64", "torch",
                                         "vllm"};
    for (int i = 0; i < 12; i++) {
        CHECK_STR(moe_import_fmt_name(i), names[i]);
        CHECK_EQ_INT(moe_import_fmt_parse(names[i]), i);
    }
    CHECK_EQ_INT(moe_import_fmt_parse("parquet"), -1);
    CHECK(moe_import_fmt_name(12) == NULL);
    CHECK(moe_import_fmt_name(-1) == NULL);
}

static void test_tokens(void)
{
    moe_import_opts_t o = opts(MOE_IMPORT_AUTO);
    result_t res;
    run(&res, &o, data_path("tiny.tokens"), 9);
    CHECK_EQ_INT(res.status, 0);
    CHECK_STR(res.text, "0 9 0 0 0 1,0 3,2 0,1\n"
                        "1 9 1 0 0 2,3 . 1,0\n"
                        "2 9 2 0 0 0,1 2,0 3,2\n"
                        "3 9 3 0 0 3,1 1,2 2,3\n");
    CHECK_EQ_INT(res.h.layers, 3);
    CHECK_EQ_INT(res.h.topk, 2);
    CHECK_EQ_INT(res.h.experts, 0); /* inferred by the caller */
    CHECK_EQ_INT(res.h.flags, 0);
    CHECK(has_line(&res.h, "@CO\tmodel: tiny hand-made trace\n"));
    CHECK(has_line(&res.h, "@CO\tlayers: 3  topk: 2\n"));
    CHECK(has_line(&res.h, "tiny.tokens (format tokens)\n"));
    CHECK(!has_line(&res.h, "between tokens")); /* only the leading comments */
    CHECK_EQ_INT(res.rep.tokens, 4);
    CHECK_EQ_INT(res.rep.incomplete, 1);
    CHECK_EQ_INT(res.rep.missing_cells, 1);
    CHECK_EQ_INT(res.rep.dropped, 0);
    CHECK_EQ_INT(res.rep.sequences, 1);
    CHECK_EQ_INT(res.rep.max_id, 3);
    CHECK_EQ_INT(res.rep.bytes_in, 136);
    res_release(&res);

    o.drop_incomplete = 1;
    run(&res, &o, data_path("tiny.tokens"), 0);
    CHECK_STR(res.text, "0 0 0 0 0 1,0 3,2 0,1\n"
                        "1 0 2 0 0 0,1 2,0 3,2\n"
                        "2 0 3 0 0 3,1 1,2 2,3\n");
    CHECK_EQ_INT(res.rep.tokens, 3);
    CHECK_EQ_INT(res.rep.incomplete, 1);
    CHECK_EQ_INT(res.rep.missing_cells, 0);
    CHECK_EQ_INT(res.rep.dropped, 1);
    res_release(&res);
}

static void test_tokens_meta_weights(void)
{
    moe_import_opts_t o = opts(MOE_IMPORT_TOKENS);
    o.meta = data_path("tiny.meta");
    o.weights = data_path("tiny.weights");
    result_t res;
    run(&res, &o, data_path("tiny.tokens"), 0);
    CHECK_EQ_INT(res.status, 0);
    /* "humaneval/3" -> 3; "chat" has no number: the first distinct name -> 0. Weights of the
     * missing cell are 0 even where the weights file has numbers. */
    CHECK_STR(res.text, "0 3 0 0 0 1:0.75,0:0.25 3:0.5,2:0.5 0:0.875,1:0.125\n"
                        "1 3 1 0 0 2:0.625,3:0.375 . 1:1,0:0\n"
                        "2 3 0 0 0 0:0.5,1:0.5 2:0.25,0:0.75 3:0.125,2:0.875\n"
                        "3 0 5 0 0 3:0.1,1:0.9 1:0.3,2:0.7 2:0.6,3:0.4\n");
    CHECK_EQ_INT(res.h.flags, MOE_TRACE_WEIGHTS);
    CHECK_EQ_INT(res.rep.sequences, 2);
    CHECK(has_line(&res.h, "phases: prefill 3, decode 1\n"));
    res_release(&res);
}

static void test_tokens_errors(void)
{
    expect_fail(MOE_IMPORT_TOKENS, 0, "1,2 3,4\n5,6 x5,7\n", MOE_EFORMAT,
                "line 2: group 2: 'x5' is not an expert id");
    expect_fail(MOE_IMPORT_TOKENS, 0, "# c\n1,2 3,4 5,6\n1,2 3,4\n", MOE_EFORMAT,
                "line 3: 2 groups, expected 3");
    expect_fail(MOE_IMPORT_TOKENS, 0, "1,2 3,4\n1,2 3,4 5,6\n", MOE_EFORMAT,
                "line 2: 3 groups, expected 2");
    expect_fail(MOE_IMPORT_TOKENS, 0, "1,2,3 3,4,5\n1,2,3 4,5\n", MOE_EFORMAT,
                "line 2: group 2: 2 ids in a group, expected 3");
    expect_fail(MOE_IMPORT_TOKENS, 0, "1,2 3,4\n1,2 3,4,5\n", MOE_EFORMAT,
                "line 2: group 2: 3 ids in a group, expected 2");
    expect_fail(MOE_IMPORT_TOKENS, 0, "1,2 3,4\n1,-2 3,4\n", MOE_EFORMAT,
                "line 2: group 1: '-2' is not an expert id");
    expect_fail(MOE_IMPORT_TOKENS, 8, "1,2 3,4\n1,2 3,8\n", MOE_ERANGE,
                "line 2: group 2: expert id 8 out of range (experts = 8)");
    expect_fail(MOE_IMPORT_TOKENS, 0, "1,2 3,65535\n", MOE_ERANGE,
                "line 1: group 2: expert id 65535 out of range (ids are 0..65534)");
    expect_fail(MOE_IMPORT_TOKENS, 0, "1,2 3,99999999999\n", MOE_ERANGE,
                "line 1: group 2: expert id 99999999999 out of range (ids are 0..65534)");
    expect_fail(MOE_IMPORT_TOKENS, 0, "# only a comment\n", MOE_EEMPTY, "no tokens in input");
    expect_fail(MOE_IMPORT_AUTO, 0, "", MOE_EEMPTY, "no tokens in input");
    expect_fail(MOE_IMPORT_AUTO, 0, "# nothing\n\n", MOE_EEMPTY, "no tokens in input");
    expect_fail(MOE_IMPORT_AUTO, 0, "hello world\n", MOE_EFORMAT,
                "cannot detect the input format (use --format)");
    expect_fail(MOE_IMPORT_TOKENS, 0, ". .\n", MOE_EFORMAT,
                "line 1: the first token has no expert ids");
}

static void test_tokens_companions(void)
{
    moe_import_opts_t o = opts(MOE_IMPORT_TOKENS);
    const char *in = write_text("in.txt", "1,2 3,4\n5,6 7,0\n2,1 0,3\n");
    result_t res;

    o.meta = write_text("short.meta", "# p phase pos\n0 prefill 0\n0 prefill 1\n");
    run(&res, &o, in, 0);
    CHECK_EQ_INT(res.status, MOE_EFORMAT);
    char want[1400];
    snprintf(want, sizeof want, "meta '%s': 2 rows, the input has more", o.meta);
    CHECK_STR(res.err, want);
    res_release(&res);

    o.meta = write_text("long.meta", "0 p 0\n0 p 1\n0 p 2\n1 p 0\n");
    run(&res, &o, in, 0);
    CHECK_EQ_INT(res.status, MOE_EFORMAT);
    snprintf(want, sizeof want, "meta '%s': line 4: more rows than the input (3)", o.meta);
    CHECK_STR(res.err, want);
    res_release(&res);

    o.meta = write_text("bad.meta", "0 p 0\n0 p x\n0 p 2\n");
    run(&res, &o, in, 0);
    snprintf(want, sizeof want, "meta '%s': line 2: 'x' is not a position", o.meta);
    CHECK_STR(res.err, want);
    res_release(&res);

    o.meta = NULL;
    o.weights = write_text("bad.w", "0.5,0.5 0.5,0.5\n0.5,0.5 0.5\n0.5,0.5 0.5,0.5\n");
    run(&res, &o, in, 0);
    snprintf(want, sizeof want,
             "weights '%s': line 2: group 2: 1 ids in a group, expected 2", o.weights);
    CHECK_STR(res.err, want);
    res_release(&res);

    o.weights = write_text("bad2.w", "0.5,0.5 0.5,0.5\n0.5,0.5 0.5,abc\n");
    run(&res, &o, in, 0);
    snprintf(want, sizeof want, "weights '%s': line 2: group 2: 'abc' is not a weight",
             o.weights);
    CHECK_STR(res.err, want);
    res_release(&res);

    o.weights = tmp_path("does-not-exist.w");
    run(&res, &o, in, 0);
    CHECK_EQ_INT(res.status, MOE_ESYS);
    CHECK(strstr(res.err, "weights: ") == res.err);
    res_release(&res);
}

static void test_gzip(void)
{
    static const char text[] = "# gz\n1,2 3,4\n5,6 7,0\n";
    moe_import_opts_t o = opts(MOE_IMPORT_AUTO);
    result_t res;
    run(&res, &o, write_gz("t.gz", text, sizeof text - 1, 9), 0);
    CHECK_EQ_INT(res.status, 0);
    CHECK_STR(res.text, "0 0 0 0 0 1,2 3,4\n1 0 1 0 0 5,6 7,0\n");
    CHECK(has_line(&res.h, "@CO\tgz\n"));
    CHECK_EQ_INT(res.rep.bytes_in, sizeof text - 1);
    res_release(&res);

    /* A gzipped .npy, split inside its header. */
    FILE *fp = fopen(data_path("top2_u1.npy"), "rb");
    char buf[512];
    size_t n = fp ? fread(buf, 1, sizeof buf, fp) : 0;
    if (fp)
        fclose(fp);
    CHECK(n == 136);
    run(&res, &o, write_gz("n.npy.gz", buf, n, 20), 0);
    CHECK_EQ_INT(res.status, 0);
    CHECK_STR(res.text, "0 0 0 0 0 1,0 3,2\n1 0 1 0 0 2,3 0,1\n");
    res_release(&res);
}

static void test_jsonl(void)
{
    moe_import_opts_t o = opts(MOE_IMPORT_AUTO);
    result_t res;
    run(&res, &o, data_path("grouped.jsonl"), 0);
    CHECK_EQ_INT(res.status, 0);
    /* Problem 0 (token 2 lacks layer 1), problem 1, then "mbpp/4" of a second dataset shifted
     * past the seq ids used so far (2 + 4). */
    CHECK_STR(res.text, "0 0 0 0 0 1:0.75,0:0.25 0:0.875,2:0.125 2:0.5,1:0.5\n"
                        "1 0 1 0 0 2:0.5,3:0.5 1:0.5,3:0.5 0:0.5,3:0.5\n"
                        "2 0 2 0 0 3:0.625,1:0.375 . 3:0.5,2:0.5\n"
                        "3 1 0 0 0 0:0.5,1:0.5 1:0.5,2:0.5 2:0.5,3:0.5\n"
                        "4 6 0 0 0 3:0.5,0:0.5 2:0.5,0:0.5 1:0.5,0:0.5\n");
    CHECK_EQ_INT(res.h.layers, 3);
    CHECK_EQ_INT(res.h.topk, 2);
    CHECK_EQ_INT(res.h.flags, MOE_TRACE_WEIGHTS);
    CHECK_EQ_INT(res.rep.sequences, 3);
    CHECK_EQ_INT(res.rep.incomplete, 1);
    CHECK_EQ_INT(res.rep.missing_cells, 1);
    res_release(&res);

    /* Execution order: a prefill pass of 3 tokens, then two decode passes at token_pos 0. */
    run(&res, &o, data_path("exec_order.jsonl"), 0);
    CHECK_EQ_INT(res.status, 0);
    CHECK_STR(res.text, "0 0 0 0 0 1:0.75,0:0.25 0:0.875,2:0.125\n"
                        "1 0 1 0 0 2:0.5,3:0.5 1:0.5,3:0.5\n"
                        "2 0 2 0 0 3:0.625,1:0.375 2:0.5,0:0.5\n"
                        "3 0 3 0 0 3:0.5,2:0.5 1:0.5,0:0.5\n"
                        "4 0 4 0 0 0:0.5,3:0.5 .\n");
    res_release(&res);

    o.drop_incomplete = 1;
    run(&res, &o, data_path("exec_order.jsonl"), 0);
    CHECK_EQ_INT(res.rep.tokens, 4);
    CHECK_EQ_INT(res.rep.dropped, 1);
    res_release(&res);
}

#define VL(layer, tok, ids) \
    "{\"dataset\": \"d\", \"problem_id\": 0, \"layer\": " #layer ", \"experts\": " ids \
    ", \"token_idx\": " #tok "}\n"

static void test_jsonl_errors(void)
{
    expect_fail(MOE_IMPORT_JSONL, 0, VL(0, 0, "[1, 2]") VL(0, 0, "[2, 3]"), MOE_EFORMAT,
                "line 2: duplicate record for layer 0 of token 0");
    expect_fail(MOE_IMPORT_JSONL, 0, VL(0, 0, "[1, 2]") VL(0, 1, "[2, 3, 4]"), MOE_EFORMAT,
                "line 2: 'experts' has 3 ids, expected 2");
    expect_fail(MOE_IMPORT_JSONL, 0, VL(0, 0, "[1, 2]") VL(0, 1, "[2, 3.5]"), MOE_EFORMAT,
                "line 2: 'experts': 3.5 is not an expert id");
    expect_fail(MOE_IMPORT_JSONL, 4, VL(0, 0, "[1, 2]") VL(0, 1, "[2, 4]"), MOE_ERANGE,
                "line 2: 'experts': expert id 4 out of range (experts = 4)");
    expect_fail(MOE_IMPORT_JSONL, 0, VL(0, 0, "[1, 2]") "{\"layer\": 1, \"experts\": [1,\n",
                MOE_EFORMAT, "line 2: malformed JSON at column 25");
    /* A key given twice (also spelled with an escape), a lone surrogate (issue 17 item 7). */
    expect_fail(MOE_IMPORT_JSONL, 0, "{\"layer\": 0, \"experts\": [1, 2], \"layer\": 1}\n",
                MOE_EFORMAT, "line 1: duplicate key \"layer\" at column 33");
    expect_fail(MOE_IMPORT_JSONL, 0,
                "{\"layer\": 0, \"experts\": [1, 2], \"\\u006cayer\": 1}\n", MOE_EFORMAT,
                "line 1: duplicate key \"\\u006cayer\" at column 33");
    expect_fail(MOE_IMPORT_JSONL, 0,
                "{\"layer\": 0, \"experts\": [1, 2], \"token_idx\": 0, \"d\\udc00\": 1}\n",
                MOE_EFORMAT, "line 1: malformed JSON at column 49");
    expect_fail(MOE_IMPORT_JSONL, 0, VL(0, 0, "[1, 2]") "{\"layer\": 1, \"experts\": [1, 2]}\n",
                MOE_EFORMAT, "line 2: no 'token_pos'");
    expect_fail(MOE_IMPORT_JSONL, 0, "{\"layer\": 1, \"token_idx\": 0, \"experts\": \"1 2\"}\n",
                MOE_EFORMAT, "line 1: 'experts' is not a list of ids");
    expect_fail(MOE_IMPORT_JSONL, 0,
                VL(0, 0, "[1, 2]") VL(1, 0, "[1, 2]")
                    "{\"dataset\": \"d\", \"problem_id\": 1, \"layer\": 0, \"experts\": [1, 2], "
                    "\"token_idx\": 0}\n" VL(1, 1, "[1, 2]"),
                MOE_EFORMAT,
                "line 4: problem appears again after other records (the records of one "
                "problem must be contiguous)");
    expect_fail(MOE_IMPORT_JSONL, 0,
                VL(0, 0, "[1, 2]")
                    "{\"dataset\": \"d\", \"problem_id\": 1, \"layer\": 3, \"experts\": [1, 2], "
                    "\"token_idx\": 0}\n",
                MOE_EFORMAT, "line 2: layer 3 outside the layers of the first problem (0..0)");
    /* A negative id marks a missing cell. */
    moe_import_opts_t o = opts(MOE_IMPORT_AUTO);
    result_t res;
    run(&res, &o, write_text("neg.jsonl", VL(0, 0, "[1, 2]") VL(1, 0, "[-1, -1]")), 0);
    CHECK_EQ_INT(res.status, 0);
    CHECK_STR(res.text, "0 0 0 0 0 1,2 .\n");
    CHECK_EQ_INT(res.rep.missing_cells, 1);
    res_release(&res);
}

static void test_megatron(void)
{
    moe_import_opts_t o = opts(MOE_IMPORT_AUTO);
    result_t res;
    run(&res, &o, data_path("megatron.jsonl"), 100);
    CHECK_EQ_INT(res.status, 0);
    /* Step 10: rank 0 (3 tokens) then rank 1 (2 tokens), batch records of layers 1 and 2 as
     * layers 0 and 1; step 11: per-token records of micro-batch 1, token 1 lacks layer 2. */
    CHECK_STR(res.text, "0 100 0 10 0 3:0.6,1:0.4 0:0.9,1:0.1\n"
                        "1 100 1 10 0 0:0.5,2:0.5 2:0.6,3:0.4\n"
                        "2 100 2 10 0 1:0.7,3:0.3 3:0.5,0:0.5\n"
                        "3 101 0 10 1 2:0.55,0:0.45 1:0.65,2:0.35\n"
                        "4 101 1 10 1 3:0.8,2:0.2 0:0.75,3:0.25\n"
                        "5 102 0 11 0 1:0.9,0:0.1 3:0.7,1:0.3\n"
                        "6 102 1 11 0 2:0.6,3:0.4 .\n");
    CHECK_EQ_INT(res.h.layers, 2);
    CHECK_EQ_INT(res.h.topk, 2);
    CHECK_EQ_INT(res.h.flags, MOE_TRACE_WEIGHTS);
    CHECK_EQ_INT(res.rep.sequences, 3);
    CHECK_EQ_INT(res.rep.missing_cells, 1);
    res_release(&res);

    /* scores of top_indices' shape are weights; full score rows over all experts are not. */
    o.format = MOE_IMPORT_MEGATRON;
    run(&res, &o,
        write_text("scores.jsonl",
                   "{\"step\": 3, \"layer\": 0, \"top_indices\": [2, 0], "
                   "\"scores\": [0.75, 0.25]}\n"
                   "{\"step\": 3, \"layer\": 1, \"top_indices\": [1, 3], "
                   "\"scores\": [0.5, 0.5]}\n"),
        0);
    CHECK_STR(res.text, "0 0 0 3 0 2:0.75,0:0.25 1:0.5,3:0.5\n");
    res_release(&res);
    run(&res, &o,
        write_text("scores4.jsonl",
                   "{\"step\": 3, \"layer\": 0, \"top_indices\": [2, 0], "
                   "\"scores\": [0.2, 0.1, 0.6, 0.1]}\n"),
        0);
    CHECK_STR(res.text, "0 0 0 3 0 2,0\n");
    CHECK_EQ_INT(res.h.flags, 0);
    res_release(&res);

    expect_fail(MOE_IMPORT_MEGATRON, 0,
                "{\"step\": 1, \"layer\": 1, \"topk\": 3, \"top_indices\": [[1, 2], [3, 4]]}\n",
                MOE_EFORMAT, "line 1: 'topk' is 3 but 'top_indices' has 2 ids per token");
    expect_fail(MOE_IMPORT_MEGATRON, 0,
                "{\"step\": 1, \"layer\": 1, \"top_indices\": [[1, 2], [3]]}\n", MOE_EFORMAT,
                "line 1: 'top_indices' is not a list of ids or a list of equal-length lists");
    expect_fail(MOE_IMPORT_MEGATRON, 0,
                "{\"step\": 1, \"layer\": 1, \"top_indices\": [[1, 2]], "
                "\"top_probs\": [0.5, 0.5]}\n",
                MOE_EFORMAT, "line 1: gate weights do not match 'top_indices'");
    expect_fail(MOE_IMPORT_MEGATRON, 0,
                "{\"step\": 1, \"layer\": 1, \"top_indices\": [1, 2]}\n"
                "{\"step\": 2, \"layer\": 1, \"top_indices\": [1, 2]}\n"
                "{\"step\": 1, \"layer\": 1, \"top_indices\": [1, 2]}\n",
                MOE_EFORMAT,
                "line 3: step appears again after other records (the records of one step must "
                "be contiguous)");
}

static void test_csv(void)
{
    moe_import_opts_t o = opts(MOE_IMPORT_AUTO);
    result_t res;
    /* Quoted commas, doubled quotes, a line break inside quotes, CRLF header; layer ids 1..2;
     * layer 2 has one token fewer; seq from the file name. */
    run(&res, &o, data_path("prompt_7_data.csv"), 0);
    CHECK_EQ_INT(res.status, 0);
    CHECK_STR(res.text, "0 7 0 0 0 8,26,5 7,0,9\n"
                        "1 7 1 0 0 1,2,3 10,11,12\n"
                        "2 7 2 0 0 4,5,6 .\n");
    CHECK_EQ_INT(res.h.layers, 2);
    CHECK_EQ_INT(res.h.topk, 3);
    CHECK_EQ_INT(res.rep.max_id, 26);
    CHECK_EQ_INT(res.rep.incomplete, 1);
    res_release(&res);

    /* Columns found by name in any order; no number in the name: seq_base. */
    o.format = MOE_IMPORT_CSV;
    run(&res, &o,
        write_text("renamed.csv", "token,expert_ids,layer\n\"a,b\",\"[1, 2]\",0\nx,[3 4],0\n"
                                  "\"\",\"[5,6]\",1\ny,\"[7, 0]\",1\n"),
        4);
    CHECK_EQ_INT(res.status, 0);
    CHECK_STR(res.text, "0 4 0 0 0 1,2 5,6\n1 4 1 0 0 3,4 7,0\n");
    res_release(&res);

    static const char hdr[] = "Layer ID,Batch Number,Token,Activated Expert IDs\n";
    char buf[512];
    snprintf(buf, sizeof buf, "%s1,0,a,\"[1, 2]\"\n1,0,\"b\"x,\"[1, 2]\"\n", hdr);
    expect_fail(MOE_IMPORT_CSV, 0, buf, MOE_EFORMAT,
                "line 3: malformed CSV: text after the closing quote of field 3");
    snprintf(buf, sizeof buf, "%s1,0,a,\"[1, 2]\"\n1,0,\"b,[1, 2]\n", hdr);
    expect_fail(MOE_IMPORT_CSV, 0, buf, MOE_EFORMAT,
                "line 3: malformed CSV: quoted field never closed");
    snprintf(buf, sizeof buf, "%s1,0,a,\"[1, 2]\"\n1,0,b,\"[1, x]\"\n", hdr);
    expect_fail(MOE_IMPORT_CSV, 0, buf, MOE_EFORMAT,
                "line 3: '[1, x]' is not a list of expert ids");
    snprintf(buf, sizeof buf, "%s1,0,a,\"[1, 2]\"\n1,0,b,\"[1, 2, 3]\"\n", hdr);
    expect_fail(MOE_IMPORT_CSV, 0, buf, MOE_EFORMAT, "line 3: 3 expert ids, expected 2");
    snprintf(buf, sizeof buf, "%s1,0,a,\"[1, 2]\"\nL2,0,b,\"[1, 2]\"\n", hdr);
    expect_fail(MOE_IMPORT_CSV, 0, buf, MOE_EFORMAT, "line 3: 'L2' is not a layer id");
    snprintf(buf, sizeof buf, "%s1,0,a\n", hdr);
    expect_fail(MOE_IMPORT_CSV, 0, buf, MOE_EFORMAT, "line 2: 3 fields, expected 4");
    expect_fail(MOE_IMPORT_CSV, 0, hdr, MOE_EEMPTY, "no tokens in input");
    expect_fail(MOE_IMPORT_CSV, 0, "Layer,Batch,Token\n1,0,a\n", MOE_EFORMAT,
                "line 1: the CSV header has no expert ids column (expected 'Layer ID,Batch "
                "Number,Token,Activated Expert IDs')");
}

/* A .npy file image: version, descr, shape text, fortran flag and data bytes. */
static const char *npy_file(const char *name, int version, const char *descr,
                            const char *shape, const char *fortran, const void *data,
                            size_t len)
{
    char dict[256], file[1024];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }",
                     descr, fortran, shape);
    size_t pre = version == 1 ? 10 : 12, hl = (size_t)n + 1;
    hl += (64 - (pre + hl) % 64) % 64;
    memcpy(file, "\x93NUMPY", 6);
    file[6] = (char)version;
    file[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        file[8 + i] = (char)((hl >> (8 * i)) & 0xff);
    memset(file + pre, ' ', hl);
    memcpy(file + pre, dict, (size_t)n);
    file[pre + hl - 1] = '\n';
    memcpy(file + pre + hl, data, len);
    return write_tmp(name, file, pre + hl + len);
}

static void test_npy(void)
{
    moe_import_opts_t o = opts(MOE_IMPORT_AUTO);
    result_t res;
    run(&res, &o, data_path("top1_i8.npy"), 5);
    CHECK_EQ_INT(res.status, 0);
    CHECK_STR(res.text, "0 5 0 0 0 5 1 7\n1 5 1 0 0 0 3 .\n2 5 2 0 0 2 2 6\n3 5 3 0 0 7 0 4\n");
    CHECK_EQ_INT(res.h.layers, 3);
    CHECK_EQ_INT(res.h.topk, 1);
    CHECK_EQ_INT(res.rep.max_id, 7);
    CHECK_EQ_INT(res.rep.missing_cells, 1);
    res_release(&res);

    run(&res, &o, data_path("top2_u1.npy"), 0);
    CHECK_STR(res.text, "0 0 0 0 0 1,0 3,2\n1 0 1 0 0 2,3 0,1\n");
    CHECK_EQ_INT(res.h.topk, 2);
    res_release(&res);

    run(&res, &o, data_path("top1_be_v2.npy"), 0);
    CHECK_STR(res.text, "0 0 0 0 0 300 1\n1 0 1 0 0 2 3\n");
    res_release(&res);

    /* Little-endian int32 in a version 3 header, k = 2, with one negative id in a cell. */
    static const int32_t v[] = {1, 2, -1, 3, 4, 0, 2, 1};
    uint8_t le[sizeof v];
    for (size_t i = 0; i < 8; i++)
        for (int b = 0; b < 4; b++)
            le[4 * i + (size_t)b] = (uint8_t)((uint32_t)v[i] >> (8 * b));
    run(&res, &o, npy_file("v3.npy", 3, "<i4", "(2, 2, 2)", "False", le, sizeof le), 0);
    CHECK_EQ_INT(res.status, 0);
    CHECK_STR(res.text, "0 0 0 0 0 1,2 .\n1 0 1 0 0 4,0 2,1\n");
    res_release(&res);

    static const uint8_t d[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    o.format = MOE_IMPORT_NPY;
    run(&res, &o, npy_file("f.npy", 1, "<u1", "(2, 4)", "True", d, 8), 0);
    CHECK_EQ_INT(res.status, MOE_EFORMAT);
    CHECK_STR(res.err, "Fortran-ordered .npy arrays are not supported (save a C-ordered copy: "
                       "np.save(f, np.ascontiguousarray(a)))");
    res_release(&res);
    run(&res, &o, npy_file("f4.npy", 1, "<f4", "(2, 1)", "False", d, 8), 0);
    CHECK_STR(res.err, ".npy dtype '<f4' is not an integer type (expert ids must be integers "
                       "of 1, 2, 4 or 8 bytes)");
    res_release(&res);
    run(&res, &o, npy_file("1d.npy", 1, "<u1", "(8,)", "False", d, 8), 0);
    CHECK_STR(res.err, ".npy array has 1 dimensions: expected [tokens, layers] or [tokens, "
                       "layers, k]");
    res_release(&res);
    run(&res, &o, npy_file("t.npy", 1, "<u1", "(3, 3)", "False", d, 8), 0);
    CHECK_EQ_INT(res.status, MOE_ETRUNC);
    CHECK_STR(res.err, "truncated .npy data: row 2 of 3 is cut off");
    CHECK_STR(res.text, "0 0 0 0 0 1 2 3\n1 0 1 0 0 4 5 6\n");
    res_release(&res);
    run(&res, &o, npy_file("e.npy", 1, "<u1", "(0, 3)", "False", d, 0), 0);
    CHECK_EQ_INT(res.status, MOE_EEMPTY);
    res_release(&res);
    run(&res, &o, npy_file("v9.npy", 9, "<u1", "(1, 1)", "False", d, 1), 0);
    CHECK_EQ_INT(res.status, MOE_EVERSION);
    CHECK_STR(res.err, ".npy format version 9.0 is not supported (1..3)");
    res_release(&res);
    o.experts = 8;
    run(&res, &o, npy_file("r.npy", 1, "<u1", "(2, 4)", "False", d, 8), 0);
    CHECK_EQ_INT(res.status, MOE_ERANGE);
    CHECK_STR(res.err, "row 1, layer 3: expert id 8 out of range (experts = 8)");
    res_release(&res);
}

/* Little-endian int32 bytes of n values. */
static void le32s(const int32_t *v, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++)
            out[4 * i + (size_t)b] = (uint8_t)((uint32_t)v[i] >> (8 * b));
}

/* -1 padding in both layouts, and SGLang's (layers, tokens, k) order. */
static void test_npy_layout(void)
{
    moe_import_opts_t o = opts(MOE_IMPORT_AUTO);
    result_t res;
    uint8_t le[4 * 24];
    /* TLK, 2 tokens x 2 layers x k 3: pads stripped anywhere in a cell; a cell left with
     * fewer than 3 ids is missing */
    static const int32_t tlk[] = {4, -1, 5, 6, 1, 2, 3, -1, -1, 7, 8, 9};
    le32s(tlk, 12, le);
    run(&res, &o, npy_file("tlk.npy", 1, "<i4", "(2, 2, 3)", "False", le, 48), 0);
    CHECK_EQ_INT(res.status, 0);
    CHECK_STR(res.text, "0 0 0 0 0 . 6,1,2\n1 0 1 0 0 . 7,8,9\n");
    CHECK_EQ_INT(res.rep.missing_cells, 2);
    res_release(&res);
    /* any other negative id is an error */
    static const int32_t neg[] = {4, 5, 6, 1, -2, 3};
    le32s(neg, 6, le);
    run(&res, &o, npy_file("neg.npy", 1, "<i4", "(1, 2, 3)", "False", le, 24), 0);
    CHECK_EQ_INT(res.status, MOE_ERANGE);
    CHECK_STR(res.err, "row 0, layer 1: expert id -2 is negative (only -1, padding, may be)");
    res_release(&res);

    /* LTK, 2 layers x 3 tokens x 4 columns, top-2 padded to 4 (k narrows to 2) */
    static const int32_t ltk[] = {1, 2, -1, -1, 3, -1, 4, -1, -1, -1, -1, -1,
                                  5, 6, -1, -1, 7, -1, -1, -1, -1, 0, 2, -1};
    le32s(ltk, 24, le);
    o.layout = MOE_IMPORT_LTK;
    run(&res, &o, npy_file("ltk.npy", 1, "<i4", "(2, 3, 4)", "False", le, 96), 0);
    CHECK_EQ_INT(res.status, 0);
    CHECK_EQ_INT(res.h.layers, 2);
    CHECK_EQ_INT(res.h.topk, 2);
    CHECK_STR(res.text, "0 0 0 0 0 1,2 5,6\n1 0 1 0 0 3,4 .\n2 0 2 0 0 . 0,2\n");
    CHECK_EQ_INT(res.rep.missing_cells, 2);
    res_release(&res);
    run(&res, &o, npy_file("ltk_cut.npy", 1, "<i4", "(2, 3, 4)", "False", le, 90), 0);
    CHECK_EQ_INT(res.status, MOE_ETRUNC);
    CHECK_STR(res.err, "truncated .npy data: 90 of 96 bytes");
    res_release(&res);
    run(&res, &o, npy_file("ltk1.npy", 1, "<i4", "(24,)", "False", le, 96), 0);
    CHECK_STR(res.err, ".npy array has 1 dimensions: expected [layers, tokens] or [layers, "
                       "tokens, k]");
    res_release(&res);
    /* a .npy shape that states far more than the file holds allocates no more than it */
    run(&res, &o, npy_file("ltk_big.npy", 1, "<i4", "(4000, 1000000, 8)", "False", le, 96), 0);
    CHECK_STR(res.err, "truncated .npy data: 96 of 128000000000 bytes");
    res_release(&res);
    /* --layout is for .npy and safetensors only */
    run(&res, &o, data_path("tiny.tokens"), 0);
    CHECK_EQ_INT(res.status, MOE_EINVAL);
    CHECK(strstr(res.err, "--layout does not apply to the tokens format") != NULL);
    res_release(&res);
    CHECK_EQ_INT(moe_import_layout_parse("LTK"), MOE_IMPORT_LTK);
    CHECK_EQ_INT(moe_import_layout_parse("TLK"), MOE_IMPORT_TLK);
    CHECK_EQ_INT(moe_import_layout_parse("ltk"), -1);
}

static void test_open_errors(void)
{
    moe_import_opts_t o = opts(MOE_IMPORT_AUTO);
    result_t res;
    run(&res, &o, tmp_path("missing.txt"), 0);
    CHECK_EQ_INT(res.status, MOE_ESYS);
    char want[1200];
    snprintf(want, sizeof want, "cannot open '%s': No such file or directory",
             tmp_path("missing.txt"));
    CHECK_STR(res.err, want);
    res_release(&res);
    o.format = 42;
    run(&res, &o, data_path("tiny.tokens"), 0);
    CHECK_EQ_INT(res.status, MOE_EINVAL);
    res_release(&res);
    moe_import_close(NULL);
}

int main(void)
{
    if (unit_tmp_init("test_import"))
        return 1;
    moe_log_set_level(MOE_LOG_OFF);
    test_names();
    test_tokens();
    test_tokens_meta_weights();
    test_tokens_errors();
    test_tokens_companions();
    test_gzip();
    test_jsonl();
    test_jsonl_errors();
    test_megatron();
    test_csv();
    test_npy();
    test_npy_layout();
    test_open_errors();
    unit_tmp_done();
    return unit_done("test_import");
}
