/* tests/unit/test_cli.c -- shared command-line plumbing: number parsing, @PG lines, the common
 * options, help and version text, picture outputs. */
#include "config.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "moe/moe.h"
#include "moe/plot.h"
#include "unit.h"

/* Parse s in [min, max]: the value, or the error text prefixed with "!". */
static const char *u64(const char *s, uint64_t min, uint64_t max)
{
    static char out[300];
    char err[256] = "";
    uint64_t v = 12345;
    if (moe_parse_u64(s, min, max, &v, "token count", err, sizeof err) == 0)
        snprintf(out, sizeof out, "%llu", (unsigned long long)v);
    else if (v != 12345)
        snprintf(out, sizeof out, "!output changed on failure");
    else
        snprintf(out, sizeof out, "!%s", err);
    return out;
}

static void test_parse_u64(void)
{
    const uint64_t M = UINT64_MAX;
    CHECK_STR(u64("0", 0, M), "0");
    CHECK_STR(u64("42", 0, M), "42");
    CHECK_STR(u64("007", 0, M), "7");
    CHECK_STR(u64("10K", 0, M), "10000");
    CHECK_STR(u64("10k", 0, M), "10000");
    CHECK_STR(u64("2M", 0, M), "2000000");
    CHECK_STR(u64("3G", 0, M), "3000000000");
    CHECK_STR(u64("1Ki", 0, M), "1024");
    CHECK_STR(u64("3Mi", 0, M), "3145728");
    CHECK_STR(u64("2Gi", 0, M), "2147483648");
    CHECK_STR(u64("18446744073709551615", 0, M), "18446744073709551615");
    /* bounds (inclusive) */
    CHECK_STR(u64("1", 1, 100), "1");
    CHECK_STR(u64("100", 1, 100), "100");
    CHECK_STR(u64("0", 1, 100), "!token count '0' out of range [1, 100]");
    CHECK_STR(u64("101", 1, 100), "!token count '101' out of range [1, 100]");
    CHECK_STR(u64("1K", 1, 999), "!token count '1K' out of range [1, 999]");
    CHECK_STR(u64("20000000000G", 0, M), "!token count '20000000000G' out of range [0, "
                                         "18446744073709551615]");
    CHECK(u64("18446744073709551616", 0, M)[0] == '!');
    /* garbage and signs */
    static const char *const bad[] = {"", "abc", "12x", "1KB", "1Kix", "K", "Ki", " 5", "+5",
                                      "-1", "-0", "0x10", "1.5K", "1e3", "5 ", "1iK"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char want[100];
        snprintf(want, sizeof want, "!invalid token count '%s'", bad[i]);
        CHECK_STR(u64(bad[i], 0, M), want);
    }
    char err[64];
    uint64_t v;
    CHECK_EQ_INT(moe_parse_u64(NULL, 0, 10, &v, "x", err, sizeof err), -1);
    printf("parse_u64: suffixes, bounds, overflow, %zu malformed inputs\n",
           sizeof bad / sizeof *bad);
}

static const char *dbl(const char *s, double min, double max)
{
    static char out[300];
    char err[256] = "";
    double v = 12345;
    if (moe_parse_double(s, min, max, &v, "fraction", err, sizeof err) == 0)
        snprintf(out, sizeof out, "%.17g", v);
    else if (v != 12345)
        snprintf(out, sizeof out, "!output changed on failure");
    else
        snprintf(out, sizeof out, "!%s", err);
    return out;
}

static void test_parse_double(void)
{
    CHECK_STR(dbl("0.5", 0, 1), "0.5");
    CHECK_STR(dbl("0", 0, 1), "0");
    CHECK_STR(dbl("1", 0, 1), "1");
    CHECK_STR(dbl("1e-3", 0, 1), "0.001");
    CHECK_STR(dbl(".25", 0, 1), "0.25");
    CHECK_STR(dbl("-0.5", -1, 1), "-0.5");
    CHECK_STR(dbl("1.5", 0, 1), "!fraction '1.5' out of range [0, 1]");
    CHECK_STR(dbl("-0.001", 0, 1), "!fraction '-0.001' out of range [0, 1]");
    CHECK_STR(dbl("1e-7", 1e-6, 1e6), "!fraction '1e-7' out of range [1e-06, 1e+06]");
    static const char *const bad[] = {"", "abc", "nan", "NaN", "inf", "-inf", "0.5x", "1e999",
                                      "0.5 0.6", "1,5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char want[100];
        snprintf(want, sizeof want, "!invalid fraction '%s'", bad[i]);
        CHECK_STR(dbl(bad[i], -1e300, 1e300), want);
    }
    printf("parse_double: range, %zu malformed inputs\n", sizeof bad / sizeof *bad);
}

static void test_pg_line(void)
{
    char *argv[] = {"moe-trace", "view", "-o", "a\tb", "line1\nline2", "cr\r", ""};
    char *s = moe_pg_line("moe-trace", 7, argv);
    CHECK_STR(s, "@PG\tID:moe-trace\tPN:moe-trace\tVN:" PACKAGE_VERSION
                 "\tCL:moe-trace view -o a b line1 line2 cr  ");
    /* Exactly four tabs: the field separators. */
    int tabs = 0;
    for (const char *p = s; p && *p; p++)
        tabs += *p == '\t';
    CHECK_EQ_INT(tabs, 4);
    CHECK(s && !strchr(s, '\n') && !strchr(s, '\r'));
    free(s);
    s = moe_pg_line("moe-place", 0, argv);
    CHECK_STR(s, "@PG\tID:moe-place\tPN:moe-place\tVN:" PACKAGE_VERSION "\tCL:");
    free(s);
    /* Long command lines are not cut. */
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char *argv2[] = {big, big};
    s = moe_pg_line("p", 2, argv2);
    CHECK(s && strlen(s) == strlen("@PG\tID:p\tPN:p\tVN:" PACKAGE_VERSION "\tCL:") + 2 * 4999 + 1);
    free(s);
    printf("pg_line: tabs, newlines and CRs flattened, empty and long command lines\n");
}

static void test_opts(void)
{
    moe_opts_t o;
    moe_opts_init(&o);
    CHECK_STR(o.out, "-");
    CHECK_EQ_INT(o.fmt, 0);
    CHECK_EQ_INT(o.level, -1);
    CHECK_EQ_INT(o.threads, 0);
    CHECK_EQ_INT(o.verbosity, 0);
    CHECK_EQ_INT(o.no_pg, 0);
    CHECK_EQ_INT(o.force, 0);
    CHECK_EQ_INT(o.progress, -1);

    char err[256];
    CHECK_EQ_INT(moe_opts_parse(&o, 'o', "out.moet", err, sizeof err), 1);
    CHECK_STR(o.out, "out.moet");
    for (const char *f = "butz"; *f; f++) {
        char a[2] = {*f, 0};
        CHECK_EQ_INT(moe_opts_parse(&o, 'O', a, err, sizeof err), 1);
        CHECK_EQ_INT(o.fmt, *f);
    }
    static const char *const badfmt[] = {"x", "bb", "", "B", "text"};
    for (size_t i = 0; i < sizeof badfmt / sizeof *badfmt; i++) {
        err[0] = '\0';
        CHECK_EQ_INT(moe_opts_parse(&o, 'O', badfmt[i], err, sizeof err), -1);
        char want[100];
        snprintf(want, sizeof want, "invalid output format '%s' (expected b, u, t or z)",
                 badfmt[i]);
        CHECK_STR(err, want);
    }
    CHECK_EQ_INT(o.fmt, 'z'); /* unchanged by the failures */

    CHECK_EQ_INT(moe_opts_parse(&o, 'l', "0", err, sizeof err), 1);
    CHECK_EQ_INT(o.level, 0);
    CHECK_EQ_INT(moe_opts_parse(&o, 'l', "9", err, sizeof err), 1);
    CHECK_EQ_INT(o.level, 9);
    CHECK_EQ_INT(moe_opts_parse(&o, 'l', "10", err, sizeof err), -1);
    CHECK_STR(err, "compression level '10' out of range [0, 9]");
    CHECK_EQ_INT(moe_opts_parse(&o, 'l', "-1", err, sizeof err), -1);
    CHECK_STR(err, "invalid compression level '-1'");
    CHECK_EQ_INT(moe_opts_parse(&o, 'l', "fast", err, sizeof err), -1);
    CHECK_EQ_INT(o.level, 9);

    CHECK_EQ_INT(moe_opts_parse(&o, '@', "3", err, sizeof err), 1);
    CHECK_EQ_INT(o.threads, 3);
    CHECK_EQ_INT(moe_opts_parse(&o, '@', "0", err, sizeof err), 1);
    CHECK_EQ_INT(o.threads, 0);
    CHECK_EQ_INT(moe_opts_parse(&o, '@', "1024", err, sizeof err), 1);
    CHECK_EQ_INT(o.threads, 1024);
    CHECK_EQ_INT(moe_opts_parse(&o, '@', "1025", err, sizeof err), -1);
    CHECK_STR(err, "thread count '1025' out of range [0, 1024]");
    CHECK_EQ_INT(moe_opts_parse(&o, '@', "2K", err, sizeof err), -1);
    CHECK_EQ_INT(moe_opts_parse(&o, '@', "-2", err, sizeof err), -1);
    CHECK_STR(err, "invalid thread count '-2'");
    CHECK_EQ_INT(moe_opts_parse(&o, '@', "", err, sizeof err), -1);
    CHECK_EQ_INT(o.threads, 1024);

    CHECK_EQ_INT(moe_opts_parse(&o, 'v', NULL, err, sizeof err), 1);
    CHECK_EQ_INT(moe_opts_parse(&o, 'v', NULL, err, sizeof err), 1);
    CHECK_EQ_INT(moe_opts_parse(&o, 'q', NULL, err, sizeof err), 1);
    CHECK_EQ_INT(o.verbosity, 1);
    CHECK_EQ_INT(moe_opts_parse(&o, 'f', NULL, err, sizeof err), 1);
    CHECK_EQ_INT(o.force, 1);
    CHECK_EQ_INT(moe_opts_parse(&o, MOE_OPTC_NO_PG, NULL, err, sizeof err), 1);
    CHECK_EQ_INT(o.no_pg, 1);
    CHECK_EQ_INT(moe_opts_parse(&o, MOE_OPTC_PROGRESS, NULL, err, sizeof err), 1);
    CHECK_EQ_INT(o.progress, 1);
    CHECK_EQ_INT(moe_opts_parse(&o, MOE_OPTC_NO_PROGRESS, NULL, err, sizeof err), 1);
    CHECK_EQ_INT(o.progress, 0);
    /* Not shared options: left to the tool. */
    CHECK_EQ_INT(moe_opts_parse(&o, 'n', "5", err, sizeof err), 0);
    CHECK_EQ_INT(moe_opts_parse(&o, MOE_OPTC_HELP, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(moe_opts_parse(&o, MOE_OPTC_VERSION, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(moe_opts_parse(&o, MOE_OPTC_TOOL, NULL, err, sizeof err), 0);

    /* -v/-q move the log level around the default (warnings). */
    moe_opts_t lo;
    moe_opts_init(&lo);
    lo.verbosity = 1;
    moe_opts_apply_log(&lo);
    CHECK_EQ_INT(moe_log_get_level(), MOE_LOG_INFO);
    lo.verbosity = -1;
    moe_opts_apply_log(&lo);
    CHECK_EQ_INT(moe_log_get_level(), MOE_LOG_ERROR);
    lo.verbosity = 0;
    moe_opts_apply_log(&lo);
    CHECK_EQ_INT(moe_log_get_level(), MOE_LOG_WARN);
    lo.verbosity = 9;
    moe_opts_apply_log(&lo);
    CHECK_EQ_INT(moe_log_get_level(), MOE_LOG_DEBUG);
    moe_log_set_level(MOE_LOG_WARN);
    printf("opts: defaults, -o, -O, -l, -@ (valid and invalid), flags, log levels\n");
}

/* Help lines of option groups, and the version text. */
static void test_usage_version(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    moe_opts_usage(fp, MOE_OPT_OUTPUT | MOE_OPT_THREADS);
    fclose(fp);
    CHECK(strstr(buf, "  -o, --output=FILE") != NULL);
    CHECK(strstr(buf, "  -@, --threads=N") != NULL);
    CHECK(strstr(buf, "--output-fmt") == NULL);
    CHECK(strstr(buf, "--no-PG") == NULL);
    CHECK(strstr(buf, "      --help") != NULL);
    CHECK(strstr(buf, "      --version") != NULL);
    /* GNU layout: every line starts with two spaces and fits in 80 columns. */
    int badline = 0;
    for (char *p = buf; *p;) {
        char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        badline += strncmp(p, "  ", 2) != 0 || n > 80;
        p += n + (nl != NULL);
    }
    CHECK_EQ_INT(badline, 0);
    free(buf);
    fp = open_memstream(&buf, &len);
    moe_opts_usage(fp, MOE_OPT_ALL);
    fclose(fp);
    CHECK(strstr(buf, "--output-fmt") && strstr(buf, "--level") && strstr(buf, "--no-PG") &&
          strstr(buf, "--progress") && strstr(buf, "--no-progress") && strstr(buf, "--force"));
    free(buf);

    fp = open_memstream(&buf, &len);
    moe_print_version(fp, "moe-trace");
    fclose(fp);
    char want[300];
    snprintf(want, sizeof want, "moe-trace (moeflow) %s\nlibmoecore %s\nfeatures: %s\n",
             PACKAGE_VERSION, MOE_VERSION_STRING, moe_features());
    CHECK_STR(buf, want);
    CHECK(strstr(moe_features(), "zlib") != NULL);
    free(buf);
    CHECK_STR(moe_version(), MOE_VERSION_STRING);
    CHECK_STR(moe_version(), PACKAGE_VERSION);

    /* Every status has its own description. */
    for (int a = MOE_EEMPTY; a <= 0; a++) {
        CHECK(strcmp(moe_strerror(a), "unknown error") != 0);
        for (int b = a + 1; b <= 0; b++)
            CHECK(strcmp(moe_strerror(a), moe_strerror(b)) != 0);
    }
    CHECK_STR(moe_strerror(-99), "unknown error");
    CHECK_STR(moe_strerror(MOE_ETRUNC), "truncated input");
    printf("usage lines by group, version text, status strings\n");
}

/* Entries of a directory besides . and .. (temporaries left behind show here). */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

/* moe_cli_picture: drawn by the path's ending or as asked, invisible until committed, removed
 * when freed uncommitted; no path, no picture. */
static void test_picture(void)
{
    const char *tmp = getenv("TMPDIR");
    char dir[512], a[600], b[600], c[600];
    snprintf(dir, sizeof dir, "%s/test_cli-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(a, sizeof a, "%s/a.svg", dir);
    snprintf(b, sizeof b, "%s/b.svg", dir);
    snprintf(c, sizeof c, "%s/none/c.png", dir);
    moe_canvas_t *cv = moe_canvas_new(40, 30);
    CHECK(cv && moe_canvas_rect(cv, 2, 2, 10, 10, 0xff0000) == 0);
    moe_cli_picture_t p;
    CHECK_EQ_INT(moe_cli_picture_draw("test_cli", &p, NULL, cv, -1), 0);
    CHECK_EQ_INT(moe_cli_picture_write("test_cli", &p), 0);
    CHECK_EQ_INT(moe_cli_picture_commit("test_cli", &p), 0);
    moe_cli_picture_free(&p);
    CHECK_EQ_INT(dir_entries(dir), 0);

    CHECK_EQ_INT(moe_cli_picture_draw("test_cli", &p, a, cv, -1), 0); /* SVG by the name */
    CHECK(p.len > 4 && strstr(p.data, "<svg") != NULL);
    CHECK_EQ_INT(moe_cli_picture_write("test_cli", &p), 0);
    CHECK(access(a, F_OK) != 0); /* only the temporary so far */
    CHECK_EQ_INT(moe_cli_picture_commit("test_cli", &p), 0);
    struct stat st;
    CHECK(stat(a, &st) == 0 && (size_t)st.st_size == p.len);
    moe_cli_picture_free(&p); /* committed: stays */
    CHECK(access(a, F_OK) == 0);

    CHECK_EQ_INT(moe_cli_picture_draw("test_cli", &p, b, cv, 0), 0); /* PNG, whatever the name */
    CHECK(p.len > 8 && memcmp(p.data, "\x89PNG", 4) == 0);
    CHECK_EQ_INT(moe_cli_picture_write("test_cli", &p), 0);
    moe_cli_picture_free(&p); /* written, not committed: removed */
    CHECK(access(b, F_OK) != 0);
    CHECK_EQ_INT(dir_entries(dir), 1);

    /* a drawing out of memory, a missing directory: one message each */
    CHECK_EQ_INT(moe_cli_picture_draw("test_cli", &p, b, NULL, -1), 1);
    moe_cli_picture_free(&p);
    CHECK_EQ_INT(moe_cli_picture_save("test_cli", c, cv, -1), 1);
    CHECK_EQ_INT(moe_cli_picture_save("test_cli", b, cv, -1), 0);
    CHECK(access(b, F_OK) == 0);
    CHECK_EQ_INT(dir_entries(dir), 2);
    moe_canvas_free(cv);
    unlink(a);
    unlink(b);
    rmdir(dir);
    printf("picture outputs: drawn, written, committed or removed\n");
}

int main(void)
{
    test_parse_u64();
    test_parse_double();
    test_pg_line();
    test_opts();
    test_usage_version();
    test_picture();
    return unit_done("test_cli");
}
