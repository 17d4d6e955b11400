// Long waits stay long: a sleep or a request timeout beyond setTimeout's 2^31-1 ms (24.8 days)
// must not fire at once (node sets an overflowing delay to 1 ms). A limit check that may wait
// "forever" sends wait 1e9 s and must not time itself out before sluiced answers.
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { Transport } from '../src/http.js';
import { sleepS } from '../src/time.js';

const within = (p, ms) => Promise.race([p.then(() => 'settled', () => 'settled'),
                                        new Promise((r) => setTimeout(() => r('pending'), ms))]);

test('a sleep of 3e9 s is still pending after 200 ms', async () => {
  const ac = new AbortController();
  assert.equal(await within(sleepS(3e9, ac.signal), 200), 'pending');
  ac.abort();
});

test('a request with a 1e9 s timeout to a silent server is still pending after 200 ms', async () => {
  const held = [];
  const silent = createServer((s) => held.push(s));
  await new Promise((r) => silent.listen(0, '127.0.0.1', r));
  const t = new Transport(`http://127.0.0.1:${silent.address().port}`, null, 0.5);
  try {
    assert.equal(await within(t.request('GET', '/x', null, 1e9), 200), 'pending');
  } finally {
    for (const s of held) s.destroy();
    silent.close();
    t.close();
  }
});
