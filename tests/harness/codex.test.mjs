// codex.test.mjs - Codex CLI (`codex exec`, the native linux binary @openai/codex ships)
// pinned in package-lock.json, run offline with a custom model provider whose base_url is
// the recording stub, then the real sluice-emu. Codex speaks only the Responses API
// (POST {base_url}/responses): docs/harnesses.md.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ANSWER, BIN, KEY, cleanEnv, codexConfig, describe, requireInstalled, runHarness, saveFixture,
         startEmu, startRecorder, tempDir } from './lib.mjs';

requireInstalled();

/** Runs `codex exec` with its provider at `origin`/v1 in a fresh directory holding
 *  `files` ({name: text}). */
async function codex(origin, files = {}) {
  const t = tempDir('codex');
  try {
    for (const [name, text] of Object.entries(files)) writeFileSync(join(t.dir, name), text);
    const home = join(t.dir, 'codex-home');
    mkdirSync(home);
    writeFileSync(join(home, 'config.toml'), codexConfig(`${origin}/v1`));
    const env = cleanEnv(t.dir, { CODEX_HOME: home, SLUICE_API_KEY: KEY });
    return await runHarness(join(BIN, 'codex'),
      ['exec', '--strict-config', '--skip-git-repo-check', 'Reply with the word the system under test answers.'],
      { env, cwd: t.dir });
  } finally { t.remove(); }
}

test('codex exec with a custom responses provider answers from the recorder', async () => {
  const rec = await startRecorder();
  try {
    const run = await codex(rec.origin);
    const requests = rec.requests();
    console.log(`codex: exit ${run.code} in ${run.ms} ms, ${requests.length} request(s):\n${describe(requests)}`);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout.trim(), ANSWER);
    assert.deepEqual(run.outside, [], 'tried to reach beyond loopback');
    assert.ok(requests.length >= 1);
    for (const r of requests) {
      assert.equal(`${r.method} ${r.path}`, 'POST /v1/responses');
      assert.equal(r.body.stream, true);
      assert.equal(r.headers.authorization, `<redacted ${`Bearer ${KEY}`.length} chars>`);
      assert.match(r.headers['user-agent'], /^codex_exec\/0\.171\.0 /);
    }
    saveFixture('codex-0.171.0-responses', requests[requests.length - 1]);
  } finally { await rec.stop(); }
});

test('codex exec runs a scripted exec_command call and sends its output back', async () => {
  const marker = 'harness-marker-5309';
  const rec = await startRecorder([{ tool: 'exec_command', input: { cmd: 'cat notes.txt' } }]);
  try {
    const run = await codex(rec.origin, { 'notes.txt': `${marker}\n` });
    const requests = rec.requests();
    console.log(`codex tool loop: exit ${run.code} in ${run.ms} ms, ${requests.length} request(s):\n${describe(requests)}`);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout.trim(), ANSWER);
    assert.deepEqual(run.outside, []);
    assert.equal(requests.length, 2, 'one call for the command, one after its output');
    const input = requests[1].body.input;
    const call = input.find((i) => i.type === 'function_call');
    const output = input.find((i) => i.type === 'function_call_output');
    assert.equal(call.name, 'exec_command');
    assert.equal(output.call_id, call.call_id);
    assert.match(JSON.stringify(output.output), new RegExp(marker));
    saveFixture('codex-0.171.0-function-call-output', requests[1]);
  } finally { await rec.stop(); }
});

test('codex exec finishes against sluice-emu', async () => {
  const emu = await startEmu();
  try {
    const run = await codex(emu.origin);
    const stats = await emu.stats();
    assert.equal(run.code, 0, run.stderr);
    assert.ok(run.stdout.trim().length > 0);
    assert.deepEqual(run.outside, []);
    assert.ok(stats.admitted >= 1);
  } finally { await emu.stop(); }
});
