// HTTP/JSON transport of the client: node:http (or https) with one keep-alive Agent per client.
//
// A transport failure (refused, reset, a connect or request timeout) rejects with Unreachable,
// which the callers turn into fail-open or rethrow. A keep-alive connection that sluiced
// closed while idle (server.idle_timeout_s) shows up as a reset of the *next* request on it;
// that request never reached sluiced, so it is sent once more on a fresh connection instead
// of being mistaken for a dead sluiced.
import http from 'node:http';
import https from 'node:https';
import { Canceled, ProtocolError, Unreachable } from './errors.js';
import { MAX_TIMER_MS } from './time.js';

const MAX_ANSWER_BYTES = 16 << 20; // /v1/agents of a big fleet fits; a runaway does not

export class Transport {
  /**
   * `baseUrl`: http(s)://host:port (a trailing slash is dropped); `token`: bearer or null;
   * `connectTimeoutS`: the longest a connection may take to open.
   */
  constructor(baseUrl, token, connectTimeoutS) {
    this.base = new URL(baseUrl.replace(/\/+$/, ''));
    if (this.base.protocol !== 'http:' && this.base.protocol !== 'https:')
      throw new TypeError(`url "${baseUrl}": expected http:// or https://`);
    this.basePath = this.base.pathname.replace(/\/+$/, '');
    this.mod = this.base.protocol === 'https:' ? https : http;
    // Free sockets are unref'd by the Agent, so an idle client never keeps a process alive.
    // No cap on sockets: a held long-poll occupies one, and a request queued behind a cap
    // would spend its timeout waiting for a socket and be taken for a dead sluiced.
    this.agent = new this.mod.Agent({ keepAlive: true, maxFreeSockets: 16 });
    this.token = token || null;
    this.connectTimeoutMs = connectTimeoutS * 1000;
  }

  /** Closes every pooled connection. */
  close() { this.agent.destroy(); }

  /**
   * METHOD path with an optional JSON `body`; resolves {status, body (parsed JSON or null),
   * text, headers}. Rejects with Unreachable on a transport failure or when `timeoutS` passes,
   * with Canceled when `signal` aborts (the connection is closed: a held wait gives up its place).
   */
  async request(method, path, body, timeoutS, signal) {
    const payload = body === undefined || body === null ? null : JSON.stringify(body);
    try {
      return await this.once(method, path, payload, timeoutS, signal);
    } catch (e) {
      if (!e.reusedSocket) throw e;
      return this.once(method, path, payload, timeoutS, signal);
    }
  }

  once(method, path, payload, timeoutS, signal) {
    const headers = { 'content-type': 'application/json', accept: 'application/json' };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    if (payload !== null) headers['content-length'] = Buffer.byteLength(payload);
    const where = `${method} ${this.base.origin}${this.basePath}${path}`;
    return new Promise((resolve, reject) => {
      if (signal?.aborted) { reject(new Canceled(`${where}: aborted`, { code: 'canceled' })); return; }
      let done = false;
      const onAbort = () => req.destroy(Object.assign(new Error('aborted'), { aborted: true }));
      const finish = (fn, v) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        fn(v);
      };
      const req = this.mod.request({
        protocol: this.base.protocol, hostname: this.base.hostname, port: this.base.port,
        method, path: this.basePath + path, headers, agent: this.agent,
      });
      const timer = setTimeout(() => {
        req.destroy(Object.assign(new Error(`no answer within ${timeoutS} s`), { timedOut: true }));
      }, Math.min(MAX_TIMER_MS, Math.max(1, timeoutS * 1000))); // 24.8 days stands for "no limit"
      signal?.addEventListener('abort', onAbort, { once: true });
      req.on('socket', (sock) => {
        if (!sock.connecting) return;
        const ct = setTimeout(() => {
          req.destroy(Object.assign(new Error(`no connection within ${this.connectTimeoutMs / 1000} s`),
                                    { timedOut: true }));
        }, this.connectTimeoutMs);
        sock.once('connect', () => clearTimeout(ct));
        sock.once('close', () => clearTimeout(ct));
      });
      req.on('error', (e) => {
        if (e.aborted) { finish(reject, new Canceled(`${where}: aborted`, { code: 'canceled' })); return; }
        const u = new Unreachable(`${where}: ${e.message}`, { code: 'unreachable' });
        // Only a reset before any answer on a reused connection is retried (see the top).
        u.reusedSocket = req.reusedSocket && !e.timedOut &&
          (e.code === 'ECONNRESET' || e.code === 'EPIPE');
        finish(reject, u);
      });
      req.on('response', (res) => {
        const chunks = [];
        let n = 0;
        res.on('data', (c) => {
          n += c.length;
          if (n > MAX_ANSWER_BYTES) {
            res.destroy();
            finish(reject, new ProtocolError(`the answer of ${where} is over ${MAX_ANSWER_BYTES} bytes`));
            return;
          }
          chunks.push(c);
        });
        res.on('error', (e) => finish(reject, new Unreachable(`${where}: ${e.message}`, { code: 'unreachable' })));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed = null;
          try { parsed = text ? JSON.parse(text) : null; } catch { parsed = null; }
          finish(resolve, { status: res.statusCode, body: parsed, text, headers: res.headers });
        });
      });
      req.end(payload === null ? undefined : payload);
    });
  }
}
