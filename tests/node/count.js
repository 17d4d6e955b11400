// Prints "TOKENS<TAB>FILE" for each FILE argument, counted by @anthropic-ai/tokenizer's
// countTokens() on the file's bytes decoded as UTF-8 (Buffer#toString: invalid bytes
// become U+FFFD), the same bytes `sluice count-tokens FILE` reads.
'use strict';
const fs = require('fs');
const { countTokens } = require('@anthropic-ai/tokenizer');

for (const file of process.argv.slice(2)) {
  const text = fs.readFileSync(file).toString('utf8');
  process.stdout.write(`${countTokens(text)}\t${file}\n`);
}
