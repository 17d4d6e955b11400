// Benchmark of @anthropic-ai/tokenizer on FILE: prints one JSON line with the bytes,
// the token count and the best of ITERATIONS timings (ms) of
//   count_ms:  countTokens(text), the package's API (it builds the tokenizer each call);
//   encode_ms: NFKC + encode with one tokenizer built beforehand (steady-state speed).
'use strict';
const fs = require('fs');
const { countTokens, getTokenizer } = require('@anthropic-ai/tokenizer');

const file = process.argv[2];
const iterations = Number(process.argv[3] || 3);
const text = fs.readFileSync(file).toString('utf8');
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

let tokens = 0;
let countMs = Infinity;
for (let i = 0; i < iterations; i++) {
  const t0 = process.hrtime.bigint();
  tokens = countTokens(text);
  countMs = Math.min(countMs, ms(t0));
}
const tokenizer = getTokenizer();
let encodeMs = Infinity;
for (let i = 0; i < iterations; i++) {
  const t0 = process.hrtime.bigint();
  tokenizer.encode(text.normalize('NFKC'), 'all');
  encodeMs = Math.min(encodeMs, ms(t0));
}
tokenizer.free();
process.stdout.write(JSON.stringify({ bytes: fs.statSync(file).size, tokens, count_ms: countMs, encode_ms: encodeMs }) + '\n');
