import { readFileSync } from 'node:fs';
const p = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const counts = new Map();
for (const s of p.samples) counts.set(s, (counts.get(s) ?? 0) + 1);
const total = p.samples.length;
const self = new Map(), incl = new Map();
const key = (n) => `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.replace(/.*node_modules\//, 'nm/').replace(/.*\/main\//, '')}:${n.callFrame.lineNumber}`;
for (const [id, c] of counts) {
  const n = byId.get(id); const k = key(n);
  self.set(k, (self.get(k) ?? 0) + c);
  const seen = new Set(); let cur = id;
  while (cur !== undefined) { const kk = key(byId.get(cur)); if (!seen.has(kk)) { seen.add(kk); incl.set(kk, (incl.get(kk) ?? 0) + c); } cur = parent.get(cur); }
}
const excl = process.argv[3] ? new RegExp(process.argv[3]) : null;
console.log('total samples', total);
console.log('--- self');
for (const [k, c] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 40)) console.log((100 * c / total).toFixed(1).padStart(5), k);
console.log('--- inclusive');
for (const [k, c] of [...incl].sort((a, b) => b[1] - a[1]).filter(([k]) => !excl || !excl.test(k)).slice(0, 60)) console.log((100 * c / total).toFixed(1).padStart(5), k);
