/*
 * devclass.c — the device class: which family of GPU (or CPU renderer) the
 * context runs on, told from the GL vendor and renderer strings. The
 * kernels take their configurations per class (src/kernels/devclass.c:
 * tiles, rows per workgroup, unrolling, columns per pass, the register
 * budget they imply); here only the naming. The options' device_class or
 * GLESC_DEVICE_CLASS names one instead (tuning a class's configurations on
 * another GPU, or a driver whose strings are not recognized).
 *
 * The strings, as Mesa 25 and the vendors' drivers give them: Panfrost
 * "Mali-G610 (Panfrost)", "Mali-G52 r1 (Panfrost)"; Freedreno "FD618"
 * (newer Mesa, and Qualcomm's driver, "Adreno (TM) 740"); V3D "V3D 7.1";
 * llvmpipe "llvmpipe (LLVM 15.0.6, 256 bits)"; NVIDIA's driver the vendor
 * "NVIDIA Corporation"; radeonsi "AMD Radeon ..."; iris "Mesa Intel(R) ...".
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gl/gl.h"

static const char *const names[GL_CLASS_COUNT] = {
    [GL_CLASS_DEFAULT] = "default",
    [GL_CLASS_LLVMPIPE] = "llvmpipe",
    [GL_CLASS_NVIDIA] = "nvidia",
    [GL_CLASS_AMD] = "amd",
    [GL_CLASS_INTEL] = "intel",
    [GL_CLASS_MALI_BIFROST] = "mali-bifrost",
    [GL_CLASS_MALI_VALHALL] = "mali-valhall",
    [GL_CLASS_ADRENO_6XX] = "adreno-6xx",
    [GL_CLASS_ADRENO_7XX] = "adreno-7xx",
    [GL_CLASS_V3D] = "v3d",
};

const char *gl_devclass_name(gl_devclass c)
{
    return c >= 0 && c < GL_CLASS_COUNT ? names[c] : "?";
}

bool gl_devclass_parse(const char *name, gl_devclass *out)
{
    for (int i = 0; i < GL_CLASS_COUNT; i++)
        if (!strcmp(name, names[i])) {
            *out = (gl_devclass)i;
            return true;
        }
    return false;
}

/* The number after prefix in s (e.g. 610 of "Mali-G610"), or -1. */
static long number_after(const char *s, const char *prefix)
{
    const char *p = strstr(s, prefix);
    if (!p)
        return -1;
    p += strlen(prefix);
    while (*p == ' ')
        p++;
    return isdigit((unsigned char)*p) ? strtol(p, NULL, 10) : -1;
}

gl_devclass gl_devclass_detect(const char *vendor, const char *renderer, bool software)
{
    const char *r = renderer ? renderer : "", *v = vendor ? vendor : "";
    if (software)
        return GL_CLASS_LLVMPIPE;
    long n;
    if ((n = number_after(r, "Mali-G")) >= 0) {
        /* Bifrost: G31, G51, G52, G71, G72, G76; every later one is Valhall
         * (G57, G68, G77, G78, G310 .. G720) */
        static const long bifrost[] = {31, 51, 52, 71, 72, 76};
        for (size_t i = 0; i < CORE_ARRAY_LEN(bifrost); i++)
            if (n == bifrost[i])
                return GL_CLASS_MALI_BIFROST;
        return GL_CLASS_MALI_VALHALL;
    }
    if (strstr(r, "Mali-T")) /* Midgard: the smallest budget there is */
        return GL_CLASS_MALI_BIFROST;
    if ((n = number_after(r, "FD")) >= 0 || (n = number_after(r, "Adreno (TM)")) >= 0 ||
        (n = number_after(r, "Adreno")) >= 0)
        return n >= 700 ? GL_CLASS_ADRENO_7XX : GL_CLASS_ADRENO_6XX;
    if (strstr(r, "V3D") || strstr(r, "VC4") || strstr(r, "VideoCore"))
        return GL_CLASS_V3D;
    if (strstr(v, "NVIDIA") || strstr(r, "NVIDIA") || strstr(r, "GeForce") || strstr(r, "NV1") ||
        strstr(r, "nouveau"))
        return GL_CLASS_NVIDIA;
    if (strstr(v, "AMD") || strstr(r, "AMD") || strstr(r, "Radeon") || strstr(r, "radeonsi"))
        return GL_CLASS_AMD;
    if (strstr(v, "Intel") || strstr(r, "Intel"))
        return GL_CLASS_INTEL;
    return GL_CLASS_DEFAULT;
}

glesc_status gl_devclass_choose(glesc_context *ctx, const char *opt)
{
    const char *env = core_env("GLESC_DEVICE_CLASS");
    const char *name = opt && *opt ? opt : env && *env ? env : NULL;
    const glesc_caps *c = &ctx->caps;
    ctx->devclass = gl_devclass_detect(c->vendor, c->renderer, c->software);
    if (name && strcmp(name, "auto") && !gl_devclass_parse(name, &ctx->devclass)) {
        char list[256] = "auto";
        for (int i = 0; i < GL_CLASS_COUNT; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), ", %s", names[i]);
        return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "%s \"%s\" is no device class (%s)",
                            opt && *opt ? "device_class" : "GLESC_DEVICE_CLASS", name, list);
    }
    ctx->caps.device_class = gl_devclass_name(ctx->devclass);
    return GLESC_OK;
}
