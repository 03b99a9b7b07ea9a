// The hostile input classes of the isolation benchmark (bench/isolation.ts),
// one per kind of damage the multi-tenant service must contain: each class is
// a list of variants an attacker loops over. Bodies are built once, here, not
// per request, so the attacker's own CPU goes into sending, not building.
//
//   a  unauthenticated 10 MB JSON bodies: a known API route, an unknown path,
//      a dashboard POST, a tracking route with a method it does not take
//   b  link-rewriting bombs ('<a ' × 100,000, or a small Liquid loop making it)
//      at template create, and a campaign that sends the loop to the worker
//   c  Liquid: capture blow-up and a (1..100000000) range at template create,
//      and the dashboard preview of such stored templates
//   d  a 1 MiB template and the costliest one under the Liquid parts cap (parse cost)
//   e  500 KB of nested markup and 100,000-deep nesting (html-to-text at create)
//   f  tags: 100,000 in one upsert, 1,000 duplicates × 100 tags in a bulk
//      upsert, and one contact's tags growing by 100 per upsert
//   g  tracking replay: one message's open pixel and click link in a loop
//   h  slow clients: sockets sending a request's headers a byte at a time
//   i  a trigger flood: sale.created events, each for a new address, to A's
//      campaign that listens to them, as fast as they are answered (every one
//      an e-mail: decisions and sends that share the worker with B's)

export type ClassId = 'a' | 'b' | 'c' | 'd' | 'e' | 'f' | 'g' | 'h' | 'i';
export const CLASS_IDS: ClassId[] = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'];
export const CLASS_LABELS: Record<ClassId, string> = {
  a: 'unauthenticated 10 MB bodies',
  b: 'link-rewriting bombs (create, send)',
  c: 'Liquid capture/range (create, preview)',
  d: '1 MiB template, parts cap',
  e: 'html-to-text: 500 KB nested, 100k deep',
  f: 'tags: 100k, 1,000 dups x 100',
  g: 'tracking replay',
  h: 'slowloris sockets',
  i: 'trigger flood: sale.created to a campaign',
};

/** What the attacker thread needs to know of the world the bench set up. */
export type AttackContext = {
  origin: string;
  /** Team A's API key. */
  key: string;
  /** Cookie header of A's signed-in dashboard session ('' when sign-in failed). */
  cookie: string;
  /** Dashboard preview paths of A's stored hostile templates (may be empty: refused at create). */
  previewPaths: string[];
  /** Open pixel and click paths of one message of A. */
  trackingPaths: string[];
  /** A has a campaign on lead.created whose template is the '<a ' loop. */
  bombCampaign: boolean;
  attackers: number;
  /** Each request is abandoned after this long (a stalled service must not stall the bench). */
  timeoutMs: number;
  /** Sockets per attacker in class h. */
  slowSockets: number;
};

export type Variant = {
  name: string;
  method: string;
  /** Path, or a function of a counter (for unique addresses). */
  path: string;
  headers: Record<string, string>;
  body?: Buffer | ((n: number) => string);
  /** Unauthenticated (the stranger), else team A's key is sent. */
  anonymous?: boolean;
  /** At most one request per slot per this many ms (a send costs the worker, not the request). */
  paceMs?: number;
};

const MB10 = 10_000_000;
const JSON_TYPE = { 'content-type': 'application/json' };
const BROWSER_UA = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36';

/** ~10 MB of many small objects: costly to parse and to walk, under every 10 MiB limit. */
function tenMegabytes(): Buffer {
  const parts: string[] = ['{"contacts":['];
  let size = parts[0]!.length + 2;
  for (let i = 0; size < MB10 - 200; i++) {
    const item = `${i ? ',' : ''}{"email":"u${i}@stranger.test","first_name":"x","tags":["a","b"],"custom_int_1":${i}}`;
    parts.push(item);
    size += item.length;
  }
  parts.push(']}');
  return Buffer.from(parts.join(''));
}

const template = (name: string, content: string) =>
  Buffer.from(JSON.stringify({ name, content_type: 'html', subject: 'Hostile', content }));

export const LINK_LOOP = '{% for i in (1..100000) %}<a {% endfor %}';
export const CAPTURE_BOMB =
  '{% assign s = "xxxxxxxxxx" %}{% for i in (1..24) %}{% capture s %}{{ s }}{{ s }}{% endcapture %}{% endfor %}{{ s | size }}';
export const RANGE_BOMB = '{% for i in (1..100000000) %}{% endfor %}done';

/** The variants of each class but h (sockets, not requests). */
export function variantsOf(id: Exclude<ClassId, 'h'>, ctx: AttackContext): Variant[] {
  const api = (p: string) => `/public/v1${p}`;
  switch (id) {
    case 'a': {
      const big = tenMegabytes();
      const tracking = ctx.trackingPaths[0] ?? '/t/o/00000000-0000-0000-0000-000000000000/x.gif';
      return [
        { name: 'POST bulk-upsert, no key', method: 'POST', path: api('/email/contacts/bulk-upsert'), headers: JSON_TYPE, body: big, anonymous: true },
        { name: 'POST unknown path', method: 'POST', path: api('/no/such/route'), headers: JSON_TYPE, body: big, anonymous: true },
        { name: 'POST /sign-in as JSON', method: 'POST', path: '/sign-in', headers: JSON_TYPE, body: big, anonymous: true },
        { name: 'PUT tracking pixel', method: 'PUT', path: tracking, headers: JSON_TYPE, body: big, anonymous: true },
      ];
    }
    case 'b': {
      const out: Variant[] = [
        { name: "create: '<a ' x 100,000", method: 'POST', path: api('/email/templates'), headers: JSON_TYPE, body: template('bomb a', '<a '.repeat(100_000)) },
        { name: 'create: Liquid loop of <a', method: 'POST', path: api('/email/templates'), headers: JSON_TYPE, body: template('bomb loop', LINK_LOOP) },
      ];
      if (ctx.bombCampaign) {
        out.push({
          name: 'send: lead.created to the loop campaign',
          method: 'POST',
          path: api('/email/events'),
          headers: JSON_TYPE,
          body: (n) => JSON.stringify({ event_name: 'lead.created', email: `bomb${n}-${process.pid}@attacker.test` }),
          paceMs: 1_000,
        });
      }
      return out;
    }
    case 'c':
      return [
        { name: 'create: capture blow-up', method: 'POST', path: api('/email/templates'), headers: JSON_TYPE, body: template('capture', CAPTURE_BOMB) },
        { name: 'create: (1..100000000)', method: 'POST', path: api('/email/templates'), headers: JSON_TYPE, body: template('range', RANGE_BOMB) },
        ...ctx.previewPaths.map((path, i): Variant => ({
          name: `dashboard preview ${i + 1}`, method: 'GET', path, headers: { cookie: ctx.cookie }, anonymous: true,
        })),
      ];
    case 'd': {
      // The 1 MiB of Liquid (refused by the cap of 50,000 Liquid parts
      // before it is parsed), and the costliest template under that cap: the
      // shape whose tree holds the most heap per part.
      const unit = '<p>{{ contact.first_name }}</p>\n';
      const content = unit.repeat(Math.floor((1024 * 1024) / unit.length));
      const atCap = `{% liquid\n${'echo a\n'.repeat(24_990)}%}`;
      return [
        { name: 'create: 1 MiB of Liquid', method: 'POST', path: api('/email/templates'), headers: JSON_TYPE, body: template('big', content) },
        { name: 'create: Liquid at the parts cap', method: 'POST', path: api('/email/templates'), headers: JSON_TYPE, body: template('at cap', atCap) },
      ];
    }
    case 'e': {
      const block = '<table><tr><td><div><p><b>'.repeat(40) + 'x';
      return [
        { name: 'create: 500 KB nested markup', method: 'POST', path: api('/email/templates'), headers: JSON_TYPE, body: template('nested', block.repeat(Math.floor(500_000 / block.length))) },
        { name: 'create: 100,000-deep <div>', method: 'POST', path: api('/email/templates'), headers: JSON_TYPE, body: template('deep', '<div>'.repeat(100_000)) },
      ];
    }
    case 'f': {
      const many = Buffer.from(JSON.stringify({ email: 'tags@attacker.test', tags: Array.from({ length: 100_000 }, (_, i) => `t${i}`) }));
      const dups = Buffer.from(JSON.stringify({
        contacts: Array.from({ length: 1_000 }, (_, i) => ({ email: 'dup@attacker.test', tags: Array.from({ length: 100 }, (_, j) => `d${i}-${j}`) })),
      }));
      return [
        { name: 'upsert: 100,000 tags', method: 'POST', path: api('/email/contacts/upsert'), headers: JSON_TYPE, body: many },
        { name: 'bulk: 1,000 dups x 100 tags', method: 'POST', path: api('/email/contacts/bulk-upsert'), headers: JSON_TYPE, body: dups },
        {
          name: 'upsert: +100 tags to one contact',
          method: 'POST',
          path: api('/email/contacts/upsert'),
          headers: JSON_TYPE,
          body: (n) => JSON.stringify({ email: 'grow@attacker.test', tags: Array.from({ length: 100 }, (_, j) => `g${process.pid}-${n}-${j}`) }),
        },
      ];
    }
    case 'g':
      return ctx.trackingPaths.map((path) => ({ name: `replay ${path.split('/')[2] === 'o' ? 'open' : 'click'}`, method: 'GET', path, headers: { 'user-agent': BROWSER_UA }, anonymous: true }));
    case 'i':
      return [{
        name: 'sale.created for a new address (an e-mail each)',
        method: 'POST',
        path: api('/email/events'),
        headers: JSON_TYPE,
        body: (n) => JSON.stringify({ event_name: 'sale.created', email: `buyer-${process.pid}-${n}@attacker.test` }),
      }];
  }
}
