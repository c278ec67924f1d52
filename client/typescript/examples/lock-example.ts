// lock-example: take a lock, do some work while it is held, release it; then
// win an election and watch it change hands.
//
// Against a coordinator on 127.0.0.1:7400 (`make run` at the repository
// root), from client/typescript:
//
//   npm ci && npm run build
//   node build/examples/lock-example.js      (or: npm run example)
//
// COORDINATOR_ADDRESS and COORDINATOR_TOKEN override the address and add a
// bearer token (sent over plaintext: loopback only).
//
// It imports the package by its name, as your code does: in this
// repository that is the package's own dist/ (npm run build makes it), and
// test/package.test.ts runs this file in a project that installed the
// packed tarball.

import { Client, NotAcquiredError } from "@coordinator-dev/coordinator";

const address = process.env["COORDINATOR_ADDRESS"] ?? "127.0.0.1:7400";
const token = process.env["COORDINATOR_TOKEN"];
const client = new Client({ address, ...(token ? { token, insecureToken: true } : {}) });

try {
  // A lock: at most one holder at a time, in the Client's session, renewed in the background.
  const result = await client.withLock(
    "examples/reports/nightly",
    async (lease, signal) => {
      console.log(`holding ${lease.name} as ${lease.holder}, fencing token ${lease.token}`);
      for (let step = 1; step <= 3; step++) {
        // Stop at once when the lease is lost; hand the token to what you write to.
        signal.throwIfAborted();
        console.log(`  step ${step}: ${Math.round(lease.remaining())}ms of validity left`);
        await new Promise((r) => setTimeout(r, 1000));
      }
      return "report done";
    },
    { wait: 10_000 },
  );
  console.log(result, "- lock released");

  // Somebody else's lock: tryLock does not wait.
  const held = await client.tryLock("examples/busy");
  const again = await client.lock("examples/busy", { wait: 0 }).catch((e: unknown) => e);
  if (again instanceof NotAcquiredError) {
    console.log(`examples/busy is held by ${again.holder}; retry in ${again.retryAfter}ms`);
  }
  await held?.release();

  // An election: observe it while a leader comes, proclaims and goes.
  const stop = new AbortController();
  const watching = (async () => {
    for await (const ev of client.observe("examples/leader", { signal: stop.signal })) {
      console.log(`  observed ${ev.kind}${ev.initial ? " (initial)" : ""}${ev.leader ? `: ${ev.leader.valueText}, term ${ev.leader.term}` : ""}`);
    }
  })();
  const leadership = await client.campaign("examples/leader", "10.0.0.1:8080", { wait: 10_000 });
  console.log(`leading examples/leader in term ${leadership.term}`);
  await leadership.proclaim("10.0.0.2:8080");
  await leadership.resign();
  await new Promise((r) => setTimeout(r, 200));
  stop.abort();
  await watching;
} finally {
  await client.close();
}
