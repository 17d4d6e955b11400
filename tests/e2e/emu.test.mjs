// emu.test.mjs - the official SDKs (@anthropic-ai/sdk, openai; pinned in package-lock.json)
// against the real sluice-emu on 127.0.0.1: create, stream, count_tokens, tool use,
// errors, and the SDK's own retry honouring retry-after.
//
// Run: SLUICE_EMU=build/src/emu/sluice-emu node tests/e2e/emu.test.mjs
// Fails when node_modules is missing: `make test` installs it (scripts/setup.d).
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(import.meta.url);
if (!existsSync(new URL('./node_modules/@anthropic-ai/sdk', import.meta.url)) ||
    !existsSync(new URL('./node_modules/openai', import.meta.url))) {
  console.log('FAIL: tests/e2e/node_modules missing (run make setup)');
  process.exit(1);
}
const Anthropic = require('@anthropic-ai/sdk').default;
const OpenAI = require('openai').default;

const EMU = process.env.SLUICE_EMU || 'sluice-emu';
const KEY = 'sk-e2e-pool-key';

/** Starts sluice-emu with `args` on 127.0.0.1:0; resolves {port, stop}. Bounded: 15 s. */
function startEmu(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(EMU, ['--listen', '127.0.0.1:0', '--api-key', KEY, ...args],
                       { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error('emu did not start: ' + err)); }, 15000);
    proc.stderr.on('data', (d) => { err += d; });
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        const stop = () => new Promise((res, rej) => {
          const kill = setTimeout(() => { proc.kill('SIGKILL'); rej(new Error('emu did not stop')); }, 10000);
          proc.on('exit', (code) => {
            clearTimeout(kill);
            code === 0 ? res() : rej(new Error(`emu exited ${code}: ${err}`));
          });
          proc.kill('SIGTERM');
        });
        resolve({ port: Number(m[1]), stop });
      }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`emu exited ${code}: ${err}`)); });
  });
}

const FAST = ['--input-tpm', '1000000', '--output-tpm', '1000000', '--rpm', '10000',
              '--ttft-ms', '20', '--tokens-per-s', '2000', '--latency-spread', '0',
              '--output-tokens', '40', '--cache-min-tokens', '0'];
const tests = [];
const test = (name, fn) => tests.push({ name, fn });

const anthropic = (port, opts = {}) =>
  new Anthropic({ apiKey: KEY, baseURL: `http://127.0.0.1:${port}`, maxRetries: 0, timeout: 20000, ...opts });
const openai = (port, opts = {}) =>
  new OpenAI({ apiKey: KEY, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 20000, ...opts });

const ask = { model: 'claude-emu-1', max_tokens: 200,
              messages: [{ role: 'user', content: 'Hello, Claude' }] };

test('anthropic: messages.create returns a Message with usage', async ({ port }) => {
  const msg = await anthropic(port).messages.create(ask);
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.content[0].type, 'text');
  assert.ok(msg.content[0].text.length > 0);
  assert.equal(msg.stop_reason, 'end_turn');
  assert.equal(msg.usage.output_tokens, 40);
  assert.equal(msg.usage.input_tokens, 10);
  assert.equal(msg.usage.cache_read_input_tokens, 0);
});

test('anthropic: messages.stream accumulates text and final usage', async ({ port }) => {
  const stream = anthropic(port).messages.stream(ask);
  const types = [];
  let text = '';
  stream.on('streamEvent', (e) => types.push(e.type));
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.ok(types.includes('content_block_delta'));
  assert.equal(final.content[0].text, text);
  assert.equal(final.usage.output_tokens, 40);
  assert.equal(final.stop_reason, 'end_turn');
});

test('anthropic: raw stream: true yields the documented events', async ({ port }) => {
  const events = await anthropic(port).messages.create({ ...ask, stream: true });
  const types = [];
  for await (const e of events) types.push(e.type);
  const core = types.filter((t) => t !== 'ping');
  assert.deepEqual(core.slice(0, 2), ['message_start', 'content_block_start']);
  assert.deepEqual(core.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
});

test('anthropic: countTokens matches the documented example (14)', async ({ port }) => {
  const r = await anthropic(port).messages.countTokens({
    model: 'claude-emu-1', system: 'You are a scientist',
    messages: [{ role: 'user', content: 'Hello, Claude' }] });
  assert.equal(r.input_tokens, 14);
});

test('anthropic: forced tool use returns a tool_use block (also streamed)', async ({ port }) => {
  const tools = [{ name: 'get_level', description: 'Water level at a gate',
                   input_schema: { type: 'object', properties: { gate: { type: 'string' } },
                                   required: ['gate'] } }];
  const body = { ...ask, tools, tool_choice: { type: 'tool', name: 'get_level' } };
  const msg = await anthropic(port).messages.create(body);
  assert.equal(msg.stop_reason, 'tool_use');
  assert.equal(msg.content[0].type, 'tool_use');
  assert.deepEqual(msg.content[0].input, { gate: 'filler' });
  const streamed = await anthropic(port).messages.stream(body).finalMessage();
  assert.deepEqual(streamed.content[0].input, { gate: 'filler' });
});

test('anthropic: prompt cache is read on the second call', async ({ port }) => {
  const body = { ...ask, system: [{ type: 'text', text: 'Cached rules. '.repeat(20),
                                   cache_control: { type: 'ephemeral' } }] };
  const a = await anthropic(port).messages.create(body);
  const b = await anthropic(port).messages.create(body);
  assert.ok(a.usage.cache_creation_input_tokens > 0);
  assert.equal(b.usage.cache_read_input_tokens, a.usage.cache_creation_input_tokens);
});

test('anthropic: a wrong key is an AuthenticationError', async ({ port }) => {
  const client = anthropic(port, { apiKey: 'sk-agent-own-key' });
  await assert.rejects(client.messages.create(ask), (e) => {
    assert.ok(e instanceof Anthropic.AuthenticationError, String(e));
    assert.equal(e.status, 401);
    assert.equal(e.error.error.type, 'authentication_error');
    return true;
  });
});

test('openai: chat.completions.create returns a completion with usage', async ({ port }) => {
  const c = await openai(port).chat.completions.create({
    model: 'gpt-emu', max_completion_tokens: 100,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] });
  assert.equal(c.object, 'chat.completion');
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.ok(c.choices[0].message.content.length > 0);
  assert.equal(c.usage.completion_tokens, 40);
  assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + 40);
});

test('openai: stream with include_usage ends with a usage chunk', async ({ port }) => {
  const stream = await openai(port).chat.completions.create({
    model: 'gpt-emu', stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'Hi' }] });
  let text = '', usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      text += ch.delta.content ?? '';
      finish = ch.finish_reason ?? finish;
    }
  }
  assert.ok(text.length > 0);
  assert.equal(finish, 'stop');
  assert.equal(usage.completion_tokens, 40);
});

test('openai: required tool choice returns tool_calls', async ({ port }) => {
  const c = await openai(port).chat.completions.create({
    model: 'gpt-emu', tool_choice: 'required',
    tools: [{ type: 'function', function: { name: 'open_gate', parameters: {
      type: 'object', properties: { gate: { type: 'integer' } }, required: ['gate'] } } }],
    messages: [{ role: 'user', content: 'Open gate 1' }] });
  assert.equal(c.choices[0].finish_reason, 'tool_calls');
  const call = c.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'open_gate');
  assert.deepEqual(JSON.parse(call.function.arguments), { gate: 1 });
});

test('openai: a wrong key is an AuthenticationError', async ({ port }) => {
  await assert.rejects(openai(port, { apiKey: 'sk-nope-123456' }).chat.completions.create({
    model: 'gpt-emu', messages: [{ role: 'user', content: 'Hi' }] }),
  (e) => { assert.ok(e instanceof OpenAI.AuthenticationError, String(e)); return true; });
});

// Separate emulators with tight limits.
const limited = [];
const testLimited = (name, args, fn) => limited.push({ name, args, fn });

testLimited('anthropic: 429 is a RateLimitError with retry-after, and the SDK retry waits for it',
  ['--input-tpm', '1000000', '--output-tpm', '1000000', '--rpm', '60', '--ttft-ms', '0',
   '--tokens-per-s', '100000', '--latency-spread', '0', '--output-tokens', '5'],
  async ({ port }) => {
    const client = anthropic(port);
    let limitedError = null;
    for (let i = 0; i < 61 && !limitedError; i++) { // bounded: one more than the bucket
      try { await client.messages.create(ask); } catch (e) { limitedError = e; }
    }
    assert.ok(limitedError instanceof Anthropic.RateLimitError, String(limitedError));
    assert.equal(limitedError.status, 429);
    assert.equal(limitedError.error.error.type, 'rate_limit_error');
    const retryAfter = Number(limitedError.headers.get('retry-after'));
    assert.ok(retryAfter >= 1 && retryAfter <= 2, `retry-after ${retryAfter}`);
    // The SDK's own retry (maxRetries 2) honours retry-after and then succeeds.
    const t0 = Date.now();
    const msg = await anthropic(port, { maxRetries: 2 }).messages.create(ask);
    const waited = (Date.now() - t0) / 1000;
    assert.equal(msg.type, 'message');
    assert.ok(waited >= 0.9 && waited < 6, `waited ${waited}s`);
  });

testLimited('openai: 429 is a RateLimitError; spend cap is insufficient_quota',
  ['--input-tpm', '1000000', '--output-tpm', '1000000', '--rpm', '10000', '--spend-cap',
   '--ttft-ms', '0'],
  async ({ port }) => {
    await assert.rejects(openai(port).chat.completions.create({
      model: 'gpt-emu', messages: [{ role: 'user', content: 'Hi' }] }),
    (e) => {
      assert.ok(e instanceof OpenAI.RateLimitError, String(e));
      assert.equal(e.code, 'insufficient_quota');
      assert.equal(e.headers.get('retry-after'), null);
      return true;
    });
  });

async function main() {
  let failed = 0;
  const run = async (name, fn, ctx) => {
    const t0 = Date.now();
    try {
      await fn(ctx);
      console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}\n     ${e && e.stack ? e.stack : e}`);
    }
  };
  const emu = await startEmu(FAST);
  try {
    for (const t of tests) await run(t.name, t.fn, emu);
  } finally {
    await emu.stop();
  }
  for (const t of limited) {
    const e = await startEmu(t.args);
    try { await run(t.name, t.fn, e); } finally { await e.stop(); }
  }
  console.log(failed ? `${failed} failed` : `all ${tests.length + limited.length} passed`);
  process.exit(failed ? 1 : 0);
}

const watchdog = setTimeout(() => { console.log('FAIL: e2e took over 150 s'); process.exit(1); }, 150000);
watchdog.unref();
main().catch((e) => { console.log('FAIL', e); process.exit(1); });
