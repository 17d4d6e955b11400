// The Node client with auth on: the token from options or $SLUICE_TOKEN, 401 and 403 as
// Forbidden with their codes, and a settle carrying provider rate-limit headers from an agent
// token that may not resync: applied, with the headers counted as ignored.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as sluice from '../src/index.js';
import { startSluiced } from './daemon.mjs';

const CONFIG = `
cold_start: full
pools:
  default: {input_tpm: 600000, output_tpm: 600000, rpm: 10000}
auth:
  admin_token: "node-admin-token-0001"
  tokens:
    - token: "node-agent-token-0001"
      agent: node-auth
`;
let d;
before(async () => { d = await startSluiced(CONFIG); });
after(async () => { await d.stop(); });

test('a wrong token is Forbidden (unauthorized), another agent\'s name is Forbidden (forbidden)', async () => {
  const wrong = new sluice.Client({ url: d.url, agent: 'node-auth', token: 'nope' });
  const e = await wrong.lease({ inputTokens: 1, outputTokens: 1 }).catch((x) => x);
  assert.ok(e instanceof sluice.Forbidden, String(e));
  assert.equal(e.code, 'unauthorized');
  const other = new sluice.Client({ url: d.url, agent: 'someone-else', token: 'node-agent-token-0001' });
  const f = await other.lease({ inputTokens: 1, outputTokens: 1 }).catch((x) => x);
  assert.ok(f instanceof sluice.Forbidden, String(f));
  assert.equal(f.code, 'forbidden');
  await assert.rejects(other.putTask('t', { role: 'worker', state: 'running' }), sluice.Forbidden);
});

test('$SLUICE_TOKEN is read when the client is made; rate-limit headers an agent token may not resync are ignored, the settle applied', async () => {
  const saved = process.env.SLUICE_TOKEN;
  process.env.SLUICE_TOKEN = 'node-agent-token-0001';
  let c;
  try {
    c = new sluice.Client({ url: d.url, agent: 'node-auth' });
  } finally {
    if (saved === undefined) delete process.env.SLUICE_TOKEN; else process.env.SLUICE_TOKEN = saved;
  }
  const lease = await c.lease({ inputTokens: 100, outputTokens: 10 });
  const caught = { status: 429, headers: { 'retry-after': '0', 'anthropic-ratelimit-input-tokens-limit': '1000',
                                           'anthropic-ratelimit-input-tokens-remaining': '0' } };
  const r = await lease.settle(caught);
  assert.equal(r.answer.status, 'settled');
  assert.equal(r.headersIgnored, 2);
});
