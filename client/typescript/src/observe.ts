// Observing an election (or any name): who leads, and every change, over
// the Observe stream, reconnecting when it breaks.

import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  LeaderEvent_Kind,
  type Leader,
  type LeaderEvent as PbLeaderEvent,
  type Lease as PbLease,
} from "./gen/coordinator/v1/coordinator_pb.js";
import type { CoordinatorApi } from "./api.js";
import { CoordinatorError, decodeError, isTransient, outcomeUnknown } from "./errors.js";
import { callBackoff, linkSignals, sleep } from "./util.js";

export const decoder = new TextDecoder();

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

/**
 * Whether an Observe stream that ended with err must not be opened again:
 * the coordinator refused it, with a code that is neither transient nor of
 * unknown outcome (ClientRules).
 */
function permanent(err: unknown): boolean {
  if (!(err instanceof CoordinatorError)) return !(err instanceof Error && err.name === "AbortError");
  return !isTransient(err) && !outcomeUnknown(err);
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
    if (err !== undefined && permanent(err)) throw decodeError(err);
    onWarn(`coordinator: observe stream of ${JSON.stringify(election)} broke; reconnecting`, err);
    await sleep(b.delay(), signal);
  }
}
