// Exit 0 when node_modules holds every package of package-lock.json at its locked version, else 1.
// scripts/setup.sh runs `npm ci` only then, so a changed package.json/package-lock.json is installed on a
// machine that already has node_modules, and an unchanged one costs one file read. npm keeps a record of
// what it installed in node_modules/.package-lock.json; a package missing from that record, or installed
// at another version, means the tree is stale.
import { readFileSync } from "node:fs";

function packages(path) {
  try {
    return JSON.parse(readFileSync(path, "utf8")).packages ?? {};
  } catch {
    return null;
  }
}

const wanted = packages("package-lock.json");
const installed = packages("node_modules/.package-lock.json");
if (wanted === null || installed === null) process.exit(1);
const stale = Object.entries(wanted).filter(([path, entry]) => {
  if (path === "" || entry.link) return false;
  if (entry.optional && !(path in installed)) return false;  // an optional package this platform skips
  return installed[path]?.version !== entry.version;
});
for (const [path, entry] of stale.slice(0, 5)) {
  console.error(`setup: ${path} ${installed[path]?.version ?? "missing"}, locked ${entry.version}`);
}
process.exit(stale.length ? 1 : 0);
