// waste_agent.mjs - one agent process of bench/waste_fleet.mjs: TURNS Messages calls of
// WORDS words each (max_tokens 8,192, the SDK's own retry: maxRetries 2, retry-after
// honoured), a TEST_MS pause after each ("run the tests"). A call the SDK still fails
// with a 429 breaks the turn: one re-read call of the same size, then the turn again (at
// most 6 times). Prints one JSON line {"agent","calls","broken","gave_up","spans_ms"} (each
// call's [asked, answered] epoch ms, for the fleet's per-phase timing) and exits 0.
//
//   node waste_agent.mjs NAME BASE_URL TURNS WORDS TEST_MS [AGENT_HEADER]
import { createRequire } from 'node:module';

const require = createRequire(new URL('../tests/e2e/proxy_harness.mjs', import.meta.url));
const Anthropic = require('@anthropic-ai/sdk').default;
const [name, baseURL, turnsArg, wordsArg, testMsArg, header] = process.argv.slice(2);
const TURNS = Number(turnsArg), WORDS = Number(wordsArg), TEST_MS = Number(testMsArg);
const VOCAB = 'the gate holds water until the level rises and the stream runs over stones'.split(' ');
let x = 7n + BigInt([...name].reduce((h, c) => h * 31 + c.charCodeAt(0), 0));
const words = [];
for (let i = 0; i < WORDS; i++) {
  x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
  words.push(VOCAB[Number((x >> 33n) % BigInt(VOCAB.length))]);
}
const prompt = words.join(' ');
const client = new Anthropic({ apiKey: 'sk-ant-e2e-real-pool-key-5150', baseURL, maxRetries: 2,
                               timeout: 180000,
                               defaultHeaders: header ? { 'x-sluice-agent': name } : {} });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const stats = { agent: name, calls: 0, broken: 0, gave_up: false, spans_ms: [] };
const call = async (turn) => {
  stats.calls++;
  const span = [Date.now(), 0]; /* [asked, answered or failed] in epoch ms, SDK retries inside */
  stats.spans_ms.push(span);
  try {
    return await client.messages.create({ model: 'claude-emu-1', max_tokens: 8192,
                                          messages: [{ role: 'user', content: `turn ${turn}: ${prompt}` }] });
  } finally { span[1] = Date.now(); }
};
outer: for (let turn = 0; turn < TURNS; turn++) {
  for (;;) {
    try {
      await call(turn);
      break;
    } catch (e) {
      if (!(e instanceof Anthropic.RateLimitError)) throw e;
      if (stats.broken >= 6) { stats.gave_up = true; break outer; }
      stats.broken++;
      try { await call(turn); } catch { /* the re-read, refused: counted by the emulator */ }
    }
  }
  await sleep(TEST_MS);
}
console.log(JSON.stringify(stats));
