// The proto is the one source of what the three clients share: these tests
// hold this client to it, so that a value copied by hand again (and
// drifting) fails here. The Go SDK and the Python client have the same tests.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { getOption } from "@bufbuild/protobuf";
import {
  Coordinator,
  ErrorReasonSchema,
  TryAcquireRequestSchema,
} from "../src/gen/coordinator/v1/coordinator_pb.js";
import { ClientRulesSchema, client_rules, ends_lease, rules } from "../src/gen/coordinator/v1/rules_pb.js";
import { Client, DEFAULT_TTL } from "../src/index.js";
import { ERROR_DOMAIN, LEASE_ENDING_REASONS, MAX_WAIT, endsLease } from "../src/rules.js";
import { Backoff, callBackoff, driftMargin, renewalBackoff, renewalDelay } from "../src/util.js";

/** The Coordinator service's ClientRules, read as any client of the proto would. */
const spec = getOption(Coordinator, client_rules);

function last(b: Backoff): number {
  for (let i = 0; i < 29; i++) b.delay();
  return b.delay();
}

describe("client rules from the proto", () => {
  it("sets every client rule", () => {
    for (const f of ClientRulesSchema.fields) {
      assert.notEqual(spec[f.localName as keyof typeof spec], 0, `the (client_rules) option does not set ${f.name}`);
    }
  });

  it("takes its limits and timings from the proto", () => {
    const holder = getOption(TryAcquireRequestSchema.field.holder, rules);
    const wait = getOption(TryAcquireRequestSchema.field.wait, rules);
    assert.equal(DEFAULT_TTL, spec.defaultTtlMillis);
    const c = new Client({ address: "127.0.0.1:1" }); // connects lazily: never here
    try {
      assert.equal(c.ttl, spec.defaultTtlMillis, "a Client's default session TTL");
      assert.equal((c as unknown as { closeTimeoutMs: number }).closeTimeoutMs, spec.closeTimeoutMillis, "a Client's default close timeout");
    } finally {
      void c.close();
    }
    assert.equal(MAX_WAIT, wait.maxMillis);
    assert.equal(ERROR_DOMAIN, spec.errorDomain);

    // The identity limit, as the Client applies it.
    const limit = holder.maxBytes - spec.holderSuffixBytes;
    void new Client({ address: "127.0.0.1:1", holder: "a".repeat(limit) }).close();
    assert.throws(() => new Client({ address: "127.0.0.1:1", holder: "a".repeat(limit + 1) }), TypeError);

    // The validity margin, at TTLs where each of its bounds applies.
    for (const ttl of [60, 200, 15_000]) {
      const want = Math.min(
        Math.max((ttl * spec.validityMarginPercent) / 100, spec.validityMarginMinMillis),
        (ttl * spec.validityMarginMaxPercent) / 100,
      );
      assert.ok(Math.abs(driftMargin(ttl) - want) < 1e-9, `driftMargin(${ttl}) = ${driftMargin(ttl)}; the proto says ${want}`);
    }
  });

  // Every delay lies within the proto's jitter of its nominal value (and at
  // most at the maximum, for a backoff's last delays), and together the
  // first delays reach past half of it, so that a narrower jitter fails too.
  const ttl = 9_000;
  const retry = spec.retryJitterPercent / 100;
  const floor = spec.renewalRetryFloorMillis;
  const cases: [string, number, number, boolean, () => number][] = [
    ["the first retry of a call", spec.retryMinMillis, retry, false, () => callBackoff().delay()],
    ["the last retry of a call", spec.retryMaxMillis, retry, true, () => last(callBackoff())],
    ["the first retry of a renewal", Math.max((ttl * spec.renewalRetryMinPercent) / 100, floor), retry, false, () => renewalBackoff(ttl).delay()],
    ["the last retry of a renewal", Math.max((ttl * spec.renewalRetryMaxPercent) / 100, floor), retry, true, () => last(renewalBackoff(ttl))],
    ["a renewal", ttl / spec.renewalsPerTtl, spec.renewalJitterPercent / 100, false, () => renewalDelay(ttl)],
  ];
  for (const [what, nominal, jitter, capped, sample] of cases) {
    it(`spreads ${what} as the proto says`, () => {
      let lo = Infinity;
      let hi = -Infinity;
      for (let i = 0; i < 2000; i++) {
        const d = sample();
        lo = Math.min(lo, d);
        hi = Math.max(hi, d);
      }
      const spread = nominal * jitter;
      const where = `delays from ${lo} to ${hi}; the proto says ${nominal} ± ${100 * jitter}%`;
      assert.ok(lo >= nominal - spread - 1e-9 && hi <= nominal + spread + 1e-9, where);
      if (capped) assert.ok(hi <= nominal, `${where}, held to the maximum`);
      else assert.ok(Math.max(nominal - lo, hi - nominal) >= spread / 2, where);
    });
  }

  it("ends a lease for the reasons the proto marks ends_lease", () => {
    const want = ErrorReasonSchema.values.filter((v) => getOption(v, ends_lease)).map((v) => v.name);
    assert.ok(want.length > 0, "no ErrorReason is marked (coordinator.v1.ends_lease)");
    assert.deepEqual([...LEASE_ENDING_REASONS].sort(), [...want].sort());
    for (const v of ErrorReasonSchema.values) assert.equal(endsLease(v.name), getOption(v, ends_lease), v.name);
  });
});
