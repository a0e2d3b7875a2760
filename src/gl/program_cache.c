/*
 * program_cache.c — compute programs, compiled once per process and, through
 * glGetProgramBinary/glProgramBinary, once per machine.
 *
 * Memory: the linked programs in one array, found through a core_map keyed
 * by the XXH3-128 of the source (its low word in the map, both words
 * compared). Disk: one file per program under the cache directory, named by
 * hash(source ‖ GL_VENDOR ‖ GL_RENDERER ‖ GL_VERSION ‖ glesc version ‖ format
 * version), so a driver update or a glesc update never loads a stale binary.
 * Entry layout (little endian):
 *
 *   offset 0   8 bytes  magic "GLESCPB\0"
 *          8   u32      entry format version (CACHE_FORMAT_VERSION)
 *         12   u32      binary format (GLenum from glGetProgramBinary)
 *         16   u64      blob length
 *         24   u64      XXH3-64 of the blob
 *         32   blob
 *
 * Entries are written to a temporary file and renamed, so a reader never sees
 * half a file. A short, corrupt or driver-rejected entry (GL_LINK_STATUS false
 * after glProgramBinary) is deleted and the program compiled again. Nothing on
 * the disk path is fatal: a read-only or missing directory only costs compiles.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gl/gl.h"
#include "glesc_config.h"

#define CACHE_FORMAT_VERSION 1u
#define ENTRY_HEADER 32u
static const char entry_magic[8] = {'G', 'L', 'E', 'S', 'C', 'P', 'B', '\0'};

struct gl_program_cache {
    gl_program **progs; /* every linked program; records never move */
    uint32_t n_progs, cap_progs;
    core_map map;      /* key.lo → index in progs */
    char *dir;         /* NULL: no disk cache */
    bool disk_ok;      /* the driver offers binary formats */
    bool warned_write; /* logged one failed write already */
    uint64_t compiled, memory_hits, disk_hits, disk_rejects, disk_writes;
};

/* ---- little-endian helpers ---- */
static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---- the in-memory map ---- */

static gl_program *map_find(const gl_program_cache *c, core_hash128 k)
{
    core_map_probe probe = core_map_probe_start(&c->map, k.lo);
    uint32_t i;
    while (core_map_probe_next(&probe, &i))
        if (core_hash128_eq(c->progs[i]->key, k))
            return c->progs[i];
    return NULL;
}

static bool map_insert(gl_program_cache *c, gl_program *p)
{
    if (c->n_progs == c->cap_progs) {
        uint32_t cap = c->cap_progs ? c->cap_progs * 2 : 64;
        gl_program **v = core_realloc(c->progs, (size_t)cap * sizeof *v);
        if (!v)
            return false;
        c->progs = v;
        c->cap_progs = cap;
    }
    if (!core_map_add(&c->map, p->key.lo, c->n_progs))
        return false;
    c->progs[c->n_progs++] = p;
    return true;
}

/* ---- life cycle ---- */

static void mkdir_p(const char *dir)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    mkdir(buf, 0755);
}

glesc_status gl_program_cache_create(glesc_context *ctx, const char *dir)
{
    gl_program_cache *c = core_calloc(1, sizeof *c);
    if (!c)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "program cache");
    core_map_init(&c->map);
    c->disk_ok = ctx->caps.num_program_binary_formats > 0;
    if (dir && c->disk_ok) {
        c->dir = core_strdup(dir);
        mkdir_p(dir);
    }
    ctx->programs = c;
    return GLESC_OK;
}

void gl_program_cache_drop_memory(glesc_context *ctx)
{
    gl_program_cache *c = ctx->programs;
    for (uint32_t i = 0; i < c->n_progs; i++) {
        glDeleteProgram(c->progs[i]->id);
        core_free(c->progs[i]);
    }
    c->n_progs = 0;
    core_map_clear(&c->map);
}

void gl_program_cache_destroy(glesc_context *ctx)
{
    gl_program_cache *c = ctx->programs;
    if (!c)
        return;
    gl_program_cache_drop_memory(ctx);
    core_free(c->progs);
    core_map_free(&c->map);
    core_free(c->dir);
    core_free(c);
    ctx->programs = NULL;
}

/* ---- disk entries ---- */

static core_hash128 disk_key(glesc_context *ctx, const char *source)
{
    core_hasher *h = core_hasher_create();
    if (!h) /* fall back to the source hash alone: still correct, just less strict */
        return core_hash128_bytes(source, strlen(source));
    const char *parts[] = {source, ctx->caps.vendor, ctx->caps.renderer, ctx->caps.version,
                           GLESC_VERSION};
    for (size_t i = 0; i < CORE_ARRAY_LEN(parts); i++)
        core_hasher_update(h, parts[i], strlen(parts[i]) + 1); /* NUL separates the parts */
    unsigned char fv[4];
    put_u32(fv, CACHE_FORMAT_VERSION);
    core_hasher_update(h, fv, 4);
    core_hash128 k = core_hasher_digest(h);
    core_hasher_destroy(h);
    return k;
}

char *gl_program_cache_entry_path(glesc_context *ctx, const char *source)
{
    gl_program_cache *c = ctx->programs;
    if (!c->dir)
        return NULL;
    char hex[33];
    core_hash128_hex(disk_key(ctx, source), hex);
    sbuf b;
    sbuf_init(&b);
    sbuf_appendf(&b, "%s/%s.bin", c->dir, hex);
    return sbuf_take(&b);
}

/* Tries the disk entry; returns a linked program or 0. Bad entries are
 * deleted and counted as rejects. */
static GLuint disk_load(glesc_context *ctx, const char *path)
{
    gl_program_cache *c = ctx->programs;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    unsigned char hdr[ENTRY_HEADER];
    unsigned char *blob = NULL;
    GLuint prog = 0;
    const char *why = NULL;
    long fsize = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        fsize = ftell(f);
    rewind(f);
    if (fsize < (long)ENTRY_HEADER || fread(hdr, 1, ENTRY_HEADER, f) != ENTRY_HEADER) {
        why = "shorter than its header";
        goto reject;
    }
    if (memcmp(hdr, entry_magic, 8) != 0) {
        why = "bad magic";
        goto reject;
    }
    if (get_u32(hdr + 8) != CACHE_FORMAT_VERSION) {
        why = "other entry format version";
        goto reject;
    }
    GLenum format = get_u32(hdr + 12);
    uint64_t len = get_u64(hdr + 16), sum = get_u64(hdr + 24);
    if (len != (uint64_t)fsize - ENTRY_HEADER || len == 0 || len > (1u << 30)) {
        why = "length does not match the file";
        goto reject;
    }
    blob = core_malloc((size_t)len);
    if (!blob) {
        fclose(f);
        return 0; /* not the entry's fault */
    }
    if (fread(blob, 1, (size_t)len, f) != len) {
        why = "short read";
        goto reject;
    }
    if (core_hash64_bytes(blob, (size_t)len) != sum) {
        why = "checksum mismatch";
        goto reject;
    }
    prog = glCreateProgram();
    glProgramBinary(prog, format, blob, (GLsizei)len);
    GLint ok = GL_FALSE;
    glGetProgramiv(prog, GL_LINK_STATUS, &ok);
    while (glGetError() != GL_NO_ERROR) /* a rejected format raises GL_INVALID_ENUM */
        ok = GL_FALSE;
    if (!ok) {
        glDeleteProgram(prog);
        prog = 0;
        why = "the driver rejected the binary";
        goto reject;
    }
    fclose(f);
    core_free(blob);
    c->disk_hits++;
    return prog;

reject:
    fclose(f);
    core_free(blob);
    core_log(CORE_LOG_INFO, "program cache: %s: %s; deleted, recompiling", path, why);
    unlink(path);
    c->disk_rejects++;
    return 0;
}

static void disk_store(glesc_context *ctx, GLuint prog, const char *path)
{
    gl_program_cache *c = ctx->programs;
    GLint len = 0;
    glGetProgramiv(prog, GL_PROGRAM_BINARY_LENGTH, &len);
    if (len <= 0)
        return;
    unsigned char *buf = core_malloc(ENTRY_HEADER + (size_t)len);
    if (!buf)
        return;
    GLenum format = 0;
    GLsizei got = 0;
    glGetProgramBinary(prog, len, &got, &format, buf + ENTRY_HEADER);
    if (glGetError() != GL_NO_ERROR || got <= 0) {
        core_free(buf);
        return;
    }
    memcpy(buf, entry_magic, 8);
    put_u32(buf + 8, CACHE_FORMAT_VERSION);
    put_u32(buf + 12, format);
    put_u64(buf + 16, (uint64_t)got);
    put_u64(buf + 24, core_hash64_bytes(buf + ENTRY_HEADER, (size_t)got));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(buf, 1, ENTRY_HEADER + (size_t)got, f) == ENTRY_HEADER + (size_t)got;
    if (f && fclose(f) != 0)
        ok = false;
    if (ok && rename(tmp, path) != 0)
        ok = false;
    if (!ok) {
        unlink(tmp);
        if (!c->warned_write) {
            core_log(CORE_LOG_INFO, "program cache: cannot write %s (%s); continuing without", path,
                     strerror(errno));
            c->warned_write = true;
        }
    } else {
        c->disk_writes++;
    }
    core_free(buf);
}

/* ---- compiling ---- */

/* The log, then the numbered source lines around the first line it names
 * ("0:12(5)" from Mesa, "0(12)" from NVIDIA), or the whole source if none. */
static void format_compile_error(sbuf *b, const char *what, const char *log, const char *source)
{
    sbuf_appendf(b, "%s failed:\n%s\n", what, log && *log ? log : "(empty info log)");
    long line = -1;
    const char *p = log ? strstr(log, "0:") : NULL;
    if (p)
        line = strtol(p + 2, NULL, 10);
    else if (log && (p = strstr(log, "0(")))
        line = strtol(p + 2, NULL, 10);
    long lo = line > 0 ? line - 4 : 1, hi = line > 0 ? line + 4 : 1l << 30;
    long n = 1;
    sbuf_append(b, "--- source ---\n");
    for (const char *s = source; *s; n++) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (n >= lo && n <= hi)
            sbuf_appendf(b, "%s%4ld | %.*s\n", n == line ? ">" : " ", n, (int)len, s);
        s += len + (e ? 1 : 0);
    }
}

static GLuint start_compile(const char *source)
{
    GLuint sh = glCreateShader(GL_COMPUTE_SHADER);
    glShaderSource(sh, 1, &source, NULL);
    glCompileShader(sh);
    GLuint prog = glCreateProgram();
    glAttachShader(prog, sh);
    glProgramParameteri(prog, GL_PROGRAM_BINARY_RETRIEVABLE_HINT, GL_TRUE);
    glLinkProgram(prog);
    return prog;
}

/* Waits for prog's link; on failure sets the error with the logs. */
static glesc_status finish_compile(glesc_context *ctx, GLuint prog, const char *source)
{
    GLint ok = GL_FALSE;
    glGetProgramiv(prog, GL_LINK_STATUS, &ok);
    GLuint sh = 0;
    GLsizei nsh = 0;
    glGetAttachedShaders(prog, 1, &nsh, &sh);
    glesc_status st = GLESC_OK;
    if (!ok) {
        GLint cok = GL_TRUE, len = 0;
        char *log = NULL;
        if (nsh)
            glGetShaderiv(sh, GL_COMPILE_STATUS, &cok);
        if (!cok)
            glGetShaderiv(sh, GL_INFO_LOG_LENGTH, &len);
        else
            glGetProgramiv(prog, GL_INFO_LOG_LENGTH, &len);
        log = core_malloc((size_t)len + 1);
        if (log) {
            log[0] = '\0';
            if (!cok)
                glGetShaderInfoLog(sh, len + 1, NULL, log);
            else
                glGetProgramInfoLog(prog, len + 1, NULL, log);
        }
        sbuf b;
        sbuf_init(&b);
        format_compile_error(&b, cok ? "compute program link" : "compute shader compilation", log,
                             source);
        st = core_err_set(&ctx->err, GLESC_ERROR_COMPILE, "%s",
                          sbuf_str(&b) ? sbuf_str(&b) : "shader compilation failed");
        sbuf_free(&b);
        core_free(log);
    }
    if (nsh) {
        glDetachShader(prog, sh);
        glDeleteShader(sh);
    }
    return st;
}

static gl_program *make_program(glesc_context *ctx, GLuint id, core_hash128 key)
{
    gl_program *p = core_calloc(1, sizeof *p);
    if (!p) {
        glDeleteProgram(id);
        core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "program record");
        return NULL;
    }
    p->id = id;
    p->key = key;
    glGetProgramiv(id, GL_COMPUTE_WORK_GROUP_SIZE, p->local_size);
    if (!map_insert(ctx->programs, p)) {
        glDeleteProgram(id);
        core_free(p);
        core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "program cache map");
        return NULL;
    }
    return p;
}

glesc_status gl_program_get_batch(glesc_context *ctx, const char *const *sources, int n,
                                  const gl_program **out)
{
    gl_program_cache *c = ctx->programs;
    GLuint *pending = core_calloc((size_t)(n > 0 ? n : 1), sizeof *pending);
    char **paths = core_calloc((size_t)(n > 0 ? n : 1), sizeof *paths);
    glesc_status st = GLESC_OK;
    if (!pending || !paths) {
        st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "program batch");
        goto done;
    }
    /* Pass 1: memory and disk hits; start compiling every miss. */
    for (int i = 0; i < n; i++) {
        core_hash128 key = core_hash128_bytes(sources[i], strlen(sources[i]));
        out[i] = map_find(c, key);
        if (out[i]) {
            c->memory_hits++;
            continue;
        }
        /* The same source twice in one batch: compile it once. */
        bool dup = false;
        for (int j = 0; j < i && !dup; j++)
            dup = pending[j] && !strcmp(sources[j], sources[i]);
        if (dup)
            continue;
        if (c->dir) {
            paths[i] = gl_program_cache_entry_path(ctx, sources[i]);
            GLuint id = paths[i] ? disk_load(ctx, paths[i]) : 0;
            if (id) {
                if (!(out[i] = make_program(ctx, id, key))) {
                    st = ctx->err.status;
                    goto done;
                }
                continue;
            }
        }
        pending[i] = start_compile(sources[i]);
    }
    /* Pass 2: collect the compiles (they ran concurrently where the driver
     * has GL_KHR_parallel_shader_compile). */
    for (int i = 0; i < n; i++) {
        if (!pending[i])
            continue;
        GLuint id = pending[i];
        pending[i] = 0;
        if ((st = finish_compile(ctx, id, sources[i])) != GLESC_OK) {
            glDeleteProgram(id);
            goto done;
        }
        c->compiled++;
        if (paths[i])
            disk_store(ctx, id, paths[i]);
        core_hash128 key = core_hash128_bytes(sources[i], strlen(sources[i]));
        if (!(out[i] = make_program(ctx, id, key))) {
            st = ctx->err.status;
            goto done;
        }
    }
    /* Duplicates within the batch. */
    for (int i = 0; i < n; i++)
        if (!out[i])
            out[i] = map_find(c, core_hash128_bytes(sources[i], strlen(sources[i])));
    st = gl_check(ctx, "program cache");

done:
    if (pending)
        for (int i = 0; i < n; i++)
            if (pending[i])
                glDeleteProgram(pending[i]);
    if (paths)
        for (int i = 0; i < n; i++)
            core_free(paths[i]);
    core_free(pending);
    core_free(paths);
    return st;
}

glesc_status gl_program_get(glesc_context *ctx, const char *source, const gl_program **out)
{
    return gl_program_get_batch(ctx, &source, 1, out);
}

void gl_program_cache_stats(const glesc_context *ctx, glesc_stats *st)
{
    const gl_program_cache *c = ctx->programs;
    st->programs_compiled = c->compiled;
    st->program_memory_hits = c->memory_hits;
    st->program_disk_hits = c->disk_hits;
    st->program_disk_rejects = c->disk_rejects;
    st->program_disk_writes = c->disk_writes;
}

void gl_program_cache_reset_stats(glesc_context *ctx)
{
    gl_program_cache *c = ctx->programs;
    c->compiled = c->memory_hits = c->disk_hits = c->disk_rejects = c->disk_writes = 0;
}
