// A signed-in dashboard session driven through app.inject: keeps cookies like a
// browser and reads the CSRF token out of the pages it gets.
import type { FastifyInstance } from 'fastify';
import type { Db } from '../../src/db/pool.ts';
import { createUser } from '../../src/dashboard/users.ts';
import { makeTeam } from '../helpers.ts';

export const PASSWORD = 'correct horse battery';

type Res = { statusCode: number; body: string; headers: Record<string, unknown>; cookies: { name: string; value: string }[] };

export class Session {
  readonly app: FastifyInstance;
  readonly jar = new Map<string, string>();
  csrf = '';
  constructor(app: FastifyInstance) {
    this.app = app;
  }

  private keep(res: Res): Res {
    for (const c of res.cookies) {
      if (c.value === '') this.jar.delete(c.name);
      else this.jar.set(c.name, c.value);
    }
    const m = res.body.match(/name="_csrf" value="([^"]+)"/);
    if (m) this.csrf = m[1];
    return res;
  }

  private get cookie(): string {
    return [...this.jar].map(([k, v]) => `${k}=${v}`).join('; ');
  }

  async get(url: string): Promise<Res> {
    return this.keep((await this.app.inject({ method: 'GET', url, headers: { cookie: this.cookie } })) as unknown as Res);
  }

  /** POSTs a form; the page's CSRF token is added unless `_csrf` is given (null: left out); an array is a repeated field. */
  async post(url: string, form: Record<string, string | string[] | null> = {}): Promise<Res> {
    const fields: Record<string, string | string[]> = { _csrf: this.csrf };
    for (const [k, v] of Object.entries(form)) {
      if (v === null) delete fields[k];
      else fields[k] = v;
    }
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(fields)) for (const one of Array.isArray(v) ? v : [v]) params.append(k, one);
    const res = await this.app.inject({
      method: 'POST',
      url,
      headers: { cookie: this.cookie, 'content-type': 'application/x-www-form-urlencoded' },
      payload: params.toString(),
    });
    return this.keep(res as unknown as Res);
  }

  async signIn(email: string, password = PASSWORD): Promise<Res> {
    await this.get('/sign-in');
    return this.post('/sign-in', { email, password });
  }
}

let n = 0;
/** A new team with an API key and a dashboard user. */
export async function makeUserTeam(db: Db, name = 'Dash team') {
  const team = await makeTeam(db, name);
  const email = `user${Date.now()}${n++}@example.com`;
  await createUser(db, team.teamId, email, PASSWORD);
  return { ...team, email };
}

export async function signedIn(app: FastifyInstance, db: Db, name?: string) {
  const team = await makeUserTeam(db, name);
  const session = new Session(app);
  const res = await session.signIn(team.email);
  if (res.statusCode !== 303) throw new Error(`sign-in failed: ${res.statusCode} ${res.body.slice(0, 300)}`);
  await session.get('/campaigns'); // the session's CSRF token (the sign-in page had a pre-session one)
  return { ...team, session };
}
