/*
 * test_disk_cache.c — the keyed blob cache (core/disk_cache.h): round trip;
 * an entry copied over another key's name, a truncated or bit-flipped entry
 * is refused and deleted; a symbolic link planted at an entry's name or at
 * the next temporary name is never followed; a FIFO at an entry's name does
 * not hang; two caches on one directory written from two threads never give
 * a torn or wrong blob; the cap evicts the least recently used entries; an
 * unusable directory warns once, naming it and the reason; the directory
 * resolves explicit > GLESC_CACHE_DIR > XDG > HOME.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/disk_cache.h"
#include "test_util.h"

static core_disk_cache *open_cache(const char *dir, uint64_t max_bytes)
{
    core_disk_cache *c = NULL;
    cr_assert_eq(core_disk_cache_open(dir, max_bytes, NULL, &c), GLESC_OK, "%s",
                 core_err_msg(core_err_tls()));
    cr_assert_not_null(c, "cache in %s is off", dir);
    return c;
}

static void put_str(core_disk_cache *c, const char *key, const char *blob)
{
    cr_assert(core_disk_cache_put(c, key, strlen(key), blob, strlen(blob) + 1), "put %s", key);
}

/* The blob for key as a string, or NULL on a miss. free() it. */
static char *get_str(core_disk_cache *c, const char *key)
{
    void *blob;
    size_t len;
    if (!core_disk_cache_get(c, key, strlen(key), &blob, &len))
        return NULL;
    char *s = strndup(blob, len);
    core_free(blob);
    return s;
}

static void assert_get(core_disk_cache *c, const char *key, const char *want)
{
    char *got = get_str(c, key);
    if (!want) {
        cr_assert_null(got, "%s: expected a miss, got \"%s\"", key, got);
        return;
    }
    cr_assert_not_null(got, "%s: expected \"%s\", got a miss", key, want);
    cr_assert_str_eq(got, want, "%s", key);
    free(got);
}

static char *entry_path(core_disk_cache *c, const char *key)
{
    char *p = core_disk_cache_entry_path(c, key, strlen(key));
    cr_assert_not_null(p);
    return p;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

Test(disk_cache, round_trip_remove_and_stats)
{
    char *dir = test_tmpdir();
    core_disk_cache *c = open_cache(dir, 0);
    cr_assert_str_eq(core_disk_cache_dir(c), dir);
    cr_assert_eq(core_disk_cache_max_bytes(c), CORE_DISK_CACHE_DEFAULT_MAX);
    assert_get(c, "alpha", NULL);
    put_str(c, "alpha", "first");
    put_str(c, "beta", "second");
    assert_get(c, "alpha", "first");
    assert_get(c, "beta", "second");
    put_str(c, "alpha", "replaced");
    assert_get(c, "alpha", "replaced");
    /* Keys are bytes: an embedded NUL counts. */
    const char k1[] = {'k', 0, '1'}, k2[] = {'k', 0, '2'};
    cr_assert(core_disk_cache_put(c, k1, sizeof k1, "x", 1));
    void *blob;
    size_t len;
    cr_assert_not(core_disk_cache_get(c, k2, sizeof k2, &blob, &len));
    cr_assert(core_disk_cache_get(c, k1, sizeof k1, &blob, &len));
    cr_assert_eq(len, 1);
    core_free(blob);
    /* An empty blob is a value too. */
    cr_assert(core_disk_cache_put(c, "empty", 5, NULL, 0));
    cr_assert(core_disk_cache_get(c, "empty", 5, &blob, &len));
    cr_assert_eq(len, 0);
    core_free(blob);

    core_disk_cache_remove(c, "beta", 4);
    assert_get(c, "beta", NULL);
    char *p = entry_path(c, "beta");
    cr_assert_not(exists(p));
    core_free(p);
    core_disk_cache_stats s;
    core_disk_cache_get_stats(c, &s);
    cr_assert_eq(s.writes, 5);
    cr_assert_eq(s.hits, 5);
    cr_assert_eq(s.misses, 3);
    cr_assert_eq(s.rejects, 0);
    core_disk_cache_close(c);
    core_disk_cache_close(NULL);
    free(dir);
}

Test(disk_cache, out_of_memory_fails_cleanly)
{
    char *dir = test_tmpdir();
    for (long n = 0; n < 3; n++) {
        core_disk_cache *c = (core_disk_cache *)1;
        core_alloc_fail_after(n);
        glesc_status st = core_disk_cache_open(dir, 0, NULL, &c);
        core_alloc_fail_after(-1);
        if (st == GLESC_OK) {
            cr_assert_not_null(c, "fail after %ld", n);
            core_disk_cache_close(c);
            break;
        }
        cr_assert_eq(st, GLESC_ERROR_OUT_OF_MEMORY);
        cr_assert_null(c);
        cr_assert(strstr(core_err_msg(core_err_tls()), "disk cache"), "%s",
                  core_err_msg(core_err_tls()));
    }
    core_disk_cache *c = open_cache(dir, 0);
    put_str(c, "key", "value");
    core_alloc_fail_after(0);
    void *blob;
    size_t len;
    bool got = core_disk_cache_get(c, "key", 3, &blob, &len);
    bool put = core_disk_cache_put(c, "other", 5, "v", 1);
    core_alloc_fail_after(-1);
    cr_assert_not(got);
    cr_assert_not(put);
    assert_get(c, "key", "value"); /* a failed allocation is not the entry's fault */
    core_disk_cache_close(c);
    free(dir);
}

Test(disk_cache, off_and_null_are_harmless)
{
    core_disk_cache *c = (core_disk_cache *)1;
    cr_assert_eq(core_disk_cache_open("off", 0, NULL, &c), GLESC_OK);
    cr_assert_null(c);
    void *blob;
    size_t len;
    cr_assert_not(core_disk_cache_get(NULL, "k", 1, &blob, &len));
    cr_assert_not(core_disk_cache_put(NULL, "k", 1, "v", 1));
    core_disk_cache_remove(NULL, "k", 1);
}

/* Issue 10, defect 2: an entry is tied to its key. */
Test(disk_cache, entry_copied_over_another_key_is_rejected)
{
    char *dir = test_tmpdir();
    core_disk_cache *c = open_cache(dir, 0);
    put_str(c, "key A", "blob of A");
    put_str(c, "key B", "blob of B");
    char *pa = entry_path(c, "key A"), *pb = entry_path(c, "key B");
    size_t n;
    void *a = test_read_file(pa, &n);
    cr_assert_not_null(a);
    write_file(pb, a, n); /* a valid entry, under the wrong name */
    free(a);
    assert_get(c, "key B", NULL);
    cr_assert_not(exists(pb), "the foreign entry was not deleted");
    assert_get(c, "key A", "blob of A");
    core_disk_cache_stats s;
    core_disk_cache_get_stats(c, &s);
    cr_assert_eq(s.rejects, 1);
    /* A key of the same length but other bytes is refused the same way. */
    put_str(c, "key C", "blob of C");
    char *pc = entry_path(c, "key C");
    a = test_read_file(pa, &n);
    write_file(pc, a, n);
    free(a);
    assert_get(c, "key C", NULL);
    cr_assert_not(exists(pc));
    core_free(pa);
    core_free(pb);
    core_free(pc);
    core_disk_cache_close(c);
    free(dir);
}

static void damaged_entry_is_rejected(int how)
{
    char *dir = test_tmpdir();
    core_disk_cache *c = open_cache(dir, 0);
    put_str(c, "key", "a blob long enough to damage in several places");
    char *p = entry_path(c, "key");
    size_t n;
    unsigned char *data = test_read_file(p, &n);
    cr_assert_not_null(data);
    switch (how) {
    case 0: /* truncated */
        n /= 2;
        break;
    case 1: /* one bit inside the blob */
        data[n - 5] ^= 0x10;
        break;
    case 2: /* one bit inside the stored key */
        data[41] ^= 0x01;
        break;
    case 3: /* the magic */
        data[0] = 'X';
        break;
    case 4: /* one byte appended */
        data[n++] = 0;
        break;
    case 5: /* empty */
        n = 0;
        break;
    }
    write_file(p, data, n);
    free(data);
    assert_get(c, "key", NULL);
    cr_assert_not(exists(p), "the damaged entry (%d) was not deleted", how);
    core_disk_cache_stats s;
    core_disk_cache_get_stats(c, &s);
    cr_assert_eq(s.rejects, 1);
    put_str(c, "key", "fresh");
    assert_get(c, "key", "fresh");
    core_free(p);
    core_disk_cache_close(c);
    free(dir);
}

Test(disk_cache, truncated_entry_is_rejected)
{
    damaged_entry_is_rejected(0);
}
Test(disk_cache, bit_flipped_blob_is_rejected)
{
    damaged_entry_is_rejected(1);
}
Test(disk_cache, bit_flipped_key_is_rejected)
{
    damaged_entry_is_rejected(2);
}
Test(disk_cache, bad_magic_is_rejected)
{
    damaged_entry_is_rejected(3);
}
Test(disk_cache, longer_entry_is_rejected)
{
    damaged_entry_is_rejected(4);
}
Test(disk_cache, empty_entry_is_rejected)
{
    damaged_entry_is_rejected(5);
}

/* Issue 10, defect 3: a planted link is never followed. */
Test(disk_cache, symlink_at_entry_name_is_not_followed)
{
    char *dir = test_tmpdir();
    char target[4200];
    snprintf(target, sizeof target, "%s/precious", dir);
    write_file(target, "precious", 8);
    core_disk_cache *c = open_cache(dir, 0);
    char *p = entry_path(c, "key");
    cr_assert_eq(symlink(target, p), 0);
    assert_get(c, "key", NULL); /* refused (and the link removed) */
    cr_assert_eq(symlink(target, p), 0);
    put_str(c, "key", "cached"); /* replaces the link, not its target */
    assert_get(c, "key", "cached");
    struct stat st;
    cr_assert_eq(lstat(p, &st), 0);
    cr_assert(S_ISREG(st.st_mode), "the entry is still a link");
    size_t n;
    char *t = test_read_file(target, &n);
    cr_assert_str_eq(t, "precious", "the link's target was written");
    free(t);
    core_free(p);
    core_disk_cache_close(c);
    free(dir);
}

Test(disk_cache, symlink_at_temp_name_is_not_followed)
{
    char *dir = test_tmpdir();
    char target[4200], tp[4400];
    snprintf(target, sizeof target, "%s/precious", dir);
    write_file(target, "precious", 8);
    core_disk_cache *c = open_cache(dir, 0);
    char *tmp = core_disk_cache_next_temp_name(c, "key", 3);
    snprintf(tp, sizeof tp, "%s/%s", dir, tmp);
    cr_assert_eq(symlink(target, tp), 0);
    put_str(c, "key", "cached"); /* takes another name */
    assert_get(c, "key", "cached");
    size_t n;
    char *t = test_read_file(target, &n);
    cr_assert_str_eq(t, "precious", "the link's target was written");
    free(t);
    struct stat st;
    cr_assert_eq(lstat(tp, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the planted link was replaced");
    /* The same with a dangling link (O_CREAT alone would create its target). */
    core_free(tmp);
    tmp = core_disk_cache_next_temp_name(c, "key", 3);
    snprintf(tp, sizeof tp, "%s/%s", dir, tmp);
    char dangling[4300];
    snprintf(dangling, sizeof dangling, "%s/created-through-link", dir);
    cr_assert_eq(symlink(dangling, tp), 0);
    put_str(c, "key", "again");
    assert_get(c, "key", "again");
    cr_assert_not(exists(dangling), "a file was created through the link");
    core_free(tmp);
    core_disk_cache_close(c);
    free(dir);
}

/* Two caches in one process take different temporary names. */
Test(disk_cache, temp_names_are_unique)
{
    char *dir = test_tmpdir();
    core_disk_cache *a = open_cache(dir, 0), *b = open_cache(dir, 0);
    char *na = core_disk_cache_next_temp_name(a, "key", 3);
    put_str(a, "key", "a");
    char *nb = core_disk_cache_next_temp_name(b, "key", 3);
    char *na2 = core_disk_cache_next_temp_name(a, "key", 3);
    cr_assert_str_neq(na, nb);
    cr_assert_str_neq(na, na2);
    core_free(na);
    core_free(nb);
    core_free(na2);
    core_disk_cache_close(a);
    core_disk_cache_close(b);
    free(dir);
}

/* Issue 10, defect 5: a FIFO in place of an entry must not block the open. */
Test(disk_cache, fifo_at_entry_name_does_not_hang, .timeout = 20)
{
    char *dir = test_tmpdir();
    core_disk_cache *c = open_cache(dir, 0);
    char *p = entry_path(c, "key");
    cr_assert_eq(mkfifo(p, 0600), 0);
    assert_get(c, "key", NULL);
    cr_assert_not(exists(p), "the FIFO was not removed");
    cr_assert_eq(mkfifo(p, 0600), 0);
    put_str(c, "key", "cached");
    assert_get(c, "key", "cached");
    /* A directory there is refused too (and cannot be replaced). */
    core_disk_cache_remove(c, "key", 3);
    cr_assert_eq(mkdir(p, 0700), 0);
    assert_get(c, "key", NULL);
    cr_assert_not(core_disk_cache_put(c, "key", 3, "v", 1));
    core_free(p);
    core_disk_cache_close(c);
    free(dir);
}

/* ---- two caches, two threads, one key ---- */

#define RACE_ROUNDS 300

typedef struct racer {
    core_disk_cache *c;
    int id;
    int bad; /* torn or wrong blobs seen */
    int hits;
} racer;

/* Writer id's blob in round r: the first three bytes say who and when, and
 * the length and every other byte follow from them. */
static size_t race_blob(int id, int r, unsigned char *buf)
{
    size_t n = 1000 + (size_t)(r % 7) * 997 + (size_t)id * 13;
    buf[0] = (unsigned char)id;
    buf[1] = (unsigned char)r;
    buf[2] = (unsigned char)(r >> 8);
    for (size_t i = 3; i < n; i++)
        buf[i] = (unsigned char)(id * 64 + r % 61 + i % 3);
    return n;
}

static bool race_blob_valid(const unsigned char *blob, size_t len)
{
    unsigned char buf[16384];
    if (len < 3 || blob[0] > 1)
        return false;
    size_t n = race_blob(blob[0], blob[1] | blob[2] << 8, buf);
    return n == len && !memcmp(buf, blob, len);
}

static void *race(void *arg)
{
    racer *rc = arg;
    unsigned char buf[16384];
    for (int r = 0; r < RACE_ROUNDS; r++) {
        size_t n = race_blob(rc->id, r, buf);
        core_disk_cache_put(rc->c, "shared key", 10, buf, n);
        void *blob;
        size_t len;
        if (core_disk_cache_get(rc->c, "shared key", 10, &blob, &len)) {
            rc->hits++;
            if (!race_blob_valid(blob, len))
                rc->bad++;
            core_free(blob);
        }
    }
    return NULL;
}

Test(disk_cache, two_caches_racing_on_one_key_never_tear)
{
    char *dir = test_tmpdir();
    racer r[2] = {{open_cache(dir, 0), 0, 0, 0}, {open_cache(dir, 0), 1, 0, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        cr_log_info("racer %d: %d hits, %d bad", i, r[i].hits, r[i].bad);
        cr_assert_eq(r[i].bad, 0, "racer %d read %d torn or wrong blobs", i, r[i].bad);
        core_disk_cache_stats s;
        core_disk_cache_get_stats(r[i].c, &s);
        cr_assert_eq(s.rejects, 0, "a complete entry was never torn, so never rejected");
        cr_assert_eq(s.writes, RACE_ROUNDS);
    }
    void *blob;
    size_t len;
    cr_assert(core_disk_cache_get(r[0].c, "shared key", 10, &blob, &len));
    cr_assert(race_blob_valid(blob, len));
    core_free(blob);
    /* Only the entry is left: no temporary files. */
    cr_assert_eq(core_disk_cache_scan_size(r[0].c), len + 10 + 40);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", dir);
    cr_assert_eq(system(cmd), 0, "files other than the entry are left in %s", dir);
    core_disk_cache_close(r[0].c);
    core_disk_cache_close(r[1].c);
    free(dir);
}

/* ---- the size cap ---- */

Test(disk_cache, cap_evicts_least_recently_used)
{
    char *dir = test_tmpdir();
    char blob[1000];
    memset(blob, 'x', sizeof blob - 1);
    blob[sizeof blob - 1] = '\0';
    const uint64_t entry = 40 + 1 + sizeof blob; /* header, one-byte key, blob */
    core_disk_cache *c = open_cache(dir, entry * 7 / 2);
    const char *keys[] = {"A", "B", "C", "D"};
    for (int i = 0; i < 3; i++) {
        put_str(c, keys[i], blob);
        sleep_ms(5);
    }
    char *got = get_str(c, "A"); /* A is now more recent than B and C */
    cr_assert_not_null(got);
    free(got);
    sleep_ms(5);
    put_str(c, "D", blob);
    cr_assert_leq(core_disk_cache_scan_size(c), entry * 7 / 2);
    for (int i = 0; i < 4; i++) {
        char *p = entry_path(c, keys[i]);
        bool want = i != 1;
        cr_assert_eq(exists(p), want, "%s %s", keys[i], want ? "evicted" : "kept");
        core_free(p);
    }
    core_disk_cache_stats s;
    core_disk_cache_get_stats(c, &s);
    cr_assert_eq(s.evictions, 1);
    /* An entry larger than the cap is not stored at all. */
    char big[4000];
    memset(big, 'y', sizeof big);
    cr_assert_not(core_disk_cache_put(c, "E", 1, big, sizeof big));
    core_disk_cache_close(c);
    free(dir);
}

/* Another cache's entries count too: the cap is on the directory. */
Test(disk_cache, cap_counts_other_caches_entries)
{
    char *dir = test_tmpdir();
    char blob[1000];
    memset(blob, 'x', sizeof blob - 1);
    blob[sizeof blob - 1] = '\0';
    const uint64_t entry = 40 + 2 + sizeof blob;
    core_disk_cache *big = open_cache(dir, 0);
    char key[3] = "k0";
    for (int i = 0; i < 8; i++) {
        key[1] = (char)('0' + i);
        put_str(big, key, blob);
    }
    core_disk_cache *small = open_cache(dir, entry * 4);
    put_str(small, "k8", blob);
    cr_assert_leq(core_disk_cache_scan_size(small), entry * 4);
    assert_get(small, "k8", blob); /* the newest stays */
    core_disk_cache_close(big);
    core_disk_cache_close(small);
    free(dir);
}

Test(disk_cache, max_size_from_environment)
{
    char *dir = test_tmpdir();
    setenv("GLESC_CACHE_MAX_SIZE", "3M", 1);
    core_disk_cache *c = open_cache(dir, 0);
    cr_assert_eq(core_disk_cache_max_bytes(c), 3u << 20);
    core_disk_cache_close(c);
    c = open_cache(dir, 12345); /* the caller's figure beats the environment */
    cr_assert_eq(core_disk_cache_max_bytes(c), 12345);
    core_disk_cache_close(c);
    setenv("GLESC_CACHE_MAX_SIZE", "4096", 1);
    c = open_cache(dir, 0);
    cr_assert_eq(core_disk_cache_max_bytes(c), 4096);
    core_disk_cache_close(c);
    setenv("GLESC_CACHE_MAX_SIZE", "lots", 1);
    c = open_cache(dir, 0);
    cr_assert_eq(core_disk_cache_max_bytes(c), CORE_DISK_CACHE_DEFAULT_MAX);
    core_disk_cache_close(c);
    unsetenv("GLESC_CACHE_MAX_SIZE");
    free(dir);
}

Test(disk_cache, stale_temp_files_are_cleaned)
{
    char *dir = test_tmpdir();
    core_disk_cache *c = open_cache(dir, 0);
    char *tmp = core_disk_cache_next_temp_name(c, "key", 3);
    char p[4400], fresh[4400];
    snprintf(p, sizeof p, "%s/%s", dir, tmp);
    snprintf(fresh, sizeof fresh, "%s/%s.fresh", dir, tmp);
    write_file(p, "left by a crash", 15);
    write_file(fresh, "being written", 13);
    struct timespec old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, p, old, 0), 0);
    core_disk_cache_scan_size(c);
    cr_assert_not(exists(p), "a stale temporary file was kept");
    cr_assert(exists(fresh), "a temporary file being written was deleted");
    core_free(tmp);
    core_disk_cache_close(c);
    free(dir);
}

/* ---- unusable directories ---- */

/* Opens dir twice (two caches, as two contexts would) with stderr in a
 * file; returns what was logged. free() it. */
static char *open_twice_logged(const char *dir)
{
    char *tmpd = test_tmpdir();
    char logp[4200];
    snprintf(logp, sizeof logp, "%s/stderr.txt", tmpd);
    unsetenv("GLESC_LOG"); /* the default level */
    fflush(stderr);
    int saved = dup(2), fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    core_disk_cache *c[2] = {(core_disk_cache *)1, (core_disk_cache *)1};
    glesc_status st[2];
    for (int i = 0; i < 2; i++)
        st[i] = core_disk_cache_open(dir, 0, NULL, &c[i]);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(st[i], GLESC_OK, "an unusable directory is no error");
        cr_assert_null(c[i], "a cache in an unusable directory");
    }
    size_t n;
    char *log = test_read_file(logp, &n);
    cr_assert_not_null(log);
    unlink(logp);
    rmdir(tmpd);
    free(tmpd);
    return log;
}

static int count_lines_with(const char *log, const char *needle)
{
    int n = 0;
    for (const char *p = log; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* A directory below a regular file cannot be made, for root too. */
Test(disk_cache, unusable_directory_warns_once_naming_it)
{
    char *dir = test_tmpdir();
    char file[4200], cache[4300];
    snprintf(file, sizeof file, "%s/file", dir);
    write_file(file, "", 0);
    snprintf(cache, sizeof cache, "%s/cache", file);
    char *log = open_twice_logged(cache);
    cr_log_info("logged: %s", log);
    cr_assert_eq(count_lines_with(log, cache), 1, "one warning naming %s expected: %s", cache, log);
    cr_assert(strstr(log, "warning"), "%s", log);
    cr_assert(strstr(log, strerror(ENOTDIR)), "the reason is missing: %s", log);
    cr_assert_not(strstr(log, strerror(ENOENT)), "a misleading reason: %s", log);
    free(log);
    free(dir);
}

Test(disk_cache, unwritable_directory_warns_once)
{
    if (geteuid() == 0)
        cr_skip_test("root writes any directory");
    char *dir = test_tmpdir();
    char ro[4200];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    cr_assert_eq(mkdir(ro, 0500), 0);
    char *log = open_twice_logged(ro);
    cr_assert_eq(count_lines_with(log, ro), 1, "%s", log);
    cr_assert(strstr(log, strerror(EACCES)), "%s", log);
    free(log);
    chmod(ro, 0700);
    free(dir);
}

/* ---- where the directory is ---- */

static void assert_resolves(const char *explicit_dir, const char *want)
{
    char *got = core_disk_cache_resolve_dir(explicit_dir);
    if (!want)
        cr_assert_null(got, "%s", got);
    else
        cr_assert_str_eq(got ? got : "(null)", want);
    core_free(got);
}

Test(disk_cache, directory_resolves_explicit_then_environment_then_default)
{
    setenv("HOME", "/home/someone", 1);
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    setenv("GLESC_CACHE_DIR", "/from/env", 1);
    assert_resolves("/explicit", "/explicit");
    assert_resolves("off", NULL);
    assert_resolves(NULL, "/from/env");
    assert_resolves("", "/from/env"); /* empty is unset, as for the device */
    setenv("GLESC_CACHE_DIR", "off", 1);
    assert_resolves(NULL, NULL);
    assert_resolves("/explicit", "/explicit");
    unsetenv("GLESC_CACHE_DIR");
    assert_resolves(NULL, "/xdg/glesc");
    unsetenv("XDG_CACHE_HOME");
    assert_resolves(NULL, "/home/someone/.cache/glesc");
    unsetenv("HOME");
    assert_resolves(NULL, NULL);
    core_disk_cache *c = (core_disk_cache *)1;
    cr_assert_eq(core_disk_cache_open(NULL, 0, NULL, &c), GLESC_OK);
    cr_assert_null(c);
}
