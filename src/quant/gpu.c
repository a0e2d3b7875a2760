/*
 * gpu.c — how quantized blocks live on the GPU. GLSL ES has no 8- or 16-bit
 * storage, so weights are read as 32-bit words, and the fast GEMV reads
 * them as uvec4 (16 bytes at once). Each type's blocks are repacked at
 * upload into a layout described by a small table: a block is cut into
 * fields (byte ranges of the file block), and a row's blocks are taken in
 * groups of G: a group stores, field after field, that field of each of
 * its blocks one after another, each field's array padded to A bytes.
 *
 *   q4_0 (G 8, A 16): qs[8][16] | d[8] (f16)          = 144 bytes, 9 uvec4
 *   q8_0 (G 8, A 16): qs[8][32] | d[8]                = 272 bytes
 *   q4_k (G 1, A 16): the 144-byte block as in the file (already aligned)
 *   q3_k (G 1, A 4):  the 110-byte block + 2 bytes of padding
 *
 * So the quants of consecutive blocks are contiguous and 16-byte aligned
 * where the GEMV wants them, scales sit in a dense array after them, and
 * nothing is wasted in a full group. The last group of a row may hold
 * fewer blocks (cnt = nb - G * (groups - 1)); its field arrays are as long
 * as cnt blocks need (padded to A), so a row costs at most A - 1 bytes per
 * field more than in the file. Locating block b of a row therefore needs
 * the row's block count: quant_gpu_locate_glsl writes that function for
 * the snippets in glsl/quant/, which read exactly these layouts.
 */
#include <string.h>

#include "core/core.h"
#include "quant/quant.h"

#define MAX_FIELDS 3

typedef struct gpu_field {
    int off, bytes; /* byte range in the file block */
} gpu_field;

typedef struct gpu_layout {
    const char *snippet; /* under glsl/ */
    int qk;              /* elements per block (4 for the plain types) */
    int g, align;        /* blocks per group, field array alignment; 0: plain type */
    int nf;
    gpu_field f[MAX_FIELDS];
} gpu_layout;

static const gpu_layout layouts[GLESC_DTYPE_COUNT_] = {
    [GLESC_DTYPE_F32] = {.snippet = "quant/f32", .qk = 4}, /* plain: g = 0 */
    [GLESC_DTYPE_F16] = {.snippet = "quant/f16", .qk = 4},
    [GLESC_DTYPE_BF16] = {.snippet = "quant/bf16", .qk = 4},
    /* grouped: quants first, 16-byte aligned; then the small fields */
    [GLESC_DTYPE_Q4_0] = {"quant/q4_0", 32, 8, 16, 2, {{2, 16}, {0, 2}}},
    [GLESC_DTYPE_Q4_1] = {"quant/q4_1", 32, 8, 16, 2, {{4, 16}, {0, 4}}},
    [GLESC_DTYPE_Q5_0] = {"quant/q5_0", 32, 8, 16, 3, {{6, 16}, {2, 4}, {0, 2}}},
    [GLESC_DTYPE_Q5_1] = {"quant/q5_1", 32, 8, 16, 3, {{8, 16}, {4, 4}, {0, 4}}},
    [GLESC_DTYPE_Q8_0] = {"quant/q8_0", 32, 8, 16, 2, {{2, 32}, {0, 2}}},
    [GLESC_DTYPE_Q6_K] = {"quant/q6_k", 256, 8, 16, 2, {{0, 208}, {208, 2}}},
    /* whole blocks, already 16-byte multiples with aligned quants */
    [GLESC_DTYPE_Q4_K] = {"quant/q4_k", 256, 1, 16, 1, {{0, 144}}},
    [GLESC_DTYPE_Q5_K] = {"quant/q5_k", 256, 1, 16, 1, {{0, 176}}},
    /* word-aligned blocks (read by the generic paths) */
    [GLESC_DTYPE_Q8_1] = {"quant/q8_1", 32, 1, 4, 1, {{0, 36}}},
    [GLESC_DTYPE_Q2_K] = {"quant/q2_k", 256, 1, 4, 1, {{0, 84}}},
    [GLESC_DTYPE_Q3_K] = {"quant/q3_k", 256, 1, 4, 1, {{0, 110}}},
    [GLESC_DTYPE_IQ4_NL] = {"quant/iq4_nl", 32, 1, 4, 2, {{0, 2}, {2, 16}}},
    [GLESC_DTYPE_IQ4_XS] = {"quant/iq4_xs", 256, 1, 4, 1, {{0, 136}}},
    [GLESC_DTYPE_MXFP4] = {"quant/mxfp4", 32, 1, 4, 2, {{0, 1}, {1, 16}}},
};

static const gpu_layout *layout(glesc_dtype t)
{
    if ((unsigned)t >= GLESC_DTYPE_COUNT_ || !layouts[t].snippet)
        return NULL;
    return &layouts[t];
}

const char *quant_gpu_snippet(glesc_dtype t)
{
    const gpu_layout *l = layout(t);
    return l ? l->snippet : NULL;
}

bool quant_gpu_readable(glesc_dtype t)
{
    return layout(t) != NULL;
}

int quant_gpu_block_elems(glesc_dtype t)
{
    const gpu_layout *l = layout(t);
    return l ? l->qk : 0;
}

static int round_up(int v, int a)
{
    return (v + a - 1) / a * a;
}

/* Bytes of a group of cnt blocks. */
static int group_bytes(const gpu_layout *l, int cnt)
{
    int n = 0;
    for (int f = 0; f < l->nf; f++)
        n += round_up(cnt * l->f[f].bytes, l->align);
    return n;
}

uint64_t quant_gpu_row_bytes(glesc_dtype t, int64_t ne0)
{
    const gpu_layout *l = layout(t);
    if (!l || !l->g || ne0 % l->qk)
        return 0;
    int64_t nb = ne0 / l->qk, full = nb / l->g;
    int tail = (int)(nb % l->g);
    return (uint64_t)full * (uint64_t)group_bytes(l, l->g) + (uint64_t)group_bytes(l, tail);
}

int quant_gpu_align(glesc_dtype t)
{
    const gpu_layout *l = layout(t);
    return l && l->g ? l->align : 0;
}

#define GROUP_MAX 2048 /* bytes of the largest group (q6_k: 1680) */

/* One row (nb blocks) between the file layout (file) and the GPU layout
 * (gpu: words): to_gpu gathers each group's fields into a byte image (the
 * padding zeroed) and stores it as little-endian words; else the other way.
 * Byte order is explicit, so any host gives the same words; on a
 * little-endian host the image is the words themselves, so a repack writes
 * each byte once, in order (the destination may be a mapped GPU buffer). */
static void convert_row(const gpu_layout *l, int64_t nb, int file_bytes, uint8_t *file,
                        uint32_t *gpu, bool to_gpu)
{
    uint8_t local[GROUP_MAX];
    const bool direct = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
    for (int64_t g0 = 0; g0 < nb; g0 += l->g) {
        int cnt = (int)CORE_MIN((int64_t)l->g, nb - g0), words = group_bytes(l, cnt) / 4;
        uint8_t *img = direct ? (uint8_t *)gpu : local;
        if (!to_gpu && !direct)
            for (int w = 0; w < words; w++)
                core_put_le32(img + 4 * w, gpu[w]);
        uint8_t *p = img;
        for (int f = 0; f < l->nf; f++) {
            int fb = l->f[f].bytes, arr = round_up(cnt * fb, l->align);
            for (int i = 0; i < cnt; i++) {
                uint8_t *fp = file + (g0 + i) * file_bytes + l->f[f].off;
                if (to_gpu)
                    memcpy(p + i * fb, fp, (size_t)fb);
                else
                    memcpy(fp, p + i * fb, (size_t)fb);
            }
            if (to_gpu)
                memset(p + cnt * fb, 0, (size_t)(arr - cnt * fb));
            p += arr;
        }
        if (to_gpu && !direct)
            for (int w = 0; w < words; w++)
                gpu[w] = core_le32(img + 4 * w);
        gpu += words;
    }
}

/* Copies field bytes fb of cnt blocks stride bytes apart into one array.
 * The cases are the field sizes of the table, so each copy is a few moves
 * the compiler inlines rather than a call (a call per 2- or 16-byte field
 * made the repack several times slower than the memory it writes). */
static inline void gather(uint8_t *restrict dst, const uint8_t *restrict src, int stride, int cnt,
                          int fb)
{
#define GATHER_CASE(N)                                                                             \
    case N:                                                                                        \
        for (int i = 0; i < cnt; i++)                                                              \
            memcpy(dst + i * (N), src + (size_t)i * (size_t)stride, (N));                          \
        break
    switch (fb) {
        GATHER_CASE(1);
        GATHER_CASE(2);
        GATHER_CASE(4);
        GATHER_CASE(16);
        GATHER_CASE(32);
        GATHER_CASE(110);
        GATHER_CASE(208);
    default:
        for (int i = 0; i < cnt; i++)
            memcpy(dst + i * fb, src + (size_t)i * (size_t)stride, (size_t)fb);
        break;
    }
#undef GATHER_CASE
}

/* One row to the GPU layout on a little-endian host, where the byte image
 * is the words: each output byte written once, in order. */
static void repack_row_le(const gpu_layout *l, int64_t nb, int file_bytes,
                          const uint8_t *restrict file, uint8_t *restrict out)
{
    for (int64_t g0 = 0; g0 < nb; g0 += l->g) {
        int cnt = (int)CORE_MIN((int64_t)l->g, nb - g0);
        const uint8_t *blk = file + g0 * file_bytes;
        for (int f = 0; f < l->nf; f++) {
            int fb = l->f[f].bytes, used = cnt * fb, arr = round_up(used, l->align);
            gather(out, blk + l->f[f].off, file_bytes, cnt, fb);
            if (arr > used)
                memset(out + used, 0, (size_t)(arr - used));
            out += arr;
        }
    }
}

/* Checks the arguments; the file block's bytes in *file_bytes. */
static glesc_status convert_check(const gpu_layout *l, glesc_dtype t, int64_t ne0, int64_t rows,
                                  int *file_bytes)
{
    if (!l || !l->g || group_bytes(l, l->g) > GROUP_MAX)
        return GLESC_ERROR_UNSUPPORTED;
    if (ne0 <= 0 || rows < 0 || ne0 % l->qk)
        return GLESC_ERROR_INVALID_ARGUMENT;
    const quant_type_info *q = quant_type(t);
    *file_bytes = q->block_bytes * (l->qk / q->block_size);
    return GLESC_OK;
}

/* Repacks (to_gpu) or unpacks rows of ne0 elements, byte by byte through
 * an image of each group (any host). */
static glesc_status convert(glesc_dtype t, int64_t ne0, int64_t rows, uint8_t *file, uint32_t *gpu,
                            bool to_gpu)
{
    const gpu_layout *l = layout(t);
    int file_bytes;
    glesc_status st = convert_check(l, t, ne0, rows, &file_bytes);
    if (st != GLESC_OK)
        return st;
    uint64_t frow = (uint64_t)(ne0 / l->qk) * (uint64_t)file_bytes;
    uint64_t grow = quant_gpu_row_bytes(t, ne0) / 4;
    for (int64_t r = 0; r < rows; r++)
        convert_row(l, ne0 / l->qk, file_bytes, file + r * frow, gpu + r * grow, to_gpu);
    return GLESC_OK;
}

glesc_status quant_gpu_repack(glesc_dtype t, const void *src, int64_t ne0, int64_t rows,
                              uint32_t *dst)
{
    if (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__)
        return quant_gpu_repack_generic(t, src, ne0, rows, dst);
    const gpu_layout *l = layout(t);
    int file_bytes;
    glesc_status st = convert_check(l, t, ne0, rows, &file_bytes);
    if (st != GLESC_OK)
        return st;
    int64_t nb = ne0 / l->qk;
    uint64_t frow = (uint64_t)nb * (uint64_t)file_bytes, grow = quant_gpu_row_bytes(t, ne0);
    const uint8_t *in = src;
    uint8_t *out = (uint8_t *)dst;
    for (int64_t r = 0; r < rows; r++)
        repack_row_le(l, nb, file_bytes, in + (uint64_t)r * frow, out + (uint64_t)r * grow);
    return GLESC_OK;
}

glesc_status quant_gpu_repack_generic(glesc_dtype t, const void *src, int64_t ne0, int64_t rows,
                                      uint32_t *dst)
{
    return convert(t, ne0, rows, (uint8_t *)(uintptr_t)src, dst, true);
}

bool quant_gpu_same_as_file(glesc_dtype t)
{
    const gpu_layout *l = layout(t);
    if (!l || l->g != 1 || l->nf != 1 || l->f[0].off != 0)
        return false;
    const quant_type_info *q = quant_type(t);
    int file_bytes = q->block_bytes * (l->qk / q->block_size);
    return l->f[0].bytes == file_bytes && file_bytes % l->align == 0;
}

glesc_status quant_gpu_unpack(glesc_dtype t, const uint32_t *src, int64_t ne0, int64_t rows,
                              void *dst)
{
    return convert(t, ne0, rows, dst, (uint32_t *)(uintptr_t)src, false);
}

void quant_gpu_locate_glsl(glesc_dtype t, sbuf *o)
{
    const gpu_layout *l = layout(t);
    if (!l || !l->g)
        return;
    int full = group_bytes(l, l->g) / 4;
    sbuf_appendf(o,
                 "// Block blk of the row at word row (nb blocks): where each of its fields' "
                 "arrays starts\n"
                 "// (words) and its index in its group (%s: groups of %d blocks, fields padded "
                 "to %d bytes).\n"
                 "qblock qlocate(uint row, uint nb, uint blk) {\n",
                 quant_type(t)->name, l->g, l->align);
    if (l->g == 1) {
        sbuf_appendf(o, "    uint f0 = row + blk * %du;\n", full);
        for (int f = 1; f < MAX_FIELDS; f++) {
            int off = 0;
            for (int e = 0; e < f && e < l->nf; e++)
                off += round_up(l->f[e].bytes, l->align) / 4;
            sbuf_appendf(o, "    uint f%d = f0 + %du;\n", f, f < l->nf ? off : 0);
        }
        sbuf_append(o, "    return qblock(f0, f1, f2, 0u);\n}\n");
        return;
    }
    sbuf_appendf(o,
                 "    uint g = blk / %du, i = blk %% %du;\n"
                 "    uint cnt = min(%du, nb - g * %du);\n"
                 "    uint f0 = row + g * %du;\n",
                 l->g, l->g, l->g, l->g, full);
    /* array f+1 starts after cnt entries of field f, rounded up to A (a
     * multiple of A already where the field is) */
    for (int f = 1; f < MAX_FIELDS; f++) {
        if (f < l->nf && l->f[f - 1].bytes % l->align == 0)
            sbuf_appendf(o, "    uint f%d = f%d + cnt * %du;\n", f, f - 1, l->f[f - 1].bytes / 4);
        else if (f < l->nf)
            sbuf_appendf(o, "    uint f%d = f%d + (cnt * %du + %du) / %du * %du;\n", f, f - 1,
                         l->f[f - 1].bytes, l->align - 1, l->align, l->align / 4);
        else
            sbuf_appendf(o, "    uint f%d = f%d;\n", f, f - 1);
    }
    sbuf_append(o, "    return qblock(f0, f1, f2, i);\n}\n");
}
