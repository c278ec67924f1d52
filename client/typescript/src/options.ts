// The options of a Client and of its calls, and how they are checked.

import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type { TlsOptions } from "./api.js";
import { MAX_IDENTITY_BYTES } from "./rules.js";
import type { Session } from "./session.js";

export interface ClientOptions {
  /** The coordinator: "host:port" (plaintext unless tls is set), or "http://host:port" / "https://host:port". */
  address: string;
  /** Bearer token sent as "authorization: Bearer TOKEN" with every call. Refused over plaintext unless insecureToken. */
  token?: string;
  /** Send the token over a plaintext connection too: for loopback and tests only. */
  insecureToken?: boolean;
  /** Connect with TLS: true for the system roots, or PEM contents of a CA and client certificate. */
  tls?: boolean | TlsOptions;
  /**
   * The identity that prefixes every holder and candidate; each acquisition
   * holds as identity + "#" + a sequence number. Default: host name, process
   * id and a random suffix. At most 100 bytes of printable UTF-8.
   */
  holder?: string;
  /** The TTL of the Client's default session, in milliseconds (DEFAULT_TTL). */
  ttl?: number;
  /** Timeout of calls that do not wait, in milliseconds (default 10 s). */
  callTimeoutMs?: number;
  /** How long close() spends closing its sessions on the coordinator, in milliseconds (default 2 s, ClientRules.close_timeout_millis; 0: not at all). */
  closeTimeoutMs?: number;
  /** Where to report what cannot be returned: stream reconnects, retried acquisitions. Default: nowhere. */
  onWarn?: (message: string, err?: unknown) => void;
}

export interface LockOptions {
  /**
   * Attach the lease (or leadership) to this session of the same Client
   * instead of the Client's default session: it ends when the session ends.
   * Its release releases it alone; the session goes on.
   */
  session?: Session;
  /**
   * How long to wait for the name, in milliseconds, queued in arrival order
   * with the other waiters. Default: without end (until signal aborts).
   */
  wait?: number;
  /** Cancels the wait. */
  signal?: AbortSignal;
}

/** The options of the acquisitions that do not wait (tryLock…). */
export type TryLockOptions = Omit<LockOptions, "wait">;

export interface RunAsLeaderOptions extends LockOptions {
  /** The value to proclaim on each election. */
  value?: string | Uint8Array;
  /** Called with what fn threw; without it, runAsLeader rejects with it (after resigning). */
  onError?: (err: unknown) => void;
}

/** The options of client.session(). */
export interface SessionOptions {
  /** How long each renewal keeps the session, in milliseconds (default: the Client's ttl). */
  ttl?: number;
  /** Cancels the creation. */
  signal?: AbortSignal;
}

/** The base URL ("http://host:port" or "https://host:port") and TLS settings of opts. */
export function endpoint(opts: ClientOptions): { baseUrl: string; tls: TlsOptions | undefined } {
  let address = opts.address;
  let secure = opts.tls !== undefined && opts.tls !== false;
  const scheme = /^(https?):\/\//.exec(address);
  if (scheme) {
    if (scheme[1] === "https") secure = true;
    address = address.slice(scheme[0].length).replace(/\/+$/, "");
  }
  if (!address) throw new TypeError("coordinator: the address is empty");
  if (opts.token !== undefined) {
    if (opts.token === "") throw new TypeError("coordinator: the bearer token is empty");
    if (!secure && !opts.insecureToken) {
      throw new TypeError(
        "coordinator: refusing to send the bearer token over a plaintext connection, where anyone on the path can read it: " +
          "connect with tls, or set insecureToken on loopback and in tests",
      );
    }
  }
  const tls = typeof opts.tls === "object" ? opts.tls : secure ? {} : undefined;
  return { baseUrl: `${secure ? "https" : "http"}://${address}`, tls };
}

/** defaultIdentity is the host name, the process id and a random suffix. */
export function defaultIdentity(): string {
  let host = "unknown";
  try {
    host = hostname() || host;
  } catch {
    // keep "unknown"
  }
  return `${host.slice(0, 64)}-${process.pid}-${randomBytes(4).toString("hex")}`;
}

export function checkIdentity(id: string): void {
  const bytes = Buffer.byteLength(id, "utf8");
  if (bytes === 0) throw new TypeError("coordinator: the holder identity is empty");
  if (bytes > MAX_IDENTITY_BYTES) {
    throw new TypeError(`coordinator: the holder identity is ${bytes} bytes long; at most ${MAX_IDENTITY_BYTES} are allowed`);
  }
  if (/[\p{C}]/u.test(id)) throw new TypeError("coordinator: the holder identity contains an unprintable character");
}

export function checkTtl(ttl: number): void {
  if (!(ttl > 0) || !Number.isFinite(ttl)) throw new TypeError(`coordinator: TTL ${ttl}ms is not a positive number of milliseconds`);
}
