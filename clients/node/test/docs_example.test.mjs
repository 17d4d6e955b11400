// docs/client.md's Node example, pasted as it stands (its import pointed at this checkout),
// runs against sluiced with examples/sluice.yaml, the configuration `make run` uses.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { startSluiced } from './daemon.mjs';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));

test('the Node example of docs/client.md runs three turns against `make run`\'s sluiced', async () => {
  const doc = readFileSync(join(ROOT, 'docs/client.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## Node: `clients/node`'));
  const code = section.match(/```js\n([\s\S]*?)```/)[1];
  assert.ok(code.trim().split('\n').length <= 12, 'about ten lines');
  const file = join(mkdtempSync(join(tmpdir(), 'sluice-demo-')), 'demo.mjs');
  writeFileSync(file, code.replace("from 'sluice-client'", `from '${join(ROOT, 'clients/node/src/index.js')}'`));
  const config = readFileSync(join(ROOT, 'examples/sluice.yaml'), 'utf8').replace(/^event_log:.*$/m, '');
  const d = await startSluiced(config);
  try {
    const r = spawnSync(process.execPath, [file], { env: { ...process.env, SLUICE_URL: d.url },
                                                    encoding: 'utf8', timeout: 120000 });
    assert.equal(r.status, 0, r.stderr);
    const turns = r.stdout.split('\n').filter((l) => l.startsWith('turn '));
    assert.equal(turns.length, 3, r.stdout);
    assert.match(turns[2], /^turn 3: lease l_\d+ \(charged \d+ in\) mode coordinated$/);
  } finally {
    await d.stop();
  }
});
