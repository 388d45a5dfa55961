/* lib/plot_internal.h -- what the canvas code shares with its font table. */
#ifndef MOE_PLOT_INTERNAL_H
#define MOE_PLOT_INTERNAL_H

#include <stdint.h>

/* Glyphs of printable ASCII (32..126): 8 rows of 5 pixels, bit 4 leftmost (plot_font.c). */
extern const uint8_t plot_font5x8[95][8];

#define PLOT_GLYPH_W 5
#define PLOT_GLYPH_H 8
#define PLOT_CELL_W 6 /* advance per character */
#define PLOT_CELL_H 9 /* line height */

#endif
