// Groups: several names (locks, semaphore shares, read-write lock sides)
// granted to one holder all at once or not at all, each a lease with its
// own fencing token, held in one session and released together.

import { GroupEndedError, describeGroup, type LeaseEndKind, type LeaseEndedError } from "./errors.js";
import { AcquireGroupRequestSchema } from "./gen/coordinator/v1/coordinator_pb.js";
import { Held, HeldCore, RELEASE_TIMEOUT } from "./lease.js";
import { fieldRules } from "./rules.js";
import { MAX_CAPACITY } from "./semaphore.js";
import type { Session } from "./session.js";

/** The most names in one group (AcquireGroupRequest.members' rules). */
export const MAX_GROUP_MEMBERS = fieldRules(AcquireGroupRequestSchema.field.members).maxValue;

/**
 * Member is one name of a group and the share of it to hold: weight of
 * capacity, as a Semaphore's acquire takes (0 or absent: 1, a lock).
 */
export interface Member {
  name: string;
  capacity?: number;
  weight?: number;
}

/** One lease of a group: a name, its fencing token and the weight held. */
export interface GroupLease {
  readonly name: string;
  readonly token: bigint;
  /** How much of the name's capacity it holds: 1 for a lock. */
  readonly weight: number;
}

/**
 * groupMembers checks members as the coordinator would refuse them
 * (1 to MAX_GROUP_MEMBERS names, each once, capacities and weights within
 * 0 to MAX_CAPACITY), so that a mistake fails here, with a TypeError, and
 * returns them as the request's.
 */
export function groupMembers(members: readonly Member[]): { name: string; capacity: number; weight: number }[] {
  if (members.length < 1 || members.length > MAX_GROUP_MEMBERS) {
    throw new TypeError(`coordinator: a group has 1 to ${MAX_GROUP_MEMBERS} names, not ${members.length}`);
  }
  const seen = new Set<string>();
  return members.map((m) => {
    if (seen.has(m.name)) throw new TypeError(`coordinator: ${JSON.stringify(m.name)} is listed twice in a group`);
    seen.add(m.name);
    const capacity = m.capacity ?? 0;
    const weight = m.weight ?? 0;
    for (const [what, v] of [
      ["capacity", capacity],
      ["weight", weight],
    ] as const) {
      if (!Number.isInteger(v) || v < 0 || v > MAX_CAPACITY) {
        throw new TypeError(`coordinator: group member ${JSON.stringify(m.name)}: ${what} ${v} is not within 0 to ${MAX_CAPACITY}`);
      }
    }
    return { name: m.name, capacity, weight };
  });
}

/** GroupCore is a Group's grant: its leases, attached to one session as one. */
export class GroupCore extends HeldCore {
  constructor(
    holder: string,
    /** In the order of the request. */
    readonly leases: readonly GroupLease[],
    session: Session,
  ) {
    super(holder, session);
  }

  get leaseCount(): number {
    return this.leases.length;
  }

  describe(): string {
    return `group ${describeGroup(this.leases)}`;
  }

  endError(kind: LeaseEndKind, detail: string, cause?: unknown): LeaseEndedError {
    return new GroupEndedError(kind, this.leases, detail, cause);
  }
}

/**
 * Group is a group of names held through a Client (client.lockAll,
 * acquireAll…): granted all at once, each name a lease with its own fencing
 * token (above every earlier grant's of that name), attached as one to a
 * session, ended all at once: released together, or lost with the session.
 *
 * Hand each resource the token of its own name: token(name).
 */
export class Group extends Held<GroupCore> {
  /** The names, in the order they were asked for. */
  get names(): string[] {
    return this.core.leases.map((l) => l.name);
  }
  /** Who holds every lease of it: the Client's identity and a suffix unique to this acquisition. */
  get holder(): string {
    return this.core.holder;
  }
  /** Its leases, in the order of names. */
  get leases(): readonly GroupLease[] {
    return this.core.leases;
  }
  /** Each name's fencing token. */
  get tokens(): Map<string, bigint> {
    return new Map(this.core.leases.map((l) => [l.name, l.token]));
  }
  /** token is the fencing token of name, which must be one of the group's. */
  token(name: string): bigint {
    const l = this.core.leases.find((m) => m.name === name);
    if (l === undefined) throw new TypeError(`coordinator: ${JSON.stringify(name)} is not a name of ${this.core.describe()}`);
    return l.token;
  }
  /**
   * release gives every lease of the group up on the coordinator at once
   * (its signal aborts with kind "released"), retrying transient errors,
   * and leaves its session as it is. It resolves true when the coordinator
   * released them, false when none was held any more (lost, expired or
   * released already): a no-op.
   */
  release(opts: { timeoutMs?: number } = {}): Promise<boolean> {
    const { holder, leases } = this.core;
    const req = { holder, leases: leases.map(({ name, token }) => ({ name, token })) };
    return this.core.release(
      async (signal) => (await this.transport.run("releaseGroup", req, signal, this.callTimeoutMs)).value.released,
      opts.timeoutMs ?? RELEASE_TIMEOUT,
    );
  }

  override toString(): string {
    return `${this.core.describe()} held by ${this.holder}`;
  }
}
