/*
 * test_chat.c — chat templates: llama.cpp's detection heuristic picks the
 * same format from real models' Jinja templates, and the formatted
 * conversation (llama.cpp's test-chat-template conversation) is byte for
 * byte what llama.cpp's llama_chat_apply_template produces; a conversation
 * formatted again with one more user message starts with the earlier text.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "glesc_llm.h"

static const glesc_chat_message conv[] = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};

/* name, a model's template (from llama.cpp's tests), expected output (NULL:
 * detection only). */
static const struct {
    const char *name, *jinja, *expect;
} cases[] = {
    {"chatml",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
     "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|im_start|>assistant\\n' }}{% endif %}",
     "<|im_start|>system\nYou are a helpful "
     "assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi "
     "there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an "
     "assistant   <|im_end|>\n<|im_start|>user\nAnother "
     "question<|im_end|>\n<|im_start|>assistant\n"},
    {"llama2",
     "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
     "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
     "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
     "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
     "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
     "are supported!') }}{% endif %}{% endfor %}",
     "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I "
     "am an assistant   </s>[INST] Another question [/INST]"},
    {"llama2-sys-bos",
     "{%- for idx in range(0, messages|length) -%}\n{%- if messages[idx]['role'] == 'user' "
     "-%}\n{%- if idx > 1 -%}\n{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' "
     "-}}\n{%- else -%}\n{{- messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n{% elif "
     "messages[idx]['role'] == 'system' %}\n{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + "
     "'\\n<</SYS>>\\n\\n' -}}\n{%- elif messages[idx]['role'] == 'assistant' -%}\n{{- ' '  + "
     "messages[idx]['content'] + ' ' + eos_token -}}\n{% endif %}\n{% endfor %}",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] "
     "Who are you [/INST]   I am an assistant   </s><s>[INST] Another question [/INST]"},
    {"llama2-sys-strip",
     "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] "
     "%}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages "
     "%}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
     "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
     "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
     "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
     "content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + "
     "content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who "
     "are you [/INST]I am an assistant</s>[INST] Another question [/INST]"},
    {"mistral-v7",
     "{%- if messages[0]['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + messages[0]['content'] + "
     "'[/SYSTEM_PROMPT]' }}{%- endif %}{%- for message in loop_messages %}{%- if message['role'] "
     "== 'user' %}{{- '[INST]' + message['content'] + '[/INST]' }}{%- endif %}{%- endfor %}",
     "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi "
     "there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another "
     "question[/INST]"},
    {"monarch",
     "{% for message in messages %}{{bos_token + message['role'] + '\\n' + message['content'] + "
     "eos_token + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ bos_token + 'assistant\\n' "
     "}}{% endif %}",
     "system\nYou are a helpful assistant</s>\n<s>user\nHello</s>\n<s>assistant\nHi "
     "there</s>\n<s>user\nWho are you</s>\n<s>assistant\n   I am an assistant   "
     "</s>\n<s>user\nAnother question</s>\n<s>assistant\n"},
    {"gemma",
     "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% "
     "endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = "
     "'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + "
     "'\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if "
     "add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
     "<start_of_turn>user\nYou are a helpful "
     "assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi "
     "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI "
     "am an assistant<end_of_turn>\n<start_of_turn>user\nAnother "
     "question<end_of_turn>\n<start_of_turn>model\n"},
    {"orion",
     "{% for message in messages %}{% if loop.first %}{{ bos_token }}{% endif %}{% if "
     "message['role'] == 'user' %}{{ 'Human: ' + message['content'] + '\\n\\nAssistant: ' + "
     "eos_token }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% "
     "endif %}{% endfor %}",
     "Human: You are a helpful assistant\n\nHello\n\nAssistant: </s>Hi there</s>Human: Who are "
     "you\n\nAssistant: </s>   I am an assistant   </s>Human: Another question\n\nAssistant: </s>"},
    {"openchat",
     "{{ bos_token }}{% for message in messages %}{{ 'GPT4 Correct ' + message['role'].title() + "
     "': ' + message['content'] + '<|end_of_turn|>'}}{% endfor %}{% if add_generation_prompt %}{{ "
     "'GPT4 Correct Assistant:' }}{% endif %}",
     "You are a helpful assistant<|end_of_turn|>GPT4 Correct User: Hello<|end_of_turn|>GPT4 "
     "Correct Assistant: Hi there<|end_of_turn|>GPT4 Correct User: Who are you<|end_of_turn|>GPT4 "
     "Correct Assistant:    I am an assistant   <|end_of_turn|>GPT4 Correct User: Another "
     "question<|end_of_turn|>GPT4 Correct Assistant:"},
    {"vicuna",
     "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + "
     "message['content'] + '\n\n' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + "
     "message['content'] + '\n'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' "
     "-}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt "
     "-%}{{-'ASSISTANT:'-}}{%- endif -%}",
     "You are a helpful assistant\n\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are "
     "you\nASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:"},
    {"vicuna-orca",
     "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{-'SYSTEM: ' + "
     "message['content'] + '\n' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + "
     "message['content'] + '\n'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' "
     "-}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt "
     "-%}{{-'ASSISTANT:'-}}{%- endif -%}",
     "SYSTEM: You are a helpful assistant\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are "
     "you\nASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:"},
    {"deepseek",
     "{%- for message in messages %}{%- if message['role'] == 'user' %}{{'### Instruction:\\n' + "
     "message['content'] + '\\n'}}{%- else %}{{'### Response:\\n' + message['content'] + "
     "'\\n<|EOT|>\\n'}}{%- endif %}{%- endfor %}",
     "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n### "
     "Instruction:\nWho are you\n### Response:\n   I am an assistant   \n<|EOT|>\n### "
     "Instruction:\nAnother question\n### Response:\n"},
    {"command-r",
     "{{ bos_token }}{% if system_message != false %}{{ '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' "
     "+ system_message + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% for message in loop_messages %}{% "
     "if message['role'] == 'user' %}{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() "
     "+ '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% endfor %}",
     "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful "
     "assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hi "
     "there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are "
     "you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an "
     "assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another "
     "question<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {"llama3",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
     "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif "
     "%}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}",
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
     "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_"
     "id|>assistant<|end_header_id|>\n\nHi "
     "there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are "
     "you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
     "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
     "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"phi3",
     "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' "
     "+ '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif "
     "(message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% "
     "endfor %}",
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi "
     "there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   "
     "<|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n"},
    {"zephyr",
     "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\n' + "
     "message['content'] + '<|endoftext|>' }}{% endif %}{% endfor %}",
     NULL},
    {"deepseek2",
     "{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + "
     "message['content'] + '\n\n' }}{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + "
     "message['content'] + eos_token }}{% endif %}{% endfor %}",
     NULL},
};

Test(chat, detects_templates_like_llama_cpp)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        glesc_chat_template t = glesc_chat_template_detect(cases[i].jinja);
        cr_expect_str_eq(glesc_chat_template_name(t) ? glesc_chat_template_name(t) : "(none)",
                         cases[i].name, "case %zu", i);
        cr_expect_eq(glesc_chat_template_detect(cases[i].name), t, "by name: %s", cases[i].name);
    }
    cr_expect_eq(glesc_chat_template_detect("plain text, no markers"), GLESC_CHAT_NONE);
    cr_expect_eq(glesc_chat_template_detect(NULL), GLESC_CHAT_NONE);
    cr_expect_eq(glesc_chat_template_detect("mistral-v7"), GLESC_CHAT_MISTRAL_V7);
    cr_expect_eq(glesc_chat_template_detect("{{ '<|im_start|>' }}<|im_sep|>"), GLESC_CHAT_PHI4);
    cr_expect_eq(glesc_chat_template_find("nope"), GLESC_CHAT_NONE);
    cr_expect_null(glesc_chat_template_name(GLESC_CHAT_NONE));
    cr_expect_null(glesc_chat_template_name(GLESC_CHAT_COUNT_));
    for (int t = 1; t < GLESC_CHAT_COUNT_; t++)
        cr_expect_eq(glesc_chat_template_find(glesc_chat_template_name((glesc_chat_template)t)), t);
}

Test(chat, formats_like_llama_cpp)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!cases[i].expect)
            continue;
        char *out;
        glesc_chat_template t = glesc_chat_template_find(cases[i].name);
        cr_assert_eq(glesc_chat_format(t, conv, 6, true, &out), GLESC_OK, "%s", cases[i].name);
        cr_expect_str_eq(out, cases[i].expect, "%s", cases[i].name);
        glesc_text_free(out);
    }
}

/* What a chat relies on: the text of a conversation that ends with the
 * assistant is a prefix of the text with the next user message and the
 * assistant's start added. */
Test(chat, next_turn_extends_the_text)
{
    for (int t = 1; t < GLESC_CHAT_COUNT_; t++) {
        for (size_t k = 1; k + 1 < 6; k++) {
            if (strcmp(conv[k + 1].role, "user"))
                continue;
            char *a, *b;
            cr_assert_eq(glesc_chat_format((glesc_chat_template)t, conv, k + 1, false, &a),
                         GLESC_OK);
            cr_assert_eq(glesc_chat_format((glesc_chat_template)t, conv, k + 2, true, &b),
                         GLESC_OK);
            cr_expect(strncmp(a, b, strlen(a)) == 0,
                      "%s, %zu messages: '%s' is not a prefix of '%s'",
                      glesc_chat_template_name((glesc_chat_template)t), k + 1, a, b);
            glesc_text_free(a);
            glesc_text_free(b);
        }
    }
}

Test(chat, bad_arguments)
{
    char *out = (char *)1;
    cr_expect_eq(glesc_chat_format(GLESC_CHAT_NONE, conv, 1, true, &out),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_null(out);
    glesc_chat_message bad = {"user", NULL};
    cr_expect_eq(glesc_chat_format(GLESC_CHAT_CHATML, &bad, 1, true, &out),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect(strstr(glesc_last_errmsg(), "message 0"));
    cr_expect_eq(glesc_chat_format(GLESC_CHAT_CHATML, conv, 0, true, &out), GLESC_OK);
    cr_expect_str_eq(out, "<|im_start|>assistant\n");
    glesc_text_free(out);
}
