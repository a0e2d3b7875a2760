/*
 * chat.c — chat templates (glesc_llm.h): llama.cpp's built-in formats
 * (src/llama-chat.cpp) and its detection heuristic, byte for byte, so a
 * model's conversation is laid out exactly as llama.cpp lays it out. No
 * Jinja is evaluated: a model's tokenizer.chat_template only picks the
 * format by the markers it contains.
 */
#include <string.h>

#include "core/core.h"
#include "glesc_llm.h"

/* Names: one row per enum value (llama.cpp's names). */
static const char *const names[GLESC_CHAT_COUNT_] = {
    [GLESC_CHAT_NONE] = NULL,
    [GLESC_CHAT_CHATML] = "chatml",
    [GLESC_CHAT_LLAMA2] = "llama2",
    [GLESC_CHAT_LLAMA2_SYS] = "llama2-sys",
    [GLESC_CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [GLESC_CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [GLESC_CHAT_MISTRAL_V1] = "mistral-v1",
    [GLESC_CHAT_MISTRAL_V3] = "mistral-v3",
    [GLESC_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [GLESC_CHAT_MISTRAL_V7] = "mistral-v7",
    [GLESC_CHAT_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [GLESC_CHAT_PHI3] = "phi3",
    [GLESC_CHAT_PHI4] = "phi4",
    [GLESC_CHAT_FALCON3] = "falcon3",
    [GLESC_CHAT_ZEPHYR] = "zephyr",
    [GLESC_CHAT_MONARCH] = "monarch",
    [GLESC_CHAT_GEMMA] = "gemma",
    [GLESC_CHAT_ORION] = "orion",
    [GLESC_CHAT_OPENCHAT] = "openchat",
    [GLESC_CHAT_VICUNA] = "vicuna",
    [GLESC_CHAT_VICUNA_ORCA] = "vicuna-orca",
    [GLESC_CHAT_DEEPSEEK] = "deepseek",
    [GLESC_CHAT_DEEPSEEK2] = "deepseek2",
    [GLESC_CHAT_DEEPSEEK3] = "deepseek3",
    [GLESC_CHAT_COMMAND_R] = "command-r",
    [GLESC_CHAT_LLAMA3] = "llama3",
    [GLESC_CHAT_LLAMA4] = "llama4",
    [GLESC_CHAT_GRANITE] = "granite",
    [GLESC_CHAT_EXAONE3] = "exaone3",
    [GLESC_CHAT_MEGREZ] = "megrez",
};
_Static_assert(CORE_ARRAY_LEN(names) == GLESC_CHAT_COUNT_, "one name per template");

GLESC_API const char *glesc_chat_template_name(glesc_chat_template t)
{
    return (int)t > 0 && t < GLESC_CHAT_COUNT_ ? names[t] : NULL;
}

GLESC_API glesc_chat_template glesc_chat_template_find(const char *name)
{
    for (int i = 1; name && i < GLESC_CHAT_COUNT_; i++)
        if (!strcmp(names[i], name))
            return (glesc_chat_template)i;
    return GLESC_CHAT_NONE;
}

/* llama.cpp's llm_chat_detect_template, in its order, for the formats here. */
GLESC_API glesc_chat_template glesc_chat_template_detect(const char *t)
{
    if (!t)
        return GLESC_CHAT_NONE;
    glesc_chat_template byname = glesc_chat_template_find(t);
    if (byname != GLESC_CHAT_NONE)
        return byname;
#define HAS(s) (strstr(t, s) != NULL)
    if (HAS("<|im_start|>"))
        return HAS("<|im_sep|>")           ? GLESC_CHAT_PHI4
               : HAS("<end_of_utterance>") ? GLESC_CHAT_NONE /* SmolVLM: not chatml */
                                           : GLESC_CHAT_CHATML;
    if (!strncmp(t, "mistral", 7) || HAS("[INST]")) {
        if (HAS("[SYSTEM_PROMPT]"))
            return GLESC_CHAT_MISTRAL_V7;
        if (HAS("' [INST] ' + system_message") || HAS("[AVAILABLE_TOOLS]")) {
            if (HAS(" [INST]"))
                return GLESC_CHAT_MISTRAL_V1;
            if (HAS("\"[INST]\""))
                return GLESC_CHAT_MISTRAL_V3_TEKKEN;
            return GLESC_CHAT_MISTRAL_V3;
        }
        if (HAS("content.strip()"))
            return GLESC_CHAT_LLAMA2_SYS_STRIP;
        if (HAS("bos_token + '[INST]"))
            return GLESC_CHAT_LLAMA2_SYS_BOS;
        if (HAS("<<SYS>>"))
            return GLESC_CHAT_LLAMA2_SYS;
        return GLESC_CHAT_LLAMA2;
    }
    if (HAS("<|assistant|>") && HAS("<|end|>"))
        return GLESC_CHAT_PHI3;
    if (HAS("[gMASK]<sop>"))
        return GLESC_CHAT_NONE; /* chatglm4: not here */
    if (HAS("<|assistant|>") && HAS("<|user|>"))
        return HAS("</s>") ? GLESC_CHAT_FALCON3 : GLESC_CHAT_NONE /* glmedge */;
    if (HAS("<|user|>") && HAS("<|endoftext|>"))
        return GLESC_CHAT_ZEPHYR;
    if (HAS("bos_token + message['role']"))
        return GLESC_CHAT_MONARCH;
    if (HAS("<start_of_turn>"))
        return GLESC_CHAT_GEMMA;
    if (HAS("'\\n\\nAssistant: ' + eos_token"))
        return GLESC_CHAT_ORION;
    if (HAS("GPT4 Correct "))
        return GLESC_CHAT_OPENCHAT;
    if (HAS("USER: ") && HAS("ASSISTANT: "))
        return HAS("SYSTEM: ") ? GLESC_CHAT_VICUNA_ORCA : GLESC_CHAT_VICUNA;
    if (HAS("### Instruction:") && HAS("<|EOT|>"))
        return GLESC_CHAT_DEEPSEEK;
    if (HAS("<|START_OF_TURN_TOKEN|>") && HAS("<|USER_TOKEN|>"))
        return GLESC_CHAT_COMMAND_R;
    if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>"))
        return GLESC_CHAT_LLAMA3;
    if (HAS("'Assistant: ' + message['content'] + eos_token"))
        return GLESC_CHAT_DEEPSEEK2;
    if (HAS("<\xef\xbd\x9c"
            "Assistant\xef\xbd\x9c>") &&
        HAS("<\xef\xbd\x9cUser\xef\xbd\x9c>") &&
        HAS("<\xef\xbd\x9c"
            "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"))
        return GLESC_CHAT_DEEPSEEK3;
    if (HAS("[|system|]") && HAS("[|assistant|]") && HAS("[|endofturn|]"))
        return HAS("[|tool|]") ? GLESC_CHAT_NONE /* exaone4 */ : GLESC_CHAT_EXAONE3;
    if (HAS("<|start_of_role|>"))
        return GLESC_CHAT_GRANITE;
    if (HAS("<|role_start|>"))
        return GLESC_CHAT_MEGREZ;
    if (HAS("<|header_start|>") && HAS("<|header_end|>"))
        return GLESC_CHAT_LLAMA4;
#undef HAS
    return GLESC_CHAT_NONE;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Appends s, or s without leading and trailing white space when trim. */
static void put(sbuf *b, const char *s, bool trim)
{
    size_t n = strlen(s);
    if (trim) {
        while (n && is_space(*s)) {
            s++;
            n--;
        }
        while (n && is_space(s[n - 1]))
            n--;
    }
    sbuf_appendn(b, s, n);
}

/* "<|" role "|>" style pieces */
static void put3(sbuf *b, const char *a, const char *m, const char *c)
{
    sbuf_append(b, a);
    sbuf_append(b, m);
    sbuf_append(b, c);
}

#define DS_BAR "\xef\xbd\x9c" /* U+FF5C FULLWIDTH VERTICAL LINE */
#define DS_EOS "<" DS_BAR "end\xe2\x96\x81of\xe2\x96\x81sentence" DS_BAR ">"

/* Formats whose every message is a header around its role, its content
 * (trimmed or not) and an end; the assistant's header follows with
 * add_ass. */
typedef struct chat_headed {
    const char *pre, *post, *end, *assistant;
    bool trim;
} chat_headed;

static const chat_headed headed[GLESC_CHAT_COUNT_] = {
    [GLESC_CHAT_CHATML] = {"<|im_start|>", "\n", "<|im_end|>\n", "<|im_start|>assistant\n", false},
    [GLESC_CHAT_PHI3] = {"<|", "|>\n", "<|end|>\n", "<|assistant|>\n", false},
    [GLESC_CHAT_FALCON3] = {"<|", "|>\n", "\n", "<|assistant|>\n", false},
    [GLESC_CHAT_ZEPHYR] = {"<|", "|>\n", "<|endoftext|>\n", "<|assistant|>\n", false},
    [GLESC_CHAT_PHI4] = {"<|im_start|>", "<|im_sep|>", "<|im_end|>",
                         "<|im_start|>assistant<|im_sep|>", false},
    [GLESC_CHAT_MEGREZ] = {"<|role_start|>", "<|role_end|>", "<|turn_end|>",
                           "<|role_start|>assistant<|role_end|>", false},
    [GLESC_CHAT_LLAMA3] = {"<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>",
                           "<|start_header_id|>assistant<|end_header_id|>\n\n", true},
    [GLESC_CHAT_LLAMA4] = {"<|header_start|>", "<|header_end|>\n\n", "<|eot|>",
                           "<|header_start|>assistant<|header_end|>\n\n", true},
};

static void format_headed(sbuf *b, const chat_headed *f, const glesc_chat_message *msgs, size_t n,
                          bool add_ass)
{
    for (size_t i = 0; i < n; i++) {
        put3(b, f->pre, msgs[i].role, f->post);
        put(b, msgs[i].content, f->trim);
        sbuf_append(b, f->end);
    }
    if (add_ass)
        sbuf_append(b, f->assistant);
}

/* Formats that put text before and after the content of a system, user
 * or assistant message (in that order in pre and post) and leave out any
 * other role; the assistant's start follows with add_ass. */
typedef struct chat_tagged {
    const char *pre[3], *post[3], *assistant;
    bool trim;
} chat_tagged;

static const chat_tagged tagged[GLESC_CHAT_COUNT_] = {
    [GLESC_CHAT_VICUNA] =
        {{"", "USER: ", "ASSISTANT: "}, {"\n\n", "\n", "</s>\n"}, "ASSISTANT:", false},
    [GLESC_CHAT_VICUNA_ORCA] =
        {{"SYSTEM: ", "USER: ", "ASSISTANT: "}, {"\n", "\n", "</s>\n"}, "ASSISTANT:", false},
    [GLESC_CHAT_DEEPSEEK] = {{"", "### Instruction:\n", "### Response:\n"},
                             {"", "\n", "\n<|EOT|>\n"},
                             "### Response:\n",
                             false},
    [GLESC_CHAT_DEEPSEEK2] =
        {{"", "User: ", "Assistant: "}, {"\n\n", "\n\n", DS_EOS}, "Assistant:", false},
    [GLESC_CHAT_DEEPSEEK3] = {{"", "<" DS_BAR "User" DS_BAR ">", "<" DS_BAR "Assistant" DS_BAR ">"},
                              {"\n\n", "", DS_EOS},
                              "<" DS_BAR "Assistant" DS_BAR ">",
                              false},
    [GLESC_CHAT_COMMAND_R] = {{"<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>",
                               "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
                               "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
                              {"<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
                               "<|END_OF_TURN_TOKEN|>"},
                              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
                              true},
    [GLESC_CHAT_EXAONE3] = {{"[|system|]", "[|user|]", "[|assistant|]"},
                            {"[|endofturn|]\n", "\n", "[|endofturn|]\n"},
                            "[|assistant|]",
                            true},
};

static void format_tagged(sbuf *b, const chat_tagged *f, const glesc_chat_message *msgs, size_t n,
                          bool add_ass)
{
    static const char *const roles[3] = {"system", "user", "assistant"};
    for (size_t i = 0; i < n; i++)
        for (int r = 0; r < 3; r++)
            if (!strcmp(msgs[i].role, roles[r])) {
                sbuf_append(b, f->pre[r]);
                put(b, msgs[i].content, f->trim);
                sbuf_append(b, f->post[r]);
            }
    if (add_ass)
        sbuf_append(b, f->assistant);
}

static void format_mistral_v7(sbuf *b, glesc_chat_template t, const glesc_chat_message *msgs,
                              size_t n)
{
    const char *sp = t == GLESC_CHAT_MISTRAL_V7 ? " " : "";
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role, *c = msgs[i].content;
        if (!strcmp(r, "system")) {
            put3(b, "[SYSTEM_PROMPT]", sp, c);
            sbuf_append(b, "[/SYSTEM_PROMPT]");
        } else if (!strcmp(r, "user")) {
            put3(b, "[INST]", sp, c);
            sbuf_append(b, "[/INST]");
        } else {
            put3(b, sp, c, "</s>");
        }
    }
}

/* mistral-v1, v3 and v3-tekken */
static void format_mistral(sbuf *b, glesc_chat_template t, const glesc_chat_message *msgs, size_t n)
{
    const char *lead = t == GLESC_CHAT_MISTRAL_V1 ? " " : "";
    const char *trail = t == GLESC_CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role, *c = msgs[i].content;
        if (!inside) {
            put3(b, lead, "[INST]", trail);
            inside = true;
        }
        if (!strcmp(r, "system")) {
            put3(b, c, "\n\n", "");
        } else if (!strcmp(r, "user")) {
            put3(b, c, lead, "[/INST]");
        } else {
            sbuf_append(b, trail);
            put(b, c, t == GLESC_CHAT_MISTRAL_V3);
            sbuf_append(b, "</s>");
            inside = false;
        }
    }
}

/* llama2 and its -sys, -sys-bos and -sys-strip forms; they ignore
 * add_assistant, as llama.cpp's do. */
static void format_llama2(sbuf *b, glesc_chat_template t, const glesc_chat_message *msgs, size_t n)
{
    bool sys = t != GLESC_CHAT_LLAMA2, bos = t == GLESC_CHAT_LLAMA2_SYS_BOS;
    bool strip = t == GLESC_CHAT_LLAMA2_SYS_STRIP, inside = true;
    sbuf_append(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!inside) {
            inside = true;
            sbuf_append(b, bos ? "<s>[INST] " : "[INST] ");
        }
        if (!strcmp(r, "system")) {
            if (sys)
                sbuf_append(b, "<<SYS>>\n");
            put(b, msgs[i].content, strip);
            sbuf_append(b, sys ? "\n<</SYS>>\n\n" : "\n");
        } else if (!strcmp(r, "user")) {
            put(b, msgs[i].content, strip);
            sbuf_append(b, " [/INST]");
        } else {
            put(b, msgs[i].content, strip);
            sbuf_append(b, "</s>");
            inside = false;
        }
    }
}

static void format_monarch(sbuf *b, const glesc_chat_message *msgs, size_t n, bool add_ass)
{
    for (size_t i = 0; i < n; i++) {
        put3(b, i ? "<s>" : "", msgs[i].role, "\n");
        put3(b, msgs[i].content, "</s>\n", "");
    }
    if (add_ass)
        sbuf_append(b, "<s>assistant\n");
}

/* gemma and orion: system messages are held back and put before the next
 * user message (gemma: before any other role's, trimmed). */
static void format_held_system(sbuf *b, glesc_chat_template t, const glesc_chat_message *msgs,
                               size_t n, bool add_ass)
{
    bool gemma = t == GLESC_CHAT_GEMMA;
    sbuf sys;
    sbuf_init(&sys);
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!strcmp(r, "system")) {
            put(&sys, msgs[i].content, gemma);
            continue;
        }
        bool user = gemma ? strcmp(r, "assistant") != 0 : !strcmp(r, "user");
        if (gemma)
            put3(b, "<start_of_turn>", user ? r : "model", "\n");
        else if (user)
            sbuf_append(b, "Human: ");
        if (sys.len && user) {
            put3(b, sbuf_str(&sys) ? sbuf_str(&sys) : "", "\n\n", "");
            sbuf_reset(&sys);
        }
        put(b, msgs[i].content, gemma);
        sbuf_append(b, gemma ? "<end_of_turn>\n" : user ? "\n\nAssistant: </s>" : "</s>");
    }
    if (sys.oom)
        b->oom = true;
    sbuf_free(&sys);
    if (gemma && add_ass)
        sbuf_append(b, "<start_of_turn>model\n");
}

static void format_openchat(sbuf *b, const glesc_chat_message *msgs, size_t n, bool add_ass)
{
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!strcmp(r, "system")) {
            put3(b, msgs[i].content, "<|end_of_turn|>", "");
        } else {
            sbuf_append(b, "GPT4 Correct ");
            if (*r)
                sbuf_appendc(b, (char)(*r >= 'a' && *r <= 'z' ? *r - 'a' + 'A' : *r));
            put3(b, *r ? r + 1 : r, ": ", msgs[i].content);
            sbuf_append(b, "<|end_of_turn|>");
        }
    }
    if (add_ass)
        sbuf_append(b, "GPT4 Correct Assistant:");
}

static void format_granite(sbuf *b, const glesc_chat_message *msgs, size_t n, bool add_ass)
{
    for (size_t i = 0; i < n; i++) {
        put3(b, "<|start_of_role|>", msgs[i].role, "<|end_of_role|>");
        if (!strcmp(msgs[i].role, "assistant_tool_call"))
            sbuf_append(b, "<|tool_call|>");
        put3(b, msgs[i].content, "<|end_of_text|>\n", "");
    }
    if (add_ass)
        sbuf_append(b, "<|start_of_role|>assistant<|end_of_role|>\n");
}

GLESC_API glesc_status glesc_chat_format(glesc_chat_template t, const glesc_chat_message *msgs,
                                         size_t n, bool add_ass, char **out)
{
    core_err_reset(NULL);
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_chat_format: NULL out");
    *out = NULL;
    if (t <= GLESC_CHAT_NONE || t >= GLESC_CHAT_COUNT_)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_chat_format: %d is not a chat template", (int)t);
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "glesc_chat_format: message %zu has no role or content", i);
    sbuf b;
    sbuf_init(&b);
    sbuf_append(&b, ""); /* an empty conversation is "" rather than NULL */
    if (headed[t].pre)
        format_headed(&b, &headed[t], msgs, n, add_ass);
    else if (tagged[t].assistant)
        format_tagged(&b, &tagged[t], msgs, n, add_ass);
    else if (t == GLESC_CHAT_MISTRAL_V7 || t == GLESC_CHAT_MISTRAL_V7_TEKKEN)
        format_mistral_v7(&b, t, msgs, n);
    else if (t == GLESC_CHAT_MISTRAL_V1 || t == GLESC_CHAT_MISTRAL_V3 ||
             t == GLESC_CHAT_MISTRAL_V3_TEKKEN)
        format_mistral(&b, t, msgs, n);
    else if (t >= GLESC_CHAT_LLAMA2 && t <= GLESC_CHAT_LLAMA2_SYS_STRIP)
        format_llama2(&b, t, msgs, n);
    else if (t == GLESC_CHAT_MONARCH)
        format_monarch(&b, msgs, n, add_ass);
    else if (t == GLESC_CHAT_GEMMA || t == GLESC_CHAT_ORION)
        format_held_system(&b, t, msgs, n, add_ass);
    else if (t == GLESC_CHAT_OPENCHAT)
        format_openchat(&b, msgs, n, add_ass);
    else if (t == GLESC_CHAT_GRANITE)
        format_granite(&b, msgs, n, add_ass);
    char *s = sbuf_take(&b);
    if (!s)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "glesc_chat_format");
    *out = s;
    return GLESC_OK;
}
