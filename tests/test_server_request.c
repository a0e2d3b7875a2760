/*
 * test_server_request.c — glesc-server's request parser
 * (tools/glesc-server/request.c): what it takes from a chat and a
 * completion body, and each refusal: status 400, the field in param, a
 * message that names the problem.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "glesc-server/glesc-server.h"

static const srv_limits lim = {.max_messages = 4, .max_tokens = 100, .n_vocab = 1000};

static int parse(const char *body, srv_kind kind, srv_request *r, srv_error *e)
{
    return request_parse(body, strlen(body), kind, &lim, r, e);
}

/* Refused with 400, param (NULL: none) and needle in the message. */
static void refused(const char *body, srv_kind kind, const char *param, const char *needle)
{
    srv_request r;
    srv_error e;
    cr_assert_eq(parse(body, kind, &r, &e), -1, "accepted: %s", body);
    cr_expect_eq(e.status, 400, "%s: status %d", body, e.status);
    if (param)
        cr_expect(e.param && !strcmp(e.param, param), "%s: param %s, expected %s", body,
                  e.param ? e.param : "(null)", param);
    cr_expect(strstr(e.message, needle), "%s: '%s' not in '%s'", body, needle, e.message);
    cr_expect_null(r.msgs);
    request_free(&r);
}

Test(server_request, chat_fields)
{
    srv_request r;
    srv_error e;
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"text\",\"text\":\"b\"}]}],\"max_tokens\":16,\"temperature\":0.5,"
        "\"top_p\":0.9,\"seed\":-1,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"stop\":[\"\\n\",\"END\"],\"logit_bias\":{\"13\":-100,\"42\":2.5},\"n\":1,"
        "\"logprobs\":false,\"unknown_field\":[1,2]}  \n";
    cr_assert_eq(parse(body, SRV_CHAT, &r, &e), 0, "%s", e.message);
    cr_expect_str_eq(r.model, "m");
    cr_assert_eq(r.n_msgs, 2);
    cr_expect_str_eq(r.msgs[0].role, "system");
    cr_expect_str_eq(r.msgs[1].content, "ab");
    cr_expect_eq(r.max_tokens, 16);
    cr_expect_float_eq(r.sp.temperature, 0.5f, 1e-6);
    cr_expect_float_eq(r.sp.top_p, 0.9f, 1e-6);
    cr_expect(r.seed_given && r.sp.seed == UINT64_MAX);
    cr_expect(r.stream && r.include_usage);
    cr_assert_eq(r.n_stop, 2);
    cr_expect_str_eq(r.stop[1], "END");
    cr_assert_eq(r.n_bias, 2);
    cr_expect_eq(r.format, SRV_FORMAT_TEXT);
    request_free(&r);
}

Test(server_request, defaults_and_completion_prompts)
{
    srv_request r;
    srv_error e;
    cr_assert_eq(parse("{\"prompt\":\"Once\"}", SRV_COMPLETION, &r, &e), 0, "%s", e.message);
    cr_expect_str_eq(r.prompt, "Once");
    cr_expect_eq(r.max_tokens, -1);
    cr_expect(!r.stream && !r.seed_given);
    cr_expect_float_eq(r.sp.temperature, 0.8f, 1e-6); /* llama.cpp's default, as llama-server */
    request_free(&r);
    cr_assert_eq(parse("{\"prompt\":[\"one\"]}", SRV_COMPLETION, &r, &e), 0);
    cr_expect_str_eq(r.prompt, "one");
    request_free(&r);
    cr_assert_eq(parse("{\"prompt\":[1,2,999],\"stop\":\"x\"}", SRV_COMPLETION, &r, &e), 0);
    cr_expect(r.n_prompt_ids == 3 && r.prompt_ids[2] == 999 && r.n_stop == 1);
    request_free(&r);
    cr_assert_eq(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                       "{\"name\":\"p\",\"schema\":{\"type\":\"object\"}}}}",
                       SRV_CHAT, &r, &e),
                 0, "%s", e.message);
    cr_expect_eq(r.format, SRV_FORMAT_JSON_SCHEMA);
    cr_expect_str_eq(r.schema, "{\"type\":\"object\"}");
    request_free(&r);
}

Test(server_request, refusals)
{
    refused("", SRV_CHAT, NULL, "not valid JSON");
    refused("{\"messages\":[", SRV_CHAT, NULL, "unexpected end");
    refused("{\"prompt\":\"a\"} x", SRV_COMPLETION, NULL, "not valid JSON");
    refused("[1]", SRV_COMPLETION, NULL, "must be a JSON object");
    refused("{\"prompt\":\"\\xff\"}", SRV_COMPLETION, NULL, "not valid JSON");
    refused("{\"prompt\":\"a\\u0000b\"}", SRV_COMPLETION, "prompt", "NUL");
    refused("{}", SRV_CHAT, "messages", "must be an array");
    refused("{\"messages\":[]}", SRV_CHAT, "messages", "empty");
    refused("{\"messages\":[{},{},{},{},{}]}", SRV_CHAT, "messages", "at most 4");
    refused("{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", SRV_CHAT, "messages",
            "role 'tool' is not supported");
    refused("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", SRV_CHAT,
            "messages", "only text");
    refused("{}", SRV_COMPLETION, "prompt", "missing");
    refused("{\"prompt\":[1,1000]}", SRV_COMPLETION, "prompt", "not a token id");
    refused("{\"prompt\":[\"a\",\"b\"]}", SRV_COMPLETION, "prompt", "one prompt");
    refused("{\"prompt\":\"a\",\"temperature\":2.5}", SRV_COMPLETION, "temperature",
            "between 0 and 2");
    refused("{\"prompt\":\"a\",\"temperature\":\"hot\"}", SRV_COMPLETION, "temperature",
            "must be a number");
    refused("{\"prompt\":\"a\",\"top_p\":1.5}", SRV_COMPLETION, "top_p", "between");
    refused("{\"prompt\":\"a\",\"max_tokens\":101}", SRV_COMPLETION, "max_tokens", "at most 100");
    refused("{\"prompt\":\"a\",\"max_tokens\":1.5}", SRV_COMPLETION, "max_tokens",
            "must be an integer");
    refused("{\"prompt\":\"a\",\"max_tokens\":-1}", SRV_COMPLETION, "max_tokens", "out of range");
    refused("{\"prompt\":\"a\",\"seed\":1e3}", SRV_COMPLETION, "seed", "integer");
    refused("{\"prompt\":\"a\",\"stream\":1}", SRV_COMPLETION, "stream", "true or false");
    refused("{\"prompt\":\"a\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", SRV_COMPLETION, "stop",
            "at most 4");
    refused("{\"prompt\":\"a\",\"stop\":[1]}", SRV_COMPLETION, "stop", "string");
    refused("{\"prompt\":\"a\",\"logit_bias\":{\"x\":1}}", SRV_COMPLETION, "logit_bias",
            "not a token id");
    refused("{\"prompt\":\"a\",\"logit_bias\":{\"5\":101}}", SRV_COMPLETION, "logit_bias",
            "-100..100");
    refused("{\"prompt\":\"a\",\"n\":2}", SRV_COMPLETION, "n", "must be 1");
    refused("{\"prompt\":\"a\",\"tools\":[]}", SRV_COMPLETION, "tools", "not supported");
    refused("{\"prompt\":\"a\",\"logprobs\":true}", SRV_COMPLETION, "logprobs", "not supported");
    refused("{\"prompt\":\"a\",\"response_format\":{\"type\":\"yaml\"}}", SRV_COMPLETION,
            "response_format", "not text, json_object or json_schema");
    refused("{\"prompt\":\"a\",\"response_format\":{\"type\":\"json_schema\"}}", SRV_COMPLETION,
            "response_format", "json_schema needs");
}

Test(server_request, nesting_is_bounded)
{
    char body[600] = "{\"prompt\":\"a\",\"x\":";
    size_t n = strlen(body);
    for (int i = 0; i < 200; i++)
        body[n++] = '[';
    body[n] = 0;
    refused(body, SRV_COMPLETION, NULL, "not valid JSON");
}
