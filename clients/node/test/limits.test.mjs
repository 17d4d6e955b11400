// Action limits through the Node client against a real sluiced: check (allowed, denied, held),
// withLimit (throws LimitExceeded, releases a concurrency hold even when fn throws), release,
// report, and Unreachable whatever failClosed says.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as sluice from '../src/index.js';
import { CONFIG } from './config.mjs';
import { freePort, startSluiced } from './daemon.mjs';

let d;
before(async () => { d = await startSluiced(CONFIG); });
after(async () => { await d.stop(); });
const client = (agent, o = {}) => new sluice.Client({ url: d.url, agent, ...o });

test('check is allowed until the bucket is empty, then denied with retryAfter', async () => {
  const c = client('node-lim-a');
  assert.equal((await c.check('tool.call')).allowed, true);
  const second = await c.check('tool.call');
  assert.equal(second.allowed, true);
  assert.equal(second.remaining, 0);
  const third = await c.check('tool.call');
  assert.equal(third.allowed, false);
  assert.equal(third.deniedBy, 'tool.call');
  assert.ok(third.retryAfter > 0);
  const e = await c.withLimit({ limit: 'tool.call' }, async () => 'ran').catch((x) => x);
  assert.ok(e instanceof sluice.LimitExceeded && e instanceof sluice.SluiceError, String(e));
  assert.equal(e.deniedBy, 'tool.call');
});

test('a queue limit is held by sluiced until it allows', async () => {
  const c = client('node-lim-paced');
  await c.check('paced');
  const held = await c.check('paced', { wait: 2 });
  assert.equal(held.allowed, true);
  assert.ok(held.waited > 0.1, `waited ${held.waited}`);
});

test('withLimit releases the concurrency hold it took, also when fn throws', async () => {
  const c = client('node-lim-sem');
  assert.equal(await c.withLimit({ limit: 'sem' }, async (a) => a.allowed), true);
  await assert.rejects(c.withLimit({ limit: 'sem' }, async () => { throw new Error('tool broke'); }), /tool broke/);
  const again = await c.check('sem');
  assert.equal(again.allowed, true, 'both holds were released');
  assert.equal((await c.release('sem')).status, 'released');
  await assert.rejects(c.release('sem'), sluice.NotFound);
});

test('report feeds an adaptive limit', async () => {
  const c = client('node-lim-api');
  const r = await c.report('api', { successes: 0, errors: 10 });
  assert.equal(r.status, 'reported');
  assert.ok(r.rate < 100, `rate ${r.rate}`);
});

test('an unknown limit is NotFound; a limit is never decided locally', async () => {
  const c = client('node-lim-nf');
  await assert.rejects(c.check('no.such'), sluice.NotFound);
  const gone = new sluice.Client({ url: `http://127.0.0.1:${await freePort()}`, agent: 'node-lim-gone',
                                   log: () => {} });
  await assert.rejects(gone.check('tool.call'), sluice.Unreachable);
  assert.equal(gone.mode, 'coordinated');
});
