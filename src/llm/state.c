/*
 * state.c — a session's saved state (a prompt cache): saving and loading
 * the KV cache's filled positions with the caller's tokens, the last logits
 * row and a sampler's state, to memory or a file; and copying a session on
 * the GPU (a fork after a shared system prompt).
 *
 * The layout (little-endian; STATE_HEADER bytes of header, then the
 * payload):
 *
 *     0  magic "GLESCSTA"           8  format version (STATE_VERSION)
 *    12  glesc version number      16  model hash (XXH3-128: lo, hi)
 *    32  architecture, NUL-padded  48  n_layer   52  n_head_kv
 *    56  head_dim   60  kv_type (glesc_dtype)    64  n_ctx (the saver's)
 *    68  n_past     72  n_tokens   76  n_vocab (0: no logits row)
 *    80  flags (bit 0: grammar tokens follow the sampler's history)
 *    84  sampler bytes (0: none)   88  payload bytes (u64)
 *    96  payload checksum (XXH3-64) 104 header checksum (XXH3-64 of 0..104)
 *
 *   payload: tokens i32 [n_tokens]; logits f32 [n_vocab]; the sampler's
 *   random stream (4 u64), its history count (u32) and ids (i32, oldest
 *   first), with flag 0 its grammar's count (u32) and the ids its grammar
 *   accepted since its start (i32, in order: replayed, they rebuild the
 *   grammar's state); then per layer K and V rows [n_past][row bytes of
 *   kv_type].
 *
 * Loading validates everything (the header against the session, then the
 * payload's checksum and contents) before the session or the sampler is
 * touched, so a refused state changes nothing. A file is read header
 * first: the payload's size follows from fields already checked against
 * the session, so a corrupted size never decides an allocation.
 *
 * The cache's rows move through graphs of glesc_cpy into views of the
 * cache tensors (a cache is one storage buffer per layer and type): from
 * graph inputs written from the host when loading, from the other
 * session's views when copying; saving reads each view back.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llm/runtime.h"

#define STATE_MAGIC "GLESCSTA"
#define STATE_VERSION 1u
#define STATE_HEADER 112u
#define STATE_HEADER_SUMMED 104u /* the bytes the header checksum covers */
#define STATE_SAMPLER_FIXED 36u  /* random stream and history count */
#define STATE_FLAG_GRAMMAR 1u    /* flags: the sampler's part has grammar tokens */
#define STATE_SAMPLE 64u         /* bytes of a tensor's data the model hash takes, per place */

/* ---- The model's hash ---- */

glesc_status llm_model_hash(const glesc_gguf *f, const char *path, core_hash128 *out)
{
    core_hasher *h = core_hasher_create();
    if (!h)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: the model's hash", path);
    uint8_t word[8];
    glesc_status st = GLESC_OK;
    for (int64_t i = 0; i < glesc_gguf_n_kv(f) && st == GLESC_OK; i++) {
        const char *key = glesc_gguf_key(f, i);
        const void *raw;
        uint64_t size;
        if ((st = glesc_gguf_kv_raw(f, i, &raw, &size)) != GLESC_OK)
            break;
        core_hasher_update(h, key, strlen(key) + 1);
        core_put_le32(word, (uint32_t)glesc_gguf_kv_type(f, i));
        core_hasher_update(h, word, 4);
        core_hasher_update(h, raw, (size_t)size);
    }
    /* The tensor table, and 64 bytes of each tensor's data at its start,
     * middle and end: weights of another training or seed differ there,
     * and reading every weight byte again would double a load. */
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f) && st == GLESC_OK; i++) {
        glesc_gguf_tensor_info t;
        if ((st = glesc_gguf_tensor(f, i, &t)) != GLESC_OK)
            break;
        core_hasher_update(h, t.name, strlen(t.name) + 1);
        core_put_le32(word, (uint32_t)t.type);
        core_hasher_update(h, word, 4);
        for (int d = 0; d < 4; d++) {
            core_put_le64(word, (uint64_t)t.ne[d]);
            core_hasher_update(h, word, 8);
        }
        uint8_t sample[STATE_SAMPLE];
        uint64_t n = CORE_MIN(t.size, (uint64_t)STATE_SAMPLE);
        const uint64_t at[3] = {0, (t.size - n) / 2, t.size - n};
        for (int k = 0; k < 3 && n > 0 && st == GLESC_OK; k++)
            if ((st = glesc_gguf_tensor_read(f, i, at[k], sample, n)) == GLESC_OK)
                core_hasher_update(h, sample, (size_t)n);
    }
    *out = core_hasher_digest(h);
    core_hasher_destroy(h);
    if (st != GLESC_OK && strncmp(glesc_last_errmsg(), path, strlen(path)) != 0)
        core_err_prefix(NULL, "%s: the model's hash", path);
    return st;
}

/* ---- Sizes ---- */

static size_t row_bytes(const glesc_session *s)
{
    return glesc_dtype_row_bytes(s->kv_type, s->m->hp.n_head_kv * s->m->hp.head_dim);
}

static size_t sampler_bytes(const glesc_sampler *smp)
{
    if (!smp)
        return 0;
    size_t n = STATE_SAMPLER_FIXED + 4 * (size_t)llm_sampler_n_history(smp);
    return llm_sampler_has_grammar(smp) ? n + 4 + 4 * llm_sampler_grammar_n(smp) : n;
}

/* The payload's bytes (overflow: SIZE_MAX). */
static size_t payload_bytes(size_t n_layer, size_t row, size_t n_past, size_t n_tokens,
                            size_t n_vocab, size_t sampler)
{
    size_t kv, fixed, total;
    if (core_mul_overflow(n_layer * 2, row, &kv) || core_mul_overflow(kv, n_past, &kv) ||
        core_mul_overflow(n_tokens + n_vocab, 4, &fixed) ||
        core_add_overflow(fixed, sampler, &fixed) || core_add_overflow(kv, fixed, &total))
        return SIZE_MAX;
    return total;
}

GLESC_API size_t glesc_session_state_size(const glesc_session *s, const glesc_sampler *smp,
                                          size_t n_tokens)
{
    if (!s)
        return 0;
    size_t p = payload_bytes((size_t)s->m->hp.n_layer, row_bytes(s), (size_t)s->n_past, n_tokens,
                             s->has_logits ? (size_t)s->m->hp.n_vocab : 0, sampler_bytes(smp));
    return p > SIZE_MAX - STATE_HEADER ? 0 : STATE_HEADER + p;
}

/* ---- The cache's rows through graphs ---- */

/* The first n rows of a cache tensor, as [row elements, n]. */
static glesc_tensor *cache_rows(glesc_graph *g, const glesc_session *s, glesc_tensor *c, int32_t n)
{
    int64_t kv_dim = s->m->hp.n_head_kv * s->m->hp.head_dim;
    return glesc_view(g, c, 2, (int64_t[]){kv_dim, n}, (size_t[]){0, row_bytes(s)}, 0);
}

/* The rows [0, n) of dst's caches from src's (src NULL: from rows, per layer
 * K then V, n · row bytes each), in one graph. The message names what
 * failed; the caller decides what the session holds then. */
static glesc_status cache_fill(glesc_session *dst, glesc_session *src, const uint8_t *rows,
                               int32_t n)
{
    glesc_context *ctx = dst->m->ctx;
    int64_t n_layer = dst->m->hp.n_layer, kv_dim = dst->m->hp.n_head_kv * dst->m->hp.head_dim;
    size_t bytes = row_bytes(dst) * (size_t)n;
    glesc_tensor **outs = core_calloc((size_t)n_layer * 2, sizeof *outs);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_status st = GLESC_ERROR_OUT_OF_MEMORY;
    if (!outs || !g)
        goto done;
    for (int64_t i = 0; i < n_layer * 2; i++) {
        glesc_tensor *cache = i % 2 ? dst->v_cache[i / 2] : dst->k_cache[i / 2];
        glesc_tensor *from;
        if (src) {
            from = cache_rows(g, src, i % 2 ? src->v_cache[i / 2] : src->k_cache[i / 2], n);
        } else {
            from = glesc_tensor_new(g, dst->kv_type, 2, (int64_t[]){kv_dim, n});
            if (from &&
                (st = glesc_tensor_write(from, rows + (size_t)i * bytes, bytes)) != GLESC_OK)
                goto done;
        }
        st = GLESC_ERROR_INVALID_ARGUMENT;
        if (!(outs[i] = glesc_cpy(g, from, cache_rows(g, dst, cache, n))))
            goto done;
    }
    st = glesc_graph_compute(g, outs, (int)n_layer * 2);
done:
    if (st != GLESC_OK)
        core_err_set(NULL, st, "the KV cache's rows: %s",
                     !outs || !g ? "out of memory" : glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
    core_free(outs);
    return st;
}

/* Reads the rows [0, n_past) of each cache, per layer K then V, into dst. */
static glesc_status cache_read(glesc_session *s, uint8_t *dst)
{
    glesc_context *ctx = s->m->ctx;
    size_t bytes = row_bytes(s) * (size_t)s->n_past;
    glesc_graph *g = glesc_graph_create(ctx);
    if (!g)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "saving the KV cache");
    glesc_status st = GLESC_OK;
    for (int64_t i = 0; i < s->m->hp.n_layer * 2 && st == GLESC_OK; i++) {
        glesc_tensor *c = i % 2 ? s->v_cache[i / 2] : s->k_cache[i / 2];
        glesc_tensor *v = cache_rows(g, s, c, s->n_past);
        st =
            v ? glesc_tensor_read(v, dst + (size_t)i * bytes, bytes) : GLESC_ERROR_INVALID_ARGUMENT;
        if (st != GLESC_OK)
            core_err_set(NULL, st, "saving the KV cache of layer %lld: %s", (long long)(i / 2),
                         glesc_context_errmsg(ctx));
    }
    glesc_graph_destroy(g);
    return st;
}

/* ---- Saving ---- */

GLESC_API glesc_status glesc_session_state_save(glesc_session *s, const glesc_sampler *smp,
                                                const int32_t *tokens, size_t n_tokens, void *dst,
                                                size_t size, size_t *written)
{
    core_err_reset(NULL);
    if (written)
        *written = 0;
    if (!s || !dst || (n_tokens && !tokens))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_state_save: NULL session, tokens or buffer");
    if (n_tokens != (size_t)s->n_past)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_state_save: %zu tokens given, the session's cache "
                            "holds %d positions (one token each)",
                            n_tokens, (int)s->n_past);
    size_t need = glesc_session_state_size(s, smp, n_tokens);
    if (need == 0 || size < need)
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "glesc_session_state_save: the state takes %zu bytes, the buffer has "
                            "%zu",
                            need, size);
    const llm_hparams *hp = &s->m->hp;
    uint8_t *h = dst, *p = h + STATE_HEADER;
    memset(h, 0, STATE_HEADER);
    memcpy(h, STATE_MAGIC, 8);
    core_put_le32(h + 8, STATE_VERSION);
    core_put_le32(h + 12, GLESC_VERSION_NUMBER);
    core_put_le64(h + 16, s->m->hash.lo);
    core_put_le64(h + 24, s->m->hash.hi);
    memcpy(h + 32, hp->arch_name, CORE_MIN(strlen(hp->arch_name), (size_t)15));
    core_put_le32(h + 48, (uint32_t)hp->n_layer);
    core_put_le32(h + 52, (uint32_t)hp->n_head_kv);
    core_put_le32(h + 56, (uint32_t)hp->head_dim);
    core_put_le32(h + 60, (uint32_t)s->kv_type);
    core_put_le32(h + 64, (uint32_t)s->n_ctx);
    core_put_le32(h + 68, (uint32_t)s->n_past);
    core_put_le32(h + 72, (uint32_t)n_tokens);
    core_put_le32(h + 76, s->has_logits ? (uint32_t)hp->n_vocab : 0);
    core_put_le32(h + 80, smp && llm_sampler_has_grammar(smp) ? STATE_FLAG_GRAMMAR : 0);
    core_put_le32(h + 84, (uint32_t)sampler_bytes(smp));
    core_put_le64(h + 88, need - STATE_HEADER);
    for (size_t i = 0; i < n_tokens; i++, p += 4)
        core_put_le32(p, (uint32_t)tokens[i]);
    for (int64_t i = 0; s->has_logits && i < hp->n_vocab; i++, p += 4)
        core_put_le_f32(p, s->logits[i]);
    if (smp) {
        for (int i = 0; i < 4; i++, p += 8)
            core_put_le64(p, llm_sampler_rng(smp)->s[i]);
        int32_t n = llm_sampler_n_history(smp);
        core_put_le32(p, (uint32_t)n);
        p += 4;
        for (int32_t i = 0; i < n; i++, p += 4)
            core_put_le32(p, (uint32_t)llm_sampler_history_at(smp, i));
        if (llm_sampler_has_grammar(smp)) {
            size_t ng = llm_sampler_grammar_n(smp);
            const int32_t *gt = llm_sampler_grammar_tokens(smp);
            core_put_le32(p, (uint32_t)ng);
            p += 4;
            for (size_t i = 0; i < ng; i++, p += 4)
                core_put_le32(p, (uint32_t)gt[i]);
        }
    }
    glesc_status st = s->n_past ? cache_read(s, p) : GLESC_OK;
    if (st != GLESC_OK)
        return st;
    core_put_le64(h + 96, core_hash64_bytes(h + STATE_HEADER, need - STATE_HEADER));
    core_put_le64(h + 104, core_hash64_bytes(h, STATE_HEADER_SUMMED));
    if (written)
        *written = need;
    return GLESC_OK;
}

static glesc_status io_fail(const char *path, const char *what)
{
    return core_err_set(NULL, GLESC_ERROR_IO, "%s: %s: %s", path, what, strerror(errno));
}

GLESC_API glesc_status glesc_session_state_save_file(glesc_session *s, const glesc_sampler *smp,
                                                     const int32_t *tokens, size_t n_tokens,
                                                     const char *path)
{
    core_err_reset(NULL);
    if (!path)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_state_save_file: NULL path");
    size_t size = glesc_session_state_size(s, smp, n_tokens);
    uint8_t *buf = size ? core_malloc(size) : NULL;
    if (size && !buf)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: a state of %zu bytes", path,
                            size);
    glesc_status st = glesc_session_state_save(s, smp, tokens, n_tokens, buf, size, NULL);
    if (st != GLESC_OK) {
        core_free(buf);
        return st;
    }
    /* a unique name beside path, renamed over it once whole */
    size_t n = strlen(path) + 8;
    char *tmp = core_malloc(n);
    int fd = -1;
    bool created = false;
    if (!tmp) {
        st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s", path);
        goto done;
    }
    snprintf(tmp, n, "%s.XXXXXX", path);
    if ((fd = mkstemp(tmp)) < 0) {
        st = io_fail(path, "creating a temporary file beside it");
        goto done;
    }
    created = true;
    for (size_t off = 0; off < size;) {
        ssize_t w = write(fd, buf + off, size - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            st = io_fail(path, "writing");
            goto done;
        }
        off += (size_t)w;
    }
    if (close(fd) != 0) {
        fd = -1;
        st = io_fail(path, "writing");
        goto done;
    }
    fd = -1;
    if (rename(tmp, path) != 0)
        st = io_fail(path, "renaming the temporary file over it");
done:
    if (fd >= 0)
        close(fd);
    if (st != GLESC_OK && created)
        unlink(tmp);
    core_free(tmp);
    core_free(buf);
    return st;
}

/* ---- Loading: validation ---- */

/* What the header says, checked against the session. */
typedef struct state_info {
    const char *name; /* the file, or "state buffer" */
    int32_t n_past, n_tokens, n_vocab;
    size_t sampler, payload;
    bool grammar; /* the sampler's part ends in grammar tokens */
    uint64_t checksum;
} state_info;

static glesc_status bad(const state_info *si, const char *fmt, ...) CORE_PRINTF(2, 3);

static glesc_status bad(const state_info *si, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return core_err_set(NULL, GLESC_ERROR_FORMAT, "%s: %s", si->name, msg);
}

/* Whether LongRoPE's long factors rotate the keys of a session of n_ctx. */
static bool longrope_long(const glesc_model *m, int64_t n_ctx)
{
    return !m->rope_freqs && m->rope_long && n_ctx > m->hp.n_ctx_orig;
}

static const char *dtype_name(uint32_t t)
{
    const char *n = t < 1000 ? glesc_dtype_name((glesc_dtype)t) : NULL;
    return n ? n : "an unknown type";
}

/* Checks the header h (STATE_HEADER bytes of a state of total bytes)
 * against s. */
static glesc_status check_header(const glesc_session *s, const uint8_t *h, uint64_t total,
                                 state_info *si)
{
    const glesc_model *m = s->m;
    const llm_hparams *hp = &m->hp;
    if (total == 0 || memcmp(h, STATE_MAGIC, (size_t)CORE_MIN(total, (uint64_t)8)) != 0)
        return bad(si, "not a glesc session state (no magic \"%s\" at offset 0)", STATE_MAGIC);
    if (total < STATE_HEADER)
        return bad(si, "truncated: %llu bytes, shorter than the header (%u bytes)",
                   (unsigned long long)total, STATE_HEADER);
    uint32_t version = core_le32(h + 8);
    if (version != STATE_VERSION)
        return bad(si, "state format version %u (offset 8), this glesc reads version %u", version,
                   STATE_VERSION);
    if (core_le64(h + 104) != core_hash64_bytes(h, STATE_HEADER_SUMMED))
        return bad(si,
                   "the header's checksum (offset 104) does not match its bytes 0..%u: "
                   "corrupted",
                   STATE_HEADER_SUMMED - 1);
    uint32_t gv = core_le32(h + 12);
    if (gv != GLESC_VERSION_NUMBER)
        return bad(si,
                   "saved by glesc %u.%u.%u (offset 12), this is glesc %s: a state is only "
                   "loaded by the version that saved it",
                   gv / 10000, gv / 100 % 100, gv % 100, GLESC_VERSION_STRING);
    char arch[17] = {0};
    memcpy(arch, h + 32, 16);
    if (strcmp(arch, hp->arch_name) != 0)
        return bad(si, "saved for a %s model (field architecture, offset 32), the session's is %s",
                   arch, hp->arch_name);
    static const struct {
        const char *name;
        unsigned off;
    } dims[3] = {{"n_layer", 48}, {"n_head_kv", 52}, {"head_dim", 56}};
    const int64_t have[3] = {hp->n_layer, hp->n_head_kv, hp->head_dim};
    for (int i = 0; i < 3; i++)
        if (core_le32(h + dims[i].off) != (uint64_t)have[i])
            return bad(si, "saved for a model with %s %u (offset %u), the session's model has %lld",
                       dims[i].name, core_le32(h + dims[i].off), dims[i].off, (long long)have[i]);
    core_hash128 hash = {core_le64(h + 16), core_le64(h + 24)};
    if (!core_hash128_eq(hash, m->hash)) {
        char a[33], b[33];
        core_hash128_hex(hash, a);
        core_hash128_hex(m->hash, b);
        return bad(si,
                   "saved for another model (model hash %s at offset 16, the session's model "
                   "is %s)",
                   a, b);
    }
    uint32_t kv = core_le32(h + 60);
    if (kv != (uint32_t)s->kv_type)
        return bad(si, "KV cache type %s (offset 60), the session's is %s", dtype_name(kv),
                   glesc_dtype_name(s->kv_type));
    uint32_t n_ctx = core_le32(h + 64), n_past = core_le32(h + 68), n_tokens = core_le32(h + 72);
    if (n_ctx == 0 || n_ctx > INT32_MAX || n_past > n_ctx)
        return bad(si, "n_past %u (offset 68) and n_ctx %u (offset 64) are not a session's", n_past,
                   n_ctx);
    if (n_past > (uint32_t)s->n_ctx)
        return bad(si,
                   "holds %u positions (n_past, offset 68), more than the session's context "
                   "of %d",
                   n_past, (int)s->n_ctx);
    if (longrope_long(m, n_ctx) != longrope_long(m, s->n_ctx))
        return bad(si,
                   "saved by a session of context %u, whose keys took LongRoPE's %s factors; "
                   "this session's context of %d takes the %s ones (the model's original "
                   "context is %lld)",
                   n_ctx, longrope_long(m, n_ctx) ? "long" : "short", (int)s->n_ctx,
                   longrope_long(m, s->n_ctx) ? "long" : "short", (long long)hp->n_ctx_orig);
    if (n_tokens != n_past)
        return bad(si, "%u tokens (offset 72) for %u positions (offset 68): corrupted", n_tokens,
                   n_past);
    uint32_t n_vocab = core_le32(h + 76);
    if (n_vocab != 0 && n_vocab != (uint64_t)hp->n_vocab)
        return bad(si, "a logits row of %u (offset 76), the model's vocabulary has %lld", n_vocab,
                   (long long)hp->n_vocab);
    uint32_t flags = core_le32(h + 80);
    if (flags & ~STATE_FLAG_GRAMMAR)
        return bad(si, "flags 0x%x (offset 80): only bit 0 (grammar tokens) is defined", flags);
    uint32_t smp = core_le32(h + 84);
    if ((flags & STATE_FLAG_GRAMMAR) && smp < STATE_SAMPLER_FIXED + 4)
        return bad(si,
                   "flags 0x%x (offset 80) say grammar tokens follow, the sampler state has "
                   "%u bytes (offset 84)",
                   flags, smp);
    if (smp != 0 && (smp < STATE_SAMPLER_FIXED || (smp - STATE_SAMPLER_FIXED) % 4 ||
                     (smp - STATE_SAMPLER_FIXED) / 4 > INT32_MAX))
        return bad(si, "sampler state of %u bytes (offset 84) is not 36 + 4 per token", smp);
    size_t want = payload_bytes((size_t)hp->n_layer, row_bytes(s), n_past, n_tokens, n_vocab, smp);
    uint64_t payload = core_le64(h + 88);
    if (payload != want)
        return bad(si, "payload of %llu bytes (offset 88), its fields make %zu: corrupted",
                   (unsigned long long)payload, want);
    if (total - STATE_HEADER != payload)
        return bad(si, "%s: %llu bytes, the header makes %llu",
                   total - STATE_HEADER < payload ? "truncated" : "trailing bytes",
                   (unsigned long long)total, (unsigned long long)(STATE_HEADER + payload));
    si->n_past = (int32_t)n_past;
    si->n_tokens = (int32_t)n_tokens;
    si->n_vocab = (int32_t)n_vocab;
    si->sampler = smp;
    si->grammar = (flags & STATE_FLAG_GRAMMAR) != 0;
    si->payload = (size_t)payload;
    si->checksum = core_le64(h + 96);
    return GLESC_OK;
}

/* Checks the payload p (si->payload bytes after a checked header);
 * messages give offsets in the whole state. */
static glesc_status check_payload(const glesc_session *s, const uint8_t *p, const state_info *si)
{
    if (core_hash64_bytes(p, si->payload) != si->checksum)
        return bad(si,
                   "the payload's checksum (offset 96) does not match its %zu bytes: "
                   "corrupted",
                   si->payload);
    int64_t n_vocab = s->m->hp.n_vocab;
    size_t off = 0; /* into p */
    for (int32_t i = 0; i < si->n_tokens; i++, off += 4) {
        int32_t t = (int32_t)core_le32(p + off);
        if (t < 0 || t >= n_vocab)
            return bad(si, "token %d (offset %zu) is %d, outside the vocabulary (0..%lld)", (int)i,
                       STATE_HEADER + off, (int)t, (long long)(n_vocab - 1));
    }
    for (int32_t i = 0; i < si->n_vocab; i++, off += 4)
        if (!isfinite(core_le_f32(p + off)))
            return bad(si, "logit %d (offset %zu) is not finite", (int)i, STATE_HEADER + off);
    if (!si->sampler)
        return GLESC_OK;
    uint64_t any = 0;
    for (int i = 0; i < 4; i++)
        any |= core_le64(p + off + 8 * (size_t)i);
    if (!any)
        return bad(si, "the sampler's random state (offset %zu) is all zeros", STATE_HEADER + off);
    uint32_t n = core_le32(p + off + 32);
    size_t ids = (si->sampler - STATE_SAMPLER_FIXED) / 4; /* history and grammar ids, counts */
    if (si->grammar ? (size_t)n > ids - 1 : (size_t)n != ids)
        return bad(si, "the sampler's history count %u (offset %zu) does not match its %zu bytes",
                   n, STATE_HEADER + off + 32, si->sampler);
    off += STATE_SAMPLER_FIXED;
    uint32_t ng = 0;
    if (si->grammar && (ng = core_le32(p + off + 4 * (size_t)n)) != ids - 1 - n)
        return bad(si,
                   "the grammar's token count %u (offset %zu) does not match the sampler's %zu "
                   "bytes",
                   ng, STATE_HEADER + off + 4 * (size_t)n, si->sampler);
    for (uint32_t i = 0; i < n + (si->grammar ? 1 + ng : 0); i++, off += 4) {
        int32_t t = (int32_t)core_le32(p + off);
        if (i != n && (t < 0 || t >= n_vocab))
            return bad(si, "sampler %s token %u (offset %zu) is %d, outside the vocabulary",
                       i < n ? "history" : "grammar", i < n ? i : i - n - 1, STATE_HEADER + off,
                       (int)t);
    }
    return GLESC_OK;
}

/* ---- Loading: applying a checked state ---- */

/* s with no positions, about to have its rows written (cache_fill):
 * nothing in flight reads them any more, no step is recorded ahead. */
static void empty_for_fill(glesc_session *s)
{
    llm_greedy_settle(s);
    s->pre_y = NULL;
    s->has_logits = false;
    s->n_past = 0;
}

static glesc_status apply(glesc_session *s, glesc_sampler *smp, const uint8_t *p,
                          const state_info *si, int32_t *tokens_out, size_t capacity,
                          size_t *n_tokens)
{
    if (tokens_out && (size_t)si->n_tokens > capacity)
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "%s: the state holds %d tokens, tokens_out has room for %zu", si->name,
                            (int)si->n_tokens, capacity);
    const uint8_t *smp_part = p + 4 * ((size_t)si->n_tokens + (size_t)si->n_vocab);
    int32_t *gtoks = NULL;
    size_t ng = 0;
    if (smp && si->sampler && si->grammar && llm_sampler_has_grammar(smp)) {
        size_t at = STATE_SAMPLER_FIXED + 4 * (size_t)core_le32(smp_part + 32);
        ng = core_le32(smp_part + at);
        if (!(gtoks = core_calloc(ng ? ng : 1, sizeof *gtoks)))
            return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: grammar tokens", si->name);
        for (size_t i = 0; i < ng; i++)
            gtoks[i] = (int32_t)core_le32(smp_part + at + 4 + 4 * i);
        if (!llm_sampler_grammar_replays(smp, gtoks, ng)) {
            core_free(gtoks);
            return core_err_set(NULL, GLESC_ERROR_STATE,
                                "%s: the sampler's grammar does not accept the %zu grammar tokens "
                                "saved (another grammar?)",
                                si->name, ng);
        }
    }
    empty_for_fill(s);
    for (int32_t i = 0; tokens_out && i < si->n_tokens; i++)
        tokens_out[i] = (int32_t)core_le32(p + 4 * (size_t)i);
    if (n_tokens)
        *n_tokens = (size_t)si->n_tokens;
    p += 4 * (size_t)si->n_tokens;
    const uint8_t *logits = si->n_vocab ? p : NULL;
    p += 4 * (size_t)si->n_vocab;
    const uint8_t *sampler = si->sampler ? p : NULL;
    p += si->sampler;
    glesc_status st = si->n_past ? cache_fill(s, NULL, p, si->n_past) : GLESC_OK;
    if (st != GLESC_OK) {
        core_free(gtoks);
        core_err_prefix(NULL, "%s", si->name);
        return st;
    }
    s->n_past = si->n_past;
    for (int32_t i = 0; logits && i < si->n_vocab; i++)
        s->logits[i] = core_le_f32(logits + 4 * (size_t)i);
    s->has_logits = logits != NULL;
    if (smp && sampler) {
        core_rng rng;
        for (int i = 0; i < 4; i++)
            rng.s[i] = core_le64(sampler + 8 * (size_t)i);
        llm_sampler_restore(smp, &rng);
        uint32_t n = core_le32(sampler + 32);
        for (uint32_t i = 0; i < n; i++)
            llm_sampler_record(smp, (int32_t)core_le32(sampler + STATE_SAMPLER_FIXED + 4 * i));
        /* the grammar as saved; without its tokens, at its start */
        llm_sampler_grammar_replay(smp, gtoks, ng);
    }
    core_free(gtoks);
    return GLESC_OK;
}

GLESC_API glesc_status glesc_session_state_load(glesc_session *s, glesc_sampler *smp,
                                                const void *data, size_t size, int32_t *tokens_out,
                                                size_t capacity, size_t *n_tokens)
{
    core_err_reset(NULL);
    if (n_tokens)
        *n_tokens = 0;
    if (!s || !data)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_state_load: NULL session or data");
    state_info si = {.name = "state buffer"};
    uint8_t head[STATE_HEADER] = {0};
    memcpy(head, data, CORE_MIN(size, (size_t)STATE_HEADER));
    glesc_status st = check_header(s, head, size, &si);
    if (st == GLESC_OK)
        st = check_payload(s, (const uint8_t *)data + STATE_HEADER, &si);
    if (st == GLESC_OK)
        st = apply(s, smp, (const uint8_t *)data + STATE_HEADER, &si, tokens_out, capacity,
                   n_tokens);
    return st;
}

/* Reads n bytes at offset of fd into dst: false (errno set, 0 at the end
 * of the file) when fewer came. */
static bool read_at(int fd, void *dst, size_t n, uint64_t offset)
{
    while (n > 0) {
        ssize_t r = pread(fd, dst, n, (off_t)offset);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return false;
        }
        dst = (char *)dst + r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return true;
}

GLESC_API glesc_status glesc_session_state_load_file(glesc_session *s, glesc_sampler *smp,
                                                     const char *path, int32_t *tokens_out,
                                                     size_t capacity, size_t *n_tokens)
{
    core_err_reset(NULL);
    if (n_tokens)
        *n_tokens = 0;
    if (!s || !path)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_state_load_file: NULL session or path");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return io_fail(path, "opening");
    state_info si = {.name = path};
    uint8_t head[STATE_HEADER] = {0}, *payload = NULL;
    glesc_status st = GLESC_OK;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = io_fail(path, "stat");
    } else if (!S_ISREG(sb.st_mode)) {
        st = core_err_set(NULL, GLESC_ERROR_IO, "%s: not a regular file", path);
    } else if (!read_at(fd, head, CORE_MIN((uint64_t)sb.st_size, (uint64_t)STATE_HEADER), 0)) {
        st = io_fail(path, "reading the header");
    } else if ((st = check_header(s, head, (uint64_t)sb.st_size, &si)) == GLESC_OK) {
        /* the payload's size was checked against the session's own sizes */
        if (!(payload = core_malloc(si.payload ? si.payload : 1)))
            st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: a payload of %zu bytes", path,
                              si.payload);
        else if (!read_at(fd, payload, si.payload, STATE_HEADER))
            st = errno ? io_fail(path, "reading the payload")
                       : bad(&si, "truncated while it was read");
        else if ((st = check_payload(s, payload, &si)) == GLESC_OK)
            st = apply(s, smp, payload, &si, tokens_out, capacity, n_tokens);
    }
    close(fd);
    core_free(payload);
    return st;
}

/* ---- Copying ---- */

GLESC_API glesc_status glesc_session_copy(glesc_session *dst, glesc_session *src)
{
    core_err_reset(NULL);
    if (!dst || !src)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_session_copy: NULL session");
    if (dst == src)
        return GLESC_OK;
    if (dst->m != src->m)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_copy: the sessions are of two models");
    if (dst->kv_type != src->kv_type)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_copy: KV cache types %s (dst) and %s (src) differ",
                            glesc_dtype_name(dst->kv_type), glesc_dtype_name(src->kv_type));
    if (src->n_past > dst->n_ctx ||
        longrope_long(dst->m, dst->n_ctx) != longrope_long(src->m, src->n_ctx))
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "glesc_session_copy: src's %d positions (context %d) do not fit dst's "
                            "context of %d%s",
                            (int)src->n_past, (int)src->n_ctx, (int)dst->n_ctx,
                            src->n_past > dst->n_ctx ? "" : " (their LongRoPE factors differ)");
    empty_for_fill(dst);
    glesc_status st = src->n_past ? cache_fill(dst, src, NULL, src->n_past) : GLESC_OK;
    if (st != GLESC_OK) {
        core_err_prefix(NULL, "glesc_session_copy");
        return st;
    }
    dst->n_past = src->n_past;
    dst->has_logits = src->has_logits;
    if (src->has_logits)
        memcpy(dst->logits, src->logits, (size_t)src->m->hp.n_vocab * sizeof *dst->logits);
    return GLESC_OK;
}
