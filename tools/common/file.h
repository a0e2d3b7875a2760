/*
 * file.h — reading a whole file, for the tools' prompt and text inputs.
 */
#ifndef GLESC_TOOLS_FILE_H
#define GLESC_TOOLS_FILE_H

#include <stddef.h>

/* The bytes of path, byte for byte, with a NUL after them (the file may hold
 * NULs too: *len is its length). malloc'ed: free() it. NULL when it cannot
 * be opened or read, on out-of-memory, or when it has more than max bytes
 * (errno EFBIG; reading stops there); errno then says why. */
char *tool_read_file(const char *path, size_t max, size_t *len);

#endif
