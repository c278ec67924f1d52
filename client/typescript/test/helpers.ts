// Test helpers: build the coordinator once, start real coordinator (and
// redis-server) processes on free loopback ports, poll with deadlines.

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { accessSync, constants, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { connect } from "../src/api.js";
import { Client, type ClientOptions } from "../src/index.js";

const cleanups: (() => void)[] = [];
const closers: (() => Promise<void>)[] = [];
const clients: Client[] = [];

/**
 * shutdown closes every client and stops every process the helpers started
 * so far: call it in an after() hook, so that the test file's process can
 * exit.
 */
export async function shutdown(): Promise<void> {
  await Promise.allSettled(clients.splice(0).map((c) => c.close()));
  await Promise.allSettled(closers.splice(0).map((c) => c()));
}

process.on("exit", () => {
  for (const c of cleanups.reverse()) {
    try {
      c();
    } catch {
      // best effort
    }
  }
});

/** A fresh temporary directory, removed when the process exits; in base (default: the OS's). */
export function tempDir(prefix = "coordinator-ts-", base = tmpdir()): string {
  const d = mkdtempSync(join(base, prefix));
  cleanups.push(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

/** The repository root: the directory above this file whose go.mod is the coordinator's module. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const mod = join(dir, "go.mod");
    if (existsSync(mod) && readFileSync(mod, "utf8").includes("module github.com/coordinator-dev/coordinator\n")) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error("cannot find the coordinator's go.mod above " + fileURLToPath(import.meta.url));
    dir = up;
  }
}

/** fastDir is /dev/shm when writable (tmpfs), else the OS's temporary directory. */
function fastDir(): string {
  try {
    accessSync("/dev/shm", constants.W_OK);
    return "/dev/shm";
  } catch {
    return tmpdir();
  }
}

let binary: string | undefined;

/**
 * The coordinator binary: $COORDINATOR_TEST_BINARY (scripts/run-tests.mjs
 * builds it once for every test file), else built here with go build.
 */
export function coordinatorBinary(): string {
  if (binary) return binary;
  const given = process.env["COORDINATOR_TEST_BINARY"];
  if (given) return (binary = given);
  const out = join(tempDir("coordinator-bin-"), "coordinator");
  const r = spawnSync("go", ["build", "-o", out, "./cmd/coordinator"], { cwd: repoRoot(), stdio: ["ignore", "inherit", "inherit"] });
  if (r.status !== 0) throw new Error(`go build ./cmd/coordinator failed (${r.status ?? r.signal})`);
  return (binary = out);
}

/** A port nothing listens on now (the kernel's pick). */
export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      s.close(() => (typeof addr === "object" && addr ? res(addr.port) : rej(new Error("no port"))));
    });
  });
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((res) => {
    const sock = createConnection({ host: "127.0.0.1", port });
    const done = (ok: boolean): void => {
      sock.destroy();
      res(ok);
    };
    sock.once("connect", () => done(true));
    sock.once("error", () => done(false));
    sock.setTimeout(1000, () => done(false));
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** waitFor polls cond every interval ms until it holds, or throws after timeout ms. */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeout = 15_000, interval = 25): Promise<void> {
  const end = performance.now() + timeout;
  for (;;) {
    if (await cond()) return;
    if (performance.now() > end) throw new Error(`timed out after ${timeout}ms waiting for ${what}`);
    await sleep(interval);
  }
}

/** A name unique to this run. */
export function uniq(prefix: string): string {
  return `${prefix}/${process.pid}-${randomBytes(4).toString("hex")}`;
}

export type StoreKind = "memory" | "redis";

/**
 * skipUnlessCI skips the test for want of a tool, except in CI (CI set),
 * where .ci/run installs the tools: there a missing one fails instead.
 */
export function skipUnlessCI(t: { skip(message?: string): void }, reason: string): void {
  if (process.env["CI"]) throw new Error(`${reason}, in CI`);
  t.skip(reason);
}

/**
 * The stores to test on: memory always, Redis when COORDINATOR_TEST_REDIS_URL
 * is set. In CI (CI set), where make test starts a Redis, its absence fails
 * rather than leaving the Redis tests out unseen.
 */
export function stores(): StoreKind[] {
  if (process.env["COORDINATOR_TEST_REDIS_URL"]) return ["memory", "redis"];
  if (process.env["CI"]) throw new Error("COORDINATOR_TEST_REDIS_URL is not set in CI: run the tests under scripts/with-redis.sh");
  return ["memory"];
}

/** usesStream reports whether c has its operation stream open now (white-box: checks the transport). */
export function usesStream(c: Client): boolean {
  return (c as unknown as { ctx: { transport: { open: boolean } } }).ctx.transport.open;
}

/**
 * closeSessionBehindItsBack closes session id over a connection of its own,
 * as an operator (or an expiry) would: the Client that holds it learns of
 * it only from its next renewal.
 */
export async function closeSessionBehindItsBack(address: string, sessionId: string, token?: string): Promise<void> {
  const raw = connect(`http://${address}`, undefined, token);
  try {
    await raw.api.closeSession({ sessionId });
  } finally {
    raw.close();
  }
}

export interface Coordinator {
  address: string;
  port: number;
  /** The /metrics address ("127.0.0.1:port") when started with metrics. */
  metricsAddress: string | undefined;
  proc: ChildProcess;
  /** What the coordinator logged so far. */
  log(): string;
  /** kill sends sig and waits for the process to exit. */
  kill(sig?: NodeJS.Signals): Promise<void>;
}

export interface StartOptions {
  store?: StoreKind;
  /** Redis URL (default $COORDINATOR_TEST_REDIS_URL). */
  redisUrl?: string;
  /** Start the Redis store as new (COORDINATOR_REDIS_NEW_STORE=true). Default true. */
  newStore?: boolean;
  /** Serve /metrics on a free loopback port (see metric). */
  metrics?: boolean;
  env?: Record<string, string>;
}

/**
 * startCoordinator starts a coordinator on a free loopback port and waits
 * until it accepts connections. It is killed when the process exits.
 */
export async function startCoordinator(opts: StartOptions = {}): Promise<Coordinator> {
  const bin = coordinatorBinary();
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    let metricsPort = opts.metrics ? await freePort() : 0;
    while (metricsPort === port) metricsPort = await freePort();
    const metricsAddress = opts.metrics ? `127.0.0.1:${metricsPort}` : undefined;
    const env: Record<string, string> = {
      PATH: process.env["PATH"] ?? "/usr/bin:/bin",
      COORDINATOR_LISTEN: `127.0.0.1:${port}`,
      COORDINATOR_METRICS_LISTEN: metricsAddress ?? "",
      // On tmpfs when there is one: the memory store fsyncs its state, which
      // a busy disk would turn into slow grants and renewals.
      COORDINATOR_STATE_DIR: join(tempDir("coordinator-state-", fastDir()), "state"),
      COORDINATOR_STORE: opts.store ?? "memory",
      COORDINATOR_LOG_LEVEL: "debug",
    };
    if (opts.store === "redis") {
      const url = opts.redisUrl ?? process.env["COORDINATOR_TEST_REDIS_URL"];
      if (!url) throw new Error("a Redis coordinator needs COORDINATOR_TEST_REDIS_URL");
      env["COORDINATOR_REDIS_URL"] = url;
      env["COORDINATOR_REDIS_KEY_PREFIX"] = `tstest-${process.pid}-${randomBytes(6).toString("hex")}`;
      if (opts.newStore ?? true) env["COORDINATOR_REDIS_NEW_STORE"] = "true";
    }
    Object.assign(env, opts.env ?? {});
    const child = spawnListening(bin, [], env, port, 20_000);
    if (await child.listening) {
      return { address: `127.0.0.1:${port}`, port, metricsAddress, proc: child.proc, log: child.log, kill: child.kill };
    }
    await child.kill("SIGKILL");
    if (attempt >= 3 || !child.log().includes("address already in use")) {
      throw new Error(`the coordinator did not start:\n${child.log()}`);
    }
  }
}

/**
 * metric sums the samples of name on coord's /metrics whose labels include
 * every one of labels (e.g. {grpc_method: "RenewSession"}); 0 when none.
 */
export async function metric(coord: Coordinator, name: string, labels: Record<string, string> = {}): Promise<number> {
  if (!coord.metricsAddress) throw new Error("the coordinator was started without metrics");
  const resp = await fetch(`http://${coord.metricsAddress}/metrics`);
  const text = await resp.text();
  let sum = 0;
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = new Map([...(m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1]!, l[2]!]));
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) sum += Number(m[3]);
  }
  return sum;
}

/** A child process started by spawnListening. */
interface ListeningChild {
  proc: ChildProcess;
  /** Resolves true once the child accepts connections on its port, false when it exited or timed out. */
  listening: Promise<boolean>;
  /** What the child wrote to stdout and stderr so far. */
  log: () => string;
  /** kill sends sig (SIGTERM by default) unless the child has exited, and waits for its exit. */
  kill: (sig?: NodeJS.Signals) => Promise<void>;
}

/**
 * spawnListening starts a server process that should listen on port, kills
 * it when the test process ends, and waits up to timeoutMs for it to accept
 * connections.
 */
function spawnListening(
  cmd: string,
  args: string[],
  env: Record<string, string> | undefined,
  port: number,
  timeoutMs: number,
): ListeningChild {
  let out = "";
  const proc = spawn(cmd, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  proc.stdout.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr.on("data", (d: Buffer) => (out += d.toString()));
  let exited = false;
  const exit = new Promise<void>((r) => proc.once("exit", () => ((exited = true), r())));
  cleanups.push(() => {
    if (!exited) proc.kill("SIGKILL");
  });
  closers.push(async () => {
    if (!exited) proc.kill("SIGKILL");
    await exit;
  });
  const kill = async (sig: NodeJS.Signals = "SIGTERM") => {
    if (!exited) proc.kill(sig);
    await exit;
  };
  const listening = (async () => {
    const end = performance.now() + timeoutMs;
    while (!exited && performance.now() < end && !(await canConnect(port))) await sleep(25);
    return !exited && performance.now() < end;
  })();
  return { proc, listening, log: () => out, kill };
}

export interface Redis {
  url: string;
  port: number;
  kill(): Promise<void>;
}

/** Whether redis-server is installed. */
export function haveRedisServer(): boolean {
  return spawnSync("redis-server", ["--version"], { stdio: "ignore" }).status === 0;
}

/** startRedis starts a throwaway redis-server on a free loopback port. */
export async function startRedis(): Promise<Redis> {
  const dir = tempDir("redis-");
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const args = ["--bind", "127.0.0.1", "--port", String(port), "--save", "", "--appendonly", "no", "--dir", dir];
    const child = spawnListening("redis-server", args, undefined, port, 10_000);
    if (await child.listening) {
      return { url: `redis://127.0.0.1:${port}/0`, port, kill: () => child.kill("SIGKILL") };
    }
    await child.kill("SIGKILL");
    if (attempt >= 3) throw new Error(`redis-server did not start:\n${child.log()}`);
  }
}

/** Whether openssl is installed. */
export function haveOpenssl(): boolean {
  return spawnSync("openssl", ["version"], { stdio: "ignore" }).status === 0;
}

/** selfSignedCert makes a self-signed certificate for 127.0.0.1 and localhost with openssl. */
export function selfSignedCert(): { certFile: string; keyFile: string; cert: string } {
  const dir = tempDir("tls-");
  const certFile = join(dir, "cert.pem");
  const keyFile = join(dir, "key.pem");
  const r = spawnSync(
    "openssl",
    [
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
      "-keyout", keyFile, "-out", certFile, "-days", "2", "-subj", "/CN=coordinator-test",
      "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
    ],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  if (r.status !== 0) throw new Error(`openssl failed: ${r.stderr?.toString()}`);
  return { certFile, keyFile, cert: readFileSync(certFile, "utf8") };
}

/** writeFile writes text into a fresh temporary file and returns its path. */
export function tempFile(name: string, text: string): string {
  const p = join(tempDir(), name);
  writeFileSync(p, text, { mode: 0o600 });
  return p;
}

/** newClient makes a Client closed when the process exits (close it yourself to release). */
export function newClient(opts: ClientOptions): Client {
  const c = new Client({ callTimeoutMs: 20_000, ...opts });
  clients.push(c);
  return c;
}

/** abortedAt resolves with the performance.now() time at which signal aborts. */
export function abortedAt(signal: AbortSignal): Promise<number> {
  return new Promise((r) => {
    if (signal.aborted) return r(performance.now());
    signal.addEventListener("abort", () => r(performance.now()), { once: true });
  });
}
