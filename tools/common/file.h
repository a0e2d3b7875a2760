/*
 * file.h — reading a whole file, for the tools' prompt and text inputs; the
 * process's resident memory (a file of /proc), for their memory figures.
 */
#ifndef GLESC_TOOLS_FILE_H
#define GLESC_TOOLS_FILE_H

#include <stddef.h>
#include <stdint.h>

/* The bytes of path, byte for byte, with a NUL after them (the file may hold
 * NULs too: *len is its length). malloc'ed: free() it. NULL when it cannot
 * be opened or read, on out-of-memory, or when it has more than max bytes
 * (errno EFBIG; reading stops there); errno then says why. */
char *tool_read_file(const char *path, size_t max, size_t *len);
/* Bytes of this process resident in memory (Linux: /proc/self/statm), 0
 * where that cannot be read. */
uint64_t tool_rss_bytes(void);

#endif
