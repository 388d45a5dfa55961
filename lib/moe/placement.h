/* moe/placement.h -- expert placements: which ranks hold each (layer, expert); file formats. */
#ifndef MOE_PLACEMENT_H
#define MOE_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "moe/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A placement maps every expert of every MoE layer to the ranks holding a copy of it: one rank
 * normally, several when hot experts are replicated (EPLB's redundant experts). Each rank has
 * `capacity` expert slots per layer (the memory it sets aside for expert weights); a valid
 * placement gives every expert at least one rank, never the same rank twice, and no rank more
 * than `capacity` slots in any layer. Ranks are grouped into nodes of gpus_per_node.
 *
 * Physical slots: a copy takes one slot, except where a placement read from EPLB or SGLang
 * gives an expert several slots on one rank (DeepSeek's rebalance_experts does): such a cell
 * keeps its slots, in the file's order (EPLB's log2phy), as ranks that may repeat
 * (moe_placement_set_slots, moe_placement_slot_ranks); its copies are their distinct ranks in
 * order of first appearance. Every slot counts in its rank's capacity; the rules that pick one
 * of an expert's replicas by index (vLLM's, SGLang's) pick among slots, the others among
 * copies.
 *
 * Text form (moe-place(5)): '@' header lines -- @PL with the shape first, then free @CO
 * comments, @FT (how it was fitted) and @PG (the command lines that made it) -- and one line
 * "layer<TAB>expert<TAB>rank[,rank...]" per expert, layer-major. Plain or gzipped.
 */
#define MOE_PLACEMENT_MAJOR 1
#define MOE_PLACEMENT_MINOR 1 /* 1.1: @PL model_layers and moe_layers; a file without them is
                               * written as 1.0 */
#define MOE_PLACEMENT_MAX_RANKS MOE_MAX_RANKS /* the one rank limit, moe/moe.h */

typedef struct moe_placement {
    uint32_t layers, experts, ranks;
    uint32_t gpus_per_node; /* ranks per node (divides ranks) */
    uint32_t capacity;      /* expert slots per rank per layer */
    uint32_t maxrep;        /* room for copies per expert (>= 1) */
    uint8_t *nrep;          /* [layers * experts] copies of each expert */
    uint16_t *rank;         /* [(layer * experts + expert) * maxrep + i] rank of copy i; the
                             * first copy is the primary one */
    char *text;             /* '@' lines after @PL (each '\n'-terminated), NUL-terminated, or
                             * NULL */
    uint32_t model_layers;  /* the model's layers, dense ones included (SGLang's rows); 0:
                             * unknown */
    uint32_t *model_layer;  /* [layers] the model layer each layer is, ascending; NULL:
                             * unknown (layer i is model layer i). moe_placement_set_layers
                             * sets both. */
    uint8_t *nslot;         /* [layers * experts] slots of a cell that keeps its own (0: one
                             * per copy, in copy order); NULL: none does */
    uint16_t *slot;         /* [(layer * experts + expert) * maxslot + i] rank of slot i */
    uint32_t maxslot;       /* room for slots per cell */
} moe_placement_t;

/* A placement with no expert placed yet (room for maxrep copies each, at most 255). Returns
 * NULL with *status (MOE_EINVAL for a bad shape: zero sizes, ranks not a multiple of
 * gpus_per_node, capacity * ranks < experts; MOE_ENOMEM). */
moe_placement_t *moe_placement_new(uint32_t layers, uint32_t experts, uint32_t ranks,
                                   uint32_t gpus_per_node, uint32_t capacity, uint32_t maxrep,
                                   int *status);
/* Free; NULL is a no-op. */
void moe_placement_free(moe_placement_t *p);
/* Deep copy, or NULL on ENOMEM. */
moe_placement_t *moe_placement_dup(const moe_placement_t *p);

/* Add rank r as a copy of (layer, expert) (and a slot, for a cell keeping its slots). Returns 0,
 * MOE_ERANGE (index out of range, no room for another copy) or MOE_EINVAL (r already holds
 * it). Capacity is not checked here. */
int moe_placement_add(moe_placement_t *p, uint32_t layer, uint32_t expert, uint32_t r);
/* Give (layer, expert) the n physical slots on ranks[0..n) (a rank may repeat, 1 <= n <= 255):
 * its copies become their distinct ranks in order of first appearance (at most maxrep), the
 * cell keeps the slots when a rank repeats. Returns 0, MOE_ERANGE (an index or rank out of
 * range, n or the copies too many) or MOE_ENOMEM. Capacity is not checked here. */
int moe_placement_set_slots(moe_placement_t *p, uint32_t layer, uint32_t expert,
                            const uint16_t *ranks, uint32_t n);
/* Remove every copy of every expert (keeps shape and text). */
void moe_placement_clear(moe_placement_t *p);
/* The ranks holding (layer, expert): *n of them. */
static inline const uint16_t *moe_placement_ranks(const moe_placement_t *p, uint32_t layer,
                                                  uint32_t expert, uint32_t *n)
{
    size_t i = (size_t)layer * p->experts + expert;
    *n = p->nrep[i];
    return p->rank + i * p->maxrep;
}
/* Does rank r hold a copy of (layer, expert)? */
static inline int moe_placement_holds(const moe_placement_t *p, uint32_t layer, uint32_t expert,
                                      uint32_t r)
{
    uint32_t n;
    const uint16_t *rk = moe_placement_ranks(p, layer, expert, &n);
    for (uint32_t i = 0; i < n; i++)
        if (rk[i] == r)
            return 1;
    return 0;
}
/* The physical slots of (layer, expert): the ranks of its *n slots, in order (a rank repeats
 * where it holds several); one per copy, the copies', where the cell keeps none. */
static inline const uint16_t *moe_placement_slot_ranks(const moe_placement_t *p, uint32_t layer,
                                                       uint32_t expert, uint32_t *n)
{
    size_t i = (size_t)layer * p->experts + expert;
    if (p->nslot && p->nslot[i]) {
        *n = p->nslot[i];
        return p->slot + i * p->maxslot;
    }
    return moe_placement_ranks(p, layer, expert, n);
}
/* Rank of the primary copy of (layer, expert). */
static inline uint32_t moe_placement_primary(const moe_placement_t *p, uint32_t layer,
                                             uint32_t expert)
{
    return p->rank[((size_t)layer * p->experts + expert) * p->maxrep];
}
/* Total physical slots in a layer (experts + replicas, a second slot of an expert on a rank
 * included). */
uint32_t moe_placement_slots(const moe_placement_t *p, uint32_t layer);

/* Check validity (see above). Returns 0 or MOE_EFORMAT with a one-line reason, e.g.
 * "layer 3: rank 5 holds 9 experts, capacity 8" or "layer 0 expert 17: on no rank". */
int moe_placement_check(const moe_placement_t *p, char *errbuf, size_t errlen);
/* Append one '@' text line (without '\n'). 0 or MOE_ENOMEM / MOE_EFORMAT (no leading '@'). */
int moe_placement_add_line(moe_placement_t *p, const char *line);

/* The model layers of p's layers (moe/trace.h's mapping, for m->layers == p->layers), replacing
 * what p had; an unknown mapping clears them. 0, MOE_EINVAL with a reason (a mapping that fails
 * moe_layer_map_check or is of another layer count) or MOE_ENOMEM. */
struct moe_layer_map;
int moe_placement_set_layers(moe_placement_t *p, const struct moe_layer_map *m, char *errbuf,
                             size_t errlen);
/* p's mapping as a moe_layer_map_t (ids copied; release it). 0 or MOE_ENOMEM. */
int moe_placement_layers(const moe_placement_t *p, struct moe_layer_map *m);
/* The placement of the layers a trace with mapping tm has: a copy of p when the layer counts
 * agree (the mappings must then agree where both are known), else the rows of p whose model
 * layers are tm's (p's layer i taken as model layer i when p records none): SGLang's map holds
 * every model layer, a trace only the MoE ones. NULL with *status (MOE_ESHAPE and a reason
 * naming the first layer without a row, MOE_ENOMEM). */
moe_placement_t *moe_placement_for_layers(const moe_placement_t *p, const struct moe_layer_map *tm,
                                          int *status, char *errbuf, size_t errlen);

/* moe-place check's report on one placement file: "NAME: ok: L layers x E experts on G ranks
 * (g per node), capacity C, R replicas" (R: copies beyond the first, all layers), or with `json`
 * the same figures as a JSON object {"file": NAME, "ok": true, "layers": L, "experts": E,
 * "ranks": G, "gpus_per_node": g, "capacity": C, "replicas": R}; with p NULL (the file did not
 * read) the object is {"file": NAME, "ok": false, "error": ERROR} and the text form just
 * ERROR. A malloc'd string without a final newline, or NULL when out of memory. */
char *moe_placement_summary(const moe_placement_t *p, const char *name, const char *error,
                            int json);

/* Where text goes: returns 0 or a negative status. */
typedef int (*moe_placement_sink_fn)(void *ctx, const void *buf, size_t len);

/* Write the text form; equal placements give identical bytes. Returns 0, the sink's status,
 * MOE_ENOMEM, or MOE_EINVAL for a placement that fails moe_placement_check or whose text is not
 * '@' lines each ending in '\n' (it could not be read back). */
int moe_placement_write(const moe_placement_t *p, moe_placement_sink_fn fn, void *ctx);
/* Read a placement (moe-place(5), plain or gzipped, "-" = stdin) and check it. Returns NULL with
 * *status and a one-line reason ("'p.moep' line 7: rank 9 out of range (8 ranks)"). */
moe_placement_t *moe_placement_read(const char *path, int *status, char *errbuf, size_t errlen);
/* Parse a placement held in memory (same grammar; `name` labels messages). */
moe_placement_t *moe_placement_parse(const char *text, size_t len, const char *name, int *status,
                                     char *errbuf, size_t errlen);

/* Other systems' formats. */
enum moe_placement_format {
    MOE_PLACEMENT_TEXT = 0,   /* moe-place(5) */
    MOE_PLACEMENT_EXFLOW = 1, /* ExFlow's CSV: header "Expert,Node", one row per expert with
                               * global id layer * E + expert and its GPU; primary copies only */
    MOE_PLACEMENT_EPLB = 2,   /* EPLB-style JSON: per layer phy2log (physical slot -> logical
                               * expert, slots rank-major, `capacity` per rank), log2phy and
                               * logcnt */
    MOE_PLACEMENT_SGLANG = 3, /* SGLang's --init-expert-location JSON: exactly one key,
                               * physical_to_logical_map (layers x ranks * capacity slots,
                               * rank-major, every slot a logical expert id) */
};

/* Export in a format (EXFLOW refuses replicas, SGLANG a placement with an empty slot -- a rank
 * holding fewer than `capacity` experts in a layer -- with MOE_EINVAL and a reason). */
int moe_placement_export(const moe_placement_t *p, int format, moe_placement_sink_fn fn,
                         void *ctx, char *errbuf, size_t errlen);
/* Import a file of another format. ExFlow CSVs carry neither the layer count nor E: `experts`
 * (0: 8, ExFlow's Mixtral) gives E, the layers follow from the ids, the ranks from the largest
 * GPU id + 1 unless `ranks` is given; gpus_per_node 0 means all ranks on one node. The result is
 * checked. EPLB JSON takes its counts from the file, or from these arguments where the file
 * has none (num_ranks or `ranks` is required; where both are given they must agree). SGLANG
 * JSON records neither E nor the ranks: `ranks` (the EP size) is required, `experts` (0: the
 * largest id + 1) must have every expert in every layer; -1 slots, other keys and a
 * `logical_count` file (loads, not a placement) are refused. EPLB and SGLANG may give an
 * expert two slots on one rank (DeepSeek's rebalance_experts does): both slots stay counted in
 * the rank's capacity (slots per rank), and the placement holds one copy there, which is what
 * the accounting serves from. TEXT is moe_placement_read. Returns NULL with *status and a
 * one-line reason. */
moe_placement_t *moe_placement_import(const char *path, int format, uint32_t experts,
                                      uint32_t ranks, uint32_t gpus_per_node, int *status,
                                      char *errbuf, size_t errlen);
/* The other system's format the start of the file at path looks like (MOE_PLACEMENT_SGLANG,
 * _EPLB or _EXFLOW), or -1 (neither, unreadable, or standard input): a hint for a user who
 * gave such a file where a moe-place(5) placement belongs. moe_placement_format_hint says it
 * as a clause ("it looks like an EPLB JSON: convert it with 'moe-place import --format eplb'"),
 * or returns NULL. */
int moe_placement_guess_format(const char *path);
const char *moe_placement_format_hint(const char *path);
/* SGLang's physical_to_logical_map given as numbers, rows x cols (from a torch.save dict or
 * inline JSON: moe_place_import), with the SGLANG import's rules; `name` labels messages. */
moe_placement_t *moe_placement_from_sglang(const double *ids, uint32_t rows, uint32_t cols,
                                           const char *name, uint32_t experts, uint32_t ranks,
                                           uint32_t gpus_per_node, int *status, char *errbuf,
                                           size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
