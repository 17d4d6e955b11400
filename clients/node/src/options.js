// Options of the client and of a lease: defaults (libsluice-client's, exactly) and checks.
//
// Every option and argument is accepted in camelCase or in the C/HTTP spelling
// (`inputTokens` or `input_tokens`, `maxWait` or `max_wait_s`), and every duration is in
// seconds, as in the HTTP API. A bad value is an InvalidRequest naming the field and the value,
// thrown before anything is sent.
import { InvalidRequest } from './errors.js';

/** The first of `names` that `o` defines, else `dflt`. */
export function pick(o, names, dflt) {
  for (const n of names) if (o && o[n] !== undefined && o[n] !== null) return o[n];
  return dflt;
}

const AGENT_NAME = /^[A-Za-z0-9._:-]{1,128}$/;
const bad = (field, v, want) => new InvalidRequest(`${field} ${JSON.stringify(v)}: expected ${want}`,
                                                    { code: 'invalid_request' });

function positive(field, v) {
  if (!(typeof v === 'number' && Number.isFinite(v) && v > 0)) throw bad(field, v, 'a positive number of seconds');
  return v;
}

function count(field, v, required) {
  if (v === undefined || v === null) {
    if (required) throw bad(field, v, 'an integer >= 0 (required)');
    return 0;
  }
  if (!Number.isSafeInteger(v) || v < 0) throw bad(field, v, 'an integer >= 0');
  return v;
}

/** The C client's defaults (sl_client_options_init), in seconds. */
export const DEFAULTS = Object.freeze({
  connectTimeout: 0.5, requestTimeout: 1.0, pollChunk: 20, fleetSize: 1, probeInterval: 5,
  cacheTtl: 300, backoffBase: 1, backoffCap: 30, maxHold: 540,
});

/** Client options as given -> the checked, complete set (reads SLUICE_URL/SLUICE_TOKEN now). */
export function clientOptions(o = {}) {
  const env = process.env;
  const agent = pick(o, ['agent']);
  if (typeof agent !== 'string' || !AGENT_NAME.test(agent))
    throw bad('agent', agent, '1-128 characters of [A-Za-z0-9._:-]');
  const out = {
    url: pick(o, ['url']) || env.SLUICE_URL || 'http://127.0.0.1:8750',
    token: pick(o, ['token']) ?? (env.SLUICE_TOKEN || null),
    agent,
    pool: pick(o, ['pool'], 'default'),
    role: pick(o, ['role'], 'worker'),
    failClosed: pick(o, ['failClosed', 'fail_closed'], false) === true,
    log: pick(o, ['log'], (line) => process.stderr.write(line + '\n')),
  };
  for (const [k, snake] of [['connectTimeout', 'connect_timeout_s'], ['requestTimeout', 'request_timeout_s'],
                            ['pollChunk', 'poll_chunk_s'], ['probeInterval', 'probe_interval_s'],
                            ['cacheTtl', 'cache_ttl_s'], ['backoffBase', 'backoff_base_s'],
                            ['backoffCap', 'backoff_cap_s']])
    out[k] = positive(k, pick(o, [k, snake], DEFAULTS[k]));
  out.maxHold = pick(o, ['maxHold', 'max_hold_s'], DEFAULTS.maxHold);
  if (!(typeof out.maxHold === 'number' && out.maxHold >= 0 && out.maxHold <= 86400))
    throw bad('maxHold', out.maxHold, 'seconds between 0 and 86400');
  out.fleetSize = pick(o, ['fleetSize', 'fleet_size'], DEFAULTS.fleetSize);
  if (!Number.isSafeInteger(out.fleetSize) || out.fleetSize < 1) throw bad('fleetSize', out.fleetSize, 'an integer >= 1');
  out.localInputTpm = count('localInputTpm', pick(o, ['localInputTpm', 'local_input_tpm']), false);
  out.localOutputTpm = count('localOutputTpm', pick(o, ['localOutputTpm', 'local_output_tpm']), false);
  out.localRpm = count('localRpm', pick(o, ['localRpm', 'local_rpm']), false);
  if (typeof out.log !== 'function') throw bad('log', out.log, 'a function taking one line');
  return out;
}

/** Lease options as given -> {inputTokens, cachedTokens, outputTokens, maxWait, ...} checked. */
export function leaseOptions(client, o = {}) {
  const r = {
    inputTokens: count('input_tokens', pick(o, ['inputTokens', 'input_tokens']), true),
    cachedTokens: count('cached_tokens', pick(o, ['cachedTokens', 'cached_tokens']), false),
    outputTokens: count('output_tokens', pick(o, ['outputTokens', 'output_tokens']), true),
    unblocks: count('unblocks', pick(o, ['unblocks']), false),
    pool: pick(o, ['pool'], client.options.pool),
    role: pick(o, ['role'], client.options.role),
    task: pick(o, ['task']),
    priority: pick(o, ['priority']),
    cacheKey: pick(o, ['cacheKey', 'cache_key']),
    model: pick(o, ['model']),
    cachePrefixHash: pick(o, ['cachePrefixHash', 'cache_prefix_hash']),
    capOutput: pick(o, ['capOutput', 'cap_output']),
    ttl: pick(o, ['ttl', 'ttl_s'], 0),
    cacheTtl: pick(o, ['cacheTtl', 'cache_ttl_s'], 0),
    maxWait: pick(o, ['maxWait', 'max_wait_s'], Infinity),
    requestId: pick(o, ['requestId', 'request_id']),
    onWait: pick(o, ['onWait', 'on_wait']),
    checkpoint: pick(o, ['checkpoint']),
    checkpointPath: pick(o, ['checkpointPath', 'checkpoint_path']),
    signal: pick(o, ['signal']),
    maxHold: pick(o, ['maxHold', 'max_hold_s'], client.options.maxHold),
  };
  if (!(typeof r.maxHold === 'number' && r.maxHold >= 0 && r.maxHold <= 86400))
    throw bad('maxHold', r.maxHold, 'seconds between 0 and 86400');
  if (r.signal !== undefined && !(typeof r.signal.aborted === 'boolean' && typeof r.signal.addEventListener === 'function'))
    throw bad('signal', typeof r.signal, 'an AbortSignal');
  if (!(typeof r.maxWait === 'number' && r.maxWait >= 0)) throw bad('maxWait', r.maxWait, 'seconds >= 0 (Infinity: as long as needed)');
  if (!(typeof r.ttl === 'number' && Number.isFinite(r.ttl) && r.ttl >= 0)) throw bad('ttl', r.ttl, 'seconds > 0, or 0 for the pool\'s');
  if (!(typeof r.cacheTtl === 'number' && Number.isFinite(r.cacheTtl) && r.cacheTtl >= 0))
    throw bad('cache_ttl_s', r.cacheTtl, 'seconds > 0 (3600 for cache_control ttl "1h"), or 0 for the pool\'s');
  if (r.requestId !== undefined && !(typeof r.requestId === 'string' && r.requestId.length >= 1 && r.requestId.length < 40))
    throw bad('request_id', r.requestId, '1-39 characters');
  if (r.onWait !== undefined && typeof r.onWait !== 'function') throw bad('onWait', typeof r.onWait, 'a function');
  if (r.checkpoint !== undefined && typeof r.checkpoint !== 'function' &&
      !(typeof r.checkpoint === 'object' && typeof r.checkpointPath === 'string'))
    throw bad('checkpoint', typeof r.checkpoint, 'a function, or an object with checkpointPath');
  return r;
}
