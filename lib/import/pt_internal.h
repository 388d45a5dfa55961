/* import/pt_internal.h -- a torch.save archive read from memory: the zip container
 * (pt_zip.c) and the pickle subset of data.pkl, giving named tensors and scalars (pt_pickle.c).
 * Generic (knows nothing of routing); used by the SGLang importer. Calls nothing of import/. */
#ifndef MOE_PT_INTERNAL_H
#define MOE_PT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ zip (pt_zip.c) */

/* One member of a zip archive, from its central directory entry. */
typedef struct pt_zip_ent {
    const char *name; /* into the archive's buffer, not NUL-terminated */
    size_t name_len;
    uint64_t data_off; /* offset of the member's (compressed) bytes */
    uint64_t csize, usize;
    uint32_t crc;
    uint16_t method;   /* 0 stored, 8 deflated */
} pt_zip_ent_t;

typedef struct pt_zip_key {
    const char *name;
    size_t len, index;
} pt_zip_key_t;

typedef struct pt_zip {
    const uint8_t *buf; /* the whole archive, owned by the caller */
    size_t n;
    pt_zip_ent_t *ents;
    size_t nents;
    pt_zip_key_t *by_name; /* the entries sorted by name: a dump has a member per tensor */
} pt_zip_t;

/* Read the central directory of the archive buf[0..n) (zip64 records understood). Every
 * member's extent is checked against n. Returns 0 or a negative status with a one-line reason
 * in err. */
int pt_zip_open(pt_zip_t *z, const uint8_t *buf, size_t n, char *err, size_t errlen);
/* Index of the member called name (len bytes), or -1. */
long pt_zip_find(const pt_zip_t *z, const char *name, size_t len);
/* The uncompressed bytes of member i, CRC-checked: *out points into the archive for a stored
 * member, or to a new buffer (also returned in *owned, for the caller to free) for a deflated
 * one. Returns 0 or a negative status with err set. */
int pt_zip_data(const pt_zip_t *z, size_t i, const uint8_t **out, uint8_t **owned, char *err,
                size_t errlen);
void pt_zip_free(pt_zip_t *z);

/* ------------------------------------------------------------------ values (pt_pickle.c) */

enum pt_kind {
    PT_NONE, PT_BOOL, PT_INT, PT_FLOAT, PT_STR, PT_TUPLE, PT_LIST, PT_DICT,
    PT_GLOBAL,  /* a class or function named by the pickle ("module\nname") */
    PT_STORAGE, /* a tensor storage: a persistent id resolved to its zip member */
    PT_TENSOR,
};

/* Element types of tensors (torch's storage classes). */
enum pt_dtype {
    PT_U8, PT_I8, PT_I16, PT_I32, PT_I64, PT_BOOL8, PT_F16, PT_BF16, PT_F32, PT_F64,
};

#define PT_MAX_DIMS 8

/* A tensor's storage and view (PT_STORAGE: the storage part only). */
typedef struct pt_tensor {
    int dtype;           /* enum pt_dtype */
    unsigned elem;       /* bytes per element */
    const uint8_t *data; /* the storage's first byte */
    uint64_t numel;      /* storage elements */
    int big;             /* big-endian elements (the archive's byteorder member) */
    int ndim;
    uint64_t shape[PT_MAX_DIMS], stride[PT_MAX_DIMS], offset;
} pt_tensor_t;

/* An unpickled value. Kept small: a dump holds a value per listed int. */
typedef struct pt_val pt_val_t;
struct pt_val {
    int kind; /* enum pt_kind */
    union {
        int64_t i; /* PT_INT, PT_BOOL */
        double f;  /* PT_FLOAT */
    };
    const char *s;    /* PT_STR, PT_GLOBAL: into data.pkl, not NUL-terminated */
    size_t n;         /* PT_STR, PT_GLOBAL: bytes; PT_TUPLE, PT_LIST: items; PT_DICT: pairs */
    pt_val_t **items; /* PT_DICT: key, value, key, value, ... */
    size_t cap;
    pt_tensor_t *t;   /* PT_STORAGE, PT_TENSOR */
};

typedef struct pt_file pt_file_t;

/* Open a torch.save archive held in buf[0..n) (which must outlive the handle): the zip, its
 * byteorder member and data.pkl unpickled into values with the tensors resolved against their
 * storages. Only the pickle opcodes torch.save's protocol 2 writes for dicts, lists, tuples,
 * numbers, strings, None and tensors are read; any other opcode or callable fails with a
 * one-line reason naming it. NULL on failure with *status and err set. */
pt_file_t *pt_open(const uint8_t *buf, size_t n, int *status, char *err, size_t errlen);
/* The unpickled object. */
const pt_val_t *pt_root(const pt_file_t *f);
/* The archive's name (the folder of its members: "archive" or the saved file's base name). */
const char *pt_archive_name(const pt_file_t *f);
void pt_free(pt_file_t *f);

/* Value of a string key in a dict, or NULL (also when d is no dict). */
const pt_val_t *pt_dict_get(const pt_val_t *d, const char *key);
/* Whether v is a string equal to s. */
int pt_str_eq(const pt_val_t *v, const char *s);
/* Name of a dtype ("int32") or of a kind ("list"). */
const char *pt_dtype_name(int dtype);
const char *pt_kind_name(int kind);
/* Whether v is a tensor of integers (of any width). */
int pt_tensor_is_int(const pt_val_t *v);
/* Element of an integer tensor at the given coordinates (each < shape, checked by the caller);
 * the archive's byte order is applied. */
int64_t pt_tensor_i64(const pt_tensor_t *t, const uint64_t *idx);
/* The raw bits of the element at the given coordinates, in the archive's byte order. */
uint64_t pt_tensor_bits(const pt_tensor_t *t, const uint64_t *idx);

#endif
