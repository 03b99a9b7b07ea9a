// EXPLAIN (FORMAT JSON) of a captured statement (lib/statements.ts), as a flat
// list of plan nodes, for tests that check how a statement reaches a table.
import type pg from 'pg';

export type PlanNode = {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PlanNode[];
};

/** Every node of the statement's plan (with `analyze`, run for real: actual rows and loops). */
export async function planNodes(pool: pg.Pool, s: { text: string; values: readonly unknown[] }, opts: { analyze?: boolean } = {}): Promise<PlanNode[]> {
  const { rows } = await pool.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>({
    text: `EXPLAIN (${opts.analyze ? 'ANALYZE, ' : ''}FORMAT JSON) ${s.text}`, values: s.values as unknown[],
  });
  const all: PlanNode[] = [];
  const walk = (n: PlanNode) => {
    all.push(n);
    n.Plans?.forEach(walk);
  };
  walk(rows[0]!['QUERY PLAN'][0].Plan);
  return all;
}

/** The indexes through which the plan reads `table`. */
export function indexesOf(nodes: PlanNode[], table: string): string[] {
  return [...new Set(nodes.filter((n) => n['Relation Name'] === table && n['Index Name']).map((n) => n['Index Name']!))];
}
