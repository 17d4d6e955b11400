// The client conformance runner (tests/clients/run_node.mjs) on a case file against a sluiced
// started with that file's `config`: this package's own cases (test/cases.json), or the file
// named by $SLUICE_CASES (the shared tests/clients/cases.json), relative to the repository.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { startSluiced } from './daemon.mjs';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const CASES = process.env.SLUICE_CASES ? join(ROOT, process.env.SLUICE_CASES)
  : fileURLToPath(new URL('cases.json', import.meta.url));

/* Runs run_node.mjs on `cases` (a path) against a sluiced running the file's config, after
 * each case's `before` requests (as tests/clients/driver.py does). */
async function run(cases) {
  const file = JSON.parse(readFileSync(cases, 'utf8'));
  const d = await startSluiced(readFileSync(join(ROOT, file.config), 'utf8'));
  try {
    for (const r of file.cases.flatMap((c) => c.before ?? [])) {
      const a = await fetch(d.url + r.path, { method: r.method, headers: { 'content-type': 'application/json' },
                                              body: r.body === undefined ? undefined : JSON.stringify(r.body) });
      assert.ok(a.ok, `before: ${r.method} ${r.path}: ${a.status}`);
    }
    return spawnSync(process.execPath, [join(ROOT, 'tests/clients/run_node.mjs'), cases],
                     { env: { ...process.env, SLUICE_URL: d.url }, encoding: 'utf8', timeout: 120000 });
  } finally {
    await d.stop();
  }
}

test(`conformance cases ${CASES}`, async () => {
  const r = await run(CASES);
  process.stdout.write(r.stdout);
  assert.equal(r.status, 0, `run_node.mjs exited ${r.status}:\n${r.stdout}${r.stderr}`);
});

test('the runner fails a case whose answer or error differs, and says where', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'sluice-cases-')), 'cases.json');
  writeFileSync(path, JSON.stringify({ config: 'clients/node/test/conformance.yaml', cases: [
    { name: 'wrong field', steps: [{ op: 'acquire', args: { input_tokens: 1, output_tokens: 1 },
                                     expect: { ok: { charged: { output_tokens: 2 } } } }] },
    { name: 'wrong class', steps: [{ op: 'acquire', args: { pool: 'nope', input_tokens: 1, output_tokens: 1 },
                                     expect: { error: 'Conflict' } }] },
    { name: 'unsaved var', steps: [{ op: 'cancel', args: { lease: '$x.lease' } }] },
    { name: 'passes', steps: [{ op: 'pool_get', args: { pool: 'default' }, expect: { ok: { limits: { rpm: 10000 } } } }] },
  ] }));
  const r = await run(path);
  assert.equal(r.status, 1);
  const lines = r.stdout.trim().split('\n');
  assert.match(lines[1], /^FAIL wrong class: step 1 \(acquire\): expected Conflict \(any code\), got NotFound \(not_found\): POST \/v1\/leases: 404 not_found: /);
  lines[1] = 'FAIL wrong class';
  assert.deepEqual(lines, [
    'FAIL wrong field: step 1 (acquire): answer.charged.output_tokens: expected 2, got 1',
    'FAIL wrong class',
    'FAIL unsaved var: step 1 (cancel): $x.lease: nothing was saved as "x"',
    'ok passes',
    '3 of 4 cases failed',
  ]);
});
