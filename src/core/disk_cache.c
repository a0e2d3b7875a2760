/*
 * disk_cache.c — the keyed blob cache of disk_cache.h, after Mesa's disk
 * cache. One flat directory; an entry is the file "<XXH3-128 of key>.entry"
 * (32 hex digits), laid out little endian:
 *
 *   offset 0   8 bytes  magic "GLESCDC\0"
 *          8   u64      XXH3-64 of every byte from offset 16 to the end
 *         16   u32      entry format version (ENTRY_VERSION)
 *         20   u32      0 (reserved)
 *         24   u64      key length
 *         32   u64      blob length
 *         40   key, then blob
 *
 * Safety in a shared or hostile directory: every file is opened relative to
 * a descriptor of the directory with O_NOFOLLOW (a symbolic link at an
 * entry's name is refused, never followed) and O_NONBLOCK (a FIFO there
 * cannot block the open), and anything but a regular file is refused.
 * Temporary files get a name unique to the process, the call and a random
 * salt ("<hex>.tmp.<pid>.<seq>.<salt>"), are created with
 * O_CREAT|O_EXCL|O_NOFOLLOW (a planted file or link makes the create fail
 * and the next name is tried) and are renamed over the entry, which replaces
 * a planted link itself rather than its target.
 *
 * Size: the bytes in the directory are counted by a scan at the first put
 * and then kept up to date by this cache's own puts; when the count passes
 * the cap, a fresh scan (which also sees other processes' entries) deletes
 * the entries with the oldest modification time until 7/8 of the cap is
 * left, so a full cache does not scan on every put. A hit sets the entry's
 * modification time to now (futimens), as Mesa does, which makes the order
 * least-recently-used. Other processes' puts are seen at the next scan, so
 * processes sharing a directory can overshoot the cap by their puts since.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/disk_cache.h"

#define ENTRY_VERSION 1u
#define ENTRY_HEADER 40u
#define ENTRY_SUFFIX ".entry"
#define TEMP_INFIX ".tmp."
#define TEMP_TRIES 32
/* A temporary file this old was left by a process that died mid-write. */
#define STALE_TEMP_SECONDS 600
static const char entry_magic[8] = {'G', 'L', 'E', 'S', 'C', 'D', 'C', '\0'};

struct core_disk_cache {
    char *dir;
    int dirfd; /* the directory, opened once: every file is reached relative to it */
    uint64_t max_bytes;
    uint64_t salt;        /* makes temporary names unpredictable */
    pthread_mutex_t lock; /* guards what follows */
    bool scanned;         /* total holds a scan's figure plus our puts since */
    uint64_t total;       /* bytes of entries in the directory */
    core_disk_cache_stats stats;
};

/* Temporary-name sequence shared by every cache of the process, so two
 * caches on one directory never pick the same name. */
static atomic_uint_fast64_t temp_seq;

/* ---- one warning per process and directory ---- */

typedef struct warned_dir {
    struct warned_dir *next;
    char path[];
} warned_dir;

static pthread_mutex_t warned_lock = PTHREAD_MUTEX_INITIALIZER;
static warned_dir *warned_dirs; /* libc heap: lives as long as the process */

/* Logs at WARN the first time for dir in this process, at INFO after. */
static void warn_once(const char *dir, const char *fmt, ...) CORE_PRINTF(2, 3);
static void warn_once(const char *dir, const char *fmt, ...)
{
    bool first = true;
    pthread_mutex_lock(&warned_lock);
    for (warned_dir *w = warned_dirs; w && first; w = w->next)
        first = strcmp(w->path, dir) != 0;
    if (first) {
        size_t n = strlen(dir) + 1;
        warned_dir *w = malloc(sizeof *w + n);
        if (w) {
            memcpy(w->path, dir, n);
            w->next = warned_dirs;
            warned_dirs = w;
        }
    }
    pthread_mutex_unlock(&warned_lock);
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    core_log(first ? CORE_LOG_WARN : CORE_LOG_INFO, "cache directory %s: %s", dir, msg);
}

/* ---- names ---- */

static void entry_name(const void *key, size_t key_len, char out[64])
{
    char hex[33];
    core_hash128_hex(core_hash128_bytes(key, key_len), hex);
    snprintf(out, 64, "%s" ENTRY_SUFFIX, hex);
}

static void temp_name(const core_disk_cache *c, const void *key, size_t key_len, uint64_t seq,
                      char out[128])
{
    char hex[33];
    core_hash128_hex(core_hash128_bytes(key, key_len), hex);
    uint64_t mix[3] = {(uint64_t)getpid(), seq, c->salt};
    snprintf(out, 128, "%s" TEMP_INFIX "%ld.%llu.%016llx", hex, (long)getpid(),
             (unsigned long long)seq, (unsigned long long)core_hash64_bytes(mix, sizeof mix));
}

static bool is_hex32(const char *s)
{
    for (int i = 0; i < 32; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* ---- opening ---- */

/* Where the directory comes from: base + suffix; base NULL when off. */
static const char *dir_source(const char *dir, const char **suffix)
{
    const char *base = dir && *dir ? dir : core_env("GLESC_CACHE_DIR");
    *suffix = "";
    if (!base && (base = core_env("XDG_CACHE_HOME")))
        *suffix = "/glesc";
    if (!base && (base = core_env("HOME")))
        *suffix = "/.cache/glesc";
    return base && strcmp(base, "off") != 0 ? base : NULL;
}

char *core_disk_cache_resolve_dir(const char *dir)
{
    const char *suffix, *base = dir_source(dir, &suffix);
    if (!base)
        return NULL;
    sbuf b;
    sbuf_init(&b);
    sbuf_appendf(&b, "%s%s", base, suffix);
    return sbuf_take(&b);
}

/* Creates dir and its missing parents with mode 0700. 0, or the errno of the
 * first component that could not be made. */
static int mkdir_p(char *dir)
{
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        int e = mkdir(dir, 0700) == 0 || errno == EEXIST ? 0 : errno;
        struct stat st; /* some systems say EROFS or EACCES before EEXIST */
        if (e && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
            e = 0;
        *p = saved;
        if (e)
            return e;
        if (!saved)
            return 0;
    }
}

/* GLESC_CACHE_MAX_SIZE: bytes, or a number with a K, M or G suffix (KiB, MiB,
 * GiB); 0 when unset or malformed (warned). */
static uint64_t env_max_size(void)
{
    const char *v = core_env("GLESC_CACHE_MAX_SIZE");
    if (!v)
        return 0;
    uint64_t n;
    if (!core_parse_size(v, &n)) {
        core_log(CORE_LOG_WARN,
                 "GLESC_CACHE_MAX_SIZE=%s is not a size (bytes, or a number with K, M or G); "
                 "using %llu MiB",
                 v, (unsigned long long)(CORE_DISK_CACHE_DEFAULT_MAX >> 20));
        return 0;
    }
    return n;
}

glesc_status core_disk_cache_open(const char *dir, uint64_t max_bytes, core_err *err,
                                  core_disk_cache **out)
{
    *out = NULL;
    const char *suffix;
    if (!dir_source(dir, &suffix))
        return GLESC_OK; /* "off", or no home to put it in */
    glesc_status st = GLESC_OK;
    char *path = core_disk_cache_resolve_dir(dir);
    core_disk_cache *c = path ? core_calloc(1, sizeof *c) : NULL;
    if (!c) {
        st = core_err_set(err, GLESC_ERROR_OUT_OF_MEMORY, "disk cache %s", path ? path : "");
        goto fail;
    }
    c->dirfd = -1;
    int e = mkdir_p(path);
    if (!e) {
        c->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (c->dirfd < 0)
            e = errno;
        else if (faccessat(c->dirfd, ".", W_OK | X_OK, AT_EACCESS) != 0)
            e = errno;
    }
    if (e) {
        warn_once(path, "%s; caching to disk is off", strerror(e));
        goto fail; /* off, which is no error */
    }
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        st = core_err_set(err, GLESC_ERROR_OUT_OF_MEMORY, "disk cache %s: mutex", path);
        goto fail;
    }
    c->dir = path;
    if (!max_bytes)
        max_bytes = env_max_size();
    c->max_bytes = max_bytes ? max_bytes : CORE_DISK_CACHE_DEFAULT_MAX;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t mix[3] = {core_time_ns() ^ ((uint64_t)ts.tv_nsec << 20), (uint64_t)(uintptr_t)c,
                       (uint64_t)getpid()};
    c->salt = core_hash64_bytes(mix, sizeof mix);
    *out = c;
    return GLESC_OK;

fail:
    if (c && c->dirfd >= 0)
        close(c->dirfd);
    core_free(c);
    core_free(path);
    return st;
}

void core_disk_cache_close(core_disk_cache *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    close(c->dirfd);
    core_free(c->dir);
    core_free(c);
}

const char *core_disk_cache_dir(const core_disk_cache *c)
{
    return c ? c->dir : NULL;
}

uint64_t core_disk_cache_max_bytes(const core_disk_cache *c)
{
    return c ? c->max_bytes : 0;
}

char *core_disk_cache_entry_path(const core_disk_cache *c, const void *key, size_t key_len)
{
    char name[64];
    entry_name(key, key_len, name);
    sbuf b;
    sbuf_init(&b);
    sbuf_appendf(&b, "%s/%s", c->dir, name);
    return sbuf_take(&b);
}

char *core_disk_cache_next_temp_name(const core_disk_cache *c, const void *key, size_t key_len)
{
    char name[128];
    temp_name(c, key, key_len, (uint64_t)atomic_load(&temp_seq), name);
    return core_strdup(name);
}

void core_disk_cache_get_stats(core_disk_cache *c, core_disk_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
}

static void count(core_disk_cache *c, uint64_t *counter)
{
    pthread_mutex_lock(&c->lock);
    (*counter)++;
    pthread_mutex_unlock(&c->lock);
}

/* ---- reading ---- */

static bool read_all(int fd, void *buf, size_t n, off_t off)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return true;
}

/* Deletes name when it is still the file st describes (another process may
 * have put a good entry there since it was read). */
static void delete_if_same(core_disk_cache *c, const char *name, const struct stat *st)
{
    struct stat now;
    if (fstatat(c->dirfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    if (st && (now.st_dev != st->st_dev || now.st_ino != st->st_ino))
        return;
    if (unlinkat(c->dirfd, name, 0) == 0 && S_ISREG(now.st_mode)) {
        pthread_mutex_lock(&c->lock);
        c->total -= CORE_MIN(c->total, (uint64_t)now.st_size);
        pthread_mutex_unlock(&c->lock);
    }
}

static void set_times_now(int fd)
{
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[1] = ts[0];
    futimens(fd, ts);
}

bool core_disk_cache_get(core_disk_cache *c, const void *key, size_t key_len, void **blob,
                         size_t *len)
{
    *blob = NULL;
    *len = 0;
    if (!c)
        return false;
    char name[64];
    entry_name(key, key_len, name);
    int fd = openat(c->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ELOOP) { /* a symbolic link at the entry's name */
            core_log(CORE_LOG_INFO, "disk cache: %s/%s is a symbolic link; deleted", c->dir, name);
            delete_if_same(c, name, NULL);
        } else if (errno != ENOENT) {
            core_log(CORE_LOG_INFO, "disk cache: %s/%s: %s", c->dir, name, strerror(errno));
        }
        count(c, &c->stats.misses);
        return false;
    }
    const char *why = NULL;
    unsigned char hdr[ENTRY_HEADER];
    unsigned char *data = NULL;
    bool ok = false;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        core_log(CORE_LOG_INFO, "disk cache: %s/%s: %s", c->dir, name, strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        why = "not a regular file";
        goto reject;
    }
    if ((uint64_t)st.st_size > c->max_bytes) { /* not read: maybe a larger cache's entry */
        core_log(CORE_LOG_INFO, "disk cache: %s/%s: %llu bytes, larger than the cap; skipped",
                 c->dir, name, (unsigned long long)st.st_size);
        goto done;
    }
    if (st.st_size < (off_t)ENTRY_HEADER || !read_all(fd, hdr, ENTRY_HEADER, 0)) {
        why = "shorter than its header";
        goto reject;
    }
    if (memcmp(hdr, entry_magic, sizeof entry_magic) != 0) {
        why = "bad magic";
        goto reject;
    }
    if (core_le32(hdr + 16) != ENTRY_VERSION) {
        why = "other entry format version";
        goto reject;
    }
    uint64_t sum = core_le64(hdr + 8), klen = core_le64(hdr + 24), blen = core_le64(hdr + 32);
    uint64_t body = (uint64_t)st.st_size - ENTRY_HEADER;
    if (klen > body || blen != body - klen) {
        why = "lengths do not match the file";
        goto reject;
    }
    if (klen != key_len) {
        why = "the stored key differs (length)";
        goto reject;
    }
    /* Header tail and body in one buffer: the checksum covers both. */
    data = core_malloc((size_t)st.st_size - 16);
    if (!data)
        goto done; /* not the entry's fault */
    memcpy(data, hdr + 16, ENTRY_HEADER - 16);
    if (!read_all(fd, data + ENTRY_HEADER - 16, (size_t)body, ENTRY_HEADER)) {
        why = "short read";
        goto reject;
    }
    if (core_hash64_bytes(data, (size_t)st.st_size - 16) != sum) {
        why = "checksum mismatch";
        goto reject;
    }
    unsigned char *k = data + ENTRY_HEADER - 16;
    if (memcmp(k, key, key_len) != 0) {
        why = "the stored key differs";
        goto reject;
    }
    memmove(data, k + key_len, (size_t)blen);
    *blob = data;
    *len = (size_t)blen;
    data = NULL;
    ok = true;
    set_times_now(fd); /* least recently used: a hit is a use */
    goto done;

reject:
    core_log(CORE_LOG_INFO, "disk cache: %s/%s: %s; deleted", c->dir, name, why);
    delete_if_same(c, name, &st);
    count(c, &c->stats.rejects);
done:
    count(c, ok ? &c->stats.hits : &c->stats.misses);
    core_free(data);
    close(fd);
    return ok;
}

/* ---- writing ---- */

static bool write_all(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

typedef struct scan_item {
    char name[64];
    uint64_t size;
    struct timespec mtime;
} scan_item;

static int by_age(const void *a, const void *b)
{
    const scan_item *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Counts the entries (c->lock held); deletes stale temporary files; with
 * target > 0 also deletes the oldest entries (except keep) until at most
 * target bytes stay. */
static void scan_locked(core_disk_cache *c, uint64_t target, const char *keep)
{
    int fd = dup(c->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        core_log(CORE_LOG_INFO, "disk cache: cannot list %s: %s", c->dir, strerror(errno));
        return;
    }
    rewinddir(d); /* the duplicate shares the offset of earlier scans */
    scan_item *items = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (strlen(nm) >= 64 || !is_hex32(nm))
            continue;
        bool entry = !strcmp(nm + 32, ENTRY_SUFFIX);
        bool temp = !strncmp(nm + 32, TEMP_INFIX, strlen(TEMP_INFIX));
        struct stat st;
        if ((!entry && !temp) || fstatat(c->dirfd, nm, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (temp) {
            if (now - st.st_mtime > STALE_TEMP_SECONDS)
                unlinkat(c->dirfd, nm, 0);
            continue;
        }
        total += (uint64_t)st.st_size;
        if (!target)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            scan_item *ni = core_realloc(items, ncap * sizeof *ni);
            if (!ni)
                break; /* evicts what it has listed */
            items = ni;
            cap = ncap;
        }
        snprintf(items[n].name, sizeof items[n].name, "%s", nm);
        items[n].size = (uint64_t)st.st_size;
        items[n].mtime = st.st_mtim;
        n++;
    }
    closedir(d);
    if (target && total > target && n) {
        qsort(items, n, sizeof *items, by_age);
        for (size_t i = 0; i < n && total > target; i++) {
            if (keep && !strcmp(items[i].name, keep))
                continue;
            if (unlinkat(c->dirfd, items[i].name, 0) == 0 || errno == ENOENT) {
                total -= CORE_MIN(total, items[i].size);
                c->stats.evictions++;
                core_log(CORE_LOG_DEBUG, "disk cache: evicted %s/%s (%llu bytes)", c->dir,
                         items[i].name, (unsigned long long)items[i].size);
            }
        }
    }
    core_free(items);
    c->total = total;
    c->scanned = true;
}

uint64_t core_disk_cache_scan_size(core_disk_cache *c)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    scan_locked(c, 0, NULL);
    uint64_t t = c->total;
    pthread_mutex_unlock(&c->lock);
    return t;
}

/* Creates a temporary file with a name no other caller uses; -1 with errno. */
static int create_temp(core_disk_cache *c, const void *key, size_t key_len, char name[128])
{
    for (int i = 0; i < TEMP_TRIES; i++) {
        temp_name(c, key, key_len, (uint64_t)atomic_fetch_add(&temp_seq, 1), name);
        int fd = openat(c->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
        core_log(CORE_LOG_INFO, "disk cache: %s/%s exists; trying another name", c->dir, name);
    }
    return -1;
}

bool core_disk_cache_put(core_disk_cache *c, const void *key, size_t key_len, const void *blob,
                         size_t len)
{
    if (!c)
        return false;
    char name[64], tmp[128] = "";
    entry_name(key, key_len, name);
    size_t size;
    if (core_add_overflow(key_len, len, &size) || core_add_overflow(size, ENTRY_HEADER, &size) ||
        size > c->max_bytes) {
        core_log(CORE_LOG_INFO,
                 "disk cache: %s/%s: %zu + %zu bytes exceed the cap (%llu); not stored", c->dir,
                 name, key_len, len, (unsigned long long)c->max_bytes);
        count(c, &c->stats.write_failures);
        return false;
    }
    unsigned char *buf = core_malloc(size);
    if (!buf) {
        core_log(CORE_LOG_INFO, "disk cache: %s/%s: out of memory; not stored", c->dir, name);
        count(c, &c->stats.write_failures);
        return false;
    }
    memcpy(buf, entry_magic, sizeof entry_magic);
    core_put_le32(buf + 16, ENTRY_VERSION);
    core_put_le32(buf + 20, 0);
    core_put_le64(buf + 24, key_len);
    core_put_le64(buf + 32, len);
    memcpy(buf + ENTRY_HEADER, key, key_len);
    if (len)
        memcpy(buf + ENTRY_HEADER + key_len, blob, len);
    core_put_le64(buf + 8, core_hash64_bytes(buf + 16, size - 16));

    const char *step = "create a temporary file";
    int fd = create_temp(c, key, key_len, tmp);
    int e = fd < 0 ? errno : 0;
    if (!e && !write_all(fd, buf, size)) {
        e = errno;
        step = "write";
    }
    if (fd >= 0) {
        set_times_now(fd); /* the same clock as hits, for the LRU order */
        if (close(fd) != 0 && !e) {
            e = errno;
            step = "write";
        }
    }
    struct stat old;
    bool had_old =
        !e && fstatat(c->dirfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(old.st_mode);
    if (!e && renameat(c->dirfd, tmp, c->dirfd, name) != 0) {
        e = errno;
        step = "rename";
    }
    if (e) {
        if (fd >= 0)
            unlinkat(c->dirfd, tmp, 0);
        warn_once(c->dir, "cannot %s for %s: %s; entry not stored", step, name, strerror(e));
        core_free(buf);
        count(c, &c->stats.write_failures);
        return false;
    }
    core_free(buf);

    pthread_mutex_lock(&c->lock);
    c->stats.writes++;
    if (!c->scanned) {
        scan_locked(c, 0, NULL);
    } else {
        c->total += size;
        if (had_old)
            c->total -= CORE_MIN(c->total, (uint64_t)old.st_size);
    }
    if (c->total > c->max_bytes)
        scan_locked(c, c->max_bytes - c->max_bytes / 8, name);
    pthread_mutex_unlock(&c->lock);
    return true;
}

void core_disk_cache_remove(core_disk_cache *c, const void *key, size_t key_len)
{
    if (!c)
        return;
    char name[64];
    entry_name(key, key_len, name);
    delete_if_same(c, name, NULL);
}
