// The estimate a fail-open client makes without sluiced: bytes / 4, as the proxy reserves a
// body its estimator cannot read (docs/api.md "Proxy"), and the request's own output limit.

const DEFAULT_OUTPUT_TOKENS = 4096; // the proxy's reservation when a body names no limit

/** A rough estimate of `body` ({request, pool, model?}) in POST /v1/estimate's answer shape. */
export function localEstimate(body) {
  const r = body.request;
  const limit = [r.max_tokens, r.max_completion_tokens, r.max_output_tokens]
    .find((v) => Number.isSafeInteger(v) && v >= 0);
  const choices = Number.isSafeInteger(r.n) && r.n > 1 ? r.n : 1;
  return {
    pool: body.pool,
    model: body.model ?? (typeof r.model === 'string' ? r.model : null),
    input_tokens: Math.ceil(Buffer.byteLength(JSON.stringify(r)) / 4),
    cached_tokens: 0,
    output_tokens: (limit ?? DEFAULT_OUTPUT_TOKENS) * choices,
    output_limit_tokens: limit ?? 0,
    cache_prefix_hash: null,
    exact: false,
  };
}
