// Builds the npm package kubeplug-sdk (npm pack runs it first, as prepack): the SDK compiled
// to dist/ with its declarations, the contract's generated types (jco types, when missing)
// and the WIT files of the contract it implements, copied into wit/ (npm packs no symlinks).
// `node build.mjs --test` compiles into a temporary folder instead and runs the SDK's unit
// tests (test/*.test.mjs) against that, outside any wasm runtime.
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const bin = (name) => join(here, "node_modules", ".bin", name);
const { contract } = JSON.parse(readFileSync(join(here, "package.json"), "utf8")).kubeplug;
const wit = join(here, "..", "..", "wit", `v${contract}`);

function run(command, args) {
  try {
    execFileSync(command, args, { cwd: here, stdio: "inherit" });
  } catch (e) {
    process.exit(typeof e.status === "number" && e.status !== 0 ? e.status : 1);
  }
}

if (!existsSync(join(here, "generated", "plugin.d.ts"))) {
  run(bin("jco"), ["types", wit, "-n", "plugin", "-q", "-o", join(here, "generated")]);
}
if (process.argv.includes("--test")) {
  const out = mkdtempSync(join(tmpdir(), "kubeplug-sdk-test-"));
  process.on("exit", () => rmSync(out, { recursive: true, force: true }));
  run(bin("tsc"), ["-p", "tsconfig.build.json", "--outDir", join(out, "dist")]);
  cpSync(join(here, "test"), join(out, "test"), { recursive: true });
  const tests = readdirSync(join(out, "test"))
    .filter((f) => f.endsWith(".test.mjs"))
    .map((f) => join(out, "test", f));
  const register = pathToFileURL(join(out, "test", "register.mjs")).href;
  run(process.execPath, ["--import", register, "--test", ...tests]);
} else {
  for (const d of ["dist", "wit"]) rmSync(join(here, d), { recursive: true, force: true });
  run(bin("tsc"), ["-p", "tsconfig.build.json"]);
  cpSync(wit, join(here, "wit", `v${contract}`), { recursive: true });
}
