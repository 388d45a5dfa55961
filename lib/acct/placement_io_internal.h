/* acct/placement_io_internal.h -- what the placement formats' files share (placement_common.c:
 * messages that name the file, buffered output, input lines, JSON text) and each format's entry
 * points, which moe_placement_export and moe_placement_import (placement_io.c) pick from. */
#ifndef MOE_PLACEMENT_IO_INTERNAL_H
#define MOE_PLACEMENT_IO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "json_internal.h"
#include "parse_internal.h"
#include "textbuf_internal.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/placement.h"
#include "moe/trace.h"
#include "util_internal.h"

/* Shape limits of moe_placement_new, checked here first so that a file gets a precise reason. */
#define PIO_MAX_LAYERS (1u << 20)
#define PIO_MAX_COPIES 255u

/* What a message names: "'p.moep' line 7: ..." (line 0: no line). */
typedef struct perr {
    const char *name;
    char *buf;
    size_t len;
    uint64_t line;
} perr_t;

/* Output buffered in front of the caller's sink. */
typedef textbuf_t pout_t;

/* The message fmt in e (with its file and line), returning rc. */
int pio_fail(perr_t *e, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A buffer in front of fn(ctx, ...), or NULL without memory; pio_out_done flushes and frees it,
 * returning the sink's first error or 0. */
pout_t *pio_out_new(moe_placement_sink_fn fn, void *ctx);
int pio_out_done(pout_t *o);
/* n integers into o as a JSON list. */
void pio_out_ints(pout_t *o, const int32_t *v, size_t n);
/* The status of moe_placement_check as a caller's error: the placement is not writable. */
int pio_check_for_write(const moe_placement_t *p, char *msg, size_t len);

/* The next line of l into *line (and *len): 1, 0 at the end, or a negative status with the
 * reason in e (read errors, NUL bytes). e->line follows the reader. */
int pio_next_line(moe_lines_t *l, perr_t *e, char **line, size_t *len);
/* The whole input as one string (e->line reset), or NULL with *rc. */
char *pio_slurp(moe_lines_t *l, perr_t *e, int *rc);
/* "malformed JSON" (or "duplicate key") with the line and column of `at` in text. */
int pio_json_error(perr_t *e, const char *text, const char *at, const jobj_t *o);
/* The numbers of an array value, NULL if it has none. */
const double *pio_numbers(const jobj_t *o, const jval_t *v);
/* x as an integer in [lo, hi] into *v: 0, or -1 if it is not one. */
int pio_as_int(double x, int64_t lo, int64_t hi, int64_t *v);
/* "@CO\tsource: NAME (format FMT)" added to p's header. */
int pio_add_source(moe_placement_t *p, const char *fmt, const char *name);

/* ExFlow's CSV. */
moe_placement_t *pio_exflow_import(moe_lines_t *l, perr_t *e, uint32_t E, uint32_t ranks,
                                   uint32_t gpus_per_node, int *rc);
int pio_exflow_export(const moe_placement_t *p, pout_t *o, char *errbuf, size_t errlen);

/* EPLB-style JSON; arg = {experts, ranks, gpus per node} as moe_placement_import takes them.
 * pio_eplb_build checks and builds a placement from a phy2log value (and o's other keys), the
 * part SGLang's reader shares. pio_eplb_layer lays out layer l's physical slots: phy[G * C]
 * (-1: empty) and, at slot[e * pio_slot_room(p) + k], expert e's k-th slot. */
moe_placement_t *pio_eplb_import(moe_lines_t *l, perr_t *e, const uint32_t arg[3], int *rc);
moe_placement_t *pio_eplb_build(perr_t *e, const jobj_t *o, const jval_t *phy,
                                const uint32_t arg[3], const char *fmt, int *rc);
int pio_eplb_export(const moe_placement_t *p, pout_t *o);
uint32_t pio_slot_room(const moe_placement_t *p);
void pio_eplb_layer(const moe_placement_t *p, uint32_t l, int32_t *phy, uint32_t *slot,
                    uint32_t *fill);

/* SGLang's --init-expert-location JSON. */
moe_placement_t *pio_sglang_import(moe_lines_t *l, perr_t *e, const uint32_t arg[3], int *rc);
int pio_sglang_export(const moe_placement_t *p, pout_t *o, char *errbuf, size_t errlen);

#endif
