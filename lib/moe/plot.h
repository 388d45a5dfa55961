/* moe/plot.h -- small figures without dependencies: a canvas that renders to PNG and SVG. */
#ifndef MOE_PLOT_H
#define MOE_PLOT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A canvas records drawing operations (filled rectangles, lines, text, colour rasters) in pixel
 * coordinates, origin top left, and renders them either to a PNG (8-bit RGB, written with zlib:
 * IHDR, IDAT, IEND chunks with CRCs) or to an SVG document (rectangles, lines and text
 * elements), so both files show the same picture. PNG text uses a built-in 5x7 bitmap font
 * (printable ASCII) scaled by whole pixels; SVG text uses a monospace font of the same size.
 * Colours are 0xRRGGBB.
 */
typedef struct moe_canvas moe_canvas_t;

/* Text anchors (horizontal) and orientation. */
enum moe_text_flags {
    MOE_TEXT_LEFT = 0,
    MOE_TEXT_CENTER = 1,
    MOE_TEXT_RIGHT = 2,
    MOE_TEXT_UP = 4, /* rotated 90 degrees counter-clockwise (reads bottom to top) */
};

/* A white canvas of w x h pixels (1 .. 16384 each); NULL on ENOMEM or a bad size. */
moe_canvas_t *moe_canvas_new(int w, int h);
void moe_canvas_free(moe_canvas_t *c);
int moe_canvas_width(const moe_canvas_t *c);
int moe_canvas_height(const moe_canvas_t *c);

/* Drawing operations; each returns 0 or MOE_ENOMEM (then the canvas is unusable). */
int moe_canvas_rect(moe_canvas_t *c, int x, int y, int w, int h, uint32_t rgb);
/* An axis-parallel or diagonal line of the given width (pixels). */
int moe_canvas_line(moe_canvas_t *c, int x0, int y0, int x1, int y1, int width, uint32_t rgb);
/* Text of `scale` pixels per font pixel (a character advances 6 units, a line is 9 units:
 * 7 for capitals, 1 for descenders, 1 of spacing). (x, y) is the top of the text at the
 * anchor given by the flags; MOE_TEXT_UP text has its top to the left at x and its anchor
 * (start, centre or end along the reading direction) at y. */
int moe_canvas_text(moe_canvas_t *c, int x, int y, const char *s, int scale, int flags,
                    uint32_t rgb);
/* A raster of cols x rows colours, each cell cw x ch pixels, top left at (x, y). The colours
 * are copied. */
int moe_canvas_raster(moe_canvas_t *c, int x, int y, int cols, int rows, int cw, int ch,
                      const uint32_t *rgb);

/* Width in pixels of text at a scale (6 units per character). */
int moe_text_width(const char *s, int scale);

/* Render to a PNG file image (malloc'd into *out). 0 or MOE_ENOMEM. */
int moe_canvas_png(const moe_canvas_t *c, uint8_t **out, size_t *len);
/* Render to an SVG document (malloc'd, NUL-terminated). 0 or MOE_ENOMEM. */
int moe_canvas_svg(const moe_canvas_t *c, char **out, size_t *len);

/* Encode w x h 8-bit RGB pixels (row-major, 3 bytes each) as a PNG file image. */
int moe_png_encode(const uint8_t *rgb, uint32_t w, uint32_t h, uint8_t **out, size_t *len);

/* Sequential colour scale from white through yellow and orange to dark red (ColorBrewer
 * YlOrRd), v clamped to [0, 1]. */
uint32_t moe_colormap(double v);

/* A heatmap panel: a matrix drawn as a raster with a frame, axis titles and tick labels. */
typedef struct moe_heatmap {
    const double *v;        /* rows x cols values, row-major; NaN cells are drawn grey */
    int rows, cols;
    double vmin, vmax;      /* colour scale range */
    int cw, ch;             /* cell size in pixels */
    const char *title, *xlabel, *ylabel; /* may be NULL */
    int xtick, ytick;       /* label every n-th column/row (0: choose) */
    int scale;              /* text scale (1 or 2) */
} moe_heatmap_t;

/* Size of a heatmap panel including its labels; the matrix starts at offset (*mx, *my). */
void moe_heatmap_size(const moe_heatmap_t *hm, int *w, int *h, int *mx, int *my);
/* Draw it with its top left corner at (x, y). 0 or MOE_ENOMEM. */
int moe_plot_heatmap(moe_canvas_t *c, int x, int y, const moe_heatmap_t *hm);
/* A vertical colour bar of height h for [vmin, vmax] with ticks and a label; width returned by
 * moe_colorbar_width. */
int moe_plot_colorbar(moe_canvas_t *c, int x, int y, int h, double vmin, double vmax,
                      const char *label, int scale);
int moe_colorbar_width(int scale);

/* A line chart of n points (x[i], y[i]) in a w x h plot area at (x, y) with axes, ticks and
 * labels; NaN points are skipped. */
typedef struct moe_linechart {
    const double *x, *y;
    int n;
    double ymin, ymax;      /* y range (ymin == ymax: from the data) */
    const char *title, *xlabel, *ylabel;
    uint32_t rgb;
    int scale;
} moe_linechart_t;
int moe_plot_lines(moe_canvas_t *c, int x, int y, int w, int h, const moe_linechart_t *lc);

#ifdef __cplusplus
}
#endif
#endif
