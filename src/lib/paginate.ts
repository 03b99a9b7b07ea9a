// The one page reader of every list (page and per_page, newest first): the
// count first, then the page's rows only when the page is not past the end, so
// an absurd page number (page=1e20) never reaches the database as an
// out-of-range OFFSET and a page past the end costs one query.

export type PageRequest = { page: number; perPage: number };

export async function paginate<T>(
  req: PageRequest,
  count: () => Promise<number | string | bigint>,
  rows: (limit: number, offset: number) => Promise<T[]>,
): Promise<{ rows: T[]; total: number }> {
  const total = Number(await count());
  const offset = (req.page - 1) * req.perPage;
  if (offset >= total) return { rows: [], total };
  return { rows: await rows(req.perPage, offset), total };
}
