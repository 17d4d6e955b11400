// sdks.test.mjs - the in-process harnesses, each task its own process (sdk_task.mjs) run
// offline: the OpenAI Agents SDK (default Responses API, and chat completions), the
// Vercel AI SDK (@ai-sdk/anthropic and @ai-sdk/openai defaults: generateText, streamText,
// generateObject) and LangChain JS (ChatAnthropic, ChatOpenAI: invoke, stream, structured
// output in json-schema mode, ChatOpenAI with useResponsesApi). Every task answers from
// the recording stub, then finishes against the real sluice-emu (docs/harnesses.md).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ANSWER, HERE, KEY, cleanEnv, describe, requireInstalled, runHarness, saveFixture,
         startEmu, startRecorder, tempDir } from './lib.mjs';

requireInstalled();

/** task: expected METHOD path of its model call. */
const TASKS = {
  'openai-agents-default': 'POST /v1/responses',
  'openai-agents-chat': 'POST /v1/chat/completions',
  'vercel-anthropic-text': 'POST /v1/messages',
  'vercel-anthropic-stream': 'POST /v1/messages',
  'vercel-anthropic-object': 'POST /v1/messages',
  'vercel-openai-text': 'POST /v1/responses',
  'vercel-openai-stream': 'POST /v1/responses',
  'vercel-openai-object': 'POST /v1/responses',
  'vercel-openai-chat-text': 'POST /v1/chat/completions',
  'langchain-anthropic': 'POST /v1/messages',
  'langchain-anthropic-stream': 'POST /v1/messages',
  'langchain-openai': 'POST /v1/chat/completions',
  'langchain-openai-stream': 'POST /v1/chat/completions',
  'langchain-anthropic-object': 'POST /v1/messages',
  'langchain-openai-object': 'POST /v1/chat/completions',
  'langchain-openai-responses': 'POST /v1/responses',
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

const rec = await startRecorder();
const emu = await startEmu();
test.after(async () => { await rec.stop(); await emu.stop(); });

for (const [task, call] of Object.entries(TASKS)) {
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
  test(`${task} finishes against sluice-emu`, async () => {
    const before = await emu.stats();
    const run = await runTask(task, emu.origin);
    const after = await emu.stats();
    assert.equal(run.code, 0, run.stderr);
    assert.ok(JSON.parse(run.stdout).text.length > 0);
    assert.deepEqual(run.outside, []);
    assert.equal(after.admitted - before.admitted, 1, 'one model call admitted');
    if (task.endsWith('-object')) {
      // Structured output: the emulator answers JSON generated from the schema, billed as
      // many tokens as that JSON takes (not the 20 of its filler text).
      const object = JSON.parse(JSON.parse(run.stdout).text);
      assert.equal(typeof object.answer, 'string', 'the object has the schema\'s "answer" string');
      assert.ok(after.tokens.output - before.tokens.output > 0, 'billed some output tokens');
    } else {
      assert.equal(after.tokens.output - before.tokens.output, 20, 'billed the emulator\'s 20 output tokens');
    }
  });
}
