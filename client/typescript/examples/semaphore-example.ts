// semaphore-example: share a semaphore of 5 between two holders, then take a
// read-write lock for reading and for writing.
//
// Against a coordinator on 127.0.0.1:7400 (`make run` at the repository
// root), from client/typescript:
//
//   npm ci && npm run build
//   node build/examples/semaphore-example.js
//
// COORDINATOR_ADDRESS overrides the address. docs/semaphores.md's
// "TypeScript" shows the part between the markers below, which
// test/examples.test.ts checks is the same.
//
// It imports the package by its name, as your code does: in this
// repository that is the package's own dist/ (npm run build makes it).

import { Client } from "@coordinator-dev/coordinator";

const address = process.env["COORDINATOR_ADDRESS"] ?? "127.0.0.1:7400";
const client = new Client({ address });

try {
  // README begin
  const migrations = client.semaphore("db/migrations", 5);
  const big = await migrations.acquire(3, { wait: 30_000 });
  const small = await migrations.acquire(2, { wait: 30_000 });
  console.log("held:", big.weight + small.weight, "tokens increase:", small.token > big.token);
  console.log("full:", (await migrations.tryAcquire(1)) === undefined);
  await small.release();
  await big.release();

  const routes = client.rwlock("config/routes");
  const reader = await routes.readLock({ wait: 30_000 });
  console.log("writer refused beside a reader:", (await routes.tryWriteLock()) === undefined);
  await reader.release();
  const writer = await routes.writeLock({ wait: 30_000 });
  console.log("writer's token above the reader's:", writer.token > reader.token);
  await writer.release();
  // README end
} finally {
  await client.close();
}
