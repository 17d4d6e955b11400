// naming.test.mjs - N harness processes on ONE prefix token, each naming itself, as
// README's "Put your fleet behind sluice" tells a platform team to run them: Claude Code
// with ANTHROPIC_CUSTOM_HEADERS="x-sluice-agent: NAME", Codex with a provider
// `env_http_headers` entry reading the name from an environment variable. Each process's
// calls must land on its own agent in sluiced (GET /v1/agents, the settled events), and a
// process that names no agent, or one outside the token's prefix, must be refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, cleanEnv, codexConfig, requireInstalled, runHarness, startEmu, startSluiced,
         tempDir } from './lib.mjs';

requireInstalled();
const PROMPT = 'Reply with the word the system under test answers.';
const OFFLINE = { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1',
                  DISABLE_AUTOUPDATER: '1', DISABLE_ERROR_REPORTING: '1' };
const FLEET_TOKEN = 'harness-fleet-prefix-token-0001';

const emu = await startEmu();
const sluiced = await startSluiced(emu.origin, [], {}, { [FLEET_TOKEN]: 'fleet-' });
test.after(async () => { await sluiced.stop(); await emu.stop(); });

/** One Claude Code process on the fleet token; `headers` is ANTHROPIC_CUSTOM_HEADERS. */
async function claude(headers) {
  const t = tempDir('naming-claude');
  try {
    const env = { ...OFFLINE, ANTHROPIC_BASE_URL: `${sluiced.origin}/anthropic`, ANTHROPIC_API_KEY: FLEET_TOKEN };
    if (headers !== undefined) env.ANTHROPIC_CUSTOM_HEADERS = headers;
    return await runHarness(join(BIN, 'claude'), ['-p', PROMPT, '--output-format', 'json'],
                            { env: cleanEnv(t.dir, env), cwd: t.dir });
  } finally { t.remove(); }
}

/** One Codex process on the fleet token, its name in SLUICE_AGENT. */
async function codex(agent) {
  const t = tempDir('naming-codex');
  try {
    const home = join(t.dir, 'codex-home');
    mkdirSync(home);
    writeFileSync(join(home, 'config.toml'), codexConfig(`${sluiced.origin}/openai/v1`) +
                  'env_http_headers = { "x-sluice-agent" = "SLUICE_AGENT" }\n');
    return await runHarness(join(BIN, 'codex'), ['exec', '--strict-config', '--skip-git-repo-check', PROMPT],
      { env: cleanEnv(t.dir, { CODEX_HOME: home, SLUICE_API_KEY: FLEET_TOKEN, SLUICE_AGENT: agent }), cwd: t.dir });
  } finally { t.remove(); }
}

/** The agents that settled a lease, from the event log (flushed every 250 ms). */
async function settledAgents() {
  await new Promise((r) => setTimeout(r, 400));
  return new Set(sluiced.events().filter((e) => e.event === 'settled').map((e) => e.agent));
}

test('two Claude Code processes on one prefix token are two agents', async () => {
  const runs = await Promise.all([claude('x-sluice-agent: fleet-cc-1'), claude('x-sluice-agent: fleet-cc-2')]);
  for (const run of runs) {
    assert.equal(run.code, 0, run.stderr + run.stdout.slice(0, 500));
    assert.deepEqual(run.outside, [], 'tried to reach beyond loopback');
  }
  const agents = await sluiced.agents();
  const settled = await settledAgents();
  for (const name of ['fleet-cc-1', 'fleet-cc-2']) {
    assert.ok(agents[name], `GET /v1/agents has no ${name}: ${Object.keys(agents)}`);
    assert.ok(settled.has(name), `no settled lease for ${name}`);
  }
});

test('Codex names itself from the environment through env_http_headers', async () => {
  const run = await codex('fleet-codex-1');
  assert.equal(run.code, 0, run.stderr + run.stdout.slice(0, 500));
  assert.deepEqual(run.outside, [], 'tried to reach beyond loopback');
  assert.ok((await sluiced.agents())['fleet-codex-1'], 'GET /v1/agents has no fleet-codex-1');
  assert.ok((await settledAgents()).has('fleet-codex-1'), 'no settled lease for fleet-codex-1');
});

test('a process on the prefix token that names nobody, or a name outside the prefix, is refused', async () => {
  const before = (await emu.stats()).admitted;
  for (const headers of [undefined, 'x-sluice-agent: intruder-1']) {
    const run = await claude(headers);
    assert.notEqual(run.code, 0, `Claude Code with ${headers ?? 'no name'} should fail: ${run.stdout.slice(0, 300)}`);
  }
  assert.equal((await emu.stats()).admitted, before, 'a refused process reached the provider');
  assert.ok(!(await sluiced.agents())['intruder-1'], 'intruder-1 became an agent');
});
