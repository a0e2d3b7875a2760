/*
 * worker.c — the GPU thread: it creates the glesc context (the context is
 * current on one thread, so everything GL happens here), loads the model,
 * makes the slots, then loops: queued jobs go to idle slots (the slot whose
 * cache shares the longest prefix with the prompt, else the one idle
 * longest), and every busy slot runs one step in turn (slot.c), so N
 * requests advance together and a long prompt, taken a batch at a time,
 * does not stall the others' streams. Also the jobs' shared state
 * (reference counts, text handed over under the job's lock).
 *
 * Stopping: worker_stop refuses queued jobs (503) and lets the running
 * ones finish; with now (a second SIGTERM, or the grace time over) it
 * cancels them too; the thread then frees everything on itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/args.h"
#include "glesc-server/glesc-server.h"

/* ---- jobs ---- */

srv_job *job_new(void)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancelled, false);
    return j;
}

void job_unref(srv_job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    request_free(&j->req);
    glesc_tokens_free(j->prompt);
    glesc_text_free(j->gbnf);
    buf_free(&j->text);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void job_push_text(srv_job *j, const char *s, size_t n)
{
    if (!n)
        return;
    pthread_mutex_lock(&j->mu);
    if (!j->t_first_ns)
        j->t_first_ns = now_ns();
    buf_add(&j->text, s, n);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void job_finish(srv_job *j, const char *finish, const srv_error *err)
{
    pthread_mutex_lock(&j->mu);
    j->finish = finish;
    if (err)
        j->err = *err;
    if (j->text.oom && !j->err.status)
        srv_error_set(&j->err, 500, "server_error", NULL, "out of memory");
    j->done = true;
    j->t_done_ns = now_ns();
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* ---- loading ---- */

static bool abort_eval(void *user)
{
    srv *s = user;
    return s->evaluating && atomic_load(&s->evaluating->cancelled);
}

static int load_fail(srv *s, const char *what)
{
    snprintf(s->load_error, sizeof s->load_error, "%s: %s", what, glesc_last_errmsg());
    return -1;
}

/* The context, the model, the slots: on the worker thread. */
static int worker_load(srv *s)
{
    const srv_options *o = &s->opt;
    glesc_context_options co;
    glesc_context_options_init(&co);
    if (o->platform) {
        tool_parse_platform(o->platform, &co.platform);
        unsetenv("GLESC_PLATFORM"); /* the flag wins, --platform auto too */
    }
    co.device = o->device;
    co.cache_dir = o->cache_dir;
    if (o->limits && glesc_context_options_limits(&co, o->limits) != GLESC_OK)
        return load_fail(s, "--limits");
    if (glesc_context_create(&co, &s->ctx) != GLESC_OK)
        return load_fail(s, "no GPU context");
    glesc_context_set_abort_callback(s->ctx, abort_eval, s);
    if (glesc_model_load(s->ctx, o->model, NULL, &s->model) != GLESC_OK)
        return load_fail(s, "loading the model");
    glesc_model_info mi;
    glesc_model_get_info(s->model, &mi);
    s->tok = glesc_model_tokenizer(s->model);
    s->n_vocab_tok = glesc_tokenizer_n_vocab(s->tok);
    s->n_vocab_model = mi.n_vocab;
    snprintf(s->model_name, sizeof s->model_name, "%s", o->alias ? o->alias : mi.name);
    s->chat_template = o->chat_template ? glesc_chat_template_find(o->chat_template)
                                        : glesc_chat_template_detect(mi.chat_template);
    if (s->chat_template == GLESC_CHAT_NONE)
        s->chat_template = GLESC_CHAT_CHATML;
    s->n_slots = (int)o->n_parallel;
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    if (!s->slots)
        return load_fail(s, "out of memory");
    for (int i = 0; i < s->n_slots; i++)
        if (slot_init(s, &s->slots[i], i))
            return -1;
    s->slot_ctx = glesc_session_n_ctx(s->slots[0].sess);
    const glesc_caps *c = glesc_context_caps(s->ctx);
    glesc_dtype kt, vt;
    glesc_session_kv_types(s->slots[0].sess, &kt, &vt);
    fprintf(stderr,
            "glesc-server: %s (%s, %lld layers, %s weights) on %s; %d slots of %d positions "
            "(KV %s/%s), chat template %s\n",
            s->model_name, mi.arch, (long long)mi.n_layer, glesc_dtype_name(mi.weight_type),
            c->renderer, s->n_slots, (int)s->slot_ctx, glesc_dtype_name(kt), glesc_dtype_name(vt),
            glesc_chat_template_name(s->chat_template));
    return 0;
}

static void worker_unload(srv *s)
{
    for (int i = 0; s->slots && i < s->n_slots; i++)
        slot_free(&s->slots[i]);
    free(s->slots);
    s->slots = NULL;
    glesc_model_destroy(s->model);
    s->model = NULL;
    glesc_context_destroy(s->ctx);
    s->ctx = NULL;
}

/* ---- the queue (under s->mu) ---- */

static srv_job *queue_pop(srv *s)
{
    if (!s->q_len)
        return NULL;
    srv_job *j = s->queue[s->q_head];
    s->q_head = (s->q_head + 1) % s->q_cap;
    s->q_len--;
    atomic_store(&s->metrics.queue_depth, s->q_len);
    return j;
}

int worker_submit(srv *s, srv_job *j, srv_error *err)
{
    pthread_mutex_lock(&s->mu);
    int rc = -1;
    if (s->stopping)
        srv_error_set(err, 503, "unavailable_error", NULL, "the server is shutting down");
    else if (atomic_load(&s->state) != SRV_READY)
        srv_error_set(err, 503, "unavailable_error", NULL, "Loading model");
    else if (s->n_jobs >= s->q_cap) {
        srv_error_set(err, 503, "unavailable_error", NULL,
                      "the server is busy: %d slots generating and %d requests waiting "
                      "(--queue); try again",
                      (int)s->opt.n_parallel, s->q_len);
        atomic_fetch_add(&s->metrics.rejected_busy, 1);
    } else {
        atomic_fetch_add(&j->refs, 1);
        s->queue[(s->q_head + s->q_len) % s->q_cap] = j;
        s->q_len++;
        s->n_jobs++;
        atomic_store(&s->metrics.queue_depth, s->q_len);
        pthread_cond_signal(&s->cv);
        rc = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- scheduling ---- */

/* The idle slot for j: longest cached prefix, then least recently used. */
static srv_slot *slot_pick(srv *s, const srv_job *j)
{
    srv_slot *best = NULL;
    size_t best_len = 0;
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->job)
            continue;
        size_t p = slot_prefix(sl, j->prompt, j->n_prompt);
        if (!best || p > best_len || (p == best_len && sl->last_used < best->last_used)) {
            best = sl;
            best_len = p;
        }
    }
    return best;
}

static int busy_slots(const srv *s)
{
    int n = 0;
    for (int i = 0; i < s->n_slots; i++)
        n += s->slots[i].job != NULL;
    return n;
}

/* Moves queued jobs into idle slots (reserved: the slot's job is set, the
 * work of starting it is slot_assign's, outside the lock), appending those
 * slots to fresh[*n]; refuses queued jobs when stopping. Under s->mu. */
static void assign_jobs(srv *s, srv_slot **fresh, int *n)
{
    srv_error e;
    while (s->q_len) {
        srv_job *j = s->queue[s->q_head];
        if (s->stopping || atomic_load(&j->cancelled)) {
            queue_pop(s);
            srv_error_set(&e, 503, "unavailable_error", NULL,
                          s->stopping ? "the server is shutting down" : "cancelled");
            job_finish(j, NULL, &e);
            job_unref(j);
            s->n_jobs--;
            continue;
        }
        srv_slot *sl = slot_pick(s, j);
        if (!sl)
            break;
        queue_pop(s);
        sl->job = j;
        fresh[(*n)++] = sl;
    }
}

static void memory_snapshot(srv *s)
{
    glesc_memory_stats m;
    glesc_context_memory(s->ctx, &m);
    srv_metrics *mt = &s->metrics;
    atomic_store(&mt->gpu_total, m.total_bytes);
    atomic_store(&mt->gpu_persistent, m.persistent_bytes);
    atomic_store(&mt->gpu_activation, m.activation_bytes);
    atomic_store(&mt->gpu_cached, m.cached_bytes);
    uint64_t kv = 0;
    for (int i = 0; i < s->n_slots; i++)
        kv += glesc_session_kv_bytes(s->slots[i].sess);
    atomic_store(&mt->gpu_kv, kv);
}

static void slot_done(srv *s, srv_slot *sl)
{
    if (sl->job)
        return;
    memory_snapshot(s);
    pthread_mutex_lock(&s->mu);
    s->n_jobs--;
    pthread_mutex_unlock(&s->mu);
}

/* One step of every busy slot: greedy decode steps queued on the GPU
 * first, then the other slots' steps (prompts, sampled tokens) while the
 * GPU runs them, then the greedy tokens read. */
static void worker_round(srv *s, bool cancel_all)
{
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->job && cancel_all)
            atomic_store(&sl->job->cancelled, true);
        if (slot_greedy_ready(sl)) {
            slot_greedy_submit(s, sl);
            if (!sl->job)
                slot_done(s, sl);
        }
    }
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->job && !sl->greedy_queued) {
            slot_step(s, sl);
            slot_done(s, sl);
        }
    }
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->greedy_queued) {
            slot_greedy_collect(s, sl);
            slot_done(s, sl);
        }
    }
}

static void *worker_main(void *arg)
{
    srv *s = arg;
    int rc = worker_load(s);
    pthread_mutex_lock(&s->mu);
    s->created = (long long)time(NULL); /* before the state: HTTP threads read it after */
    atomic_store(&s->state, rc ? SRV_FAILED : SRV_READY);
    pthread_cond_broadcast(&s->ready_cv);
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        worker_unload(s);
        atomic_store(&s->exited, true);
        return NULL;
    }
    memory_snapshot(s);
    srv_slot **fresh = calloc((size_t)s->n_slots, sizeof *fresh);
    for (bool run = fresh != NULL; run;) {
        int n_fresh = 0;
        pthread_mutex_lock(&s->mu);
        assign_jobs(s, fresh, &n_fresh);
        int busy = busy_slots(s);
        while (!busy && !s->q_len && !s->stopping) {
            pthread_cond_wait(&s->cv, &s->mu);
            assign_jobs(s, fresh, &n_fresh);
            busy = busy_slots(s);
        }
        bool now = s->stop_now;
        run = busy || !s->stopping;
        pthread_mutex_unlock(&s->mu);
        atomic_store(&s->metrics.slots_busy, busy);
        for (int i = 0; i < n_fresh; i++) {
            slot_assign(s, fresh[i], fresh[i]->job);
            slot_done(s, fresh[i]); /* refused at once (its sampler) */
        }
        if (!run)
            break;
        worker_round(s, now);
        atomic_store(&s->metrics.slots_busy, busy_slots(s));
    }
    free(fresh);
    atomic_store(&s->metrics.slots_busy, 0);
    worker_unload(s);
    atomic_store(&s->exited, true);
    return NULL;
}

int worker_start(srv *s)
{
    /* Every job in the server can be queued at once (all slots idle). */
    s->q_cap = (int)(s->opt.queue + s->opt.n_parallel);
    s->queue = calloc((size_t)s->q_cap, sizeof *s->queue);
    if (!s->queue)
        return -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->ready_cv, NULL);
    return pthread_create(&s->thread, NULL, worker_main, s) ? -1 : 0;
}

void worker_stop(srv *s, bool now)
{
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    s->stop_now |= now;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void worker_join(srv *s)
{
    pthread_join(s->thread, NULL);
    free(s->queue);
    s->queue = NULL;
}
