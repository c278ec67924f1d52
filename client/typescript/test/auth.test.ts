// Bearer tokens and TLS.

import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { Client, Code, UnauthenticatedError, type Lease } from "../src/index.js";
import { haveOpenssl, newClient, selfSignedCert, shutdown, skipUnlessCI, startCoordinator, uniq, waitFor } from "./helpers.js";

after(shutdown);

/** renewedTwice waits until lease's session was renewed twice after the grant (or the lease ended). */
async function renewedTwice(lease: Lease): Promise<void> {
  const granted = lease.renewedAt;
  await waitFor("two renewals", () => lease.renewedAt > granted + lease.ttl / 2 || lease.signal.aborted, 10_000);
}

describe("auth", { concurrency: true, timeout: 60_000 }, () => {
  it("needs the bearer token: none or a wrong one is Unauthenticated, the right one works", async () => {
    const coord = await startCoordinator({ env: { COORDINATOR_AUTH_TOKEN: "secret" } });

    assert.throws(() => new Client({ address: coord.address, token: "secret" }), /plaintext/);

    const anon = newClient({ address: coord.address });
    const err = await anon.tryLock(uniq("auth/x")).catch((e: unknown) => e);
    assert.ok(err instanceof UnauthenticatedError, String(err));
    assert.equal(err.code, Code.Unauthenticated);
    await assert.rejects(
      (async () => {
        for await (const ev of anon.observe(uniq("auth/e"))) void ev;
      })(),
      UnauthenticatedError,
    );

    const wrong = newClient({ address: coord.address, token: "guess", insecureToken: true });
    assert.ok((await wrong.tryLock(uniq("auth/x")).catch((e: unknown) => e)) instanceof UnauthenticatedError);

    const right = newClient({ address: coord.address, token: "secret", insecureToken: true, ttl: 1000 });
    const lease = await right.tryLock(uniq("auth/x"));
    assert.ok(lease);
    await renewedTwice(lease); // over the operation stream, with the token
    assert.equal(lease.signal.aborted, false, lease.ended?.message);
    assert.equal(await lease.release(), true);
  });

  it("connects with TLS to a self-signed coordinator", async (t) => {
    if (!haveOpenssl()) return skipUnlessCI(t, "openssl is not installed");
    const { certFile, keyFile, cert } = selfSignedCert();
    const coord = await startCoordinator({
      env: { COORDINATOR_TLS_CERT: certFile, COORDINATOR_TLS_KEY: keyFile, COORDINATOR_AUTH_TOKEN: "secret" },
    });
    const c = newClient({ address: coord.address, tls: { ca: cert }, token: "secret", ttl: 1000 });
    const lease = await c.tryLock(uniq("tls/x"));
    assert.ok(lease);
    await renewedTwice(lease);
    assert.equal(lease.signal.aborted, false, lease.ended?.message);
    assert.equal(await lease.release(), true);

    const https = newClient({ address: `https://${coord.address}`, tls: { ca: cert }, token: "secret" });
    assert.equal((await https.describe(uniq("tls/y"))).held, false);

    const untrusting = newClient({ address: coord.address, tls: true, token: "secret" });
    await assert.rejects(untrusting.describe(uniq("tls/z")));
  });
});
