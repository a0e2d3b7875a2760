/*
 * gguf-synth — writes a random-weight GGUF model of a real shape for
 * benchmarks (tools/common/synth.h does the work): a preset such as
 * tinyllama-1.1b, with any hyperparameter overridden, in a llama.cpp file
 * type (llama-quantize's type per tensor, so Q4_K_M has its q6_k tensors)
 * and with standard tensor names and keys, so llama.cpp loads the same
 * file. The tokenizer is copied from --vocab FILE.gguf, or placeholder
 * tokens make a valid SentencePiece vocabulary of the model's size. On a
 * 16-core machine a 7B Q4_0 file takes seconds: tensors are generated and
 * quantized on all cores and streamed to the file one at a time.
 *
 * usage: gguf-synth [PRESET] -o FILE [--type T] [--vocab FILE.gguf] [overrides...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/args.h"
#include "common/synth.h"
#include "glesc_gguf.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: gguf-synth [PRESET] -o FILE [options]\n"
                 "Writes a GGUF model with random weights (llama, qwen2, qwen3, gemma2, gemma3 or\n"
                 "phi3 architecture).\n"
                 "  PRESET             a named shape (default: gguf-run's small demo model):");
    for (int i = 0; synth_preset_name(i); i++)
        fprintf(out, " %s", synth_preset_name(i));
    fprintf(out, "\n"
                 "  -o, --output FILE  the file to write\n"
                 "  -t, --type T       llama.cpp file type (default F16):");
    for (int f = SYNTH_FTYPE_NONE + 1; f < SYNTH_FTYPE_COUNT_; f++)
        fprintf(out, " %s", synth_ftype_name((synth_ftype)f));
    fprintf(out,
            "\n"
            "  --vocab FILE.gguf  copy the tokenizer (every tokenizer.* key) from this file;\n"
            "                     default: placeholder SentencePiece tokens of the preset's size\n"
            "  --seed N           random weights' seed (default 1)\n"
            "  --threads N        threads generating and quantizing (default: all cores)\n"
            "  --arch NAME        llama, qwen2 (q/k/v biases), qwen3 (q/k norms), gemma2,\n"
            "                     gemma3 (post-norms, GeGLU, local layers), phi3 (fused\n"
            "                     attn_qkv and gate|up)\n"
            "  --n-swa N          attention.sliding_window of gemma2/gemma3's local layers\n"
            "  --n-embd N, --n-layer N, --n-head N, --n-head-kv N, --n-ff N, --n-vocab N,\n"
            "  --n-ctx N, --head-dim N       hyperparameters\n"
            "  --rope-base F, --rms-eps F    rope.freq_base, layer_norm_rms_epsilon\n"
            "  --tied, --untied   output head shares token_embd (no output.weight) or not\n"
            "  --rope-freqs none|llama3      rope_freqs.weight (Llama 3.1/3.2's factors)\n"
            "  --name TEXT        general.name\n"
            "  -h, --help         this text\n");
}

/* Counts the tensors of each type in the written file ("q4_0 155, q6_k 1"). */
static void type_summary(const char *path, char *buf, size_t cap, uint64_t *params, uint64_t *bytes,
                         int64_t *n_tensors)
{
    glesc_gguf *f;
    buf[0] = 0;
    *params = *bytes = 0;
    *n_tensors = 0;
    if (glesc_gguf_open(path, &f) != GLESC_OK)
        return;
    int count[GLESC_DTYPE_COUNT_] = {0};
    *n_tensors = glesc_gguf_n_tensors(f);
    for (int64_t i = 0; i < *n_tensors; i++) {
        glesc_gguf_tensor_info ti;
        if (glesc_gguf_tensor(f, i, &ti) != GLESC_OK)
            continue;
        count[ti.type]++;
        *params += (uint64_t)(ti.ne[0] * ti.ne[1] * ti.ne[2] * ti.ne[3]);
        *bytes += ti.size;
    }
    size_t len = 0;
    for (int t = 0; t < GLESC_DTYPE_COUNT_; t++)
        if (count[t] && len < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s %d", len ? ", " : "",
                                    glesc_dtype_name((glesc_dtype)t), count[t]);
    glesc_gguf_close(f);
}

/* A hyperparameter flag: its bounds, the field it sets and the value given
 * (NULL: not given). */
typedef struct int_flag {
    const char *flag;
    int *field;
    long lo, hi;
    const char *value;
} int_flag;

/* The flags' values as given (NULL: not given; tied -1: neither --tied nor
 * --untied). */
typedef struct flags {
    const char *out, *preset;
    const char *seed, *rope_base, *rms_eps, *arch, *name;
    const char *type, *vocab, *rope_freqs;
    int tied;
} flags;

/* The command line into *f and ints[].value; -1 to go on, else the exit
 * status (0 after --help, 2 after a message). */
static int read_flags(int argc, char **argv, flags *f, int_flag *ints, int n_ints)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--tied") || !strcmp(a, "--untied")) {
            f->tied = !strcmp(a, "--tied");
            continue;
        }
        if (a[0] != '-') {
            if (f->preset) {
                fprintf(stderr, "gguf-synth: one preset only ('%s' and '%s')\n", f->preset, a);
                return 2;
            }
            f->preset = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gguf-synth: %s needs a value (gguf-synth --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        const char **slot = !strcmp(a, "-o") || !strcmp(a, "--output") ? &f->out
                            : !strcmp(a, "-t") || !strcmp(a, "--type") ? &f->type
                            : !strcmp(a, "--vocab")                    ? &f->vocab
                            : !strcmp(a, "--seed")                     ? &f->seed
                            : !strcmp(a, "--arch")                     ? &f->arch
                            : !strcmp(a, "--name")                     ? &f->name
                            : !strcmp(a, "--rope-base")                ? &f->rope_base
                            : !strcmp(a, "--rms-eps")                  ? &f->rms_eps
                            : !strcmp(a, "--rope-freqs")               ? &f->rope_freqs
                                                                       : NULL;
        for (int k = 0; !slot && k < n_ints; k++)
            if (!strcmp(a, ints[k].flag))
                slot = &ints[k].value;
        if (!slot) {
            fprintf(stderr, "gguf-synth: unknown option '%s' (gguf-synth --help)\n", a);
            return 2;
        }
        *slot = v;
    }
    return -1;
}

/* The preset, then the flags over it, into *p; 0, or 2 after a message. */
static int apply_flags(synth_params *p, const flags *f, const int_flag *ints, int n_ints)
{
    if (f->preset && !synth_params_preset(p, f->preset)) {
        fprintf(stderr, "gguf-synth: unknown preset '%s'; presets:", f->preset);
        for (int i = 0; synth_preset_name(i); i++)
            fprintf(stderr, " %s", synth_preset_name(i));
        fprintf(stderr, "\n");
        return 2;
    }
    p->ftype = SYNTH_FTYPE_F16;
    if (!f->out) {
        fprintf(stderr, "gguf-synth: no output file (-o FILE; gguf-synth --help)\n");
        return 2;
    }
    if (f->type && !(p->ftype = synth_ftype_find(f->type))) {
        fprintf(stderr, "gguf-synth: --type: '%s' is not one of", f->type);
        for (int t = SYNTH_FTYPE_NONE + 1; t < SYNTH_FTYPE_COUNT_; t++)
            fprintf(stderr, " %s", synth_ftype_name((synth_ftype)t));
        fprintf(stderr, "\n");
        return 2;
    }
    for (int k = 0; k < n_ints; k++) {
        long x;
        if (!ints[k].value)
            continue;
        if (tool_parse_long("gguf-synth", ints[k].flag, ints[k].value, ints[k].lo, ints[k].hi, &x))
            return 2;
        *ints[k].field = (int)x;
    }
    if (f->seed) {
        long x;
        if (tool_parse_long("gguf-synth", "--seed", f->seed, 0, 0x7fffffffL, &x))
            return 2;
        p->seed = (uint64_t)x;
    }
    if ((f->rope_base &&
         tool_parse_float("gguf-synth", "--rope-base", f->rope_base, &p->rope_base)) ||
        (f->rms_eps && tool_parse_float("gguf-synth", "--rms-eps", f->rms_eps, &p->rms_eps)))
        return 2;
    if (f->rope_freqs) {
        if (strcmp(f->rope_freqs, "none") && strcmp(f->rope_freqs, "llama3")) {
            fprintf(stderr, "gguf-synth: --rope-freqs: '%s' is not none or llama3\n",
                    f->rope_freqs);
            return 2;
        }
        p->rope_freqs =
            !strcmp(f->rope_freqs, "llama3") ? SYNTH_ROPE_FREQS_LLAMA3 : SYNTH_ROPE_FREQS_NONE;
    }
    if (f->arch)
        p->arch = f->arch;
    if (f->name)
        p->name = f->name;
    if (f->tied >= 0)
        p->tied_output = f->tied;
    p->vocab_path = f->vocab;
    return 0;
}

/* The heads divide n_embd (or --head-dim is set), the KV heads the heads,
 * and the head size is even; 0, or 2 after a message. */
static int check_heads(const synth_params *p)
{
    int hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    if (!p->head_dim && p->n_embd % p->n_head) {
        fprintf(stderr, "gguf-synth: n_embd %d is not a multiple of n_head %d (set --head-dim)\n",
                p->n_embd, p->n_head);
        return 2;
    }
    if (p->n_head % p->n_head_kv || hd % 2) {
        fprintf(stderr,
                "gguf-synth: n_head %d must be a multiple of n_head_kv %d and the head size %d "
                "even\n",
                p->n_head, p->n_head_kv, hd);
        return 2;
    }
    return 0;
}

/* Writes the model and says what was written; the exit status. */
static int write_model(const synth_params *p, const flags *f)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    glesc_status st = synth_write(p, f->out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-synth: %s: %s\n", f->out, synth_errmsg());
        return 1;
    }
    char types[256];
    uint64_t params, bytes;
    int64_t n_tensors;
    type_summary(f->out, types, sizeof types, &params, &bytes, &n_tensors);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(stderr,
            "gguf-synth: wrote %s: %s %s, %.2f %s params, %.2f MiB in %lld tensors (%s), "
            "%.1f s\n",
            f->out, f->preset ? f->preset : p->arch, synth_ftype_name(p->ftype),
            (double)params * (params >= 1000000000u ? 1e-9 : 1e-6),
            params >= 1000000000u ? "B" : "M", (double)bytes / 1048576.0, (long long)n_tensors,
            types, sec);
    return 0;
}

int main(int argc, char **argv)
{
    synth_params p;
    synth_params_default(&p);
    flags f = {.tied = -1};
    /* Hyperparameters are applied after the preset, whatever the order. */
    int_flag ints[] = {
        {"--n-embd", &p.n_embd, 1, 1 << 20, NULL},  {"--n-layer", &p.n_layer, 1, 4096, NULL},
        {"--n-head", &p.n_head, 1, 1 << 16, NULL},  {"--n-head-kv", &p.n_head_kv, 1, 1 << 16, NULL},
        {"--n-ff", &p.n_ff, 1, 1 << 22, NULL},      {"--n-vocab", &p.n_vocab, 260, 1 << 24, NULL},
        {"--n-ctx", &p.n_ctx, 1, 1 << 24, NULL},    {"--head-dim", &p.head_dim, 2, 1 << 16, NULL},
        {"--threads", &p.n_threads, 1, 4096, NULL}, {"--n-swa", &p.n_swa, 1, 1 << 24, NULL},
    };
    const int n_ints = (int)(sizeof ints / sizeof ints[0]);
    int rc = read_flags(argc, argv, &f, ints, n_ints);
    if (rc >= 0)
        return rc;
    if (apply_flags(&p, &f, ints, n_ints) || check_heads(&p))
        return 2;
    return write_model(&p, &f);
}
