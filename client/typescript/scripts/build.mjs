// build.mjs compiles the client. The generated code lives outside this
// package, in the repository's gen/typescript (the one copy `make generate`
// writes and `make lint` checks), so it is first copied into src/gen/
// (git-ignored), where src/ imports it from: then the package compiles from
// src/ alone and dist/ is the tarball's clean tree (dist/index.js,
// dist/index.d.ts, dist/gen/coordinator/v1/...).
//
//   node scripts/build.mjs            the package (dist/), then the tests,
//                                     example and benchmark (build/)
//   node scripts/build.mjs --package  the package only (prepack)
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const gen = resolve(pkg, "..", "..", "gen", "typescript");
const packageOnly = process.argv.includes("--package");
const tsc = createRequire(join(pkg, "package.json")).resolve("typescript/bin/tsc");

function compile(project) {
  const r = spawnSync(process.execPath, [tsc, "-p", join(pkg, project)], { cwd: pkg, stdio: "inherit" });
  if (r.status !== 0) {
    console.error(`build: tsc -p ${project} failed (${r.status ?? r.signal})`);
    process.exit(1);
  }
}

if (!existsSync(gen)) {
  console.error(`build: ${gen} is missing: the package is built from a clone of the repository`);
  process.exit(1);
}
rmSync(join(pkg, "src", "gen"), { recursive: true, force: true });
cpSync(gen, join(pkg, "src", "gen"), { recursive: true });

rmSync(join(pkg, "dist"), { recursive: true, force: true });
compile("tsconfig.build.json");
if (!packageOnly) {
  // The example imports the package by its name, which resolves to dist/:
  // hence after the package.
  rmSync(join(pkg, "build"), { recursive: true, force: true });
  compile("tsconfig.json");
}
