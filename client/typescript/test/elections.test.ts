// Elections against real coordinators, on every store available.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Client, LeaseEndedError, LeaseNotHeldError, NotAcquiredError, type LeaderEvent } from "../src/index.js";
import { newClient, shutdown, startCoordinator, stores, uniq, waitFor, type Coordinator } from "./helpers.js";

after(shutdown);

/** collect gathers the events of an observer into an array until stopped. */
function collect(c: Client, election: string): { events: LeaderEvent[]; stop: () => Promise<void> } {
  const ac = new AbortController();
  const events: LeaderEvent[] = [];
  const done = (async () => {
    for await (const ev of c.observe(election, { signal: ac.signal })) events.push(ev);
  })();
  return {
    events,
    stop: async () => {
      ac.abort();
      await done;
    },
  };
}

const kinds = (evs: LeaderEvent[]): string[] => evs.map((e) => e.kind);

for (const store of stores()) {
  describe(`elections (${store} store)`, { concurrency: true, timeout: 60_000 }, () => {
    let coord: Coordinator;
    let a: Client;
    let b: Client;

    before(async () => {
      coord = await startCoordinator({ store });
      a = newClient({ address: coord.address });
      b = newClient({ address: coord.address });
    });

    it("hands over: A resigns, B waiting in campaign leads with a higher term", async () => {
      const election = uniq("elections/handover");
      const la = await a.campaign(election, "a-addr");
      assert.equal(la.valueText, "a-addr");
      assert.ok(la.term > 0n);
      const info = await b.leader(election);
      assert.equal(info?.candidate, la.candidate);
      assert.equal(info?.term, la.term);
      assert.equal(info?.valueText, "a-addr");

      const pb = b.campaign(election, "b-addr", { wait: 30_000 });
      await waitFor("B queued", async () => (await a.describe(election)).waiters === 1);
      assert.equal(await la.resign(), true);
      assert.ok(la.ended instanceof LeaseEndedError && la.ended.kind === "released");
      const lb = await pb;
      assert.ok(lb.term > la.term, "a new term has a higher fencing token");
      assert.equal((await a.leader(election))?.candidate, lb.candidate);
      assert.equal((await a.leader(election))?.valueText, "b-addr");
      await lb.resign();
      assert.equal(await a.leader(election), undefined);
    });

    it("a campaign's wait can be cancelled with a signal: the waiter leaves at once", async () => {
      const election = uniq("elections/cancel");
      const la = await a.campaign(election, "a");
      const ac = new AbortController();
      const pb = b.campaign(election, "b", { wait: 30_000, signal: ac.signal });
      await waitFor("B queued", async () => (await a.describe(election)).waiters === 1);
      ac.abort(new Error("changed my mind"));
      await pb.then(
        () => assert.fail("elected"),
        () => undefined,
      );
      await waitFor("B to leave", async () => (await a.describe(election)).waiters === 0, 15_000);
      assert.equal((await a.leader(election))?.candidate, la.candidate);
      assert.equal(await la.resign(), true);
      assert.equal(await a.leader(election), undefined);
    });

    it("hands over when the leader dies: B is elected once A's term expires", async () => {
      const election = uniq("elections/death");
      const dying = newClient({ address: coord.address, closeTimeoutMs: 0, ttl: 1000 });
      const la = await dying.campaign(election, "a");
      const pb = b.campaign(election, "b", { wait: 30_000 });
      await waitFor("B queued", async () => (await a.describe(election)).waiters === 1);
      await dying.close(); // stops renewing without resigning, like a crash
      assert.equal(la.ended?.kind, "closed");
      const lb = await pb;
      assert.ok(lb.term > la.term);
      await lb.resign();
    });

    it("proclaims in its term, and proclaiming after the term ended throws LeaseNotHeldError", async () => {
      const election = uniq("elections/proclaim");
      const l = await a.campaign(election, "v1");
      await l.proclaim("v2");
      assert.equal(l.valueText, "v2");
      const info = await b.leader(election);
      assert.equal(info?.valueText, "v2");
      assert.equal(info?.term, l.term, "proclaiming keeps the term");

      // The term ends behind the leader's back (an operator resigns it).
      const r = await b.api.resign({ election, candidate: l.candidate, term: l.term });
      assert.equal(r.resigned, true);
      await assert.rejects(l.proclaim("v3"), (e: unknown) => {
        assert.ok(e instanceof LeaseNotHeldError, String(e));
        assert.equal(e.reason, "LEASE_NOT_HELD");
        return true;
      });
      assert.equal(l.signal.aborted, true);
      assert.equal((l.signal.reason as LeaseEndedError).kind, "lost");
      assert.equal(await b.leader(election), undefined, "proclaiming in an ended term starts no new one");
    });

    it("is not elected within wait: NotAcquiredError naming the leader", async () => {
      const election = uniq("elections/busy");
      const l = await a.campaign(election, "x");
      const err = await b.campaign(election, "y", { wait: 300 }).then(
        () => assert.fail("elected"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof NotAcquiredError, String(err));
      assert.equal(err.holder, l.candidate);
      await l.resign();
    });

    it("observes the initial state, elections, proclamations and vacancy", async () => {
      const election = uniq("elections/observe");
      const first = collect(b, election);
      await waitFor("the initial event", () => first.events.length === 1);
      assert.deepEqual(first.events[0], { kind: "vacant", initial: true });

      const l = await a.campaign(election, "one");
      await waitFor("elected", () => first.events.length === 2);
      const second = collect(b, election);
      await waitFor("the second observer's initial event", () => second.events.length === 1);
      assert.equal(second.events[0]!.kind, "elected");
      assert.equal(second.events[0]!.initial, true);
      assert.equal(second.events[0]!.leader?.term, l.term);

      await l.proclaim("two");
      await waitFor("proclaimed", () => first.events.length === 3 && second.events.length === 2);
      await l.resign();
      await waitFor("vacant", () => first.events.length === 4 && second.events.length === 3);
      await first.stop();
      await second.stop();

      assert.deepEqual(kinds(first.events), ["vacant", "elected", "proclaimed", "vacant"]);
      assert.deepEqual(kinds(second.events), ["elected", "proclaimed", "vacant"]);
      assert.deepEqual(first.events.map((e) => e.initial), [true, false, false, false]);
      const elected = first.events[1]!;
      assert.equal(elected.leader?.candidate, l.candidate);
      assert.equal(elected.leader?.valueText, "one");
      assert.equal(elected.leader?.term, l.term);
      assert.equal(first.events[2]!.leader?.valueText, "two");
      assert.equal(first.events[3]!.leader, undefined);
    });

    it("observes a term that expires as vacant", async () => {
      const election = uniq("elections/expire");
      const dying = newClient({ address: coord.address, closeTimeoutMs: 0, ttl: 1000 });
      await dying.campaign(election, "v");
      const obs = collect(b, election);
      await waitFor("the initial event", () => obs.events.length === 1);
      assert.equal(obs.events[0]!.kind, "elected");
      await dying.close();
      await waitFor("vacant after the term expired", () => obs.events.length === 2, 10_000);
      assert.equal(obs.events[1]!.kind, "vacant");
      await obs.stop();
    });

    it("runAsLeader runs fn while leader, resigns after it, and stops with its signal", async () => {
      const election = uniq("elections/run");
      const ac = new AbortController();
      const terms: bigint[] = [];
      const run = a.runAsLeader(
        election,
        async (l, signal) => {
          terms.push(l.term);
          assert.equal((await b.leader(election))?.valueText, "runner");
          if (terms.length < 2) return; // resign and campaign again
          if (!signal.aborted) await new Promise((r) => signal.addEventListener("abort", r, { once: true }));
        },
        { value: "runner", signal: ac.signal },
      );
      await waitFor("two terms", () => terms.length === 2, 10_000);
      assert.ok(terms[1]! > terms[0]!);
      ac.abort();
      await run;
      await waitFor("resigned", async () => (await b.leader(election)) === undefined, 5000);
    });
  });
}
