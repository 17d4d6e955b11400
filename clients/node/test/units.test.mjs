// Pure parts of the Node client: the backoff rule, usage shapes, retry-after, the local bucket.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { LocalBucket } from '../src/local.js';
import { backoffDelay, errorFromAnswer, retryAfterSeconds, usageFields } from '../src/index.js';
import * as sluice from '../src/index.js';

test('backoff is full jitter within [0, min(cap, base 2^n)] and never below retry-after', () => {
  for (let n = 0; n < 12; n++)
    for (const u of [0, 0.25, 0.5, 0.999999]) {
      const d = backoffDelay(n, 1, 30, -1, u);
      assert.ok(d >= 0 && d <= Math.min(30, 2 ** n), `n ${n} u ${u}: ${d}`);
    }
  assert.equal(backoffDelay(3, 1, 30, 7, 0), 7);
  assert.equal(backoffDelay(5000, 1, 30, -1, 0.5), 15);
  assert.ok(backoffDelay(0, 1, 30, -1, 1) < 1);
  assert.equal(backoffDelay(2, NaN, 30, NaN, 0.5), 0);
});

test('usage: Anthropic, OpenAI chat, OpenAI responses, a message with usage', () => {
  assert.deepEqual(usageFields({ input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 3, cache_read_input_tokens: 40 }),
                   { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 3, cache_read_input_tokens: 40, got_429: false, failed: false });
  const chat = usageFields({ prompt_tokens: 100, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 64 } });
  assert.equal(chat.input_tokens, 36);
  assert.equal(chat.cache_read_input_tokens, 64);
  assert.equal(chat.output_tokens, 7);
  const resp = usageFields({ input_tokens: 50, output_tokens: 9, input_tokens_details: { cached_tokens: 20 } });
  assert.equal(resp.input_tokens, 30);
  assert.equal(resp.cache_read_input_tokens, 20);
  assert.equal(usageFields({ type: 'message', usage: { input_tokens: 4, output_tokens: 2 } }).input_tokens, 4);
  assert.throws(() => usageFields({ input_tokens: -1 }), /usage.input_tokens must be an integer >= 0, not -1/);
  assert.throws(() => usageFields({ foo: 1 }), sluice.InvalidRequest);
});

test('usage: a caught 429 with retry-after (Headers or object), other failures', () => {
  const h = new Headers({ 'retry-after': '3', 'anthropic-ratelimit-input-tokens-remaining': '0', 'x-other': 'y' });
  const u = usageFields({ status: 429, headers: h });
  assert.equal(u.got_429, true);
  assert.equal(u.failed, true);
  assert.equal(u.retry_after, 3);
  assert.deepEqual(u.headers, { 'anthropic-ratelimit-input-tokens-remaining': '0' });
  assert.equal(usageFields({ status: 429, headers: { 'Retry-After-Ms': '1500' } }).retry_after, 1.5);
  const overloaded = usageFields({ status: 529, headers: {} });
  assert.equal(overloaded.got_429, false);
  assert.equal(overloaded.failed, true);
  assert.equal(retryAfterSeconds([['retry-after', new Date(10_000 + 4000).toUTCString()]], 10_000 - 1000 + 1000), 4);
});

test('errorFromAnswer maps statuses to classes and keeps the code', () => {
  const cases = [[400, sluice.InvalidRequest], [401, sluice.Forbidden], [403, sluice.Forbidden], [404, sluice.NotFound],
                 [409, sluice.Conflict], [410, sluice.LeaseExpired], [413, sluice.TooLarge],
                 [422, sluice.ExceedsCapacity], [503, sluice.Unavailable], [500, sluice.ProtocolError]];
  for (const [status, Cls] of cases) {
    const e = errorFromAnswer('x', status, { error: { type: 't', message: 'm' } }); // an unknown code
    assert.ok(e instanceof Cls && e instanceof sluice.SluiceError, `${status}`);
    assert.equal(e.code, 't');
  }
  assert.ok(errorFromAnswer('x', 410, null) instanceof sluice.Conflict);
  // the code decides, the status only when the code is unknown
  assert.ok(errorFromAnswer('x', 404, { error: { type: 'already_settled' } }) instanceof sluice.Conflict);
  assert.ok(errorFromAnswer('x', 413, { error: { type: 'body_too_large' } }) instanceof sluice.InvalidRequest);
  assert.ok(errorFromAnswer('x', 413, { error: { type: 'exceeds_capacity' } }) instanceof sluice.ExceedsCapacity);
  assert.ok(errorFromAnswer('x', 415, { error: { type: 'unsupported_media_type' } }) instanceof sluice.InvalidRequest);
  assert.ok(errorFromAnswer('x', 429, { error: { type: 'too_many_streams' } }) instanceof sluice.Rejected);
  const s = errorFromAnswer('x', 429, { status: 'rejected', reason: 'suspended', retry_after: 300 });
  assert.ok(s instanceof sluice.Suspended && s instanceof sluice.Rejected);
  assert.equal(s.retryAfter, 300);
});

test('every error type of sluiced\'s table (src/common/errors.def) has its class here', () => {
  const def = readFileSync(new URL('../../../src/common/errors.def', import.meta.url), 'utf8');
  const rows = [...def.matchAll(/^SL_ERROR\(\w+,\s*(\d+),\s*"(\w+)"/gm)];
  assert.ok(rows.length >= 8, `${rows.length} rows`);
  for (const [, status, type] of rows) {
    const e = errorFromAnswer('x', Number(status), { error: { type, message: 'm' } });
    assert.ok(!(e instanceof sluice.ProtocolError), `${type} (${status}) has no class`);
    assert.equal(e.code, type);
  }
});

test('the local bucket refills per minute, waits, and refuses what never fits', () => {
  const b = new LocalBucket([600, 0, 0], 0);
  assert.equal(b.take([600, 10, 1], 0), 0);
  assert.equal(b.take([60, 0, 1], 0), 6); // 60 tokens at 10/s
  assert.equal(b.take([60, 0, 1], 6), 0);
  assert.equal(b.take([601, 0, 1], 100), -1);
  b.adjust([1000, 0, 0], 100);
  assert.equal(b.level[0], 600);
});
