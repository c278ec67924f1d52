// bench: acquire+release cycles per second through the TypeScript client:
// tryLock then release, one lock name per worker, with 1 and 16 concurrent
// async workers sharing one Client (its default session, over its
// operation stream), each for a fixed duration; bench/clients.go (make
// bench) reads the lines, the Python client's too.
//
//   node build/bench/bench.js ADDRESS [SECONDS]
//
// prints "typescript-stream c=1 N cycles/s" and "typescript-stream c=16 …".
// COORDINATOR_TOKEN adds a bearer token (sent over plaintext).

import { randomBytes } from "node:crypto";
import { Client } from "../src/index.js";

const [address, secondsArg] = process.argv.slice(2);
if (!address) {
  console.error("usage: node build/bench/bench.js ADDRESS [SECONDS]");
  process.exit(2);
}
const seconds = Number(secondsArg ?? "5");
if (!(seconds > 0)) {
  console.error(`bench: SECONDS must be a positive number, not ${secondsArg}`);
  process.exit(2);
}
const token = process.env["COORDINATOR_TOKEN"];
const run = randomBytes(4).toString("hex");

async function cycle(client: Client, name: string): Promise<void> {
  const lease = await client.tryLock(name);
  if (!lease) throw new Error(`bench: ${name} is held by someone else`);
  await lease.release();
}

async function measure(client: Client, concurrency: number): Promise<number> {
  const names = Array.from({ length: concurrency }, (_, i) => `bench/typescript/${run}/c${concurrency}/${i}`);
  await Promise.all(names.map((n) => cycle(client, n))); // warm up: connection, session, stream, names
  let cycles = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  await Promise.all(
    names.map(async (name) => {
      while (performance.now() < end) {
        await cycle(client, name);
        cycles++;
      }
    }),
  );
  return cycles / ((performance.now() - start) / 1000);
}

const client = new Client({ address, ...(token ? { token, insecureToken: true } : {}) });
try {
  for (const c of [1, 16]) {
    const rate = await measure(client, c);
    console.log(`typescript-stream c=${c} ${Math.round(rate)} cycles/s`);
  }
} finally {
  await client.close();
}
