// group-example: lock two accounts at once for a transfer, then hold a
// lock, a semaphore's share and a read lock together.
//
// Against a coordinator on 127.0.0.1:7400 (`make run` at the repository
// root), from client/typescript:
//
//   npm ci && npm run build
//   node build/examples/group-example.js
//
// COORDINATOR_ADDRESS overrides the address. client/typescript/README.md's
// "Groups: several names at once" shows the part between the markers
// below, which test/examples.test.ts checks is the same, and runs.
//
// It imports the package by its name, as your code does: in this
// repository that is the package's own dist/ (npm run build makes it).

import { Client, RW_CAPACITY } from "@coordinator-dev/coordinator";

const address = process.env["COORDINATOR_ADDRESS"] ?? "127.0.0.1:7400";
const client = new Client({ address });

try {
  // README begin
  // Both accounts or neither, whatever order other transfers list them in.
  const alice = "examples/accounts/alice";
  const bob = "examples/accounts/bob";
  const transfer = await client.lockAll([alice, bob], { wait: 10_000 });
  try {
    // Hand each account's store the token of its own name.
    console.log("tokens:", transfer.token(alice) > 0n && transfer.token(bob) > 0n);
    // Meanwhile nobody locks either account, nor a group that names one.
    console.log("bob refused:", (await client.tryLock(bob)) === undefined);
    console.log("bob and carol refused:", (await client.tryLockAll([bob, "examples/accounts/carol"])) === undefined);
  } finally {
    await transfer.release(); // both at once
  }

  // A lock, a semaphore's share and a read lock, together.
  const job = await client.acquireAll([
    { name: "examples/accounts/carol" },
    { name: "examples/pools/db", capacity: 3, weight: 1 },
    { name: "examples/config", capacity: RW_CAPACITY, weight: 1 },
  ]);
  console.log("weights:", job.leases.map((l) => l.weight).join(","), "in one session:", job.session === (await client.defaultSession()));
  await job.release();
  // README end
} finally {
  await client.close();
}
