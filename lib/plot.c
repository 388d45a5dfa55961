/* lib/plot.c -- a recording canvas rendered to PNG (zlib, no libpng) or SVG, and the panels
 * moeflow draws on it: heatmaps, colour bars, line charts. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "moe/moe.h"
#include "moe/plot.h"
#include "plot_internal.h"

#define MAX_SIDE 16384

enum op_kind { OP_RECT, OP_LINE, OP_TEXT, OP_RASTER };

/* One recorded drawing operation. */
typedef struct op {
    int kind;
    int x, y, w, h;      /* rect, raster origin; line: x0 y0 x1 y1 */
    int size;            /* line width, text scale */
    int flags;           /* text */
    int cols, rows;      /* raster cells; w/h then hold the cell size */
    uint32_t rgb;
    char *text;
    uint32_t *cells;
} op_t;

struct moe_canvas {
    int w, h;
    op_t *ops;
    size_t n, cap;
    int err;
};

moe_canvas_t *moe_canvas_new(int w, int h)
{
    if (w < 1 || h < 1 || w > MAX_SIDE || h > MAX_SIDE)
        return NULL;
    moe_canvas_t *c = calloc(1, sizeof *c);
    if (c) {
        c->w = w;
        c->h = h;
    }
    return c;
}

void moe_canvas_free(moe_canvas_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->ops[i].text);
        free(c->ops[i].cells);
    }
    free(c->ops);
    free(c);
}

int moe_canvas_width(const moe_canvas_t *c)
{
    return c->w;
}

int moe_canvas_height(const moe_canvas_t *c)
{
    return c->h;
}

static op_t *push(moe_canvas_t *c)
{
    if (c->err)
        return NULL;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        op_t *p = realloc(c->ops, cap * sizeof *p);
        if (!p) {
            c->err = MOE_ENOMEM;
            return NULL;
        }
        c->ops = p;
        c->cap = cap;
    }
    op_t *o = &c->ops[c->n++];
    memset(o, 0, sizeof *o);
    return o;
}

int moe_canvas_rect(moe_canvas_t *c, int x, int y, int w, int h, uint32_t rgb)
{
    op_t *o = push(c);
    if (!o)
        return MOE_ENOMEM;
    *o = (op_t){.kind = OP_RECT, .x = x, .y = y, .w = w, .h = h, .rgb = rgb};
    return 0;
}

int moe_canvas_line(moe_canvas_t *c, int x0, int y0, int x1, int y1, int width, uint32_t rgb)
{
    op_t *o = push(c);
    if (!o)
        return MOE_ENOMEM;
    *o = (op_t){.kind = OP_LINE, .x = x0, .y = y0, .w = x1, .h = y1, .size = width < 1 ? 1 : width,
                .rgb = rgb};
    return 0;
}

int moe_canvas_text(moe_canvas_t *c, int x, int y, const char *s, int scale, int flags,
                    uint32_t rgb)
{
    op_t *o = push(c);
    if (!o)
        return MOE_ENOMEM;
    *o = (op_t){.kind = OP_TEXT, .x = x, .y = y, .size = scale < 1 ? 1 : scale, .flags = flags,
                .rgb = rgb};
    if (!(o->text = strdup(s))) {
        c->n--;
        return c->err = MOE_ENOMEM;
    }
    return 0;
}

int moe_canvas_raster(moe_canvas_t *c, int x, int y, int cols, int rows, int cw, int ch,
                      const uint32_t *rgb)
{
    op_t *o = push(c);
    if (!o)
        return MOE_ENOMEM;
    *o = (op_t){.kind = OP_RASTER, .x = x, .y = y, .w = cw, .h = ch, .cols = cols, .rows = rows};
    size_t n = (size_t)cols * rows;
    if (!(o->cells = malloc(n * sizeof *o->cells + 1))) {
        c->n--;
        return c->err = MOE_ENOMEM;
    }
    memcpy(o->cells, rgb, n * sizeof *o->cells);
    return 0;
}

int moe_text_width(const char *s, int scale)
{
    size_t n = strlen(s);
    return n ? (int)(n * PLOT_CELL_W - 1) * scale : 0;
}

/* ------------------------------------------------------------------ raster rendering */

typedef struct img {
    uint8_t *px;
    int w, h;
} img_t;

static void fill(img_t *im, int x, int y, int w, int h, uint32_t rgb)
{
    int x0 = x < 0 ? 0 : x, y0 = y < 0 ? 0 : y;
    int x1 = x + w > im->w ? im->w : x + w, y1 = y + h > im->h ? im->h : y + h;
    uint8_t r = (uint8_t)(rgb >> 16), g = (uint8_t)(rgb >> 8), b = (uint8_t)rgb;
    for (int yy = y0; yy < y1; yy++) {
        uint8_t *p = im->px + ((size_t)yy * im->w + x0) * 3;
        for (int xx = x0; xx < x1; xx++, p += 3) {
            p[0] = r;
            p[1] = g;
            p[2] = b;
        }
    }
}

static void draw_line(img_t *im, const op_t *o)
{
    int x0 = o->x, y0 = o->y, x1 = o->w, y1 = o->h;
    int dx = abs(x1 - x0), sx = x0 < x1 ? 1 : -1, dy = -abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    int e = dx + dy, half = (o->size - 1) / 2;
    for (;;) { /* Bresenham, each point a size x size square */
        fill(im, x0 - half, y0 - half, o->size, o->size, o->rgb);
        if (x0 == x1 && y0 == y1)
            break;
        int e2 = 2 * e;
        if (e2 >= dy) {
            e += dy;
            x0 += sx;
        }
        if (e2 <= dx) {
            e += dx;
            y0 += sy;
        }
    }
}

/* Offset along the text of its first character for the anchor flags. */
static int anchor_offset(const char *s, int scale, int flags)
{
    int len = moe_text_width(s, scale);
    int a = flags & 3;
    return a == MOE_TEXT_CENTER ? -len / 2 : a == MOE_TEXT_RIGHT ? -len : 0;
}

static void draw_text(img_t *im, const op_t *o)
{
    const int s = o->size, up = (o->flags & MOE_TEXT_UP) != 0;
    int u0 = anchor_offset(o->text, s, o->flags);
    for (size_t k = 0; o->text[k]; k++) {
        unsigned ch = (unsigned char)o->text[k];
        const uint8_t *g = plot_font5x8[(ch >= 32 && ch < 127 ? ch : '?') - 32];
        for (int gy = 0; gy < PLOT_GLYPH_H; gy++)
            for (int gx = 0; gx < PLOT_GLYPH_W; gx++) {
                if (!(g[gy] & (0x10 >> gx)))
                    continue;
                int u = u0 + ((int)k * PLOT_CELL_W + gx) * s, v = gy * s;
                if (up) /* reading upwards: along the text is -y, down the glyph is +x */
                    fill(im, o->x + v, o->y - u - s, s, s, o->rgb);
                else
                    fill(im, o->x + u, o->y + v, s, s, o->rgb);
            }
    }
}

static void draw_raster(img_t *im, const op_t *o)
{
    for (int r = 0; r < o->rows; r++)
        for (int q = 0; q < o->cols; q++)
            fill(im, o->x + q * o->w, o->y + r * o->h, o->w, o->h,
                 o->cells[(size_t)r * o->cols + q]);
}

/* ------------------------------------------------------------------ PNG */

static void put32be(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Append a chunk (length, type, data, CRC over type and data) at out + *off. */
static void put_chunk(uint8_t *out, size_t *off, const char *type, const uint8_t *data,
                      size_t n)
{
    uint8_t *p = out + *off;
    put32be(p, (uint32_t)n);
    memcpy(p + 4, type, 4);
    if (n)
        memcpy(p + 8, data, n);
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, p + 4, (uInt)(n + 4));
    put32be(p + 8 + n, (uint32_t)crc);
    *off += 12 + n;
}

/* PNG filter of one row: the heuristic of the PNG specification (minimum sum of absolute
 * values) over None, Sub and Up; flat heatmap blocks make Up rows all zero. Indexed images
 * (bpp 1) are the exception the specification makes: filter None compresses them best. */
static void filter_row(const uint8_t *row, const uint8_t *prev, size_t n, size_t bpp,
                       uint8_t *dst)
{
    uint8_t *best = dst;
    unsigned long sum[3] = {0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        uint8_t none = row[i], sub = (uint8_t)(row[i] - (i >= bpp ? row[i - bpp] : 0));
        uint8_t up = (uint8_t)(row[i] - (prev ? prev[i] : 0));
        sum[0] += none < 128 ? none : 256 - none;
        sum[1] += sub < 128 ? sub : 256 - sub;
        sum[2] += up < 128 ? up : 256 - up;
    }
    int f = sum[1] < sum[0] ? 1 : 0;
    f = sum[2] < sum[f] ? 2 : f;
    f = bpp == 1 ? 0 : f;
    best[0] = (uint8_t)f;
    for (size_t i = 0; i < n; i++) {
        uint8_t v = row[i];
        if (f == 1)
            v = (uint8_t)(row[i] - (i >= bpp ? row[i - bpp] : 0));
        else if (f == 2)
            v = (uint8_t)(row[i] - (prev ? prev[i] : 0));
        best[1 + i] = v;
    }
}

/* Deflate the filtered rows (1 + stride bytes each) of an image; bpp bytes per pixel. */
static int deflate_rows(const uint8_t *px, uint32_t h, size_t stride, size_t bpp, uint8_t **z,
                        uLongf *zlen)
{
    size_t raw_len = (stride + 1) * h;
    uint8_t *raw = malloc(raw_len + 1);
    *zlen = compressBound((uLong)raw_len);
    *z = malloc(*zlen);
    int rc = MOE_ENOMEM;
    if (raw && *z) {
        for (uint32_t y = 0; y < h; y++)
            filter_row(px + y * stride, y ? px + (y - 1) * stride : NULL, stride, bpp,
                       raw + y * (stride + 1));
        rc = compress2(*z, zlen, raw, (uLong)raw_len, 9) == Z_OK ? 0 : MOE_ENOMEM;
    }
    free(raw);
    if (rc) {
        free(*z);
        *z = NULL;
    }
    return rc;
}

/* Write signature, IHDR (colour type 2 RGB or 3 palette), PLTE (palette), IDAT, IEND. */
static int png_file(uint32_t w, uint32_t h, int ctype, const uint8_t *plte, size_t nplte,
                    const uint8_t *z, size_t zlen, uint8_t **out, size_t *len)
{
    uint8_t *png = malloc(8 + 25 + (plte ? 12 + 3 * nplte : 0) + 12 + zlen + 12);
    if (!png)
        return MOE_ENOMEM;
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t ihdr[13];
    put32be(ihdr, w);
    put32be(ihdr + 4, h);
    ihdr[8] = 8;                /* bit depth */
    ihdr[9] = (uint8_t)ctype;   /* 2: truecolour RGB, 3: indexed */
    ihdr[10] = 0;               /* deflate */
    ihdr[11] = 0;               /* adaptive filtering */
    ihdr[12] = 0;               /* no interlace */
    size_t off = 8;
    memcpy(png, sig, 8);
    put_chunk(png, &off, "IHDR", ihdr, sizeof ihdr);
    if (plte)
        put_chunk(png, &off, "PLTE", plte, 3 * nplte);
    put_chunk(png, &off, "IDAT", z, zlen);
    put_chunk(png, &off, "IEND", NULL, 0);
    *out = png;
    *len = off;
    return 0;
}

int moe_png_encode(const uint8_t *rgb, uint32_t w, uint32_t h, uint8_t **out, size_t *len)
{
    /* Figures use few colours: an indexed image (a third of the bytes) when 256 suffice. */
    uint32_t table[512];
    uint8_t plte[3 * 256];
    size_t npal = 0;
    uint8_t *idx = malloc((size_t)w * h + 1);
    int indexed = idx != NULL;
    memset(table, 0xff, sizeof table);
    for (size_t i = 0; indexed && i < (size_t)w * h; i++) {
        uint32_t c = (uint32_t)rgb[3 * i] << 16 | (uint32_t)rgb[3 * i + 1] << 8 | rgb[3 * i + 2];
        uint32_t k = (c * 2654435761u) >> 23; /* open addressing over 512 slots */
        while (table[k] != 0xffffffffu && (table[k] & 0xffffff) != c)
            k = (k + 1) & 511;
        if (table[k] == 0xffffffffu) {
            if (npal == 256) {
                indexed = 0;
                break;
            }
            table[k] = c | (uint32_t)npal << 24;
            memcpy(plte + 3 * npal, rgb + 3 * i, 3);
            npal++;
        }
        idx[i] = (uint8_t)(table[k] >> 24);
    }
    uint8_t *z = NULL;
    uLongf zlen = 0;
    int rc = indexed ? deflate_rows(idx, h, w, 1, &z, &zlen)
                     : deflate_rows(rgb, h, (size_t)w * 3, 3, &z, &zlen);
    if (!rc)
        rc = png_file(w, h, indexed ? 3 : 2, indexed ? plte : NULL, npal, z, zlen, out, len);
    free(idx);
    free(z);
    return rc;
}

int moe_canvas_png(const moe_canvas_t *c, uint8_t **out, size_t *len)
{
    if (c->err)
        return c->err;
    img_t im = {malloc((size_t)c->w * c->h * 3), c->w, c->h};
    if (!im.px)
        return MOE_ENOMEM;
    memset(im.px, 0xff, (size_t)c->w * c->h * 3);
    for (size_t i = 0; i < c->n; i++) {
        const op_t *o = &c->ops[i];
        switch (o->kind) {
        case OP_RECT: fill(&im, o->x, o->y, o->w, o->h, o->rgb); break;
        case OP_LINE: draw_line(&im, o); break;
        case OP_TEXT: draw_text(&im, o); break;
        case OP_RASTER: draw_raster(&im, o); break;
        }
    }
    int rc = moe_png_encode(im.px, (uint32_t)c->w, (uint32_t)c->h, out, len);
    free(im.px);
    return rc;
}

/* ------------------------------------------------------------------ SVG */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int err;
} sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    if (b->err)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->err = MOE_EINVAL;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? 2 * b->cap : 1 << 16;
        while (cap < b->n + (size_t)k + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->err = MOE_ENOMEM;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

static void svg_text(sbuf_t *b, const op_t *o)
{
    static const char *anchor[3] = {"start", "middle", "end"};
    int a = o->flags & 3;
    int fs = 9 * o->size; /* a monospace face whose capitals match the 7-pixel bitmap ones */
    if (o->flags & MOE_TEXT_UP)
        sb_printf(b, "<text x=\"%d\" y=\"%d\" transform=\"rotate(-90 %d %d)\" ", o->x, o->y,
                  o->x, o->y);
    else
        sb_printf(b, "<text x=\"%d\" y=\"%d\" ", o->x, o->y);
    sb_printf(b, "font-family=\"DejaVu Sans Mono,Menlo,Consolas,monospace\" font-size=\"%d\" "
                 "text-anchor=\"%s\" dominant-baseline=\"hanging\" fill=\"#%06x\">",
              fs, anchor[a > 2 ? 0 : a], (unsigned)o->rgb);
    for (const char *s = o->text; *s; s++) {
        switch (*s) {
        case '&': sb_printf(b, "&amp;"); break;
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        default:
            if ((unsigned char)*s >= 32 && (unsigned char)*s < 127)
                sb_printf(b, "%c", *s);
            else
                sb_printf(b, "?");
        }
    }
    sb_printf(b, "</text>\n");
}

static void base64(sbuf_t *b, const uint8_t *p, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char quad[5] = {0};
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        quad[0] = tab[v >> 18];
        quad[1] = tab[(v >> 12) & 63];
        quad[2] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        quad[3] = i + 2 < n ? tab[v & 63] : '=';
        sb_printf(b, "%s", quad);
    }
}

/* Raster cells: small rasters as rectangles (runs of one colour in a row merged), large ones
 * as an embedded PNG of one pixel per cell, scaled without smoothing -- tens of thousands of
 * rectangles would make files of megabytes. */
static void svg_raster(sbuf_t *b, const op_t *o)
{
    if ((size_t)o->cols * o->rows > 1024) {
        size_t n = (size_t)o->cols * o->rows;
        uint8_t *rgb = malloc(3 * n + 1), *png = NULL;
        size_t len = 0;
        for (size_t i = 0; rgb && i < n; i++) {
            rgb[3 * i] = (uint8_t)(o->cells[i] >> 16);
            rgb[3 * i + 1] = (uint8_t)(o->cells[i] >> 8);
            rgb[3 * i + 2] = (uint8_t)o->cells[i];
        }
        if (rgb && moe_png_encode(rgb, (uint32_t)o->cols, (uint32_t)o->rows, &png, &len) == 0) {
            sb_printf(b, "<image x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                         "preserveAspectRatio=\"none\" style=\"image-rendering:pixelated;"
                         "image-rendering:crisp-edges\" xlink:href=\"data:image/png;base64,",
                      o->x, o->y, o->cols * o->w, o->rows * o->h);
            base64(b, png, len);
            sb_printf(b, "\"/>\n");
        } else {
            b->err = MOE_ENOMEM;
        }
        free(png);
        free(rgb);
        return;
    }
    sb_printf(b, "<g shape-rendering=\"crispEdges\">\n");
    for (int r = 0; r < o->rows; r++) {
        const uint32_t *row = o->cells + (size_t)r * o->cols;
        for (int q = 0; q < o->cols;) {
            int e = q + 1;
            while (e < o->cols && row[e] == row[q])
                e++;
            if (row[q] != 0xffffff) /* white is the background */
                sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                             "fill=\"#%06x\"/>\n",
                          o->x + q * o->w, o->y + r * o->h, (e - q) * o->w, o->h,
                          (unsigned)row[q]);
            q = e;
        }
    }
    sb_printf(b, "</g>\n");
}

int moe_canvas_svg(const moe_canvas_t *c, char **out, size_t *len)
{
    if (c->err)
        return c->err;
    sbuf_t b = {0};
    sb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" "
                  "xmlns:xlink=\"http://www.w3.org/1999/xlink\" version=\"1.1\" width=\"%d\" "
                  "height=\"%d\" viewBox=\"0 0 %d %d\">\n"
                  "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
              c->w, c->h, c->w, c->h, c->w, c->h);
    for (size_t i = 0; i < c->n; i++) {
        const op_t *o = &c->ops[i];
        switch (o->kind) {
        case OP_RECT:
            sb_printf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#%06x\"/>\n",
                      o->x, o->y, o->w, o->h, (unsigned)o->rgb);
            break;
        case OP_LINE: /* through pixel centres, square caps: the same pixels as the PNG */
            sb_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                          "stroke=\"#%06x\" stroke-width=\"%d\" stroke-linecap=\"square\"/>\n",
                      o->x + 0.5, o->y + 0.5, o->w + 0.5, o->h + 0.5, (unsigned)o->rgb, o->size);
            break;
        case OP_TEXT: svg_text(&b, o); break;
        case OP_RASTER: svg_raster(&b, o); break;
        }
    }
    sb_printf(&b, "</svg>\n");
    if (b.err) {
        free(b.p);
        return b.err;
    }
    *out = b.p;
    *len = b.n;
    return 0;
}

/* ------------------------------------------------------------------ colour */

uint32_t moe_colormap(double v)
{
    static const uint32_t stops[9] = {0xffffff, 0xffeda0, 0xfed976, 0xfeb24c, 0xfd8d3c,
                                      0xfc4e2a, 0xe31a1c, 0xbd0026, 0x800026};
    if (!(v > 0))
        return stops[0];
    if (v >= 1)
        return stops[8];
    double t = v * 8;
    int k = (int)t;
    double f = t - k;
    uint32_t a = stops[k], b = stops[k + 1], out = 0;
    for (int sh = 0; sh < 24; sh += 8) {
        double ca = (a >> sh) & 0xff, cb = (b >> sh) & 0xff;
        out |= (uint32_t)lround(ca + (cb - ca) * f) << sh;
    }
    return out;
}

/* ------------------------------------------------------------------ panels */

#define INK 0x202020u
#define FRAME 0x606060u
#define NAN_GREY 0xd9d9d9u

/* A tick step for labels of `label_w` pixels on cells of `cell` pixels: 1, 2, 5, 10, ... or
 * a power of two when n is one (expert counts usually are). */
static int tick_step(int n, int cell, int label_w)
{
    static const int pow2[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    static const int dec[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};
    int ispow2 = n > 0 && (n & (n - 1)) == 0;
    const int *st = ispow2 ? pow2 : dec;
    size_t k = ispow2 ? sizeof pow2 / sizeof *pow2 : sizeof dec / sizeof *dec;
    for (size_t i = 0; i < k; i++)
        if (st[i] * cell >= label_w + 4)
            return st[i];
    return st[k - 1];
}

/* The one-pixel frame of a panel, corners (l, t) and (r, b) included. */
static void frame(moe_canvas_t *c, int l, int t, int r, int b)
{
    moe_canvas_line(c, l, t, r, t, 1, FRAME);
    moe_canvas_line(c, l, b, r, b, 1, FRAME);
    moe_canvas_line(c, l, t, l, b, 1, FRAME);
    moe_canvas_line(c, r, t, r, b, 1, FRAME);
}

static int digits(int n)
{
    int d = 1;
    while (n >= 10) {
        n /= 10;
        d++;
    }
    return d;
}

void moe_heatmap_size(const moe_heatmap_t *hm, int *w, int *h, int *mx, int *my)
{
    int s = hm->scale < 1 ? 1 : hm->scale, lh = PLOT_CELL_H * s;
    int ytw = digits(hm->rows > 0 ? hm->rows - 1 : 0) * PLOT_CELL_W * s + 6;
    int ylw = hm->ylabel ? lh + 4 : 0;
    int th = hm->title ? lh + 6 : 0;
    int xth = lh + 6, xlh = hm->xlabel ? lh + 4 : 0;
    int mw = hm->cols * hm->cw, tw = hm->title ? moe_text_width(hm->title, s) : 0;
    int xw = hm->xlabel ? moe_text_width(hm->xlabel, s) : 0;
    tw = tw > xw ? tw : xw;
    *mx = ylw + ytw;
    *my = th;
    *w = *mx + (mw > tw ? mw : tw) + 4;
    *h = *my + hm->rows * hm->ch + xth + xlh;
}

int moe_plot_heatmap(moe_canvas_t *c, int x, int y, const moe_heatmap_t *hm)
{
    int w, h, mx, my, s = hm->scale < 1 ? 1 : hm->scale, lh = PLOT_CELL_H * s;
    moe_heatmap_size(hm, &w, &h, &mx, &my);
    int x0 = x + mx, y0 = y + my, mw = hm->cols * hm->cw, mh = hm->rows * hm->ch;
    size_t n = (size_t)hm->rows * hm->cols;
    uint32_t *px = malloc(n * sizeof *px + 1);
    if (!px)
        return MOE_ENOMEM;
    double span = hm->vmax > hm->vmin ? hm->vmax - hm->vmin : 1;
    for (size_t i = 0; i < n; i++) { /* 64 levels: smooth to the eye, small PNG palettes */
        double q = floor((hm->v[i] - hm->vmin) / span * 64.0 + 0.5) / 64.0;
        px[i] = isnan(hm->v[i]) ? NAN_GREY : moe_colormap(q);
    }
    int rc = moe_canvas_raster(c, x0, y0, hm->cols, hm->rows, hm->cw, hm->ch, px);
    free(px);
    frame(c, x0 - 1, y0 - 1, x0 + mw, y0 + mh);
    /* ticks and their labels at cell centres */
    char lab[32];
    int lw = digits(hm->cols - 1) * PLOT_CELL_W * s;
    int xs = hm->xtick > 0 ? hm->xtick : tick_step(hm->cols, hm->cw, lw);
    for (int q = 0; q < hm->cols; q += xs) {
        int cx = x0 + q * hm->cw + hm->cw / 2;
        moe_canvas_line(c, cx, y0 + mh + 1, cx, y0 + mh + 3, 1, INK);
        snprintf(lab, sizeof lab, "%d", q);
        moe_canvas_text(c, cx, y0 + mh + 5, lab, s, MOE_TEXT_CENTER, INK);
    }
    int ys = hm->ytick > 0 ? hm->ytick : tick_step(hm->rows, hm->ch, lh - 2);
    for (int r = 0; r < hm->rows; r += ys) {
        int cy = y0 + r * hm->ch + hm->ch / 2;
        moe_canvas_line(c, x0 - 4, cy, x0 - 2, cy, 1, INK);
        snprintf(lab, sizeof lab, "%d", r);
        moe_canvas_text(c, x0 - 6, cy - (PLOT_GLYPH_H - 1) * s / 2, lab, s, MOE_TEXT_RIGHT, INK);
    }
    if (hm->title)
        moe_canvas_text(c, x0 + mw / 2, y, hm->title, s, MOE_TEXT_CENTER, INK);
    if (hm->xlabel)
        moe_canvas_text(c, x0 + mw / 2, y0 + mh + 6 + lh + 2, hm->xlabel, s, MOE_TEXT_CENTER,
                        INK);
    if (hm->ylabel)
        moe_canvas_text(c, x, y0 + mh / 2, hm->ylabel, s, MOE_TEXT_UP | MOE_TEXT_CENTER, INK);
    return rc;
}

int moe_colorbar_width(int scale)
{
    return 14 + 7 + 5 * PLOT_CELL_W * scale + 6 + PLOT_CELL_H * scale;
}

int moe_plot_colorbar(moe_canvas_t *c, int x, int y, int h, double vmin, double vmax,
                      const char *label, int scale)
{
    const int bw = 14, steps = h > 0 ? h : 1;
    uint32_t *px = malloc((size_t)steps * sizeof *px);
    if (!px)
        return MOE_ENOMEM;
    for (int i = 0; i < steps; i++) /* one pixel row per step, top = vmax */
        px[i] = moe_colormap(floor((1.0 - (i + 0.5) / steps) * 64.0 + 0.5) / 64.0);
    int rc = moe_canvas_raster(c, x, y, 1, steps, bw, 1, px);
    free(px);
    frame(c, x - 1, y - 1, x + bw, y + h);
    char lab[32];
    for (int k = 0; k <= 4; k++) {
        double v = vmin + (vmax - vmin) * k / 4;
        int ty = y + h - (int)lround((double)h * k / 4);
        ty = ty > y + h - 1 ? y + h - 1 : ty;
        moe_canvas_line(c, x + bw + 1, ty, x + bw + 3, ty, 1, INK);
        snprintf(lab, sizeof lab, "%.3g", v);
        moe_canvas_text(c, x + bw + 7, ty - (PLOT_GLYPH_H - 1) * scale / 2, lab, scale,
                        MOE_TEXT_LEFT, INK);
    }
    if (label)
        moe_canvas_text(c, x + bw + 7 + 5 * PLOT_CELL_W * scale + 6, y + h / 2, label, scale,
                        MOE_TEXT_UP | MOE_TEXT_CENTER, INK);
    return rc;
}

int moe_plot_lines(moe_canvas_t *c, int x, int y, int w, int h, const moe_linechart_t *lc)
{
    const int s = lc->scale < 1 ? 1 : lc->scale, lh = PLOT_CELL_H * s;
    double xmin = INFINITY, xmax = -INFINITY, ymin = lc->ymin, ymax = lc->ymax;
    int auto_y = !(ymax > ymin);
    if (auto_y) {
        ymin = INFINITY;
        ymax = -INFINITY;
    }
    for (int i = 0; i < lc->n; i++) {
        if (!isfinite(lc->x[i]) || !isfinite(lc->y[i]))
            continue;
        xmin = fmin(xmin, lc->x[i]);
        xmax = fmax(xmax, lc->x[i]);
        if (auto_y) {
            ymin = fmin(ymin, lc->y[i]);
            ymax = fmax(ymax, lc->y[i]);
        }
    }
    if (!(xmax >= xmin))
        xmin = 0, xmax = 1;
    if (!(ymax >= ymin))
        ymin = 0, ymax = 1;
    if (xmax == xmin)
        xmax = xmin + 1;
    if (ymax == ymin)
        ymax = ymin + (ymin == 0 ? 1 : fabs(ymin) * 0.1);
    /* plot area inside the labels */
    int left = x + lh + 4 + 6 * PLOT_CELL_W * s + 6, top = y + (lc->title ? lh + 6 : 0);
    int right = x + w - 4, bottom = y + h - (lh + 6) - (lc->xlabel ? lh + 4 : 0);
    if (right - left < 10 || bottom - top < 10)
        return 0;
    moe_canvas_line(c, left, top, left, bottom, 1, FRAME);
    moe_canvas_line(c, left, bottom, right, bottom, 1, FRAME);
    char lab[32];
    for (int k = 0; k <= 4; k++) {
        double v = ymin + (ymax - ymin) * k / 4;
        int ty = bottom - (int)lround((double)(bottom - top) * k / 4);
        moe_canvas_line(c, left - 3, ty, left - 1, ty, 1, INK);
        moe_canvas_line(c, left + 1, ty, right, ty, 1, 0xeeeeee);
        snprintf(lab, sizeof lab, "%.3g", v);
        moe_canvas_text(c, left - 5, ty - (PLOT_GLYPH_H - 1) * s / 2, lab, s, MOE_TEXT_RIGHT, INK);
        double xv = xmin + (xmax - xmin) * k / 4;
        int tx = left + (int)lround((double)(right - left) * k / 4);
        moe_canvas_line(c, tx, bottom + 1, tx, bottom + 3, 1, INK);
        snprintf(lab, sizeof lab, "%.4g", xv);
        moe_canvas_text(c, tx, bottom + 5, lab, s, MOE_TEXT_CENTER, INK);
    }
    int px = 0, py = 0, have = 0;
    for (int i = 0; i < lc->n; i++) {
        if (!isfinite(lc->x[i]) || !isfinite(lc->y[i])) {
            have = 0;
            continue;
        }
        int qx = left + (int)lround((lc->x[i] - xmin) / (xmax - xmin) * (right - left));
        int qy = bottom - (int)lround((lc->y[i] - ymin) / (ymax - ymin) * (bottom - top));
        if (have)
            moe_canvas_line(c, px, py, qx, qy, 2, lc->rgb);
        moe_canvas_rect(c, qx - 2, qy - 2, 5, 5, lc->rgb);
        px = qx;
        py = qy;
        have = 1;
    }
    if (lc->title)
        moe_canvas_text(c, (left + right) / 2, y, lc->title, s, MOE_TEXT_CENTER, INK);
    if (lc->xlabel)
        moe_canvas_text(c, (left + right) / 2, bottom + 6 + lh + 2, lc->xlabel, s,
                        MOE_TEXT_CENTER, INK);
    if (lc->ylabel)
        moe_canvas_text(c, x, (top + bottom) / 2, lc->ylabel, s, MOE_TEXT_UP | MOE_TEXT_CENTER,
                        INK);
    return c->err;
}
