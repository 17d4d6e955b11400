// proxy_endpoints.test.mjs - embeddings, moderations, Anthropic Message Batches, OpenAI Files and
// Batch with the official SDKs' own calls: straight to sluice-emu with the real key, then
// through sluiced with only a base URL and a sluice token. Every proxied call is a lease of
// its agent; embeddings settle their usage, a batch's results settle what the emulator billed
// for it, and a batch over the batch pool's max_batch_requests is refused 429 in the
// provider's shape with a retry-after before it reaches the provider.
//
// Run: SLUICED=build/src/server/sluiced SLUICE_EMU=build/src/emu/sluice-emu node tests/e2e/proxy_endpoints.test.mjs
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { REAL_KEY, getJson, pool, runBehindSluiced, sdks, startEmu } from './proxy_harness.mjs';

const { Anthropic, OpenAI } = sdks();
const { toFile } = createRequire(import.meta.url)('openai');

const BATCH_S = 0.4; // the emulator processes a batch this long after its create
const FAST = ['--input-tpm', '10000000', '--output-tpm', '10000000', '--rpm', '100000',
              '--ttft-ms', '5', '--tokens-per-s', '5000', '--latency-spread', '0',
              '--output-tokens', '30', '--batch-seconds', String(BATCH_S)];
const ROOMY = { input_tpm: 10000000, output_tpm: 10000000, rpm: 100000 };
const TOKEN = 'sluice-token-batcher-1';
const ADMIN = 'sluice-admin-token-1';

// A dedicated embeddings pool is only config: its models route there. The batch pools have
// the providers' batch limits: rpm to the batch endpoints, max_batch_requests in the queue.
function config(emuPort) {
  return 'proxy:\n  default_pool: gpt\npools:\n' +
    pool('claude', emuPort, 'anthropic', ROOMY) +
    pool('gpt', emuPort, 'openai', { ...ROOMY, models: '["gpt-*", "omni-moderation-*"]' }) +
    pool('embed', emuPort, 'openai', { ...ROOMY, models: '["text-embedding-*"]' }) +
    pool('claude-batch', emuPort, 'anthropic', { rpm: 50, batch: true, max_batch_requests: 5 }) +
    pool('gpt-batch', emuPort, 'openai', { rpm: 50, batch: true, max_batch_requests: 4 }) +
    `auth:\n  admin_token: ${ADMIN}\n  tokens:\n    - token: ${TOKEN}\n      agent: batcher-1\n`;
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

const direct = (ctx) => ({
  anthropic: new Anthropic({ apiKey: REAL_KEY, baseURL: `http://127.0.0.1:${ctx.direct.port}`,
                             maxRetries: 0, timeout: 30000 }),
  openai: new OpenAI({ apiKey: REAL_KEY, baseURL: `http://127.0.0.1:${ctx.direct.port}/v1`,
                       maxRetries: 0, timeout: 30000 }),
});
const proxied = (ctx) => ({
  anthropic: new Anthropic({ apiKey: TOKEN, baseURL: `http://127.0.0.1:${ctx.port}/anthropic`,
                             maxRetries: 0, timeout: 30000 }),
  openai: new OpenAI({ apiKey: TOKEN, baseURL: `http://127.0.0.1:${ctx.port}/openai/v1`,
                       maxRetries: 0, timeout: 30000 }),
});

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

/** Retrieves until `done(batch)`; bounded: 100 looks, 20 s. `looks.n` counts the retrieves. */
async function until(retrieve, done, looks = {}) {
  const t0 = Date.now();
  looks.n = 0;
  for (let i = 0; i < 100 && Date.now() - t0 < 20000; i++) {
    const b = await retrieve();
    looks.n++;
    if (done(b)) return b;
    await sleep(150);
  }
  throw new Error('the batch did not end within 20 s');
}

const ask = (text) => ({ model: 'claude-emu-1', max_tokens: 100,
                         messages: [{ role: 'user', content: text }] });
const chatLine = (id, text) => JSON.stringify({
  custom_id: id, method: 'POST', url: '/v1/chat/completions',
  body: { model: 'gpt-emu-1', max_completion_tokens: 100,
          messages: [{ role: 'user', content: text }] } });

/** The settled events of the agent on `pool` since `from` (an index into the event log). */
function settles(ctx, pool, from = 0) {
  return readFileSync(ctx.sluiced.eventLog, 'utf8').split('\n').filter(Boolean)
    .map((l) => JSON.parse(l)).slice(from)
    .filter((e) => e.event === 'settled' && e.pool === pool && e.agent === 'batcher-1');
}
/** settles() once it holds at least n events (the log is flushed within 250 ms); bounded: 5 s. */
async function settlesAtLeast(ctx, pool, from, n) {
  const t0 = Date.now();
  let s = settles(ctx, pool, from);
  while (s.length < n && Date.now() - t0 < 5000) {
    await sleep(50);
    s = settles(ctx, pool, from);
  }
  return s;
}
const eventCount = (ctx) => readFileSync(ctx.sluiced.eventLog, 'utf8').split('\n').filter(Boolean).length;

/** The agent once its leases are settled. Bounded: 300 looks, 30 s. */
async function settledAgent(ctx) {
  const t0 = Date.now();
  for (let i = 0; i < 300 && Date.now() - t0 < 30000; i++) {
    const r = await fetch(`http://127.0.0.1:${ctx.port}/v1/agents`,
                          { headers: { authorization: `Bearer ${ADMIN}` } });
    const a = (await r.json()).agents.find((x) => x.name === 'batcher-1');
    if (a && a.leases === 0) return a;
    await sleep(10);
  }
  throw new Error('batcher-1 still holds a lease after 30 s');
}

// ---- straight to the emulator -----------------------------------------------------------

test('emu: embeddings.create gives vectors of the model dimension, the same for the same input', async (ctx) => {
  const { openai } = direct(ctx);
  const a = await openai.embeddings.create({ model: 'text-embedding-3-small', input: ['hello world', 'bye'] });
  assert.equal(a.data.length, 2);
  assert.equal(a.data[0].embedding.length, 1536); // the SDK decoded the base64 it asked for
  assert.ok(a.usage.prompt_tokens > 0);
  const b = await openai.embeddings.create({ model: 'text-embedding-3-small', input: 'hello world',
                                             encoding_format: 'float' });
  assert.ok(Math.abs(b.data[0].embedding[7] - a.data[0].embedding[7]) < 1e-6);
  const norm = Math.sqrt(b.data[0].embedding.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-6);
  const big = await openai.embeddings.create({ model: 'text-embedding-3-large', input: [[1, 2, 3]] });
  assert.equal(big.data[0].embedding.length, 3072);
  assert.equal(big.usage.prompt_tokens, 3); // a token array counts its length
});

test('emu: moderations.create answers every input', async (ctx) => {
  const r = await direct(ctx).openai.moderations.create({ model: 'omni-moderation-latest',
                                                           input: ['one', 'two'] });
  assert.equal(r.results.length, 2);
  assert.equal(r.results[0].flagged, false);
  assert.equal(typeof r.results[0].categories.violence, 'boolean');
});

test('emu: messages.batches create, retrieve, results; billed in /stats', async (ctx) => {
  const { anthropic } = direct(ctx);
  const before = (await getJson(ctx.direct.port, '/stats')).batches.anthropic;
  const created = await anthropic.messages.batches.create({ requests: [
    { custom_id: 'a', params: ask('first') }, { custom_id: 'b', params: ask('second one') }] });
  assert.equal(created.processing_status, 'in_progress');
  assert.equal(created.request_counts.processing, 2);
  const ended = await until(() => anthropic.messages.batches.retrieve(created.id),
                            (b) => b.processing_status === 'ended');
  assert.equal(ended.request_counts.succeeded, 2);
  let inTokens = 0, outTokens = 0;
  const ids = [];
  for await (const r of await anthropic.messages.batches.results(created.id)) {
    assert.equal(r.result.type, 'succeeded');
    ids.push(r.custom_id);
    inTokens += r.result.message.usage.input_tokens;
    outTokens += r.result.message.usage.output_tokens;
  }
  assert.deepEqual(ids.sort(), ['a', 'b']);
  const after = (await getJson(ctx.direct.port, '/stats')).batches.anthropic;
  assert.equal(after.input_tokens - before.input_tokens, inTokens);
  assert.equal(after.output_tokens - before.output_tokens, outTokens);
  assert.equal(outTokens, 60);
  const del = await anthropic.messages.batches.delete(created.id);
  assert.equal(del.type, 'message_batch_deleted');
});

test('emu: files.create, batches.create, retrieve, files.content', async (ctx) => {
  const { openai } = direct(ctx);
  const jsonl = [chatLine('r1', 'one'), chatLine('r2', 'two two'), chatLine('r3', 'three')].join('\n');
  const file = await openai.files.create({ file: await toFile(Buffer.from(jsonl), 'in.jsonl'),
                                           purpose: 'batch' });
  assert.equal(file.purpose, 'batch');
  assert.equal(file.bytes, Buffer.byteLength(jsonl));
  assert.equal(await (await openai.files.content(file.id)).text(), jsonl);
  const batch = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions',
                                              completion_window: '24h' });
  assert.equal(batch.status, 'validating');
  const done = await until(() => openai.batches.retrieve(batch.id), (b) => b.status === 'completed');
  assert.equal(done.request_counts.total, 3);
  assert.equal(done.request_counts.completed, 3);
  const lines = (await (await openai.files.content(done.output_file_id)).text()).trim().split('\n')
    .map((l) => JSON.parse(l));
  assert.deepEqual(lines.map((l) => l.custom_id).sort(), ['r1', 'r2', 'r3']);
  assert.equal(lines[0].response.status_code, 200);
  assert.equal(lines[0].response.body.usage.completion_tokens, 30);
  assert.equal((await openai.files.delete(file.id)).deleted, true);
});

test('emu: the batch queue bound and the batch endpoints RPM answer 429 with retry-after', async (ctx) => {
  const small = new Anthropic({ apiKey: REAL_KEY, baseURL: `http://127.0.0.1:${ctx.small.port}`,
                                maxRetries: 0, timeout: 30000 });
  await small.messages.batches.create({ requests: [{ custom_id: 'a', params: ask('x') },
                                                   { custom_id: 'b', params: ask('y') }] });
  await assert.rejects(small.messages.batches.create({ requests: [
    { custom_id: 'c', params: ask('x') }, { custom_id: 'd', params: ask('y') }] }), (e) => {
    assert.equal(e.status, 429);
    assert.equal(e.error.error.type, 'rate_limit_error');
    assert.ok(Number(e.headers.get('retry-after')) >= 1);
    return true;
  });
  // --batch-rpm 4: the create, the refused create and two lists, then a 429.
  await small.messages.batches.list();
  await small.messages.batches.list();
  await assert.rejects(small.messages.batches.list(), (e) => e.status === 429 &&
                       Number(e.headers.get('retry-after')) >= 1);
});

// ---- through the proxy --------------------------------------------------------------------

test('proxy: embeddings.create leases on the embeddings pool and settles usage.prompt_tokens', async (ctx) => {
  const from = eventCount(ctx);
  const before = (await getJson(ctx.behind.port, '/stats')).batches.embeddings.prompt_tokens;
  const r = await proxied(ctx).openai.embeddings.create({ model: 'text-embedding-3-small',
                                                         input: ['a longer sentence to embed', 'two'] });
  assert.equal(r.data.length, 2);
  assert.equal(r.data[1].embedding.length, 1536);
  await settledAgent(ctx);
  const billed = (await getJson(ctx.behind.port, '/stats')).batches.embeddings.prompt_tokens - before;
  const s = await settlesAtLeast(ctx, 'embed', from, 1);
  assert.equal(s.length, 1);
  assert.equal(s[0].input_tokens, r.usage.prompt_tokens);
  assert.equal(s[0].input_tokens, billed);
  assert.equal(s[0].output_tokens, 0);
});

test('proxy: moderations.create is one lease of no tokens', async (ctx) => {
  const from = eventCount(ctx);
  const r = await proxied(ctx).openai.moderations.create({ model: 'omni-moderation-latest', input: 'hi' });
  assert.equal(r.results.length, 1);
  await settledAgent(ctx);
  const s = await settlesAtLeast(ctx, 'gpt', from, 1);
  assert.equal(s.length, 1);
  assert.equal(s[0].input_tokens + s[0].output_tokens, 0);
});

test('proxy: messages.batches through the batch pool; over max_batch_requests is a 429; results settle the bill', async (ctx) => {
  const { anthropic } = proxied(ctx);
  const from = eventCount(ctx);
  const before = (await getJson(ctx.behind.port, '/stats')).batches.anthropic;
  const first = await anthropic.messages.batches.create({ requests: [
    { custom_id: 'a', params: ask('one') }, { custom_id: 'b', params: ask('two') },
    { custom_id: 'c', params: ask('three') }] });
  assert.equal(first.processing_status, 'in_progress');
  // 3 in the queue, bound 5: 3 more are refused by sluice, before the provider sees them.
  const sent = (await getJson(ctx.behind.port, '/stats')).batches.anthropic.batches;
  await assert.rejects(anthropic.messages.batches.create({ requests: [
    { custom_id: 'd', params: ask('x') }, { custom_id: 'e', params: ask('y') },
    { custom_id: 'f', params: ask('z') }] }), (e) => {
    assert.equal(e.status, 429);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'rate_limit_error');
    assert.match(e.error.error.message, /max_batch_requests 5/);
    assert.equal(e.headers.get('retry-after'), '60');
    return true;
  });
  assert.equal((await getJson(ctx.behind.port, '/stats')).batches.anthropic.batches, sent);
  const looks = {};
  const ended = await until(() => anthropic.messages.batches.retrieve(first.id),
                            (b) => b.processing_status === 'ended', looks);
  assert.match(ended.results_url, new RegExp(`^http://127\\.0\\.0\\.1:${ctx.port}/anthropic/`));
  let inTokens = 0, outTokens = 0, n = 0;
  for await (const r of await anthropic.messages.batches.results(first.id)) {
    n++;
    inTokens += r.result.message.usage.input_tokens;
    outTokens += r.result.message.usage.output_tokens;
  }
  assert.equal(n, 3);
  // Seen ended by the retrieve: its 3 requests left the queue, so 3 fit again.
  const second = await anthropic.messages.batches.create({ requests: [
    { custom_id: 'g', params: ask('x') }, { custom_id: 'h', params: ask('y') },
    { custom_id: 'i', params: ask('z') }] });
  await anthropic.messages.batches.cancel(second.id);
  const listed = [];
  for await (const b of anthropic.messages.batches.list()) listed.push(b.id);
  assert.ok(listed.includes(first.id) && listed.includes(second.id));
  await settledAgent(ctx);
  const after = (await getJson(ctx.behind.port, '/stats')).batches.anthropic;
  // Every call that reached the provider was a lease of the agent on the batch pool: two
  // creates, the retrieves, results (a retrieve and the download), a cancel and a list.
  const calls = 6 + looks.n;
  const s = await settlesAtLeast(ctx, 'claude-batch', from, calls);
  assert.equal(s.length, calls, JSON.stringify(s));
  assert.equal(s.reduce((t, e) => t + e.input_tokens, 0), inTokens);
  assert.equal(s.reduce((t, e) => t + e.output_tokens, 0), outTokens);
  assert.equal(inTokens, after.input_tokens - before.input_tokens);
  assert.equal(outTokens, after.output_tokens - before.output_tokens);
});

test('proxy: files.create and batches.create through the batch pool; files.content settles the bill', async (ctx) => {
  const { openai } = proxied(ctx);
  const from = eventCount(ctx);
  const before = (await getJson(ctx.behind.port, '/stats')).batches.openai;
  const jsonl = [chatLine('r1', 'one'), chatLine('r2', 'two'), chatLine('r3', 'three')].join('\n') + '\n';
  const file = await openai.files.create({ file: await toFile(Buffer.from(jsonl), 'in.jsonl'),
                                           purpose: 'batch' });
  const batch = await openai.batches.create({ input_file_id: file.id,
                                              endpoint: '/v1/chat/completions', completion_window: '24h' });
  // The proxy counted the 3 lines it saw uploaded: 3 more are over max_batch_requests 4.
  await assert.rejects(openai.batches.create({ input_file_id: file.id,
                                               endpoint: '/v1/chat/completions', completion_window: '24h' }), (e) => {
    assert.equal(e.status, 429);
    assert.equal(e.code, 'rate_limit_exceeded');
    assert.ok(Number(e.headers.get('retry-after')) >= 1);
    return true;
  });
  const looks = {};
  const done = await until(() => openai.batches.retrieve(batch.id), (b) => b.status === 'completed',
                           looks);
  const text = await (await openai.files.content(done.output_file_id)).text();
  const lines = text.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, 3);
  assert.equal((await openai.files.retrieve(file.id)).id, file.id);
  assert.ok((await openai.batches.list()).data.some((b) => b.id === batch.id));
  assert.equal((await openai.files.delete(file.id)).deleted, true);
  await settledAgent(ctx);
  const after = (await getJson(ctx.behind.port, '/stats')).batches.openai;
  // upload, create, the retrieves, content, file retrieve, list, delete
  const calls = 6 + looks.n;
  const s = await settlesAtLeast(ctx, 'gpt-batch', from, calls);
  assert.equal(s.length, calls, JSON.stringify(s));
  assert.equal(s.reduce((t, e) => t + e.input_tokens, 0), after.input_tokens - before.input_tokens);
  assert.equal(s.reduce((t, e) => t + e.output_tokens, 0), after.output_tokens - before.output_tokens);
  assert.equal(after.output_tokens - before.output_tokens, 90);
});

// Batch ids follow proxy_routes.c's path rules: tests/integration/proxy/test_path_dots.py
// (raw request lines; fetch would resolve the dot segments before sending).
test('proxy: the pool key never reached a client or the event log', async (ctx) => {
  assert.ok(!readFileSync(ctx.sluiced.eventLog, 'utf8').includes(REAL_KEY));
  assert.ok(!ctx.sluiced.output().includes(REAL_KEY));
});

const direct_ = await startEmu(FAST);
const behind = await startEmu(FAST);
const small = await startEmu([...FAST, '--batch-queue', '3', '--batch-rpm', '4', '--batch-seconds', '60']);
await runBehindSluiced(tests, config(behind.port), { direct: direct_, behind, small }, behind,
                       [direct_, behind, small]);
