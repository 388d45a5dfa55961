/* tests/unit/test_plot.c -- the canvas and its PNG encoder read back by libpng (size, colour
 * type, every pixel), SVG structure, the colour scale, and affinity figures of 8 to 256
 * experts. Without libpng the decoding checks are skipped (77) after the others ran. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef HAVE_LIBPNG
#include <png.h>
#endif

#include "moe/affinity.h"
#include "moe/moe.h"
#include "moe/plot.h"
#include "unit.h"

#ifdef HAVE_LIBPNG
typedef struct reader {
    const uint8_t *p;
    size_t n, off;
} reader_t;

static void png_read_mem(png_structp png, png_bytep out, png_size_t n)
{
    reader_t *r = png_get_io_ptr(png);
    if (r->off + n > r->n)
        png_error(png, "read past the end");
    memcpy(out, r->p + r->off, n);
    r->off += n;
}

/* Damaged files are expected: fail quietly. */
static void png_quiet_error(png_structp png, png_const_charp msg)
{
    (void)msg;
    png_longjmp(png, 1);
}

static void png_quiet_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* Decode a PNG file image with libpng into 8-bit RGB (palette expanded). Returns 0 and the
 * image, or -1. */
static int decode_png(const uint8_t *buf, size_t len, uint32_t *w, uint32_t *h, int *ctype,
                      uint8_t **rgb)
{
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, png_quiet_error,
                                             png_quiet_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *volatile pix = NULL; /* volatile: still valid after png_error's longjmp */
    png_bytep *volatile rows = NULL;
    if (!png || !info)
        return -1;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(pix);
        free(rows);
        return -1;
    }
    reader_t r = {buf, len, 0};
    png_set_read_fn(png, &r, png_read_mem);
    png_read_info(png, info);
    *w = png_get_image_width(png, info);
    *h = png_get_image_height(png, info);
    *ctype = png_get_color_type(png, info);
    if (*ctype == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    png_read_update_info(png, info);
    pix = malloc((size_t)*w * *h * 3);
    rows = malloc(*h * sizeof *rows);
    for (uint32_t y = 0; y < *h; y++)
        rows[y] = pix + (size_t)y * *w * 3;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    *rgb = pix;
    return 0;
}
#endif

static uint32_t pixel(const uint8_t *rgb, uint32_t w, uint32_t x, uint32_t y)
{
    const uint8_t *p = rgb + ((size_t)y * w + x) * 3;
    return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

static int decoded;

static void test_png_encoder(void)
{
    /* a gradient with more than 256 colours (RGB output) and a two-colour image (palette) */
    uint32_t w = 300, h = 7;
    uint8_t *img = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *p = img + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)x;
            p[1] = (uint8_t)(x * 7 + y);
            p[2] = (uint8_t)(y * 30);
        }
    uint8_t *png = NULL;
    size_t len = 0;
    CHECK_EQ_INT(moe_png_encode(img, w, h, &png, &len), 0);
    CHECK(len > 57 && memcmp(png, "\x89PNG\r\n\x1a\n", 8) == 0);
#ifdef HAVE_LIBPNG
    uint32_t dw, dh;
    int ct;
    uint8_t *rgb = NULL;
    CHECK_EQ_INT(decode_png(png, len, &dw, &dh, &ct, &rgb), 0);
    CHECK_EQ_INT(dw, w);
    CHECK_EQ_INT(dh, h);
    CHECK_EQ_INT(ct, PNG_COLOR_TYPE_RGB);
    CHECK(rgb && memcmp(rgb, img, (size_t)w * h * 3) == 0);
    free(rgb);
    decoded++;
#endif
    free(png);
    for (uint32_t i = 0; i < w * h; i++) /* two colours: an indexed image */
        memset(img + 3 * i, i % 3 ? 0x20 : 0xf0, 3);
    CHECK_EQ_INT(moe_png_encode(img, w, h, &png, &len), 0);
#ifdef HAVE_LIBPNG
    rgb = NULL;
    CHECK_EQ_INT(decode_png(png, len, &dw, &dh, &ct, &rgb), 0);
    CHECK_EQ_INT(ct, PNG_COLOR_TYPE_PALETTE);
    CHECK(rgb && memcmp(rgb, img, (size_t)w * h * 3) == 0);
    free(rgb);
    /* a damaged file does not decode */
    png[len / 2] ^= 0x55;
    CHECK(decode_png(png, len, &dw, &dh, &ct, &rgb) != 0);
#endif
    free(png);
    free(img);
}

static void test_canvas(void)
{
    moe_canvas_t *c = moe_canvas_new(120, 80);
    CHECK(c != NULL);
    CHECK(moe_canvas_new(0, 10) == NULL);
    CHECK(moe_canvas_new(10, 20000) == NULL);
    CHECK_EQ_INT(moe_canvas_rect(c, 10, 10, 20, 10, 0xff0000), 0);
    CHECK_EQ_INT(moe_canvas_line(c, 0, 79, 119, 79, 1, 0x0000ff), 0);
    CHECK_EQ_INT(moe_canvas_text(c, 60, 40, "Ag<&>", 2, MOE_TEXT_CENTER, 0x000000), 0);
    CHECK_EQ_INT(moe_canvas_text(c, 5, 70, "up", 1, MOE_TEXT_UP, 0x00ff00), 0);
    uint32_t cells[4] = {0x111111, 0x222222, 0x333333, 0x444444};
    CHECK_EQ_INT(moe_canvas_raster(c, 80, 5, 2, 2, 3, 4, cells), 0);
    CHECK_EQ_INT(moe_text_width("Ag<&>", 2), (5 * 6 - 1) * 2);
    uint8_t *png = NULL;
    size_t len = 0;
    CHECK_EQ_INT(moe_canvas_png(c, &png, &len), 0);
#ifdef HAVE_LIBPNG
    uint32_t w, h;
    int ct;
    uint8_t *rgb = NULL;
    CHECK_EQ_INT(decode_png(png, len, &w, &h, &ct, &rgb), 0);
    CHECK_EQ_INT(w, 120);
    CHECK_EQ_INT(h, 80);
    if (rgb) {
        CHECK_EQ_INT(pixel(rgb, w, 0, 0), 0xffffff);      /* background */
        CHECK_EQ_INT(pixel(rgb, w, 15, 15), 0xff0000);    /* rectangle */
        CHECK_EQ_INT(pixel(rgb, w, 29, 19), 0xff0000);
        CHECK_EQ_INT(pixel(rgb, w, 30, 15), 0xffffff);    /* just outside */
        CHECK_EQ_INT(pixel(rgb, w, 50, 79), 0x0000ff);    /* line */
        CHECK_EQ_INT(pixel(rgb, w, 80, 5), 0x111111);     /* raster cells */
        CHECK_EQ_INT(pixel(rgb, w, 85, 8), 0x222222);
        CHECK_EQ_INT(pixel(rgb, w, 83, 12), 0x444444);
        int ink = 0; /* the centred text left black pixels around its anchor */
        for (uint32_t y = 40; y < 56; y++)
            for (uint32_t x = 30; x < 90; x++)
                ink += pixel(rgb, w, x, y) == 0;
        CHECK(ink > 40);
        int up = 0; /* vertical text: taller than wide, above its anchor */
        for (uint32_t y = 50; y < 70; y++)
            for (uint32_t x = 5; x < 13; x++)
                up += pixel(rgb, w, x, y) == 0x00ff00;
        CHECK(up > 10);
    }
    free(rgb);
    decoded++;
#endif
    free(png);
    char *svg = NULL;
    CHECK_EQ_INT(moe_canvas_svg(c, &svg, &len), 0);
    CHECK(svg && strstr(svg, "<svg ") && strstr(svg, "</svg>\n"));
    CHECK(strstr(svg, "Ag&lt;&amp;&gt;") != NULL); /* escaped text */
    CHECK(strstr(svg, "rotate(-90") != NULL);
    CHECK(strstr(svg, "fill=\"#ff0000\"") != NULL);
    int open = 0, close = 0;
    for (const char *p = svg; p && *p; p++) {
        open += *p == '<';
        close += *p == '>';
    }
    CHECK_EQ_INT(open, close);
    free(svg);
    moe_canvas_free(c);
    moe_canvas_free(NULL);
}

static void test_colormap(void)
{
    CHECK_EQ_INT(moe_colormap(0), 0xffffff);
    CHECK_EQ_INT(moe_colormap(-1), 0xffffff);
    CHECK_EQ_INT(moe_colormap(NAN), 0xffffff);
    CHECK_EQ_INT(moe_colormap(1), 0x800026);
    CHECK_EQ_INT(moe_colormap(7), 0x800026);
    uint32_t mid = moe_colormap(0.5);
    CHECK(((mid >> 16) & 0xff) > ((mid >> 8) & 0xff)); /* reddish */
    /* darker as the value grows */
    int prev = 3 * 255 + 1;
    for (int k = 0; k <= 20; k++) {
        uint32_t c = moe_colormap(k / 20.0);
        int sum = (int)((c >> 16) & 0xff) + (int)((c >> 8) & 0xff) + (int)(c & 0xff);
        CHECK(sum <= prev);
        prev = sum;
    }
}

/* Affinity figures of a synthetic count: sensible sizes for 8 to 256 experts. */
static void test_figures(void)
{
    static const uint32_t experts[] = {8, 64, 256};
    for (size_t e = 0; e < 3; e++) {
        moe_trace_hdr_t h;
        moe_trace_hdr_init(&h);
        h.layers = 4;
        h.experts = experts[e];
        h.topk = 2;
        moe_affinity_opts_t o;
        moe_affinity_opts_default(&o);
        moe_affinity_t *a = moe_affinity_new(&h, &o, NULL, NULL, 0);
        CHECK(a != NULL);
        if (!a)
            continue;
        uint32_t pairs[2] = {0, 2};
        for (int kind = MOE_AFF_PLOT_PAIR; kind <= MOE_AFF_PLOT_LOAD; kind++) {
            moe_affinity_plot_t po = {kind, pairs, kind == MOE_AFF_PLOT_PAIR ? 2 : 0, 0,
                                      UINT32_MAX};
            moe_canvas_t *c = NULL;
            char err[256];
            CHECK_EQ_INT(moe_affinity_plot(a, &po, &c, err, sizeof err), 0);
            if (!c)
                continue;
            int w = moe_canvas_width(c), ht = moe_canvas_height(c);
            CHECK(w >= 200 && w <= 2400);
            CHECK(ht >= 150 && ht <= 1600);
            uint8_t *png = NULL;
            size_t len;
            CHECK_EQ_INT(moe_canvas_png(c, &png, &len), 0);
            CHECK(len < 400000);
            free(png);
            moe_canvas_free(c);
        }
        moe_affinity_plot_t bad = {MOE_AFF_PLOT_PAIR, pairs + 1, 1, 0, 0};
        pairs[1] = 3; /* no layer 4 */
        moe_canvas_t *c = NULL;
        char err[256];
        CHECK(moe_affinity_plot(a, &bad, &c, err, sizeof err) != 0);
        CHECK(strstr(err, "no layer 4") != NULL);
        bad.kind = MOE_AFF_PLOT_STEPS;
        CHECK(moe_affinity_plot(a, &bad, &c, err, sizeof err) != 0);
        moe_affinity_free(a);
    }
}

int main(void)
{
    test_png_encoder();
    test_canvas();
    test_colormap();
    test_figures();
    int rc = unit_done("test_plot");
#ifndef HAVE_LIBPNG
    if (rc == 0) {
        printf("test_plot: libpng not found at configure time: PNG files not decoded\n");
        return 77;
    }
#endif
    (void)decoded;
    return rc;
}
