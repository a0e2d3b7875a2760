/*
 * tokenizer.h — internal header of the tokenizer (src/llm/tokenizer/): its data
 * (shared by the SentencePiece and BPE encoders, the GGUF loader and the
 * decoder) and the small containers they use.
 *
 * The tokenizer follows llama.cpp's llama-vocab.cpp closely (same merge
 * order, same tie-breaking, same special-token partition), because its test
 * vectors and the models' expected prompts are what we must reproduce.
 */
#ifndef GLESC_LLM_TOKENIZER_H
#define GLESC_LLM_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "glesc_llm.h"

/* SentencePiece's space mark, U+2581 "▁". */
#define TOK_SP_MARK "\xe2\x96\x81"

/* ---- String table: strings in one arena, found by content, dense ids ---- */
typedef struct tok_strtab {
    char *arena;
    size_t arena_len, arena_cap;
    uint32_t *off, *len; /* per id */
    uint32_t n, cap;
    core_map map; /* 64-bit hash of the bytes → id */
} tok_strtab;

void tok_strtab_init(tok_strtab *t);
void tok_strtab_free(tok_strtab *t);
/* Id of s, or -1. */
int32_t tok_strtab_find(const tok_strtab *t, const char *s, size_t n);
/* Id of s, adding it when absent (*added says which). -1 on out-of-memory. */
int32_t tok_strtab_intern(tok_strtab *t, const char *s, size_t n, bool *added);
static inline const char *tok_strtab_str(const tok_strtab *t, int32_t id, size_t *n)
{
    *n = t->len[id];
    return t->arena + t->off[id];
}

/* ---- Growable id array with a sticky out-of-memory flag ---- */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
    bool oom;
} tok_ids;

void tok_ids_push(tok_ids *a, int32_t id);

/* ---- Token attributes (llama.cpp's llama_token_attr bits) ---- */
enum {
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
    TOK_ATTR_LSTRIP = 1 << 6, /* eat whitespace left of it when partitioning */
    TOK_ATTR_RSTRIP = 1 << 7, /* eat whitespace right of it */
};

typedef struct tok_info {
    float score;
    uint8_t type; /* glesc_token_type as stored */
    uint8_t attr; /* TOK_ATTR_* */
} tok_info;

/* The merge table's key of the pair (left, right). */
static inline uint64_t tok_merge_key(int32_t left, int32_t right)
{
    return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

/* A pre-tokenizer: llama.cpp's regex list for one tokenizer.ggml.pre value. */
typedef struct tok_pre_def {
    const char *name;    /* canonical name, e.g. "llama3" */
    const char *aliases; /* other tokenizer.ggml.pre values, '|'-separated */
    const char *const *regexes;
    bool clean_spaces;  /* llama.cpp's clean_spaces for this pre-tokenizer */
    bool ignore_merges; /* a word that is a whole token skips merging */
    bool add_bos;       /* default of add_bos_token */
} tok_pre_def;

struct glesc_tokenizer {
    glesc_tokenizer_kind kind;
    const tok_pre_def *pre; /* BPE only */
    uint32_t n_tokens;
    /* Strings: ids 0..n_tokens-1 are the tokens' texts (so a string id below
     * n_tokens is a token id); BPE appends merge halves that are no token. */
    tok_strtab strs;
    tok_info *info;
    /* Piece of every token as llama.cpp's token_to_piece(special = true)
     * gives it: piece_off has n_tokens + 1 entries. */
    char *pieces;
    uint32_t *piece_off;
    /* BPE merges: (left string id << 32 | right string id) → rank, and by
     * rank the string id of left+right. */
    core_map merges;
    int32_t *merge_result;
    uint32_t merge_result_cap;
    /* SPM: id of "<0xNN>" (or of the one-byte string) per byte, -1 if none.
     * BPE: id of the byte's gpt-2 character, -1 if none. */
    int32_t byte_tok[256];
    /* BPE pre-tokenizer, compiled (pcre2_code_8 *). */
    void **re;
    int n_re;
    /* Tokens the text partition looks for (control, user-defined, unknown),
     * longest first. */
    int32_t *specials;
    uint32_t n_specials;
    /* Per first byte, the specials (indices into specials) that start with
     * it: [0] user-defined only (plain text), [1] all of them (parse_special). */
    uint32_t sp_start[2][257];
    uint32_t *sp_list[2];
    uint8_t *eog; /* per token: ends generation */
    int32_t bos, eos, eot, eom, unk, sep, pad, nl;
    bool add_bos, add_eos, add_space_prefix, clean_spaces, ignore_merges;
    /* SPM: no token has "▁" after anything but "▁", so text can be merged
     * word by word (see spm.c). */
    bool spm_split;
};

/* ---- Building (tokenizer.c); the GGUF loader drives these ---- */
/* A tokenizer of kind with n_tokens empty slots. pre: BPE pre-tokenizer name
 * (NULL or "" → "default"); ignored for SPM. Error in err (NULL: thread's). */
glesc_status tok_create(glesc_tokenizer_kind kind, const char *pre, size_t pre_len,
                        uint32_t n_tokens, glesc_tokenizer **out);
/* Sets token id (called for every id 0..n_tokens-1, in order). */
glesc_status tok_set_token(glesc_tokenizer *t, uint32_t id, const char *text, size_t len,
                           float score, int type);
/* Adds merge number rank ("left right"). */
glesc_status tok_add_merge(glesc_tokenizer *t, uint32_t rank, const char *text, size_t len);
/* After the tokens, merges and the special ids/flags are set: builds the
 * caches, the special list, EOG set, byte tokens, newline id. */
glesc_status tok_finish(glesc_tokenizer *t, const char *model_name, size_t model_name_len);

/* ---- Encoders ---- */
/* SentencePiece on one fragment whose spaces are already "▁". */
bool tok_spm_encode(const glesc_tokenizer *t, const char *text, size_t len, tok_ids *out);
/* Byte-level BPE on one fragment (pre-tokenize, byte-encode, merge). */
bool tok_bpe_encode(const glesc_tokenizer *t, const char *text, size_t len, tok_ids *out);

/* BPE helpers (bpe.c) */
const tok_pre_def *tok_pre_find(const char *name, size_t len);
glesc_status tok_bpe_compile(glesc_tokenizer *t);
void tok_bpe_release(glesc_tokenizer *t);
/* gpt-2's bytes_to_unicode: the UTF-8 (1-2 bytes) of byte b's character. */
size_t tok_byte_to_utf8(uint8_t b, char out[2]);
/* The byte whose gpt-2 character is cp, or -1. */
int tok_cp_to_byte(uint32_t cp);

/* Lenient UTF-8 as llama.cpp reads it: length from the first byte's high
 * bits (1..4), clamped to what is left. */
static inline size_t tok_utf8_len(unsigned char c)
{
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

#endif /* GLESC_LLM_TOKENIZER_H */
