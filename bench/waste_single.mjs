// waste_single.mjs - issue 24 "Measure" (a): one agent straight to sluice-emu against the
// same agent through sluiced's proxy, side by side in one run. Run by waste_single.sh
// (inside tests/harness/offline.sh); prints figures and never gates on them.
//   1. three sequential Messages calls with max_tokens 128000 (Claude Code's default),
//      non-streaming, ROUNDS rounds, direct and proxied interleaved; then the same at other
//      call sizes (SIZES: max_tokens 1,024 and 8,192, and ~20k and ~100k input tokens);
//   1b. the same on OpenAI's Chat Completions and Responses: three calls of 50,000 output
//      tokens allowed on a combined 60,000 tokens-a-minute bucket;
//   1c. the calls of part 1 streamed; calls above the pool's starting capacity (0.85 of
//      the limit) but within the limit, which the provider accepts (max_tokens 190,000 of
//      200,000, one call of ~360,000 input tokens of 400,000); the three calls on a
//      sluiced started with its default `cold_start: empty`; and two calls of ~300,000
//      input tokens, where the input bucket binds (straight, the second call's 429 is
//      retried after its retry-after, as the SDKs do);
//   2. a real `claude -p` three-turn tool task on the default model (Read → Read → an
//      answer, lib.mjs writeToolScript), and a real `codex exec` (the Responses API),
//      ROUNDS pairs interleaved, when tests/node_modules is installed (`make setup`).
// Both on one emulator at 400k input / 200k output tokens a minute, sluiced's pools
// configured the same with cold_start: full, as in the issue.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { BIN, HERE, KEY, agentToken, claudeToolSession, cleanEnv, codexConfig, startEmuWith,
         startSluiced, tempDir, writeToolScript } from '../tests/harness/lib.mjs';

const ROUNDS = Number(process.env.WASTE_ROUNDS || 2);
process.setMaxListeners(100); // every emulator and sluiced started adds an exit handler (lib.mjs)
const LIMITS = { input_tpm: 400000, output_tpm: 200000, rpm: 4000 };
const MARKER = 'waste-single-marker';
const CALL_TIMEOUT_MS = 120000;

/* The call sizes of part 1 after the default: [max_tokens, words of context before the
 * question]. Three calls of the largest hold ~300k of the 400k input a minute: none needs
 * to wait, straight or through sluiced. The row prints the input the emulator counted. */
const SIZES = [[1024, 0], [8192, 0], [8192, 20000], [128000, 100000]];

/** Three sequential calls of `maxTokens` (and `words` words of context) to `url`; resolves
 *  the seconds they took, or throws naming the status of a call that failed. */
async function threeCalls(url, headers, maxTokens = 128000, words = 0, usage = {}, stream = false, n = 3,
                          retry = false) {
  const context = words ? 'the '.repeat(words) + '\n' : '';
  const started = Date.now();
  for (let i = 0; i < n; i++) {
    let r;
    for (let attempt = 0; attempt < 5; attempt++) { // `retry`: a 429 waits its retry-after, as the SDKs do
      r = await fetch(url, {
      method: 'POST', signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
      headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...headers },
      body: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: maxTokens, ...(stream ? { stream } : {}),
                             messages: [{ role: 'user', content: `${context}Call ${i + 1}: summarise the plan.` }] }),
      });
      if (!(retry && r.status === 429)) break;
      await r.text();
      usage.retries = (usage.retries ?? 0) + 1;
      await new Promise((res) => setTimeout(res, 1000 * Number(r.headers.get('retry-after') ?? 1)));
    }
    const text = await r.text();
    if (r.status !== 200 || (stream && !text.includes('message_stop')))
      throw new Error(`call ${i + 1} to ${url}: ${r.status} ${text.slice(0, 200)}`);
    usage.input_tokens = stream ? JSON.parse(text.split('\n').find((l) => l.includes('"message_start"'))
      .slice('data: '.length)).message.usage?.input_tokens : JSON.parse(text).usage?.input_tokens;
  }
  return (Date.now() - started) / 1000;
}

const fmt = (xs) => xs.map((x) => x.toFixed(1)).join(', ');
const best = (xs) => Math.min(...xs);
function row(what, direct, proxied) {
  console.log(`${what.padEnd(48)} direct ${fmt(direct).padEnd(18)} s  proxied ${fmt(proxied).padEnd(18)} s  ` +
              `best ${best(direct).toFixed(1)} vs ${best(proxied).toFixed(1)} s: ratio ${(best(proxied) / best(direct)).toFixed(2)}`);
}

/** An emulator at LIMITS answering in 300 ms + 200 tokens/s, and a sluiced proxying to
 *  it (pools configured the same); `extra`: more emulator flags. */
async function pair(extra, coldStart = 'full') {
  const emu = await startEmuWith(['--input-tpm', LIMITS.input_tpm, '--output-tpm', LIMITS.output_tpm,
    '--rpm', LIMITS.rpm, '--ttft-ms', '300', '--tokens-per-s', '200', '--latency-spread', '0',
    ...extra].map(String));
  const sluiced = await startSluiced(emu.origin, ['calls', 'cc'], LIMITS, {}, coldStart);
  return { emu, sluiced, stop: async () => { await sluiced.stop(); await emu.stop(); } };
}

/** What the proxied runs on `p` cost: calls queued, resyncs, the emulator's 429s. */
async function counts(p) {
  await new Promise((r) => setTimeout(r, 400)); // the event log is flushed every 250 ms
  const events = p.sluiced.events();
  const stats = await p.emu.stats();
  return { queued: events.filter((e) => e.event === 'queued').length,
           resyncs: events.filter((e) => e.event === 'resync').length, http_429: stats.http_429 };
}
function printCounts(what, c) {
  console.log(`  ${what} through sluiced: ${c.queued} calls queued, ${c.resyncs} resyncs lowering a level; ` +
              `emulator 429s ${c.http_429}`);
}
async function tally(what, p) { printCounts(what, await counts(p)); }

console.log(`sluice-emu ${JSON.stringify(LIMITS)}, ttft 300 ms, 200 tokens/s; sluiced's pool the same, ` +
            `cold_start: full; ${ROUNDS} rounds, direct and proxied interleaved`);
const calls = await pair(['--output-tokens', '200']);
try {
  const d3 = [], p3 = [];
  for (let i = 0; i < ROUNDS; i++) {
    d3.push(await threeCalls(`${calls.emu.origin}/v1/messages`, { 'x-api-key': KEY }));
    p3.push(await threeCalls(`${calls.sluiced.origin}/anthropic/v1/messages`, { 'x-api-key': agentToken('calls') }));
  }
  row('3 sequential calls, max_tokens 128000', d3, p3);
  await tally('the calls', calls);
} finally { await calls.stop(); }
/* Each run of a size on a pair of its own: two runs of ~100k-token calls on one emulator
 * would spend more than its bucket, and the second would wait for the refill. */
async function sizedRun(maxTokens, words, viaSluice,
                        { stream = false, n = 3, coldStart = 'full', retry = false } = {}) {
  const p = await pair(['--output-tokens', '200'], coldStart);
  try {
    const usage = {};
    const s = viaSluice
      ? await threeCalls(`${p.sluiced.origin}/anthropic/v1/messages`, { 'x-api-key': agentToken('calls') },
                         maxTokens, words, usage, stream, n, retry)
      : await threeCalls(`${p.emu.origin}/v1/messages`, { 'x-api-key': KEY }, maxTokens, words, usage, stream, n,
                         retry);
    return { s, c: viaSluice ? await counts(p) : null, input_tokens: usage.input_tokens };
  } finally { await p.stop(); }
}
/* Part 1c's rows: [what, max_tokens, words of context, options of sizedRun]. */
const MORE = [
  ['3 calls streamed, max_tokens 128000', 128000, 0, { stream: true }],
  ['3 calls streamed, max_tokens 1024', 1024, 0, { stream: true }],
  ['3 calls, max_tokens 190000 (> 0.85 x 200k)', 190000, 0, {}],
  ['3 calls streamed, max_tokens 190000', 190000, 0, { stream: true }],
  ['1 call of ~360k input (> 0.85 x 400k)', 1024, 360000, { n: 1 }],
  ['3 calls, max_tokens 128000, cold_start: empty', 128000, 0, { coldStart: 'empty' }],
  // the input bucket binds: the second call waits for the refill (straight: its 429's
  // retry-after, as the SDKs do; through sluiced: the margin's climb, docs/design.md
  // "A climb while a call waits")
  ['2 calls of ~300k input (the bucket binds)', 1024, 300000, { n: 2, retry: true }],
];
async function sizedRow(what, maxTokens, words, opts) {
  const d = [], p = [], sum = { queued: 0, resyncs: 0, http_429: 0 };
  let inputTokens = 0;
  for (let i = 0; i < ROUNDS; i++) {
    const direct = await sizedRun(maxTokens, words, false, opts);
    d.push(direct.s);
    inputTokens = direct.input_tokens;
    let run;
    try {
      run = await sizedRun(maxTokens, words, true, opts);
    } catch (e) {
      console.log(`${what}: through sluiced FAILED: ${e.message}`);
      return;
    }
    p.push(run.s);
    for (const k of Object.keys(sum)) sum[k] += run.c[k];
  }
  row(what ?? `3 calls, max_tokens ${maxTokens}, ${inputTokens} input tokens`, d, p);
  printCounts('the calls', sum);
}
for (const [maxTokens, words] of SIZES) await sizedRow(null, maxTokens, words, {});
for (const [what, maxTokens, words, opts] of MORE) await sizedRow(what, maxTokens, words, opts);

/* The same on OpenAI's APIs: three sequential calls of 50,000 output tokens allowed on a
 * combined 60,000 tokens-a-minute bucket (OpenAI counts input + max tokens at the start),
 * Chat Completions (`max_completion_tokens`) and Responses (`max_output_tokens`), each run on
 * a pair of its own. Without the refund at each call's end, kept through the resync, the
 * second call would wait ~50 s for the refill. */
const OPENAI_LIMITS = { tokens_tpm: 60000, rpm: 4000 };
const OPENAI_MAX_TOKENS = 50000;
async function openaiThree(origin, key, api) {
  const started = Date.now();
  for (let i = 0; i < 3; i++) {
    const prompt = `Call ${i + 1}: summarise the plan.`;
    const [path, body] = api === 'chat'
      ? ['/v1/chat/completions', { model: 'gpt-4.1', max_completion_tokens: OPENAI_MAX_TOKENS,
                                   messages: [{ role: 'user', content: prompt }] }]
      : ['/v1/responses', { model: 'gpt-4.1', max_output_tokens: OPENAI_MAX_TOKENS, input: prompt }];
    const r = await fetch(`${origin}${path}`, {
      method: 'POST', signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: JSON.stringify(body),
    });
    const text = await r.text();
    if (r.status !== 200) throw new Error(`${api} call ${i + 1} to ${origin}: ${r.status} ${text.slice(0, 200)}`);
  }
  return (Date.now() - started) / 1000;
}
for (const api of ['chat', 'responses']) {
  const d = [], p = [], sum = { queued: 0, resyncs: 0, http_429: 0 };
  for (let i = 0; i < ROUNDS; i++) {
    for (const viaSluice of [false, true]) {
      const emu = await startEmuWith(['--input-tpm', '0', '--output-tpm', '0', '--tokens-tpm',
        OPENAI_LIMITS.tokens_tpm, '--rpm', OPENAI_LIMITS.rpm, '--ttft-ms', '300', '--tokens-per-s', '200',
        '--latency-spread', '0', '--output-tokens', '200'].map(String));
      const sluiced = await startSluiced(emu.origin, ['calls'], OPENAI_LIMITS);
      try {
        if (!viaSluice) { d.push(await openaiThree(emu.origin, KEY, api)); continue; }
        p.push(await openaiThree(`${sluiced.origin}/openai`, agentToken('calls'), api));
        const c = await counts({ emu, sluiced });
        for (const k of Object.keys(sum)) sum[k] += c[k];
      } finally { await sluiced.stop(); await emu.stop(); }
    }
  }
  row(`OpenAI ${api === 'chat' ? 'Chat Completions' : 'Responses'}, 3 calls of ${OPENAI_MAX_TOKENS} max`, d, p);
  printCounts('the calls', sum);
}

/** A real `codex exec` (tests/harness/codex.test.mjs) with its provider at `origin`/v1 and
 *  `key`: {code, ms}. Spawned without runHarness's strace, which slows codex by its
 *  syscalls: under it the proxied runs measured 1.15-1.18x, without it 1.02x on the same
 *  machine (bench/RESULTS.md). offline.sh keeps it on loopback. */
function codexExec(origin, key) {
  const c = tempDir('waste-codex');
  const home = join(c.dir, 'codex-home');
  mkdirSync(home);
  writeFileSync(join(home, 'config.toml'), codexConfig(`${origin}/v1`));
  const env = cleanEnv(c.dir, { CODEX_HOME: home, SLUICE_API_KEY: key });
  const started = Date.now();
  return new Promise((resolve) => {
    const p = spawn(join(BIN, 'codex'), ['exec', '--strict-config', '--skip-git-repo-check', 'Summarise the plan.'],
                    { env, cwd: c.dir, stdio: ['ignore', 'pipe', 'pipe'] });
    p.stdout.resume();
    p.stderr.resume();
    const kill = setTimeout(() => p.kill('SIGKILL'), CALL_TIMEOUT_MS);
    p.on('exit', (code) => { clearTimeout(kill); c.remove(); resolve({ code, ms: Date.now() - started }); });
  });
}

const t = tempDir('waste-single');
const claude = await pair(['--script', writeToolScript(t.dir, MARKER)]);
const emu = claude.emu, sluiced = claude.sluiced;
try {
  if (existsSync(join(HERE, '..', 'node_modules', '@anthropic-ai', 'claude-code'))) {
    const dc = [], pc = [];
    let failed = 0;
    for (let i = 0; i < ROUNDS; i++) {
      for (const [list, base, key] of [[dc, emu.origin, KEY],
                                       [pc, `${sluiced.origin}/anthropic`, agentToken('cc')]]) {
        const r = await claudeToolSession(base, key, MARKER);
        if (!r.ok) failed++;
        list.push(r.ms / 1000);
      }
    }
    row('claude -p, default model, 3-turn tool task', dc, pc);
    if (failed) console.log(`  ${failed} claude session(s) did not finish their task`);
    const cx = await pair(['--output-tokens', '200']); // unscripted: codex's own answer
    try {
      const dx = [], px = [];
      let codexFailed = 0;
      for (let i = 0; i < ROUNDS; i++) {
        for (const [list, base, key] of [[dx, cx.emu.origin, KEY],
                                         [px, `${cx.sluiced.origin}/openai`, agentToken('cc')]]) {
          const r = await codexExec(base, key);
          if (r.code !== 0) codexFailed++;
          list.push(r.ms / 1000);
        }
      }
      row('codex exec (Responses API), one answer', dx, px);
      if (codexFailed) console.log(`  ${codexFailed} codex run(s) did not finish`);
      await tally('the codex runs', cx);
    } finally { await cx.stop(); }
  } else {
    console.log('claude -p: skipped (tests/node_modules missing: make setup)');
  }
  await tally('the claude sessions', claude);
} finally { await claude.stop(); t.remove(); }
