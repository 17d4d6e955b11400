// Fail-open of the Node client, as libsluice-client's: a dead sluiced switches it to a local
// share at once with one ALERT line, the share is the pool's learnt limits / fleetSize, settles
// stay local, sluiced is probed and the client comes back; failClosed throws Unreachable.
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { test } from 'node:test';
import * as sluice from '../src/index.js';
import { CONFIG } from './config.mjs';
import { freePort, startSluiced } from './daemon.mjs';

test('no sluiced: local leases, one alert, then back to coordinated when it starts', async () => {
  const port = await freePort();
  const lines = [];
  const c = new sluice.Client({ url: `http://127.0.0.1:${port}`, agent: 'node-fo', probeInterval: 0.2,
                                log: (l) => lines.push(l) });
  const a = await c.lease({ inputTokens: 100, outputTokens: 10 });
  const b = await c.lease({ inputTokens: 100, outputTokens: 10 });
  assert.equal(c.mode, 'local');
  assert.equal(a.local, true);
  assert.match(a.id, /^local-\d+$/);
  assert.equal(lines.length, 1);
  assert.match(lines[0], /^sluice: ALERT agent node-fo: sluiced at http:\/\/127\.0\.0\.1:\d+ unreachable \(.*\); fail-open: local share of pool default, probing every ~0\.2 s$/);
  const r = await a.settle({ input_tokens: 80, output_tokens: 4 });
  assert.equal(r.settledLocally, true);
  assert.deepEqual(r.adjust, { input_tokens: 20, output_tokens: 6 });
  await b.cancel();
  await assert.rejects(a.settle(), sluice.Conflict);
  const est = await c.estimate({ model: 'm', max_tokens: 300, messages: [{ role: 'user', content: 'x'.repeat(400) }] });
  assert.equal(est.exact, false);
  assert.equal(est.output_tokens, 300);
  assert.ok(est.input_tokens > 100);

  const d = await startSluiced(CONFIG, port);
  try {
    await new Promise((res) => setTimeout(res, 350)); // past the jittered probe time (<= 1.5 x 0.2 s)
    const back = await c.lease({ inputTokens: 100, outputTokens: 10 });
    assert.equal(back.local, false);
    assert.equal(c.mode, 'coordinated');
    assert.match(lines[1], /answers again; coordinated mode$/);
    await back.cancel();
  } finally {
    await d.stop();
  }
});

test('the local share is the pool limit learnt at the grant / fleetSize; a lost settle stays local', async () => {
  const d = await startSluiced(CONFIG);
  const c = new sluice.Client({ url: d.url, agent: 'node-share', fleetSize: 10, log: () => {} });
  const lease = await c.lease({ inputTokens: 100, outputTokens: 10 });
  await d.stop();
  const r = await lease.settle({ input_tokens: 100, output_tokens: 10 });
  assert.equal(r.settledLocally, true);
  assert.equal(c.mode, 'local');
  // default pool: input_tpm 600000 / 10 = 60000 a minute for this agent
  const ok = await c.lease({ inputTokens: 59_000, outputTokens: 10 });
  assert.equal(ok.local, true);
  await assert.rejects(c.lease({ inputTokens: 60_001, outputTokens: 10 }), sluice.ExceedsCapacity);
  await assert.rejects(c.lease({ inputTokens: 2_000, outputTokens: 10, maxWait: 0.5 }), sluice.MaxWaitExceeded);
});

test('failClosed: Unreachable instead of a local decision', async () => {
  const c = new sluice.Client({ url: `http://127.0.0.1:${await freePort()}`, agent: 'node-fc', failClosed: true,
                                log: () => assert.fail('no alert when fail-closed') });
  const e = await c.lease({ inputTokens: 1, outputTokens: 1 }).catch((x) => x);
  assert.ok(e instanceof sluice.Unreachable, String(e));
  assert.equal(c.mode, 'coordinated');
  await assert.rejects(c.estimate({ messages: [] }), sluice.Unreachable);
});

test('a sluiced that accepts but never answers fails open within requestTimeout', async () => {
  const held = [];
  const silent = createServer((sock) => held.push(sock)); // takes the connection, answers nothing
  await new Promise((res) => silent.listen(0, '127.0.0.1', res));
  try {
    const c = new sluice.Client({ url: `http://127.0.0.1:${silent.address().port}`, agent: 'node-rt',
                                  requestTimeout: 0.3, maxHold: 0, log: () => {} });
    const t0 = performance.now();
    const lease = await c.lease({ inputTokens: 1, outputTokens: 1, maxWait: 0 });
    assert.equal(lease.local, true);
    assert.ok(performance.now() - t0 < 2000, `${performance.now() - t0} ms`);
  } finally {
    for (const s of held) s.destroy();
    silent.close();
  }
});
