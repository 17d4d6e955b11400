// Checkpoints in libsluice-client's file format (docs/client.md "Checkpoints"), saved atomically.
//
// An agent writes down its plan state before it waits, so a crash or a long wait never forces
// a re-plan. The file is the C library's version 1 JSON, so `sluice checkpoint verify` and
// sl_checkpoint_resume() read what this writes. Saving goes through a temporary file in the
// same directory, fsync, rename over the path and an fsync of the directory: a crash leaves
// the old file or the new one.
import { createHash, randomBytes } from 'node:crypto';
import { open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';

/** The SHA-256 of a file's content as 64 lower-case hex digits. */
export async function sha256File(path) {
  return createHash('sha256').update(await readFile(path)).digest('hex');
}

/**
 * Writes checkpoint `cp` ({goal, step, files: [path...], decisions: [{decision, reason}],
 * next_call, request_id}) to `path` atomically, hashing each file now. Resolves the object
 * written; rejects with the file system's error naming the path.
 */
export async function saveCheckpoint(path, cp) {
  const files = [];
  for (const f of cp.files || []) {
    const st = await stat(f);
    files.push({ path: f, sha256: await sha256File(f), size_bytes: st.size });
  }
  const doc = {
    sluice_checkpoint: 1,
    saved_at: Date.now() / 1000,
    goal: cp.goal ?? null,
    step: cp.step ?? null,
    files,
    decisions: (cp.decisions || []).map((d) => ({ decision: d.decision, reason: d.reason })),
    next_call: cp.next_call ?? cp.nextCall ?? null,
    request_id: cp.request_id ?? cp.requestId ?? null,
  };
  const tmp = `${path}.tmp.${randomBytes(6).toString('hex')}`;
  const fh = await open(tmp, 'wx', 0o600);
  try {
    await fh.writeFile(JSON.stringify(doc, null, 2) + '\n');
    await fh.sync();
  } finally {
    await fh.close();
  }
  try {
    await rename(tmp, path);
  } catch (e) {
    await unlink(tmp).catch(() => {});
    throw e;
  }
  const dir = await open(dirname(path), 'r');
  try { await dir.sync(); } finally { await dir.close(); }
  return doc;
}

/** Reads a checkpoint and says which recorded files changed: {checkpoint, changed: [path]}. */
export async function resumeCheckpoint(path) {
  const cp = JSON.parse(await readFile(path, 'utf8'));
  if (cp.sluice_checkpoint !== 1) throw new Error(`${path}: not a sluice checkpoint (version 1)`);
  const changed = [];
  for (const f of cp.files || []) {
    const now = await sha256File(f.path).catch(() => null);
    if (now !== f.sha256) changed.push(f.path);
  }
  return { checkpoint: cp, changed };
}
