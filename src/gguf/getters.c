/*
 * getters.c — metadata values by key, decoded and converted to the type the
 * caller asks for: an integer getter takes any integer type whose value fits
 * (a uint8 answers get_u32, a negative int8 does not), the float getters take
 * any number; a mismatch is GLESC_ERROR_TYPE naming the key, the type wanted
 * and the type found.
 */
#include <stdio.h>

#include "gguf/gguf.h"

/* A scalar number decoded from the file: integers exactly, floats as double. */
typedef struct num {
    enum { NUM_INT, NUM_UINT, NUM_FLOAT } kind;
    int64_t i;
    uint64_t u;
    double d;
} num;

static bool num_decode(glesc_gguf_type t, const uint8_t *p, num *n)
{
    switch (t) {
    case GLESC_GGUF_UINT8:
        *n = (num){.kind = NUM_UINT, .u = p[0]};
        return true;
    case GLESC_GGUF_INT8:
        *n = (num){.kind = NUM_INT, .i = (int8_t)p[0]};
        return true;
    case GLESC_GGUF_UINT16:
        *n = (num){.kind = NUM_UINT, .u = core_le16(p)};
        return true;
    case GLESC_GGUF_INT16:
        *n = (num){.kind = NUM_INT, .i = (int16_t)core_le16(p)};
        return true;
    case GLESC_GGUF_UINT32:
        *n = (num){.kind = NUM_UINT, .u = core_le32(p)};
        return true;
    case GLESC_GGUF_INT32:
        *n = (num){.kind = NUM_INT, .i = (int32_t)core_le32(p)};
        return true;
    case GLESC_GGUF_UINT64:
        *n = (num){.kind = NUM_UINT, .u = core_le64(p)};
        return true;
    case GLESC_GGUF_INT64:
        *n = (num){.kind = NUM_INT, .i = (int64_t)core_le64(p)};
        return true;
    case GLESC_GGUF_FLOAT32:
        *n = (num){.kind = NUM_FLOAT, .d = core_le_f32(p)};
        return true;
    case GLESC_GGUF_FLOAT64:
        *n = (num){.kind = NUM_FLOAT, .d = core_le_f64(p)};
        return true;
    default:
        return false;
    }
}

/* Range of an integer target type, as a signed/unsigned pair of limits. */
static bool num_to_i64(const num *n, int64_t lo, int64_t hi, int64_t *out)
{
    if (n->kind == NUM_INT && n->i >= lo && n->i <= hi) {
        *out = n->i;
        return true;
    }
    if (n->kind == NUM_UINT && hi >= 0 && n->u <= (uint64_t)hi) {
        *out = (int64_t)n->u;
        return true;
    }
    return false;
}

static bool num_to_u64(const num *n, uint64_t hi, uint64_t *out)
{
    if (n->kind == NUM_UINT && n->u <= hi) {
        *out = n->u;
        return true;
    }
    if (n->kind == NUM_INT && n->i >= 0 && (uint64_t)n->i <= hi) {
        *out = (uint64_t)n->i;
        return true;
    }
    return false;
}

static double num_to_f64(const num *n)
{
    if (n->kind == NUM_INT)
        return (double)n->i;
    if (n->kind == NUM_UINT)
        return (double)n->u;
    return n->d;
}

static void type_desc(const gguf_kv *kv, char *buf, size_t size)
{
    if (kv->type == GLESC_GGUF_ARRAY)
        snprintf(buf, size, "array of %llu %s", (unsigned long long)kv->arr_n,
                 glesc_gguf_type_name(kv->arr_type));
    else
        snprintf(buf, size, "%s", glesc_gguf_type_name(kv->type));
}

static glesc_status type_error(const glesc_gguf *f, const gguf_kv *kv, const char *wanted,
                               const char *why)
{
    char actual[64];
    type_desc(kv, actual, sizeof actual);
    return core_err_set(NULL, GLESC_ERROR_TYPE, "%s: key '%s': wanted %s, found %s%s", f->name,
                        kv->key, wanted, actual, why ? why : "");
}

static const gguf_kv *lookup(const glesc_gguf *f, const char *key, glesc_status *st)
{
    if (!f || !key) {
        *st = core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "NULL reader or key");
        return NULL;
    }
    int64_t i = glesc_gguf_find_key(f, key);
    if (i < 0) {
        *st = core_err_set(NULL, GLESC_ERROR_NOT_FOUND, "%s: key '%s' not found", f->name, key);
        return NULL;
    }
    *st = GLESC_OK;
    return &f->kv[i];
}

/* Decodes a scalar number of entry kv; *p gets its bytes. */
static glesc_status get_num(const glesc_gguf *f, const char *key, const char *wanted, bool int_only,
                            num *n, const gguf_kv **kvp)
{
    glesc_status st;
    const gguf_kv *kv = lookup(f, key, &st);
    if (!kv)
        return st;
    *kvp = kv;
    if (!num_decode(kv->type, f->data + kv->val_off, n) ||
        (int_only && !gguf_type_is_integer(kv->type)))
        return type_error(f, kv, wanted, NULL);
    return GLESC_OK;
}

#define INT_GETTER(fn, ctype, wanted, conv)                                                        \
    GLESC_API glesc_status fn(const glesc_gguf *f, const char *key, ctype *out)                    \
    {                                                                                              \
        core_err_reset(NULL);                                                                      \
        num n = {0};                                                                               \
        const gguf_kv *kv = NULL;                                                                  \
        glesc_status st = get_num(f, key, wanted, true, &n, &kv);                                  \
        if (st != GLESC_OK)                                                                        \
            return st;                                                                             \
        conv;                                                                                      \
    }

INT_GETTER(glesc_gguf_get_u32, uint32_t, "uint32", {
    uint64_t v;
    if (!num_to_u64(&n, UINT32_MAX, &v))
        return type_error(f, kv, "uint32", " (value out of range)");
    if (out)
        *out = (uint32_t)v;
    return GLESC_OK;
})
INT_GETTER(glesc_gguf_get_i32, int32_t, "int32", {
    int64_t v;
    if (!num_to_i64(&n, INT32_MIN, INT32_MAX, &v))
        return type_error(f, kv, "int32", " (value out of range)");
    if (out)
        *out = (int32_t)v;
    return GLESC_OK;
})
INT_GETTER(glesc_gguf_get_u64, uint64_t, "uint64", {
    uint64_t v;
    if (!num_to_u64(&n, UINT64_MAX, &v))
        return type_error(f, kv, "uint64", " (value out of range)");
    if (out)
        *out = v;
    return GLESC_OK;
})
INT_GETTER(glesc_gguf_get_i64, int64_t, "int64", {
    int64_t v;
    if (!num_to_i64(&n, INT64_MIN, INT64_MAX, &v))
        return type_error(f, kv, "int64", " (value out of range)");
    if (out)
        *out = v;
    return GLESC_OK;
})

GLESC_API glesc_status glesc_gguf_get_f64(const glesc_gguf *f, const char *key, double *out)
{
    core_err_reset(NULL);
    num n = {0};
    const gguf_kv *kv = NULL;
    glesc_status st = get_num(f, key, "float64", false, &n, &kv);
    if (st == GLESC_OK && out)
        *out = num_to_f64(&n);
    return st;
}

GLESC_API glesc_status glesc_gguf_get_f32(const glesc_gguf *f, const char *key, float *out)
{
    core_err_reset(NULL);
    num n = {0};
    const gguf_kv *kv = NULL;
    glesc_status st = get_num(f, key, "float32", false, &n, &kv);
    if (st == GLESC_OK && out)
        *out = (float)num_to_f64(&n);
    return st;
}

GLESC_API glesc_status glesc_gguf_get_bool(const glesc_gguf *f, const char *key, bool *out)
{
    core_err_reset(NULL);
    glesc_status st;
    const gguf_kv *kv = lookup(f, key, &st);
    if (!kv)
        return st;
    if (kv->type != GLESC_GGUF_BOOL)
        return type_error(f, kv, "bool", NULL);
    if (out)
        *out = f->data[kv->val_off] != 0;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_gguf_get_str(const glesc_gguf *f, const char *key, const char **s,
                                          size_t *len)
{
    core_err_reset(NULL);
    glesc_status st;
    const gguf_kv *kv = lookup(f, key, &st);
    if (!kv)
        return st;
    if (kv->type != GLESC_GGUF_STRING)
        return type_error(f, kv, "string", NULL);
    if (s)
        *s = (const char *)f->data + kv->val_off + 8;
    if (len)
        *len = (size_t)core_le64(f->data + kv->val_off);
    return GLESC_OK;
}

static const gguf_kv *lookup_numeric_array(const glesc_gguf *f, const char *key, glesc_status *st)
{
    const gguf_kv *kv = lookup(f, key, st);
    if (!kv)
        return NULL;
    if (kv->type != GLESC_GGUF_ARRAY || !gguf_type_size(kv->arr_type)) {
        *st = type_error(f, kv, "numeric array", NULL);
        return NULL;
    }
    return kv;
}

GLESC_API glesc_status glesc_gguf_get_arr(const glesc_gguf *f, const char *key,
                                          glesc_gguf_type *elem_type, uint64_t *n,
                                          const void **data)
{
    core_err_reset(NULL);
    glesc_status st;
    const gguf_kv *kv = lookup_numeric_array(f, key, &st);
    if (!kv)
        return st;
    if (elem_type)
        *elem_type = kv->arr_type;
    if (n)
        *n = kv->arr_n;
    if (data)
        *data = f->data + kv->val_off + 12;
    return GLESC_OK;
}

static glesc_status index_error(const glesc_gguf *f, const gguf_kv *kv, uint64_t idx)
{
    return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                        "%s: key '%s': index %llu is out of range (array of %llu)", f->name,
                        kv->key, (unsigned long long)idx, (unsigned long long)kv->arr_n);
}

GLESC_API glesc_status glesc_gguf_get_arr_str(const glesc_gguf *f, const char *key, uint64_t idx,
                                              const char **s, size_t *len)
{
    core_err_reset(NULL);
    glesc_status st;
    const gguf_kv *kv = lookup(f, key, &st);
    if (!kv)
        return st;
    if (kv->type != GLESC_GGUF_ARRAY || kv->arr_type != GLESC_GGUF_STRING)
        return type_error(f, kv, "array of string", NULL);
    if (idx >= kv->arr_n)
        return index_error(f, kv, idx);
    uint64_t pos = kv->str_index[idx];
    if (s)
        *s = (const char *)f->data + pos + 8;
    if (len)
        *len = (size_t)core_le64(f->data + pos);
    return GLESC_OK;
}

static glesc_status arr_elem(const glesc_gguf *f, const char *key, uint64_t idx, num *n,
                             const gguf_kv **kvp)
{
    glesc_status st;
    const gguf_kv *kv = lookup_numeric_array(f, key, &st);
    if (!kv)
        return st;
    *kvp = kv;
    if (idx >= kv->arr_n)
        return index_error(f, kv, idx);
    const uint8_t *p = f->data + kv->val_off + 12 + idx * gguf_type_size(kv->arr_type);
    if (!num_decode(kv->arr_type, p, n)) /* bool elements */
        return type_error(f, kv, "numeric array", NULL);
    return GLESC_OK;
}

GLESC_API glesc_status glesc_gguf_get_arr_f32(const glesc_gguf *f, const char *key, uint64_t idx,
                                              float *out)
{
    core_err_reset(NULL);
    num n = {0};
    const gguf_kv *kv = NULL;
    glesc_status st = arr_elem(f, key, idx, &n, &kv);
    if (st == GLESC_OK && out)
        *out = (float)num_to_f64(&n);
    return st;
}

GLESC_API glesc_status glesc_gguf_get_arr_i64(const glesc_gguf *f, const char *key, uint64_t idx,
                                              int64_t *out)
{
    core_err_reset(NULL);
    num n = {0};
    const gguf_kv *kv = NULL;
    glesc_status st = arr_elem(f, key, idx, &n, &kv);
    if (st != GLESC_OK)
        return st;
    int64_t v;
    if (!gguf_type_is_integer(kv->arr_type) || !num_to_i64(&n, INT64_MIN, INT64_MAX, &v))
        return core_err_set(NULL, GLESC_ERROR_TYPE,
                            "%s: key '%s': wanted int64, found element %llu of an array of %s%s",
                            f->name, kv->key, (unsigned long long)idx,
                            glesc_gguf_type_name(kv->arr_type),
                            gguf_type_is_integer(kv->arr_type) ? " (value out of range)" : "");
    if (out)
        *out = v;
    return GLESC_OK;
}
