// Elections: a leadership is a lease on the election's name whose token is
// the term and which carries a value; observers follow who leads.

import { timestampDate } from "@bufbuild/protobuf/wkt";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  LeaderEvent_Kind,
  type Leader,
  type LeaderEvent as PbLeaderEvent,
  type Lease as PbLease,
} from "./gen/coordinator/v1/coordinator_pb.js";
import type { CoordinatorApi } from "./api.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  CampaignRequestSchema,
  CampaignResponse,
  ResignRequestSchema,
  ResignResponse,
} from "./gen/coordinator/v1/coordinator_pb.js";
import { Code, CoordinatorError, LeaseNotHeldError, decodeError } from "./errors.js";
import type { LeaseEndedError } from "./errors.js";
import { LeaseCore, releaseCore, type LeaseKeeper } from "./lease.js";
import type { Session } from "./session.js";
import { LEASE_NOT_HELD } from "./rules.js";
import { callBackoff, linkSignals, now, sleep, toBytes } from "./util.js";

const decoder = new TextDecoder();

/** An election's sitting leader. */
export interface LeaderInfo {
  /** The election's name. */
  election: string;
  /** Who leads (a Client's identity and a suffix). */
  candidate: string;
  /** The value the leader proclaimed. */
  value: Uint8Array;
  /** The value as UTF-8 text. */
  valueText: string;
  /** The leadership's fencing token: larger for every new term. */
  term: bigint;
  /** When the term ends unless renewed, by the coordinator's store clock. */
  expiresAt: Date | undefined;
}

export function leaderInfo(l: Leader): LeaderInfo {
  return {
    election: l.election,
    candidate: l.candidate,
    value: l.value,
    valueText: decoder.decode(l.value),
    term: l.term,
    expiresAt: l.expiresAt ? timestampDate(l.expiresAt) : undefined,
  };
}

/** One grant of a semaphore or read-write lock, as observe() reports it. */
export interface HolderInfo {
  /** Who holds it. */
  holder: string;
  /** The grant's fencing token. */
  token: bigint;
  /** How much of the name's capacity it holds. */
  weight: number;
  /** When it expires unless renewed, by the coordinator's store clock. */
  expiresAt: Date | undefined;
}

function holderInfo(l: PbLease): HolderInfo {
  return {
    holder: l.holder,
    token: l.token,
    weight: Math.max(l.weight, 1),
    expiresAt: l.expiresAt ? timestampDate(l.expiresAt) : undefined,
  };
}

/**
 * What happened in an election; "holders": the name has a capacity above 1
 * (a semaphore or read-write lock) and its set of grants changed.
 */
export type LeaderEventKind = "elected" | "proclaimed" | "vacant" | "holders";

/** A change of an election's leadership, as observe() yields it. */
export interface LeaderEvent {
  kind: LeaderEventKind;
  /** The leader after the change; undefined when vacant (and for holders). */
  leader?: LeaderInfo;
  /** For holders: the live grants in token order (none when the name fell free). */
  holders?: HolderInfo[];
  /** For holders: the name's capacity. */
  capacity?: number;
  /** True for the first event only: the state when observing started, not a change. */
  initial: boolean;
}

/** The calls a Leadership makes: over the Client's operation stream or unary. */
export interface LeadershipCalls {
  /** Campaign; sent is when the request was sent (performance.now() ms). */
  campaign(
    req: MessageInitShape<typeof CampaignRequestSchema>,
    signal: AbortSignal,
    timeoutMs: number,
  ): Promise<{ resp: CampaignResponse; sent: number }>;
  resign(req: MessageInitShape<typeof ResignRequestSchema>, signal: AbortSignal, timeoutMs: number): Promise<ResignResponse>;
}

/**
 * Leadership is an election won through a Client: a term in office, renewed
 * in the background like a Lease (or kept by its session) until it is
 * resigned or lost.
 *
 * Check signal while acting as the leader, and hand term to the resources
 * the leader writes to, so that they can refuse an older term's writes.
 */
export class Leadership {
  private current: Uint8Array;
  private proclaiming: Promise<unknown> = Promise.resolve();

  /** @internal */
  constructor(
    private readonly core: LeaseCore,
    private readonly keeper: LeaseKeeper,
    private readonly calls: LeadershipCalls,
    value: Uint8Array,
    private readonly callTimeoutMs: number,
  ) {
    this.current = value;
  }

  /** The election's name. */
  get election(): string {
    return this.core.name;
  }
  /** Who leads: the Client's identity and a suffix unique to this campaign. */
  get candidate(): string {
    return this.core.holder;
  }
  /** The term: the leadership's fencing token. */
  get term(): bigint {
    return this.core.token;
  }
  /** The value last proclaimed. */
  get value(): Uint8Array {
    return new Uint8Array(this.current);
  }
  /** The value last proclaimed, as UTF-8 text. */
  get valueText(): string {
    return decoder.decode(this.current);
  }
  /** The time to live last granted, in milliseconds. */
  get ttl(): number {
    return this.core.ttl;
  }
  /** When the leadership stops being valid unless renewed (performance.now() ms); see Lease.expires. */
  get expires(): number {
    return this.core.deadline;
  }
  /** Milliseconds of validity left; 0 once the leadership ended. */
  remaining(): number {
    return this.core.ended ? 0 : Math.max(0, this.core.deadline - now());
  }
  /** Aborted the moment the leadership ends; its reason is a LeaseEndedError. */
  get signal(): AbortSignal {
    return this.core.controller.signal;
  }
  /** Why the leadership ended, or undefined while in office. */
  get ended(): LeaseEndedError | undefined {
    return this.core.ended;
  }
  /** The session the leadership is attached to (see Lease.session); undefined when it has a TTL of its own. */
  get session(): Session | undefined {
    return this.core.session;
  }

  /**
   * proclaim publishes value as the sitting leader (observers see a
   * "proclaimed" event) and renews the term: a Campaign in this term only.
   * When the term is over, the leadership ends as lost and proclaim throws
   * LeaseNotHeldError; a transient error leaves the leadership as it was.
   */
  proclaim(value: string | Uint8Array, opts: { signal?: AbortSignal } = {}): Promise<void> {
    const run = this.proclaiming.then(() => this.proclaimNow(toBytes(value), opts.signal));
    this.proclaiming = run.catch(() => undefined);
    return run;
  }

  private async proclaimNow(value: Uint8Array, signal: AbortSignal | undefined): Promise<void> {
    const l = this.core;
    if (l.ended) throw l.ended;
    const ttl = l.ttl;
    const linked = linkSignals(signal, this.keeper.closeSignal);
    let resp;
    let sent: number;
    try {
      ({ resp, sent } = await this.calls.campaign(
        {
          election: l.name,
          candidate: l.holder,
          value,
          ttl: durationFromMs(Math.round(ttl)),
          term: l.token,
          sessionId: l.session?.id ?? "",
        },
        linked.signal,
        this.callTimeoutMs,
      ));
    } catch (e) {
      const err = decodeError(e);
      if (err instanceof LeaseNotHeldError) {
        this.keeper.end(l, l.endError("lost", "the term is over", err));
      }
      throw err;
    } finally {
      linked.dispose();
    }
    const term = resp.leader?.term;
    if (!resp.elected || term !== l.token) {
      // A coordinator that ignores CampaignRequest.term may have started a
      // new term nobody wants: resign it.
      if (resp.elected && term !== undefined) {
        await this.calls
          .resign({ election: l.name, candidate: l.holder, term }, AbortSignal.timeout(this.callTimeoutMs), this.callTimeoutMs)
          .catch(() => undefined);
      }
      const err = new LeaseNotHeldError(
        `coordinator: ${l.describe()}: the coordinator has another term in office`,
        { code: Code.FailedPrecondition, reason: LEASE_NOT_HELD, metadata: { name: l.name } },
      );
      this.keeper.end(l, l.endError("lost", "another term is in office", err));
      throw err;
    }
    if (!this.keeper.renewed(l, sent, ttl)) throw l.ended!;
    this.current = new Uint8Array(value);
  }

  /**
   * resign stops renewing the leadership (its signal aborts with kind
   * "released") and steps down on the coordinator, so that the next
   * candidate is elected at once. It resolves true when it stepped down,
   * false when the leadership had already ended.
   */
  resign(opts: { timeoutMs?: number } = {}): Promise<boolean> {
    const l = this.core;
    return releaseCore(
      this.keeper,
      l,
      async (signal) =>
        (await this.calls.resign({ election: l.name, candidate: l.holder, term: l.token }, signal, this.callTimeoutMs)).resigned,
      opts.timeoutMs ?? 5000,
    );
  }

  toString(): string {
    return `leadership of ${JSON.stringify(this.election)} by ${this.candidate} in term ${this.term}`;
  }
}

/** Whether an Observe stream that ended with err must not be retried. */
function permanent(err: unknown): boolean {
  if (!(err instanceof CoordinatorError)) return !(err instanceof Error && err.name === "AbortError");
  switch (err.code) {
    case Code.InvalidArgument:
    case Code.Unauthenticated:
    case Code.PermissionDenied:
    case Code.Unimplemented:
    case Code.NotFound:
      return true;
    default:
      return false;
  }
}

type State = { kind: LeaderEventKind; leader?: LeaderInfo; holders?: HolderInfo[]; capacity?: number };

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/**
 * transition returns the events that take a consumer who last saw last
 * (undefined: nothing yet) to the state ev reports.
 */
function transition(last: State | undefined, ev: PbLeaderEvent | undefined): State[] {
  if (ev?.kind === LeaderEvent_Kind.HOLDERS) {
    const cur: State = { kind: "holders", holders: ev.holders.map(holderInfo), capacity: Math.max(ev.capacity, 1) };
    return last?.kind === "holders" && sameHolders(last, cur) ? [] : [cur];
  }
  if (last?.kind === "holders") last = undefined; // a semaphore turned back into a lock: start over
  if (!ev || ev.kind === LeaderEvent_Kind.VACANT || !ev.leader) {
    return last?.kind === "vacant" ? [] : [{ kind: "vacant" }];
  }
  const cur = leaderInfo(ev.leader);
  if (!last || last.kind === "vacant") return [{ kind: "elected", leader: cur }];
  if (last.leader!.term !== cur.term) return [{ kind: "vacant" }, { kind: "elected", leader: cur }];
  if (!sameBytes(last.leader!.value, cur.value)) return [{ kind: "proclaimed", leader: cur }];
  return [];
}

/** Whether a and b (both holders states) have the same grants and capacity. */
function sameHolders(a: State, b: State): boolean {
  const x = a.holders ?? [];
  const y = b.holders ?? [];
  return a.capacity === b.capacity && x.length === y.length && x.every((h, i) => h.token === y[i]!.token && h.holder === y[i]!.holder);
}

/** The LeaderEvent of state st. */
function eventOf(st: State, initial: boolean): LeaderEvent {
  if (st.kind === "holders") return { kind: st.kind, holders: st.holders ?? [], capacity: st.capacity ?? 1, initial };
  return st.leader ? { kind: st.kind, leader: st.leader, initial } : { kind: st.kind, initial };
}

/**
 * observe yields the election's state, then every change. It reconnects
 * with backoff when the stream breaks and bridges the gap: it delivers only
 * what changed (a proclamation, or vacant then elected when the term
 * changed; the whole set of grants when a semaphore's changed), so that
 * events never arrive out of order. It ends when signal
 * aborts (or the client closes), and throws when the coordinator refuses the
 * request (invalid name, credentials).
 */
export async function* observe(
  api: CoordinatorApi,
  election: string,
  signals: (AbortSignal | undefined)[],
  onWarn: (msg: string, err?: unknown) => void,
): AsyncGenerator<LeaderEvent, void, undefined> {
  const stop = linkSignals(...signals);
  try {
    yield* observeUntil(api, election, stop.signal, onWarn);
  } finally {
    stop.dispose();
  }
}

async function* observeUntil(
  api: CoordinatorApi,
  election: string,
  signal: AbortSignal,
  onWarn: (msg: string, err?: unknown) => void,
): AsyncGenerator<LeaderEvent, void, undefined> {
  let last: State | undefined;
  const b = callBackoff();
  while (!signal.aborted) {
    const stream = new AbortController();
    const linked = linkSignals(signal, stream.signal);
    const sig = linked.signal;
    let err: unknown;
    try {
      for await (const resp of api.observe({ election }, { signal: sig, timeoutMs: 0 })) {
        b.reset();
        for (const st of transition(last, resp.event)) {
          const initial = last === undefined;
          last = st;
          yield eventOf(st, initial);
          if (signal.aborted) return;
        }
      }
    } catch (e) {
      err = e;
    } finally {
      stream.abort();
      linked.dispose();
    }
    if (signal.aborted) return;
    if (err !== undefined && permanent(err)) throw err;
    onWarn(`coordinator: observe stream of ${JSON.stringify(election)} broke; reconnecting`, err);
    await sleep(b.delay(), signal);
  }
}
