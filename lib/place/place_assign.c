/* place/place_assign.c -- minimum-cost assignment (Hungarian method with potentials). */
#include "config.h"

#include <float.h>
#include <stdlib.h>

#include "moe/moe.h"
#include "place_internal.h"

/*
 * The shortest-augmenting-path form: rows are added one at a time; for each, Dijkstra over the
 * columns on reduced costs (row potentials u, column potentials v) finds the cheapest way to
 * free a column, and the potentials keep reduced costs non-negative. Arrays are 1-based with
 * column 0 as the sentinel holding the row being inserted.
 */
int place_assign(const double *cost, uint32_t n, uint32_t m, uint32_t *col)
{
    double *u = calloc(n + 1, sizeof *u), *v = calloc(m + 1, sizeof *v);
    double *minv = malloc((m + 1) * sizeof *minv);
    uint32_t *owner = calloc(m + 1, sizeof *owner), *way = calloc(m + 1, sizeof *way);
    char *used = malloc(m + 1);
    int rc = u && v && minv && owner && way && used ? 0 : MOE_ENOMEM;
    for (uint32_t i = 1; i <= n && !rc; i++) {
        owner[0] = i;
        uint32_t j0 = 0;
        for (uint32_t j = 0; j <= m; j++) {
            minv[j] = DBL_MAX;
            used[j] = 0;
        }
        do {
            used[j0] = 1;
            uint32_t i0 = owner[j0], j1 = 0;
            double delta = DBL_MAX;
            for (uint32_t j = 1; j <= m; j++) {
                if (used[j])
                    continue;
                double cur = cost[(size_t)(i0 - 1) * m + (j - 1)] - u[i0] - v[j];
                if (cur < minv[j]) {
                    minv[j] = cur;
                    way[j] = j0;
                }
                if (minv[j] < delta) {
                    delta = minv[j];
                    j1 = j;
                }
            }
            for (uint32_t j = 0; j <= m; j++) {
                if (used[j]) {
                    u[owner[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
        } while (owner[j0] != 0);
        do {
            uint32_t j1 = way[j0];
            owner[j0] = owner[j1];
            j0 = j1;
        } while (j0);
    }
    for (uint32_t j = 1; j <= m && !rc; j++)
        if (owner[j])
            col[owner[j] - 1] = j - 1;
    free(u);
    free(v);
    free(minv);
    free(owner);
    free(way);
    free(used);
    return rc;
}
