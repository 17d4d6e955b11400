// Compiles against index.d.ts (test/types.test.mjs runs `tsc --noEmit --strict` on it when a
// TypeScript compiler is given): the README's calls, typed.
import { Client, LimitExceeded, Rejected, SluiceError, type Lease, type LimitAnswer } from 'sluice-client';

export async function example(): Promise<number> {
  const client = new Client({ agent: 'ts-agent', fleetSize: 4, log: (line: string) => console.error(line) });
  const lease: Lease = await client.lease({ inputTokens: 1200, outputTokens: 512, model: 'claude-x', maxWait: 60,
                                            checkpoint: async (info) => { void info.requestId; } });
  lease.record({ input_tokens: 1100, output_tokens: 90, cache_read_input_tokens: null });
  const r = await lease.settle();
  const n: number = await client.withLease({ request: { model: 'm', max_tokens: 10, messages: [] } }, async (l) => {
    l.record({ prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 0 } });
    return l.charged.output_tokens;
  });
  const a: LimitAnswer = await client.check('tool.call', { wait: 1 });
  await client.withLimit({ limit: 'tool.call', key: 'k' }, async (ans) => ans.remaining);
  try { await client.lease({ inputTokens: 1, outputTokens: 1, maxWait: 0 }); } catch (e) {
    if (e instanceof Rejected) void e.retryAfter;
    else if (e instanceof LimitExceeded) void e.deniedBy;
    else if (e instanceof SluiceError) void e.code;
  }
  await client.putTask('t1', { role: 'worker', dependsOn: [], state: 'running' });
  return r.adjust.input_tokens + n + a.remaining + (await client.estimate({ messages: [] })).input_tokens;
}
