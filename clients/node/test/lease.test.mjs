// The lease API of the Node client against a real sluiced: grant and settle from SDK usage,
// withLease / dispose ending the lease, a queued wait with its checkpoint first, maxWait,
// rejects, the 429 backoff, and the error classes.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as sluice from '../src/index.js';
import { CONFIG } from './config.mjs';
import { startSluiced } from './daemon.mjs';

let d;
before(async () => { d = await startSluiced(CONFIG); });
after(async () => { await d.stop(); });
const client = (agent, o = {}) => new sluice.Client({ url: d.url, agent, ...o });

describe('leases', () => {
  test('a lease is granted and settled from an Anthropic usage object', async () => {
    const c = client('node-grant');
    const lease = await c.lease({ inputTokens: 1000, outputTokens: 200, model: 'claude-x' });
    assert.match(lease.id, /^l_\d+$/);
    assert.equal(lease.local, false);
    assert.equal(lease.charged.output_tokens, 200);
    lease.record({ input_tokens: 900, output_tokens: 50, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
    const r = await lease.settle();
    assert.equal(r.answer.status, 'settled');
    assert.equal(r.adjust.output_tokens, 150);
    assert.equal(r.backoff, 0);
    assert.equal(lease.state, 'settled');
    await assert.rejects(lease.settle(), sluice.Conflict);
  });

  test('snake_case options and an OpenAI usage settle the same way', async () => {
    const c = client('node-openai');
    const lease = await c.lease({ input_tokens: 500, output_tokens: 100 });
    const r = await lease.settle({ prompt_tokens: 500, completion_tokens: 40,
                                   prompt_tokens_details: { cached_tokens: 100 } });
    assert.equal(r.adjust.output_tokens, 60);
    assert.equal(r.counted, true);
  });

  test('withLease settles what fn recorded on return and cancels on a throw', async () => {
    const c = client('node-with');
    const out = await c.withLease({ inputTokens: 100, outputTokens: 10 }, async (lease) => {
      lease.record({ input_tokens: 100, output_tokens: 5 });
      return lease;
    });
    assert.equal(out.state, 'settled');
    let seen;
    await assert.rejects(c.withLease({ inputTokens: 100, outputTokens: 10 }, async (lease) => {
      seen = lease;
      throw new Error('the model call failed');
    }), /the model call failed/);
    assert.equal(seen.state, 'cancelled');
    await assert.rejects(seen.cancel(), sluice.Conflict); // sluiced ended it: a second cancel is 409
  });

  test('Symbol.asyncDispose ends an open lease (await using)', async () => {
    assert.equal(typeof Symbol.asyncDispose, 'symbol', 'Node >= 20 has Symbol.asyncDispose');
    const c = client('node-dispose');
    const lease = await c.lease({ inputTokens: 10, outputTokens: 10 });
    await lease[Symbol.asyncDispose]();
    assert.equal(lease.state, 'cancelled');
    assert.equal(await lease.dispose(), null); // once only
  });

  test('await using ends the lease at the block\'s end (where the syntax exists)', async (t) => {
    const AsyncFunction = (async () => {}).constructor;
    let body;
    try {
      body = new AsyncFunction('c', `let kept;
        { await using lease = await c.lease({ inputTokens: 10, outputTokens: 10 }); kept = lease; }
        return kept;`);
    } catch {
      return t.skip(`Node ${process.version} has no \`await using\` syntax; Symbol.asyncDispose and withLease are tested`);
    }
    const lease = await body(client('node-using'));
    assert.equal(lease.state, 'cancelled');
  });

  test('attachLease settles a lease granted to another Lease object by id', async () => {
    const c = client('node-attach');
    const granted = await c.lease({ inputTokens: 10, outputTokens: 10 });
    const r = await c.attachLease(granted.id).settle({ input_tokens: 10, output_tokens: 2 });
    assert.equal(r.adjust.output_tokens, 8);
    await assert.rejects(granted.cancel(), sluice.Conflict);
  });

  test('a queued lease calls the checkpoint before its first wait, then is granted', async () => {
    const holder = client('node-holder');
    const held = await holder.lease({ inputTokens: 10, outputTokens: 10, pool: 'one' });
    const c = client('node-queued');
    const events = [];
    const got = c.lease({
      inputTokens: 10, outputTokens: 10, pool: 'one',
      checkpoint: async (info) => { events.push(['checkpoint', info.kind, info.requestId]); },
      onWait: (w) => { events.push(['wait', w.kind]); },
    });
    setTimeout(() => held.cancel(), 300);
    const lease = await got;
    assert.deepEqual(events[0].slice(0, 2), ['checkpoint', 'queued']);
    assert.equal(events[0][2], lease.requestId);
    assert.deepEqual(events[1], ['wait', 'queued']);
    assert.equal(events.filter((e) => e[0] === 'checkpoint').length, 1);
    assert.ok(lease.waited > 0.2, `waited ${lease.waited} s`);
    await lease.cancel();
  });

  test('a checkpoint object is saved to checkpointPath in the C format before the wait', async () => {
    const holder = client('node-holder2');
    const held = await holder.lease({ inputTokens: 10, outputTokens: 10, pool: 'one' });
    const path = join(mkdtempSync(join(tmpdir(), 'sluice-cp-')), 'agent.checkpoint');
    const c = client('node-cpfile');
    let onDisk = null;
    const e = await c.lease({
      inputTokens: 10, outputTokens: 10, pool: 'one', maxWait: 0.5,
      checkpoint: { goal: 'fix it', step: '1/2', decisions: [{ decision: 'd', reason: 'r' }] },
      checkpointPath: path,
      onWait: () => { onDisk = JSON.parse(readFileSync(path, 'utf8')); },
    }).catch((err) => err);
    assert.ok(e instanceof sluice.MaxWaitExceeded, String(e));
    assert.ok(e instanceof sluice.Rejected);
    assert.match(e.ticket, /^t_\d+$/);
    assert.equal(onDisk.sluice_checkpoint, 1);
    assert.equal(onDisk.goal, 'fix it');
    assert.equal(onDisk.request_id.length, 32);
    await held.cancel();
  });

  test('a wait callback that returns true gives up: Canceled', async () => {
    const holder = client('node-holder3');
    const held = await holder.lease({ inputTokens: 10, outputTokens: 10, pool: 'one' });
    const c = client('node-giveup');
    await assert.rejects(c.lease({ inputTokens: 10, outputTokens: 10, pool: 'one', onWait: () => true }),
                         sluice.Canceled);
    await held.cancel();
  });

  test('an AbortSignal gives up a held wait: Canceled, and the place in the queue is freed', async () => {
    const holder = client('node-holder4');
    const held = await holder.lease({ inputTokens: 10, outputTokens: 10, pool: 'one' });
    const c = client('node-abort');
    for (const extra of [{}, { onWait: () => {} }]) { // a held POST, and a long-polled ticket
      const ac = new AbortController();
      setTimeout(() => ac.abort(), 200);
      const t0 = performance.now();
      const e = await c.lease({ inputTokens: 10, outputTokens: 10, pool: 'one', signal: ac.signal, ...extra }).catch((x) => x);
      assert.ok(e instanceof sluice.Canceled, String(e));
      assert.ok(performance.now() - t0 > 150 && performance.now() - t0 < 3000);
    }
    await new Promise((r) => setTimeout(r, 1200)); // sluiced drops a gone client's place within 1 s
    assert.equal((await c.getPool('one')).queue.depth, 0);
    await held.cancel();
  });

  test('a reject whose retry lies beyond maxWait is Rejected with its fields', async () => {
    const c = client('node-reject');
    const big = await c.lease({ inputTokens: 5000, outputTokens: 10, pool: 'tight' });
    const e = await c.lease({ inputTokens: 5000, outputTokens: 10, pool: 'tight', maxWait: 0 }).catch((x) => x);
    assert.ok(e instanceof sluice.Rejected, String(e));
    assert.equal(e.status, 429);
    assert.equal(e.reason, 'queue_wait_exceeds_max');
    assert.ok(e.retryAfter > 1, `retryAfter ${e.retryAfter}`);
    await big.cancel();
  });

  test('a recorded 429 reports got_429 with retry-after and the next lease backs off', async () => {
    const c = client('node-429', { pool: 'blocked' }); // a reported 429 holds its pool's grants
    const lease = await c.lease({ inputTokens: 100, outputTokens: 10 });
    const caught = Object.assign(new Error('429 rate_limit_error'), { status: 429, headers: { 'retry-after': '2' } });
    const r = await lease.settle(caught);
    assert.equal(r.counted, false);
    assert.ok(r.backoff >= 2, `backoff ${r.backoff}`);
    const e = await c.lease({ inputTokens: 1, outputTokens: 1, maxWait: 0.1 }).catch((x) => x);
    assert.ok(e instanceof sluice.Rejected && e.reason === 'backoff', String(e));
  });

  test('errors carry their class, status and API code', async () => {
    const c = client('node-errors');
    const nf = await c.lease({ inputTokens: 1, outputTokens: 1, pool: 'nope' }).catch((x) => x);
    assert.ok(nf instanceof sluice.NotFound && nf instanceof sluice.SluiceError, String(nf));
    assert.equal(nf.code, 'not_found');
    const cap = await c.lease({ inputTokens: 1, outputTokens: 10_000_000 }).catch((x) => x);
    assert.ok(cap instanceof sluice.ExceedsCapacity, String(cap));
    assert.equal(cap.code, 'exceeds_capacity'); // told from body_too_large by its code, not its status
    const bad = await c.lease({ inputTokens: -5, outputTokens: 1 }).catch((x) => x);
    assert.ok(bad instanceof sluice.InvalidRequest);
    assert.match(bad.message, /input_tokens -5/);
    const server400 = await c.lease({ inputTokens: 1, outputTokens: 1, priority: 'urgent' }).catch((x) => x);
    assert.ok(server400 instanceof sluice.InvalidRequest && server400.status === 400, String(server400));
    assert.throws(() => new sluice.Client({ agent: 'bad name' }), sluice.InvalidRequest);
  });

  test('extend moves the expiry', async () => {
    const c = client('node-extend');
    const lease = await c.lease({ inputTokens: 1, outputTokens: 1, ttl: 5 });
    const before = lease.expiresAt;
    await lease.extend(300);
    assert.ok(lease.expiresAt > before + 200);
    await lease.cancel();
  });

  test('200 concurrent leases on one client wait in sluiced\'s queue and are all granted', async () => {
    const c = client('node-many', { log: (l) => assert.fail(`no fail-open expected: ${l}`) });
    let waited = 0;
    const one = async () => {
      const lease = await c.lease({ inputTokens: 1, outputTokens: 1, pool: 'crowd', maxWait: 60,
                                    onWait: () => { waited++; } });
      assert.equal(lease.local, false);
      await lease.cancel();
    };
    await Promise.all(Array.from({ length: 200 }, one));
    assert.ok(waited >= 100, `${waited} waits`); // the pool's concurrency 1 queued them
    assert.equal(c.mode, 'coordinated');
    c.close();
  });

  test('calls reuse one keep-alive connection', async () => {
    const c = client('node-keepalive');
    for (let i = 0; i < 5; i++) await (await c.lease({ inputTokens: 1, outputTokens: 1 })).cancel();
    const free = Object.values(c._http.agent.freeSockets).flat();
    assert.equal(free.length, 1);
    c.close();
  });
});

describe('task graph and pools', () => {
  test('put, list and delete a task; a lease may name it', async () => {
    const c = client('node-tasks');
    await c.putTask('t-a', { role: 'worker', state: 'running' });
    await c.putTask('t-b', { role: 'worker', dependsOn: ['t-a'], state: 'waiting' });
    const list = await c.getTasks();
    assert.ok(JSON.stringify(list).includes('t-b'));
    const lease = await c.lease({ inputTokens: 1, outputTokens: 1, task: 't-a' });
    await lease.cancel();
    await c.deleteTask('t-b');
    await c.deleteTask('t-a');
    const pool = await c.getPool();
    assert.equal(pool.limits.input_tpm, 600000);
  });
});
