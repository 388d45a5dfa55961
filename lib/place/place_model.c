/* place/place_model.c -- exflow's stage integer program, built for lp_solve column by column. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "place_lp_internal.h"

/*
 * The variables and rows are those of place_exflow.c's comment. Rows come in blocks (row 0 is
 * the objective):
 *   assign  sum_p x[k][p] = 1                              each item k (eq. 10)
 *   cap     sum_{k in layer j} x[k][p] <= lim[j]           each layer and place (= when exact)
 *   order   x[r][p] - sum_{m < r} x[m][p - 1] <= 0         layer-0 items r >= 1, 1 <= p <= r
 *   link    s[e][p] - x[a][p] <= 0, s[e][p] - x[b][p] <= 0  each edge (a, b) and place
 *   hub     sum_{e out of h} s[e][p] - lim[j + 1] x[h][p] <= 0, and the same over the edges
 *           into h with lim[j - 1], each place, for items with more such edges than the limit
 * lp_solve keeps the bounds of rows and columns in one array, rows first, so every row added
 * after the columns moves the bounds of all columns: built row by row, a model of 10^5 columns
 * took minutes. Columns added after all rows move nothing, so the model is built by columns.
 */
typedef struct xf_model {
    const plc_stage_t *s;
    uint32_t P, N, n0;
    size_t ne;
    uint32_t *layer;       /* [N] layer of each item */
    size_t *out_first;     /* [N + 1] edges out of item k: out_first[k] .. (edges are ordered) */
    size_t *in_first;      /* [N + 1] edges into item k: in_edge[in_first[k] ..] */
    size_t *in_edge;
    int *hub[2];           /* [N] first hub row of item k over its edges out (0) / in (1), or 0 */
    int *order_first;      /* [n0] first order row of layer-0 item r >= 1 */
    int cap0, order0, link0, rows;
    struct xf_entry {
        int row;
        REAL val;
    } *ent;                /* one column's entries */
    int *row;
    REAL *val;
} xf_model_t;

static void model_release(xf_model_t *m)
{
    free(m->layer);
    free(m->out_first);
    free(m->in_first);
    free(m->in_edge);
    free(m->hub[0]);
    free(m->hub[1]);
    free(m->order_first);
    free(m->ent);
    free(m->row);
    free(m->val);
}

/* Edges out of and into each item, and each item's layer. */
static void model_edges(xf_model_t *m)
{
    const plc_stage_t *s = m->s;
    for (uint32_t j = 0; j < s->layers; j++)
        for (uint32_t k = s->off[j]; k < s->off[j + 1]; k++)
            m->layer[k] = j;
    for (size_t e = 0; e < m->ne; e++) {
        m->out_first[s->edge[e].a + 1]++;
        m->in_first[s->edge[e].b + 1]++;
    }
    for (uint32_t k = 0; k < m->N; k++) {
        m->out_first[k + 1] += m->out_first[k];
        m->in_first[k + 1] += m->in_first[k];
    }
    for (size_t e = 0; e < m->ne; e++)
        m->in_edge[m->in_first[s->edge[e].b]++] = e;
    for (uint32_t k = m->N; k > 0; k--)
        m->in_first[k] = m->in_first[k - 1];
    m->in_first[0] = 0;
}

/* Number the rows: the blocks in order, hub rows only where they can bind. */
static void model_number(xf_model_t *m)
{
    const plc_stage_t *s = m->s;
    int row = 1 + (int)m->N;
    m->cap0 = row;
    row += (int)(s->layers * m->P);
    m->order0 = row;
    for (uint32_t r = 1; r < m->n0; r++) {
        m->order_first[r] = row;
        row += (int)(r < m->P - 1 ? r : m->P - 1);
    }
    m->link0 = row;
    row += (int)(2 * m->ne * m->P);
    for (uint32_t k = 0; k < m->N; k++) {
        uint32_t j = m->layer[k];
        size_t dout = m->out_first[k + 1] - m->out_first[k];
        size_t din = m->in_first[k + 1] - m->in_first[k];
        m->hub[0][k] = j + 1 < s->layers && dout > s->lim[j + 1] ? row : 0;
        row += m->hub[0][k] ? (int)m->P : 0;
        m->hub[1][k] = j > 0 && din > s->lim[j - 1] ? row : 0;
        row += m->hub[1][k] ? (int)m->P : 0;
    }
    m->rows = row - 1;
}

static int model_init(xf_model_t *m, const plc_stage_t *s)
{
    memset(m, 0, sizeof *m);
    m->s = s;
    m->P = s->places;
    m->N = s->off[s->layers];
    m->n0 = s->off[1] - s->off[0];
    m->ne = s->eoff[s->layers - 1];
    uint32_t maxn = plc_stage_maxn(s);
    size_t room = 2 * (size_t)maxn + m->n0 + 8;
    m->layer = malloc((m->N + 1) * sizeof *m->layer);
    m->out_first = calloc(m->N + 2, sizeof *m->out_first);
    m->in_first = calloc(m->N + 2, sizeof *m->in_first);
    m->in_edge = malloc((m->ne + 1) * sizeof *m->in_edge);
    m->hub[0] = malloc((m->N + 1) * sizeof *m->hub[0]);
    m->hub[1] = malloc((m->N + 1) * sizeof *m->hub[1]);
    m->order_first = malloc((m->n0 + 1) * sizeof *m->order_first);
    m->ent = malloc(room * sizeof *m->ent);
    m->row = malloc(room * sizeof *m->row);
    m->val = malloc(room * sizeof *m->val);
    if (!m->layer || !m->out_first || !m->in_first || !m->in_edge || !m->hub[0] || !m->hub[1] ||
        !m->order_first || !m->ent || !m->row || !m->val)
        return MOE_ENOMEM;
    model_edges(m);
    model_number(m);
    return 0;
}

/* Types and right-hand sides of all rows (the matrix is still empty, so this is cheap). */
static int model_rows(lprec *lp, const xf_model_t *m)
{
    const plc_stage_t *s = m->s;
    int ok = 1;
    for (int r = 1; r <= m->rows && ok; r++)
        ok = set_constr_type(lp, r, r < m->cap0 ? EQ : LE) && (r >= m->cap0 || set_rh(lp, r, 1));
    for (uint32_t j = 0; j < s->layers && ok; j++)
        for (uint32_t p = 0; p < m->P && ok; p++) {
            int r = m->cap0 + (int)(j * m->P + p);
            ok = set_constr_type(lp, r, s->exact[j] ? EQ : LE) && set_rh(lp, r, s->lim[j]);
        }
    return ok;
}

static int entry_cmp(const void *x, const void *y)
{
    const struct xf_entry *a = x, *b = y;
    return (a->row > b->row) - (a->row < b->row);
}

/* Add the column of the n entries gathered, in row order. */
static int model_add(lprec *lp, xf_model_t *m, int n)
{
    qsort(m->ent, (size_t)n, sizeof *m->ent, entry_cmp);
    for (int t = 0; t < n; t++) {
        m->row[t] = m->ent[t].row;
        m->val[t] = m->ent[t].val;
    }
    return add_columnex(lp, n, m->val, m->row);
}

/* The order rows x[k][p] is in: its own (+1) and, as an earlier item on place p, those of the
 * later items on place p + 1 (-1). Only items of layer 0 have any. */
static int order_entries(const xf_model_t *m, uint32_t k, uint32_t p, struct xf_entry *ent)
{
    int n = 0;
    if (k >= m->n0)
        return 0;
    if (k >= 1 && p >= 1 && p <= k && p < m->P)
        ent[n++] = (struct xf_entry){m->order_first[k] + (int)p - 1, 1};
    for (uint32_t r = k + 1 > p + 1 ? k + 1 : p + 1; p + 1 < m->P && r < m->n0; r++)
        ent[n++] = (struct xf_entry){m->order_first[r] + (int)p, -1};
    return n;
}

/* Column x[k][p]: binary, fixed to 0 where the order rows forbid it anyway (r < p in layer 0). */
static int model_x(lprec *lp, xf_model_t *m, uint32_t k, uint32_t p)
{
    const plc_stage_t *s = m->s;
    uint32_t j = m->layer[k];
    int n = 0;
    m->ent[n++] = (struct xf_entry){1 + (int)k, 1};
    m->ent[n++] = (struct xf_entry){m->cap0 + (int)(j * m->P + p), 1};
    n += order_entries(m, k, p, m->ent + n);
    for (size_t e = m->out_first[k]; e < m->out_first[k + 1]; e++)
        m->ent[n++] = (struct xf_entry){m->link0 + (int)(2 * (e * m->P + p)), -1};
    for (size_t t = m->in_first[k]; t < m->in_first[k + 1]; t++)
        m->ent[n++] = (struct xf_entry){m->link0 + (int)(2 * (m->in_edge[t] * m->P + p)) + 1, -1};
    if (m->hub[0][k])
        m->ent[n++] = (struct xf_entry){m->hub[0][k] + (int)p, -(REAL)s->lim[j + 1]};
    if (m->hub[1][k])
        m->ent[n++] = (struct xf_entry){m->hub[1][k] + (int)p, -(REAL)s->lim[j - 1]};
    int col = (int)(k * m->P + p) + 1;
    return model_add(lp, m, n) && set_binary(lp, col, TRUE) &&
           (k >= m->n0 || p <= k || set_upbo(lp, col, 0));
}

/* Column s[e][p], its objective minus the edge's weight in units of `unit`. */
static int model_s(lprec *lp, xf_model_t *m, size_t e, uint32_t p, double unit)
{
    const plc_edge_t *ed = &m->s->edge[e];
    int n = 0;
    m->ent[n++] = (struct xf_entry){0, -ed->w / unit};
    m->ent[n++] = (struct xf_entry){m->link0 + (int)(2 * (e * m->P + p)), 1};
    m->ent[n++] = (struct xf_entry){m->link0 + (int)(2 * (e * m->P + p)) + 1, 1};
    if (m->hub[0][ed->a])
        m->ent[n++] = (struct xf_entry){m->hub[0][ed->a] + (int)p, 1};
    if (m->hub[1][ed->b])
        m->ent[n++] = (struct xf_entry){m->hub[1][ed->b] + (int)p, 1};
    return model_add(lp, m, n);
}

lprec *plc_model_build(const plc_stage_t *s, double unit)
{
    xf_model_t m;
    int ok = !model_init(&m, s);
    lprec *lp = ok ? plc_lp_new(m.rows, 0) : NULL;
    ok = lp && model_rows(lp, &m);
    for (uint32_t k = 0; k < m.N && ok; k++)
        for (uint32_t p = 0; p < m.P && ok; p++)
            ok = model_x(lp, &m, k, p);
    for (size_t e = 0; e < m.ne && ok; e++)
        for (uint32_t p = 0; p < m.P && ok; p++)
            ok = model_s(lp, &m, e, p, unit);
    model_release(&m);
    if (!ok && lp) {
        delete_lp(lp);
        lp = NULL;
    }
    return lp;
}
