// A signed-in dashboard session over HTTP, as a browser gets one: the sign-in
// page's CSRF token and pre-session cookie, then the form post. Returns the
// Cookie header, or '' when the sign-in is refused.
export async function dashboardSession(origin: string, email: string, password: string): Promise<string> {
  const jar = new Map<string, string>();
  const keep = (res: Response) => {
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const i = pair!.indexOf('=');
      jar.set(pair!.slice(0, i), pair!.slice(i + 1));
    }
  };
  const cookie = () => [...jar].map(([k, v]) => `${k}=${v}`).join('; ');
  const page = await fetch(`${origin}/sign-in`);
  keep(page);
  const csrf = /name="_csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? '';
  const res = await fetch(`${origin}/sign-in`, {
    method: 'POST', redirect: 'manual',
    headers: { cookie: cookie(), 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ _csrf: csrf, email, password }).toString(),
  });
  keep(res);
  await res.arrayBuffer();
  return res.status === 303 ? cookie() : '';
}
