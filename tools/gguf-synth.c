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

int main(int argc, char **argv)
{
    synth_params p;
    synth_params_default(&p);
    const char *out = NULL, *preset = NULL;
    /* Hyperparameters are applied after the preset, whatever the order. */
    struct {
        const char *flag;
        int *field;
        long lo, hi;
        const char *value;
    } ints[] = {
        {"--n-embd", &p.n_embd, 1, 1 << 20, NULL},  {"--n-layer", &p.n_layer, 1, 4096, NULL},
        {"--n-head", &p.n_head, 1, 1 << 16, NULL},  {"--n-head-kv", &p.n_head_kv, 1, 1 << 16, NULL},
        {"--n-ff", &p.n_ff, 1, 1 << 22, NULL},      {"--n-vocab", &p.n_vocab, 260, 1 << 24, NULL},
        {"--n-ctx", &p.n_ctx, 1, 1 << 24, NULL},    {"--head-dim", &p.head_dim, 2, 1 << 16, NULL},
        {"--threads", &p.n_threads, 1, 4096, NULL}, {"--n-swa", &p.n_swa, 1, 1 << 24, NULL},
    };
    const int n_ints = (int)(sizeof ints / sizeof ints[0]);
    const char *seed = NULL, *rope_base = NULL, *rms_eps = NULL, *arch = NULL, *name = NULL;
    const char *type = NULL, *vocab = NULL, *rope_freqs = NULL;
    int tied = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--tied") || !strcmp(a, "--untied")) {
            tied = !strcmp(a, "--tied");
            continue;
        }
        if (a[0] != '-') {
            if (preset) {
                fprintf(stderr, "gguf-synth: one preset only ('%s' and '%s')\n", preset, a);
                return 2;
            }
            preset = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gguf-synth: %s needs a value (gguf-synth --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        const char **slot = !strcmp(a, "-o") || !strcmp(a, "--output") ? &out
                            : !strcmp(a, "-t") || !strcmp(a, "--type") ? &type
                            : !strcmp(a, "--vocab")                    ? &vocab
                            : !strcmp(a, "--seed")                     ? &seed
                            : !strcmp(a, "--arch")                     ? &arch
                            : !strcmp(a, "--name")                     ? &name
                            : !strcmp(a, "--rope-base")                ? &rope_base
                            : !strcmp(a, "--rms-eps")                  ? &rms_eps
                            : !strcmp(a, "--rope-freqs")               ? &rope_freqs
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
    if (preset && !synth_params_preset(&p, preset)) {
        fprintf(stderr, "gguf-synth: unknown preset '%s'; presets:", preset);
        for (int i = 0; synth_preset_name(i); i++)
            fprintf(stderr, " %s", synth_preset_name(i));
        fprintf(stderr, "\n");
        return 2;
    }
    p.ftype = SYNTH_FTYPE_F16;
    if (!out) {
        fprintf(stderr, "gguf-synth: no output file (-o FILE; gguf-synth --help)\n");
        return 2;
    }
    if (type && !(p.ftype = synth_ftype_find(type))) {
        fprintf(stderr, "gguf-synth: --type: '%s' is not one of", type);
        for (int f = SYNTH_FTYPE_NONE + 1; f < SYNTH_FTYPE_COUNT_; f++)
            fprintf(stderr, " %s", synth_ftype_name((synth_ftype)f));
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
    if (seed) {
        long x;
        if (tool_parse_long("gguf-synth", "--seed", seed, 0, 0x7fffffffL, &x))
            return 2;
        p.seed = (uint64_t)x;
    }
    if ((rope_base && tool_parse_float("gguf-synth", "--rope-base", rope_base, &p.rope_base)) ||
        (rms_eps && tool_parse_float("gguf-synth", "--rms-eps", rms_eps, &p.rms_eps)))
        return 2;
    if (rope_freqs) {
        if (strcmp(rope_freqs, "none") && strcmp(rope_freqs, "llama3")) {
            fprintf(stderr, "gguf-synth: --rope-freqs: '%s' is not none or llama3\n", rope_freqs);
            return 2;
        }
        p.rope_freqs =
            !strcmp(rope_freqs, "llama3") ? SYNTH_ROPE_FREQS_LLAMA3 : SYNTH_ROPE_FREQS_NONE;
    }
    if (arch)
        p.arch = arch;
    if (name)
        p.name = name;
    if (tied >= 0)
        p.tied_output = tied;
    p.vocab_path = vocab;
    int hd = p.head_dim ? p.head_dim : p.n_embd / p.n_head;
    if (!p.head_dim && p.n_embd % p.n_head) {
        fprintf(stderr, "gguf-synth: n_embd %d is not a multiple of n_head %d (set --head-dim)\n",
                p.n_embd, p.n_head);
        return 2;
    }
    if (p.n_head % p.n_head_kv || hd % 2) {
        fprintf(stderr,
                "gguf-synth: n_head %d must be a multiple of n_head_kv %d and the head size %d "
                "even\n",
                p.n_head, p.n_head_kv, hd);
        return 2;
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    glesc_status st = synth_write(&p, out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-synth: %s: %s\n", out, synth_errmsg());
        return 1;
    }
    char types[256];
    uint64_t params, bytes;
    int64_t n_tensors;
    type_summary(out, types, sizeof types, &params, &bytes, &n_tensors);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(stderr,
            "gguf-synth: wrote %s: %s %s, %.2f %s params, %.2f MiB in %lld tensors (%s), "
            "%.1f s\n",
            out, preset ? preset : p.arch, synth_ftype_name(p.ftype),
            (double)params * (params >= 1000000000u ? 1e-9 : 1e-6),
            params >= 1000000000u ? "B" : "M", (double)bytes / 1048576.0, (long long)n_tensors,
            types, sec);
    return 0;
}
