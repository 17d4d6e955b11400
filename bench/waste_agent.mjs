// waste_agent.mjs - one agent process of bench/waste_fleet.mjs: TURNS model calls of
// WORDS words each (max_tokens WASTE_MAX_TOKENS, default 8,192; the SDK's own retry:
// maxRetries 2, retry-after honoured), a TEST_MS pause after each ("run the tests"). The
// shape comes from the environment: WASTE_API `messages` (Anthropic, the default), `chat`
// (OpenAI Chat Completions) or `responses` (OpenAI Responses); WASTE_STREAM=1 streams each
// answer to its end. A call the SDK still fails with a 429 breaks the turn: one re-read
// call of the same size, then the turn again (at most 6 times). Prints one JSON line
// {"agent","calls","broken","gave_up","spans_ms"} (each call's [asked, answered] epoch ms,
// for the fleet's per-phase timing) and exits 0.
//
//   node waste_agent.mjs NAME BASE_URL TURNS WORDS TEST_MS [AGENT_HEADER]
import { createRequire } from 'node:module';

const require = createRequire(new URL('../tests/e2e/proxy_harness.mjs', import.meta.url));
const Anthropic = require('@anthropic-ai/sdk').default;
const OpenAI = require('openai').default;
const [name, baseURL, turnsArg, wordsArg, testMsArg, header] = process.argv.slice(2);
const TURNS = Number(turnsArg), WORDS = Number(wordsArg), TEST_MS = Number(testMsArg);
const API = process.env.WASTE_API || 'messages', STREAM = process.env.WASTE_STREAM === '1';
const MAX_TOKENS = Number(process.env.WASTE_MAX_TOKENS || 8192);
const VOCAB = 'the gate holds water until the level rises and the stream runs over stones'.split(' ');
let x = 7n + BigInt([...name].reduce((h, c) => h * 31 + c.charCodeAt(0), 0));
const words = [];
for (let i = 0; i < WORDS; i++) {
  x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
  words.push(VOCAB[Number((x >> 33n) % BigInt(VOCAB.length))]);
}
const prompt = words.join(' ');
const options = { apiKey: 'sk-ant-e2e-real-pool-key-5150', baseURL, maxRetries: 2, timeout: 180000,
                  defaultHeaders: header ? { 'x-sluice-agent': name } : {} };
const anthropic = API === 'messages';
const client = anthropic ? new Anthropic(options) : new OpenAI(options);
const RateLimitError = anthropic ? Anthropic.RateLimitError : OpenAI.RateLimitError;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const stats = { agent: name, calls: 0, broken: 0, gave_up: false, spans_ms: [] };

/* One model call of this agent's shape, to the end of its answer (a stream read whole). */
async function ask(text) {
  const s = STREAM ? { stream: true } : {};
  let answer;
  if (API === 'messages')
    answer = await client.messages.create({ model: 'claude-emu-1', max_tokens: MAX_TOKENS, ...s,
                                            messages: [{ role: 'user', content: text }] });
  else if (API === 'chat')
    answer = await client.chat.completions.create({ model: 'gpt-emu', max_completion_tokens: MAX_TOKENS,
                                                    ...s, messages: [{ role: 'user', content: text }] });
  else if (API === 'responses')
    answer = await client.responses.create({ model: 'gpt-emu', max_output_tokens: MAX_TOKENS, ...s,
                                             input: text });
  else throw new Error(`WASTE_API: unknown "${API}" (messages, chat, responses)`);
  if (STREAM) for await (const event of answer) void event;
  return answer;
}

const call = async (turn) => {
  stats.calls++;
  const span = [Date.now(), 0]; /* [asked, answered or failed] in epoch ms, SDK retries inside */
  stats.spans_ms.push(span);
  try {
    return await ask(`turn ${turn}: ${prompt}`);
  } finally { span[1] = Date.now(); }
};
outer: for (let turn = 0; turn < TURNS; turn++) {
  for (;;) {
    try {
      await call(turn);
      break;
    } catch (e) {
      if (!(e instanceof RateLimitError)) throw e;
      if (stats.broken >= 6) { stats.gave_up = true; break outer; }
      stats.broken++;
      try { await call(turn); } catch { /* the re-read, refused: counted by the emulator */ }
    }
  }
  await sleep(TEST_MS);
}
console.log(JSON.stringify(stats));
