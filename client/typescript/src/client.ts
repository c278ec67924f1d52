// The Client: one connection to a coordinator, its leases, leaderships,
// sessions and observers.

import { randomBytes } from "node:crypto";
import { setMaxListeners } from "node:events";
import { hostname } from "node:os";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { connect, type Connection, type CoordinatorApi, type TlsOptions } from "./api.js";
import { Leadership, leaderInfo, observe, type LeaderEvent, type LeaderInfo } from "./election.js";
import {
  ClientClosedError,
  Code,
  CoordinatorError,
  NotAcquiredError,
  SessionEndedError,
  decodeError,
  isTransient,
  msOf,
  outcomeUnknown,
  sessionGone,
} from "./errors.js";
import { Renewals } from "./keepalive.js";
import { StreamTransport, UseUnaryError, resultOf, type Operation } from "./stream.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  CampaignRequestSchema,
  CampaignResponse,
  ReleaseRequestSchema,
  ReleaseResponse,
  ResignRequestSchema,
  ResignResponse,
  StreamResult,
  TryAcquireResponse,
} from "./gen/coordinator/v1/coordinator_pb.js";
import { RWCapacity, TryAcquireRequestSchema } from "./gen/coordinator/v1/coordinator_pb.js";
import { Lease, LeaseCore, type LeaseKeeper, type LeaseKind } from "./lease.js";
import { Session } from "./session.js";
import {
  CLOSE_TIMEOUT,
  DEFAULT_TTL,
  LEADER_EARLY_RETURN,
  LEADER_RETRY_MAX,
  LEADER_RETRY_MIN,
  MAX_CONFIRMS,
  MAX_IDENTITY_BYTES,
  MAX_WAIT,
  fieldRules,
} from "./rules.js";
import { Backoff, callBackoff, driftMargin, linkSignals, now, sleep, toBytes } from "./util.js";

/** The lease TTL when neither the Client nor the call sets one: 15 s (ClientRules.default_ttl_millis). */
export { DEFAULT_TTL };

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
  /** Default lease TTL in milliseconds (DEFAULT_TTL). */
  ttl?: number;
  /** Timeout of calls that do not wait, in milliseconds (default 10 s). */
  callTimeoutMs?: number;
  /** How long close() spends releasing what is still held, in milliseconds (default 2 s, ClientRules.close_timeout_millis; 0: not at all). */
  closeTimeoutMs?: number;
  /** Where to report what cannot be returned: stream reconnects, retried acquisitions. Default: nowhere. */
  onWarn?: (message: string, err?: unknown) => void;
  /**
   * Carry acquire, renew, release, campaign and resign operations over one
   * operation stream (the Stream method; default true). false: unary calls,
   * and renewals over KeepAlive. A coordinator without the Stream method gets unary calls
   * either way.
   */
  useStream?: boolean;
  /**
   * Attach every acquisition and campaign that names neither a ttl nor a
   * session to the Client's default session (default true), created by the
   * first of them with the Client's ttl: one renewal keeps all those
   * leases. false: each such lease has the Client's ttl and is renewed on
   * its own.
   */
  defaultSession?: boolean;
}

export interface LockOptions {
  /**
   * Time to live in milliseconds: the lease has a TTL of its own and is
   * renewed on its own. Default: the lease is attached to the Client's
   * default session (or, with defaultSession false or a coordinator
   * without sessions, has the Client's ttl). Not with session.
   */
  ttl?: number;
  /**
   * Attach the lease (or leadership) to this session of the same Client: it
   * is not renewed on its own, and it ends when the session ends. Its
   * release releases it alone; the session goes on. Not with ttl.
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

export interface RunAsLeaderOptions extends LockOptions {
  /** The value to proclaim on each election. */
  value?: string | Uint8Array;
  /** Called with what fn threw; without it, runAsLeader rejects with it (after resigning). */
  onError?: (err: unknown) => void;
}

/** The options of the acquisitions that do not wait (tryLock…). */
export type TryLockOptions = Omit<LockOptions, "wait">;

/** The options of client.session(). */
export interface SessionOptions {
  /** How long each renewal keeps the session, in milliseconds (default: the Client's ttl). */
  ttl?: number;
  /** Cancels the creation. */
  signal?: AbortSignal;
}

/** The coordinator's answer to an acquisition. */
interface Grant {
  acquired: boolean;
  token: bigint;
  ttl: number;
  value: Uint8Array;
  holder: string;
  retryAfter: number | undefined;
  /** When the granting request was sent, when known (sent on the operation stream). */
  sent?: number | undefined;
  /** The granted weight (1 for a lock). */
  weight?: number;
}

type AcquireCall = (
  holder: string,
  ttl: number,
  wait: number,
  signal: AbortSignal,
  timeoutMs: number,
  sessionId: string,
) => Promise<Grant>;

/** One grant of a name, as Describe reports it. */
export interface HolderState {
  holder: string;
  token: bigint;
  weight: number;
  value: Uint8Array;
}

/** What Describe says about a name. */
export interface NameState {
  held: boolean;
  holder: string | undefined;
  token: bigint | undefined;
  value: Uint8Array | undefined;
  /** A floor of the fencing tokens issued for the name. */
  lastToken: bigint;
  waiters: number;
  /** Every live grant, in token order (a semaphore's shares). */
  holders: HolderState[];
  /** The name's capacity: 1 for a lock. */
  capacity: number;
  /** The sum of the waiters' weights. */
  waitingWeight: number;
}

/**
 * Client talks to one coordinator. Make one per process and share it; close
 * it when done: close() ends every lease, leadership and session it holds
 * and releases them.
 */
export class Client {
  /** The prefix of every holder and candidate of this Client. */
  readonly identity: string;
  /**
   * The raw API (the generated Connect client) on this Client's connection,
   * with its token, throwing decoded CoordinatorErrors: for what the Client
   * does not wrap (Describe, List, Renew…). Leases acquired through it are
   * not renewed.
   */
  readonly api: CoordinatorApi;

  private readonly conn: Connection;
  private readonly renewals: Renewals;
  /** The operation stream; undefined when useStream is false. */
  private readonly transport: StreamTransport | undefined;
  private readonly closing = new AbortController();
  private readonly ttl: number;
  private readonly callTimeoutMs: number;
  private readonly closeTimeoutMs: number;
  private readonly warn: (message: string, err?: unknown) => void;
  /** Whether acquisitions without a ttl or session attach to the default session. */
  private readonly useDefaultSession: boolean;
  /** The default session, once made; a new one replaces it when it ended. */
  private defaultSess: Session | undefined;
  private creatingDefault: Promise<Session> | undefined;
  /** The coordinator has no sessions (CreateSession is Unimplemented): the default session's leases have TTLs of their own. */
  private noSessions = false;
  /** Every live session this Client made, the default one among them: close() closes them. */
  private readonly sessions = new Set<Session>();
  private seq = 0;
  private closePromise: Promise<void> | undefined;

  constructor(opts: ClientOptions) {
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
    this.identity = opts.holder ?? defaultIdentity();
    checkIdentity(this.identity);
    this.ttl = opts.ttl ?? DEFAULT_TTL;
    checkTtl(this.ttl);
    this.callTimeoutMs = opts.callTimeoutMs ?? 10_000;
    this.closeTimeoutMs = opts.closeTimeoutMs ?? CLOSE_TIMEOUT;
    this.warn = opts.onWarn ?? (() => undefined);
    this.useDefaultSession = opts.defaultSession ?? true;
    const tls = typeof opts.tls === "object" ? opts.tls : secure ? {} : undefined;
    this.conn = connect(`${secure ? "https" : "http"}://${address}`, tls, opts.token);
    this.api = this.conn.api;
    // Every call in flight listens to it.
    setMaxListeners(0, this.closing.signal);
    this.transport = opts.useStream === false ? undefined : new StreamTransport(this.api, this.closing.signal, this.warn);
    this.renewals = new Renewals(this.api, this.closing.signal, this.warn, this.transport);
  }

  /** Whether close() was called. */
  get closed(): boolean {
    return this.closing.signal.aborted;
  }

  /**
   * tryLock acquires the lock name if it is free (and nobody is queued for
   * it), without waiting; undefined when someone else holds it. Other
   * errors are the coordinator's (CoordinatorError) or ClientClosedError.
   * The lease is kept alive in the background (by its session's renewals,
   * or its own with a ttl) until released, lost or the Client closed.
   */
  async tryLock(name: string, opts: TryLockOptions = {}): Promise<Lease | undefined> {
    try {
      return await this.lock(name, { ...opts, wait: 0 });
    } catch (e) {
      if (e instanceof NotAcquiredError && e.cause === undefined) return undefined;
      throw e;
    }
  }

  /**
   * lock acquires the lock name, waiting up to opts.wait (default: without
   * end) in arrival order with the other waiters, and retrying transient
   * errors meanwhile. Not granted in time: NotAcquiredError naming the
   * holder and when to retry.
   */
  async lock(name: string, opts: LockOptions = {}): Promise<Lease> {
    return this.leaseOf(await this.acquire("lock", name, opts, this.tryAcquireCall(name, 0, 0)));
  }

  /**
   * semaphore returns the semaphore name of capacity (1 to MAX_CAPACITY):
   * shares whose weights sum to at most the capacity, each a Lease of its
   * own (see Semaphore). Every user of the name must agree on capacity.
   */
  semaphore(name: string, capacity: number): Semaphore {
    return new Semaphore(this, name, capacity);
  }

  /** rwlock returns the read-write lock name: many readers at once, or one writer (see RWLock). */
  rwlock(name: string): RWLock {
    return new RWLock(this, name);
  }

  /** @internal share acquires weight of name of capacity, as lock does. */
  async share(kind: LeaseKind, name: string, capacity: number, weight: number, opts: LockOptions): Promise<Lease> {
    return this.leaseOf(await this.acquire(kind, name, opts, this.tryAcquireCall(name, capacity, weight)));
  }

  /**
   * withLock acquires the lock name (as lock does), calls fn with the lease
   * and an AbortSignal that aborts when the lease ends (lost, or about to
   * expire unrenewed: before the coordinator could grant it to anyone
   * else), and releases the lease once fn settles. It returns what fn
   * returns. Release errors are not reported: the lease then expires after
   * its TTL.
   */
  async withLock<T>(name: string, fn: (lease: Lease, signal: AbortSignal) => T | Promise<T>, opts: LockOptions = {}): Promise<T> {
    const lease = await this.lock(name, opts);
    try {
      return await fn(lease, lease.signal);
    } finally {
      await lease.release().catch((e: unknown) => this.warn(`coordinator: could not release ${lease}`, e));
    }
  }

  /**
   * campaign runs for leadership of election with value, waiting up to
   * opts.wait (default: without end) in arrival order with the other
   * candidates. Not elected in time: NotAcquiredError naming the leader.
   * The leadership is renewed in the background until resigned or lost.
   */
  async campaign(election: string, value: string | Uint8Array, opts: LockOptions = {}): Promise<Leadership> {
    const bytes = toBytes(value);
    const { core, keeper } = await this.acquire("leadership", election, opts, this.campaignCall(election, bytes));
    return new Leadership(
      core,
      keeper,
      {
        campaign: (req, signal, timeoutMs) => this.campaignReq(req, signal, timeoutMs),
        resign: (req, signal, timeoutMs) => this.resignReq(req, signal, timeoutMs),
      },
      bytes,
      this.callTimeoutMs,
    );
  }

  /**
   * runAsLeader campaigns for election and, each time it is elected, runs fn
   * with the leadership and a signal that aborts the moment the leadership
   * ends (or opts.signal aborts). When fn returns it resigns, so that the
   * next candidate takes over at once, and campaigns again, until
   * opts.signal aborts or the Client closes; then it resolves. When fn
   * returns soon (under a minute) while still leader, the next campaign
   * waits a backoff (100 ms, doubling, at most 30 s).
   *
   * What fn throws goes to opts.onError; without one, runAsLeader resigns
   * and rejects with it.
   */
  async runAsLeader(
    election: string,
    fn: (leadership: Leadership, signal: AbortSignal) => unknown,
    opts: RunAsLeaderOptions = {},
  ): Promise<void> {
    const linked = linkSignals(opts.signal, this.closing.signal);
    try {
      await this.leadRepeatedly(election, fn, opts, linked.signal);
    } finally {
      linked.dispose();
    }
  }

  private async leadRepeatedly(
    election: string,
    fn: (leadership: Leadership, signal: AbortSignal) => unknown,
    opts: RunAsLeaderOptions,
    stop: AbortSignal,
  ): Promise<void> {
    const b = new Backoff(LEADER_RETRY_MIN, LEADER_RETRY_MAX);
    while (!stop.aborted) {
      let leadership: Leadership;
      try {
        leadership = await this.campaign(election, opts.value ?? "", { ttl: opts.ttl, session: opts.session, wait: opts.wait, signal: stop });
      } catch (e) {
        if (stop.aborted) return;
        throw e;
      }
      const started = now();
      let failed: { err: unknown } | undefined;
      const term = linkSignals(leadership.signal, stop);
      try {
        await fn(leadership, term.signal);
      } catch (e) {
        failed = { err: e };
      } finally {
        term.dispose();
      }
      const ended = leadership.ended; // before resigning: was the term over already?
      await leadership.resign().catch(() => undefined);
      if (failed) {
        if (!opts.onError) throw failed.err;
        opts.onError(failed.err);
      }
      if (stop.aborted) return;
      if (ended || now() - started >= LEADER_EARLY_RETURN) {
        b.reset();
        continue;
      }
      await sleep(b.delay(), stop);
    }
  }

  /**
   * session creates a session of opts.ttl (default: the Client's ttl) on
   * the coordinator and renews it in the background until its close(), its
   * loss or the Client's close(). Attach leases to it with the session
   * option. A coordinator without sessions fails it (Unimplemented).
   */
  async session(opts: SessionOptions = {}): Promise<Session> {
    if (this.closed) throw new ClientClosedError();
    const ttl = Math.round(opts.ttl ?? this.ttl);
    checkTtl(ttl);
    return this.createSession(ttl, opts.signal);
  }

  /**
   * defaultSession returns the session that acquisitions and campaigns
   * without a ttl or session attach to, creating it (with the Client's ttl)
   * when there is none yet or the last one ended. It throws when the
   * Client was made with defaultSession false, and the coordinator's error
   * when it has no sessions.
   */
  async defaultSession(): Promise<Session> {
    if (this.closed) throw new ClientClosedError();
    if (!this.useDefaultSession) throw new Error("coordinator: the Client has no default session (defaultSession: false)");
    return this.ensureDefaultSession();
  }

  /** leader returns the sitting leader of election, or undefined when it has none. */
  async leader(election: string, opts: { signal?: AbortSignal } = {}): Promise<LeaderInfo | undefined> {
    const resp = await this.unary(opts.signal, (o) => this.api.leader({ election }, o));
    return resp.hasLeader && resp.leader ? leaderInfo(resp.leader) : undefined;
  }

  /**
   * observe yields the state of election's leadership (initial: true), then
   * every change in order, reconnecting when the stream breaks. On a
   * semaphore or read-write lock every event is "holders": its whole set
   * of grants and its capacity. It ends when opts.signal aborts, the loop
   * breaks, or the Client closes.
   */
  observe(election: string, opts: { signal?: AbortSignal } = {}): AsyncIterable<LeaderEvent> {
    return observe(this.api, election, [opts.signal, this.closing.signal], this.warn);
  }

  /** describe reports name's current lease, the last token issued and the waiters. */
  async describe(name: string, opts: { signal?: AbortSignal } = {}): Promise<NameState> {
    const r = await this.unary(opts.signal, (o) => this.api.describe({ name }, o));
    return {
      held: r.held,
      holder: r.lease?.holder,
      token: r.lease?.token,
      value: r.lease?.value,
      lastToken: r.lastToken,
      waiters: r.waiters,
      holders: r.holders.map((l) => ({ holder: l.holder, token: l.token, weight: Math.max(l.weight, 1), value: l.value })),
      capacity: Math.max(r.capacity, 1),
      waitingWeight: Number(r.waitingWeight),
    };
  }

  /**
   * close ends every lease and leadership (their signals abort with kind
   * "closed"), releases them best-effort for up to closeTimeoutMs, ends the
   * observers and calls in progress, and closes the connection.
   */
  close(): Promise<void> {
    this.closePromise ??= this.doClose();
    return this.closePromise;
  }

  private async doClose(): Promise<void> {
    this.closing.abort(new ClientClosedError());
    // The sessions end first, with their leases; one CloseSession each
    // releases those on the coordinator.
    const sessions = [...this.sessions].filter((s) => s.closedWithClient());
    this.sessions.clear();
    const held = this.renewals.close();
    // Ends the stream, which gives up the coordinator's waits; what is held
    // is released with unary calls.
    this.transport?.close();
    if ((held.length > 0 || sessions.length > 0) && this.closeTimeoutMs > 0) {
      const signal = AbortSignal.timeout(this.closeTimeoutMs);
      await Promise.allSettled([
        ...sessions.map((s) => this.api.closeSession({ sessionId: s.id }, { signal })),
        ...held.map((l) =>
          l.kind === "leadership"
            ? this.api.resign({ election: l.name, candidate: l.holder, term: l.token }, { signal })
            : this.api.release({ name: l.name, holder: l.holder, token: l.token }, { signal }),
        ),
      ]);
    }
    this.conn.close();
  }

  /** unary makes a call that ends with signal or close(), within the call timeout. */
  private async unary<T>(signal: AbortSignal | undefined, call: (o: { signal: AbortSignal; timeoutMs: number }) => Promise<T>): Promise<T> {
    if (this.closed) throw new ClientClosedError();
    const linked = linkSignals(signal, this.closing.signal);
    try {
      return await call({ signal: linked.signal, timeoutMs: this.callTimeoutMs });
    } finally {
      linked.dispose();
    }
  }

  private leaseOf({ core, keeper }: { core: LeaseCore; keeper: LeaseKeeper }): Lease {
    const { name, holder, token } = core;
    return new Lease(
      core,
      keeper,
      async (signal) => (await this.releaseReq({ name, holder, token }, signal, this.callTimeoutMs)).released,
      5_000,
    );
  }

  /** createSession creates a session of ttl and tracks it until it ends. */
  private async createSession(ttl: number, signal: AbortSignal | undefined): Promise<Session> {
    const sent = now();
    const resp = await this.unary(signal, (o) => this.api.createSession({ ttl: durationFromMs(ttl) }, o));
    const id = resp.session?.id ?? "";
    if (!id) throw new CoordinatorError("coordinator: Internal: CreateSession answered no session id", { code: Code.Internal });
    if (this.closed) {
      await this.api.closeSession({ sessionId: id }, { timeoutMs: 1000 }).catch(() => undefined);
      throw new ClientClosedError();
    }
    const granted = msOf(resp.session?.ttl);
    const s = new Session(
      this,
      id,
      granted !== undefined && granted > 0 ? granted : ttl,
      sent,
      {
        renew: (sessionId, signal, timeoutMs) => this.renewSessionReq(sessionId, signal, timeoutMs),
        close: async (sessionId, signal) => {
          await this.api.closeSession({ sessionId }, { signal, timeoutMs: this.callTimeoutMs });
        },
      },
      this.closing.signal,
      this.callTimeoutMs,
      this.warn,
    );
    this.sessions.add(s);
    s.signal.addEventListener("abort", () => this.sessions.delete(s), { once: true });
    return s;
  }

  /** ensureDefaultSession returns the live default session, creating one (one creation for concurrent callers). */
  private async ensureDefaultSession(): Promise<Session> {
    if (this.defaultSess && !this.defaultSess.ended) return this.defaultSess;
    this.creatingDefault ??= this.createSession(this.ttl, undefined)
      .then((s) => (this.defaultSess = s))
      .finally(() => (this.creatingDefault = undefined));
    return this.creatingDefault;
  }

  /**
   * keeperOf decides what keeps an acquisition's lease alive: opts.session,
   * the default session (when opts has neither a ttl nor a session), or
   * undefined for a lease of its own TTL. Creating the default session is
   * retried as the acquisition would be, until waitEnd; a coordinator
   * without sessions gets leases of their own TTL (said once).
   */
  private async keeperOf(
    name: string,
    opts: LockOptions,
    signal: AbortSignal,
    waitEnd: number,
  ): Promise<{ session: Session | undefined; implicit: boolean }> {
    const s = opts.session;
    if (s !== undefined) {
      if (opts.ttl !== undefined) throw new TypeError("coordinator: a lease takes a ttl or a session, not both");
      if (!(s instanceof Session) || s.owner !== this) throw new TypeError(`coordinator: ${String(s)} is not a session of this Client`);
      if (s.ended) throw s.ended;
      return { session: s, implicit: false };
    }
    if (opts.ttl !== undefined || !this.useDefaultSession || this.noSessions) return { session: undefined, implicit: false };
    const b = callBackoff();
    for (;;) {
      try {
        return { session: await this.ensureDefaultSession(), implicit: true };
      } catch (e) {
        const err = decodeError(e);
        if (err instanceof CoordinatorError && err.code === Code.Unimplemented) {
          if (!this.noSessions) {
            this.noSessions = true;
            this.warn("coordinator: the coordinator has no sessions (CreateSession is Unimplemented): leases get TTLs of their own", err);
          }
          return { session: undefined, implicit: false };
        }
        if (this.closed) throw new ClientClosedError();
        if (isTransient(err) && now() < waitEnd) {
          this.warn("coordinator: creating the default session failed; retrying", err);
          const delay = Math.min(Math.max(b.delay(), (err as CoordinatorError).retryAfter ?? 0), Math.max(0, waitEnd - now()));
          if (await sleep(delay, signal)) continue;
          if (this.closed) throw new ClientClosedError();
          throw new NotAcquiredError(name, "", undefined, signal.reason ?? err);
        }
        throw err;
      }
    }
  }

  private newHolder(): string {
    return `${this.identity}#${++this.seq}`;
  }

  /**
   * viaStream runs operation over the operation stream; undefined when the
   * unary call must be made instead (useStream false, or a coordinator
   * without the Stream method).
   */
  private async viaStream(
    operation: Operation,
    signal: AbortSignal,
    timeoutMs: number,
    late?: (res: StreamResult | undefined, err: unknown) => void,
  ): Promise<{ res: StreamResult; sent: number } | undefined> {
    if (!this.transport?.usable) return undefined;
    try {
      return await this.transport.call(operation, signal, timeoutMs, late);
    } catch (e) {
      if (e instanceof UseUnaryError) return undefined;
      throw e;
    }
  }

  private async renewSessionReq(sessionId: string, signal: AbortSignal, timeoutMs: number): Promise<{ ttl: number | undefined; sent: number }> {
    const s = await this.viaStream({ case: "renewSession", value: { sessionId } }, signal, timeoutMs);
    if (s) return { ttl: msOf(resultOf(s.res, "renewSession").session?.ttl), sent: s.sent };
    const sent = now();
    const resp = await this.api.renewSession({ sessionId }, { signal, timeoutMs });
    return { ttl: msOf(resp.session?.ttl), sent };
  }

  private async releaseReq(req: MessageInitShape<typeof ReleaseRequestSchema>, signal: AbortSignal, timeoutMs: number): Promise<ReleaseResponse> {
    const s = await this.viaStream({ case: "release", value: req }, signal, timeoutMs);
    if (s) return resultOf(s.res, "release");
    return this.api.release(req, { signal, timeoutMs });
  }

  private async resignReq(req: MessageInitShape<typeof ResignRequestSchema>, signal: AbortSignal, timeoutMs: number): Promise<ResignResponse> {
    const s = await this.viaStream({ case: "resign", value: req }, signal, timeoutMs);
    if (s) return resultOf(s.res, "resign");
    return this.api.resign(req, { signal, timeoutMs });
  }

  private async campaignReq(
    req: MessageInitShape<typeof CampaignRequestSchema>,
    signal: AbortSignal,
    timeoutMs: number,
    late?: (res: StreamResult | undefined, err: unknown) => void,
  ): Promise<{ resp: CampaignResponse; sent: number }> {
    const s = await this.viaStream({ case: "campaign", value: req }, signal, timeoutMs, late);
    if (s) return { resp: resultOf(s.res, "campaign"), sent: s.sent };
    const sent = now();
    return { resp: await this.api.campaign(req, { signal, timeoutMs }), sent };
  }

  /**
   * lateOutcome handles the outcome of an acquisition whose caller left
   * while it was in flight on the operation stream: a grant is given up at
   * once, so that the next waiter need not wait for its TTL; an unknown
   * outcome is abandoned.
   */
  private lateOutcome(name: string, holder: string): (res: StreamResult | undefined, err: unknown) => void {
    return (res, err) => {
      const r = res?.result;
      if (r?.case === "acquire" && r.value.acquired && r.value.lease) {
        const { name: n, holder: h, token } = r.value.lease;
        this.giveUpLate(name, () => this.releaseReq({ name: n, holder: h, token }, AbortSignal.timeout(5000), 5000));
      } else if (r?.case === "campaign" && r.value.elected && r.value.leader) {
        const { election, candidate, term } = r.value.leader;
        this.giveUpLate(name, () => this.resignReq({ election, candidate, term }, AbortSignal.timeout(5000), 5000));
      } else if (err !== undefined && outcomeUnknown(decodeError(err))) {
        this.abandon(name, holder);
      }
    };
  }

  private giveUpLate(name: string, call: () => Promise<unknown>): void {
    if (this.closed) return; // the stream ended: the lease expires after its TTL
    call().catch((e: unknown) =>
      this.warn(
        `coordinator: could not give up ${JSON.stringify(name)}, granted after its acquisition was abandoned; it expires after its TTL`,
        e,
      ),
    );
  }

  private tryAcquireCall(name: string, capacity: number, weight: number): AcquireCall {
    return async (holder, ttl, wait, signal, timeoutMs, sessionId) => {
      const req = { name, holder, ttl: durationFromMs(ttl), wait: wait > 0 ? durationFromMs(wait) : undefined, capacity, weight, sessionId };
      let resp: TryAcquireResponse;
      let sent: number | undefined;
      const s = await this.viaStream({ case: "acquire", value: req }, signal, timeoutMs, this.lateOutcome(name, holder));
      if (s) {
        resp = resultOf(s.res, "acquire");
        sent = s.sent;
      } else {
        resp = await this.api.tryAcquire(req, { signal, timeoutMs });
      }
      const granted = msOf(resp.lease?.ttl);
      return {
        acquired: resp.acquired,
        token: resp.lease?.token ?? 0n,
        ttl: granted !== undefined && granted > 0 ? granted : ttl,
        value: resp.lease?.value ?? new Uint8Array(),
        holder: resp.holder,
        retryAfter: msOf(resp.retryAfter),
        sent,
        weight: Math.max(resp.lease?.weight ?? 1, 1),
      };
    };
  }

  private campaignCall(election: string, value: Uint8Array): AcquireCall {
    return async (candidate, ttl, wait, signal, timeoutMs, sessionId) => {
      const { resp, sent } = await this.campaignReq(
        { election, candidate, value, ttl: durationFromMs(ttl), wait: wait > 0 ? durationFromMs(wait) : undefined, sessionId },
        signal,
        timeoutMs,
        this.lateOutcome(election, candidate),
      );
      return {
        acquired: resp.elected,
        token: resp.leader?.term ?? 0n,
        ttl,
        value: resp.leader?.value ?? new Uint8Array(),
        holder: resp.elected ? "" : (resp.leader?.candidate ?? ""),
        retryAfter: msOf(resp.retryAfter),
        sent,
      };
    };
  }

  /**
   * acquire runs an acquisition as a new holder: once (wait 0) or until
   * granted or the wait ends, and registers the lease with its keeper: the
   * Renewals for a lease of its own TTL, else its session. An acquisition
   * attached to the default session that finds it gone (ended here, or the
   * coordinator says so) starts over once with a new default session.
   *
   * A grant's validity is counted from when its request was sent. A grant
   * that arrived after a long wait has little of it left, so it is
   * confirmed by asking again as the holder, which the coordinator answers
   * at once with the same token and a fresh TTL. An attached grant's
   * validity is its session's.
   */
  private async acquire(kind: LeaseKind, name: string, opts: LockOptions, call: AcquireCall): Promise<{ core: LeaseCore; keeper: LeaseKeeper }> {
    if (this.closed) throw new ClientClosedError();
    if (opts.ttl !== undefined) checkTtl(Math.round(opts.ttl));
    const wait = opts.wait ?? Infinity;
    if (!(wait >= 0)) throw new TypeError(`coordinator: wait ${wait} is negative`);
    const waitEnd = now() + wait;
    const linked = linkSignals(opts.signal, this.closing.signal);
    try {
      for (let attempt = 1; ; attempt++) {
        const { session, implicit } = await this.keeperOf(name, opts, linked.signal, waitEnd);
        const ttl = session ? session.ttl : Math.round(opts.ttl ?? this.ttl);
        const left = Math.max(0, waitEnd - now());
        try {
          const core = await this.acquireUntil(kind, name, ttl, wait === 0 ? 0 : left, linked.signal, call, session);
          return { core, keeper: session ?? this.renewals };
        } catch (e) {
          if (session && (sessionGone(e) || e instanceof SessionEndedError)) {
            if (sessionGone(e)) session.lose(e);
            if (implicit && attempt === 1) continue;
          }
          throw e;
        }
      }
    } finally {
      linked.dispose();
    }
  }

  private async acquireUntil(
    kind: LeaseKind,
    name: string,
    ttl: number,
    wait: number,
    signal: AbortSignal,
    call: AcquireCall,
    session: Session | undefined,
  ): Promise<LeaseCore> {
    const holder = this.newHolder();
    const usable = ttl - driftMargin(ttl);
    const waitEnd = now() + wait;
    const b = callBackoff();
    let confirms = 0;
    let lastErr: unknown;
    for (;;) {
      const waitFor = confirms === 0 ? Math.max(0, Math.min(MAX_WAIT, Math.floor(waitEnd - now()))) : 0;
      let sent = now();
      let g: Grant;
      try {
        if (signal.aborted) throw signal.reason;
        g = await call(holder, ttl, waitFor, signal, waitFor + this.callTimeoutMs, session?.id ?? "");
      } catch (e) {
        const err = signal.aborted ? signal.reason : decodeError(e);
        const retry = !signal.aborted && wait > 0 && isTransient(err);
        if (retry && now() < waitEnd) {
          lastErr = err;
          this.warn(`coordinator: acquiring ${kind} ${JSON.stringify(name)} failed; retrying`, err);
          const delay = Math.min(Math.max(b.delay(), (err as CoordinatorError).retryAfter ?? 0), Math.max(0, waitEnd - now()));
          if (await sleep(delay, signal)) continue; // as the same holder: a lost grant is found again
        }
        if (signal.aborted || outcomeUnknown(err)) this.abandon(name, holder);
        if (this.closed) throw new ClientClosedError();
        if (signal.aborted) throw new NotAcquiredError(name, "", undefined, signal.reason ?? lastErr);
        if (retry) {
          // The wait ran out while the coordinator or its store failed.
          throw new NotAcquiredError(name, "", (err as CoordinatorError).retryAfter, err);
        }
        throw err;
      }
      if (g.sent !== undefined) sent = g.sent;
      if (!g.acquired) {
        confirms = 0;
        if (now() >= waitEnd || waitFor === 0 && wait === 0) {
          throw new NotAcquiredError(name, g.holder, g.retryAfter);
        }
        if (now() - sent < waitFor / 2) {
          // Answered long before the wait was over (a coordinator shutting
          // down?): do not spin.
          await sleep(b.delay(), signal);
        }
        continue;
      }
      b.reset();
      const core = new LeaseCore(kind, name, holder, g.token, g.ttl, sent);
      core.weight = g.weight ?? 1;
      if (session) {
        try {
          session.attach(core);
        } catch (e) {
          // The session ended meanwhile; so did the grant, or it does with
          // the session's close: give it up anyway, for the waiters.
          this.giveUpLate(name, () => this.releaseReq({ name, holder, token: g.token }, AbortSignal.timeout(5000), 5000));
          throw e;
        }
        return core;
      }
      if (now() - sent > usable / 2 && confirms < MAX_CONFIRMS) {
        confirms++;
        continue;
      }
      if (now() >= core.deadline) {
        this.abandon(name, holder);
        throw new CoordinatorError(
          `coordinator: ${kind} ${JSON.stringify(name)}: every grant arrived after its validity ended (the coordinator answers slower than the TTL ${ttl}ms allows)`,
          { code: 4 },
        );
      }
      try {
        this.renewals.add(core);
      } catch (e) {
        // Closed meanwhile.
        await this.api
          .release({ name, holder, token: g.token }, { timeoutMs: 1000 })
          .catch(() => undefined);
        throw e;
      }
      return core;
    }
  }

  /**
   * abandon gives up a lease that an acquisition may have been granted
   * without hearing of it (the call failed after it was sent), so that
   * others need not wait for its TTL. Best-effort, in the background.
   */
  private abandon(name: string, holder: string): void {
    if (this.closed) return; // close() releases what it knows of; the rest expires
    void (async () => {
      const signal = AbortSignal.timeout(2000);
      const d = await this.api.describe({ name }, { signal });
      // A semaphore's holder may be any of its grants.
      const mine = [...d.holders, ...(d.lease ? [d.lease] : [])].find((l) => l.holder === holder);
      if (!d.held || mine === undefined) return;
      await this.api.release({ name, holder, token: mine.token }, { signal });
    })().catch(() => undefined);
  }
}

/** defaultIdentity is the host name, the process id and a random suffix. */
function defaultIdentity(): string {
  let host = "unknown";
  try {
    host = hostname() || host;
  } catch {
    // keep "unknown"
  }
  return `${host.slice(0, 64)}-${process.pid}-${randomBytes(4).toString("hex")}`;
}

function checkIdentity(id: string): void {
  const bytes = Buffer.byteLength(id, "utf8");
  if (bytes === 0) throw new TypeError("coordinator: the holder identity is empty");
  if (bytes > MAX_IDENTITY_BYTES) {
    throw new TypeError(`coordinator: the holder identity is ${bytes} bytes long; at most ${MAX_IDENTITY_BYTES} are allowed`);
  }
  if (/[\p{C}]/u.test(id)) throw new TypeError("coordinator: the holder identity contains an unprintable character");
}

function checkTtl(ttl: number): void {
  if (!(ttl > 0) || !Number.isFinite(ttl)) throw new TypeError(`coordinator: TTL ${ttl}ms is not a positive number of milliseconds`);
}

/** The largest capacity of a name (TryAcquireRequest.capacity's rules). */
export const MAX_CAPACITY = fieldRules(TryAcquireRequestSchema.field.capacity).maxValue;

/**
 * The capacity of a read-write lock: readers hold 1 of it, writers all of
 * it. Every client library uses the proto's RW_CAPACITY, so that their
 * readers and writers share a name.
 */
export const RW_CAPACITY: number = RWCapacity.RW_CAPACITY;

/**
 * Semaphore is a name of a fixed capacity whose shares acquire and
 * tryAcquire take: at most capacity weight held at once, across processes.
 * Each share is a Lease of its own, with its own token, renewal, signal and
 * release. Waiters are served in arrival order, a large request holding
 * back later small ones, so that nobody starves. While the name is held or
 * awaited, a request with another capacity fails with
 * CapacityMismatchError. A Semaphore holds nothing itself.
 */
export class Semaphore {
  /** @internal */
  constructor(
    private readonly client: Client,
    readonly name: string,
    readonly capacity: number,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1 || capacity > MAX_CAPACITY) {
      throw new TypeError(`coordinator: semaphore ${JSON.stringify(name)}: capacity ${capacity} is not within 1 to ${MAX_CAPACITY}`);
    }
  }

  /**
   * acquire takes n of the capacity, waiting up to opts.wait (default:
   * without end) in arrival order. Not granted in time: NotAcquiredError.
   */
  acquire(n: number, opts: LockOptions = {}): Promise<Lease> {
    if (!Number.isInteger(n) || n < 1 || n > this.capacity) {
      throw new TypeError(`coordinator: semaphore ${JSON.stringify(this.name)}: weight ${n} is not within 1 to the capacity, ${this.capacity}`);
    }
    return this.client.share("semaphore", this.name, this.capacity, n, opts);
  }

  /** tryAcquire takes n of the capacity if it is free now and nobody waits; undefined otherwise. */
  async tryAcquire(n: number, opts: TryLockOptions = {}): Promise<Lease | undefined> {
    return orUndefined(this.acquire(n, { ...opts, wait: 0 }));
  }
}

/**
 * RWLock is a read-write lock on a name: many readers at once, or one
 * writer. It is a semaphore of capacity RW_CAPACITY whose readers take 1 and
 * writers all of it, so it is fair: a writer waiting behind readers is
 * granted before the readers that came after it. A writer's token is above
 * every token granted before it: a resource that remembers the last
 * writer's token refuses every lower one.
 */
export class RWLock {
  /** @internal */
  constructor(
    private readonly client: Client,
    readonly name: string,
  ) {}

  /** readLock takes a read share, waiting up to opts.wait (default: without end). */
  readLock(opts: LockOptions = {}): Promise<Lease> {
    return this.client.share("read lock", this.name, RW_CAPACITY, 1, opts);
  }

  /** writeLock takes the lock for writing, waiting up to opts.wait. */
  writeLock(opts: LockOptions = {}): Promise<Lease> {
    return this.client.share("write lock", this.name, RW_CAPACITY, RW_CAPACITY, opts);
  }

  /** tryReadLock takes a read share if no writer holds or waits; undefined otherwise. */
  tryReadLock(opts: TryLockOptions = {}): Promise<Lease | undefined> {
    return orUndefined(this.readLock({ ...opts, wait: 0 }));
  }

  /** tryWriteLock takes the lock for writing if nobody holds or waits for it; undefined otherwise. */
  tryWriteLock(opts: TryLockOptions = {}): Promise<Lease | undefined> {
    return orUndefined(this.writeLock({ ...opts, wait: 0 }));
  }
}

/** orUndefined is p, or undefined when p fails only because the name is held. */
async function orUndefined(p: Promise<Lease>): Promise<Lease | undefined> {
  try {
    return await p;
  } catch (e) {
    if (e instanceof NotAcquiredError && e.cause === undefined) return undefined;
    throw e;
  }
}
