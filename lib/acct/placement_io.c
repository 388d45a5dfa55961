/* acct/placement_io.c -- placement files: moe_placement_export and moe_placement_import pick the
 * format's file: placement_text.c (moe-place(5)), placement_exflow.c (ExFlow CSV),
 * placement_eplb.c (EPLB-style JSON), placement_sglang.c (SGLang JSON); what they share is in
 * placement_common.c. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement_io_internal.h"

int moe_placement_export(const moe_placement_t *p, int format, moe_placement_sink_fn fn,
                         void *ctx, char *errbuf, size_t errlen)
{
    if (format == MOE_PLACEMENT_TEXT)
        return moe_placement_write(p, fn, ctx);
    if (format != MOE_PLACEMENT_EXFLOW && format != MOE_PLACEMENT_EPLB &&
        format != MOE_PLACEMENT_SGLANG)
        return util_errf(errbuf, errlen, MOE_EINVAL, "unknown placement format %d", format);
    int rc = pio_check_for_write(p, errbuf, errlen);
    if (rc)
        return rc;
    pout_t *o = pio_out_new(fn, ctx);
    if (!o)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    rc = format == MOE_PLACEMENT_EXFLOW   ? pio_exflow_export(p, o, errbuf, errlen)
         : format == MOE_PLACEMENT_SGLANG ? pio_sglang_export(p, o, errbuf, errlen)
                                          : pio_eplb_export(p, o);
    if (rc) {
        free(o);
        return rc == MOE_ENOMEM ? util_errf(errbuf, errlen, rc, "out of memory") : rc;
    }
    rc = pio_out_done(o);
    return rc ? util_errf(errbuf, errlen, rc, "cannot write: %s", moe_strerror(rc)) : 0;
}



moe_placement_t *moe_placement_import(const char *path, int format, uint32_t experts,
                                      uint32_t ranks, uint32_t gpus_per_node, int *status,
                                      char *errbuf, size_t errlen)
{
    int dummy;
    status = status ? status : &dummy;
    if (format == MOE_PLACEMENT_TEXT)
        return moe_placement_read(path, status, errbuf, errlen);
    if (format != MOE_PLACEMENT_EXFLOW && format != MOE_PLACEMENT_EPLB &&
        format != MOE_PLACEMENT_SGLANG) {
        *status = util_errf(errbuf, errlen, MOE_EINVAL, "unknown placement format %d", format);
        return NULL;
    }
    if (experts > MOE_TRACE_MAX_EXPERTS || ranks > MOE_MAX_RANKS ||
        gpus_per_node > MOE_MAX_RANKS) {
        *status = util_errf(errbuf, errlen, MOE_EINVAL, "%u experts, %u ranks, %u GPUs per node: at "
                      "most %u of each", experts, ranks, gpus_per_node, MOE_TRACE_MAX_EXPERTS);
        return NULL;
    }
    moe_lines_t *l = moe_lines_open(path, status, errbuf, errlen);
    if (!l)
        return NULL;
    perr_t e = {path, errbuf, errlen, 0};
    const uint32_t arg[3] = {experts, ranks, gpus_per_node};
    moe_placement_t *p =
        format == MOE_PLACEMENT_EXFLOW   ? pio_exflow_import(l, &e, experts, ranks, gpus_per_node, status)
        : format == MOE_PLACEMENT_SGLANG ? pio_sglang_import(l, &e, arg, status)
                                         : pio_eplb_import(l, &e, arg, status);
    moe_lines_close(l);
    return p;
}

int moe_placement_guess_format(const char *path)
{
    char buf[4096];
    FILE *fp = path && strcmp(path, "-") ? fopen(path, "rb") : NULL;
    size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
    if (fp)
        fclose(fp);
    buf[n] = '\0';
    const char *t = buf + strspn(buf, " \t\r\n");
    if (*t == '{' && strstr(t, "\"physical_to_logical_map\""))
        return MOE_PLACEMENT_SGLANG;
    if ((*t == '{' && strstr(t, "\"phy2log\"")) ||
        (*t == '[' && t[1 + strspn(t + 1, " \t\r\n")] == '['))
        return MOE_PLACEMENT_EPLB; /* an object with phy2log, or eplb.py's list alone */
    return strncmp(t, "Expert,Node", 11) ? -1 : MOE_PLACEMENT_EXFLOW;
}

const char *moe_placement_format_hint(const char *path)
{
    static const char *const hint[] = {
        NULL,
        "it looks like ExFlow's CSV: convert it with 'moe-place import --format exflow'",
        "it looks like an EPLB JSON: convert it with 'moe-place import --format eplb'",
        "it looks like SGLang's expert-location JSON: convert it with 'moe-place import "
        "--format sglang'"};
    int f = moe_placement_guess_format(path);
    return f > 0 ? hint[f] : NULL;
}
