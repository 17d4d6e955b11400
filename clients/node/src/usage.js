// What a lease records: the provider's usage, whatever SDK reported it, or a caught 429.
//
// Accepted shapes (docs/client.md, Node section):
// - Anthropic `usage` (input_tokens, output_tokens, cache_creation_input_tokens,
//   cache_read_input_tokens), or a whole Message that has one;
// - OpenAI Chat Completions `usage` (prompt_tokens, completion_tokens,
//   prompt_tokens_details.cached_tokens): the cached tokens are cache reads, the rest input;
// - OpenAI Responses `usage` (input_tokens with input_tokens_details.cached_tokens);
// - an error or Response with `status` (429: got_429, with `retry-after` / `retry-after-ms`
//   from its headers; any other 4xx/5xx: failed), as the official SDKs throw them;
// - a plain object in the settle body's own fields (got_429, retry_after, headers, ...).
import { InvalidRequest } from './errors.js';

const RATE_LIMIT_HEADER = /^(anthropic-ratelimit-|x-ratelimit-)/;

function count(field, v) {
  if (v === undefined || v === null) return 0;
  if (!Number.isSafeInteger(v) || v < 0)
    throw new InvalidRequest(`usage.${field} must be an integer >= 0, not ${JSON.stringify(v)}`,
                             { code: 'invalid_request' });
  return v;
}

/* A headers object of any kind (fetch Headers, a plain object, node's) as lower-case pairs. */
function headerPairs(h) {
  if (!h || typeof h !== 'object') return [];
  if (typeof h.entries === 'function' && typeof h.get === 'function') return [...h.entries()];
  return Object.entries(h).map(([k, v]) => [k.toLowerCase(), Array.isArray(v) ? v.join(', ') : String(v)]);
}

/** Seconds from a retry-after value (seconds or an HTTP date) or retry-after-ms; null if none. */
export function retryAfterSeconds(pairs, nowMs = Date.now()) {
  const get = (n) => pairs.find(([k]) => k.toLowerCase() === n)?.[1];
  const ms = get('retry-after-ms');
  if (ms !== undefined && Number.isFinite(Number(ms))) return Math.max(0, Number(ms) / 1000);
  const v = get('retry-after');
  if (v === undefined) return null;
  if (Number.isFinite(Number(v))) return Math.max(0, Number(v));
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, (at - nowMs) / 1000) : null;
}

/**
 * The settle fields for `x` (one of the shapes above): {input_tokens, output_tokens,
 * cache_creation_input_tokens, cache_read_input_tokens, got_429, failed, retry_after?,
 * headers?, failure_signature?, spend_cap?}. Throws InvalidRequest for a shape it cannot read
 * or a bad count.
 */
export function usageFields(x) {
  if (!x || typeof x !== 'object')
    throw new InvalidRequest(`record: expected a usage object, a message or a caught error, not ${JSON.stringify(x)}`,
                             { code: 'invalid_request' });
  const status = typeof x.status === 'number' ? x.status : null;
  if (status !== null && status >= 400) return failureFields(x, status);
  const u = x.usage && typeof x.usage === 'object' ? x.usage : x;
  const out = { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0,
                cache_read_input_tokens: 0, got_429: false, failed: false };
  if ('prompt_tokens' in u || 'completion_tokens' in u) { // OpenAI Chat Completions
    const cached = count('prompt_tokens_details.cached_tokens', u.prompt_tokens_details?.cached_tokens);
    out.input_tokens = Math.max(0, count('prompt_tokens', u.prompt_tokens) - cached);
    out.cache_read_input_tokens = cached;
    out.output_tokens = count('completion_tokens', u.completion_tokens);
  } else if ('input_tokens_details' in u) { // OpenAI Responses
    const cached = count('input_tokens_details.cached_tokens', u.input_tokens_details?.cached_tokens);
    out.input_tokens = Math.max(0, count('input_tokens', u.input_tokens) - cached);
    out.cache_read_input_tokens = cached;
    out.output_tokens = count('output_tokens', u.output_tokens);
  } else if ('input_tokens' in u || 'output_tokens' in u || 'got_429' in u || 'failed' in u) {
    out.input_tokens = count('input_tokens', u.input_tokens);
    out.output_tokens = count('output_tokens', u.output_tokens);
    out.cache_creation_input_tokens = count('cache_creation_input_tokens', u.cache_creation_input_tokens);
    out.cache_read_input_tokens = count('cache_read_input_tokens', u.cache_read_input_tokens);
    out.got_429 = u.got_429 === true;
    out.failed = u.failed === true || out.got_429;
    if (typeof u.retry_after === 'number' && u.retry_after >= 0) out.retry_after = u.retry_after;
    if (u.headers) out.headers = Object.fromEntries(headerPairs(u.headers));
    if (typeof u.failure_signature === 'string') out.failure_signature = u.failure_signature;
    if (u.spend_cap === true) out.spend_cap = true;
  } else {
    throw new InvalidRequest('record: the object has no usage (input_tokens/output_tokens or ' +
                             'prompt_tokens/completion_tokens) and no error status', { code: 'invalid_request' });
  }
  return out;
}

/* A caught provider error (or Response) with an HTTP status >= 400: nothing billed. */
function failureFields(x, status) {
  const pairs = headerPairs(x.headers);
  const out = { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0,
                cache_read_input_tokens: 0, got_429: status === 429, failed: true };
  if (status === 429) {
    const s = retryAfterSeconds(pairs);
    if (s !== null) out.retry_after = s;
  }
  const rl = pairs.filter(([k]) => RATE_LIMIT_HEADER.test(k));
  if (rl.length) out.headers = Object.fromEntries(rl);
  return out;
}
