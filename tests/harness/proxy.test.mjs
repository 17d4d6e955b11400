// proxy.test.mjs - every harness task that finishes against sluice-emu, run again with
// only its base URL pointed at a real sluiced (which proxies to that sluice-emu) and its
// sluice token as the API key, offline as the other harness tests. Each case checks that
// the harness finished its task and that sluice settled every call it let through with
// what the emulator billed: the agent's settled leases in the event log = the calls the
// emulator admitted (one settle per lease, one more in sluice_settles_total), their
// input / output tokens = the input (uncached and cache writes: what input TPM counts;
// cache reads are free) / output tokens the emulator billed, the agent's tokens_out in
// GET /v1/agents the same, nothing left in flight and no upstream 429.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ADMIN_TOKEN, BIN, HERE, agentToken, cleanEnv, codexConfig, requireInstalled, runHarness, startEmu,
         startSluiced, tempDir } from './lib.mjs';

requireInstalled();
const PROMPT = 'Reply with the word the system under test answers.';
const OFFLINE = { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1',
                  DISABLE_AUTOUPDATER: '1', DISABLE_ERROR_REPORTING: '1' };

/** name: {prefix (the proxy's provider path), run(base, token) → harness result, text(stdout)}. */
const CASES = {};

for (const model of [null, 'claude-sonnet-4-5']) {
  const name = `claude-code-${model ?? 'default'}`;
  CASES[name] = {
    prefix: 'anthropic',
    run: (base, token, dir) => runHarness(join(BIN, 'claude'),
      ['-p', PROMPT, '--output-format', 'json', ...(model ? ['--model', model] : [])],
      { env: cleanEnv(dir, { ...OFFLINE, ANTHROPIC_BASE_URL: base, ANTHROPIC_API_KEY: token }), cwd: dir }),
    text: (stdout) => {
      const result = stdout.trim().split('\n').map((l) => JSON.parse(l)).find((m) => m.type === 'result');
      assert.ok(result && !result.is_error, `claude result: ${stdout.slice(0, 500)}`);
      return result.result;
    },
  };
  CASES[`claude-agent-sdk-${model ?? 'default'}`] = {
    prefix: 'anthropic',
    run: (base, token, dir) => runHarness(process.execPath, [join(HERE, 'sdk_task.mjs'), 'claude-agent-sdk', base],
      { env: cleanEnv(dir, { ...OFFLINE, HARNESS_API_KEY: token, ...(model ? { HARNESS_MODEL: model } : {}) }), cwd: dir }),
    text: (stdout) => JSON.parse(stdout).text,
  };
}

CASES.codex = {
  prefix: 'openai',
  run: (base, token, dir) => {
    const home = join(dir, 'codex-home');
    mkdirSync(home);
    writeFileSync(join(home, 'config.toml'), codexConfig(`${base}/v1`));
    return runHarness(join(BIN, 'codex'), ['exec', '--strict-config', '--skip-git-repo-check', PROMPT],
      { env: cleanEnv(dir, { CODEX_HOME: home, SLUICE_API_KEY: token }), cwd: dir });
  },
  text: (stdout) => stdout.trim(),
};

for (const task of ['openai-agents-default', 'openai-agents-chat', 'vercel-anthropic-text',
                    'vercel-anthropic-stream', 'vercel-anthropic-object', 'vercel-openai-text',
                    'vercel-openai-stream', 'vercel-openai-object', 'vercel-openai-chat-text',
                    'langchain-anthropic', 'langchain-anthropic-stream', 'langchain-openai',
                    'langchain-openai-stream', 'langchain-anthropic-object', 'langchain-openai-object',
                    'langchain-openai-responses']) {
  CASES[task] = {
    prefix: task.includes('anthropic') ? 'anthropic' : 'openai',
    run: (base, token, dir) => runHarness(process.execPath, [join(HERE, 'sdk_task.mjs'), task, base],
      { env: cleanEnv(dir, { HARNESS_API_KEY: token }), cwd: dir }),
    text: (stdout) => JSON.parse(stdout).text,
  };
}

/** The sum of the samples of `metric` in a /metrics text whose labels match `labels`. */
function metricSum(text, metric, labels = {}) {
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = line.match(/^(\w+)(?:\{([^}]*)\})? (\S+)$/);
    if (!m || m[1] !== metric) continue;
    const have = Object.fromEntries((m[2] || '').split(',').filter(Boolean)
      .map((kv) => kv.split('=')).map(([k, v]) => [k, v.replace(/"/g, '')]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[3]);
  }
  return sum;
}

const emu = await startEmu();
const sluiced = await startSluiced(emu.origin, Object.keys(CASES));
test.after(async () => { await sluiced.stop(); await emu.stop(); });

for (const [name, c] of Object.entries(CASES)) {
  test(`${name} finishes through sluiced, every call settled with what the emulator billed`, async () => {
    const before = await emu.stats();
    const metricsBefore = await sluiced.metrics();
    const t = tempDir('via-sluice');
    let run;
    try { run = await c.run(`${sluiced.origin}/${c.prefix}`, agentToken(name), t.dir); } finally { t.remove(); }
    const after = await emu.stats();
    const metricsAfter = await sluiced.metrics();
    const agent = (await sluiced.agents())[name];
    await new Promise((r) => setTimeout(r, 400)); // the event log is flushed every 250 ms
    const settled = sluiced.events().filter((e) => e.event === 'settled' && e.agent === name);
    const billed = {
      calls: after.admitted - before.admitted,
      input: after.tokens.input - before.tokens.input,
      cache_creation: after.tokens.cache_creation_input - before.tokens.cache_creation_input,
      cache_read: after.tokens.cache_read_input - before.tokens.cache_read_input,
      output: after.tokens.output - before.tokens.output,
      refused_429: after.http_429 - before.http_429,
    };
    const settles = metricSum(metricsAfter, 'sluice_settles_total', { pool: c.prefix }) -
                    metricSum(metricsBefore, 'sluice_settles_total', { pool: c.prefix });
    console.log(`${name} via sluiced: exit ${run.code} in ${run.ms} ms; emulator billed ${JSON.stringify(billed)}; ` +
                `sluice agent ${JSON.stringify(agent)}; settles +${settles}; settled events ${JSON.stringify(settled)}`);
    assert.equal(run.code, 0, run.stderr + run.stdout.slice(0, 500));
    assert.ok(c.text(run.stdout).length > 0, 'the harness printed an answer');
    assert.deepEqual(run.outside, [], 'tried to reach beyond loopback');
    assert.ok(billed.calls >= 1, 'the emulator admitted a call');
    assert.equal(billed.refused_429, 0, 'no upstream 429');
    assert.ok(agent, `GET /v1/agents has no agent ${name}`);
    assert.equal(settled.length, billed.calls, 'settled leases = calls the emulator admitted');
    assert.equal(new Set(settled.map((e) => e.lease)).size, settled.length, 'each lease settled once');
    assert.equal(settled.reduce((n, e) => n + e.input_tokens, 0),
                 billed.input + billed.cache_creation, 'settled input = billed uncached input and cache writes');
    assert.equal(settled.reduce((n, e) => n + e.output_tokens, 0), billed.output, 'settled output = billed output');
    assert.equal(settles, billed.calls, 'one settle per admitted call');
    assert.equal(agent.tokens_out, billed.output, 'tokens_out = output the emulator billed');
    const pool = await (await fetch(`${sluiced.origin}/v1/pools/${c.prefix}`,
      { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).json();
    assert.equal(pool.leases_in_flight, 0, 'nothing left in flight');
  });
}
