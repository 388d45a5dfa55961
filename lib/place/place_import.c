/* place/place_import.c -- another system's placement in any form it is handed over in: SGLang's
 * --init-expert-location as torch.save dict, JSON file or inline JSON (the table reader of
 * import/, the placement builder of acct/). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "moe/import.h"
#include "moe/place.h"
#include "moe/placement.h"
#include "util_internal.h"

moe_placement_t *moe_place_import(const char *path, int format, uint32_t experts, uint32_t ranks,
                                  uint32_t gpus_per_node, int *status, char *errbuf,
                                  size_t errlen)
{
    static const char *const keys[] = {"physical_to_logical_map", "logical_count"};
    FILE *fp = format == MOE_PLACEMENT_SGLANG ? fopen(path, "rb") : NULL;
    int head = fp ? getc(fp) : EOF, second = fp && head != EOF ? getc(fp) : EOF;
    if (fp)
        fclose(fp);
    /* JSON files keep the JSON reader's messages (line and column); a torch.save archive
     * ("PK") or JSON given inline go through the table reader */
    if (format != MOE_PLACEMENT_SGLANG || (fp && !(head == 'P' && second == 'K')) ||
        (!fp && !strchr(path, '{')))
        return moe_placement_import(path, format, experts, ranks, gpus_per_node, status, errbuf,
                                    errlen);
    moe_table_t t;
    if ((*status = moe_import_table(path, keys, 2, &t, errbuf, errlen)) != 0)
        return NULL;
    const char *name = fp ? path : "(inline JSON)";
    moe_placement_t *p = NULL;
    if (t.key == 1)
        *status = util_errf(errbuf, errlen, MOE_EFORMAT, "'%s': holds 'logical_count' (expert "
                            "loads for SGLang's own rebalancing), not a placement (moe-place "
                            "fit --loads reads it)", name);
    else if (t.nkeys != 1) /* init_by_mapping takes every key as a keyword argument */
        *status = util_errf(errbuf, errlen, MOE_EFORMAT, "'%s': SGLang's expert location is a "
                            "dict with exactly one key, 'physical_to_logical_map' or "
                            "'logical_count' (%u keys here: '%s')", name, t.nkeys, t.other);
    else if (t.nd != 2)
        *status = util_errf(errbuf, errlen, MOE_EFORMAT, "'%s': 'physical_to_logical_map' is "
                            "%u-D, not [layers][slots]", name, t.nd);
    else
        p = moe_placement_from_sglang(t.v, (uint32_t)t.dim[0], (uint32_t)t.dim[1], name,
                                      experts, ranks, gpus_per_node, status, errbuf, errlen);
    moe_table_free(&t);
    return p;
}
