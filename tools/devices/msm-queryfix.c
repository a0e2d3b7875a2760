/* msm-queryfix (tools/devices; run-shim.sh preloads it for freedreno, setup.sh
 * builds $SHIM_ROOT/msm-queryfix.so): preloaded before Mesa's libfreedreno_noop_drm_shim.so.
 * The shim answers DRM_IOCTL_MSM_SUBMITQUEUE_QUERY with a no-op that leaves
 * the caller's buffer unwritten, so freedreno's fault counter
 * (MSM_SUBMITQUEUE_PARAM_FAULTS) reads stack garbage and the driver reports
 * GL_GUILTY_CONTEXT_RESET on the first reset-status query. This zeroes the
 * answer ("no faults") and hands the call on to the shim. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>

struct msm_submitqueue_query {
    uint64_t data;
    uint32_t id, param, len, pad;
};

int ioctl(int fd, unsigned long request, ...)
{
    static int (*real)(int, unsigned long, ...);
    if (!real)
        real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (_IOC_TYPE(request) == 'd' && _IOC_NR(request) == 0x40 + 0x0C && arg &&
        _IOC_SIZE(request) == sizeof(struct msm_submitqueue_query)) {
        struct msm_submitqueue_query *q = arg;
        if (q->data && q->len && q->len <= 4096)
            memset((void *)(uintptr_t)q->data, 0, q->len);
    }
    return real(fd, request, arg);
}
