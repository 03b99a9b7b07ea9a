// Contract fuzz requests for the dashboard pages (the operations of the
// server's dashboard route table; openapi.json leaves them out): a
// signed-in session of either team (its cookies and CSRF token), none, or a
// forged one; path ids as for the API; query strings; form bodies with the
// fields the pages read, junk values, and odd content types. Kept from ending
// the run's sessions and keys: sign-out never carries a team's cookie, and
// revoke and delete only take ids that do not name a seeded row.
import fc from 'fast-check';
import { enc, hugeString, NASTY_STRINGS, pathId, type RawBody } from './generate.ts';
import type { Operation, Req } from './run.ts';
import { idKindOf, type World } from './world.ts';

const FIELDS = [
  '_csrf', 'email', 'emails', 'reason', 'password', 'confirm', 'token', 'next', 'name', 'url', 'events', 'description', 'is_enabled', 'q', 'x',
  // Template editor and preview, campaign and mail-account forms.
  'subject', 'content', 'alt_content', 'sample_contact', 'sample_event', 'sample_payload', 'sample_campaign',
  'template_ids', 'mail_account_ids', 'from_name', 'reply_to_name', 'reply_to_email', 'open_tracking', 'click_tracking', 'enabled',
  'contact_cooldown_interval', 'contact_daily_email_cap', 'back',
  'host', 'port', 'security', 'username', 'from_email', 'daily_limit', 'campaign_share_percent', 'verify',
];
const QUERY = ['q', 'after', 'before', 'done', 'status', 'contact', 'token', 'next', 'page', 'reason', 'sample_contact', 'sample_event', 'sample_payload', 'sample_campaign', 'sends_before', 'decisions_before'];

const value = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 30 }) },
  { weight: 3, arbitrary: fc.constantFrom(...NASTY_STRINGS) },
  { weight: 2, arbitrary: fc.constantFrom('email.sent', 'email.opened', 'on', 'true', 'alpha1@example.com', 'correct horse battery', '/campaigns', '//evil.example', 'https://127.0.0.2/next', 'failed', 'resent', 'manual', 'unsubscribed') },
  { weight: 2, arbitrary: fc.constantFrom('contact.saved', 'sale_created', '{"a":1}', '[1]', '{{ contact.email }}', '{% for %}', '127.0.0.1', '587', '-1', '1e9', 'none', 'starttls', 'campaign', '0') },
  { weight: 1, arbitrary: hugeString.map((x) => x.slice(0, 5_000)) },
);

const ODD_BODIES: RawBody[] = [
  {},
  { payload: '{"_csrf":1}', contentType: 'application/json' },
  { payload: 'x', contentType: 'text/plain' },
  { payload: '--b\r\ncontent-disposition: form-data; name="x"\r\n\r\ny\r\n--b--\r\n', contentType: 'multipart/form-data; boundary=b' },
  { payload: 'a='.repeat(40_000), contentType: 'application/x-www-form-urlencoded' },
  { payload: Buffer.from([0xff, 0x3d, 0xfe]), contentType: 'application/x-www-form-urlencoded' },
];

function form(csrf: string): fc.Arbitrary<RawBody> {
  const pairs = fc.array(fc.tuple(fc.constantFrom(...FIELDS), value), { maxLength: 6 });
  const token = fc.constantFrom<string | null>(csrf, csrf, csrf, null, '', 'forged', `${csrf}x`);
  const encoded = fc.tuple(pairs, token).map(([kv, t]) => [...(t === null ? [] : [['_csrf', t]]), ...kv].map(([k, v]) => `${enc(k)}=${enc(v)}`).join('&'));
  return fc.oneof(
    { weight: 8, arbitrary: encoded.map((payload) => ({ payload, contentType: 'application/x-www-form-urlencoded' })) },
    { weight: 1, arbitrary: encoded.map((payload) => ({ payload: `${payload}&a[b][c]=1&%ZZ=%`, contentType: 'application/x-www-form-urlencoded; charset=latin1' })) },
    { weight: 1, arbitrary: fc.constantFrom<RawBody>(...ODD_BODIES) },
  );
}

export function dashboardRequest(world: World, op: Operation): fc.Arbitrary<Req> {
  const destructive = op.method === 'POST' && /\/(delete|revoke|erase)$/.test(op.path);
  return fc.constantFrom(world.a, world.b, null).chain((me) => {
    const other = me === world.b ? world.a : world.b;
    const session = me && op.path !== '/sign-out' ? me.session : null;
    const cookie = session
      ? fc.constant([...session.jar].map(([k, v]) => `${k}=${v}`).join('; '))
      : fc.constantFrom<string | undefined>(undefined, 'plv_session=forged', 'plv_session=s%3Aforged.AAAA; plv_pre=x', 'plv_session=; x=1', `${'a'.repeat(4000)}=1`);
    const ids = op.pathParams.map((p) => {
      if (p === 'name') return fc.constantFrom('dashboard.css', 'dashboard.js', '..%2Fpackage.json', '%2e%2e', 'nope.js', 'dashboard.css%00.js').map((v) => [p, v] as const);
      const kind = idKindOf(op.path, p);
      // Revoke, delete and erase never take a seeded row: the run needs its keys, webhooks and contacts.
      const own = destructive || !me ? [] : me.ids[kind];
      return pathId(own, other.ids[kind]).map((v) => [p, v] as const);
    });
    const query = fc.array(fc.tuple(fc.constantFrom(...QUERY), value), { maxLength: 3 }).map((kv) => kv.map(([k, v]) => `${enc(k)}=${enc(v)}`).join('&'));
    const body = op.method === 'POST' ? form(session?.csrf ?? '') : fc.constant<RawBody>({});
    return fc.record({ params: fc.tuple(...ids), query, body, cookie }).map(({ params, query: qs, body: b, cookie: c }) => {
      let path = op.path;
      for (const [name, v] of params) path = path.replace(`{${name}}`, v);
      const headers: Record<string, string> = {};
      if (c !== undefined) headers.cookie = c;
      if (b.contentType) headers['content-type'] = b.contentType;
      return { op: op.id, method: op.method, url: qs ? `${path}?${qs}` : path, headers, ...(b.payload === undefined ? {} : { payload: b.payload }) };
    });
  });
}
