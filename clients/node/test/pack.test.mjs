// `npm pack` of the package works offline, the tarball holds the sources and the declarations
// and no tests, and it installs offline into a fresh project whose code imports it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const PKG = fileURLToPath(new URL('..', import.meta.url));
const npm = (args, cwd) => execFileSync('npm', [...args, '--offline', '--no-audit', '--no-fund'],
                                        { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 120000 });

test('npm pack and an offline install of the tarball', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-pack-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const packed = JSON.parse(npm(['pack', '--json', '--pack-destination', dir], PKG))[0];
  const files = packed.files.map((f) => f.path).sort();
  assert.ok(files.includes('index.d.ts') && files.includes('src/index.js') && files.includes('package.json'), files.join(' '));
  assert.ok(!files.some((f) => f.startsWith('test/')), files.join(' '));
  const tarball = join(dir, readdirSync(dir).find((f) => f.endsWith('.tgz')));
  const app = join(dir, 'app');
  execFileSync('mkdir', [app]);
  writeFileSync(join(app, 'package.json'), '{"name": "app", "private": true, "type": "module"}');
  npm(['install', tarball], app);
  writeFileSync(join(app, 'main.js'),
                "import { Client, DEFAULTS } from 'sluice-client';\n" +
                "console.log(new Client({ agent: 'a' }).mode, DEFAULTS.maxHold);\n");
  assert.equal(execFileSync(process.execPath, ['main.js'], { cwd: app, encoding: 'utf8' }).trim(), 'coordinated 540');
});
