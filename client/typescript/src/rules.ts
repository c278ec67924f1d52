// The timings and limits this client shares with the Go SDK and the Python
// client, read from the proto, the one source all three read: the
// Coordinator service's (coordinator.v1.client_rules) option (rules.proto)
// gives the timings, the FieldRules of the request fields the request
// limits, and the ErrorReason values marked (coordinator.v1.ends_lease) the
// reasons that end a lease; the transient and outcome-unknown codes and the
// error domain are ClientRules too. test/rules.test.ts compares what the client does
// with them. Durations are in milliseconds, as everywhere in this client.

import { getOption, hasOption, type DescField } from "@bufbuild/protobuf";
import {
  Coordinator,
  ErrorReason,
  ErrorReasonSchema,
  TryAcquireRequestSchema,
} from "./gen/coordinator/v1/coordinator_pb.js";
import {
  client_rules,
  ends_lease,
  rules,
  type ClientRules,
  type FieldRules,
} from "./gen/coordinator/v1/rules_pb.js";

function readClientRules(): ClientRules {
  if (!hasOption(Coordinator, client_rules)) {
    throw new Error("coordinator: coordinator.v1.Coordinator has no (coordinator.v1.client_rules) option");
  }
  return getOption(Coordinator, client_rules);
}

/** fieldRules returns the (coordinator.v1.rules) of a request field. */
export function fieldRules(field: DescField): FieldRules {
  if (!hasOption(field, rules)) throw new Error(`coordinator: ${field.toString()} has no (coordinator.v1.rules) option`);
  return getOption(field, rules);
}

/** The Coordinator service's ClientRules. */
export const RULES: Readonly<ClientRules> = readClientRules();

/** The TTL of a Client's default session when the Client sets none: 15 s. */
export const DEFAULT_TTL = RULES.defaultTtlMillis;
/** How long close() spends releasing what is still held by default: 2 s. */
export const CLOSE_TIMEOUT = RULES.closeTimeoutMillis;
/** Identities leave room in a holder for the per-acquisition suffix: 100 bytes. */
export const MAX_IDENTITY_BYTES = fieldRules(TryAcquireRequestSchema.field.holder).maxBytes - RULES.holderSuffixBytes;
/** The longest wait the coordinator accepts in one call: 5 min. */
export const MAX_WAIT = fieldRules(TryAcquireRequestSchema.field.wait).maxMillis;

/** Retries of a call or a stream: from RETRY_MIN, doubling, at most RETRY_MAX. */
export const RETRY_MIN = RULES.retryMinMillis;
export const RETRY_MAX = RULES.retryMaxMillis;
/** The fraction by which every retry delay moves up or down: ±20%. */
export const RETRY_JITTER = RULES.retryJitterPercent / 100;

/** A lease is renewed every ttl / RENEWALS_PER_TTL... */
export const RENEWALS_PER_TTL = RULES.renewalsPerTtl;
/** ...moved up or down by this fraction: ±10%. */
export const RENEWAL_JITTER = RULES.renewalJitterPercent / 100;
/**
 * A failed renewal is retried from this fraction of the TTL, doubling, at
 * most RENEWAL_RETRY_MAX of it, never below RENEWAL_RETRY_FLOOR ms.
 */
export const RENEWAL_RETRY_MIN = RULES.renewalRetryMinPercent / 100;
export const RENEWAL_RETRY_MAX = RULES.renewalRetryMaxPercent / 100;
export const RENEWAL_RETRY_FLOOR = RULES.renewalRetryFloorMillis;

/**
 * The margin kept from a lease's validity: this fraction of the TTL, at
 * least VALIDITY_MARGIN_MIN ms, at most VALIDITY_MARGIN_MAX of the TTL.
 */
export const VALIDITY_MARGIN = RULES.validityMarginPercent / 100;
export const VALIDITY_MARGIN_MIN = RULES.validityMarginMinMillis;
export const VALIDITY_MARGIN_MAX = RULES.validityMarginMaxPercent / 100;

/** runAsLeader campaigns again after fn returned within LEADER_EARLY_RETURN of its election... */
export const LEADER_EARLY_RETURN = RULES.leaderEarlyReturnMillis;
/** ...after a pause from LEADER_RETRY_MIN, doubling, at most LEADER_RETRY_MAX. */
export const LEADER_RETRY_MIN = RULES.leaderRetryMinMillis;
export const LEADER_RETRY_MAX = RULES.leaderRetryMaxMillis;

/**
 * The ErrorReason names that end a lease: a renewal refused with one of
 * them means the lease is gone for good.
 */
export const LEASE_ENDING_REASONS: ReadonlySet<string> = new Set(
  ErrorReasonSchema.values.filter((v) => getOption(v, ends_lease)).map((v) => v.name),
);

/** endsLease reports whether a renewal refused with reason means the lease is gone for good. */
export function endsLease(reason: string | undefined): boolean {
  return reason !== undefined && LEASE_ENDING_REASONS.has(reason);
}

/** runAsLeader campaigns again each time a leadership ends, until stopped (true). */
export const LEADER_CAMPAIGNS_AGAIN = RULES.leaderCampaignsAgain;

/**
 * The gRPC status codes (google.rpc.Code numbers, which are Connect's Code
 * numbers) after which a call may succeed when tried again.
 */
export const TRANSIENT_CODES: ReadonlySet<number> = new Set(RULES.transientCodes);
/** The codes after which a call may have changed state on the coordinator without its caller hearing of it. */
export const OUTCOME_UNKNOWN_CODES: ReadonlySet<number> = new Set(RULES.outcomeUnknownCodes);
/** The google.rpc.ErrorInfo domain under which a reason is an ErrorReason: "coordinator.v1". */
export const ERROR_DOMAIN = RULES.errorDomain;

/** The ErrorInfo reason of a lease that is not held (any more). */
export const LEASE_NOT_HELD = ErrorReason[ErrorReason.LEASE_NOT_HELD];
