// The 30-line agent (agent.mjs) in a three-turn loop against sluice-emu through sluiced's lease
// API: turn 2 is forced to wait (another agent holds the pool's one slot) and checkpoints
// first; sluiced is stopped before turn 3, which runs on the local share (fail-open).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import * as sluice from '../src/index.js';
import { runAgent } from './agent.mjs';
import { startEmu, startSluiced } from './daemon.mjs';

const KEY = 'sk-node-agent';
const CONFIG = `
cold_start: full
pools:
  default: {input_tpm: 600000, output_tpm: 600000, rpm: 1000, concurrency: 1, max_queue_wait_s: 600}
limits:
  tool.call: {algorithm: token_bucket, rate: 10, period_s: 600}
`;
const FAST = ['--input-tpm', '1000000', '--output-tpm', '1000000', '--rpm', '10000', '--ttft-ms', '20',
              '--tokens-per-s', '5000', '--latency-spread', '0', '--output-tokens', '40'];

async function estimatorMissing(url) {
  const c = new sluice.Client({ url, agent: 'probe' });
  const a = await c.call('POST', '/v1/estimate', { request: { model: 'm', max_tokens: 1, messages: [] } });
  return a.status === 404 && !/^pool/.test(a.body?.error?.message ?? '') ? a.body?.error?.message : null;
}

for (const estimator of [false, true]) {
  test(`agent: three turns, a checkpointed wait, an action limit, fail-open${estimator ? ', the estimator' : ''}`, async (t) => {
    const emu = await startEmu(KEY, FAST);
    const d = await startSluiced(CONFIG);
    let stopped = false;
    try {
      const missing = estimator && await estimatorMissing(d.url);
      if (missing) return t.skip(`POST /v1/estimate is not on this sluiced (404: ${missing})`);
      const alerts = [];
      const client = new sluice.Client({ url: d.url, agent: 'node-agent', log: (l) => alerts.push(l) });
      const other = new sluice.Client({ url: d.url, agent: 'node-other' });
      const checkpointPath = join(mkdtempSync(join(tmpdir(), 'sluice-agent-')), 'agent.checkpoint');
      const beforeTurn = async (turn) => {
        if (turn === 2) { // hold the one slot for 0.4 s: turn 2 has to wait for it
          const held = await other.lease({ inputTokens: 10, outputTokens: 10 });
          setTimeout(() => held.cancel(), 400);
        }
        if (turn === 3) {
          assert.equal((await client.check('tool.call', { hits: 0 })).remaining, 8); // two tool calls counted
          await d.stop();
          stopped = true;
        }
      };
      const log = await runAgent({ client, provider: emu.url, apiKey: KEY, turns: 3, checkpointPath, estimator, beforeTurn });
      assert.deepEqual(log.map((l) => l.turn), [1, 2, 3]);
      assert.deepEqual(log.map((l) => l.local), [false, false, true]);
      assert.ok(log[1].waited > 0.3, `turn 2 waited ${log[1].waited} s`);
      assert.ok(existsSync(checkpointPath), 'turn 2 saved its checkpoint before waiting');
      const cp = JSON.parse(readFileSync(checkpointPath, 'utf8'));
      assert.equal(cp.step, 'turn 2');
      assert.equal(cp.next_call.messages.length, 3);
      assert.equal(alerts.length, 1);
      assert.match(alerts[0], /ALERT agent node-agent: .* fail-open/);
      const stats = await (await fetch(`${emu.url}/stats`)).json();
      assert.equal(stats.admitted, 3);
    } finally {
      if (!stopped) await d.stop();
      await emu.stop();
    }
  });
}
