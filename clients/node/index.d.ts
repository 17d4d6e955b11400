// Type declarations of sluice-client (hand-written; the package is plain ESM JavaScript).
// Every duration is in seconds, as in sluiced's HTTP API. Every option is also accepted in
// the C/HTTP spelling (input_tokens, max_wait_s, ...); the camelCase names are declared here.

/** What record() accepts: an Anthropic, OpenAI Chat or OpenAI Responses usage; an object with
 * one (a Message, a ChatCompletion, a Response); a caught provider error or fetch Response
 * (status 429: got_429 and its retry-after; any other >= 400: failed); or the settle body's
 * own fields. */
export type UsageLike =
  | { input_tokens?: number; output_tokens?: number; cache_creation_input_tokens?: number | null;
      cache_read_input_tokens?: number | null; got_429?: boolean; failed?: boolean; retry_after?: number;
      headers?: Record<string, string>; failure_signature?: string; spend_cap?: boolean }
  | { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number | null } | null }
  | { input_tokens: number; output_tokens: number; input_tokens_details?: { cached_tokens?: number | null } | null }
  | { usage: object }
  | { status: number; headers?: Headers | Record<string, string | string[]> };

export interface ClientOptions {
  /** Agent name, 1-128 of [A-Za-z0-9._:-]; required. */
  agent: string;
  /** Base URL of sluiced; default $SLUICE_URL, else http://127.0.0.1:8750 (read when the client is made). */
  url?: string;
  /** Bearer token; default $SLUICE_TOKEN, else none. */
  token?: string | null;
  /** Default "default". */
  pool?: string;
  /** Default "worker". */
  role?: string;
  /** Default 0.5 s. */
  connectTimeout?: number;
  /** A call that does not long-poll; default 1 s. */
  requestTimeout?: number;
  /** Longest single long-poll; default 20 s. */
  pollChunk?: number;
  /** Never decide locally: Unreachable instead (billing-sensitive use). Default false. */
  failClosed?: boolean;
  /** Agents sharing the pool: the local share is the pool's limits / fleetSize. Default 1. */
  fleetSize?: number;
  /** The local share per minute; 0 (default): the pool's learnt limit / fleetSize. */
  localInputTpm?: number;
  localOutputTpm?: number;
  localRpm?: number;
  /** Probe sluiced this often in local mode (±50% jitter); default 5 s. */
  probeInterval?: number;
  /** Provider prompt-cache lifetime (local mode charges a cold cache); default 300 s. */
  cacheTtl?: number;
  /** Full-jitter backoff after a 429: u * min(backoffCap, backoffBase * 2^n); defaults 1 s, 30 s. */
  backoffBase?: number;
  backoffCap?: number;
  /** A checkpointed lease asks sluiced to hold it queued for an ETA up to this; default 540 s, 0: never. */
  maxHold?: number;
  /** Receives each alert line (into / out of local mode); default: standard error. */
  log?: (line: string) => void;
}

export type WaitKind = 'queued' | 'rejected' | 'backoff' | 'local';

export interface WaitInfo {
  kind: WaitKind;
  /** Expected seconds until the grant (or the next attempt). */
  eta: number;
  /** Place in the queue ('queued'), else 0. */
  position: number;
  /** The reject reason ('rejected', 'backoff'), else null. */
  reason: string | null;
  /** Seconds waited so far in this lease() call. */
  waited: number;
  mode: 'coordinated' | 'local';
}

export interface CheckpointInfo {
  /** The request_id of the lease request being waited on: resuming with it is never charged twice. */
  requestId: string;
  kind: WaitKind;
  eta: number;
  position: number;
  reason: string | null;
}

export interface Checkpoint {
  goal?: string | null;
  step?: string | null;
  /** Paths the agent read; hashed (SHA-256) when saved. */
  files?: string[];
  decisions?: { decision: string; reason: string }[];
  next_call?: unknown;
  request_id?: string | null;
}

export interface LeaseOptions {
  /** Uncached prompt tokens; required. */
  inputTokens: number;
  /** The cached prompt prefix: always pass it (a cold cache is charged as input). Default 0. */
  cachedTokens?: number;
  /** max_tokens of the call; required. */
  outputTokens: number;
  /** The model the tokens were counted for. */
  model?: string;
  /** Default: the client's pool. */
  pool?: string;
  /** Default: the client's role. */
  role?: string;
  task?: string;
  unblocks?: number;
  priority?: 'high' | 'normal' | 'low';
  cacheKey?: string;
  cachePrefixHash?: string;
  capOutput?: boolean;
  /** Lease lifetime; 0 (default): the pool's lease_ttl. */
  ttl?: number;
  /** How long the provider keeps the cached prefix this call writes (`cache_ttl_s`): 0
   * (default) the pool's cache_ttl_s, 3600 for Anthropic's cache_control ttl "1h". */
  cacheTtl?: number;
  /** Longest this call may wait in all; default Infinity (as long as needed), 0: never wait. */
  maxWait?: number;
  /** Default: a random 32-hex id; pass a checkpoint's to resume (charged once). */
  requestId?: string;
  /** Hears every fresh ETA before a wait; a truthy return gives up (Canceled). */
  onWait?: (wait: WaitInfo) => unknown;
  /** Called (or, as an object, saved to checkpointPath) once, before the first wait. A lease with
   * a checkpoint asks sluiced to hold it queued (max_wait = maxHold) rather than reject it. */
  checkpoint?: ((info: CheckpointInfo) => unknown) | Checkpoint;
  checkpointPath?: string;
  /** Aborting it gives up the wait (Canceled; a queued ticket is given up). */
  signal?: AbortSignal;
  /** This lease's maxHold (default: the client's). */
  maxHold?: number;
}

export interface EstimateOptions {
  pool?: string;
  model?: string;
  /** "anthropic", "openai" or "responses"; default: from the pool or the body. */
  api?: string;
}

/** POST /v1/estimate's answer (extra fields are kept). */
export interface Estimate {
  pool: string;
  model: string | null;
  input_tokens: number;
  cached_tokens: number;
  /** The output reservation the pool would make. */
  output_tokens: number;
  cache_prefix_hash: string | null;
  /** False when sluiced was unreachable and the client counted bytes / 4 itself. */
  exact: boolean;
  [field: string]: unknown;
}

export interface SettleResult {
  /** What went back into the buckets: > 0 a refund, < 0 a charge. */
  adjust: { input_tokens: number; output_tokens: number };
  estimateError: number;
  /** False for a failed or 429 call (not a calibration sample). */
  counted: boolean;
  headersIgnored: number;
  /** After a 429: the full-jitter delay (never below retry-after) the next lease sleeps out. */
  backoff: number;
  /** Applied to the local share only (a local lease, or sluiced unreachable). */
  settledLocally: boolean;
  /** sluiced's answer, or null. */
  answer: Record<string, unknown> | null;
}

export class Lease {
  readonly id: string;
  readonly requestId: string;
  /** Granted from the local share (fail-open). */
  readonly local: boolean;
  readonly pool: string;
  expiresAt: number;
  ttl: number;
  readonly weight: number;
  readonly charged: { input_tokens: number; output_tokens: number };
  readonly cachePenalty: boolean;
  waited: number;
  /** sluiced's grant as sent (null for a local lease). */
  readonly answer: Record<string, unknown> | null;
  estimate: Estimate | null;
  state: 'open' | 'settled' | 'cancelled';
  record(usage: UsageLike): this;
  settle(usage?: UsageLike): Promise<SettleResult>;
  /** Resolves sluiced's answer ({status: "cancelled"}), or null for a local lease. */
  cancel(): Promise<Record<string, unknown> | null>;
  /** Resolves sluiced's answer ({status: "extended", expires_at}), or null for a local lease. */
  extend(ttl: number): Promise<Record<string, unknown> | null>;
  /** Settles what was recorded, or cancels when nothing was; null when it cancelled or had ended. */
  dispose(): Promise<SettleResult | null>;
  [Symbol.asyncDispose](): Promise<SettleResult | null>;
}

export interface LimitCheckOptions {
  key?: string;
  action?: string;
  /** Units asked, default 1; 0 peeks. */
  hits?: number;
  /** How long a denied check may wait for room; default 0. */
  wait?: number;
  /** Default: the client's agent. */
  agent?: string;
}

export interface LimitAnswer {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** 0 when allowed; -1: no wait helps. */
  retryAfter: number;
  resetAfter: number;
  delay: number;
  waited: number;
  /** The denying level (or the refusal's reason, e.g. "suspended"); "" when allowed. */
  deniedBy: string;
  deniedKey: string;
  checked: Record<string, unknown>[];
  status: number;
  body: Record<string, unknown>;
}

export interface WithLimitOptions extends LimitCheckOptions {
  limit: string;
  /** Default: release the concurrency holds the check took; true: release `limit`; false: nothing. */
  release?: boolean;
}

export interface HttpAnswer {
  status: number;
  body: any;
  text: string;
  headers: Record<string, string | string[] | undefined>;
}

export class Client {
  constructor(options: ClientOptions);
  readonly agent: string;
  readonly url: string;
  /** Coordinated, or local (fail-open) as of the last call. */
  readonly mode: 'coordinated' | 'local';
  close(): void;
  call(method: string, path: string, body?: unknown, timeout?: number): Promise<HttpAnswer>;
  probe(): Promise<boolean>;

  lease(options: LeaseOptions): Promise<Lease>;
  leaseFor(request: object, options?: Omit<LeaseOptions, 'inputTokens' | 'outputTokens' | 'cachedTokens'> & EstimateOptions): Promise<Lease>;
  withLease<T>(options: LeaseOptions | (Partial<LeaseOptions> & EstimateOptions & { request: object }),
               fn: (lease: Lease) => Promise<T> | T): Promise<T>;
  /** GET /v1/tickets/{ticket}?wait=S: the GRANT or the QUEUED answer; NotFound when gone. */
  getTicket(ticket: string, options?: { wait?: number }): Promise<Record<string, unknown>>;
  /** A Lease for an id granted earlier (to settle, cancel or extend it); sends nothing. */
  attachLease(id: string, options?: { pool?: string }): Lease;
  estimate(request: object, options?: EstimateOptions): Promise<Estimate>;

  check(limit: string, options?: LimitCheckOptions): Promise<LimitAnswer>;
  release(limit: string, options?: { key?: string; agent?: string }): Promise<{ status: string; key?: string; held: number; remaining: number }>;
  report(limit: string, options: { successes?: number; errors?: number; key?: string; agent?: string }): Promise<{ status: string; rate: number }>;
  releaseHolds(answer: LimitAnswer, key?: string, since?: number): Promise<void>;
  withLimit<T>(options: WithLimitOptions | string, fn: (answer: LimitAnswer) => Promise<T> | T): Promise<T>;
  limitError(limit: string, answer: LimitAnswer): LimitExceeded | Suspended;

  putTask(task: string, options: { role?: string; dependsOn?: string[]; state?: 'waiting' | 'running' | 'done' }): Promise<unknown>;
  getTask(task: string): Promise<unknown>;
  getTasks(): Promise<unknown>;
  deleteTask(task: string): Promise<unknown>;
  getPool(pool?: string): Promise<any>;
  getPools(): Promise<any>;
}

export class SluiceError extends Error {
  /** HTTP status of sluiced's answer; 0 when nothing was answered. */
  status: number;
  /** The API's error type (e.g. "invalid_request"), or a reject's reason. */
  code: string;
  /** sluiced's answer, or null. */
  body: any;
}
export class InvalidRequest extends SluiceError {}
export class NotFound extends SluiceError {}
export class Forbidden extends SluiceError {}
export class Conflict extends SluiceError {}
export class LeaseExpired extends Conflict {}
export class TooLarge extends InvalidRequest {}
export class ExceedsCapacity extends SluiceError {}
export class Unavailable extends SluiceError {}
export class Unreachable extends SluiceError {}
export class ProtocolError extends SluiceError {}
export class Rejected extends SluiceError {
  reason: string;
  retryAfter: number | null;
  retryAt: number | null;
  limitedBy: string | null;
}
export class Suspended extends Rejected {}
export class MaxWaitExceeded extends Rejected {
  ticket?: string;
  eta?: number;
}
export class Canceled extends SluiceError {}
export class LimitExceeded extends SluiceError {
  answer: LimitAnswer;
  deniedBy: string;
  deniedKey: string;
  retryAfter: number | null;
}
export const errorClasses: Record<string, typeof SluiceError>;
export function errorFromAnswer(what: string, status: number, body: unknown): SluiceError;

/** Full-jitter delay after the attempt-th consecutive 429, never below retryAfter (< 0: none). */
export function backoffDelay(attempt: number, base: number, cap: number, retryAfter: number, u01: number): number;
export function usageFields(usage: UsageLike): Record<string, unknown>;
export function retryAfterSeconds(headers: [string, string][], nowMs?: number): number | null;
export function saveCheckpoint(path: string, checkpoint: Checkpoint): Promise<Record<string, unknown>>;
export function resumeCheckpoint(path: string): Promise<{ checkpoint: Record<string, unknown>; changed: string[] }>;
export function sha256File(path: string): Promise<string>;
export const DEFAULTS: Readonly<{
  connectTimeout: number; requestTimeout: number; pollChunk: number; fleetSize: number; probeInterval: number;
  cacheTtl: number; backoffBase: number; backoffCap: number; maxHold: number;
}>;
