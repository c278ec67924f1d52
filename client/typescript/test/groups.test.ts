// Groups: several names granted all at once or not at all, against real
// coordinators on every store available; and, against a scripted operation
// stream, how an acquisition of a group retries and gives up what it may
// have been granted. Exclusion, a token per name, fair waiting and loss with
// the session are behaviour cases too (behaviour.test.ts).

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Acquirer } from "../src/acquire.js";
import type { CoordinatorApi } from "../src/api.js";
import { Code, CoordinatorError } from "../src/errors.js";
import {
  DescribeResponseSchema,
  StreamResponseSchema,
  StreamResultSchema,
  type StreamOperation,
  type StreamRequest,
  type StreamResponse,
  type StreamResult,
} from "../src/gen/coordinator/v1/coordinator_pb.js";
import { groupMembers } from "../src/group.js";
import { Sessions, type SessionContext } from "../src/session.js";
import { StreamBrokeError, StreamTransport } from "../src/stream.js";
import {
  Client,
  Group,
  GroupEndedError,
  MAX_GROUP_MEMBERS,
  NotAcquiredError,
  RW_CAPACITY,
  type Member,
} from "../src/index.js";
import { newClient, shutdown, sleep, startCoordinator, stores, uniq, usesStream, waitFor, type Coordinator } from "./helpers.js";

after(shutdown);

const rejection = <T>(p: Promise<T>): Promise<unknown> =>
  p.then(
    (v) => assert.fail(`resolved with ${String(v)}`),
    (e: unknown) => e,
  );

for (const store of stores()) {
  let coord: Coordinator;
  let a: Client;
  let b: Client;

  before(async () => {
    coord = await startCoordinator({ store });
    a = newClient({ address: coord.address });
    b = newClient({ address: coord.address });
  });

  describe(`groups (${store} store)`, { concurrency: true, timeout: 60_000 }, () => {
    it("grants every name at once, each with its own token, attached to the session as one; release gives them all up", async () => {
      const p = uniq("groups/grant");
      const names = [`${p}/z`, `${p}/x`, `${p}/y`];
      const earlier = await a.tryLock(names[1]!);
      assert.ok(earlier);
      await earlier.release();
      const session = await a.session();
      const g = await a.lockAll(names, { session, wait: 10_000 });
      assert.deepEqual(g.names, names, "in the order asked for");
      assert.ok(g.holder.startsWith(a.identity + "#"));
      assert.equal(g.session, session);
      assert.equal(session.size, 3, "a group counts as its leases");
      assert.ok(g.remaining() > 0);
      assert.ok(g.token(names[1]!) > earlier.token, "above the name's earlier grant");
      for (const l of g.leases) {
        const d = await b.describe(l.name);
        assert.equal(d.holder, g.holder, l.name);
        assert.equal(d.token, l.token, l.name);
        assert.equal(g.token(l.name), l.token);
        assert.equal(g.tokens.get(l.name), l.token);
        assert.equal(l.weight, 1);
      }
      assert.throws(() => g.token(`${p}/other`), TypeError);

      assert.equal(await g.release(), true);
      assert.ok(g.signal.aborted);
      assert.ok(g.ended instanceof GroupEndedError && g.ended.kind === "released", String(g.ended));
      assert.deepEqual(g.ended.names, names);
      assert.equal(session.size, 0);
      for (const n of names) assert.equal((await b.describe(n)).held, false, n);
      assert.equal(await g.release(), false, "a second release is a no-op");
      await session.close();
    });

    it("refuses a group while one of its names is held, naming it, its holder and when to retry; nothing of it is held", async () => {
      const p = uniq("groups/refuse");
      const held = await a.tryLock(`${p}/y`);
      assert.ok(held);
      assert.equal(await b.tryLockAll([`${p}/x`, `${p}/y`, `${p}/z`]), undefined);
      const err = await rejection(b.lockAll([`${p}/x`, `${p}/y`, `${p}/z`], { wait: 0 }));
      assert.ok(err instanceof NotAcquiredError, String(err));
      assert.equal(err.lockName, `${p}/y`);
      assert.equal(err.holder, held.holder);
      assert.ok(err.retryAfter !== undefined && err.retryAfter > 0, `retryAfter ${err.retryAfter}`);
      for (const n of ["x", "z"]) assert.equal((await a.describe(`${p}/${n}`)).held, false, n);
      await held.release();
    });

    it("waits for the whole group, queued on every name, and gives up after wait naming the name in the way", async () => {
      const p = uniq("groups/wait");
      const held = await a.tryLock(`${p}/x`);
      assert.ok(held);
      const start = performance.now();
      const err = await rejection(b.lockAll([`${p}/y`, `${p}/x`], { wait: 500 }));
      assert.ok(performance.now() - start >= 400, "waited");
      assert.ok(err instanceof NotAcquiredError, String(err));
      assert.equal(err.lockName, `${p}/x`);
      assert.equal(err.holder, held.holder);
      await waitFor("the timed-out group to leave the queues", async () => (await a.describe(`${p}/y`)).waiters === 0);

      const waiting = b.lockAll([`${p}/y`, `${p}/x`], { wait: 30_000 });
      await waitFor("the group to queue", async () => (await a.describe(`${p}/x`)).waiters === 1);
      assert.equal((await a.describe(`${p}/y`)).waiters, 1, "queued on its free name too");
      assert.equal(await a.tryLock(`${p}/y`), undefined, "a later lock of its free name waits behind it");
      await held.release();
      const g = await waiting;
      assert.ok(g.token(`${p}/x`) > held.token);
      await g.release();
    });

    it("a cancelled wait leaves the queue of every name at once and holds nothing", async () => {
      const p = uniq("groups/cancel");
      const held = await a.tryLock(`${p}/x`);
      assert.ok(held);
      const ac = new AbortController();
      const waiting = rejection(b.lockAll([`${p}/x`, `${p}/y`], { signal: ac.signal }));
      await waitFor("the group to queue", async () => (await a.describe(`${p}/y`)).waiters === 1);
      ac.abort(new Error("changed my mind"));
      const err = await waiting;
      assert.ok(err instanceof NotAcquiredError, String(err));
      for (const n of ["x", "y"]) {
        await waitFor(`the group to leave ${n}'s queue`, async () => (await a.describe(`${p}/${n}`)).waiters === 0);
      }
      assert.equal((await a.describe(`${p}/y`)).held, false);
      assert.equal((await a.describe(`${p}/x`)).holder, held.holder);
      await held.release();
      const l = await a.tryLock(`${p}/y`);
      assert.ok(l, "nothing was granted to the cancelled group");
      await l.release();
    });

    it("groups listing the same names in opposite orders never deadlock, and never hold a name together", async () => {
      const p = uniq("groups/order");
      const names = [`${p}/a`, `${p}/b`, `${p}/c`];
      let holding = 0;
      let most = 0;
      const worker = async (c: Client, order: string[]): Promise<number> => {
        let last = 0n;
        for (let i = 0; i < 15; i++) {
          const g = await c.lockAll(order, { wait: 20_000 });
          holding++;
          most = Math.max(most, holding);
          assert.ok(g.token(names[0]!) > last, "tokens rise");
          last = g.token(names[0]!);
          await sleep(1);
          holding--;
          await g.release();
        }
        return 15;
      };
      const done = await Promise.all([
        worker(a, names),
        worker(b, [...names].reverse()),
        worker(a, [names[1]!, names[0]!, names[2]!]),
        worker(b, [names[2]!, names[0]!, names[1]!]),
      ]);
      assert.deepEqual(done, [15, 15, 15, 15]);
      assert.equal(most, 1, "one group at a time");
    });

    it("acquireAll holds semaphore shares, a read lock and a lock together, each with the weight asked for", async () => {
      const p = uniq("groups/shares");
      const members: Member[] = [
        { name: `${p}/sem`, capacity: 3, weight: 2 },
        { name: `${p}/rw`, capacity: RW_CAPACITY, weight: 1 },
        { name: `${p}/lock` },
      ];
      const g = await a.acquireAll(members, { wait: 10_000 });
      assert.deepEqual(
        g.leases.map((l) => l.weight),
        [2, 1, 1],
      );
      const sem = b.semaphore(`${p}/sem`, 3);
      assert.equal(await sem.tryAcquire(2), undefined, "2 of 3 are the group's");
      const one = await sem.tryAcquire(1);
      assert.ok(one);
      const reader = await b.rwlock(`${p}/rw`).tryReadLock();
      assert.ok(reader, "readers share with the group's read lock");
      assert.equal(await b.rwlock(`${p}/rw`).tryWriteLock(), undefined, "a writer does not");
      assert.equal(await b.tryAcquireAll([{ name: `${p}/sem`, capacity: 3, weight: 1 }, { name: `${p}/free` }]), undefined, "the semaphore is full");
      assert.equal((await b.describe(`${p}/free`)).held, false);
      assert.equal(await g.release(), true);
      const d = await b.describe(`${p}/sem`);
      assert.deepEqual(
        d.holders.map((h) => h.weight),
        [1],
      );
      await Promise.all([one.release(), reader.release()]);
    });

    it("in a session of its own: it ends with the session, whose close releases every name", async () => {
      const p = uniq("groups/session");
      const session = await a.session();
      const g = await a.lockAll([`${p}/x`, `${p}/y`], { session, wait: 10_000 });
      const waiter = b.lockAll([`${p}/y`], { wait: 30_000 });
      await waitFor("the waiter to queue", async () => (await b.describe(`${p}/y`)).waiters === 1);
      assert.equal(await session.close(), true);
      assert.ok(g.ended instanceof GroupEndedError && g.ended.kind === "released", String(g.ended));
      const next = await waiter;
      assert.ok(next.token(`${p}/y`) > g.token(`${p}/y`));
      assert.equal(await g.release(), false, "ended with its session");
      await next.release();
    });
  });
}

describe("group arguments", () => {
  it("are refused by the client, as the coordinator would refuse them, before anything is sent", async () => {
    const c = newClient({ address: "127.0.0.1:1" });
    const cases: [string, Promise<unknown>][] = [
      ["no names", c.lockAll([])],
      ["a name twice", c.tryLockAll(["q", "r", "q"])],
      ["too many names", c.lockAll(Array.from({ length: MAX_GROUP_MEMBERS + 1 }, (_, i) => `n${i}`))],
      ["a weight out of range", c.acquireAll([{ name: "s", capacity: 2, weight: -1 }])],
      ["a capacity that is not an integer", c.tryAcquireAll([{ name: "s", capacity: 1.5 }])],
    ];
    for (const [what, p] of cases) {
      const err = await rejection(p);
      assert.ok(err instanceof TypeError, `${what}: ${String(err)}`);
    }
    assert.equal(usesStream(c), false, "nothing was sent");
    assert.equal(MAX_GROUP_MEMBERS, 32);
    assert.deepEqual(groupMembers([{ name: "a" }, { name: "b", capacity: 4, weight: 2 }]), [
      { name: "a", capacity: 0, weight: 0 },
      { name: "b", capacity: 4, weight: 2 },
    ]);
  });
});

/** What a scripted operation is answered with. */
type Result = MessageInitShape<typeof StreamResultSchema>["result"];

/**
 * A scripted coordinator: its operation stream hands every operation to
 * handle, which answers it (now or later) with reply, or breaks the stream
 * with an error; createSession, closeSession and describe are answered
 * too.
 */
class Scripted {
  readonly ops: StreamOperation[] = [];
  streams = 0;
  describes: (name: string) => { holder: string; token: bigint }[] = () => [];

  constructor(readonly handle: (op: StreamOperation, reply: (result: Result) => void, breakStream: (e: Error) => void) => void) {}

  api(): CoordinatorApi {
    return {
      createSession: () => Promise.resolve({ session: { id: "s1", ttl: durationFromMs(60_000) } }),
      closeSession: () => Promise.resolve({}),
      describe: (req: { name: string }) => {
        const holders = this.describes(req.name);
        return Promise.resolve(create(DescribeResponseSchema, { held: holders.length > 0, holders, capacity: 1 }));
      },
      stream: (reqs: AsyncIterable<StreamRequest>) => this.serve(reqs),
    } as unknown as CoordinatorApi;
  }

  /** waitOp waits for the n-th operation (from 1) of case kind. */
  async waitOp(kind: StreamOperation["operation"]["case"], n = 1): Promise<StreamOperation> {
    let found: StreamOperation | undefined;
    await waitFor(`operation ${n} of ${kind}`, () => (found = this.ops.filter((o) => o.operation.case === kind)[n - 1]) !== undefined, 5000, 5);
    return found!;
  }

  private async *serve(reqs: AsyncIterable<StreamRequest>): AsyncGenerator<StreamResponse> {
    this.streams++;
    const it = reqs[Symbol.asyncIterator]();
    const outbox: StreamResult[] = [];
    let broken: Error | undefined;
    let wake = (): void => undefined;
    let next = it.next();
    for (;;) {
      if (broken) throw broken;
      if (outbox.length > 0) yield create(StreamResponseSchema, { results: outbox.splice(0) });
      const woken = new Promise<"woken">((r) => (wake = () => r("woken")));
      const got = await Promise.race([next, woken]);
      if (got === "woken") continue;
      if (got.done) return;
      next = it.next();
      for (const op of got.value.operations) {
        this.ops.push(op);
        this.handle(
          op,
          (result) => {
            outbox.push(create(StreamResultSchema, { id: op.id, result }));
            wake();
          },
          (e) => {
            broken = e;
            wake();
          },
        );
      }
    }
  }
}

/** acquirerOf runs an Acquirer (identity "t") over the scripted coordinator; stop ends it. */
function acquirerOf(s: Scripted): { acquirer: Acquirer; warnings: string[]; stop: () => Promise<void> } {
  const closing = new AbortController();
  const warnings: string[] = [];
  const api = s.api();
  const warn = (m: string): void => void warnings.push(m);
  const ctx: SessionContext = { api, transport: new StreamTransport(api, closing.signal, warn), closing: closing.signal, callTimeoutMs: 5000, warn };
  const sessions = new Sessions(ctx, 60_000);
  return {
    acquirer: new Acquirer(ctx, sessions, "t"),
    warnings,
    stop: async () => {
      await sessions.closeAll(undefined);
      ctx.transport.close();
      closing.abort();
    },
  };
}

const members = groupMembers([{ name: "x" }, { name: "y" }]);

const grantedGroup = (holder: string): Result => ({
  case: "acquireGroup",
  value: { acquired: true, leases: members.map((m, i) => ({ name: m.name, holder, token: BigInt(10 + i), weight: 1 })) },
});

const released: Result = { case: "releaseGroup", value: { released: true } };

describe("group acquisition over the operation stream", { concurrency: true, timeout: 30_000 }, () => {
  it("a wait broken by the stream is asked again as the same holder, which finds its grant", async () => {
    const s = new Scripted((op, reply, breakStream) => {
      if (op.operation.case === "acquireGroup") {
        if (s.streams === 1) breakStream(new CoordinatorError("coordinator: Unavailable: connection reset", { code: Code.Unavailable }));
        else reply(grantedGroup(op.operation.value.holder));
      }
    });
    const { acquirer, warnings, stop } = acquirerOf(s);
    try {
      const g = await acquirer.group(members, { wait: 10_000 });
      const asks = s.ops.filter((o) => o.operation.case === "acquireGroup").map((o) => (o.operation.value as { holder: string }).holder);
      assert.deepEqual(asks, [g.holder, g.holder], "asked twice, as one holder");
      assert.deepEqual([...g.tokens], [
        ["x", 10n],
        ["y", 11n],
      ]);
      assert.ok(warnings.some((w) => w.includes('acquiring group "x", "y" failed; retrying')), warnings.join("\n"));
    } finally {
      await stop();
    }
  });

  it("a group granted after its caller gave up is cancelled, then released at once", async () => {
    let answer: (() => void) | undefined;
    const s = new Scripted((op, reply) => {
      if (op.operation.case === "acquireGroup") {
        const holder = op.operation.value.holder;
        answer = () => reply(grantedGroup(holder));
      } else if (op.operation.case === "releaseGroup") {
        reply(released);
      }
    });
    const { acquirer, stop } = acquirerOf(s);
    try {
      const ac = new AbortController();
      const waiting = rejection(acquirer.group(members, { wait: 10_000, signal: ac.signal }));
      const asked = await s.waitOp("acquireGroup");
      ac.abort(new Error("gave up"));
      assert.ok((await waiting) instanceof NotAcquiredError);
      const cancel = await s.waitOp("cancel");
      assert.equal(cancel.operation.value, asked.id, "the wait is cancelled on the coordinator");
      answer!(); // the grant crossed the cancel
      const release = await s.waitOp("releaseGroup");
      const req = release.operation.value as { holder: string; leases: { name: string; token: bigint }[] };
      assert.equal(req.holder, (asked.operation.value as { holder: string }).holder);
      assert.deepEqual(
        req.leases.map((l) => [l.name, l.token]),
        [
          ["x", 10n],
          ["y", 11n],
        ],
      );
    } finally {
      await stop();
    }
  });

  it("an acquisition whose outcome is unknown releases what its holder holds of the group, as Describe reports it", async () => {
    let holder = "";
    const s = new Scripted((op, reply, breakStream) => {
      if (op.operation.case === "acquireGroup") {
        holder = op.operation.value.holder;
        breakStream(new CoordinatorError("coordinator: Unavailable: connection reset", { code: Code.Unavailable }));
      } else if (op.operation.case === "releaseGroup") {
        reply(released);
      }
    });
    // Granted x, not y, before the stream broke: as a group waiting across
    // Redis Cluster slots holds its lower slots' names.
    s.describes = (name) => (name === "x" ? [{ holder, token: 7n }] : [{ holder: "someone else", token: 3n }]);
    const { acquirer, stop } = acquirerOf(s);
    try {
      const err = await rejection(acquirer.group(members, { wait: 0 }));
      assert.ok(err instanceof StreamBrokeError, String(err));
      const release = await s.waitOp("releaseGroup");
      const req = release.operation.value as { holder: string; leases: { name: string; token: bigint }[] };
      assert.equal(req.holder, holder);
      assert.deepEqual(
        req.leases.map((l) => [l.name, l.token]),
        [["x", 7n]],
      );
    } finally {
      await stop();
    }
  });

  it("a group ends with its session, every lease at once, as lost when the coordinator refused the session", async () => {
    const s = new Scripted((op, reply) => {
      if (op.operation.case === "acquireGroup") reply(grantedGroup(op.operation.value.holder));
    });
    const { acquirer, stop } = acquirerOf(s);
    try {
      const g = await acquirer.group(members, { wait: 0 });
      assert.ok(g instanceof Group);
      g.session.lose(new Error("SESSION_EXPIRED"));
      assert.ok(g.signal.aborted);
      const why = g.ended;
      assert.ok(why instanceof GroupEndedError && why.kind === "lost", String(why));
      assert.deepEqual([...why.tokens], [
        ["x", 10n],
        ["y", 11n],
      ]);
      assert.match(why.message, /^coordinator: group "x" \(token 10\), "y" \(token 11\) lost: its session s1 ended/);
    } finally {
      await stop();
    }
  });
});
