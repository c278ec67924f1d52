// The language-neutral behaviour cases of client/testdata/behaviour.json,
// which the Go SDK and the Python client run too, interpreted step by step
// against a real coordinator on every store available. A step this
// interpreter does not know fails its case.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CodeSchema } from "../src/gen/google/rpc/code_pb.js";
import { Client, Code, CoordinatorError, Group, Leadership, Lease, type Member } from "../src/index.js";
import { isTransient, outcomeUnknown } from "../src/errors.js";
import { leaderBackoff, runAsLeader } from "../src/leader.js";
import { callBackoff, type Backoff } from "../src/util.js";
import { closeSessionBehindItsBack, repoRoot, shutdown, startCoordinator, stores, uniq, type Coordinator } from "./helpers.js";

after(shutdown);

interface Step {
  do: string;
  [field: string]: unknown;
}

interface Case {
  name: string;
  steps: Step[];
}

const { cases } = JSON.parse(readFileSync(join(repoRoot(), "client", "testdata", "behaviour.json"), "utf8")) as { cases: Case[] };

/** How long lock and campaign wait (the doc's 10 s). */
const WAIT_MS = 10_000;

/** How long start_lock_all waits for its group to be queued (the doc's 5 s). */
const QUEUED_MS = 5000;

/** Grant is what a step may hold: a lease (a lock or a share), a leadership or a group. */
type Grant = Lease | Leadership | Group;

/** Run holds the state of one case: its clients and grants, its name prefix. */
class Run {
  private readonly clients = new Map<string, Client>();
  private readonly grants = new Map<string, Grant>();
  /** The acquisitions start_lock_all started, by their 'as'. */
  private readonly pending = new Map<string, Promise<Group>>();
  /** Describes and lists: a client that holds nothing, so makes no session. */
  private reader: Client | undefined;
  private readonly prefix = uniq("behaviour");

  constructor(private readonly coord: Coordinator | undefined) {}

  async step(s: Step): Promise<void> {
    switch (s.do) {
      case "connect":
        this.clients.set(str(s, "client"), new Client({ address: this.address(), ...(s.ttl_ms ? { ttl: num(s, "ttl_ms") } : {}) }));
        return;
      case "lock":
        this.hold(s, await this.client(s).lock(this.name(s), { wait: WAIT_MS }));
        return;
      case "try_lock":
        return this.tried(s, this.client(s).tryLock(this.name(s)));
      case "acquire":
        return this.tried(s, this.client(s).semaphore(this.name(s), num(s, "capacity")).tryAcquire(num(s, "weight")));
      case "read_lock":
        return this.tried(s, this.client(s).rwlock(this.name(s)).tryReadLock());
      case "write_lock":
        return this.tried(s, this.client(s).rwlock(this.name(s)).tryWriteLock());
      case "lock_all":
        this.hold(s, await this.client(s).lockAll(this.names(s), { wait: WAIT_MS }));
        return;
      case "try_lock_all":
        return this.tried(s, this.client(s).tryLockAll(this.names(s)));
      case "acquire_all": {
        const members = (s["members"] as Member[]).map((m) => ({ ...m, name: `${this.prefix}/${m.name}` }));
        return this.tried(s, this.client(s).tryAcquireAll(members));
      }
      case "start_lock_all": {
        const names = this.names(s);
        const started = this.client(s).lockAll(names, { wait: WAIT_MS });
        started.catch(() => undefined); // await reports it
        this.pending.set(str(s, "as"), started);
        const end = performance.now() + QUEUED_MS;
        while ((await this.read().describe(names[0]!)).waiters === 0) {
          assert.ok(performance.now() < end, `the group was not queued on ${names[0]} within ${QUEUED_MS}ms`);
          await new Promise((r) => setTimeout(r, 20));
        }
        return;
      }
      case "await": {
        const started = this.pending.get(str(s, "as"));
        assert.ok(started, `nothing started as ${str(s, "as")}`);
        const within = num(s, "within_ms");
        let timer: ReturnType<typeof setTimeout> | undefined;
        const late = new Promise<undefined>((r) => (timer = setTimeout(r, within, undefined)));
        const g = await Promise.race([started, late]).finally(() => clearTimeout(timer));
        assert.ok(g, `${str(s, "as")} not granted within ${within}ms`);
        this.hold(s, g);
        return;
      }
      case "release": {
        const g = this.grant(s, "lease");
        const released = g instanceof Leadership ? await g.resign() : await g.release();
        assert.equal(released ? "released" : "noop", str(s, "expect"), `release of ${str(s, "lease")}`);
        return;
      }
      case "resign":
        assert.equal(await (this.grant(s, "lease") as Leadership).resign(), true, "resigned");
        return;
      case "end_session": {
        const session = await this.client(s).defaultSession();
        await closeSessionBehindItsBack(this.address(), session.id);
        return;
      }
      case "expect_lost": {
        const g = this.grant(s, "lease");
        const within = num(s, "within_ms");
        const aborted = new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(false), within);
          g.signal.addEventListener("abort", () => (clearTimeout(timer), resolve(true)), { once: true });
          if (g.signal.aborted) resolve(true);
        });
        assert.ok(await aborted, `${str(s, "lease")} not reported lost within ${within}ms`);
        assert.ok(g.ended?.kind === "lost" || g.ended?.kind === "expired", `ended as ${g.ended?.kind}: ${g.ended?.message}`);
        return;
      }
      case "expect_held": {
        const g = this.grant(s, "lease");
        assert.equal(g.signal.aborted, false, g.ended?.message);
        assert.ok(g.remaining() > 0, "valid");
        return;
      }
      case "expect_token":
        assert.ok(this.token(s, "lease") > this.token(s, "above"), `${str(s, "lease")}'s token above ${str(s, "above")}'s`);
        return;
      case "expect_same_session": {
        const names = s["leases"] as string[];
        const sessions = new Set(names.map((n) => this.grants.get(n)?.session));
        assert.equal(sessions.size, 1, `${names.join(", ")} in one session`);
        const [session] = sessions;
        assert.ok(session && session.id !== "" && session.size >= names.length, `the session holds them: ${String(session)}`);
        return;
      }
      case "describe": {
        const want = s["expect"] as { holders: number; waiters?: number };
        const d = await this.read().describe(this.name(s));
        assert.equal(d.holders.length, want.holders, "holders");
        if (want.waiters !== undefined) assert.equal(d.waiters, want.waiters, "waiters");
        return;
      }
      case "list": {
        let count = 0;
        for await (const l of this.read().list(`${this.prefix}/${str(s, "prefix_of")}`, { pageSize: 1 })) {
          assert.ok(l.name.startsWith(this.prefix), l.name);
          count++;
        }
        assert.equal(count, (s["expect"] as { count: number }).count, "listed");
        return;
      }
      case "campaign":
        this.hold(s, await this.client(s).campaign(this.name(s, "election"), str(s, "value"), { wait: WAIT_MS }));
        return;
      case "leader": {
        const want = s["expect"] as { value?: string; vacant?: boolean };
        const leader = await this.client(s).leader(this.name(s, "election"));
        if (want.vacant) assert.equal(leader, undefined, `vacant, not led by ${leader?.candidate}`);
        else assert.equal(leader?.valueText, want.value);
        return;
      }
      case "close":
        await this.client(s).close();
        return;
      case "classify": {
        const code = CodeSchema.values.find((v) => v.name === str(s, "code"));
        assert.ok(code, `no google.rpc.Code ${str(s, "code")}`);
        const err = new CoordinatorError(`coordinator: ${code.name}`, { code: code.number });
        const want = s["expect"] as { transient: boolean; outcome_unknown: boolean };
        assert.deepEqual({ transient: isTransient(err), outcome_unknown: outcomeUnknown(err) }, want, code.name);
        return;
      }
      case "backoff":
        return backoffWithin(s);
      case "leader_campaigns_again":
        assert.equal(await campaignsAgain(), s["expect"]);
        return;
      default:
        assert.fail(`unknown step ${JSON.stringify(s.do)}`);
    }
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.clients.values(), ...(this.reader ? [this.reader] : [])].map((c) => c.close()));
  }

  private address(): string {
    assert.ok(this.coord, "a step that needs a coordinator");
    return this.coord.address;
  }

  private client(s: Step): Client {
    const c = this.clients.get(str(s, "client"));
    assert.ok(c, `no client ${str(s, "client")} connected`);
    return c;
  }

  private read(): Client {
    this.reader ??= new Client({ address: this.address() });
    return this.reader;
  }

  private name(s: Step, field = "name"): string {
    return `${this.prefix}/${str(s, field)}`;
  }

  /** names are the step's names, prefixed. */
  private names(s: Step): string[] {
    const v = s["names"];
    assert.ok(Array.isArray(v) && v.every((n) => typeof n === "string"), `${s.do} needs a list of names`);
    return v.map((n: string) => `${this.prefix}/${n}`);
  }

  /** token is the fencing token of the grant the field names: a lease, a leadership, or "<as>.<name>", a group's member. */
  private token(s: Step, field: string): bigint {
    const ref = str(s, field);
    const g = this.grants.get(ref);
    if (g !== undefined) {
      assert.ok(!(g instanceof Group), `${ref} is a group: name one of its members as ${ref}.<name>`);
      return g instanceof Leadership ? g.term : g.token;
    }
    const dot = ref.indexOf(".");
    const group = dot < 0 ? undefined : this.grants.get(ref.slice(0, dot));
    assert.ok(group instanceof Group, `no grant ${ref}`);
    return group.token(`${this.prefix}/${ref.slice(dot + 1)}`);
  }

  private grant(s: Step, field: string): Grant {
    const g = this.grants.get(str(s, field));
    assert.ok(g, `no grant ${str(s, field)}`);
    return g;
  }

  private hold(s: Step, g: Grant): void {
    if (s["as"] !== undefined) this.grants.set(str(s, "as"), g);
  }

  /**
   * tried checks a one-try acquisition against expect (default granted):
   * 'invalid_argument' is the coordinator's InvalidArgument, or the
   * client's own refusal (a TypeError) of the call.
   */
  private async tried(s: Step, attempt: Promise<Lease | Group | undefined>): Promise<void> {
    let got: Lease | Group | undefined;
    try {
      got = await attempt;
    } catch (e) {
      const invalid = e instanceof TypeError || (e instanceof CoordinatorError && e.code === Code.InvalidArgument);
      if (!invalid) throw e;
      assert.equal("invalid_argument", s["expect"] ?? "granted", `${s.do}: ${e.message}`);
      return;
    }
    assert.equal(got ? "granted" : "not_acquired", s["expect"] ?? "granted", s.do);
    if (got) this.hold(s, got);
  }
}

function str(s: Step, field: string): string {
  const v = s[field];
  assert.equal(typeof v, "string", `${s.do} needs a string ${field}`);
  return v as string;
}

function num(s: Step, field: string): number {
  const v = s[field];
  assert.equal(typeof v, "number", `${s.do} needs a number ${field}`);
  return v as number;
}

/** backoffWithin checks that every delay of the schedule lies in its [min, max], over many schedules (the jitter is random). */
function backoffWithin(s: Step): void {
  const schedules: Record<string, () => Backoff> = { retry: callBackoff, leader: leaderBackoff };
  const make = schedules[str(s, "schedule")];
  assert.ok(make, `unknown schedule ${str(s, "schedule")}`);
  const want = s["expect_ms"] as [number, number][];
  assert.equal(want.length, num(s, "attempts"));
  for (let run = 0; run < 500; run++) {
    const b = make();
    want.forEach(([min, max], i) => {
      const d = b.delay();
      assert.ok(d >= min && d <= max, `attempt ${i + 1} of the ${str(s, "schedule")} schedule: ${d}ms, not within [${min}, ${max}]`);
    });
  }
}

/**
 * campaignsAgain runs runAsLeader with a campaign that is elected at once
 * and a function that returns at once, and reports whether it campaigned a
 * second time (then stopped) rather than returning after the first term.
 */
async function campaignsAgain(): Promise<boolean> {
  const stop = new AbortController();
  let campaigns = 0;
  const term = (): Leadership =>
    ({ signal: new AbortController().signal, ended: undefined, resign: () => Promise.resolve(true) }) as unknown as Leadership;
  await runAsLeader(
    () => {
      if (++campaigns === 2) stop.abort();
      return Promise.resolve(term());
    },
    () => undefined,
    undefined,
    stop.signal,
  );
  return campaigns >= 2;
}

const needsCoordinator = (c: Case): boolean => c.steps.some((s) => s.do === "connect");

for (const store of stores()) {
  describe(`behaviour cases (${store} store)`, { concurrency: true, timeout: 60_000 }, () => {
    let coord: Coordinator;
    before(async () => {
      coord = await startCoordinator({ store });
    });
    for (const c of cases) {
      if (!needsCoordinator(c) && store !== "memory") continue; // no coordinator involved: once is enough
      it(c.name, async () => {
        const run = new Run(needsCoordinator(c) ? coord : undefined);
        try {
          for (const [i, s] of c.steps.entries()) {
            try {
              await run.step(s);
            } catch (e) {
              if (e instanceof Error) e.message = `step ${i + 1} (${JSON.stringify(s)}): ${e.message}`;
              throw e;
            }
          }
        } finally {
          await run.close();
        }
      });
    }
  });
}
