// sdks.test.mjs - the in-process harnesses, each task its own process (sdk_task.mjs) run
// offline: the OpenAI Agents SDK (default Responses API, and chat completions), the
// Vercel AI SDK (@ai-sdk/anthropic and @ai-sdk/openai defaults: generateText, streamText,
// generateObject) and LangChain JS (ChatAnthropic, ChatOpenAI). Every task answers from
// the recording stub; those sluice-emu serves today also finish against it (the others
// need the Responses API or json-schema output: docs/harnesses.md; HARNESS_EMU_ALL=1
// runs them against sluice-emu too, for the engineers adding those).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ANSWER, HERE, KEY, cleanEnv, describe, requireInstalled, runHarness, saveFixture,
         startEmu, startRecorder, tempDir } from './lib.mjs';

requireInstalled();

/** task: [expected METHOD path of its model call, whether sluice-emu serves it today]. */
const TASKS = {
  'openai-agents-default': ['POST /v1/responses', false],
  'openai-agents-chat': ['POST /v1/chat/completions', true],
  'vercel-anthropic-text': ['POST /v1/messages', true],
  'vercel-anthropic-stream': ['POST /v1/messages', true],
  'vercel-anthropic-object': ['POST /v1/messages', false],
  'vercel-openai-text': ['POST /v1/responses', false],
  'vercel-openai-stream': ['POST /v1/responses', false],
  'vercel-openai-object': ['POST /v1/responses', false],
  'vercel-openai-chat-text': ['POST /v1/chat/completions', true],
  'langchain-anthropic': ['POST /v1/messages', true],
  'langchain-anthropic-stream': ['POST /v1/messages', true],
  'langchain-openai': ['POST /v1/chat/completions', true],
  'langchain-openai-stream': ['POST /v1/chat/completions', true],
};
const VERSIONS = { 'openai-agents': '0.20.0', 'vercel-anthropic': 'ai-7.0.173-anthropic-4.0.105',
                   'vercel-openai': 'ai-7.0.173-openai-4.0.118', 'langchain-anthropic': '1.5.11',
                   'langchain-openai': '1.6.0' };

/** Runs one sdk_task.mjs task against `origin`. */
async function runTask(task, origin) {
  const t = tempDir('sdk');
  try {
    return await runHarness(process.execPath, [join(HERE, 'sdk_task.mjs'), task, origin],
                            { env: cleanEnv(t.dir, { HARNESS_API_KEY: KEY }), cwd: t.dir });
  } finally { t.remove(); }
}

/** HARNESS_EMU_ALL=1 also runs, against sluice-emu, the tasks it does not serve yet. */
const EMU_ALL = process.env.HARNESS_EMU_ALL === '1';
const rec = await startRecorder();
const emu = await startEmu();
test.after(async () => { await rec.stop(); await emu.stop(); });

for (const [task, [call, emuServes]] of Object.entries(TASKS)) {
  test(`${task} answers from the recorder`, async () => {
    const before = rec.requests().length;
    const run = await runTask(task, rec.origin);
    const requests = rec.requests().slice(before);
    console.log(`${task}: exit ${run.code} in ${run.ms} ms, ${requests.length} request(s):\n${describe(requests)}`);
    assert.equal(run.code, 0, run.stderr);
    const text = JSON.parse(run.stdout).text;
    assert.equal(task.endsWith('-object') ? JSON.parse(text).answer : text, ANSWER);
    assert.deepEqual(run.outside, [], 'tried to reach beyond loopback');
    assert.deepEqual(requests.map((r) => `${r.method} ${r.path}`), [call]);
    const family = Object.keys(VERSIONS).find((k) => task.startsWith(k));
    saveFixture(`${task}-${VERSIONS[family]}`, requests[0]);
  });
  if (!emuServes && !EMU_ALL) continue;
  test(`${task} finishes against sluice-emu${emuServes ? '' : ' (HARNESS_EMU_ALL)'}`, async () => {
    const before = await emu.stats();
    const run = await runTask(task, emu.origin);
    const after = await emu.stats();
    assert.equal(run.code, 0, run.stderr);
    assert.ok(JSON.parse(run.stdout).text.length > 0);
    assert.deepEqual(run.outside, []);
    assert.equal(after.admitted - before.admitted, 1, 'one model call admitted');
    assert.equal(after.tokens.output - before.tokens.output, 20, 'billed the emulator\'s 20 output tokens');
  });
}
