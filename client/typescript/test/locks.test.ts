// Locks against real coordinators, on every store available.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Client, LeaseEndedError, NotAcquiredError } from "../src/index.js";
import { newClient, shutdown, startCoordinator, stores, uniq, usesStream, waitFor, type Coordinator } from "./helpers.js";

after(shutdown);

for (const store of stores()) {
  let coord: Coordinator;
  let a: Client;
  let b: Client;

  before(async () => {
    coord = await startCoordinator({ store });
    a = newClient({ address: coord.address });
    b = newClient({ address: coord.address });
  });

  // Alone, before the tests that run concurrently: a 1s TTL leaves little
  // room for the rest of this process's work on a loaded machine.
  describe(`lock renewal (${store} store)`, { timeout: 60_000 }, () => {
    it("its session's renewals over the operation stream keep a lease of a 1s session for 3.5s, with its token", async () => {
      const short = newClient({ address: coord.address, ttl: 1000 });
      const name = uniq("locks/renew");
      const lease = await short.tryLock(name);
      assert.ok(lease);
      assert.equal(lease.ttl, 1000);
      assert.equal(usesStream(short), true, "the operation stream is open");
      const firstSent = lease.renewedAt;
      await waitFor("3.5s of renewals", () => lease.renewedAt > firstSent + 3500 || lease.signal.aborted, 10_000);
      assert.equal(lease.signal.aborted, false, `lease ended: ${lease.ended?.message}`);
      const d = await b.describe(name);
      assert.equal(d.holder, lease.holder);
      assert.equal(d.token, lease.token);
      assert.equal(await b.tryLock(name), undefined);
      await lease.release();
    });
  });

  describe(`locks (${store} store)`, { concurrency: true, timeout: 60_000 }, () => {

    // Exclusion, token order and release as no-op are behaviour cases (behaviour.test.ts).
    it("a lease names its holder, token and validity as the coordinator has them, until released", async () => {
      const name = uniq("locks/grant");
      const lease = await a.tryLock(name);
      assert.ok(lease, "a free name is granted");
      assert.equal(lease.name, name);
      assert.ok(lease.holder.startsWith(a.identity + "#"));
      assert.ok(lease.token > 0n);
      assert.ok(lease.remaining() > 0 && lease.remaining() <= a.ttl);
      const d = await a.describe(name);
      assert.equal(d.holder, lease.holder);
      assert.equal(d.token, lease.token);
      assert.equal(await lease.release(), true);
      assert.ok(lease.ended instanceof LeaseEndedError && lease.ended.kind === "released");
      assert.equal((await a.describe(name)).held, false);
    });

    it("refuses a held name, naming the holder and when to retry", async () => {
      const name = uniq("locks/refuse");
      const held = await a.tryLock(name);
      assert.ok(held);
      assert.equal(await b.tryLock(name), undefined);
      const err = await b.lock(name, { wait: 0 }).then(
        () => assert.fail("granted a held name"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof NotAcquiredError, String(err));
      assert.equal(err.lockName, name);
      assert.equal(err.holder, held.holder);
      assert.ok(err.retryAfter !== undefined, "the refusal says when to retry (TryAcquireResponse.retry_after)");
      assert.ok(err.retryAfter > 0 && err.retryAfter <= 20_000, `retryAfter ${err.retryAfter}ms`);
      await held.release();
    });

    it("waits for a name and gives up after wait, naming the holder", async () => {
      const name = uniq("locks/wait");
      const held = await a.tryLock(name);
      assert.ok(held);
      const start = performance.now();
      const err = await b.lock(name, { wait: 500 }).then(
        () => assert.fail("granted a held name"),
        (e: unknown) => e,
      );
      assert.ok(performance.now() - start >= 400, "waited");
      assert.ok(err instanceof NotAcquiredError, String(err));
      assert.equal(err.holder, held.holder);
      await held.release();
    });

    it("serves waiters in arrival order", async () => {
      const name = uniq("locks/fifo");
      const held = await a.tryLock(name);
      assert.ok(held);
      const order: number[] = [];
      const waiters: Promise<void>[] = [];
      const clients = [b, a, b, a];
      for (let i = 0; i < clients.length; i++) {
        waiters.push(
          clients[i]!.withLock(
            name,
            (lease, signal) => {
              assert.equal(signal.aborted, false);
              assert.ok(lease.token > held.token);
              order.push(i);
            },
            { wait: 30_000 },
          ),
        );
        // Queue them one at a time, so that their arrival order is known.
        await waitFor(`waiter ${i} queued`, async () => (await a.describe(name)).waiters === i + 1);
      }
      await held.release();
      await Promise.all(waiters);
      assert.deepEqual(order, [0, 1, 2, 3]);
    });

    it("withLock returns fn's result, and releases the lease", async () => {
      const name = uniq("locks/with");
      let token = 0n;
      const result = await a.withLock(
        name,
        (lease, signal) => {
          token = lease.token;
          assert.equal(signal.aborted, false);
          return 42;
        },
        { wait: 1000 },
      );
      assert.equal(result, 42);
      assert.ok(token > 0n);
      assert.equal((await a.describe(name)).held, false);

      await assert.rejects(
        a.withLock(name, () => {
          throw new Error("boom");
        }),
        /boom/,
      );
      assert.equal((await a.describe(name)).held, false, "released after fn threw");
    });

    it("a wait can be cancelled with a signal", async () => {
      const name = uniq("locks/cancel");
      const held = await a.tryLock(name);
      assert.ok(held);
      const ac = new AbortController();
      const p = b.lock(name, { signal: ac.signal });
      await waitFor("the waiter to queue", async () => (await a.describe(name)).waiters === 1);
      ac.abort(new Error("changed my mind"));
      const err = await p.then(
        () => assert.fail("granted"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof NotAcquiredError, String(err));
      // The cancel operation the Client sends for it ends the coordinator's
      // wait at once, while the name is still held.
      await waitFor("the waiter to leave", async () => (await a.describe(name)).waiters === 0, 15_000);
      const d = await a.describe(name);
      assert.equal(d.holder, held.holder, "the name is still held by its first holder");
      await held.release();
      // Nothing was granted to the abandoned acquisition: the name is free.
      const l = await a.tryLock(name);
      assert.ok(l, "the name is free after the release");
      await l.release();
    });
  });
}
