/*
 * fd_map.c — the bytes of a model that lives in part of an open file
 * descriptor (an Android asset's descriptor with its start and length, a
 * flash partition, a file the caller opened): glesc_model_load_fd reads them
 * through this.
 *
 * The range is mapped read-only from the page boundary below its offset;
 * where the descriptor cannot be mapped (a pipe, some device nodes) it is
 * read with pread into the heap instead. Neither moves the descriptor's file
 * offset, so the caller may share it. For a regular file the range is
 * checked against the file's size first, so a mapping never reaches past
 * the end of the file.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llm/runtime.h"

glesc_status llm_fd_map_open(int fd, uint64_t offset, uint64_t size, const char *name,
                             llm_fd_map *out)
{
    memset(out, 0, sizeof *out);
    if (fd < 0)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "%s: descriptor %d is not valid",
                            name, fd);
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return core_err_set(NULL, GLESC_ERROR_IO, "%s: cannot stat descriptor %d: %s", name, fd,
                            strerror(errno));
    bool regular = S_ISREG(sb.st_mode);
    uint64_t file_size = regular ? (uint64_t)sb.st_size : 0;
    if (size == 0) {
        if (!regular)
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "%s: size 0 means up to the end of the file, which only a regular "
                                "file has: give the size",
                                name);
        if (offset >= file_size)
            return core_err_set(NULL, GLESC_ERROR_FORMAT,
                                "%s: no bytes at offset %llu of a file of %llu bytes", name,
                                (unsigned long long)offset, (unsigned long long)file_size);
        size = file_size - offset;
    }
    if (regular && (offset > file_size || size > file_size - offset))
        return core_err_set(NULL, GLESC_ERROR_IO,
                            "%s: %llu bytes at offset %llu go past the end of the file (%llu "
                            "bytes)",
                            name, (unsigned long long)size, (unsigned long long)offset,
                            (unsigned long long)file_size);
    long page = sysconf(_SC_PAGESIZE);
    uint64_t delta = offset % (uint64_t)(page > 0 ? page : 4096);
    if (size > SIZE_MAX - delta || offset > (uint64_t)INT64_MAX)
        return core_err_set(NULL, GLESC_ERROR_LIMIT, "%s: %llu bytes do not fit in memory", name,
                            (unsigned long long)size);
    out->size = size;
    void *m =
        mmap(NULL, (size_t)(size + delta), PROT_READ, MAP_PRIVATE, fd, (off_t)(offset - delta));
    if (m != MAP_FAILED) {
        out->base = m;
        out->base_size = (size_t)(size + delta);
        out->data = (const char *)m + delta;
        return GLESC_OK;
    }
    int map_errno = errno;
    char *heap = core_malloc((size_t)size);
    if (!heap)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "%s: cannot map it (%s) nor hold its %llu bytes in memory", name,
                            strerror(map_errno), (unsigned long long)size);
    for (uint64_t done = 0; done < size;) {
        ssize_t n = pread(fd, heap + done, (size_t)(size - done), (off_t)(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            glesc_status st =
                n < 0 ? core_err_set(NULL, GLESC_ERROR_IO, "%s: cannot map it (%s) nor read it: %s",
                                     name, strerror(map_errno), strerror(errno))
                      : core_err_set(NULL, GLESC_ERROR_IO,
                                     "%s: the data ends after %llu of %llu bytes", name,
                                     (unsigned long long)done, (unsigned long long)size);
            core_free(heap);
            memset(out, 0, sizeof *out);
            return st;
        }
        done += (uint64_t)n;
    }
    out->heap = heap;
    out->data = heap;
    return GLESC_OK;
}

void llm_fd_map_close(llm_fd_map *map)
{
    if (map->base)
        munmap(map->base, map->base_size);
    core_free(map->heap);
    memset(map, 0, sizeof *map);
}
