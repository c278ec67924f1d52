// Errors of the Coordinator client.
//
// A call the coordinator refuses fails with a CoordinatorError (or one of its
// subclasses), decoded from the gRPC status and its google.rpc details: the
// ErrorInfo reason (an ErrorReason name), its metadata, the field a
// BadRequest names and the delay a RetryInfo asks for.

import { Code, ConnectError } from "@connectrpc/connect";
import { durationMs } from "@bufbuild/protobuf/wkt";
import type { Duration } from "@bufbuild/protobuf/wkt";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  RetryInfoSchema,
} from "./gen/google/rpc/error_details_pb.js";
import { ErrorReason } from "./gen/coordinator/v1/coordinator_pb.js";
import { ERROR_DOMAIN, OUTCOME_UNKNOWN_CODES, TRANSIENT_CODES } from "./rules.js";

/** The google.rpc.ErrorInfo domain of the coordinator's errors (ClientRules.error_domain). */
export { ERROR_DOMAIN };

/** The reasons the coordinator gives, as ErrorInfo.reason strings: the proto's ErrorReason names. */
export type ErrorReasonName = Exclude<keyof typeof ErrorReason, "ERROR_REASON_UNSPECIFIED">;

export { Code };

interface CoordinatorErrorInit {
  code: Code;
  reason?: string | undefined;
  metadata?: Record<string, string> | undefined;
  field?: string | undefined;
  retryAfter?: number | undefined;
  cause?: unknown;
}

/**
 * A call the coordinator (or the connection to it) failed: a gRPC status
 * with the coordinator's error details decoded.
 */
export class CoordinatorError extends Error {
  /** The gRPC status code (Connect's Code enum: the same numbers). */
  readonly code: Code;
  /** The ErrorInfo reason ("LEASE_NOT_HELD"…), when the coordinator gave one. */
  readonly reason: string | undefined;
  /** The ErrorInfo metadata ({name: …}, {field: …}, {retry_after: "ms"}). */
  readonly metadata: Readonly<Record<string, string>>;
  /** The request field an InvalidArgument names (BadRequest or metadata). */
  readonly field: string | undefined;
  /** How long to wait before retrying, in milliseconds, when the coordinator said. */
  readonly retryAfter: number | undefined;

  constructor(message: string, init: CoordinatorErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.reason = init.reason || undefined;
    this.metadata = Object.freeze({ ...(init.metadata ?? {}) });
    this.field = init.field;
    this.retryAfter = init.retryAfter;
  }

  /** The status code's name: "FailedPrecondition", "Unavailable"… */
  get codeName(): string {
    return Code[this.code] ?? String(this.code);
  }
}

/** FailedPrecondition LEASE_NOT_HELD: the lease expired or is held under another holder or token. */
export class LeaseNotHeldError extends CoordinatorError {}
/**
 * FailedPrecondition CAPACITY_MISMATCH: the request's capacity differs from
 * the one the name has while held or awaited; metadata.capacity is the
 * name's, metadata.requested the request's.
 */
export class CapacityMismatchError extends CoordinatorError {}
/** Unavailable DATA_LOSS_QUARANTINE: the store lost its data; grants resume after retryAfter. */
export class DataLossQuarantineError extends CoordinatorError {}
/** Unavailable STORE_UNAVAILABLE: the store could not be reached or did not answer in time. */
export class StoreUnavailableError extends CoordinatorError {}
/** InvalidArgument INVALID_FIELD: a request field breaks its rules; field names it. */
export class InvalidFieldError extends CoordinatorError {}
/** PermissionDenied: the name is outside the prefixes the credential may use. */
export class PermissionDeniedError extends CoordinatorError {}
/** Unauthenticated: no credential, or one the coordinator does not know. */
export class UnauthenticatedError extends CoordinatorError {}

type ErrorClass = new (message: string, init: CoordinatorErrorInit) => CoordinatorError;

const byReason: Record<string, ErrorClass> = {
  [ErrorReason[ErrorReason.LEASE_NOT_HELD]]: LeaseNotHeldError,
  [ErrorReason[ErrorReason.CAPACITY_MISMATCH]]: CapacityMismatchError,
  [ErrorReason[ErrorReason.DATA_LOSS_QUARANTINE]]: DataLossQuarantineError,
  [ErrorReason[ErrorReason.STORE_UNAVAILABLE]]: StoreUnavailableError,
  [ErrorReason[ErrorReason.INVALID_FIELD]]: InvalidFieldError,
  [ErrorReason[ErrorReason.PERMISSION_DENIED]]: PermissionDeniedError,
};

function classFor(code: Code, reason: string | undefined): ErrorClass {
  const byR = reason ? byReason[reason] : undefined;
  if (byR) return byR;
  switch (code) {
    case Code.PermissionDenied:
      return PermissionDeniedError;
    case Code.Unauthenticated:
      return UnauthenticatedError;
    default:
      return CoordinatorError;
  }
}

/** Milliseconds of a protobuf Duration, or undefined when unset. */
export function msOf(d: Duration | undefined): number | undefined {
  return d === undefined ? undefined : durationMs(d);
}

/**
 * decodeError turns what a Connect call threw into a CoordinatorError
 * subclass. Errors that are already decoded, and errors that are not a
 * call's (a TypeError…), are returned as they are.
 */
export function decodeError(e: unknown): Error {
  if (e instanceof CoordinatorError) return e;
  if (!(e instanceof ConnectError)) {
    if (e instanceof Error && e.name === "AbortError") {
      return fromConnect(ConnectError.from(e));
    }
    return e instanceof Error ? e : new Error(String(e));
  }
  return fromConnect(e);
}

function fromConnect(err: ConnectError): CoordinatorError {
  let reason: string | undefined;
  let metadata: Record<string, string> = {};
  let field: string | undefined;
  let retryAfter: number | undefined;
  try {
    for (const info of err.findDetails(ErrorInfoSchema)) {
      if (info.domain === ERROR_DOMAIN) {
        reason = info.reason;
        metadata = { ...info.metadata };
        break;
      }
    }
    for (const br of err.findDetails(BadRequestSchema)) {
      const v = br.fieldViolations[0];
      if (v && v.field) {
        field = v.field;
        break;
      }
    }
    for (const ri of err.findDetails(RetryInfoSchema)) {
      retryAfter = msOf(ri.retryDelay);
      if (retryAfter !== undefined) break;
    }
  } catch {
    // Undecodable details: keep the status alone.
  }
  field ??= metadata["field"] || undefined;
  if (retryAfter === undefined && metadata["retry_after"]) {
    const ms = Number(metadata["retry_after"]);
    if (Number.isFinite(ms)) retryAfter = ms;
  }
  const Cls = classFor(err.code, reason);
  const message = `coordinator: ${Code[err.code] ?? err.code}${reason ? ` ${reason}` : ""}: ${err.rawMessage}`;
  return new Cls(message, { code: err.code, reason, metadata, field, retryAfter, cause: err });
}

/**
 * The name (or election) was not granted: someone else holds it (tryLock,
 * or a wait that ran out), or the wait was cancelled.
 */
export class NotAcquiredError extends Error {
  /** The lock or election name. */
  readonly lockName: string;
  /** Who holds it, as the coordinator last said; empty when it did not say. */
  readonly holder: string;
  /** When the coordinator said the name can be granted at the earliest, in ms. */
  readonly retryAfter: number | undefined;

  constructor(lockName: string, holder: string, retryAfter: number | undefined, cause?: unknown) {
    let msg = `coordinator: ${JSON.stringify(lockName)} not acquired`;
    if (holder) msg += `: held by ${holder}`;
    if (retryAfter !== undefined) msg += ` (retry after ${retryAfter}ms)`;
    if (cause instanceof Error) msg += `: ${cause.message}`;
    super(msg, cause === undefined ? undefined : { cause });
    this.name = "NotAcquiredError";
    this.lockName = lockName;
    this.holder = holder;
    this.retryAfter = retryAfter;
  }
}

/** How a lease or leadership ended. */
export type LeaseEndKind = "released" | "lost" | "expired" | "closed";

/**
 * Why a lease or leadership ended: the reason of its AbortSignal.
 *
 * - released: released (or resigned) through this client;
 * - lost: the coordinator refused its session's renewal (the session
 *   expired or was closed there), or a proclamation found the term over;
 *   cause is the session's SessionEndedError or the coordinator's error;
 * - expired: no renewal of its session succeeded before the session's
 *   validity ran out on this process's clock (coordinator or store
 *   unreachable). Nobody else can have been granted the name yet; the
 *   coordinator's own expiry comes later;
 * - closed: the client was closed.
 */
export class LeaseEndedError extends Error {
  readonly kind: LeaseEndKind;
  readonly lockName: string;
  readonly token: bigint;

  constructor(kind: LeaseEndKind, lockName: string, token: bigint, detail: string, cause?: unknown) {
    super(`coordinator: ${JSON.stringify(lockName)} (token ${token}) ${kind}${detail ? `: ${detail}` : ""}`, cause === undefined ? undefined : { cause });
    this.name = "LeaseEndedError";
    this.kind = kind;
    this.lockName = lockName;
    this.token = token;
  }
}

/**
 * Why a group ended: a LeaseEndedError, since every lease of the group ends
 * at once and in the same way, whose lockName and token are those of its
 * first name, and which names every lease.
 */
export class GroupEndedError extends LeaseEndedError {
  /** The group's names, in the order they were asked for. */
  readonly names: readonly string[];
  /** The fencing token of each name. */
  readonly tokens: ReadonlyMap<string, bigint>;

  constructor(kind: LeaseEndKind, leases: readonly { name: string; token: bigint }[], detail: string, cause?: unknown) {
    super(kind, leases[0]?.name ?? "", leases[0]?.token ?? 0n, detail, cause);
    this.name = "GroupEndedError";
    this.message = `coordinator: group ${describeGroup(leases)} ${kind}${detail ? `: ${detail}` : ""}`;
    this.names = Object.freeze(leases.map((l) => l.name));
    this.tokens = new Map(leases.map((l) => [l.name, l.token]));
  }
}

/** describeGroup names a group's leases for messages: "a" (token 3), "b" (token 9). */
export function describeGroup(leases: readonly { name: string; token: bigint }[]): string {
  return leases.map((l) => `${JSON.stringify(l.name)} (token ${l.token})`).join(", ");
}

/**
 * Why a session ended: the reason of its AbortSignal, and the cause of the
 * LeaseEndedError of every lease attached to it, which ends with the same
 * kind.
 *
 * - released: Session.close();
 * - lost: the coordinator refused a renewal (the session expired or was
 *   closed there, or belongs to another credential); cause is its error;
 * - expired: no renewal succeeded before the session's validity ran out on
 *   this process's clock;
 * - closed: the client was closed.
 */
export class SessionEndedError extends Error {
  readonly kind: LeaseEndKind;
  readonly sessionId: string;

  constructor(kind: LeaseEndKind, sessionId: string, detail: string, cause?: unknown) {
    super(`coordinator: session ${sessionId} ${kind}${detail ? `: ${detail}` : ""}`, cause === undefined ? undefined : { cause });
    this.name = "SessionEndedError";
    this.kind = kind;
    this.sessionId = sessionId;
  }
}

/** The ErrorInfo reasons of a session that is gone for good. */
const SESSION_GONE: ReadonlySet<string> = new Set([
  ErrorReason[ErrorReason.SESSION_NOT_FOUND],
  ErrorReason[ErrorReason.SESSION_EXPIRED],
  ErrorReason[ErrorReason.SESSION_CLOSED],
]);

/** sessionGone reports whether err says that the session a call named has ended for good. */
export function sessionGone(err: unknown): boolean {
  return err instanceof CoordinatorError && err.reason !== undefined && SESSION_GONE.has(err.reason);
}

/** The client was closed. */
export class ClientClosedError extends Error {
  constructor() {
    super("coordinator: client closed");
    this.name = "ClientClosedError";
  }
}

/** Whether a call that failed with err may succeed when tried again (ClientRules.transient_codes). */
export function isTransient(err: unknown): boolean {
  return err instanceof CoordinatorError && TRANSIENT_CODES.has(err.code);
}

/**
 * Whether a call that failed with err may still have changed state on the
 * coordinator (ClientRules.outcome_unknown_codes); so may one that failed
 * without a status.
 */
export function outcomeUnknown(err: unknown): boolean {
  return !(err instanceof CoordinatorError) || OUTCOME_UNKNOWN_CODES.has(err.code);
}
