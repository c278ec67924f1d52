// README.md's TypeScript example of semaphores and read-write locks is the
// heart of examples/semaphore-example.ts, which runs as written against a
// real coordinator.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { repoRoot, shutdown, startCoordinator } from "./helpers.js";

after(shutdown);

function readmeSection(title: string): string {
  const text = readFileSync(join(repoRoot(), "README.md"), "utf8");
  const start = text.indexOf(`\n## ${title}\n`);
  assert.ok(start >= 0, `README.md has no ## ${title}`);
  const rest = text.slice(start + title.length + 5);
  const end = rest.indexOf("\n## ");
  return end < 0 ? rest : rest.slice(0, end);
}

const dedent = (s: string): string =>
  s
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "")
    .join("\n");

describe("the semaphore example", { timeout: 60_000 }, () => {
  it("is what README.md shows", () => {
    const section = readmeSection("Semaphores and read-write locks");
    const block = section.split("```ts\n")[1]?.split("```")[0];
    assert.ok(block, "no ts block in the section");
    const source = readFileSync(join(repoRoot(), "client/typescript/examples/semaphore-example.ts"), "utf8");
    const marked = source.split("// README begin\n")[1]?.split("// README end")[0];
    assert.ok(marked, "no README markers in the example");
    assert.equal(dedent(marked), dedent(block));
  });

  it("runs as written", async () => {
    const coord = await startCoordinator({ store: "memory" });
    const example = join(repoRoot(), "client/typescript/dist/client/typescript/examples/semaphore-example.js");
    const r = spawnSync(process.execPath, [example], { env: { ...process.env, COORDINATOR_ADDRESS: coord.address }, encoding: "utf8", timeout: 50_000 });
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(r.stdout.trim().split("\n"), [
      "held: 5 tokens increase: true",
      "full: true",
      "writer refused beside a reader: true",
      "writer's token above the reader's: true",
    ]);
  });
});
