// claude.test.mjs - Claude Code CLI headless (-p, json and stream-json) and the Claude
// Agent SDK's query(), pinned in package-lock.json, run offline: against the recording
// stub (default model, claude-sonnet-4-5, and a scripted Read tool loop), and against the
// real sluice-emu with claude-sonnet-4-5 and with the default model (whose request puts a
// role "system" message inside messages: docs/harnesses.md).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ANSWER, BIN, HERE, KEY, cleanEnv, describe, requireInstalled, runHarness, saveFixture,
         startEmu, startRecorder, tempDir } from './lib.mjs';

requireInstalled();
const PROMPT = 'Reply with the word the system under test answers.';
/** What keeps Claude Code offline: no telemetry, update check, error reports, HEAD /api/hello. */
const OFFLINE = { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1',
                  DISABLE_AUTOUPDATER: '1', DISABLE_ERROR_REPORTING: '1' };

/** Runs `claude -p` with `args` against `origin`; resolves the harness result. */
async function claude(origin, args) {
  const t = tempDir('claude');
  try {
    const env = cleanEnv(t.dir, { ...OFFLINE, ANTHROPIC_BASE_URL: origin, ANTHROPIC_API_KEY: KEY });
    return await runHarness(join(BIN, 'claude'), ['-p', PROMPT, ...args], { env, cwd: t.dir });
  } finally { t.remove(); }
}

/** The final result object of --output-format json or stream-json. */
function resultOf(stdout) {
  const lines = stdout.trim().split('\n').map((l) => JSON.parse(l));
  const result = lines.find((m) => m.type === 'result');
  assert.ok(result, `no result message in: ${stdout.slice(0, 500)}`);
  return { result, lines };
}

/** Every request is Claude Code's model call: POST /v1/messages?beta=true, streamed. */
function assertClaudeCodeRequests(requests, version) {
  assert.ok(requests.length >= 1, 'no request reached the recorder');
  for (const r of requests) {
    assert.equal(r.method, 'POST', `${r.method} ${r.path}: only model calls expected offline`);
    assert.equal(r.path, '/v1/messages');
    assert.deepEqual(r.query, { beta: ['true'] });
    assert.equal(r.body.stream, true);
    assert.match(r.headers['user-agent'], new RegExp(`^claude-cli/${version.replace(/\./g, '\\.')} `));
    assert.match(r.headers['anthropic-beta'], /claude-code-20250219/);
    assert.equal(r.headers['x-api-key'], `<redacted ${KEY.length} chars>`);
  }
}

for (const format of ['json', 'stream-json']) {
  test(`claude code -p --output-format ${format}, default model, answers from the recorder`, async () => {
    const rec = await startRecorder();
    try {
      const args = format === 'json' ? ['--output-format', 'json'] : ['--output-format', 'stream-json', '--verbose'];
      const run = await claude(rec.origin, args);
      const requests = rec.requests();
      console.log(`claude ${format}: exit ${run.code} in ${run.ms} ms, ${requests.length} request(s):\n${describe(requests)}`);
      assert.equal(run.code, 0, run.stderr + run.stdout.slice(0, 500));
      const { result } = resultOf(run.stdout);
      assert.equal(result.result, ANSWER);
      assert.equal(result.is_error, false);
      assert.deepEqual(run.outside, [], 'tried to reach beyond loopback');
      assertClaudeCodeRequests(requests, '2.1.332');
      const body = requests[requests.length - 1].body;
      assert.ok(body.messages.some((m) => m.role === 'system'), 'default model sends role system in messages');
      saveFixture(`claude-code-2.1.332-${format}`, requests[requests.length - 1]);
    } finally { await rec.stop(); }
  });
}

test('claude code -p --model claude-sonnet-4-5 answers from the recorder, without role system', async () => {
  const rec = await startRecorder();
  try {
    const run = await claude(rec.origin, ['--output-format', 'json', '--model', 'claude-sonnet-4-5']);
    const requests = rec.requests();
    console.log(`claude sonnet: exit ${run.code} in ${run.ms} ms, ${requests.length} request(s):\n${describe(requests)}`);
    assert.equal(run.code, 0, run.stderr + run.stdout.slice(0, 500));
    assert.equal(resultOf(run.stdout).result.result, ANSWER);
    assert.deepEqual(run.outside, []);
    assertClaudeCodeRequests(requests, '2.1.332');
    const body = requests[requests.length - 1].body;
    assert.equal(body.model, 'claude-sonnet-4-5');
    assert.ok(body.messages.every((m) => m.role !== 'system'));
    saveFixture('claude-code-2.1.332-sonnet-4-5', requests[requests.length - 1]);
  } finally { await rec.stop(); }
});

test('claude code -p runs a scripted Read tool call and sends its result back', async () => {
  const marker = 'harness-marker-4217';
  const notes = tempDir('notes');
  const file = join(notes.dir, 'notes.txt');
  writeFileSync(file, `${marker}\n`);
  const rec = await startRecorder([{ tool: 'Read', input: { file_path: file } }]);
  try {
    const run = await claude(rec.origin, ['--output-format', 'json', '--allowedTools', 'Read']);
    const requests = rec.requests();
    console.log(`claude tool loop: exit ${run.code} in ${run.ms} ms, ${requests.length} request(s):\n${describe(requests)}`);
    assert.equal(run.code, 0, run.stderr + run.stdout.slice(0, 500));
    const { result } = resultOf(run.stdout);
    assert.equal(result.result, ANSWER);
    assert.equal(result.num_turns, 2);
    assert.deepEqual(run.outside, []);
    assertClaudeCodeRequests(requests, '2.1.332');
    assert.equal(requests.length, 2, 'one call for the tool, one after its result');
    const second = requests[1].body.messages;
    const toolUse = second.flatMap((m) => (Array.isArray(m.content) ? m.content : []))
      .find((b) => b.type === 'tool_use');
    const toolResult = second.flatMap((m) => (Array.isArray(m.content) ? m.content : []))
      .find((b) => b.type === 'tool_result');
    assert.equal(toolUse.name, 'Read');
    assert.equal(toolResult.tool_use_id, toolUse.id);
    assert.match(JSON.stringify(toolResult.content), new RegExp(marker));
    saveFixture('claude-code-2.1.332-tool-result', requests[1]);
  } finally { await rec.stop(); notes.remove(); }
});

/** Both the default model (it sends `role: "system"` inside messages) and sonnet. */
const EMU_MODELS = ['claude-sonnet-4-5', null];

for (const model of EMU_MODELS) test(`claude code -p --model ${model ?? '(default)'} finishes against sluice-emu`, async () => {
  const emu = await startEmu();
  try {
    const run = await claude(emu.origin, ['--output-format', 'json', ...(model ? ['--model', model] : [])]);
    const stats = await emu.stats();
    console.log(`claude vs emu: exit ${run.code} in ${run.ms} ms; emu http ${JSON.stringify(stats.http)}`);
    assert.equal(run.code, 0, run.stderr + run.stdout.slice(0, 500));
    const { result } = resultOf(run.stdout);
    assert.equal(result.is_error, false);
    assert.ok(result.result.length > 0);
    assert.deepEqual(run.outside, []);
    assert.equal(stats.http.status_400, 0);
    assert.ok(stats.http.messages_stream >= 1);
    assert.equal(stats.tokens.output, result.usage.output_tokens, 'billed output = what Claude Code reports');
  } finally { await emu.stop(); }
});

/** Runs the Agent SDK's query() (sdk_task.mjs) against `origin`. */
async function agentSdk(origin, model) {
  const t = tempDir('agent-sdk');
  try {
    const env = cleanEnv(t.dir, { ...OFFLINE, HARNESS_API_KEY: KEY, ...(model ? { HARNESS_MODEL: model } : {}) });
    return await runHarness(process.execPath, [join(HERE, 'sdk_task.mjs'), 'claude-agent-sdk', origin], { env, cwd: t.dir });
  } finally { t.remove(); }
}

test('claude agent sdk query(), default model, answers from the recorder', async () => {
  const rec = await startRecorder();
  try {
    const run = await agentSdk(rec.origin);
    const requests = rec.requests();
    console.log(`agent sdk: exit ${run.code} in ${run.ms} ms, ${requests.length} request(s):\n${describe(requests)}`);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(JSON.parse(run.stdout).text, ANSWER);
    assert.deepEqual(run.outside, []);
    assertClaudeCodeRequests(requests, '2.1.333');
    assert.match(requests[0].headers['user-agent'], /agent-sdk\/0\.3\.333/);
    saveFixture('claude-agent-sdk-0.3.333', requests[requests.length - 1]);
  } finally { await rec.stop(); }
});

for (const model of EMU_MODELS) test(`claude agent sdk query() with ${model ?? 'the default model'} finishes against sluice-emu`, async () => {
  const emu = await startEmu();
  try {
    const run = await agentSdk(emu.origin, model);
    const stats = await emu.stats();
    assert.equal(run.code, 0, run.stderr);
    assert.ok(JSON.parse(run.stdout).text.length > 0);
    assert.deepEqual(run.outside, []);
    assert.equal(stats.http.status_400, 0);
    assert.ok(stats.admitted >= 1);
  } finally { await emu.stop(); }
});
