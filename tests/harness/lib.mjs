// lib.mjs - what the harness tests share: the recording stub (recorder.py) and the real
// sluice-emu started on 127.0.0.1:0, a harness process run under strace so that every
// connection it tries is seen (the tests fail on any address beyond loopback), and the
// sanitized request fixtures (tests/harness/fixtures/) rewritten on demand.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const HERE = dirname(fileURLToPath(import.meta.url));
export const BIN = join(HERE, '..', 'node_modules', '.bin');
export const KEY = 'sk-harness-test-key';
/** The recording stub's answer: a harness that finished prints it. */
export const ANSWER = 'sluice-harness-ok';
const EMU = process.env.SLUICE_EMU || 'sluice-emu';
const PYTHON = process.env.PYTHON3 || 'python3';

/** Throws, naming what is missing, unless `make setup` installed the pinned packages. */
export function requireInstalled() {
  if (!existsSync(join(HERE, '..', 'node_modules', '@anthropic-ai', 'claude-code')))
    throw new Error('tests/node_modules missing: run make setup (scripts/setup.d/20-node-tests.sh)');
  if (spawnSync('strace', ['-V']).status !== 0)
    throw new Error('strace is required: the tests watch every connection a harness opens');
}

/** A fresh temporary directory, removed by the returned function. */
export function tempDir(prefix) {
  const dir = mkdtempSync(join(tmpdir(), `sluice-harness-${prefix}-`));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Starts `cmd args` and resolves {origin, proc, stop} once its stdout says
 *  "listening on http://127.0.0.1:PORT". Bounded: 15 s. stop() sends SIGTERM and
 *  rejects on a non-zero exit. A server still running when this process exits (a test
 *  that threw before stop()) is killed then. */
function startServer(what, cmd, args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const orphan = () => proc.kill('SIGKILL');
    process.on('exit', orphan);
    proc.on('exit', () => process.off('exit', orphan));
    let out = '', err = '';
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`${what} did not start: ${err}`)); }, 15000);
    proc.stderr.on('data', (d) => { err += d; });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`${what} exited ${code}: ${err}`)); });
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (!m) return;
      clearTimeout(timer);
      proc.removeAllListeners('exit');
      const stop = () => new Promise((res, rej) => {
        if (proc.exitCode !== null) return proc.exitCode === 0 ? res() : rej(new Error(`${what} exited ${proc.exitCode}: ${err}`));
        const kill = setTimeout(() => { proc.kill('SIGKILL'); rej(new Error(`${what} did not stop`)); }, 10000);
        proc.on('exit', (code) => { clearTimeout(kill); code === 0 ? res() : rej(new Error(`${what} exited ${code}: ${err}`)); });
        proc.kill('SIGTERM');
      });
      resolve({ origin: `http://127.0.0.1:${m[1]}`, proc, stop });
    });
  });
}

/** The recording stub on a free port: requests() returns what it logged so far. `turns`
 *  (recorder.py --turns) scripts the first model calls' answers, e.g.
 *  [{tool: 'Read', input: {file_path: '/tmp/x'}}]; ANSWER follows them. */
export async function startRecorder(turns = []) {
  const t = tempDir('rec');
  const log = join(t.dir, 'requests.jsonl');
  const args = [join(HERE, 'recorder.py'), '--log', log, '--answer', ANSWER];
  if (turns.length) {
    writeFileSync(join(t.dir, 'turns.json'), JSON.stringify(turns));
    args.push('--turns', join(t.dir, 'turns.json'));
  }
  process.on('exit', t.remove);
  const srv = await startServer('recorder', PYTHON, args);
  return {
    origin: srv.origin,
    requests: () => existsSync(log)
      ? readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : [],
    stop: async () => { await srv.stop(); t.remove(); process.off('exit', t.remove); },
  };
}

/** sluice-emu with no limits and fast, exact timings; stats() fetches GET /stats. */
export async function startEmu() {
  const srv = await startServer('sluice-emu', EMU, [
    '--listen', '127.0.0.1:0', '--api-key', KEY, '--input-tpm', '0', '--output-tpm', '0', '--rpm', '0',
    '--ttft-ms', '10', '--tokens-per-s', '5000', '--latency-spread', '0', '--output-tokens', '20']);
  return { ...srv, stats: async () => (await fetch(`${srv.origin}/stats`)).json() };
}

/** The environment a harness runs in: nothing of this process's (no keys, no proxies),
 *  a temporary HOME, and the given variables. */
export function cleanEnv(home, extra) {
  return { PATH: `${BIN}:/usr/local/bin:/usr/bin:/bin`, HOME: home, LANG: 'C.UTF-8', TERM: 'dumb',
           NO_COLOR: '1', ...extra };
}

const LOOPBACK = /^(127\.|::1$|::ffff:127\.)/;

/** The non-loopback IPv4/IPv6 addresses in an `strace -e trace=connect,sendto,...` log. */
export function outsideAddresses(straceLog) {
  const seen = new Set();
  for (const line of straceLog.split('\n')) {
    const m = line.match(/sin_port=htons\((\d+)\), sin_addr=inet_addr\("([^"]+)"\)/) ||
              line.match(/sin6_port=htons\((\d+)\).*inet_pton\(AF_INET6, "([^"]+)"/);
    if (m && !LOOPBACK.test(m[2])) seen.add(`${m[2]}:${m[1]}`);
  }
  return [...seen];
}

/** Runs `cmd args` under strace in `cwd` with `env`; resolves {code, stdout, stderr,
 *  outside, ms}. outside lists every address beyond loopback it tried to reach (DNS
 *  included). Killed after `timeoutMs`. */
export function runHarness(cmd, args, { env, cwd, timeoutMs = 60000, input = '' }) {
  const t = tempDir('strace');
  const traceLog = join(t.dir, 'connect.log');
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const proc = spawn('strace', ['-f', '-qq', '-e', 'trace=connect,sendto,sendmsg,sendmmsg', '-o', traceLog,
                                  cmd, ...args], { env, cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    proc.stdout.on('data', (d) => { stdout += d; });
    proc.stderr.on('data', (d) => { stderr += d; });
    proc.stdin.end(input);
    const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
    proc.on('error', (e) => { clearTimeout(timer); t.remove(); reject(e); });
    proc.on('exit', (code, signal) => {
      clearTimeout(timer);
      const outside = existsSync(traceLog) ? outsideAddresses(readFileSync(traceLog, 'utf8')) : [];
      t.remove();
      resolve({ code: signal ? `signal ${signal}` : code, stdout, stderr, outside, ms: Date.now() - started });
    });
  });
}

/** One line per request: what the test prints so the log shows what a harness sent. */
export function describe(requests) {
  return requests.map((r) => {
    const b = r.body || {};
    const beta = r.headers['anthropic-beta'] ? ` beta=[${r.headers['anthropic-beta']}]` : '';
    const q = Object.keys(r.query).length ? '?' + new URLSearchParams(
      Object.entries(r.query).map(([k, v]) => [k, v[0]])).toString() : '';
    return `  ${r.method} ${r.path}${q} ${r.body_bytes} B model=${b.model ?? '-'} stream=${b.stream ?? '-'}` +
           ` tools=${(b.tools || []).length} ua="${r.headers['user-agent'] ?? ''}"${beta}`;
  }).join('\n');
}

const SANITIZE = [
  [/([/-])tmp([/-])sluice-harness-[A-Za-z-]+-[A-Za-z0-9]{6}(?![A-Za-z0-9])/g, '$1tmp$2sluice-harness-WORK'],
  [/Chunk ID: [0-9a-f]+\\nWall time: [0-9.]+ seconds/g, 'Chunk ID: 000000\\nWall time: 0.0000 seconds'],
  [/(?<![0-9a-f])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![0-9a-f])/g,
   '00000000-0000-0000-0000-000000000000'],
  [/(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])/g, '0'.repeat(64)],
  [/(unix_ms\\?"?:)\d+/g, '$10'],
  [/127\.0\.0\.1:\d+/g, '127.0.0.1:PORT'],
]

/** With HARNESS_WRITE_FIXTURES=1, writes the request as fixtures/<name>.json: method,
 *  path, query, the headers (secrets were redacted by the recorder; ports, temporary
 *  paths, UUIDs, 64-hex ids, timestamps and Codex's command timings replaced by fixed
 *  values, so that a second run writes the same files) and the body. */
export function saveFixture(name, request) {
  if (process.env.HARNESS_WRITE_FIXTURES !== '1') return;
  const { method, path, query, headers, body } = request;
  const drop = new Set(['host', 'content-length', 'connection']);
  const kept = Object.fromEntries(Object.entries(headers).filter(([k]) => !drop.has(k)).sort());
  let text = JSON.stringify({ method, path, query, headers: kept, body }, null, 2) + '\n';
  for (const [re, to] of SANITIZE) text = text.replace(re, to);
  mkdirSync(join(HERE, 'fixtures'), { recursive: true });
  writeFileSync(join(HERE, 'fixtures', `${name}.json`), text);
}

const SLUICED = process.env.SLUICED || 'sluiced';
/** sluiced's admin token in startSluiced's configs: GET /v1/agents, /metrics with it. */
export const ADMIN_TOKEN = 'harness-admin-token-0001';

/** The sluice token startSluiced gives `agent` (auth.tokens: exactly that agent). */
export function agentToken(agent) { return `harness-token-${agent}`; }

/** A real sluiced on a free port proxying to `upstream` (sluice-emu's origin, which takes
 *  KEY): pools `anthropic` and `openai` (provider as named), both on that one key, with
 *  `limits` ({input_tpm, output_tpm, rpm}; 0 = none given) and full buckets at start
 *  (`coldStart` 'empty': sluiced's default, docs/server.md), and
 *  one sluice token per name in `agents` (agentToken), plus one prefix token per entry of
 *  `prefixTokens` ({token: agent_prefix}: its processes name themselves x-sluice-agent).
 *  The key reaches sluiced through
 *  its environment (api_key_env). agents() fetches GET /v1/agents as {name: entry}
 *  (admin token); metrics() the /metrics text; events() the event log's lines. */
export async function startSluiced(upstream, agents, limits = {}, prefixTokens = {}, coldStart = 'full') {
  const t = tempDir('sluiced');
  const eventLog = join(t.dir, 'events.jsonl');
  const lim = Object.entries(limits).map(([k, v]) => `    ${k}: ${v}\n`).join('');
  const pool = (name) => `  ${name}:\n    upstream_url: ${upstream}\n    provider: ${name}\n` +
                         `    api_key_env: SLUICE_HARNESS_KEY\n${lim}`;
  const tokens = agents.map((a) => `    - token: ${agentToken(a)}\n      agent: ${a}\n`).join('') +
    Object.entries(prefixTokens).map(([tok, prefix]) => `    - token: ${tok}\n      agent_prefix: "${prefix}"\n`).join('');
  const config = `event_log: ${eventLog}\ncold_start: ${coldStart}\npools:\n${pool('anthropic')}${pool('openai')}` +
                 `auth:\n  admin_token: ${ADMIN_TOKEN}\n  tokens:\n${tokens}`;
  const path = join(t.dir, 'sluice.yaml');
  writeFileSync(path, config);
  process.on('exit', t.remove);
  process.env.SLUICE_HARNESS_KEY = KEY;
  const srv = await startServer('sluiced', SLUICED, ['--config', path, '--listen', '127.0.0.1:0']);
  const get = async (p) => {
    const r = await fetch(`${srv.origin}${p}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    if (!r.ok) throw new Error(`GET ${p}: ${r.status} ${await r.text()}`);
    return r;
  };
  return {
    origin: srv.origin,
    agents: async () => Object.fromEntries(((await (await get('/v1/agents')).json()).agents)
      .map((a) => [a.agent ?? a.name, a])),
    metrics: async () => (await get('/metrics')).text(),
    events: () => existsSync(eventLog)
      ? readFileSync(eventLog, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : [],
    stop: async () => { await srv.stop(); t.remove(); process.off('exit', t.remove); },
  };
}

/** startEmu with limits and script: extra sluice-emu flags. */
export async function startEmuWith(args) {
  const srv = await startServer('sluice-emu', EMU, ['--listen', '127.0.0.1:0', '--api-key', KEY, ...args]);
  return { ...srv, stats: async () => (await fetch(`${srv.origin}/stats`)).json() };
}

/** $CODEX_HOME/config.toml: the provider, and every switch that reaches beyond it off
 *  (update check, analytics, feedback, OpenTelemetry, and the plugins feature, which
 *  otherwise clones github.com/openai/plugins.git and asks api.github.com, chatgpt.com). */
export function codexConfig(baseUrl) {
  return `model = "gpt-5.4"
model_provider = "sluice"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[features]
plugins = false

[model_providers.sluice]
name = "sluice"
base_url = "${baseUrl}"
env_key = "SLUICE_API_KEY"
wire_api = "responses"
`;
}

/** What keeps Claude Code offline: no telemetry, update check, error reports. */
const CLAUDE_OFFLINE = { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1',
                         DISABLE_AUTOUPDATER: '1', DISABLE_ERROR_REPORTING: '1' };

/** A three-turn tool task for sluice-emu's --script: Read → Read → a text answer that
 *  names `marker`. Writes the notes file and the script into `dir`; returns the script's
 *  path (the emulator's --script argument). */
export function writeToolScript(dir, marker) {
  const notes = join(dir, 'notes.txt');
  writeFileSync(notes, 'Nothing to report yet.\n');
  const script = join(dir, 'script.json');
  writeFileSync(script, JSON.stringify({ turns: [
    { tool_calls: [{ name: 'Read', input: { file_path: notes } }], output_tokens: 40 },
    { text: 'Once more.', tool_calls: [{ name: 'Read', input: { file_path: notes } }], output_tokens: 40 },
    { text: `Done: ${marker}.`, output_tokens: 60 },
  ] }));
  return script;
}

/** One `claude -p` session of writeToolScript's task on Claude Code's default model
 *  against `base` with `key`, offline, killed after 120 s. Resolves {ms, ok, turns, run}:
 *  ok when it exited 0 with a result naming `marker`. */
export async function claudeToolSession(base, key, marker) {
  const t = tempDir('tool-session');
  try {
    const env = cleanEnv(t.dir, { ...CLAUDE_OFFLINE, ANTHROPIC_BASE_URL: base, ANTHROPIC_API_KEY: key });
    const run = await runHarness(join(BIN, 'claude'),
      ['-p', 'Read the notes twice, then report.', '--output-format', 'json', '--allowedTools', 'Read'],
      { env, cwd: t.dir, timeoutMs: 120000 });
    let result = null;
    try { result = JSON.parse(run.stdout.trim().split('\n').pop()); } catch { /* not ok */ }
    const ok = run.code === 0 && !!result && !result.is_error && String(result.result).includes(marker);
    return { ms: run.ms, ok, turns: result?.num_turns ?? null, run };
  } finally { t.remove(); }
}
