// openai_client.mjs — glesc-server as the official OpenAI client for Node.js
// sees it (node --test; the server's URL in GLESC_SERVER_URL, key
// "test-key"): a streamed chat completion, a whole one, a text completion,
// response_format json_schema (the answer parses), and errors raised as the
// client's error classes.
import assert from "node:assert/strict";
import { test } from "node:test";
import OpenAI from "openai";

const baseURL = `${process.env.GLESC_SERVER_URL}/v1`;
const client = new OpenAI({ baseURL, apiKey: "test-key", maxRetries: 0 });
const messages = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Tell me about the sea." },
];

test("streams a chat completion", async () => {
  const stream = await client.chat.completions.create({
    model: "tiny",
    messages,
    max_tokens: 12,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? "";
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.ok(chunks >= 2, `${chunks} chunks`);
  assert.ok(["stop", "length"].includes(finish), `finish_reason ${finish}`);
  assert.ok(usage && usage.completion_tokens <= 12 && usage.prompt_tokens > 0);
  assert.equal(typeof text, "string");
});

test("a whole chat completion, greedy and repeatable", async () => {
  const ask = () =>
    client.chat.completions.create({ model: "tiny", messages, max_tokens: 10, temperature: 0 });
  const a = await ask();
  const b = await ask();
  assert.equal(a.object, "chat.completion");
  assert.equal(a.choices[0].message.role, "assistant");
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + a.usage.completion_tokens);
  // the second asks what the slot holds already
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 1);
});

test("a text completion with a seed", async () => {
  const ask = () =>
    client.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 8, seed: 7 });
  const a = await ask();
  const b = await ask();
  assert.equal(a.object, "text_completion");
  assert.equal(a.choices[0].text, b.choices[0].text);
});

test("response_format json_schema: the answer parses and follows the schema", async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "A color as JSON." }],
      max_tokens: 180,
      seed,
      response_format: {
        type: "json_schema",
        json_schema: {
          name: "color",
          schema: {
            type: "object",
            properties: { color: { enum: ["red", "green", "blue"] }, ok: { type: "boolean" } },
            required: ["color", "ok"],
          },
        },
      },
    });
    assert.equal(r.choices[0].finish_reason, "stop");
    const o = JSON.parse(r.choices[0].message.content);
    assert.ok(["red", "green", "blue"].includes(o.color), JSON.stringify(o));
    assert.equal(typeof o.ok, "boolean");
  }
});

test("a schema keyword the grammar lacks is a 400 naming it", async () => {
  const request = {
    model: "tiny",
    messages: [{ role: "user", content: "x" }],
    response_format: {
      type: "json_schema",
      json_schema: { name: "s", schema: { type: "string", pattern: "a+" } },
    },
  };
  await assert.rejects(client.chat.completions.create(request), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.match(e.message, /pattern/);
    return true;
  });
});

test("errors arrive as the client's error classes", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "tiny", messages, temperature: 7 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /temperature/.test(e.message),
  );
  const noKey = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(noKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  const models = await client.models.list();
  assert.equal(models.data[0].id, "tiny");
});
