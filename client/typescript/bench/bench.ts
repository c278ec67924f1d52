// bench: acquire+release cycles per second through the TypeScript client:
// tryLock then release, one lock name per worker, with 1 and 16 concurrent
// async workers sharing one Client, each for a fixed duration; once with
// the operations on the operation stream (the default) and once as unary
// calls (useStream: false), each mode on a Client of its own;
// bench/clients.go (make bench) reads the lines, the Python client's too.
//
//   node build/bench/bench.js ADDRESS [SECONDS] [MODES]
//
// prints "typescript-stream c=1 N cycles/s", "typescript-stream c=16 …",
// "typescript-unary c=1 …" and "typescript-unary c=16 …". MODES is
// "stream,unary" (the default), "stream" or "unary".
// COORDINATOR_TOKEN adds a bearer token (sent over plaintext).

import { randomBytes } from "node:crypto";
import { Client } from "../src/index.js";

const [address, secondsArg, modesArg] = process.argv.slice(2);
if (!address) {
  console.error("usage: node build/bench/bench.js ADDRESS [SECONDS] [stream,unary]");
  process.exit(2);
}
const modes = (modesArg ?? "stream,unary").split(",").filter((m) => m !== "");
for (const m of modes) {
  if (m !== "stream" && m !== "unary") {
    console.error(`bench: unknown mode ${JSON.stringify(m)}: stream or unary`);
    process.exit(2);
  }
}
const seconds = Number(secondsArg ?? "5");
if (!(seconds > 0)) {
  console.error(`bench: SECONDS must be a positive number, not ${secondsArg}`);
  process.exit(2);
}
const token = process.env["COORDINATOR_TOKEN"];
const run = randomBytes(4).toString("hex");

async function cycle(client: Client, name: string): Promise<void> {
  const lease = await client.tryLock(name, { ttl: 30_000 });
  if (!lease) throw new Error(`bench: ${name} is held by someone else`);
  await lease.release();
}

async function measure(client: Client, mode: string, concurrency: number): Promise<number> {
  const names = Array.from({ length: concurrency }, (_, i) => `bench/typescript/${run}/${mode}/c${concurrency}/${i}`);
  await Promise.all(names.map((n) => cycle(client, n))); // warm up: connection, stream, names
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

for (const mode of modes) {
  const client = new Client({ address, useStream: mode === "stream", ...(token ? { token, insecureToken: true } : {}) });
  try {
    for (const c of [1, 16]) {
      const rate = await measure(client, mode, c);
      console.log(`typescript-${mode} c=${c} ${Math.round(rate)} cycles/s`);
    }
  } finally {
    await client.close();
  }
}
