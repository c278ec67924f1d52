// Small helpers shared by the client's modules.

import {
  RENEWAL_JITTER,
  RENEWAL_RETRY_FLOOR,
  RENEWAL_RETRY_MAX,
  RENEWAL_RETRY_MIN,
  RETRY_JITTER,
  RETRY_MAX,
  RETRY_MIN,
  RENEWALS_PER_TTL,
  VALIDITY_MARGIN,
  VALIDITY_MARGIN_MAX,
  VALIDITY_MARGIN_MIN,
} from "./rules.js";

/** The monotonic clock leases are measured on, in milliseconds. */
export const now = (): number => performance.now();

/**
 * driftMargin is kept from a lease's validity for clock drift between this
 * process and the store, and for this process being scheduled late:
 * max(ttl/10, 50ms), at most ttl/2 (ClientRules.validity_margin_*).
 */
export function driftMargin(ttl: number): number {
  return Math.min(Math.max(ttl * VALIDITY_MARGIN, VALIDITY_MARGIN_MIN), ttl * VALIDITY_MARGIN_MAX);
}

/** jitter spreads d by ±fraction. */
export function jitter(d: number, fraction: number): number {
  return d <= 0 ? d : d * (1 - fraction + Math.random() * 2 * fraction);
}

/**
 * Exponential backoff: from base, doubling, each delay moved by up to
 * ±RETRY_JITTER (20%) and held to at most max.
 */
export class Backoff {
  private next: number;
  constructor(
    private readonly base: number,
    private readonly max: number,
  ) {
    this.next = base;
  }
  delay(): number {
    const d = this.next;
    this.next = Math.min(this.next * 2, this.max);
    return Math.min(jitter(d, RETRY_JITTER), this.max);
  }
  reset(): void {
    this.next = this.base;
  }
}

/** The delays between retries of a call or a stream: from 50ms, doubling, at most 2s (ClientRules.retry_*). */
export const callBackoff = (): Backoff => new Backoff(RETRY_MIN, RETRY_MAX);

/**
 * The delays before retrying a renewal that failed, in proportion to the TTL
 * so that several fit in the lease's validity: from ttl/20, doubling, at most
 * ttl/4, never below 10ms (ClientRules.renewal_retry_*).
 */
export const renewalBackoff = (ttl: number): Backoff =>
  new Backoff(Math.max(ttl * RENEWAL_RETRY_MIN, RENEWAL_RETRY_FLOOR), Math.max(ttl * RENEWAL_RETRY_MAX, RENEWAL_RETRY_FLOOR));

/** renewalDelay is how long after a renewal of ttl was sent the next one is due: ttl/3 ± 10% (ClientRules.renewal*). */
export const renewalDelay = (ttl: number): number => jitter(ttl / RENEWALS_PER_TTL, RENEWAL_JITTER);

/** sleep waits ms, or until signal aborts; it resolves true when ms passed. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  if (ms <= 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const onAbort = (): void => {
      clearTimeout(t);
      resolve(false);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A signal linked to others, and how to unlink it. */
export interface LinkedSignal {
  signal: AbortSignal;
  /** dispose stops listening to the sources; call it once the signal is no longer used. */
  dispose(): void;
}

const noop = (): void => undefined;

/**
 * linkSignals returns a signal that aborts when any of signals does
 * (skipping undefined ones). Unlike AbortSignal.any, whose composite signals
 * the sources hold only weakly (how long they live then depends on the Node
 * version's garbage collection rules), the sources hold the linked signal
 * strongly until dispose is called, which also removes its listeners from
 * long-lived sources such as the Client's own close signal.
 */
export function linkSignals(...signals: (AbortSignal | undefined)[]): LinkedSignal {
  const present = signals.filter((s): s is AbortSignal => s !== undefined);
  if (present.length === 1) return { signal: present[0]!, dispose: noop };
  const ac = new AbortController();
  const already = present.find((s) => s.aborted);
  if (already) {
    ac.abort(already.reason);
    return { signal: ac.signal, dispose: noop };
  }
  const listeners = present.map((s) => {
    const onAbort = (): void => {
      dispose();
      ac.abort(s.reason);
    };
    s.addEventListener("abort", onAbort, { once: true });
    return [s, onAbort] as const;
  });
  const dispose = (): void => {
    for (const [s, onAbort] of listeners) s.removeEventListener("abort", onAbort);
  };
  return { signal: ac.signal, dispose };
}

/** toBytes encodes a string value as UTF-8; bytes are copied. */
export function toBytes(value: string | Uint8Array | undefined): Uint8Array {
  if (value === undefined) return new Uint8Array();
  return typeof value === "string" ? new TextEncoder().encode(value) : new Uint8Array(value);
}
