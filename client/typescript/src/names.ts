// Reading names: what Describe says about one, and what List yields under a
// prefix, page by page.

import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { CoordinatorApi } from "./api.js";
import type { Lease as PbLease } from "./gen/coordinator/v1/coordinator_pb.js";
import { msOf } from "./errors.js";

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

/** One held grant, as List yields it. */
export interface LeaseInfo {
  name: string;
  holder: string;
  token: bigint;
  /** How much of the name's capacity it holds. */
  weight: number;
  value: Uint8Array;
  /** The TTL it was granted or last renewed with, in milliseconds. */
  ttl: number | undefined;
  /** When it expires unless renewed, by the coordinator's store clock. */
  expiresAt: Date | undefined;
  /** The session it is attached to ("" for a lease of its own TTL). */
  sessionId: string;
}

/** The options of a call that reads. */
export interface ReadOptions {
  signal: AbortSignal;
  timeoutMs: number;
}

export async function describe(api: CoordinatorApi, name: string, o: ReadOptions): Promise<NameState> {
  const r = await api.describe({ name }, o);
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

function leaseInfo(l: PbLease): LeaseInfo {
  return {
    name: l.name,
    holder: l.holder,
    token: l.token,
    weight: Math.max(l.weight, 1),
    value: l.value,
    ttl: msOf(l.ttl),
    expiresAt: l.expiresAt ? timestampDate(l.expiresAt) : undefined,
    sessionId: l.sessionId,
  };
}

/** list yields every grant held under prefix, in name order, asking for the next page as the last one is used up. */
export async function* list(api: CoordinatorApi, prefix: string, pageSize: number, options: () => ReadOptions): AsyncGenerator<LeaseInfo, void, undefined> {
  let pageToken = "";
  do {
    const r = await api.list({ prefix, pageSize, pageToken }, options());
    for (const l of r.leases) yield leaseInfo(l);
    pageToken = r.nextPageToken;
  } while (pageToken !== "");
}
