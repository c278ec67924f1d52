// Sessions: one renewal keeps every attached lease, and they end together
// (close, loss, expiry, the Client's close); the default session;
// credentials. Renewals and releases are counted on the coordinator's
// /metrics.

import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  Code,
  CoordinatorError,
  LeaseEndedError,
  PermissionDeniedError,
  SessionEndedError,
  type Session,
  type Client,
  type Lease,
} from "../src/index.js";
import {
  abortedAt,
  closeSessionBehindItsBack,
  metric,
  newClient,
  shutdown,
  startCoordinator,
  stores,
  tempFile,
  uniq,
  waitFor,
  type Coordinator,
} from "./helpers.js";

after(shutdown);

// How late a timer may fire on a loaded machine, on top of a deadline.
const TIMER_SLACK = 500;

/** Successful session renewals the coordinator answered, over the stream or unary. */
async function sessionRenewals(coord: Coordinator): Promise<{ stream: number; unary: number }> {
  return {
    stream: await metric(coord, "coordinator_stream_operations_total", { op: "renew_session", code: "OK" }),
    unary: await metric(coord, "grpc_server_handled_total", { grpc_method: "RenewSession", grpc_code: "OK" }),
  };
}

/** Renewals of single leases: renew operations and Renew calls. */
async function leaseRenewals(coord: Coordinator): Promise<number> {
  return (
    (await metric(coord, "coordinator_stream_operations_total", { op: "renew" })) +
    (await metric(coord, "grpc_server_handled_total", { grpc_method: "Renew" }))
  );
}

/** Releases and resignations of single leases, over the stream or unary. */
async function releases(coord: Coordinator): Promise<number> {
  return (
    (await metric(coord, "coordinator_stream_operations_total", { op: "release" })) +
    (await metric(coord, "coordinator_stream_operations_total", { op: "resign" })) +
    (await metric(coord, "grpc_server_handled_total", { grpc_method: "Release" })) +
    (await metric(coord, "grpc_server_handled_total", { grpc_method: "Resign" }))
  );
}

async function closeSessionCalls(coord: Coordinator): Promise<number> {
  return metric(coord, "grpc_server_handled_total", { grpc_method: "CloseSession", grpc_code: "OK" });
}

/** sessionOf is the session_id the coordinator has on name's lease ("" for a lease of its own TTL). */
async function sessionOf(c: Client, name: string): Promise<string | undefined> {
  const d = await c.api.describe({ name });
  return d.lease?.sessionId ?? d.holders[0]?.sessionId;
}

function assertEndedBySession(l: { signal: AbortSignal; ended: LeaseEndedError | undefined }, kind: string, s: Session): void {
  assert.ok(l.signal.aborted, "the lease ended");
  const why = l.ended;
  assert.ok(why instanceof LeaseEndedError, String(why));
  assert.equal(why.kind, kind, why.message);
  assert.ok(why.cause instanceof SessionEndedError, `caused by the session's end: ${String(why.cause)}`);
  assert.equal(why.cause, s.ended);
}

async function leases(c: Client, s: Session, prefix: string, n: number): Promise<{ names: string[]; leases: Lease[] }> {
  const names = Array.from({ length: n }, (_, i) => uniq(`${prefix}-${i}`));
  const got = await Promise.all(names.map((name) => c.tryLock(name, { session: s })));
  return { names, leases: got.map((l, i) => (assert.ok(l, `${names[i]} granted`), l)) };
}

for (const store of stores()) {
  describe(`sessions (${store} store)`, { concurrency: true, timeout: 90_000 }, () => {
    const client = (coord: Coordinator) => newClient({ address: coord.address });

    it("one renewal keeps every attached lease: the session is renewed, its locks, shares and leaderships never", async () => {
      const coord = await startCoordinator({ store, metrics: true });
      const c = client(coord);
      const ttl = 900;
      const s = await c.session({ ttl });
      assert.equal(s.ttl, ttl);
      assert.match(s.id, /\S/);
      const { names, leases: locks } = await leases(c, s, "sessions/keep", 3);
      const share = await c.semaphore(uniq("sessions/keep-sem"), 3).acquire(2, { session: s, wait: 5000 });
      const reader = await c.rwlock(uniq("sessions/keep-rw")).readLock({ session: s, wait: 5000 });
      const leader = await c.campaign(uniq("sessions/keep-el"), "me", { session: s, wait: 5000 });
      const all = [...locks, share, reader, leader];
      for (const l of all) {
        assert.equal(l.session, s);
        assert.equal(l.ttl, ttl);
        assert.equal(l.expires, s.deadline, "an attached lease's deadline is its session's");
      }
      assert.equal(s.size, all.length);
      for (const name of names) assert.equal(await sessionOf(c, name), s.id);

      // Four renewals of a 900ms session: the leases outlive their TTL
      // several times over on the session's renewals alone.
      const before = s.renewedAt;
      await waitFor("four session renewals", async () => {
        const r = await sessionRenewals(coord);
        return r.stream + r.unary >= 4;
      }, 20_000);
      assert.ok(s.renewedAt > before, "the session's deadline moved");
      const r = await sessionRenewals(coord);
      assert.equal(r.unary, 0, "renewed as renew_session operations on the stream, never with RenewSession calls");
      assert.equal(await leaseRenewals(coord), 0, "no attached lease was renewed on its own");
      for (const l of all) {
        assert.equal(l.signal.aborted, false, l.ended?.message);
        assert.equal(l.expires, s.deadline);
      }
      for (const name of names) assert.equal((await c.describe(name)).held, true);
      assert.equal(await s.close(), true);
    });

    it("close releases every attached lease in one call: a waiter is granted at once, long before the TTL", async () => {
      const coord = await startCoordinator({ store, metrics: true });
      const c = client(coord);
      const b = client(coord);
      const s = await c.session({ ttl: 30_000 });
      const { names, leases: held } = await leases(c, s, "sessions/close", 3);
      const leader = await c.campaign(uniq("sessions/close-el"), "a", { session: s, wait: 5000 });
      const waiting = b.lock(names[0]!, { wait: 20_000 });
      const candidate = b.campaign(leader.election, "b", { wait: 20_000 });
      await waitFor("the waiters queued", async () => (await b.describe(names[0]!)).waiters === 1 && (await b.describe(leader.election)).waiters === 1);

      const closedAt = performance.now();
      assert.equal(await s.close(), true);
      for (const l of [...held, leader]) assertEndedBySession(l, "released", s);
      assert.equal(s.ended?.kind, "released");
      assert.ok(s.signal.aborted);
      const granted = await waiting;
      const elected = await candidate;
      assert.ok(performance.now() - closedAt < 10_000, "granted at the close, not at the session's expiry");
      assert.ok(granted.token > held[0]!.token);
      assert.ok(elected.term > leader.term);
      for (const name of names.slice(1)) assert.equal((await b.describe(name)).held, false, `${name} released`);
      assert.equal(await closeSessionCalls(coord), 1, "one CloseSession");
      assert.equal(await releases(coord), 0, "and no release of a single lease");
      assert.equal(await s.close(), false, "closing again");
      await assert.rejects(c.tryLock(uniq("sessions/closed"), { session: s }), SessionEndedError);
    });

    it("a renewal refused ends the session as lost, and every attached lease with it", async () => {
      const coord = await startCoordinator({ store });
      const c = client(coord);
      const ttl = 1200;
      const s = await c.session({ ttl });
      const { leases: held } = await leases(c, s, "sessions/lost", 2);
      const leader = await c.campaign(uniq("sessions/lost-el"), "a", { session: s, wait: 5000 });
      const aborted = abortedAt(s.signal);
      // Closed behind the Client's back: its next renewal is refused.
      await closeSessionBehindItsBack(coord.address, s.id);
      const closedAt = performance.now();
      const at = await aborted;
      assert.ok(at - closedAt <= ttl + TIMER_SLACK, `lost ${Math.round(at - closedAt)}ms after its close (ttl ${ttl}ms)`);
      assert.equal(s.ended?.kind, "lost", s.ended?.message);
      const cause = s.ended?.cause;
      assert.ok(cause instanceof CoordinatorError, String(cause));
      assert.equal(cause.reason, "SESSION_CLOSED");
      for (const l of [...held, leader]) assertEndedBySession(l, "lost", s);
      assert.equal(await held[0]!.release(), false, "a lease that ended releases nothing");
    });

    it("a SIGKILLed coordinator: the session expires no later than its ttl after its last renewal, its leases with it", async () => {
      const coord = await startCoordinator({ store });
      const c = client(coord);
      const ttl = 1500;
      const s = await c.session({ ttl });
      const { leases: held } = await leases(c, s, "sessions/kill", 2);
      const created = s.renewedAt;
      await waitFor("a first renewal", () => s.renewedAt > created, 5000, 10);
      const aborted = abortedAt(s.signal);
      await coord.kill("SIGKILL");
      const at = await aborted;
      const last = s.renewedAt;
      assert.equal(s.ended?.kind, "expired", s.ended?.message);
      assert.ok(s.deadline < last + ttl, "the local deadline is before the coordinator's expiry");
      assert.ok(at >= s.deadline - 5, "not before the deadline");
      assert.ok(at - last <= ttl + TIMER_SLACK, `expired ${Math.round(at - last)}ms after the last renewal was sent (ttl ${ttl}ms)`);
      for (const l of held) assertEndedBySession(l, "expired", s);
    });

    it("a campaign in a session: the proclamation names it, the term ends with it", async () => {
      const coord = await startCoordinator({ store });
      const c = client(coord);
      const s = await c.session({ ttl: 900 });
      const election = uniq("sessions/election");
      const leader = await c.campaign(election, "v1", { session: s, wait: 5000 });
      assert.equal(leader.session, s);
      assert.equal(await sessionOf(c, election), s.id);
      await leader.proclaim("v2");
      assert.equal((await c.leader(election))?.valueText, "v2");
      assert.equal(await sessionOf(c, election), s.id, "still attached after the proclamation");
      const renewed = s.renewedAt;
      await waitFor("session renewals", () => s.renewedAt > renewed + 600, 10_000);
      assert.equal(leader.signal.aborted, false, leader.ended?.message);
      assert.equal((await c.leader(election))?.term, leader.term);
      await s.close();
      assertEndedBySession(leader, "released", s);
      assert.equal(await c.leader(election), undefined, "vacant once the session closed");
    });
  });
}

describe("the default session", { concurrency: true, timeout: 60_000 }, () => {
  it("is created by the first acquisition that attaches, one for all, and never by a Client that only observes", async () => {
    const coord = await startCoordinator({ metrics: true });
    const c = newClient({ address: coord.address });
    const name = uniq("default/a");
    await c.describe(name);
    assert.equal(await c.leader(uniq("default/e")), undefined);
    for await (const ev of c.observe(uniq("default/e"))) {
      assert.equal(ev.kind, "vacant");
      break;
    }
    const creates = () => metric(coord, "grpc_server_handled_total", { grpc_method: "CreateSession" });
    assert.equal(await creates(), 0, "no session before an acquisition");

    const [a, b, leader] = await Promise.all([
      c.tryLock(name),
      c.semaphore(uniq("default/sem"), 2).tryAcquire(1),
      c.campaign(uniq("default/el"), "x", { wait: 5000 }),
    ]);
    assert.ok(a && b);
    assert.equal(await creates(), 1, "one CreateSession for concurrent acquisitions");
    const s = await c.defaultSession();
    assert.equal(a.session, s);
    assert.equal(b.session, s);
    assert.equal(leader.session, s);
    assert.equal(s.ttl, 15_000, "the Client's ttl");
    assert.equal(await sessionOf(c, name), s.id);
    assert.equal(await c.defaultSession(), s, "the same while it lives");
  });

  it("an acquisition that finds it closed on the coordinator starts over on a new one", async () => {
    const coord = await startCoordinator();
    const c = newClient({ address: coord.address });
    const s = await c.defaultSession();
    await closeSessionBehindItsBack(coord.address, s.id); // its next renewal is 5 s away
    const lease = await c.tryLock(uniq("default/stale"));
    assert.ok(lease?.session);
    assert.notEqual(lease.session.id, s.id);
    assert.equal(s.ended?.kind, "lost");
    await assert.rejects(c.tryLock(uniq("default/explicit"), { session: s }), SessionEndedError);
  });
});

describe("sessions and the Client", { concurrency: true, timeout: 60_000 }, () => {
  it("close() closes the default and the explicit sessions, one CloseSession each and nothing else: their waiters are granted at once", async () => {
    const coord = await startCoordinator({ metrics: true });
    const c = newClient({ address: coord.address });
    const b = newClient({ address: coord.address });
    const implicit = await c.tryLock(uniq("client/close-a"));
    const s = await c.session({ ttl: 30_000 });
    const explicit = await c.tryLock(uniq("client/close-b"), { session: s });
    const share = await c.semaphore(uniq("client/close-sem"), 2).tryAcquire(2);
    assert.ok(implicit && explicit && share);
    const waiters = [
      b.lock(implicit.name, { wait: 20_000 }),
      b.lock(explicit.name, { wait: 20_000 }),
      b.semaphore(share.name, 2).acquire(1, { wait: 20_000 }),
    ];
    await waitFor("the waiters queued", async () => {
      const queued = await Promise.all([implicit.name, explicit.name, share.name].map(async (n) => (await b.describe(n)).waiters));
      return queued.every((w) => w === 1);
    });
    const closedAt = performance.now();
    await c.close();
    assert.equal(s.ended?.kind, "closed");
    assert.equal(implicit.ended?.kind, "closed");
    assert.equal(explicit.ended?.kind, "closed");
    await Promise.all(waiters);
    assert.ok(performance.now() - closedAt < 10_000, "granted at the close");
    assert.equal(await closeSessionCalls(coord), 2);
    assert.equal(share.ended?.kind, "closed");
    assert.equal(await releases(coord), 0, "no release of a single lease");
    assert.equal(await s.close(), false, "closed with its Client");
    await assert.rejects(c.session(), /client closed/);
  });

  it("a session is its credential's: another's attach and renewal are PermissionDenied; a Client takes only its own", async () => {
    const file = tempFile("access", "# credential  prefixes\nalice-token  *\nbob-token  *\n");
    const coord = await startCoordinator({ env: { COORDINATOR_ACCESS_FILE: file } });
    const alice = newClient({ address: coord.address, token: "alice-token", insecureToken: true });
    const bob = newClient({ address: coord.address, token: "bob-token", insecureToken: true });
    const s = await alice.session({ ttl: 5000 });
    const attach = await bob.api
      .tryAcquire({ name: uniq("cred/x"), holder: "bob#1", ttl: durationFromMs(5000), sessionId: s.id })
      .catch((e: unknown) => e);
    assert.ok(attach instanceof PermissionDeniedError, String(attach));
    const renew = await bob.api.renewSession({ sessionId: s.id }).catch((e: unknown) => e);
    assert.ok(renew instanceof CoordinatorError && renew.code === Code.PermissionDenied, String(renew));
    await assert.rejects(bob.tryLock(uniq("cred/y"), { session: s }), TypeError);
    assert.ok(await alice.tryLock(uniq("cred/z"), { session: s }));
    assert.equal(s.ended, undefined);
  });
});
