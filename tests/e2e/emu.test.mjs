// emu.test.mjs - the official SDKs (@anthropic-ai/sdk, openai; pinned in package-lock.json)
// against the real sluice-emu on 127.0.0.1: create, stream, count_tokens, tool use,
// errors, the SDK's own retry honouring retry-after; the Responses API (responses.create,
// responses.stream, stream: true, function calls), thinking, structured outputs,
// models.list(), and a scripted three-turn agent loop (--script) that runs its tools.
//
// Run: SLUICE_EMU=build/src/emu/sluice-emu node tests/e2e/emu.test.mjs
// Fails when node_modules is missing: `make test` installs it (scripts/setup.d).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import { recordingFetch, untilLimited, untilRetried } from './attempts.mjs';
import { ask, countExample, forcedTool } from './bodies.mjs';

const require = createRequire(import.meta.url);
if (!existsSync(new URL('../node_modules/@anthropic-ai/sdk', import.meta.url)) ||
    !existsSync(new URL('../node_modules/openai', import.meta.url))) {
  console.log('FAIL: tests/node_modules missing (run make setup)');
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
  const r = await anthropic(port).messages.countTokens(countExample);
  assert.equal(r.input_tokens, 14);
});

test('anthropic: forced tool use returns a tool_use block (also streamed)', async ({ port }) => {
  const body = forcedTool;
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

const textOf = (r) => r.output.filter((o) => o.type === 'message')
  .flatMap((o) => o.content).map((p) => p.text).join('');
const SCHEMA = { type: 'object', additionalProperties: false, required: ['city', 'days', 'tags'],
                 properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 2 },
                               tags: { type: 'array', items: { type: 'string' } } } };

test('openai: responses.create returns a Response; output_text and usage', async ({ port }) => {
  const r = await openai(port).responses.create({ model: 'gpt-emu', instructions: 'Be brief.',
                                                   input: 'Hi', max_output_tokens: 100 });
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.ok(r.output_text.length > 0);
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.usage.output_tokens, 40);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 40);
  assert.equal(r.usage.input_tokens_details.cached_tokens, 0);
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
});

test('openai: responses.stream accumulates deltas into the final response', async ({ port }) => {
  const stream = openai(port).responses.stream({ model: 'gpt-emu', input: 'Hi',
                                                 reasoning: { effort: 'low' } });
  let text = '';
  const types = [];
  stream.on('event', (e) => types.push(e.type));
  stream.on('response.output_text.delta', (e) => { text += e.delta; });
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  // (This SDK adds output_text to a streamed final response only for parseable formats.)
  assert.equal(textOf(final), text);
  assert.deepEqual(final.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(final.usage.output_tokens_details.reasoning_tokens, 10);
});

test('openai: responses.create stream: true yields numbered events', async ({ port }) => {
  const events = await openai(port).responses.create({ model: 'gpt-emu', input: 'Hi', stream: true });
  const seqs = [];
  let last = null;
  for await (const e of events) { seqs.push(e.sequence_number); last = e; }
  assert.deepEqual(seqs, seqs.map((_, i) => i));
  assert.equal(last.type, 'response.completed');
  assert.equal(last.response.usage.output_tokens, 40);
});

test('openai: responses function call, then function_call_output', async ({ port }) => {
  const client = openai(port);
  const tools = [{ type: 'function', name: 'open_gate', strict: true, parameters: {
    type: 'object', properties: { gate: { type: 'integer' } }, required: ['gate'],
    additionalProperties: false } }];
  const r = await client.responses.create({ model: 'gpt-emu', input: 'Open gate 1', tools,
                                            tool_choice: 'required' });
  const call = r.output[0];
  assert.equal(call.type, 'function_call');
  assert.deepEqual(JSON.parse(call.arguments), { gate: 1 });
  const next = await client.responses.create({
    model: 'gpt-emu', previous_response_id: r.id, tools,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: 'opened' }] });
  assert.equal(next.status, 'completed');
  assert.ok(next.usage.input_tokens > r.usage.input_tokens);
  await assert.rejects(client.responses.create({ model: 'gpt-emu', input: 'x',
                                                 previous_response_id: 'resp_unknown' }),
    (e) => { assert.ok(e instanceof OpenAI.BadRequestError, String(e)); return true; });
});

test('openai: json_schema formats answer matching JSON (responses and chat)', async ({ port }) => {
  const client = openai(port);
  const r = await client.responses.create({ model: 'gpt-emu', input: 'Plan',
    text: { format: { type: 'json_schema', name: 'trip', schema: SCHEMA, strict: true } } });
  assert.deepEqual(JSON.parse(r.output_text), { city: 'filler', days: 2, tags: ['filler'] });
  const c = await client.chat.completions.create({ model: 'gpt-emu',
    messages: [{ role: 'user', content: 'Plan' }],
    response_format: { type: 'json_schema', json_schema: { name: 'trip', schema: SCHEMA, strict: true } } });
  assert.deepEqual(JSON.parse(c.choices[0].message.content), { city: 'filler', days: 2, tags: ['filler'] });
  const o = await client.chat.completions.create({ model: 'gpt-emu',
    messages: [{ role: 'user', content: 'Plan' }], response_format: { type: 'json_object' } });
  assert.equal(typeof JSON.parse(o.choices[0].message.content), 'object');
});

test('openai and anthropic: models.list()', async ({ port }) => {
  const ids = [];
  for await (const m of openai(port).models.list()) ids.push(m.id);
  assert.ok(ids.includes('gpt-5'), ids.join());
  const claude = [];
  for await (const m of anthropic(port).models.list()) claude.push(m);
  assert.ok(claude.some((m) => m.id === 'claude-sonnet-4-5-20250929'));
  assert.ok(claude.every((m) => m.type === 'model' && m.display_name));
  const one = await anthropic(port).models.retrieve('claude-sonnet-4-5-20250929');
  assert.equal(one.display_name, 'Claude Sonnet 4.5');
});

test('anthropic: thinking blocks with signatures (create and stream)', async ({ port }) => {
  const body = { ...ask, max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 1024 } };
  const msg = await anthropic(port).messages.create(body);
  assert.deepEqual(msg.content.map((b) => b.type), ['thinking', 'text']);
  assert.ok(msg.content[0].thinking.length > 0 && msg.content[0].signature.length >= 40);
  let thinking = '', sig = '';
  const stream = anthropic(port).messages.stream(body);
  stream.on('thinking', (delta) => { thinking += delta; });
  stream.on('signature', (s) => { sig = s; });
  const final = await stream.finalMessage();
  assert.equal(final.content[0].thinking, thinking);
  assert.equal(final.content[0].signature, sig);
  assert.ok(sig.length >= 40);
  assert.equal(final.usage.output_tokens, 40);
});

test('anthropic: role system in messages, output_config format and effort', async ({ port }) => {
  const msg = await anthropic(port).messages.create({ model: 'claude-emu-1', max_tokens: 500,
    messages: [{ role: 'system', content: 'Answer in JSON.' }, { role: 'user', content: 'Plan' }],
    output_config: { effort: 'medium', format: { type: 'json_schema', schema: SCHEMA } },
    context_management: { edits: [] }, metadata: { user_id: 'u1' } },
    { headers: { 'anthropic-beta': 'context-management-2025-06-27' } });
  assert.deepEqual(JSON.parse(msg.content[0].text), { city: 'filler', days: 2, tags: ['filler'] });
});

// Separate emulators with tight limits.
const limited = [];
const testLimited = (name, args, fn) => limited.push({ name, args, fn });

// The bucket holds 60 requests and refills one a second. Bounded by count, not by speed: on a
// loaded machine the calls before the first 429 may take longer than a second, and then more
// than 60 fit; how many more is bounded by the time those calls took, measured around them.
testLimited('anthropic: 429 is a RateLimitError with retry-after, and the SDK retry waits for it',
  ['--input-tpm', '1000000', '--output-tpm', '1000000', '--rpm', '60', '--ttft-ms', '0',
   '--tokens-per-s', '100000', '--latency-spread', '0', '--output-tokens', '5'],
  async ({ port }) => {
    const client = anthropic(port);
    // bounded: a minute's refill past the bucket
    const { error: limitedError, served, window_s } =
      await untilLimited(() => client.messages.create(ask), 120);
    assert.ok(limitedError instanceof Anthropic.RateLimitError, String(limitedError));
    assert.ok(served >= 60 && served <= 60 + Math.floor(window_s),
              `${served} served before the 429 in ${window_s} s at 60 rpm`);
    assert.equal(limitedError.status, 429);
    assert.equal(limitedError.error.error.type, 'rate_limit_error');
    const retryAfter = Number(limitedError.headers.get('retry-after'));
    assert.ok(retryAfter >= 1 && retryAfter <= 2, `retry-after ${retryAfter}`);
    // The SDK's own retry (maxRetries 2) honours retry-after and then succeeds. Calls until
    // one of them meets the empty bucket (the refill may serve the first ones at once).
    const attempts = [];
    const retrying = anthropic(port, { maxRetries: 2, fetch: recordingFetch(attempts) });
    const { result: msg, call } = await untilRetried(() => retrying.messages.create(ask), attempts, 60);
    assert.equal(msg.type, 'message');
    assert.deepEqual(call.map((a) => a.status), [429, 200], JSON.stringify(call));
    const [refused, retried] = call;
    const told_s = Number(refused.retryAfter), waited_s = (retried.sentMs - refused.doneMs) / 1000;
    assert.ok(told_s >= 1 && told_s <= 2, `retry-after ${refused.retryAfter}`);
    // Its own backoff would be 0.375-0.5 s; a client waiting out the whole window, 60 s.
    assert.ok(waited_s >= told_s - 0.02 && waited_s < 30, `waited ${waited_s}s, told ${told_s}s`);
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

// A scripted conversation: the loop runs the tools the script asks for and sends the results.
const dir = mkdtempSync(join(tmpdir(), 'emu-e2e-'));
const readme = join(dir, 'README.md');
writeFileSync(readme, 'sluice owns the quota\n');
const scriptPath = join(dir, 'script.json');
writeFileSync(scriptPath, JSON.stringify({ turns: [
  { tool_calls: [{ name: 'read_file', input: { path: readme } }], output_tokens: 60 },
  { text: 'Running the tests.', tool_calls: [{ name: 'run_command', input: { argv: ['echo', 'tests-ok'] } }] },
  { text: 'Done: tests-ok.', output_tokens: 30 }] }));
const runTool = (name, input) => name === 'read_file' ? readFileSync(input.path, 'utf8')
  : execFileSync(input.argv[0], input.argv.slice(1), { timeout: 10000 }).toString();

testLimited('anthropic: a scripted 3-turn agent loop runs its tools', [...FAST, '--script', scriptPath],
  async ({ port }) => {
    const client = anthropic(port);
    const tools = ['read_file', 'run_command'].map((name) => ({ name, input_schema: { type: 'object' } }));
    const messages = [{ role: 'user', content: 'fix the build' }];
    const seen = [];
    for (let step = 0; step < 6; step++) { // bounded
      const msg = await client.messages.stream({ model: 'claude-emu-1', max_tokens: 1000, tools, messages })
        .finalMessage();
      messages.push({ role: 'assistant', content: msg.content });
      const calls = msg.content.filter((b) => b.type === 'tool_use');
      seen.push([calls.map((c) => c.name).join(), msg.usage.output_tokens]);
      if (!calls.length) break;
      messages.push({ role: 'user', content: calls.map((c) => (
        { type: 'tool_result', tool_use_id: c.id, content: runTool(c.name, c.input) })) });
    }
    assert.deepEqual(seen.map((s) => s[0]), ['read_file', 'run_command', '']);
    assert.equal(seen[0][1], 60);
    assert.equal(seen[2][1], 30);
    assert.ok(messages.at(-1).content.at(-1).text.startsWith('Done: tests-ok.'));
    assert.equal(messages[2].content[0].content, 'sluice owns the quota\n');
  });

testLimited('openai: a scripted 3-turn Responses loop runs its tools', [...FAST, '--script', scriptPath],
  async ({ port }) => {
    const client = openai(port);
    const tools = ['read_file', 'run_command'].map((name) => ({ type: 'function', name,
                                                                parameters: { type: 'object' } }));
    const input = [{ role: 'user', content: 'fix the build' }];
    const seen = [];
    for (let step = 0; step < 6; step++) { // bounded
      const r = await client.responses.stream({ model: 'gpt-emu', tools, input }).finalResponse();
      input.push(...r.output);
      const calls = r.output.filter((o) => o.type === 'function_call');
      seen.push(calls.map((c) => c.name).join());
      if (!calls.length) { assert.ok(textOf(r).startsWith('Done: tests-ok.'), textOf(r)); break; }
      for (const c of calls)
        input.push({ type: 'function_call_output', call_id: c.call_id,
                     output: runTool(c.name, JSON.parse(c.arguments)) });
    }
    assert.deepEqual(seen, ['read_file', 'run_command', '']);
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
