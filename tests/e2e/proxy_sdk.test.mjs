// proxy_sdk.test.mjs - the official SDKs with only their base URL pointed at sluiced, which
// proxies to sluice-emu: create, stream, count_tokens, tool use, errors, and the SDK's own
// retry honouring sluice's 429 retry-after. The agents hold sluice tokens, never the key.
//
// Run: SLUICED=build/src/server/sluiced SLUICE_EMU=build/src/emu/sluice-emu node tests/e2e/proxy_sdk.test.mjs
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { recordingFetch, untilLimited, untilRetried } from './attempts.mjs';
import { ask, countExample, forcedTool } from './bodies.mjs';
import { REAL_KEY, getJson, pool, runBehindSluiced, sdks, startEmu } from './proxy_harness.mjs';

const { Anthropic, OpenAI } = sdks();

const FAST = ['--input-tpm', '10000000', '--output-tpm', '10000000', '--rpm', '100000',
              '--ttft-ms', '20', '--tokens-per-s', '2000', '--latency-spread', '0',
              '--output-tokens', '40', '--cache-min-tokens', '0'];
const ROOMY = { input_tpm: 10000000, output_tpm: 10000000, rpm: 100000 };
// 51 requests in the bucket, one more a second; a request that cannot be granted within
// 0.2 s is rejected with a retry-after (proxy.max_hold_s 0.2: the proxy's own hold).
const TIGHT = { input_tpm: 10000000, output_tpm: 10000000, rpm: 60, max_queue_wait_s: 0.2 };

const TOKENS = {
  planner: 'sluice-token-planner-1',
  workers: 'sluice-token-workers-x',
};

// The tight pool has its own provider with the same limits (sluice adopts the limits
// the provider's headers announce).
function config(emuPort, tightPort) {
  return 'proxy:\n  max_hold_s: 0.2\npools:\n' + pool('claude', emuPort, 'anthropic', ROOMY) +
    pool('gpt', emuPort, 'openai', ROOMY) + pool('tight', tightPort, 'anthropic', TIGHT) +
    'auth:\n  admin_token: sluice-admin-token-1\n  tokens:\n' +
    `    - token: ${TOKENS.planner}\n      agent: planner-1\n` +
    `    - token: ${TOKENS.workers}\n      agent_prefix: worker-\n`;
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

const anthropic = (ctx, opts = {}) => new Anthropic({
  apiKey: TOKENS.planner, baseURL: `http://127.0.0.1:${ctx.port}/anthropic`, maxRetries: 0,
  timeout: 30000, ...opts });
const openai = (ctx, opts = {}) => new OpenAI({
  apiKey: TOKENS.workers, baseURL: `http://127.0.0.1:${ctx.port}/openai/v1`, maxRetries: 0,
  timeout: 30000, defaultHeaders: { 'x-sluice-agent': 'worker-1' }, ...opts });

async function agent(ctx, name) {
  const r = await fetch(`http://127.0.0.1:${ctx.port}/v1/agents`,
                        { headers: { authorization: 'Bearer sluice-admin-token-1' } });
  return (await r.json()).agents.find((a) => a.name === name);
}

/** The agent once it holds no lease: its calls are settled. Bounded: 300 looks, 30 s. */
async function settledAgent(ctx, name) {
  const t0 = Date.now();
  for (let i = 0; i < 300 && Date.now() - t0 < 30000; i++) {
    const a = await agent(ctx, name);
    if (a && a.leases === 0) return a;
    await new Promise((res) => setTimeout(res, 10));
  }
  throw new Error(`${name} still holds a lease after 30 s: ${JSON.stringify(await agent(ctx, name))}`);
}

test('anthropic: messages.create through sluice is settled with its usage', async (ctx) => {
  const before = (await agent(ctx, 'planner-1'))?.tokens_out ?? 0;
  const msg = await anthropic(ctx).messages.create(ask);
  assert.equal(msg.type, 'message');
  assert.equal(msg.usage.output_tokens, 40);
  const a = await agent(ctx, 'planner-1');
  assert.equal(a.tokens_out - before, 40);
  assert.equal(a.leases, 0);
});

test('anthropic: messages.stream gives text and final usage', async (ctx) => {
  const stream = anthropic(ctx).messages.stream(ask);
  let text = '';
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.ok(text.length > 0);
  assert.equal(final.usage.output_tokens, 40);
  assert.equal(final.stop_reason, 'end_turn');
});

test('anthropic: countTokens is passed through', async (ctx) => {
  const r = await anthropic(ctx).messages.countTokens(countExample);
  assert.equal(r.input_tokens, 14);
});

test('anthropic: forced tool use (created and streamed)', async (ctx) => {
  const body = forcedTool;
  const msg = await anthropic(ctx).messages.create(body);
  assert.equal(msg.stop_reason, 'tool_use');
  assert.equal(msg.content[0].type, 'tool_use');
  const streamed = await anthropic(ctx).messages.stream(body).finalMessage();
  assert.equal(streamed.content[0].type, 'tool_use');
  assert.ok(streamed.content[0].input && typeof streamed.content[0].input === 'object');
});

test('anthropic: errors keep their SDK classes (auth, bad request, unknown pool)', async (ctx) => {
  await assert.rejects(anthropic(ctx, { apiKey: 'not-a-sluice-token' }).messages.create(ask),
    (e) => e instanceof Anthropic.AuthenticationError && e.status === 401);
  await assert.rejects(anthropic(ctx).messages.create({ ...ask, max_tokens: 0 }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400);
  await assert.rejects(anthropic(ctx, { defaultHeaders: { 'x-sluice-pool': 'nope' } }).messages.create(ask),
    (e) => e instanceof Anthropic.NotFoundError && e.status === 404);
  await assert.rejects(anthropic(ctx, { defaultHeaders: { 'x-sluice-pool': 'gpt' } }).messages.create(ask),
    (e) => e instanceof Anthropic.BadRequestError);
});

// Bounded by count, not by speed: each call takes the emulator's latency (and longer on a
// loaded machine) while the bucket refills one a second, so how many calls pass before the
// first REJECT depends on the time they took; the provider's 60 a minute over that time
// bounds it.
test('anthropic: a REJECT is a RateLimitError; the SDK retry honours its retry-after', async (ctx) => {
  const client = anthropic(ctx, { defaultHeaders: { 'x-sluice-pool': 'tight' } });
  // bounded: a minute's refill past the bucket
  const { error: rejected, served, window_s } =
    await untilLimited(() => client.messages.create(ask), 120);
  assert.ok(rejected instanceof Anthropic.RateLimitError, String(rejected));
  assert.ok(served <= 60 + Math.floor(window_s), `${served} served in ${window_s} s at 60 rpm`);
  assert.equal(rejected.error.error.type, 'rate_limit_error');
  const retryAfter = Number(rejected.headers.get('retry-after'));
  const retryAfterMs = Number(rejected.headers.get('retry-after-ms'));
  assert.ok(retryAfter >= 1 && retryAfterMs > 0, `retry-after ${retryAfter}, -ms ${retryAfterMs}`);
  // The SDK's own retry waits as told, and the call then goes through: judged on the call
  // whose own attempts met a REJECT (the refill may grant the first calls at once).
  const attempts = [];
  const retrying = anthropic(ctx, { maxRetries: 4, defaultHeaders: { 'x-sluice-pool': 'tight' },
                                    fetch: recordingFetch(attempts) });
  const { result: msg, call } = await untilRetried(() => retrying.messages.create(ask), attempts, 60);
  assert.equal(msg.type, 'message');
  assert.equal(call.at(-1).status, 200, JSON.stringify(call));
  for (let i = 0; i + 1 < call.length; i++) {
    const told = Number(call[i].retryAfterMs), waited = call[i + 1].sentMs - call[i].doneMs;
    assert.equal(call[i].status, 429, JSON.stringify(call));
    assert.ok(told > 0 && waited >= told - 20, `retried after ${waited} ms, told ${told} ms`);
  }
  const stats = await getJson(ctx.tight.port, '/stats');
  assert.equal(stats.http_429, 0, 'a rejected call reached the provider');
});

test('openai: chat.completions.create and stream through sluice', async (ctx) => {
  const c = await openai(ctx).chat.completions.create({
    model: 'gpt-emu', max_completion_tokens: 100,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] });
  assert.equal(c.object, 'chat.completion');
  assert.equal(c.usage.completion_tokens, 40);
  const stream = await openai(ctx).chat.completions.create({
    model: 'gpt-emu', stream: true, messages: [{ role: 'user', content: 'Hi' }] });
  let text = '', sawUsage = false;
  for await (const chunk of stream) {
    if (chunk.usage) sawUsage = true;
    for (const ch of chunk.choices) text += ch.delta.content ?? '';
  }
  assert.ok(text.length > 0);
  assert.equal(sawUsage, false, 'sluice\'s usage chunk reached a client that did not ask');
  // The SDK stops reading at [DONE], which sluiced passes on as it comes; the settle follows
  // when the provider's response ends (the emulator ends it after [DONE] is written), and a
  // loaded machine can answer this GET in between.
  const a = await settledAgent(ctx, 'worker-1');
  assert.equal(a.tokens_out, 80);
});

test('openai: tool calls, and errors in OpenAI\'s shape', async (ctx) => {
  const c = await openai(ctx).chat.completions.create({
    model: 'gpt-emu', tool_choice: 'required',
    tools: [{ type: 'function', function: { name: 'open_gate', parameters: {
      type: 'object', properties: { gate: { type: 'integer' } }, required: ['gate'] } } }],
    messages: [{ role: 'user', content: 'Open gate 1' }] });
  assert.equal(c.choices[0].finish_reason, 'tool_calls');
  await assert.rejects(openai(ctx, { apiKey: 'nope-nope-nope' }).chat.completions.create({
    model: 'gpt-emu', messages: [{ role: 'user', content: 'Hi' }] }),
  (e) => e instanceof OpenAI.AuthenticationError);
});

const respond = (ctx, agentName) => openai(ctx, { defaultHeaders: { 'x-sluice-agent': agentName } });
const READ_FILE = { type: 'function', name: 'read_file', description: 'Reads a file', strict: false,
                    parameters: { type: 'object', properties: { path: { type: 'string' } },
                                  required: ['path'] } };

test('openai: responses.create through sluice, a tool-call turn and its follow-up, settled', async (ctx) => {
  const client = respond(ctx, 'worker-resp-1');
  const first = await client.responses.create({
    model: 'gpt-emu', instructions: 'You are a coding agent.', input: 'Read a.c',
    tools: [READ_FILE], tool_choice: 'required', max_output_tokens: 300 });
  assert.equal(first.object, 'response');
  const call = first.output.find((i) => i.type === 'function_call');
  assert.ok(call, JSON.stringify(first.output));
  const second = await client.responses.create({
    model: 'gpt-emu', instructions: 'You are a coding agent.', tools: [READ_FILE],
    input: [{ role: 'user', content: 'Read a.c' }, ...first.output,
            { type: 'function_call_output', call_id: call.call_id, output: 'int main;' }] });
  assert.ok(second.output_text.length > 0);
  const a = await agent(ctx, 'worker-resp-1');
  assert.equal(a.leases, 0);
  assert.equal(a.tokens_in, first.usage.input_tokens + second.usage.input_tokens);
  assert.equal(a.tokens_out, first.usage.output_tokens + second.usage.output_tokens);
});

test('openai: responses.stream gives the response.* events and the final usage', async (ctx) => {
  const stream = respond(ctx, 'worker-resp-2').responses.stream({
    model: 'gpt-emu', input: [{ role: 'user', content: 'Hi' }], max_output_tokens: 100 });
  const kinds = new Set();
  let text = '';
  stream.on('event', (e) => kinds.add(e.type));
  stream.on('response.output_text.delta', (e) => { text += e.delta; });
  const final = await stream.finalResponse();
  assert.ok(text.length > 0);
  const message = final.output.find((i) => i.type === 'message');
  assert.equal(message.content[0].text, text);
  for (const k of ['response.created', 'response.in_progress', 'response.output_item.added',
                   'response.output_text.done', 'response.completed'])
    assert.ok(kinds.has(k), `no ${k} in ${[...kinds]}`);
  const a = await agent(ctx, 'worker-resp-2');
  assert.equal(a.tokens_out, final.usage.output_tokens);
  assert.equal(a.tokens_in, final.usage.input_tokens);
});

test('openai: responses errors keep their SDK classes', async (ctx) => {
  await assert.rejects(respond(ctx, 'worker-resp-3').responses.create({
    model: 'gpt-emu', input: 'x', previous_response_id: 'resp_unknown' }),
  (e) => e instanceof OpenAI.BadRequestError && e.code === 'previous_response_not_found');
  await assert.rejects(openai(ctx, { apiKey: 'nope-nope-nope' }).responses.create({
    model: 'gpt-emu', input: 'x' }), (e) => e instanceof OpenAI.AuthenticationError);
});

test('both SDKs list and get models through sluice', async (ctx) => {
  const claude = [];
  for await (const m of anthropic(ctx).models.list()) claude.push(m.id);
  assert.ok(claude.length > 0);
  assert.equal((await anthropic(ctx).models.retrieve(claude[0])).id, claude[0]);
  const gpt = [];
  for await (const m of openai(ctx).models.list()) gpt.push(m.id);
  assert.ok(gpt.length > 0);
  assert.equal((await openai(ctx).models.retrieve(gpt[0])).id, gpt[0]);
});

test('the pool key never reached a client or the event log', async (ctx) => {
  const log = readFileSync(ctx.sluiced.eventLog, 'utf8');
  assert.ok(!log.includes(REAL_KEY));
  assert.ok(!ctx.sluiced.output().includes(REAL_KEY));
  const pools = JSON.stringify(await fetch(`http://127.0.0.1:${ctx.port}/v1/pools`,
    { headers: { authorization: 'Bearer sluice-admin-token-1' } }).then((r) => r.json()));
  assert.ok(!pools.includes(REAL_KEY));
});

const emu = await startEmu(FAST);
const tightArgs = [...FAST];
tightArgs[tightArgs.indexOf('--rpm') + 1] = '60';
const tight = await startEmu(tightArgs);
await runBehindSluiced(tests, config(emu.port, tight.port), { emu, tight }, emu, [emu, tight]);
