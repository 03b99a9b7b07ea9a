// The data the fuzz and the isolation matrix run against: an app on its own
// database with two teams holding one or more real rows of every resource,
// made through the API (plus the rows no API makes: a sent message for the
// tracking links). Also the map from path parameters to the resource they
// name, which the isolation matrix uses to fail loudly on an unknown route.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { createApiKey } from '../../src/teams/queries.ts';
import { createUser } from '../../src/dashboard/users.ts';
import { PASSWORD, Session } from '../dashboard/session.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { startSmtpSink, type SmtpSink } from '../mail/smtp-sink.ts';
import { insertSend, testLinks } from '../tracking/fixtures.ts';

/** `suppression` ids are addresses: the suppression list is keyed by e-mail. */
export type IdKind = 'template' | 'mailAccount' | 'campaign' | 'webhook' | 'delivery' | 'event' | 'contact' | 'apiKey' | 'send' | 'import' | 'suppression' | 'providerWebhook' | 'dkimKey';
export type Ids = Record<IdKind, string[]>;
/** `key` makes every request (ids.apiKey[0]); ids.apiKey[1] is a spare key, there to be revoked. `session` is a signed-in dashboard user. */
export type Team = { teamId: string; key: string; ids: Ids; emails: string[]; session: Session };

/**
 * Which resource a path parameter names, by the route's path (API under
 * /public/v1, dashboard pages elsewhere). Unknown: throws, so a new route must
 * be added here.
 */
export function idKindOf(path: string, param: string): IdKind {
  const p = path.replace(/:([A-Za-z_]+)/g, '{$1}');
  const api = p.startsWith('/public/v1/');
  const rest = p.replace(/^\/public\/v1/, '');
  if (param === 'delivery_id' && api && rest.startsWith('/webhooks/{id}/deliveries/{delivery_id}')) return 'delivery';
  if (param === 'delivery' && !api && rest.startsWith('/webhooks/{id}/deliveries/{delivery}')) return 'delivery';
  if (param === 'email' && api && rest === '/email/suppressions/{email}') return 'suppression';
  if (param === 'key_id' && /^(\/email)?\/mail-accounts\/\{id\}\/dkim\/\{key_id\}/.test(rest)) return 'dkimKey';
  if (param === 'id') {
    const prefixes: [string, IdKind][] = api
      ? [['/email/emails/', 'send'], ['/email/templates/', 'template'], ['/email/mail-accounts/', 'mailAccount'], ['/email/campaigns/', 'campaign'], ['/webhooks/', 'webhook'], ['/email/events/', 'event'], ['/email/contacts/', 'contact'], ['/email/provider-webhooks/', 'providerWebhook']]
      : [['/templates/', 'template'], ['/mail-accounts/', 'mailAccount'], ['/emails/', 'send'], ['/contacts/import/', 'import'], ['/campaigns/', 'campaign'], ['/webhooks/', 'webhook'], ['/contacts/', 'contact'], ['/developer/api-keys/', 'apiKey']];
    for (const [prefix, kind] of prefixes) if (rest.startsWith(`${prefix}{id}`)) return kind;
  }
  throw new Error(`no id source for path parameter {${param}} of ${path}: add it to idKindOf in test/fuzz/world.ts`);
}

export type World = {
  t: TestApp;
  app: FastifyInstance;
  a: Team;
  b: Team;
  /** A send of team A with its signed tracking paths, for the public tracking routes. */
  tracking: { sendIds: string[]; paths: string[]; clickTarget: string };
  /** URLs the fuzz may give webhooks: a local receiver (allowed in config) and addresses the guard refuses. */
  webhookUrls: string[];
  /** Webhooks with the public IP literal: simulate must never be pointed at them (it would connect). */
  remoteWebhookIds: string[];
  smtpPort: number;
  close(): Promise<void>;
};

async function call(app: FastifyInstance, key: string, method: string, url: string, payload?: unknown) {
  const res = await app.inject({ method: method as 'POST', url: `/public/v1${url}`, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload: payload as object }) });
  if (res.statusCode >= 300) throw new Error(`seeding ${method} ${url}: ${res.statusCode} ${res.body}`);
  return res.json();
}

async function startReceiver(): Promise<Server> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(204).end());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

async function seedTeam(app: FastifyInstance, world: { db: TestApp['database']['db'] }, tag: string, receiverUrl: string, smtp: SmtpSink): Promise<Team> {
  const { teamId, key, keyId } = await makeTeam(world.db, `Fuzz team ${tag}`);
  const ids: Ids = { template: [], mailAccount: [], campaign: [], webhook: [], delivery: [], event: [], contact: [], apiKey: [], send: [], import: [], suppression: [], providerWebhook: [], dkimKey: [] };
  // The key in use first; the spare last, where destructive routes (revoke) take their id.
  ids.apiKey.push(keyId, (await createApiKey(world.db, teamId, 'spare key')).info.id);
  const emails = [1, 2, 3].map((i) => `${tag}${i}@example.com`);
  for (const [i, email] of emails.entries()) {
    await call(app, key, 'POST', '/email/contacts/upsert', { email, first_name: `First ${tag}${i}`, custom_int_1: i, country_code: 'DE' });
  }
  await call(app, key, 'POST', '/email/contacts/unsubscribe', { email: emails[2], reason: 'fuzz' });
  // Addresses no other request uses, so a list that shows one to the other team is a leak, not a coincidence.
  const held = [`${tag}-held1@example.com`, `${tag}-held2@example.com`];
  await call(app, key, 'POST', '/email/suppressions', { suppressions: held.map((email) => ({ email })) });
  ids.suppression.push(...held);
  for (const name of ['one', 'two']) {
    const tpl = await call(app, key, 'POST', '/email/templates', { name: `${tag} ${name}`, content: '<p>Hi {{ contact.first_name }}</p>', content_type: 'html', subject: 'Hello {{ contact.email }}' });
    ids.template.push(tpl.template.id);
  }
  const account = await call(app, key, 'POST', '/email/mail-accounts', {
    host: '127.0.0.1', port: smtp.port, security: 'none', from_email: `news@${tag}.example.com`, username: 'fuzz', password: 'fuzz-pass',
  });
  ids.mailAccount.push(account.mail_account.id);
  for (const provider of ['mailgun', 'postmark']) {
    const hook = await call(app, key, 'POST', '/email/provider-webhooks', provider === 'mailgun' ? { provider, signing_key: `fuzz-${tag}` } : { provider });
    ids.providerWebhook.push(hook.provider_webhook.id);
  }
  // Three DKIM keys: destructive routes (API and dashboard delete) each take their own.
  for (let i = 0; i < 3; i++) {
    ids.dkimKey.push((await call(app, key, 'POST', `/email/mail-accounts/${account.mail_account.id}/dkim`, { algorithm: 'ed25519' })).dkim_key.id);
  }
  const campaign = await call(app, key, 'POST', '/email/campaigns', {
    name: `${tag} campaign`, template_ids: ids.template, mail_account_ids: ids.mailAccount, events: ['contact.saved', 'lead.created'],
  });
  ids.campaign.push(campaign.campaign.id);
  const paused = await call(app, key, 'POST', '/email/campaigns', { name: `${tag} paused`, template_ids: [ids.template[0]], mail_account_ids: ids.mailAccount, events: ['sale.created'] });
  ids.campaign.push(paused.campaign.id);
  await call(app, key, 'POST', `/email/campaigns/${paused.campaign.id}/stop`);
  // Spare accounts no campaign uses: destructive routes (delete the account, drop its IMAP mailbox) each take one from the end.
  for (const n of [2, 3]) {
    const spare = await call(app, key, 'POST', '/email/mail-accounts', {
      host: '127.0.0.1', port: smtp.port, security: 'none', from_email: `news${n}@${tag}.example.com`, username: 'fuzz', password: 'fuzz-pass',
    });
    ids.mailAccount.push(spare.mail_account.id);
    await call(app, key, 'PUT', `/email/mail-accounts/${spare.mail_account.id}/imap`, {
      host: '127.0.0.1', port: 143, security: 'none', user: `bounces${n}`, password: 'fuzz-pass', folder: 'INBOX',
    });
  }
  // The brief's public IP literal: no worker runs, so it is never contacted;
  // simulate is only ever pointed at the local receiver's webhook.
  const remote = await call(app, key, 'POST', '/webhooks', { url: 'https://93.184.215.14/hooks/plover', events: ['email.contact.saved', 'email.sent'] });
  const local = await call(app, key, 'POST', '/webhooks', { url: receiverUrl, events: ['email.lead.created'], description: `${tag} local` });
  // The local one first: the isolation matrix pairs webhook[0] with delivery[0].
  ids.webhook.push(local.webhook.id, remote.webhook.id);
  const simulated = await call(app, key, 'POST', '/webhooks/simulate', { webhook_id: local.webhook.id, event: 'email.sent' });
  ids.delivery.push(simulated.delivery.id);
  const event = await call(app, key, 'POST', '/email/events', { event_name: 'lead.created', email: emails[0], idempotency_key: `${tag}-lead`, payload: { source: 'fuzz' } });
  ids.event.push(event.event_id);
  const submitted = await call(app, key, 'POST', `/email/campaigns/${campaign.campaign.id}/submit`, { email: emails[1], idempotency_key: `${tag}-submit` });
  ids.event.push(submitted.event_id);
  const contact = await world.db.selectFrom('contacts').select('id').where('team_id', '=', teamId).where('email', '=', emails[0]!).executeTakeFirstOrThrow();
  const send = await insertSend(world.db, teamId, { email: emails[0], contactId: contact.id });
  ids.send.push(send.id);
  const contacts = await world.db.selectFrom('contacts').select('id').where('team_id', '=', teamId).orderBy('email').execute();
  ids.contact.push(...contacts.map((c) => c.id));
  // A finished dashboard CSV import with a rejects file (the upload itself is gone, as after a real import).
  const importPath = join(mkdtempSync(join(tmpdir(), 'plover-fuzz-import-')), 'upload.csv');
  writeFileSync(`${importPath}.rejects.csv`, 'line,reason,email\n3,must be an e-mail address,nope\n');
  const imported = await sql<{ id: string }>`
    INSERT INTO contact_imports (team_id, status, file_name, file_path, bytes, rows_estimate, rows_done, created, rejected, finished_at)
    VALUES (${teamId}, 'done', 'fuzz.csv', ${importPath}, 42, 2, 2, 1, 1, now()) RETURNING id`.execute(world.db);
  ids.import.push(imported.rows[0]!.id);
  const user = `${tag}-user@example.com`;
  await createUser(world.db, teamId, user, PASSWORD);
  const session = new Session(app);
  const signedIn = await session.signIn(user);
  if (signedIn.statusCode !== 303) throw new Error(`dashboard sign-in: ${signedIn.statusCode} ${signedIn.body.slice(0, 200)}`);
  await session.get('/campaigns'); // the session's CSRF token
  return { teamId, key, ids, emails, session };
}

export async function createWorld(opts: { rateLimitPerMinute?: number } = {}): Promise<World> {
  const receiver = await startReceiver();
  const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  const smtp = await startSmtpSink('fuzz', 'fuzz-pass');
  const t = await buildTestApp({
    config: { rateLimitPerMinute: opts.rateLimitPerMinute ?? 10_000_000, allowedPrivateTargets: ['127.0.0.1'], webhookTimeoutMs: 2_000 },
  });
  const a = await seedTeam(t.app, t.database, 'alpha', receiverUrl, smtp);
  const b = await seedTeam(t.app, t.database, 'beta', receiverUrl, smtp);
  const links = testLinks();
  const clickTarget = 'https://example.com/landing?x=1';
  const tracking = { sendIds: [...a.ids.send, ...b.ids.send], clickTarget, paths: [] as string[] };
  for (const id of tracking.sendIds) {
    for (const url of [links.openPixelUrl(id), links.clickUrl(id, clickTarget), links.honeypotUrl(id), links.unsubscribeUrl(id)]) {
      const u = new URL(url);
      tracking.paths.push(u.pathname + u.search);
    }
  }
  // Recipient-signed unsubscribe links: by contact and by address, per team.
  for (const team of [a, b]) {
    const contactId = team.ids.contact[0] ?? null;
    for (const url of [
      links.recipientUnsubscribeUrl({ teamId: team.teamId, contactId, email: 'fuzz@example.com' }),
      links.recipientUnsubscribeUrl({ teamId: team.teamId, contactId: null, email: 'Fuzz.Address@example.com' }),
    ]) tracking.paths.push(new URL(url).pathname);
  }
  return {
    t,
    app: t.app,
    a,
    b,
    tracking,
    remoteWebhookIds: [a.ids.webhook[1]!, b.ids.webhook[1]!],
    smtpPort: smtp.port,
    webhookUrls: [receiverUrl, `${receiverUrl}/other`, 'https://127.0.0.2/x', 'https://10.1.2.3/', 'ftp://93.184.215.14/', 'https://[::1]/', 'https://localhost/x', 'not a url'],
    async close() {
      await t.close();
      await smtp.close();
      await new Promise((resolve) => receiver.close(resolve));
    },
  };
}
