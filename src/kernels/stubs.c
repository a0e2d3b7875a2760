/* stubs.c — generators not written yet. */
#include "kernels/kernels.h"

#define STUB(fn)                                                                                   \
    glesc_status fn(kb *b)                                                                         \
    {                                                                                              \
        return kb_fail(b, GLESC_ERROR_UNSUPPORTED, #fn ": not implemented yet");                 \
    }
STUB(kernels_gen_attention)
