/*
 * glesc_gguf.h — reading and writing GGUF files (versions 2 and 3).
 *
 * The reader maps the file and validates everything before handing anything
 * out: magic, version, every count and length against the file size, size
 * computations for overflow, tensor offsets (inside the data section, aligned,
 * not overlapping), known types and row lengths that are whole blocks. After a
 * successful open, every accessor is safe. Errors name the file, the byte
 * offset and the key or tensor; read them with glesc_last_errmsg().
 * Beyond the format's own rules, the reader also refuses: version 1 (32-bit
 * counts), arrays nested more than 8 deep, bool bytes other than 0 and 1,
 * keys and tensor names containing a NUL byte, general.alignment that is not
 * a uint32 power of two, n_dims outside 1..4, a dimension of 0 and element
 * counts beyond INT64_MAX. A file without tensors may end right after the
 * tensor directory (vocab-only files do). Only regular files are opened: a
 * FIFO, device or directory is refused by name without waiting on it.
 *
 * Strings in GGUF are not NUL-terminated in the file: string getters return a
 * pointer and a length. Keys and tensor names are additionally available as
 * NUL-terminated copies owned by the reader.
 */
#ifndef GLESC_GGUF_H
#define GLESC_GGUF_H

#include "glesc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Metadata value types, as numbered in the file format. */
typedef enum glesc_gguf_type {
    GLESC_GGUF_UINT8 = 0,
    GLESC_GGUF_INT8 = 1,
    GLESC_GGUF_UINT16 = 2,
    GLESC_GGUF_INT16 = 3,
    GLESC_GGUF_UINT32 = 4,
    GLESC_GGUF_INT32 = 5,
    GLESC_GGUF_FLOAT32 = 6,
    GLESC_GGUF_BOOL = 7,
    GLESC_GGUF_STRING = 8,
    GLESC_GGUF_ARRAY = 9,
    GLESC_GGUF_UINT64 = 10,
    GLESC_GGUF_INT64 = 11,
    GLESC_GGUF_FLOAT64 = 12,
} glesc_gguf_type;

/* "uint8", ..., "array"; "?" for an unknown value. Static string. */
GLESC_API const char *glesc_gguf_type_name(glesc_gguf_type t);

typedef struct glesc_gguf glesc_gguf;

/* Opens and validates path (mmapped read-only). On failure *out is NULL and
 * glesc_last_errmsg() says what is wrong and where. */
GLESC_API glesc_status glesc_gguf_open(const char *path, glesc_gguf **out);
/* The same over a buffer (used by the fuzzer). data must stay valid and
 * unchanged while the reader lives; name is used in messages. */
GLESC_API glesc_status glesc_gguf_open_memory(const void *data, size_t size, const char *name,
                                              glesc_gguf **out);
GLESC_API void glesc_gguf_close(glesc_gguf *f);

GLESC_API uint32_t glesc_gguf_version(const glesc_gguf *f);
GLESC_API uint32_t glesc_gguf_alignment(const glesc_gguf *f);   /* general.alignment or 32 */
GLESC_API uint64_t glesc_gguf_data_offset(const glesc_gguf *f); /* start of tensor data */
GLESC_API uint64_t glesc_gguf_file_size(const glesc_gguf *f);

/* ---- Metadata ---- */
GLESC_API int64_t glesc_gguf_n_kv(const glesc_gguf *f);
/* Index of key, or -1 when absent. */
GLESC_API int64_t glesc_gguf_find_key(const glesc_gguf *f, const char *key);
/* Key name of entry i (NUL-terminated, owned by f); NULL when i is out of range. */
GLESC_API const char *glesc_gguf_key(const glesc_gguf *f, int64_t i);
GLESC_API glesc_gguf_type glesc_gguf_kv_type(const glesc_gguf *f, int64_t i);
/* For arrays: the element type and count (0/0 for non-arrays). */
GLESC_API glesc_gguf_type glesc_gguf_arr_type(const glesc_gguf *f, int64_t i);
GLESC_API uint64_t glesc_gguf_arr_n(const glesc_gguf *f, int64_t i);

/* The value of entry i in its encoded form, exactly as the file stores it
 * after the type field: a little-endian scalar; a string as u64 length and
 * bytes; an array as u32 element type, u64 count and the elements (arrays of
 * arrays recursively). Already validated. *data points into the mapping and
 * stays valid until glesc_gguf_close. GLESC_ERROR_INVALID_ARGUMENT when i is
 * out of range. This is how a caller walks nested arrays or copies any value
 * with glesc_gguf_writer_set_encoded. (Added to the original API.) */
GLESC_API glesc_status glesc_gguf_kv_raw(const glesc_gguf *f, int64_t i, const void **data,
                                         uint64_t *size);

/* ---- Walking a value: the iterator ----
 * An iterator hands out the value of one metadata entry piece by piece,
 * depth first in file order: first the entry's own value; when that is an
 * array, its elements in order; an element that is itself an array is
 * followed by its own elements before its next sibling. Every value was
 * validated when the file was opened, so a walk cannot fail. This is how a
 * caller reads arrays of strings or arrays of arrays without decoding the
 * encoded form (glesc_gguf_kv_raw). */
typedef struct glesc_gguf_iter glesc_gguf_iter;

/* One value met by the iterator. */
typedef struct glesc_gguf_value {
    glesc_gguf_type type;
    int depth;      /* 0: the entry's own value; d > 0: an element of an array at depth d - 1 */
    uint64_t index; /* the element's position in its array; 0 at depth 0 */
    union {
        uint64_t u64; /* UINT8, UINT16, UINT32, UINT64 (zero-extended) */
        int64_t i64;  /* INT8, INT16, INT32, INT64 (sign-extended) */
        double f64;   /* FLOAT32 (converted exactly), FLOAT64 */
        bool b;       /* BOOL */
        struct {
            const char *data; /* into the mapping, NOT NUL-terminated; may hold any bytes */
            uint64_t len;
        } str; /* STRING */
        struct {
            glesc_gguf_type elem_type;
            uint64_t n; /* elements, handed out by the next calls (none when 0) */
        } arr;          /* ARRAY */
    } as;
} glesc_gguf_value;

/* A new iterator over the value of entry i of f, positioned before it. The
 * iterator reads f's mapping: destroy it before glesc_gguf_close(f). On
 * failure *out is NULL: GLESC_ERROR_INVALID_ARGUMENT when f or out is NULL
 * or i is out of range, GLESC_ERROR_OUT_OF_MEMORY; message in
 * glesc_last_errmsg(). */
GLESC_API glesc_status glesc_gguf_iter_create(const glesc_gguf *f, int64_t i,
                                              glesc_gguf_iter **out);
/* Fills *out with the next value and returns true; returns false (and
 * leaves *out untouched) once the entry's value has been handed out whole.
 * Strings in *out stay valid until glesc_gguf_close(f). */
GLESC_API bool glesc_gguf_iter_next(glesc_gguf_iter *it, glesc_gguf_value *out);
/* Skips the elements still to come of the innermost array whose elements
 * are being handed out (with everything nested in them), so the next call
 * returns what follows that array. An array's elements are being handed
 * out from the call that returned the array until the call that returned
 * its last element (or its last element's last nested value). No-op when
 * no array is open. */
GLESC_API void glesc_gguf_iter_skip(glesc_gguf_iter *it);
/* NULL is a no-op. */
GLESC_API void glesc_gguf_iter_destroy(glesc_gguf_iter *it);

/* Typed getters by key. GLESC_ERROR_NOT_FOUND when absent, GLESC_ERROR_TYPE
 * (message names the key, expected and actual type) when the stored value
 * cannot be represented: integer getters accept any integer type whose value
 * fits, float getters accept float32/float64 (and integers). Never abort. */
GLESC_API glesc_status glesc_gguf_get_u32(const glesc_gguf *f, const char *key, uint32_t *out);
GLESC_API glesc_status glesc_gguf_get_i32(const glesc_gguf *f, const char *key, int32_t *out);
GLESC_API glesc_status glesc_gguf_get_u64(const glesc_gguf *f, const char *key, uint64_t *out);
GLESC_API glesc_status glesc_gguf_get_i64(const glesc_gguf *f, const char *key, int64_t *out);
GLESC_API glesc_status glesc_gguf_get_f32(const glesc_gguf *f, const char *key, float *out);
GLESC_API glesc_status glesc_gguf_get_f64(const glesc_gguf *f, const char *key, double *out);
GLESC_API glesc_status glesc_gguf_get_bool(const glesc_gguf *f, const char *key, bool *out);
/* *s points into the mapping (not NUL-terminated), *len its length. */
GLESC_API glesc_status glesc_gguf_get_str(const glesc_gguf *f, const char *key, const char **s,
                                          size_t *len);
/* A numeric (or bool) array: element type, count and a pointer to the packed
 * little-endian elements in the mapping (possibly unaligned: memcpy them). */
GLESC_API glesc_status glesc_gguf_get_arr(const glesc_gguf *f, const char *key,
                                          glesc_gguf_type *elem_type, uint64_t *n,
                                          const void **data);
/* Element idx of a string array. O(1) (the reader keeps an index). */
GLESC_API glesc_status glesc_gguf_get_arr_str(const glesc_gguf *f, const char *key, uint64_t idx,
                                              const char **s, size_t *len);
/* Element idx of a numeric array converted like the scalar getters. */
GLESC_API glesc_status glesc_gguf_get_arr_f32(const glesc_gguf *f, const char *key, uint64_t idx,
                                              float *out);
GLESC_API glesc_status glesc_gguf_get_arr_i64(const glesc_gguf *f, const char *key, uint64_t idx,
                                              int64_t *out);

/* ---- Tensors ---- */
typedef struct glesc_gguf_tensor_info {
    const char *name; /* NUL-terminated, owned by the reader */
    glesc_dtype type;
    int n_dims;       /* 1..4 */
    int64_t ne[4];    /* ne[0] is the row length (fastest); unused dims are 1 */
    uint64_t offset;  /* relative to the data section */
    uint64_t size;    /* bytes */
    const void *data; /* into the mapping; valid until glesc_gguf_close */
} glesc_gguf_tensor_info;

GLESC_API int64_t glesc_gguf_n_tensors(const glesc_gguf *f);
/* Index of the tensor called name, or -1. */
GLESC_API int64_t glesc_gguf_find_tensor(const glesc_gguf *f, const char *name);
/* Fills *out for tensor i; GLESC_ERROR_INVALID_ARGUMENT when i is out of range. */
GLESC_API glesc_status glesc_gguf_tensor(const glesc_gguf *f, int64_t i,
                                         glesc_gguf_tensor_info *out);
/* Copies n bytes of tensor i's data, from offset bytes into it, to dst. A
 * file is read with pread, not through the mapping, so a file truncated or
 * rewritten by another process while it is open gives GLESC_ERROR_IO naming
 * the file and tensor instead of a SIGBUS (touching such pages of the
 * mapping, e.g. through glesc_gguf_tensor_info.data, kills the process); a
 * reader of memory copies from it. GLESC_ERROR_INVALID_ARGUMENT when i is
 * out of range or the bytes are not inside the tensor. (Added to the
 * original API.) */
GLESC_API glesc_status glesc_gguf_tensor_read(const glesc_gguf *f, int64_t i, uint64_t offset,
                                              void *dst, uint64_t n);

/* ---- Writer ---- */
typedef struct glesc_gguf_writer glesc_gguf_writer;

/* NULL on out-of-memory. Writes GGUF version 3. */
GLESC_API glesc_gguf_writer *glesc_gguf_writer_create(void);
GLESC_API void glesc_gguf_writer_destroy(glesc_gguf_writer *w);
/* Alignment of the tensor data (a power of two; default 32). Also written as
 * general.alignment when it differs from 32. */
GLESC_API glesc_status glesc_gguf_writer_set_alignment(glesc_gguf_writer *w, uint32_t alignment);
/* Setters copy the key and value. Setting a key twice replaces its value. */
GLESC_API glesc_status glesc_gguf_writer_set_u32(glesc_gguf_writer *w, const char *key, uint32_t v);
GLESC_API glesc_status glesc_gguf_writer_set_i32(glesc_gguf_writer *w, const char *key, int32_t v);
GLESC_API glesc_status glesc_gguf_writer_set_u64(glesc_gguf_writer *w, const char *key, uint64_t v);
GLESC_API glesc_status glesc_gguf_writer_set_f32(glesc_gguf_writer *w, const char *key, float v);
GLESC_API glesc_status glesc_gguf_writer_set_bool(glesc_gguf_writer *w, const char *key, bool v);
GLESC_API glesc_status glesc_gguf_writer_set_str(glesc_gguf_writer *w, const char *key,
                                                 const char *v);
/* A scalar of any type given its packed little-endian bytes (for copying
 * metadata from a reader). For GLESC_GGUF_STRING, v is a NUL-terminated
 * string (as for set_str); GLESC_GGUF_ARRAY is refused (use set_arr,
 * set_arr_str or set_encoded). A bool byte must be 0 or 1. */
GLESC_API glesc_status glesc_gguf_writer_set_raw(glesc_gguf_writer *w, const char *key,
                                                 glesc_gguf_type type, const void *v);
/* A value of any type given in its encoded form (as glesc_gguf_kv_raw hands
 * it out), copied after the same validation a reader applies. The way to
 * write arrays of arrays or copy any value verbatim. (Added to the original
 * API.) */
GLESC_API glesc_status glesc_gguf_writer_set_encoded(glesc_gguf_writer *w, const char *key,
                                                     glesc_gguf_type type, const void *data,
                                                     uint64_t size);
/* A numeric array (elem_type not STRING/ARRAY): n packed elements, copied. */
GLESC_API glesc_status glesc_gguf_writer_set_arr(glesc_gguf_writer *w, const char *key,
                                                 glesc_gguf_type elem_type, const void *data,
                                                 uint64_t n);
/* A string array of n NUL-terminated strings, copied. */
GLESC_API glesc_status glesc_gguf_writer_set_arr_str(glesc_gguf_writer *w, const char *key,
                                                     const char *const *strs, uint64_t n);
/* Adds a tensor. ne has n_dims entries; size must equal the row bytes times
 * the number of rows. data is NOT copied: it must stay valid until
 * glesc_gguf_writer_write returns (large weights are written straight from
 * the caller's memory). data may be NULL to write zeros. */
GLESC_API glesc_status glesc_gguf_writer_add_tensor(glesc_gguf_writer *w, const char *name,
                                                    glesc_dtype type, int n_dims, const int64_t *ne,
                                                    const void *data, uint64_t size);
/* Produces the bytes of a tensor added with glesc_gguf_writer_add_tensor_fn
 * while glesc_gguf_writer_write runs: fills dst with exactly size bytes
 * (the tensor in file layout). Called once per such tensor, in the order of
 * addition, on the thread that called glesc_gguf_writer_write; dst is the
 * writer's and is valid only during the call. A status other than GLESC_OK
 * stops the write: no file is created, glesc_gguf_writer_write returns that
 * status and leaves glesc_last_errmsg() as the callback left it. */
typedef glesc_status (*glesc_gguf_fill_fn)(void *user, const char *name, void *dst, uint64_t size);
/* As glesc_gguf_writer_add_tensor, with the bytes produced by fill(user, ...)
 * during glesc_gguf_writer_write instead of read from the caller's memory,
 * so a model can be generated and written tensor by tensor without holding
 * it whole (the writer holds one tensor at a time). (Added to the original
 * API.) */
GLESC_API glesc_status glesc_gguf_writer_add_tensor_fn(glesc_gguf_writer *w, const char *name,
                                                       glesc_dtype type, int n_dims,
                                                       const int64_t *ne, uint64_t size,
                                                       glesc_gguf_fill_fn fill, void *user);
/* Writes the file (to path.tmp, then renamed). Errors in glesc_last_errmsg(). */
GLESC_API glesc_status glesc_gguf_writer_write(glesc_gguf_writer *w, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* GLESC_GGUF_H */
