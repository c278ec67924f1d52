// @coordinator-dev/coordinator: the TypeScript client of the Coordinator
// lock and election lease service.

import { Client } from "./client.js";
import type { ClientOptions } from "./options.js";

export { Client, DEFAULT_TTL } from "./client.js";
export { MAX_CAPACITY, RW_CAPACITY, Semaphore, RWLock } from "./semaphore.js";
export type { ClientOptions, LockOptions, TryLockOptions, SessionOptions, RunAsLeaderOptions } from "./options.js";
export type { NameState, HolderState, LeaseInfo } from "./names.js";
export type { TlsOptions, CoordinatorApi } from "./api.js";
export { Held, Lease } from "./lease.js";
export { Group, MAX_GROUP_MEMBERS } from "./group.js";
export type { GroupLease, Member } from "./group.js";
export { Leadership } from "./election.js";
export type { LeaderFn } from "./leader.js";
export { Session } from "./session.js";
export type { HolderInfo, LeaderEvent, LeaderEventKind, LeaderInfo } from "./observe.js";
export {
  Code,
  CapacityMismatchError,
  ClientClosedError,
  CoordinatorError,
  DataLossQuarantineError,
  ERROR_DOMAIN,
  GroupEndedError,
  InvalidFieldError,
  LeaseEndedError,
  LeaseNotHeldError,
  NotAcquiredError,
  PermissionDeniedError,
  SessionEndedError,
  StoreUnavailableError,
  UnauthenticatedError,
  decodeError,
} from "./errors.js";
export type { ErrorReasonName, LeaseEndKind } from "./errors.js";

/** createClient is new Client(opts). */
export function createClient(opts: ClientOptions): Client {
  return new Client(opts);
}
