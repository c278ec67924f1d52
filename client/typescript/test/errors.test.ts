// The coordinator's error reasons, decoded into their error classes (LEASE_NOT_HELD:
// stream.test.ts and elections.test.ts).

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  Client,
  Code,
  DataLossQuarantineError,
  InvalidFieldError,
  LeaseEndedError,
  NotAcquiredError,
  PermissionDeniedError,
  StoreUnavailableError,
  UnauthenticatedError,
} from "../src/index.js";
import {
  haveRedisServer,
  newClient,
  shutdown,
  skipUnlessCI,
  startCoordinator,
  startRedis,
  tempFile,
  uniq,
  waitFor,
  type Coordinator,
} from "./helpers.js";

after(shutdown);

/** rejection awaits p's rejection and returns its error. */
async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    (v) => assert.fail(`resolved with ${String(v)}`),
    (e: unknown) => e,
  );
}

const redisUrl = process.env["COORDINATOR_TEST_REDIS_URL"];

describe("error reasons", { concurrency: true, timeout: 60_000 }, () => {
  let coord: Coordinator;
  let c: Client;

  before(async () => {
    coord = await startCoordinator();
    c = newClient({ address: coord.address });
  });

  it("INVALID_FIELD: an empty name, a name too long, a session ttl too short", async () => {
    for (const [call, field] of [
      [() => c.tryLock(""), "name"],
      [() => c.tryLock("x".repeat(300)), "name"],
      [() => c.session({ ttl: 50 }), "ttl"],
      [() => c.campaign("", "v", { wait: 0 }), "election"],
    ] as const) {
      const err = await rejection(call());
      assert.ok(err instanceof InvalidFieldError, String(err));
      assert.equal(err.code, Code.InvalidArgument);
      assert.equal(err.reason, "INVALID_FIELD");
      assert.equal(err.field, field);
      assert.equal(err.metadata["field"], field);
    }
  });

  it("PERMISSION_DENIED: a name outside the access file's prefixes; Unauthenticated: an unknown token", async () => {
    const file = tempFile("access", "# credential  prefixes\ntok-team-a  team-a/ shared/\n");
    const guarded = await startCoordinator({ env: { COORDINATOR_ACCESS_FILE: file } });
    const teamA = newClient({ address: guarded.address, token: "tok-team-a", insecureToken: true });
    const lease = await teamA.tryLock(uniq("team-a/job"));
    assert.ok(lease, "a name under the credential's prefix is granted");
    await lease.release();

    const name = uniq("team-b/job");
    const err = await rejection(teamA.tryLock(name));
    assert.ok(err instanceof PermissionDeniedError, String(err));
    assert.equal(err.code, Code.PermissionDenied);
    assert.equal(err.reason, "PERMISSION_DENIED");
    assert.equal(err.metadata["name"], name);

    const stranger = newClient({ address: guarded.address, token: "nope", insecureToken: true });
    const unauth = await rejection(stranger.tryLock(uniq("team-a/job")));
    assert.ok(unauth instanceof UnauthenticatedError, String(unauth));
    assert.equal(unauth.code, Code.Unauthenticated);
  });

  it("DATA_LOSS_QUARANTINE: a Redis store started without COORDINATOR_REDIS_NEW_STORE on a fresh prefix", async (t) => {
    let url = redisUrl;
    if (!url) {
      if (!haveRedisServer()) return skipUnlessCI(t, "no Redis (COORDINATOR_TEST_REDIS_URL unset, no redis-server)");
      url = (await startRedis()).url;
    }
    const q = await startCoordinator({ store: "redis", redisUrl: url, newStore: false });
    const qc = newClient({ address: q.address });
    const name = uniq("errors/quarantine");
    const err = await rejection(qc.tryLock(name));
    assert.ok(err instanceof DataLossQuarantineError, String(err));
    assert.equal(err.code, Code.Unavailable);
    assert.equal(err.reason, "DATA_LOSS_QUARANTINE");
    assert.ok(err.retryAfter !== undefined && err.retryAfter > 0, `retryAfter ${err.retryAfter}`);
    assert.ok(Number(err.metadata["retry_after"]) > 0);

    // Waiting retries it, and gives up when the wait runs out.
    const waited = await rejection(qc.lock(name, { wait: 300 }));
    assert.ok(waited instanceof NotAcquiredError, String(waited));
    assert.ok(waited.cause instanceof DataLossQuarantineError);
    assert.ok(waited.retryAfter !== undefined && waited.retryAfter > 0);
  });

  it("STORE_UNAVAILABLE: the Redis store's server is gone; held leases end with their session as expired, not lost", async (t) => {
    if (!haveRedisServer()) return skipUnlessCI(t, "redis-server is not installed");
    const redis = await startRedis();
    const sc = await startCoordinator({
      store: "redis",
      redisUrl: redis.url,
      env: { COORDINATOR_STORE_TIMEOUT: "500ms" },
    });
    const client = newClient({ address: sc.address, ttl: 2000 });
    const lease = await client.tryLock(uniq("errors/store"));
    assert.ok(lease);
    await redis.kill();

    let err: unknown;
    await waitFor(
      "a StoreUnavailableError",
      async () => {
        err = await client.tryLock(uniq("errors/store2")).catch((e: unknown) => e);
        return err instanceof StoreUnavailableError;
      },
      15_000,
      100,
    );
    assert.ok(err instanceof StoreUnavailableError, String(err));
    assert.equal(err.code, Code.Unavailable);
    assert.equal(err.reason, "STORE_UNAVAILABLE");

    await waitFor("the held lease to end", () => lease.signal.aborted, 10_000);
    const why = lease.signal.reason as LeaseEndedError;
    assert.equal(why.kind, "expired", why.message);
    assert.match(why.message, /STORE_UNAVAILABLE|Unavailable|DeadlineExceeded/);
  });
});
