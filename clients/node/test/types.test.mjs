// index.d.ts compiles, and the typed README calls with it, under `tsc --strict` (the .ts file
// imports 'sluice-client' through the package's self-reference); the compiler is $SLUICE_TSC
// (the package has no dependencies, so none is installed by default: skipped then).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

test('index.d.ts type-checks the README calls (tsc --strict)', (t) => {
  const tsc = process.env.SLUICE_TSC;
  if (!tsc) return t.skip('set SLUICE_TSC to a TypeScript compiler (tsc) to run this check');
  try {
    execFileSync(tsc, ['--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext',
                       '--moduleResolution', 'nodenext', '--lib', 'es2022,esnext.disposable,dom',
                       fileURLToPath(new URL('types.check.ts', import.meta.url))], { stdio: 'pipe' });
  } catch (e) {
    assert.fail(`tsc: ${e.stdout}${e.stderr}`);
  }
});
