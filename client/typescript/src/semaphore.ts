// Semaphores and read-write locks: names of a capacity whose shares are
// leases of their own.

import type { Acquirer } from "./acquire.js";
import { NotAcquiredError } from "./errors.js";
import { RWCapacity, TryAcquireRequestSchema } from "./gen/coordinator/v1/coordinator_pb.js";
import type { Lease } from "./lease.js";
import type { LockOptions, TryLockOptions } from "./options.js";
import { fieldRules } from "./rules.js";

/** The largest capacity of a name (TryAcquireRequest.capacity's rules). */
export const MAX_CAPACITY = fieldRules(TryAcquireRequestSchema.field.capacity).maxValue;

/**
 * The capacity of a read-write lock: readers hold 1 of it, writers all of
 * it. Every client library uses the proto's RW_CAPACITY, so that their
 * readers and writers share a name.
 */
export const RW_CAPACITY: number = RWCapacity.RW_CAPACITY;

/** orUndefined is p, or undefined when p fails only because the name is held. */
export async function orUndefined<T>(p: Promise<T>): Promise<T | undefined> {
  try {
    return await p;
  } catch (e) {
    if (e instanceof NotAcquiredError && e.cause === undefined) return undefined;
    throw e;
  }
}

/**
 * Semaphore is a name of a fixed capacity whose shares acquire and
 * tryAcquire take: at most capacity weight held at once, across processes.
 * Each share is a Lease of its own, with its own token, signal and release.
 * Waiters are served in arrival order, a large request holding back later
 * small ones, so that nobody starves. While the name is held or awaited, a
 * request with another capacity fails with CapacityMismatchError. A
 * Semaphore holds nothing itself.
 */
export class Semaphore {
  /** @internal */
  constructor(
    private readonly acquirer: Acquirer,
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
    return this.acquirer.share("semaphore", this.name, this.capacity, n, opts);
  }

  /** tryAcquire takes n of the capacity if it is free now and nobody waits; undefined otherwise. */
  tryAcquire(n: number, opts: TryLockOptions = {}): Promise<Lease | undefined> {
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
    private readonly acquirer: Acquirer,
    readonly name: string,
  ) {}

  /** readLock takes a read share, waiting up to opts.wait (default: without end). */
  readLock(opts: LockOptions = {}): Promise<Lease> {
    return this.acquirer.share("read lock", this.name, RW_CAPACITY, 1, opts);
  }

  /** writeLock takes the lock for writing, waiting up to opts.wait. */
  writeLock(opts: LockOptions = {}): Promise<Lease> {
    return this.acquirer.share("write lock", this.name, RW_CAPACITY, RW_CAPACITY, opts);
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
