// record() with the official SDKs' own objects (@anthropic-ai/sdk and openai, as pinned by
// tests/e2e; skipped when `make setup` has not installed them): a Message's usage, a
// ChatCompletion's usage, and a caught RateLimitError from sluice-emu with its
// retry-after, each settled through a real sluiced. The emulator allows 2 requests a minute:
// the OpenAI call, the Anthropic call, and then the refused one.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as sluice from '../src/index.js';
import { CONFIG } from './config.mjs';
import { startEmu, startSluiced } from './daemon.mjs';

const E2E = fileURLToPath(new URL('../../../tests/e2e/', import.meta.url));
const missing = !existsSync(`${E2E}../node_modules/@anthropic-ai/sdk`) || !existsSync(`${E2E}../node_modules/openai`);
const KEY = 'sk-node-sdk';
let d, emu, Anthropic, OpenAI;

before(async () => {
  if (missing) return;
  const require = createRequire(`${E2E}package.json`);
  Anthropic = require('@anthropic-ai/sdk').default;
  OpenAI = require('openai').default;
  d = await startSluiced(CONFIG);
  emu = await startEmu(KEY, ['--input-tpm', '1000000', '--output-tpm', '1000000', '--rpm', '2', '--latency-spread', '0',
                             '--ttft-ms', '10', '--tokens-per-s', '5000', '--output-tokens', '30']);
});
after(async () => { await d?.stop(); await emu?.stop(); });
const skip = 'tests/node_modules is not installed (make setup)';

test('an OpenAI ChatCompletion usage settles with its cached tokens as cache reads', async (t) => {
  if (missing) return t.skip(skip);
  const c = new sluice.Client({ url: d.url, agent: 'node-sdk-openai' });
  const api = new OpenAI({ apiKey: KEY, baseURL: `${emu.url}/v1`, maxRetries: 0 });
  const lease = await c.lease({ inputTokens: 20, outputTokens: 100 });
  const done = await api.chat.completions.create({ model: 'gpt-emu-1', max_completion_tokens: 100,
                                                   messages: [{ role: 'user', content: 'Hello' }] })
;
  const r = await lease.settle(done);
  assert.equal(lease.recorded.input_tokens + lease.recorded.cache_read_input_tokens, done.usage.prompt_tokens);
  assert.equal(lease.recorded.output_tokens, done.usage.completion_tokens);
  assert.equal(r.counted, true);
});

test('an Anthropic Message usage, then the SDK\'s RateLimitError, settle through sluiced', async (t) => {
  if (missing) return t.skip(skip);
  const c = new sluice.Client({ url: d.url, agent: 'node-sdk-anthropic', pool: 'blocked' });
  const api = new Anthropic({ apiKey: KEY, baseURL: emu.url, maxRetries: 0 });
  const ask = { model: 'claude-emu-1', max_tokens: 100, messages: [{ role: 'user', content: 'Hello' }] };
  const ok = await c.withLease({ inputTokens: 20, outputTokens: 100 }, async (lease) => {
    lease.record(await api.messages.create(ask));
    return lease;
  });
  assert.equal(ok.state, 'settled');
  assert.equal(ok.recorded.output_tokens, 30);
  assert.ok(ok.recorded.input_tokens > 0);
  const lease = await c.lease({ inputTokens: 20, outputTokens: 100 });
  const err = await api.messages.create(ask).catch((e) => e); // the third call: refused with retry-after
  assert.equal(err.status, 429, String(err));
  const r = await lease.settle(err);
  assert.equal(lease.recorded.got_429, true);
  assert.ok(lease.recorded.retry_after > 0, JSON.stringify(lease.recorded));
  assert.equal(r.counted, false);
  assert.ok(r.backoff >= lease.recorded.retry_after);
});
