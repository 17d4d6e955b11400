// proxy_continue.test.mjs - proxy.continue_capped for OpenAI, through the official `openai` SDK:
// an answer cut at the learned output cap is continued, and the client sees one answer.
//
// sluice-emu plays a script: the first turn is a long answer ("Alpha ..." of 5000 tokens), the
// turn after an assistant message is "omega." A call capped at the learned percentile (80 after
// the warm-up; each cut answer is recorded as twice its cap, so it climbs as the tests run) is
// cut (finish_reason "length", Responses status incomplete), continued with its text as an
// assistant message, and finished by the next part. The client sees one answer whose text is
// the cut text followed by "omega.", the last part's ending, and usage equal to the parts' sum;
// what sluice settled for the parts equals what the emulator billed.
//
// Run: SLUICED=build/src/server/sluiced SLUICE_EMU=build/src/emu/sluice-emu node tests/e2e/proxy_continue.test.mjs
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getJson, pool, run, sdks, startEmu, startSluiced } from './proxy_harness.mjs';

const { OpenAI } = sdks();

const FAST = ['--input-tpm', '10000000', '--output-tpm', '10000000', '--rpm', '100000',
              '--ttft-ms', '5', '--tokens-per-s', '5000', '--latency-spread', '0',
              '--cache-min-tokens', '0'];
const POOL = { input_tpm: 10000000, output_tpm: 10000000, rpm: 100000, output_reserve: 'learned' };
const SCRIPT = { turns: [{ text: 'Alpha', output_tokens: 5000 }, { text: 'omega.' }],
                 after_last: 'repeat' };
const LONG = 5000;
const CAP = 80; // 20 answers cut at the client's own 40 teach a percentile of 2 x 40

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

const openai = (ctx, agent) => new OpenAI({
  apiKey: 'sluice-unused', baseURL: `http://127.0.0.1:${ctx.port}/openai/v1`, maxRetries: 0,
  timeout: 30000, defaultHeaders: { 'x-sluice-agent': agent } });

const ask = (extra) => ({ model: 'gpt-emu-1', messages: [{ role: 'user', content: 'Hello' }],
                          ...extra });

/** The `settled` events of `agent` in the event log (flushed within 250 ms). */
async function settled(ctx, agent) {
  await new Promise((res) => setTimeout(res, 400));
  return readFileSync(ctx.sluiced.eventLog, 'utf8').split('\n').filter((l) => l.trim())
    .map((l) => JSON.parse(l)).filter((e) => e.event === 'settled' && e.agent === agent);
}

/** What the emulator billed since `before` (its /stats), input and output. */
async function billedSince(ctx, before) {
  const now = await getJson(ctx.emu.port, '/stats');
  const input = (s) => s.tokens.input + s.tokens.cache_creation_input + s.tokens.cache_read_input;
  return { input: input(now) - input(before), output: now.tokens.output - before.tokens.output,
           requests: now.requests - before.requests };
}

/** The parts settled for `agent` equal the emulator's bill: two calls, the first cut at CAP. */
async function assertSettledIsBilled(ctx, agent, before) {
  const parts = await settled(ctx, agent);
  const bill = await billedSince(ctx, before);
  assert.equal(parts.length, 2, JSON.stringify(parts));
  assert.ok(parts[0].output_tokens >= CAP && parts[0].output_tokens < LONG, 'cut at the cap');
  assert.equal(bill.requests, 2);
  const sum = (k) => parts.reduce((a, p) => a + p[k], 0);
  assert.equal(sum('input_tokens'), bill.input);
  assert.equal(sum('output_tokens'), bill.output);
  return { input: sum('input_tokens'), output: sum('output_tokens') };
}

test('chat.completions.create: a cut answer comes back as one completion', async (ctx) => {
  const before = await getJson(ctx.emu.port, '/stats');
  const c = await openai(ctx, 'chat-whole').chat.completions.create(
    ask({ max_completion_tokens: 20000 }));
  assert.equal(c.choices.length, 1);
  assert.equal(c.choices[0].finish_reason, 'stop');
  const text = c.choices[0].message.content;
  assert.ok(text.startsWith('Alpha'), text.slice(0, 40));
  assert.ok(text.endsWith('omega.'), text.slice(-40));
  const sum = await assertSettledIsBilled(ctx, 'chat-whole', before);
  assert.equal(c.usage.prompt_tokens, sum.input);
  assert.equal(c.usage.completion_tokens, sum.output);
  assert.equal(c.usage.total_tokens, sum.input + sum.output);
});

test('chat.completions.create with the deprecated max_tokens is continued too', async (ctx) => {
  const before = await getJson(ctx.emu.port, '/stats');
  const c = await openai(ctx, 'chat-legacy').chat.completions.create(ask({ max_tokens: 20000 }));
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.ok(c.choices[0].message.content.endsWith('omega.'));
  const sum = await assertSettledIsBilled(ctx, 'chat-legacy', before);
  assert.equal(c.usage.completion_tokens, sum.output);
});

test('a chat stream is spliced into one stream with one finish and the summed usage', async (ctx) => {
  const before = await getJson(ctx.emu.port, '/stats');
  const stream = await openai(ctx, 'chat-stream').chat.completions.create(
    ask({ max_completion_tokens: 20000, stream: true, stream_options: { include_usage: true } }));
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.equal(new Set(chunks.map((k) => k.id)).size, 1, 'one completion id');
  const finishes = chunks.flatMap((k) => k.choices).map((ch) => ch.finish_reason).filter((f) => f);
  assert.deepEqual(finishes, ['stop']);
  const roles = chunks.flatMap((k) => k.choices).filter((ch) => ch.delta.role);
  assert.equal(roles.length, 1, 'one opening chunk');
  const usages = chunks.filter((k) => k.usage);
  assert.equal(usages.length, 1);
  assert.equal(chunks[chunks.length - 1], usages[0], 'the usage chunk comes last');
  const text = chunks.flatMap((k) => k.choices).map((ch) => ch.delta.content ?? '').join('');
  assert.ok(text.startsWith('Alpha'), text.slice(0, 40));
  assert.ok(text.endsWith('omega.'), text.slice(-40));
  const sum = await assertSettledIsBilled(ctx, 'chat-stream', before);
  assert.equal(usages[0].usage.prompt_tokens, sum.input);
  assert.equal(usages[0].usage.completion_tokens, sum.output);
});

test('a chat stream without include_usage gets no usage chunk, and is still one answer', async (ctx) => {
  const before = await getJson(ctx.emu.port, '/stats');
  const stream = openai(ctx, 'chat-stream-bare').chat.completions.stream(
    ask({ max_completion_tokens: 20000 }));
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'stop');
  assert.ok(final.choices[0].message.content.startsWith('Alpha'));
  assert.ok(final.choices[0].message.content.endsWith('omega.'));
  await assertSettledIsBilled(ctx, 'chat-stream-bare', before);
});

test('responses.create: a cut Response comes back completed, with the summed usage', async (ctx) => {
  const before = await getJson(ctx.emu.port, '/stats');
  const r = await openai(ctx, 'resp-whole').responses.create(
    { model: 'gpt-emu-1', input: 'Hello', max_output_tokens: 20000 });
  assert.equal(r.status, 'completed');
  assert.ok(r.output_text.startsWith('Alpha'), r.output_text.slice(0, 40));
  assert.ok(r.output_text.endsWith('omega.'), r.output_text.slice(-40));
  assert.equal(r.output.filter((i) => i.type === 'message').length, 1);
  const sum = await assertSettledIsBilled(ctx, 'resp-whole', before);
  assert.equal(r.usage.input_tokens, sum.input);
  assert.equal(r.usage.output_tokens, sum.output);
  assert.equal(r.usage.total_tokens, sum.input + sum.output);
});

test('a Responses stream is spliced: one message, ordered sequence numbers, the summed usage', async (ctx) => {
  const before = await getJson(ctx.emu.port, '/stats');
  const stream = await openai(ctx, 'resp-stream').responses.create(
    { model: 'gpt-emu-1', input: 'Hello', max_output_tokens: 20000, stream: true });
  const events = [];
  for await (const ev of stream) events.push(ev);
  const types = events.map((e) => e.type);
  assert.equal(types.filter((t) => t === 'response.created').length, 1);
  assert.equal(types.filter((t) => t === 'response.output_item.added').length, 1);
  assert.equal(types.filter((t) => t === 'response.output_text.done').length, 1);
  assert.equal(types.filter((t) => t === 'response.completed').length, 1);
  assert.equal(types[types.length - 1], 'response.completed');
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  const item = events.find((e) => e.type === 'response.output_item.added').item.id;
  const deltas = events.filter((e) => e.type === 'response.output_text.delta');
  assert.ok(deltas.every((e) => e.item_id === item && e.output_index === 0));
  const text = deltas.map((e) => e.delta).join('');
  assert.ok(text.startsWith('Alpha'), text.slice(0, 40));
  assert.ok(text.endsWith('omega.'), text.slice(-40));
  assert.equal(events.find((e) => e.type === 'response.output_text.done').text, text);
  const final = events[events.length - 1].response;
  assert.equal(final.id, events[0].response.id, 'the id response.created announced');
  assert.equal(final.status, 'completed');
  assert.equal(final.output.filter((i) => i.type === 'message').length, 1);
  assert.equal(final.output.find((i) => i.type === 'message').content[0].text, text);
  assert.equal(final.output.find((i) => i.type === 'message').id, item);
  const sum = await assertSettledIsBilled(ctx, 'resp-stream', before);
  assert.equal(final.usage.input_tokens, sum.input);
  assert.equal(final.usage.output_tokens, sum.output);
});

test('responses.stream (the SDK helper) gives the joined final Response', async (ctx) => {
  const before = await getJson(ctx.emu.port, '/stats');
  const stream = openai(ctx, 'resp-helper').responses.stream(
    { model: 'gpt-emu-1', input: 'Hello', max_output_tokens: 20000 });
  const final = await stream.finalResponse();
  assert.equal(final.status, 'completed');
  assert.ok(final.output_text.startsWith('Alpha'));
  assert.ok(final.output_text.endsWith('omega.'));
  await assertSettledIsBilled(ctx, 'resp-helper', before);
});

test('a call asking for JSON is capped but not continued: a second message is no JSON', async (ctx) => {
  const before = await getJson(ctx.emu.port, '/stats');
  const c = await openai(ctx, 'chat-json').chat.completions.create(
    ask({ max_completion_tokens: 20000, response_format: { type: 'json_object' } }));
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.ok(c.usage.completion_tokens < LONG);
  assert.equal((await billedSince(ctx, before)).requests, 1);
});

test('the cap is learned per agent group: a planner with no samples is not capped', async (ctx) => {
  const before = await getJson(ctx.emu.port, '/stats');
  const client = new OpenAI({
    apiKey: 'sluice-unused', baseURL: `http://127.0.0.1:${ctx.port}/openai/v1`, maxRetries: 0,
    timeout: 30000, defaultHeaders: { 'x-sluice-agent': 'plan-1', 'x-sluice-role': 'planner' } });
  const c = await client.chat.completions.create(ask({ max_completion_tokens: 20000 }));
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.equal(c.usage.completion_tokens, LONG); // the whole answer in one call
  assert.equal((await billedSince(ctx, before)).requests, 1);
});

test('an answer within the cap is one call, as it came', async (ctx) => {
  const before = await getJson(ctx.emu.port, '/stats');
  const c = await openai(ctx, 'chat-short').chat.completions.create({
    model: 'gpt-emu-1', max_completion_tokens: 20000,
    messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Said.' },
               { role: 'user', content: 'Go on.' }] });
  assert.equal(c.choices[0].message.content, 'omega.');
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.equal((await billedSince(ctx, before)).requests, 1);
});

const dir = mkdtempSync(join(tmpdir(), 'sluice-continue-'));
const script = join(dir, 'script.json');
writeFileSync(script, JSON.stringify(SCRIPT));
const emu = await startEmu([...FAST, '--script', script]);
let failed = 1;
try {
  const sluiced = await startSluiced('proxy:\n  continue_capped: true\npools:\n' +
                                     pool('gpt', emu.port, 'openai', POOL));
  try {
    const ctx = { port: sluiced.port, sluiced, emu };
    for (let i = 0; i < 20; i++) {
      const c = await openai(ctx, 'warm').chat.completions.create(ask({ max_completion_tokens: 40 }));
      assert.equal(c.choices[0].finish_reason, 'length');
    }
    failed = await run(tests, ctx);
    const stats = await getJson(emu.port, '/stats');
    if (stats.http_429 !== 0) {
      console.log(`FAIL the emulator answered ${stats.http_429} calls with 429`);
      failed++;
    }
  } finally {
    await sluiced.stop();
  }
} finally {
  await emu.stop();
  rmSync(dir, { recursive: true, force: true });
}
console.log(failed ? `${failed} failed` : 'all passed');
process.exit(failed ? 1 : 0);
