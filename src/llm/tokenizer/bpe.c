/*
 * bpe.c — byte-level BPE ("gpt2" vocabularies): the pre-tokenizer
 * regexes chosen by tokenizer.ggml.pre, gpt-2's byte-to-character mapping,
 * and rank-ordered merging within each pre-token (word).
 *
 * Pre-tokenizing follows llama.cpp's unicode_regex_split: the regexes of a
 * pre-tokenizer run in sequence, each one splitting every piece left by the
 * previous one into its matches and the gaps between them (gaps are kept as
 * pieces). llama.cpp runs std::regex over text in which every non-ASCII
 * whitespace character is replaced by U+000B; we do the same substitution
 * and run PCRE2 (UTF, UCP: \p{..} and \s are Unicode-aware; "$" only at the
 * end of a piece). Invalid UTF-8 becomes U+FFFD, as in llama.cpp.
 *
 * The regex strings are llama.cpp's (src/llama-vocab.cpp), non-ASCII
 * characters written as \x{..} escapes.
 */
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include "llm/tokenizer/tokenizer.h"

/* ---- gpt-2's bytes_to_unicode, computed rather than tabled: printable
 * bytes '!'..'~', '¡'..'¬', '®'..'ÿ' stand for themselves; the 68 others take
 * U+0100.. in byte order (0x00-0x20 → U+0100-U+0120, 0x7F-0xA0 →
 * U+0121-U+0142, 0xAD → U+0143). ---- */

static uint32_t byte_cp(uint8_t b)
{
    if (b <= 0x20)
        return 0x100u + b;
    if (b >= 0x7f && b <= 0xa0)
        return b + 162u;
    if (b == 0xad)
        return 0x143;
    return b;
}

size_t tok_byte_to_utf8(uint8_t b, char out[2])
{
    uint32_t cp = byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp >= 0x100 && cp <= 0x120)
        return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142)
        return (int)(cp - 162);
    if (cp == 0x143)
        return 0xad;
    if ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae && cp <= 0xff))
        return (int)cp;
    return -1;
}

/* ---- Pre-tokenizers ---- */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

static const char *const re_default[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+",
                                         "[0-9][0-9][0-9]", NULL};
static const char *const re_gpt2[] = {RE_GPT2, NULL};
static const char *const re_llama3[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_qwen2[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_deepseek_llm[] = {
    "[\r\n]",
    "\\s?["
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}"
    "-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}"
    "-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}"
    "-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"
    "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}"
    "-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}"
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}"
    "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}"
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}"
    "-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
    "\\x{1E900}-\\x{1E943}"
    "]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    RE_CJK,
    "\\p{N}+",
    NULL};
static const char *const re_deepseek_coder[] = {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                                                RE_CJK,   "\\p{N}",      NULL};
static const char *const re_deepseek_v3[] = {
    "\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_falcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]",
                                        NULL};
static const char *const re_starcoder[] = {"\\p{N}", RE_GPT2, NULL};
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"
static const char *const re_bloom[] = {RE_BLOOM, NULL};
static const char *const re_viking[] = {RE_BLOOM, "\\p{N}", NULL};
static const char *const re_tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?"
    "((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" RE_CONTRACTIONS
    "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" RE_CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};

/* name, aliases, regexes, clean_spaces, ignore_merges, add_bos (llama.cpp's
 * settings for each tokenizer.ggml.pre value). */
static const tok_pre_def pre_defs[] = {
    {"default", "", re_default, true, false, false},
    {"gpt-2",
     "gpt2|phi-2|mpt|olmo|jais|jina-es|jina-de|jina-v2-es|jina-v2-de|gigachat|a.x-4.0|mellum|"
     "modern-bert|exaone4",
     re_gpt2, true, false, false},
    {"trillion", "granite-docling", re_gpt2, false, false, false},
    {"llama3", "llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", re_llama3, true, true,
     true},
    {"dbrx", "smaug-bpe", re_llama3, true, false, false},
    {"qwen2", "deepseek-r1-qwen|kormo|f2llmv2|hunyuan", re_qwen2, false, false, false},
    {"stablelm2", "megrez", re_qwen2, true, false, false},
    {"deepseek-llm", "", re_deepseek_llm, false, false, false},
    {"deepseek-coder", "", re_deepseek_coder, false, false, false},
    {"deepseek-v3", "", re_deepseek_v3, false, false, false},
    {"falcon", "", re_falcon, true, false, false},
    {"starcoder", "refact|codeshell|exaone|minerva-7b", re_starcoder, true, false, false},
    {"command-r", "smollm", re_starcoder, false, false, false},
    {"bloom", "gpt3-finnish", re_bloom, true, false, false},
    {"poro-chat", "", re_bloom, false, false, false},
    {"viking", "", re_viking, false, false, false},
    {"tekken", "", re_tekken, false, true, true},
    {"gpt-4o", "llama4", re_gpt4o, false, false, false},
};

const tok_pre_def *tok_pre_find(const char *name, size_t len)
{
    for (size_t i = 0; i < CORE_ARRAY_LEN(pre_defs); i++) {
        const tok_pre_def *d = &pre_defs[i];
        if (strlen(d->name) == len && memcmp(d->name, name, len) == 0)
            return d;
        for (const char *a = d->aliases; *a;) {
            const char *bar = strchr(a, '|');
            size_t n = bar ? (size_t)(bar - a) : strlen(a);
            if (n == len && memcmp(a, name, len) == 0)
                return d;
            a += n + (bar ? 1 : 0);
        }
    }
    return NULL;
}

/* PCRE2 allocates through glesc's hook too. */
static void *pcre_alloc(size_t size, void *user)
{
    (void)user;
    return core_malloc(size);
}

static void pcre_free(void *p, void *user)
{
    (void)user;
    core_free(p);
}

typedef struct bpe_regexes {
    pcre2_general_context *gctx;
    int n;
    pcre2_code *code[];
} bpe_regexes;

glesc_status tok_bpe_compile(glesc_tokenizer *t)
{
    int n = 0;
    while (t->pre->regexes[n])
        n++;
    bpe_regexes *r = core_calloc(1, sizeof *r + (size_t)n * sizeof r->code[0]);
    if (!r)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->re = (void **)r;
    r->gctx = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    if (!r->gctx)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    pcre2_compile_context *cctx = pcre2_compile_context_create(r->gctx);
    if (!cctx)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    for (int i = 0; i < n; i++) {
        int errcode;
        PCRE2_SIZE erroff;
        r->code[i] =
            pcre2_compile((PCRE2_SPTR)t->pre->regexes[i], PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &errcode, &erroff, cctx);
        if (!r->code[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(errcode, msg, sizeof msg);
            pcre2_compile_context_free(cctx);
            return core_err_set(NULL, GLESC_ERROR_UNSUPPORTED,
                                "tokenizer.ggml.pre '%s': regex %d does not compile at offset "
                                "%zu: %s",
                                t->pre->name, i, (size_t)erroff, (const char *)msg);
        }
        r->n = i + 1;
        /* JIT where the library has it; the interpreter otherwise. */
        (void)pcre2_jit_compile(r->code[i], PCRE2_JIT_COMPLETE);
    }
    pcre2_compile_context_free(cctx);
    t->n_re = n;
    return GLESC_OK;
}

void tok_bpe_release(glesc_tokenizer *t)
{
    bpe_regexes *r = (bpe_regexes *)t->re;
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        pcre2_code_free(r->code[i]);
    pcre2_general_context_free(r->gctx);
    core_free(r);
    t->re = NULL;
}

/* ---- Pre-tokenizing ---- */

/* llama.cpp's lenient UTF-8 decoding (unicode_cpt_from_utf8): no checks for
 * overlongs or surrogates; a bad sequence yields U+FFFD for one byte. */
static uint32_t decode_cp(const unsigned char *s, size_t n, size_t *adv)
{
    unsigned char c = s[0];
    if (!(c & 0x80)) {
        *adv = 1;
        return c;
    }
    if ((c & 0x40) && !(c & 0x20) && n >= 2 && (s[1] & 0xc0) == 0x80) {
        *adv = 2;
        return ((c & 0x1fu) << 6) | (s[1] & 0x3fu);
    }
    if ((c & 0x60) == 0x60 && !(c & 0x10) && n >= 3 && (s[1] & 0xc0) == 0x80 &&
        (s[2] & 0xc0) == 0x80) {
        *adv = 3;
        return ((c & 0x0fu) << 12) | ((s[1] & 0x3fu) << 6) | (s[2] & 0x3fu);
    }
    if ((c & 0x70) == 0x70 && !(c & 0x08) && n >= 4 && (s[1] & 0xc0) == 0x80 &&
        (s[2] & 0xc0) == 0x80 && (s[3] & 0xc0) == 0x80) {
        *adv = 4;
        return ((c & 0x07u) << 18) | ((s[1] & 0x3fu) << 12) | ((s[2] & 0x3fu) << 6) |
               (s[3] & 0x3fu);
    }
    *adv = 1;
    return 0xfffd;
}

/* Encodes cp as llama.cpp does, also for values PCRE2 would refuse
 * (surrogates, > U+10FFFF: four bytes from the low 21 bits). */
static size_t encode_cp(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | ((cp >> 18) & 0x07));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static bool is_unicode_space(uint32_t cp)
{
    if (cp == 0x85)
        return true;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

/* Scratch for one fragment. */
typedef struct bpe_scratch {
    uint32_t *cps;
    uint32_t *moff;             /* byte offset of each code point in mt (n + 1) */
    char *mt;                   /* text the regexes see */
    uint32_t *bounds, *nbounds; /* piece boundaries (code point indices), and the next ones */
    size_t n_bounds, cap_bounds, cap_nbounds;
    char *word; /* byte-encoded word */
    size_t word_cap;
    struct bpe_sym *syms;
    size_t syms_cap;
    struct bpe_bigram *heap;
    size_t heap_n, heap_cap;
    pcre2_match_data *md;
} bpe_scratch;

typedef struct bpe_sym {
    uint32_t start, n;
    int32_t sid; /* string id, -1 when the text is in no table */
    int32_t prev, next;
} bpe_sym;

typedef struct bpe_bigram {
    uint32_t rank;
    int32_t left, right;
    uint32_t ln, rn; /* sizes when pushed: a change means the pair is stale */
} bpe_bigram;

static bool push_bound(uint32_t **v, size_t *n, size_t *cap, uint32_t x)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        uint32_t *p = core_realloc(*v, c * sizeof *p);
        if (!p)
            return false;
        *v = p;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return true;
}

/* Code point index of byte offset off (a character boundary) in moff[lo..hi]. */
static uint32_t cp_of(const uint32_t *moff, uint32_t lo, uint32_t hi, uint32_t off)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (moff[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Runs regex code over every current piece, leaving the new boundaries. */
static bool split_pieces(bpe_scratch *s, const pcre2_code *code)
{
    size_t nn = 0;
    bool ok = push_bound(&s->nbounds, &nn, &s->cap_nbounds, 0);
    for (size_t i = 0; ok && i + 1 < s->n_bounds; i++) {
        uint32_t a = s->bounds[i], b = s->bounds[i + 1];
        PCRE2_SPTR subj = (PCRE2_SPTR)(s->mt + s->moff[a]);
        PCRE2_SIZE slen = s->moff[b] - s->moff[a];
        PCRE2_SIZE start = 0;
        uint32_t last = a;
        while (ok && start < slen) {
            int rc = pcre2_match(code, subj, slen, start, PCRE2_NO_UTF_CHECK, s->md, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(code, subj, slen, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, s->md,
                                 NULL);
            if (rc < 0)
                break; /* no match (or a resource limit: the rest stays one piece) */
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            PCRE2_SIZE ms = ov[0], me = ov[1];
            if (me <= ms) {
                /* An empty match: step over one character. */
                start = ms + tok_utf8_len(subj[ms]);
                continue;
            }
            uint32_t cs = cp_of(s->moff, a, b, (uint32_t)(s->moff[a] + ms));
            uint32_t ce = cp_of(s->moff, a, b, (uint32_t)(s->moff[a] + me));
            if (cs > last)
                ok = push_bound(&s->nbounds, &nn, &s->cap_nbounds, cs);
            ok = ok && push_bound(&s->nbounds, &nn, &s->cap_nbounds, ce);
            last = ce;
            start = me;
        }
        if (ok && last < b)
            ok = push_bound(&s->nbounds, &nn, &s->cap_nbounds, b);
    }
    if (!ok)
        return false;
    uint32_t *tmp = s->bounds;
    size_t tmp_cap = s->cap_bounds;
    s->bounds = s->nbounds;
    s->cap_bounds = s->cap_nbounds;
    s->n_bounds = nn;
    s->nbounds = tmp;
    s->cap_nbounds = tmp_cap;
    return true;
}

/* ---- Merging ---- */

static bool bigram_before(const bpe_bigram *a, const bpe_bigram *b)
{
    if (a->rank != b->rank)
        return a->rank < b->rank;
    return a->left < b->left;
}

static bool heap_push(bpe_scratch *s, bpe_bigram x)
{
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 256;
        bpe_bigram *v = core_realloc(s->heap, cap * sizeof *v);
        if (!v)
            return false;
        s->heap = v;
        s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&x, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = x;
    return true;
}

static bpe_bigram heap_pop(bpe_scratch *s)
{
    bpe_bigram top = s->heap[0];
    bpe_bigram x = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bigram_before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!bigram_before(&s->heap[c], &x))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = x;
    return top;
}

static bool add_bigram(const glesc_tokenizer *t, bpe_scratch *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return true;
    const bpe_sym *a = &s->syms[l], *b = &s->syms[r];
    uint32_t rank;
    if (a->sid < 0 || b->sid < 0 || !core_map_get(&t->merges, tok_merge_key(a->sid, b->sid), &rank))
        return true;
    return heap_push(s, (bpe_bigram){rank, l, r, a->n, b->n});
}

static int32_t find_token(const glesc_tokenizer *t, const char *s, size_t n)
{
    int32_t id = tok_strtab_find(&t->strs, s, n);
    return id >= 0 && (uint32_t)id < t->n_tokens ? id : -1;
}

/* Merges one byte-encoded word w[0..n) and appends its ids. */
static bool merge_word(const glesc_tokenizer *t, bpe_scratch *s, const char *w, size_t n,
                       tok_ids *out)
{
    if (t->ignore_merges) {
        int32_t id = find_token(t, w, n);
        if (id >= 0) {
            tok_ids_push(out, id);
            return true;
        }
    }
    if (n > s->syms_cap) {
        bpe_sym *v = core_realloc(s->syms, n * sizeof *v);
        if (!v)
            return false;
        s->syms = v;
        s->syms_cap = n;
    }
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t k = CORE_MIN(tok_utf8_len((unsigned char)w[off]), n - off);
        s->syms[ns] = (bpe_sym){(uint32_t)off, (uint32_t)k, tok_strtab_find(&t->strs, w + off, k),
                                ns - 1, off + k == n ? -1 : ns + 1};
        ns++;
        off += k;
    }
    s->heap_n = 0;
    for (int32_t i = 1; i < ns; i++)
        if (!add_bigram(t, s, i - 1, i))
            return false;
    while (s->heap_n) {
        bpe_bigram b = heap_pop(s);
        bpe_sym *l = &s->syms[b.left], *r = &s->syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n != b.ln || r->n != b.rn)
            continue; /* stale */
        l->n += r->n;
        l->sid = t->merge_result[b.rank];
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->syms[r->next].prev = b.left;
        if (!add_bigram(t, s, l->prev, b.left) || !add_bigram(t, s, b.left, l->next))
            return false;
    }
    for (int32_t i = 0; i != -1; i = s->syms[i].next) {
        const bpe_sym *y = &s->syms[i];
        if (y->sid >= 0 && (uint32_t)y->sid < t->n_tokens) {
            tok_ids_push(out, y->sid);
            continue;
        }
        /* Not a token: its single bytes, where those are tokens (llama.cpp). */
        for (uint32_t j = 0; j < y->n; j++) {
            int32_t id = find_token(t, w + y->start + j, 1);
            if (id >= 0)
                tok_ids_push(out, id);
        }
    }
    return true;
}

static void scratch_free(bpe_scratch *s)
{
    core_free(s->cps);
    core_free(s->moff);
    core_free(s->mt);
    core_free(s->bounds);
    core_free(s->nbounds);
    core_free(s->word);
    core_free(s->syms);
    core_free(s->heap);
    if (s->md)
        pcre2_match_data_free(s->md);
}

bool tok_bpe_encode(const glesc_tokenizer *t, const char *text, size_t len, tok_ids *out)
{
    if (len == 0)
        return true;
    if (len > UINT32_MAX / 8)
        return false;
    const bpe_regexes *re = (const bpe_regexes *)t->re;
    bpe_scratch s = {0};
    bool ok = false;
    s.cps = core_malloc(len * sizeof *s.cps);
    s.moff = core_malloc((len + 1) * sizeof *s.moff);
    s.mt = core_malloc(len * 3 + 4);
    s.md = pcre2_match_data_create(1, re->gctx);
    if (!s.cps || !s.moff || !s.mt || !s.md)
        goto done;

    /* Code points, and the text the regexes see. */
    const unsigned char *u = (const unsigned char *)text;
    uint32_t n = 0;
    size_t mlen = 0;
    for (size_t off = 0; off < len;) {
        size_t adv;
        uint32_t cp = decode_cp(u + off, len - off, &adv);
        off += adv;
        uint32_t mcp = cp;
        if (cp >= 0x80 && is_unicode_space(cp))
            mcp = 0x0b;
        else if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            mcp = 0xfffd;
        s.cps[n] = cp;
        s.moff[n] = (uint32_t)mlen;
        mlen += encode_cp(mcp, s.mt + mlen);
        n++;
    }
    s.moff[n] = (uint32_t)mlen;

    if (!push_bound(&s.bounds, &s.n_bounds, &s.cap_bounds, 0) ||
        !push_bound(&s.bounds, &s.n_bounds, &s.cap_bounds, n))
        goto done;
    for (int i = 0; i < re->n; i++)
        if (!split_pieces(&s, re->code[i]))
            goto done;

    /* Each piece: its UTF-8 (from the code points), byte-encoded, merged. */
    for (size_t i = 0; i + 1 < s.n_bounds; i++) {
        uint32_t a = s.bounds[i], b = s.bounds[i + 1];
        size_t need = (size_t)(b - a) * 8;
        if (need > s.word_cap) {
            char *w = core_realloc(s.word, need);
            if (!w)
                goto done;
            s.word = w;
            s.word_cap = need;
        }
        size_t wl = 0;
        for (uint32_t k = a; k < b; k++) {
            char utf[4];
            size_t m = encode_cp(s.cps[k], utf);
            for (size_t j = 0; j < m; j++)
                wl += tok_byte_to_utf8((uint8_t)utf[j], s.word + wl);
        }
        if (!merge_word(t, &s, s.word, wl, out))
            goto done;
    }
    ok = !out->oom;
done:
    scratch_free(&s);
    return ok;
}
