// Semaphores and read-write locks against real coordinators, on every store
// available.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { CapacityMismatchError, Client, MAX_CAPACITY, NotAcquiredError, RW_CAPACITY, type LeaderEvent, type Lease } from "../src/index.js";
import { newClient, shutdown, startCoordinator, stores, uniq, waitFor, type Coordinator } from "./helpers.js";

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

  describe(`semaphores (${store} store)`, { concurrency: true, timeout: 60_000 }, () => {
    it("grants shares up to the capacity, each a lease of its own", async () => {
      const name = uniq("sem/shares");
      const sem = a.semaphore(name, 3);
      const big = await sem.acquire(2, { wait: 0 });
      const small = await b.semaphore(name, 3).tryAcquire(1);
      assert.ok(small);
      assert.equal(big.weight, 2);
      assert.equal(small.weight, 1);
      assert.ok(small.token > big.token, "tokens increase across holders");
      assert.equal(await sem.tryAcquire(1), undefined, "full");
      const d = await a.describe(name);
      assert.equal(d.capacity, 3);
      assert.deepEqual(d.holders.map((h) => [h.token, h.weight]), [[big.token, 2], [small.token, 1]]);
      // Releasing one share leaves the other held.
      assert.equal(await big.release(), true);
      assert.equal(small.signal.aborted, false, `small share ended: ${small.ended?.message}`);
      assert.deepEqual((await a.describe(name)).holders.map((h) => h.token), [small.token]);
      await small.release();
    });

    it("refuses another capacity while the name is held, naming both", async () => {
      const name = uniq("sem/capacity");
      const held = await a.semaphore(name, 5).acquire(1, { wait: 0 });
      await assert.rejects(b.semaphore(name, 3).acquire(1, { wait: 0 }), (e: unknown) => {
        assert.ok(e instanceof CapacityMismatchError, String(e));
        assert.equal(e.metadata.capacity, "5");
        assert.equal(e.metadata.requested, "3");
        return true;
      });
      await assert.rejects(b.lock(name, { wait: 0 }), CapacityMismatchError);
      assert.throws(() => a.semaphore(name, 5).acquire(6), TypeError);
      assert.throws(() => a.semaphore(name, MAX_CAPACITY + 1), TypeError);
      await held.release();
    });

    it("a waiting writer is granted before later readers, and its token is above theirs", async () => {
      const name = uniq("sem/rw");
      const rw = a.rwlock(name);
      const r1 = await rw.readLock({ wait: 0 });
      const r2 = await b.rwlock(name).tryReadLock();
      assert.ok(r2);
      assert.equal(await rw.tryWriteLock(), undefined);
      const writer = b.rwlock(name).writeLock({ wait: 30_000 });
      await waitFor("the writer waiting", async () => (await a.describe(name)).waiters === 1);
      assert.equal(await rw.tryReadLock(), undefined, "a later reader waits behind the writer");
      await r1.release();
      await r2.release();
      const w: Lease = await writer;
      assert.equal(w.weight, RW_CAPACITY);
      assert.ok(w.token > r2.token);
      await assert.rejects(rw.readLock({ wait: 300 }), NotAcquiredError);
      await w.release();
      const r = await rw.readLock({ wait: 5000 });
      assert.ok(r.token > w.token);
      await r.release();
    });

    it("observe reports the holders, with weights and expiry, as they come and go", async () => {
      const name = uniq("sem/observe");
      const sem = a.semaphore(name, 3);
      const big = await sem.acquire(2, { wait: 0 });
      const ac = new AbortController();
      const events: LeaderEvent[] = [];
      const reading = (async () => {
        for await (const ev of b.observe(name, { signal: ac.signal })) events.push(ev);
      })();
      const holders = (i: number): [string, bigint, number][] => (events[i]!.holders ?? []).map((h) => [h.holder, h.token, h.weight]);
      await waitFor("the initial event", () => events.length === 1);
      assert.equal(events[0]!.kind, "holders");
      assert.equal(events[0]!.initial, true);
      assert.equal(events[0]!.capacity, 3);
      assert.equal(events[0]!.leader, undefined);
      assert.deepEqual(holders(0), [[big.holder, big.token, 2]]);
      assert.ok(events[0]!.holders![0]!.expiresAt instanceof Date);

      const small = await b.semaphore(name, 3).acquire(1, { wait: 0 });
      await waitFor("the second holder", () => events.length === 2);
      assert.deepEqual(holders(1), [[big.holder, big.token, 2], [small.holder, small.token, 1]]);
      await big.release();
      await waitFor("the first holder leaving", () => events.length === 3);
      assert.deepEqual(holders(2), [[small.holder, small.token, 1]]);
      await small.release();
      await waitFor("the name falling free", () => events.length === 4);
      ac.abort();
      await reading;
      assert.deepEqual(holders(3), []);
      assert.deepEqual(events.map((e) => [e.kind, e.initial]), [["holders", true], ["holders", false], ["holders", false], ["holders", false]]);
    });
  });
}
