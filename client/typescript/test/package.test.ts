// The package as a user gets it: `npm pack` (which builds it, prepack), the
// tarball installed into an empty project outside the repository, the
// example compiled there against the installed declarations and run against
// a real coordinator. And the version it carries is the repository's.

import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { repoRoot, shutdown, startCoordinator, tempDir } from "./helpers.js";

after(shutdown);

const repo = repoRoot();
const pkgDir = join(repo, "client", "typescript");
const version = readFileSync(join(repo, "VERSION"), "utf8").trim();
const tarball = `coordinator-dev-coordinator-${version}.tgz`;

function readJson(path: string): Record<string, unknown> {
  return JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
}

// The npm commands run as a user's would. `npm test` exports its own
// configuration as npm_* variables, among them npm_config_local_prefix (this
// package), which would make `npm install` in the temporary project install
// into this package instead: so those go, except what says where packages
// come from (the cache, a registry, a proxy), which the user set.
const keep = /^npm_config_(cache|registry|cafile|proxy|https_proxy|noproxy|strict_ssl|userconfig|globalconfig)$/i;
const userEnv: NodeJS.ProcessEnv = Object.fromEntries(
  Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) || keep.test(k)),
);

/** run runs cmd in cwd and returns its stdout, or throws with its output. */
function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = userEnv): string {
  const r = spawnSync(cmd, args, { cwd, env, encoding: "utf8", timeout: 120_000 });
  if (r.status !== 0) {
    throw new Error(`${cmd} ${args.join(" ")} (in ${cwd}) failed (${r.status ?? r.signal ?? r.error}):\n${r.stdout}\n${r.stderr}`);
  }
  return r.stdout;
}

/** runAsync is run without blocking the event loop (the coordinator's output is read meanwhile), with a deadline. */
function runAsync(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = "";
    const child = spawn(cmd, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", reject);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${cmd} ${args.join(" ")} failed (${code ?? signal}):\n${out}`));
    });
  });
}

describe("the npm package", { timeout: 180_000 }, () => {
  let packed: { filename: string; files: { path: string }[] };
  let project: string;

  before(() => {
    // The project of a user: empty, ESM, outside the repository (so nothing
    // of this package's node_modules or dist/ can be found by walking up).
    project = tempDir("coordinator-ts-consumer-");
    run("npm", ["init", "-y"], project);
    run("npm", ["pkg", "set", "type=module"], project);
    // npm pack builds the package (prepack) and writes the tarball there.
    const out = run("npm", ["pack", "--json", "--pack-destination", project], pkgDir);
    packed = (JSON.parse(out) as (typeof packed)[])[0]!;
    // The README's command. The dependencies come from npm's cache when
    // they are there (npm ci put them there), else from the registry.
    run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", `./${tarball}`], project);
  });

  it("is a tarball of dist/ with declarations and the generated code, and no sources, tests, examples or benchmark", () => {
    assert.equal(packed.filename, tarball);
    const files = packed.files.map((f) => f.path).sort();
    for (const want of [
      "package.json",
      "README.md",
      "dist/index.js",
      "dist/index.d.ts",
      "dist/client.d.ts",
      "dist/gen/coordinator/v1/coordinator_pb.js",
      "dist/gen/coordinator/v1/coordinator_pb.d.ts",
      "dist/gen/coordinator/v1/rules_pb.js",
      "dist/gen/google/rpc/status_pb.js",
      "dist/gen/google/rpc/error_details_pb.d.ts",
    ]) {
      assert.ok(files.includes(want), `the tarball has no ${want}: ${files.join(", ")}`);
    }
    for (const f of files) {
      if (f === "package.json" || f === "README.md") continue;
      assert.match(f, /^dist\/.*\.(js|d\.ts)$/, `the tarball should hold dist/'s .js and .d.ts files only, not ${f}`);
      assert.doesNotMatch(f, /(^|\/)(test|tests|examples|bench|src)\/|\.test\./, `the tarball holds ${f}`);
    }
    // Every module has its declarations.
    for (const f of files.filter((f) => f.endsWith(".js"))) {
      assert.ok(files.includes(f.replace(/\.js$/, ".d.ts")), `${f} has no declarations in the tarball`);
    }
    const manifest = readJson(join(project, "node_modules", "@coordinator-dev", "coordinator", "package.json"));
    assert.equal(manifest["private"], undefined);
    assert.deepEqual(manifest["exports"], {
      ".": { types: "./dist/index.d.ts", default: "./dist/index.js" },
      "./package.json": "./package.json",
    });
  });

  it("resolves to the installed tarball in the project, not to the repository", () => {
    const where = run("node", ["--input-type=module", "-e", 'console.log(import.meta.resolve("@coordinator-dev/coordinator"))'], project);
    assert.equal(new URL(where.trim()).pathname, join(project, "node_modules", "@coordinator-dev", "coordinator", "dist", "index.js"));
  });

  it("type-checks a consumer and compiles the lock example against the installed declarations", () => {
    compileInProject();
  });

  it("runs the lock example from the project against a coordinator", async () => {
    compileInProject();
    const coord = await startCoordinator();
    const env = { ...userEnv, COORDINATOR_ADDRESS: coord.address };
    const out = await runAsync("node", ["lock-example.js"], project, env, 60_000);
    for (const want of [
      /^holding examples\/reports\/nightly as .+, fencing token \d+$/m,
      /^ {2}step 3: \d+ms of validity left$/m,
      /^report done - lock released$/m,
      /^examples\/busy is held by .+; retry in \d+ms$/m,
      /^leading examples\/leader in term \d+$/m,
      /^ {2}observed elected( \(initial\))?: 10\.0\.0\.1:8080, term \d+$/m,
      /^ {2}observed proclaimed: 10\.0\.0\.2:8080, term \d+$/m,
    ]) {
      assert.match(out, want, `the example's output:\n${out}`);
    }
  });

  let compiled = false;
  /**
   * compileInProject compiles, in the project and as NodeNext ESM (what a
   * Node.js project uses), the example as it is in the repository (it
   * imports the package by name) and a consumer whose @ts-expect-error
   * lines fail to compile if the package's types were missing or any.
   * Library checks are on, so the shipped declarations are checked too.
   */
  function compileInProject(): void {
    if (compiled) return;
    copyFileSync(join(pkgDir, "examples", "lock-example.ts"), join(project, "lock-example.ts"));
    writeFileSync(
      join(project, "consumer.ts"),
      `import {
  Client,
  CoordinatorError,
  NotAcquiredError,
  SessionEndedError,
  type ClientOptions,
  type Lease,
  type LeaderEvent,
  type Session,
} from "@coordinator-dev/coordinator";

const opts: ClientOptions = { address: "127.0.0.1:7400", ttl: 5_000 };
export async function use(client = new Client(opts)): Promise<bigint | undefined> {
  const lease: Lease | undefined = await client.tryLock("consumer/x");
  // @ts-expect-error: a fencing token is a bigint
  const asNumber: number | undefined = lease?.token;
  // @ts-expect-error: a name is a string
  await client.tryLock(42);
  for await (const ev of client.observe("consumer/leader")) {
    const kind: LeaderEvent["kind"] = ev.kind;
    void kind;
    break;
  }
  const e: unknown = undefined;
  if (e instanceof NotAcquiredError) void (e.holder satisfies string);
  if (e instanceof CoordinatorError) void (e.code satisfies number);
  if (e instanceof SessionEndedError) void (e.kind satisfies "released" | "lost" | "expired" | "closed");
  const session: Session = await client.session({ ttl: 10_000 });
  const attached: Lease | undefined = await client.tryLock("consumer/y", { session });
  void (attached?.session satisfies Session | undefined);
  // @ts-expect-error: a session is a Session, not its id
  await client.tryLock("consumer/z", { session: session.id });
  void ((await client.defaultSession()).id satisfies string);
  void ((await session.close()) satisfies boolean);
  void asNumber;
  return lease?.token;
}
`,
    );
    writeFileSync(
      join(project, "tsconfig.json"),
      JSON.stringify(
        {
          compilerOptions: {
            target: "ES2022",
            module: "NodeNext",
            moduleResolution: "NodeNext",
            strict: true,
            skipLibCheck: false,
            // Node's types are this package's (a user's project has its own).
            typeRoots: [join(pkgDir, "node_modules", "@types")],
            types: ["node"],
          },
          files: ["lock-example.ts", "consumer.ts"],
        },
        null,
        2,
      ),
    );
    const tsc = createRequire(join(pkgDir, "package.json")).resolve("typescript/bin/tsc");
    run(process.execPath, [tsc, "-p", "tsconfig.json"], project);
    compiled = true;
  }
});

describe("the version", () => {
  it("is the repository's VERSION in package.json, package-lock.json and the READMEs' npm install", () => {
    assert.match(version, /^\d+\.\d+\.\d+$/);
    assert.equal(readJson(join(pkgDir, "package.json"))["version"], version, "package.json's version is not VERSION's");
    const lock = readJson(join(pkgDir, "package-lock.json"));
    assert.equal(lock["version"], version, "package-lock.json's version is not VERSION's: npm install updates it");
    assert.equal((lock["packages"] as Record<string, { version?: string }>)[""]?.version, version);
    for (const readme of [join(repo, "README.md"), join(pkgDir, "README.md")]) {
      assert.ok(
        readFileSync(readme, "utf8").includes(`npm install ./${tarball}`),
        `${readme} does not say npm install ./${tarball}`,
      );
    }
  });
});
