/* lib/moe.c -- library version, status strings, the logger and the @PG command-line record. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"

static int log_level = MOE_LOG_WARN;
static const char *log_prog = "moeflow";

const char *moe_version(void)
{
    return MOE_VERSION_STRING;
}

const char *moe_features(void)
{
    return MOE_FEATURES;
}

const char *moe_strerror(int status)
{
    switch (status) {
    case MOE_OK: return "success";
    case MOE_ESYS: return "system error";
    case MOE_ENOMEM: return "out of memory";
    case MOE_EFORMAT: return "invalid format";
    case MOE_ETRUNC: return "truncated input";
    case MOE_EVERSION: return "unsupported format version";
    case MOE_ERANGE: return "value out of range";
    case MOE_EINVAL: return "invalid argument";
    case MOE_ESHAPE: return "shape mismatch";
    case MOE_ECORRUPT: return "corrupt data";
    case MOE_EEMPTY: return "empty input";
    default: return "unknown error";
    }
}

const char *moe_expert_name(int expert)
{
    switch (expert) {
    case MOE_EXPERT_SWIGLU: return "swiglu";
    case MOE_EXPERT_SILU: return "silu";
    default: return "?";
    }
}

int moe_expert_parse(const char *s)
{
    for (int k = MOE_EXPERT_SWIGLU; s && k <= MOE_EXPERT_SILU; k++)
        if (strcmp(s, moe_expert_name(k)) == 0)
            return k;
    return MOE_EINVAL;
}

unsigned moe_expert_mats(int expert)
{
    return expert == MOE_EXPERT_SWIGLU ? 3 : expert == MOE_EXPERT_SILU ? 2 : 0;
}

void moe_log_set_level(int level)
{
    log_level = level < MOE_LOG_DEBUG ? MOE_LOG_DEBUG : level > MOE_LOG_OFF ? MOE_LOG_OFF : level;
}

int moe_log_get_level(void)
{
    return log_level;
}

void moe_log_set_prog(const char *prog)
{
    log_prog = prog ? prog : "moeflow";
}

void moe_log(int level, const char *fmt, ...)
{
    static const char *const names[] = {"debug: ", "", "warning: ", "error: "};
    if (level < log_level || level >= MOE_LOG_OFF)
        return;
    fflush(stdout);
    fprintf(stderr, "%s: %s", log_prog, names[level]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

char *moe_pg_line(const char *prog, int argc, char *const *argv)
{
    size_t n = 64 + 3 * strlen(prog) + strlen(PACKAGE_VERSION);
    for (int i = 0; i < argc; i++)
        n += strlen(argv[i]) + 1;
    char *s = malloc(n);
    if (!s)
        return NULL;
    int off = snprintf(s, n, "@PG\tID:%s\tPN:%s\tVN:%s\tCL:", prog, prog, PACKAGE_VERSION);
    char *p = s + off;
    for (int i = 0; i < argc; i++) {
        if (i)
            *p++ = ' ';
        for (const char *a = argv[i]; *a; a++)
            *p++ = (*a == '\t' || *a == '\n' || *a == '\r') ? ' ' : *a;
    }
    *p = '\0';
    return s;
}
