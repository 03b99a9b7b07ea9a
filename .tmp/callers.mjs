import { readFileSync } from 'node:fs';
const p = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const target = new RegExp(process.argv[3]);
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const counts = new Map();
for (const s of p.samples) counts.set(s, (counts.get(s) ?? 0) + 1);
const key = (n) => `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.replace(/.*node_modules\//, 'nm/').replace(/.*\/main\//, '')}:${n.callFrame.lineNumber}`;
const stacks = new Map();
for (const [id, c] of counts) {
  let cur = id; const chain = [];
  let hit = false;
  while (cur !== undefined) { const n = byId.get(cur); if (target.test(key(n))) hit = true; if (hit) chain.push(key(n)); cur = parent.get(cur); }
  if (!hit) continue;
  const k = chain.slice(0, +(process.argv[4] ?? 8)).join('\n    <- ');
  stacks.set(k, (stacks.get(k) ?? 0) + c);
}
for (const [k, c] of [...stacks].sort((a, b) => b[1] - a[1]).slice(0, 6)) console.log(c, k, '\n');
