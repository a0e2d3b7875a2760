/*
 * main.c — glesc-server's start and stop. Signals are blocked in every
 * thread and taken here with sigtimedwait, so no handler runs inside the
 * GPU or HTTP code. The first SIGTERM (or SIGINT) stops the listening
 * socket and the queue (waiting requests get 503), lets the running
 * generations finish for up to SHUTDOWN_GRACE_S seconds, then cancels
 * what is left; a second signal cancels at once. The process exits 0 after
 * the streams have ended and the GPU thread has freed the model, 1 when
 * the model did not load.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "glesc-server/glesc-server.h"

#define SHUTDOWN_GRACE_S 30

int main(int argc, char **argv)
{
    static srv s; /* large, and the threads' shared state */
    int rc = options_parse(argc, argv, &s.opt);
    if (rc >= 0)
        return rc;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* inherited by every thread made from here */
    signal(SIGPIPE, SIG_IGN);
    if (worker_start(&s)) {
        fprintf(stderr, "glesc-server: cannot start the GPU thread\n");
        return 1;
    }
    if (http_start(&s)) {
        worker_stop(&s, true);
        worker_join(&s);
        return 1;
    }
    int signals = 0;
    bool announced = false;
    uint64_t deadline = 0;
    rc = 0;
    while (!atomic_load(&s.exited)) {
        int sig = sigtimedwait(&set, NULL, &(struct timespec){0, 100000000L});
        if (sig > 0 && ++signals == 1) {
            fprintf(stderr,
                    "glesc-server: %s: finishing the running requests (again: cancel "
                    "them)\n",
                    strsignal(sig));
            http_quiesce(&s);
            worker_stop(&s, false);
            deadline = now_ns() + (uint64_t)SHUTDOWN_GRACE_S * 1000000000u;
        } else if (sig > 0 || (signals && now_ns() > deadline)) {
            worker_stop(&s, true);
        }
        int state = atomic_load(&s.state);
        if (state == SRV_READY && !announced) {
            fprintf(stderr, "glesc-server: ready\n");
            announced = true;
        }
        if (state == SRV_FAILED) {
            fprintf(stderr, "glesc-server: %s\n", s.load_error);
            rc = 1;
            break;
        }
    }
    worker_join(&s);
    http_stop(&s);
    fprintf(stderr, "glesc-server: stopped\n");
    return rc;
}
