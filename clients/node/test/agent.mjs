// A 30-line Node agent on the lease API: each turn leases its model call (estimated by sluiced
// when `estimator` is set), checkpoints before any wait, calls the provider, records the usage,
// and runs its tool under the action limit `tool.call` (which sluiced alone decides: while it
// is unreachable the agent runs the tool anyway, its own choice).
import { Unreachable, saveCheckpoint } from '../src/index.js';

export async function runAgent({ client, provider, apiKey, turns, checkpointPath, estimator, beforeTurn }) {
  const messages = [{ role: 'user', content: 'Make the parser tests pass.' }];
  const log = [];
  for (let turn = 1; turn <= turns; turn++) {
    await beforeTurn?.(turn);
    const request = { model: 'claude-emu-1', max_tokens: 200, messages };
    const checkpoint = (w) => saveCheckpoint(checkpointPath, { goal: 'parser tests', step: `turn ${turn}`,
                                                               next_call: request, request_id: w.requestId });
    const leaseOpts = estimator ? { request, checkpoint } : { inputTokens: 600, outputTokens: 200, checkpoint };
    const reply = await client.withLease(leaseOpts, async (lease) => {
      const res = await fetch(`${provider}/v1/messages`, { method: 'POST', body: JSON.stringify(request),
        headers: { 'content-type': 'application/json', 'x-api-key': apiKey, 'anthropic-version': '2023-06-01' } });
      if (!res.ok) { lease.record(res); throw new Error(`provider answered ${res.status}`); }
      const msg = await res.json();
      lease.record(msg.usage);
      log.push({ turn, lease: lease.id, local: lease.local, waited: lease.waited });
      return msg;
    });
    const tool = () => `ran tests after turn ${turn}: ${turn} failing`;
    const output = await client.withLimit({ limit: 'tool.call' }, tool)
      .catch((e) => { if (e instanceof Unreachable) return tool(); throw e; });
    messages.push({ role: 'assistant', content: reply.content }, { role: 'user', content: output });
  }
  return log;
}
