// Loss detection: a coordinator killed while a lease is held.

import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { LeaseEndedError } from "../src/index.js";
import { abortedAt, modeOpts, modes, newClient, shutdown, startCoordinator, stores, uniq, waitFor } from "./helpers.js";

after(shutdown);

// How late a timer may fire on a loaded machine. The lease's own deadline
// is a drift margin (ttl/10) before ttl after its last renewal was sent;
// this is only the event loop's lateness on top of that.
const TIMER_SLACK = 500;

for (const store of stores()) for (const mode of modes) {
  describe(`loss detection (${store} store, ${mode})`, { concurrency: true, timeout: 60_000 }, () => {
    it("aborts the signal no later than ttl after the last renewal when the coordinator is SIGKILLed", async () => {
      const coord = await startCoordinator({ store });
      const c = newClient({ address: coord.address, ...modeOpts(mode) });
      const ttl = 1500;
      const lease = await c.tryLock(uniq("loss/kill"), { ttl });
      assert.ok(lease);
      const granted = lease.renewedAt;
      await waitFor("a first renewal", () => lease.renewedAt > granted, 5000, 10);
      assert.equal(lease.signal.aborted, false);

      const aborted = abortedAt(lease.signal);
      await coord.kill("SIGKILL");
      const killedAt = performance.now();
      const at = await aborted;
      const last = lease.renewedAt; // the send time of the last successful renewal

      const why = lease.signal.reason as LeaseEndedError;
      assert.ok(why instanceof LeaseEndedError, String(why));
      assert.equal(why.kind, "expired", why.message);
      // The local deadline is before the coordinator's expiry.
      assert.ok(lease.expires < last + ttl, `deadline ${lease.expires - last}ms after the last renewal; ttl ${ttl}ms`);
      assert.ok(at >= lease.expires - 5, "not before the deadline");
      assert.ok(
        at - last <= ttl + TIMER_SLACK,
        `the signal fired ${Math.round(at - last)}ms after the last renewal was sent (ttl ${ttl}ms)`,
      );
      assert.ok(at - killedAt <= ttl + TIMER_SLACK, "and within ttl of the kill");
      await c.close();
    });
  });
}
