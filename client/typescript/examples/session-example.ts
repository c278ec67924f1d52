// session-example: hold a lock per partition and a leadership in one
// session, which one renewal keeps alive; close it, which releases them
// all in one call.
//
// Against a coordinator on 127.0.0.1:7400 (`make run` at the repository
// root), from client/typescript:
//
//   npm ci && npm run build
//   node build/examples/session-example.js
//
// COORDINATOR_ADDRESS overrides the address. client/typescript/README.md's
// "Sessions: how leases stay alive" shows
// the part between the markers below, which test/examples.test.ts checks
// is the same, and runs.
//
// It imports the package by its name, as your code does: in this
// repository that is the package's own dist/ (npm run build makes it).

import { Client } from "@coordinator-dev/coordinator";

const address = process.env["COORDINATOR_ADDRESS"] ?? "127.0.0.1:7400";
const client = new Client({ address });

try {
  // README begin
  const session = await client.session({ ttl: 10_000 }); // renewed about every 3.3 s
  const parts = [];
  for (const part of ["a", "b", "c"]) {
    const lease = await client.tryLock(`examples/partitions/${part}`, { session });
    if (lease) parts.push(lease); // its session keeps it
  }
  const leader = await client.campaign("examples/partitions/leader", "worker-1", { session, wait: 10_000 });
  console.log("partitions held:", parts.length, "in session:", parts.every((l) => l.session === session));
  console.log("leading in term:", leader.term > 0n);

  // Releasing one lease releases it alone; the session goes on.
  await parts.pop()?.release();
  console.log("session alive:", !session.signal.aborted, "leases:", session.size);

  // One CloseSession releases the rest: their signals abort at once, and
  // the coordinator grants their waiters at once.
  await session.close();
  console.log("ended:", parts.every((l) => l.ended?.kind === "released") && leader.ended?.kind === "released");

  // Without a session option, locks attach to the Client's default session.
  const lease = await client.tryLock("examples/partitions/a");
  console.log("default session:", lease?.session === (await client.defaultSession()));
  // README end
} finally {
  await client.close();
}
