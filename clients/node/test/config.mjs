// The sluiced configuration the Node client's tests run against.
export const CONFIG = `
cold_start: full
pools:
  default:
    input_tpm: 600000
    output_tpm: 600000
    rpm: 10000
  one:
    input_tpm: 600000
    output_tpm: 600000
    concurrency: 1
    max_queue_wait_s: 600
    ticket_idle_s: 600
  tight:
    input_tpm: 6000
    output_tpm: 600000
    max_queue_wait_s: 1
  crowd:
    input_tpm: 600000
    output_tpm: 600000
    rpm: 100000
    concurrency: 1
    lease_duration_prior_s: 0.05
    max_queue_wait_s: 600
  blocked:
    input_tpm: 600000
    output_tpm: 600000
limits:
  tool.call:
    algorithm: token_bucket
    rate: 2
    period_s: 600
  paced:
    algorithm: gcra
    rate: 5
    period_s: 1
    burst: 1
    on_limit: queue
  sem:
    algorithm: concurrency
    rate: 1
    ttl_s: 600
  api:
    algorithm: token_bucket
    rate: 100
    adaptive: {min_rate: 10, max_rate: 200, window: 10}
`;
