// run-tests.mjs builds the coordinator once (go build into a temporary
// directory), then runs the compiled tests with `node --test`, every test
// file against that binary (COORDINATOR_TEST_BINARY). Extra arguments are
// passed to node --test (e.g. --test-name-pattern=…). When
// COORDINATOR_TEST_BINARY is set already, that binary is used as it is.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const repo = resolve(pkg, "..", "..");
const testDir = join(pkg, "build", "test");

let tmp;
const env = { ...process.env };
if (!env.COORDINATOR_TEST_BINARY) {
  tmp = mkdtempSync(join(tmpdir(), "coordinator-ts-bin-"));
  const bin = join(tmp, "coordinator");
  const started = Date.now();
  const go = spawnSync("go", ["build", "-o", bin, "./cmd/coordinator"], { cwd: repo, stdio: "inherit" });
  if (go.status !== 0) {
    rmSync(tmp, { recursive: true, force: true });
    console.error(`run-tests: go build ./cmd/coordinator failed (${go.status ?? go.signal})`);
    process.exit(1);
  }
  console.error(`run-tests: built the coordinator in ${Date.now() - started}ms`);
  env.COORDINATOR_TEST_BINARY = bin;
}
if (!env.COORDINATOR_TEST_REDIS_URL) {
  console.error("run-tests: COORDINATOR_TEST_REDIS_URL is not set: testing the memory store only");
}

const files = readdirSync(testDir)
  .filter((f) => f.endsWith(".test.js"))
  .sort()
  .map((f) => join(testDir, f));
const args = ["--test", ...process.argv.slice(2), ...files];
const run = spawnSync(process.execPath, args, { env, stdio: "inherit" });
if (tmp) rmSync(tmp, { recursive: true, force: true });
process.exit(run.status ?? 1);
