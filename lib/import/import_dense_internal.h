/* import/import_dense_internal.h -- dense arrays of expert ids or router logits turned into tokens
 * (import_dense.c), shared by the safetensors, raw and base64 readers. Below the readers,
 * above the helper kit (import_common.c). */
#ifndef MOE_IMPORT_DENSE_INTERNAL_H
#define MOE_IMPORT_DENSE_INTERNAL_H

#include <stdint.h>

#include "import_common_internal.h"

/* Element types, with the safetensors and the --dtype names (import_dense.c's table). */
enum imp_dtype {
    IMP_I8, IMP_I16, IMP_I32, IMP_I64, IMP_U8, IMP_U16, IMP_U32, IMP_U64,
    IMP_F16, IMP_BF16, IMP_F32, IMP_F64,
    IMP_NDTYPES
};

/* Type of a name ("I32"/"int32", "BF16"/"bfloat16"); -1 if unknown. */
int imp_dtype_parse(const char *name, size_t len);
/* Safetensors name of a type. */
const char *imp_dtype_name(int dtype);
/* Bytes per element. */
uint32_t imp_dtype_size(int dtype);
/* Whether the type is a floating-point one (router logits). */
int imp_dtype_float(int dtype);
/* One little-endian element at b as a double (integers past 2^53 rounded). */
double imp_dtype_value(int dtype, const uint8_t *b);
/* A floating-point element of type dtype (IMP_F16, IMP_BF16, IMP_F32, else float64) from its
 * bits v (import_common.c). */
double imp_float_bits(int dtype, uint64_t v);

/* A whole tensor of numbers (imp_safetensors_tensor). */
typedef struct imp_tensor {
    uint32_t nd;
    uint64_t dim[8];
    uint64_t n; /* elements */
    double *v;  /* n values, C order; free() */
} imp_tensor_t;

/* Read the safetensors tensor `name` (or the file's only tensor) from the rest of im->src,
 * with the header checked as for an import. 0 or a negative status with im->err set. */
int imp_safetensors_tensor(moe_importer_t *im, const char *name, imp_tensor_t *out);

/* Where the bytes come from. */
enum imp_dense_mode {
    IMP_DENSE_PREAD,  /* a regular, uncompressed file: fd, offsets from its start */
    IMP_DENSE_STREAM, /* im->src read forward: offsets from the input's start */
    IMP_DENSE_MEM,    /* bytes in memory: offsets from mem */
};

/*
 * A dense array seen as tokens: token t's cells of input layer l are `width` elements (k ids,
 * or E logits) found in plane p at base[p] + t * stride: one plane of token-major rows holding
 * every layer ([T, L, W], the cell of layer l at l * W elements into the row), or one plane per
 * layer ([L, T, W] or a tensor per layer). The reader fills the shape and the source, then
 * calls imp_dense_start; imp_dense_next gives the tokens in order.
 */
typedef struct imp_dense {
    int dtype;
    int big;            /* float elements big endian (.npy '>f4'); else little endian */
    uint64_t tokens;    /* T; UINT64_MAX: until the stream ends (STREAM mode, one plane) */
    uint32_t in_layers; /* L of the input, dense layers included */
    uint32_t width;     /* elements per cell */
    uint32_t planes;    /* 1 or in_layers */
    uint64_t *base;     /* planes byte offsets (malloc'd by the reader, freed here) */
    int mode;           /* enum imp_dense_mode */
    int fd;             /* PREAD */
    const uint8_t *mem; /* MEM: the bytes at offsets mem_off .. mem_off + mem_len */
    uint64_t mem_off, mem_len;
    uint8_t *own;       /* MEM: the buffer imp_dense_source read (freed here) */
    uint32_t seq;       /* seq of the records */
    const imp_pmap_t *pmap; /* ids are physical slots: their logical experts (NULL: logical) */
    imp_pmap_t pmap_own;    /* what pmap points to, loaded by imp_dense_start */
    int pmap_by_input;  /* the map has a row per input layer (else per kept layer) */

    /* set by imp_dense_start */
    uint64_t stride;    /* bytes of a plane's row */
    uint32_t layers;    /* output layers */
    uint32_t *sel;      /* output layer -> input layer */
    uint32_t topk;      /* output k */
    int logits;
    uint32_t chunk;     /* rows read at once per plane */
    uint8_t **buf;      /* per plane: chunk rows (PREAD, STREAM) */
    const uint8_t **rows; /* per plane: row t0 of the chunk in hand */
    uint64_t *t0, *n;   /* per plane: first token and rows of the chunk in hand */
    uint64_t t;         /* next token */
    double *x;          /* width logits of a cell */
    uint32_t *top;      /* the best topk of a cell */
} imp_dense_t;

/* Pick the source of data at input offsets [start, start + len) that im->src has not passed
 * yet: positioned reads of a plain file, the stream forward when there is one plane, else the
 * bytes read into memory (grown as they arrive, never sized by the file's claim alone).
 * 0 or a negative status (a file or stream shorter than start + len: truncated). */
int imp_dense_source(moe_importer_t *im, imp_dense_t *d, uint64_t start, uint64_t len);

/* Open the rest of im->src as an array of element type dtype (big-endian floats when big is
 * set) and shape dim[0..nd): [T, E] logits of one layer, or [T, L, W] ([L, T, W] with --layout
 * LTK), and make it the input's reader (im->ops, im->state). For the .npy reader's float
 * arrays. 0 or a negative status. */
int imp_dense_open_array(moe_importer_t *im, int dtype, int big, int nd, const uint64_t *dim);

/* The input layers kept of in_layers, into a new array *sel of *n: all, those --moe-layers
 * lists (each must exist), or those from --first-moe-layer on; --model-layers must be
 * in_layers. 0 or a negative status with im->err set. */
int imp_select_layers(moe_importer_t *im, uint32_t in_layers, uint32_t **sel, uint32_t *n);
/* "@CO dense: layers 0..n-1 are model layers LIST of in_layers" for the kept layers sel[0..n)
 * of an input holding every model layer. 0 or a negative status. */
int imp_layers_comment(moe_importer_t *im, const uint32_t *sel, uint32_t n, uint32_t in_layers);

/* Check the shape against the options (--moe-layers, --topk, --experts), size the buffers and
 * set im->hdr (layers, top-k, weights) and an @CO line naming the kept layers. 0 or a negative
 * status with im->err set. */
int imp_dense_start(moe_importer_t *im, imp_dense_t *d);
/* Next token into r (seq = d->seq, pos = token index): 1, 0 at the end, negative on error. */
int imp_dense_next(moe_importer_t *im, imp_dense_t *d, moe_trace_rec_t *r);
/* Start again on new bytes in memory (base64: the next request) of `tokens` rows. */
void imp_dense_restart(imp_dense_t *d, const uint8_t *mem, uint64_t len, uint64_t tokens);
/* Free what start allocated and base. */
void imp_dense_free(imp_dense_t *d);

#endif
