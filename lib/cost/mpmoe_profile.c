/* lib/cost/mpmoe_profile.c -- the MPMoE profile format: measured times "S B n seconds" that
 * the profile-based search (MPMoE Alg. 1) looks up. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/costcfg.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "util_internal.h"

void moe_mpmoe_profile_release(moe_mpmoe_profile_t *p)
{
    free(p->s);
    free(p->B);
    free(p->sec);
    free(p->part);
    memset(p, 0, sizeof *p);
}

static int profile_add(moe_mpmoe_profile_t *p, int s, double B, uint32_t n, double sec)
{
    if (p->n == p->cap) {
        uint32_t cap = p->cap ? 2 * p->cap : 64;
        void **const arr[] = {(void **)&p->s, (void **)&p->B, (void **)&p->sec, (void **)&p->part};
        const size_t size[] = {sizeof *p->s, sizeof *p->B, sizeof *p->sec, sizeof *p->part};
        if (util_resize_each(cap, 4, arr, size))
            return MOE_ENOMEM;
        p->cap = cap;
    }
    p->s[p->n] = s, p->B[p->n] = B, p->part[p->n] = n, p->sec[p->n++] = sec;
    return 0;
}

/* One line (comment already cut): blank, or a measurement. */
static int profile_line(moe_mpmoe_profile_t *p, char *line)
{
    char name[16];
    double B, sec;
    unsigned n;
    int end = 0;
    if (!line[strspn(line, " \t\r")])
        return 0;
    if (sscanf(line, " %15s %lf %u %lf %n", name, &B, &n, &sec, &end) != 4 || line[end] ||
        moe_mpmoe_reuse_parse(name) < 0 || !(B > 0) || !isfinite(B) || !n || n > 4096 ||
        !(sec > 0) || !isfinite(sec))
        return MOE_EFORMAT;
    return profile_add(p, moe_mpmoe_reuse_parse(name), B, n, sec);
}

static int profile_run(moe_mpmoe_profile_t *p, moe_lines_t *l, const char *name, char *err,
                       size_t errlen)
{
    char *line;
    size_t len;
    int rc;
    memset(p, 0, sizeof *p);
    while ((rc = moe_lines_next(l, &line, &len)) == 1) {
        uint64_t lineno = moe_lines_lineno(l);
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        else if (strlen(line) != len)
            rc = MOE_EFORMAT; /* a NUL outside a comment */
        rc = rc < 0 ? rc : profile_line(p, line);
        if (rc == MOE_EFORMAT)
            rc = util_errf(err, errlen, rc, "'%s' line %" PRIu64 ": expected 'S B n seconds' "
                           "(S none, S1-S4)", name, lineno);
        else if (rc)
            rc = util_errf(err, errlen, rc, "%s", moe_strerror(rc));
        if (rc)
            break;
    }
    if (rc < 0 && !err[0])
        util_errf(err, errlen, rc, "cannot read '%s': %s", name,
                  rc == MOE_ESYS ? strerror(errno) : moe_strerror(rc));
    else if (rc == 0 && !p->n)
        rc = util_errf(err, errlen, MOE_EEMPTY, "'%s': no measurements", name);
    moe_lines_close(l);
    if (rc)
        moe_mpmoe_profile_release(p);
    return rc;
}

int moe_mpmoe_profile_read(moe_mpmoe_profile_t *p, const char *path, char *err, size_t errlen)
{
    int st;
    memset(p, 0, sizeof *p);
    moe_lines_t *l = moe_lines_open(path, &st, err, errlen);
    if (!l)
        return st;
    err[0] = 0;
    return profile_run(p, l, path, err, errlen);
}

int moe_mpmoe_profile_parse(moe_mpmoe_profile_t *p, const char *text, size_t len,
                            const char *name, char *err, size_t errlen)
{
    int st;
    memset(p, 0, sizeof *p);
    moe_lines_t *l = moe_lines_dopen(-1, (const uint8_t *)text, len, &st);
    if (!l)
        return util_errf(err, errlen, st, "'%s': %s", name, moe_strerror(st));
    err[0] = 0;
    return profile_run(p, l, name, err, errlen);
}

double moe_mpmoe_profile_time(void *ctx, double B, uint32_t n)
{
    const moe_mpmoe_profile_t *p = ctx;
    for (uint32_t i = 0; i < p->n; i++)
        if (p->s[i] == p->cur_s && p->B[i] == B && p->part[i] == n)
            return p->sec[i];
    return NAN;
}
