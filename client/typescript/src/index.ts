// @coordinator-dev/coordinator: the TypeScript client of the Coordinator
// lock and election lease service.

import { Client, type ClientOptions } from "./client.js";

export { Client, DEFAULT_TTL, MAX_CAPACITY, RW_CAPACITY, Semaphore, RWLock } from "./client.js";
export type { ClientOptions, LockOptions, TryLockOptions, SessionOptions, RunAsLeaderOptions, NameState, HolderState } from "./client.js";
export type { TlsOptions, CoordinatorApi } from "./api.js";
export { Lease } from "./lease.js";
export { Leadership } from "./election.js";
export { Session } from "./session.js";
export type { HolderInfo, LeaderEvent, LeaderEventKind, LeaderInfo } from "./election.js";
export {
  Code,
  CapacityMismatchError,
  ClientClosedError,
  CoordinatorError,
  DataLossQuarantineError,
  ERROR_DOMAIN,
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
