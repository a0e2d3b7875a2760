/*
 * disk_cache.h — a keyed blob cache in one directory, after Mesa's disk
 * cache: the program cache's binaries and the device's tuning data live in it.
 *
 * An entry's file is named by the XXH3-128 of its key and carries the whole
 * key, so an entry copied over another's name is refused by the byte
 * comparison, not served. Files are written to a unique temporary name
 * (O_CREAT|O_EXCL|O_NOFOLLOW) and renamed into place, so readers never see
 * half an entry and a symbolic link planted in the directory is never
 * followed. Every get checks the magic, the format version, the lengths and
 * an XXH3-64 checksum; a bad entry is deleted. The directory is kept under a
 * byte cap by deleting the least recently used entries (a hit refreshes the
 * entry's modification time). Nothing here fails its caller: a directory that
 * cannot be used is reported once per process (a warning naming it and the
 * reason) and the cache is then off.
 *
 * A cache may be used from several threads; several caches (contexts,
 * processes) may share one directory.
 */
#ifndef GLESC_CORE_DISK_CACHE_H
#define GLESC_CORE_DISK_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

typedef struct core_disk_cache core_disk_cache;

/* Default byte cap when neither the caller nor GLESC_CACHE_MAX_SIZE sets one. */
#define CORE_DISK_CACHE_DEFAULT_MAX (256ull << 20)

/* The cache directory for dir: dir itself when neither NULL nor "", else
 * GLESC_CACHE_DIR, else $XDG_CACHE_HOME/glesc, else $HOME/.cache/glesc.
 * NULL when the result is "off", when none of these is set, or when out of
 * memory. core_free the result. */
char *core_disk_cache_resolve_dir(const char *dir);

/* dir: a directory path (created with mode 0700 where missing); NULL resolves
 * it as core_disk_cache_resolve_dir does; "off" disables (GLESC_OK with *out
 * NULL). max_bytes 0: GLESC_CACHE_MAX_SIZE (bytes, or with a K/M/G suffix) or
 * 256 MiB. A directory that cannot be created or written also gives GLESC_OK
 * with *out NULL, after one warning per process and directory. Errors
 * (GLESC_ERROR_OUT_OF_MEMORY only) go to err (or the thread's when NULL). */
glesc_status core_disk_cache_open(const char *dir, uint64_t max_bytes, core_err *err,
                                  core_disk_cache **out);
void core_disk_cache_close(core_disk_cache *c); /* NULL is a no-op */

/* The entry for key (any bytes; the whole key is stored in the entry and
 * compared). true and a core_malloc'd blob (caller core_free's it) when found
 * and intact; a hit refreshes the entry's age. A damaged entry, or one whose
 * stored key differs, is deleted (logged at info). false for NULL c. */
bool core_disk_cache_get(core_disk_cache *c, const void *key, size_t key_len, void **blob,
                         size_t *len);
/* Stores atomically (unique O_EXCL|O_NOFOLLOW temp file + rename), then
 * evicts least recently used entries while the directory holds more than the
 * cap. false on failure (logged) or for NULL c. */
bool core_disk_cache_put(core_disk_cache *c, const void *key, size_t key_len, const void *blob,
                         size_t len);
void core_disk_cache_remove(core_disk_cache *c, const void *key, size_t key_len);

/* What this cache has done since it was opened. */
typedef struct core_disk_cache_stats {
    uint64_t hits, misses;
    uint64_t rejects; /* damaged or foreign entries found (and deleted) */
    uint64_t writes, write_failures;
    uint64_t evictions; /* entries deleted to keep under the cap */
} core_disk_cache_stats;
/* Zeroes for NULL c. */
void core_disk_cache_get_stats(core_disk_cache *c, core_disk_cache_stats *out);

/* The directory (owned by c). */
const char *core_disk_cache_dir(const core_disk_cache *c);
/* The byte cap. */
uint64_t core_disk_cache_max_bytes(const core_disk_cache *c);
/* Path of key's entry file (for tests and messages); core_free it. NULL on OOM. */
char *core_disk_cache_entry_path(const core_disk_cache *c, const void *key, size_t key_len);
/* Bytes of entries in the directory now (scans it). */
uint64_t core_disk_cache_scan_size(core_disk_cache *c);
/* Testing aid: the file name (in the directory) the next put of key tries
 * first for its temporary file, so a test can plant something there.
 * core_free it. */
char *core_disk_cache_next_temp_name(const core_disk_cache *c, const void *key, size_t key_len);

#endif /* GLESC_CORE_DISK_CACHE_H */
