// docs/semaphores.md's TypeScript example of semaphores and read-write locks is the
// heart of examples/semaphore-example.ts, and client/typescript/README.md's
// of sessions and of groups those of examples/session-example.ts and
// examples/group-example.ts; each runs as written against a real coordinator.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { repoRoot, shutdown, startCoordinator } from "./helpers.js";

after(shutdown);

/** readmeSection is the text of the section heading (e.g. "## Sessions") of a Markdown file, up to the next of its level. */
function readmeSection(readme: string, heading: string): string {
  const text = readFileSync(join(repoRoot(), readme), "utf8");
  const start = text.indexOf(`\n${heading}\n`);
  assert.ok(start >= 0, `${readme} has no ${heading}`);
  const rest = text.slice(start + heading.length + 2);
  const level = heading.split(" ")[0]!;
  // Not "# ": a shell comment in a code block.
  const end = rest.search(new RegExp(`\n#{2,${level.length}} `));
  return end < 0 ? rest : rest.slice(0, end);
}

/** sameAsReadme checks that the ts block of the README section is the example's part between its markers. */
function sameAsReadme(readme: string, heading: string, example: string): void {
  const section = readmeSection(readme, heading);
  const block = section.split("```ts\n")[1]?.split("```")[0];
  assert.ok(block, "no ts block in the section");
  const source = readFileSync(join(repoRoot(), "client/typescript/examples", example), "utf8");
  const marked = source.split("// README begin\n")[1]?.split("// README end")[0];
  assert.ok(marked, "no README markers in the example");
  assert.equal(dedent(marked), dedent(block));
}

/** runExample runs the compiled example against a fresh coordinator and returns its output's lines. */
async function runExample(example: string): Promise<string[]> {
  const coord = await startCoordinator({ store: "memory" });
  const path = join(repoRoot(), "client/typescript/build/examples", example);
  const r = spawnSync(process.execPath, [path], { env: { ...process.env, COORDINATOR_ADDRESS: coord.address }, encoding: "utf8", timeout: 50_000 });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim().split("\n");
}

const dedent = (s: string): string =>
  s
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "")
    .join("\n");

describe("the semaphore example", { timeout: 60_000 }, () => {
  it("is what docs/semaphores.md shows", () => {
    sameAsReadme("docs/semaphores.md", "## TypeScript", "semaphore-example.ts");
  });

  it("runs as written", async () => {
    assert.deepEqual(await runExample("semaphore-example.js"), [
      "held: 5 tokens increase: true",
      "full: true",
      "writer refused beside a reader: true",
      "writer's token above the reader's: true",
    ]);
  });
});

describe("the session example", { timeout: 60_000 }, () => {
  it("is what client/typescript/README.md shows", () => {
    sameAsReadme("client/typescript/README.md", "### Sessions: how leases stay alive", "session-example.ts");
  });

  it("runs as written", async () => {
    assert.deepEqual(await runExample("session-example.js"), [
      "partitions held: 3 in session: true",
      "leading in term: true",
      "session alive: true leases: 3",
      "ended: true",
      "default session: true",
    ]);
  });
});

describe("the group example", { timeout: 60_000 }, () => {
  it("is what client/typescript/README.md shows", () => {
    sameAsReadme("client/typescript/README.md", "### Groups: several names at once", "group-example.ts");
  });

  it("runs as written", async () => {
    assert.deepEqual(await runExample("group-example.js"), [
      "tokens: true",
      "bob refused: true",
      "bob and carol refused: true",
      "weights: 1,1,1 in one session: true",
    ]);
  });
});
