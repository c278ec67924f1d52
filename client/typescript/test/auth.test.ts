// Bearer tokens and TLS.

import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { Client, Code, UnauthenticatedError } from "../src/index.js";
import { haveOpenssl, newClient, selfSignedCert, shutdown, sleep, startCoordinator, uniq } from "./helpers.js";

after(shutdown);

describe("auth", { concurrency: true, timeout: 60_000 }, () => {
  it("needs the bearer token: none or a wrong one is Unauthenticated, the right one works", async () => {
    const coord = await startCoordinator({ env: { COORDINATOR_AUTH_TOKEN: "secret" } });

    assert.throws(() => new Client({ address: coord.address, token: "secret" }), /plaintext/);

    const anon = newClient({ address: coord.address });
    const err = await anon.tryLock(uniq("auth/x"), { ttl: 1000 }).catch((e: unknown) => e);
    assert.ok(err instanceof UnauthenticatedError, String(err));
    assert.equal(err.code, Code.Unauthenticated);
    await assert.rejects(
      (async () => {
        for await (const ev of anon.observe(uniq("auth/e"))) void ev;
      })(),
      UnauthenticatedError,
    );

    const wrong = newClient({ address: coord.address, token: "guess", insecureToken: true });
    assert.ok((await wrong.tryLock(uniq("auth/x"), { ttl: 1000 }).catch((e: unknown) => e)) instanceof UnauthenticatedError);

    const right = newClient({ address: coord.address, token: "secret", insecureToken: true });
    const lease = await right.tryLock(uniq("auth/x"), { ttl: 2000 });
    assert.ok(lease);
    await sleep(3000); // renewed over KeepAlive, with the token
    assert.equal(lease.signal.aborted, false, lease.ended?.message);
    assert.equal(await lease.release(), true);
  });

  it("connects with TLS to a self-signed coordinator", async (t) => {
    if (!haveOpenssl()) return t.skip("openssl is not installed");
    const { certFile, keyFile, cert } = selfSignedCert();
    const coord = await startCoordinator({
      env: { COORDINATOR_TLS_CERT: certFile, COORDINATOR_TLS_KEY: keyFile, COORDINATOR_AUTH_TOKEN: "secret" },
    });
    const c = newClient({ address: coord.address, tls: { ca: cert }, token: "secret" });
    const lease = await c.tryLock(uniq("tls/x"), { ttl: 2000 });
    assert.ok(lease);
    await sleep(3000);
    assert.equal(lease.signal.aborted, false, lease.ended?.message);
    assert.equal(await lease.release(), true);

    const https = newClient({ address: `https://${coord.address}`, tls: { ca: cert }, token: "secret" });
    assert.equal((await https.describe(uniq("tls/y"))).held, false);

    const untrusting = newClient({ address: coord.address, tls: true, token: "secret" });
    await assert.rejects(untrusting.describe(uniq("tls/z")));
  });
});
