// Comparators for sorting in tests: Array#sort without one orders by String(),
// which the linter refuses (tuples, nulls and numbers sort as text by accident).

/** The default sort's order (UTF-16 code units), said explicitly. */
export const byText = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** A total order on JSON values (tuples, nulls), for comparing two lists as multisets. */
export const byJson = (a: unknown, b: unknown): number => byText(JSON.stringify(a), JSON.stringify(b));
