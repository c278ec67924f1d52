// bench: acquire+release cycles per second through the TypeScript client:
// tryLock then release, one lock name per worker, with 1 and 16 concurrent
// async workers sharing one Client, each for a fixed duration.
//
//   node dist/client/typescript/bench/bench.js ADDRESS [SECONDS]
//
// prints "typescript c=1 N cycles/s" and "typescript c=16 N cycles/s".
// COORDINATOR_TOKEN adds a bearer token (sent over plaintext).

import { randomBytes } from "node:crypto";
import { Client } from "../src/index.js";

const [address, secondsArg] = process.argv.slice(2);
if (!address) {
  console.error("usage: node dist/client/typescript/bench/bench.js ADDRESS [SECONDS]");
  process.exit(2);
}
const seconds = Number(secondsArg ?? "5");
if (!(seconds > 0)) {
  console.error(`bench: SECONDS must be a positive number, not ${secondsArg}`);
  process.exit(2);
}
const token = process.env["COORDINATOR_TOKEN"];
const client = new Client({ address, ...(token ? { token, insecureToken: true } : {}) });
const run = randomBytes(4).toString("hex");

async function cycle(name: string): Promise<void> {
  const lease = await client.tryLock(name, { ttl: 30_000 });
  if (!lease) throw new Error(`bench: ${name} is held by someone else`);
  await lease.release();
}

async function measure(concurrency: number): Promise<number> {
  const names = Array.from({ length: concurrency }, (_, i) => `bench/typescript/${run}/c${concurrency}/${i}`);
  await Promise.all(names.map(cycle)); // warm up: connection, names
  let cycles = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  await Promise.all(
    names.map(async (name) => {
      while (performance.now() < end) {
        await cycle(name);
        cycles++;
      }
    }),
  );
  return cycles / ((performance.now() - start) / 1000);
}

try {
  for (const c of [1, 16]) {
    const rate = await measure(c);
    console.log(`typescript c=${c} ${Math.round(rate)} cycles/s`);
  }
} finally {
  await client.close();
}
