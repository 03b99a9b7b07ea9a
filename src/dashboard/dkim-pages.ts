// A mail account's DKIM keys and DNS check in the dashboard, at
// /mail-accounts/:id/dkim: generate a key, see the TXT record to publish,
// activate (after the record is found, or forced), delete, and check SPF,
// DKIM and DMARC. Every change goes through the API's functions
// (src/mail/dkim.ts), so the same rules and states hold.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../lib/errors.ts';
import { findMailAccount, type MailAccountRow } from '../mail/accounts.ts';
import {
  activateDkimKey, createDkimKey, deleteDkimKey, DKIM_ALGORITHMS, domainOf, listDkimKeys, toDkimKey, type DkimAlgorithm,
} from '../mail/dkim.ts';
import { checkDomainDns, systemTxtResolver, type DnsReport } from '../mail/dns-check.ts';
import { field, queryField, signedIn, signedInPost, user, UUID_RE } from './forms.ts';
import { pageNotFound } from './page-error.ts';
import { render } from './views.ts';

type IdParams = { Params: { id: string } };
type KeyParams = { Params: { id: string; key_id: string } };

const MESSAGES: Record<string, string> = {
  created: 'Key generated. Publish its DNS record, then activate it.',
  activated: 'Key activated: it signs every message of this account from now on.',
  deleted: 'Key deleted.',
};

export async function dkimPages(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;
  const resolveTxt = app.deps.resolveTxt ?? systemTxtResolver;

  async function ownAccount(request: FastifyRequest<IdParams>): Promise<MailAccountRow> {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const account = await findMailAccount(db, user(request).teamId, request.params.id.toLowerCase());
    if (!account) throw pageNotFound();
    return account;
  }

  const keyId = (request: FastifyRequest<KeyParams>): string => {
    if (!UUID_RE.test(request.params.key_id)) throw pageNotFound();
    return request.params.key_id.toLowerCase();
  };

  async function show(
    request: FastifyRequest, reply: FastifyReply, account: MailAccountRow,
    extra: { error?: string; dns?: DnsReport; form?: { algorithm: string; selector: string } } = {}, status = 200,
  ) {
    const keys = (await listDkimKeys(db, user(request).teamId, account.id)).map(toDkimKey);
    const domain = domainOf(account.from_email);
    return render(request, reply, 'mail-account-dkim', {
      account,
      domain,
      keys: keys.map((k) => ({ ...k, other_domain: k.domain !== domain })),
      algorithms: DKIM_ALGORITHMS,
      form: extra.form ?? { algorithm: 'rsa', selector: '' },
      message: MESSAGES[queryField(request.query, 'done', 20)],
      error: extra.error,
      dns: extra.dns,
    }, status);
  }

  /** An AppError of the key functions as the page's error line; anything else goes on to the error page. */
  const problem = (err: unknown): string | null => {
    if (!(err instanceof AppError) || err.code === 'NOT_FOUND') return null;
    const detail = err.details?.[0];
    if (!detail || detail.field === 'dns') return `${err.message}.`;
    const text = detail.field === 'selector' ? `selector ${detail.message}` : detail.message;
    return `${text[0]!.toUpperCase()}${text.slice(1)}.`;
  };

  app.get<IdParams>('/mail-accounts/:id/dkim', signedIn, async (request, reply) => show(request, reply, await ownAccount(request)));

  app.get<IdParams>('/mail-accounts/:id/dns-check', signedIn, async (request, reply) => {
    const account = await ownAccount(request);
    const keys = await listDkimKeys(db, user(request).teamId, account.id);
    return show(request, reply, account, { dns: await checkDomainDns(domainOf(account.from_email), keys, resolveTxt) });
  });

  app.post<IdParams>('/mail-accounts/:id/dkim', signedInPost, async (request, reply) => {
    const account = await ownAccount(request);
    const form = { algorithm: field(request.body, 'algorithm', 20), selector: field(request.body, 'selector', 100).trim() };
    if (!(DKIM_ALGORITHMS as readonly string[]).includes(form.algorithm)) {
      return show(request, reply, account, { form, error: 'Choose RSA or Ed25519.' }, 422);
    }
    try {
      await createDkimKey(db, config.appSecret!, user(request).teamId, account.id, {
        algorithm: form.algorithm as DkimAlgorithm, ...(form.selector ? { selector: form.selector } : {}),
      });
    } catch (err) {
      const why = problem(err);
      if (why === null) throw err;
      return show(request, reply, account, { form, error: why }, (err as AppError).code === 'CONFLICT' ? 409 : 422);
    }
    return reply.redirect(`/mail-accounts/${account.id}/dkim?done=created`, 303);
  });

  app.post<KeyParams>('/mail-accounts/:id/dkim/:key_id/activate', signedInPost, async (request, reply) => {
    const account = await ownAccount(request);
    const force = field(request.body, 'force', 10) === 'on';
    try {
      await activateDkimKey(db, user(request).teamId, account.id, keyId(request), { force, resolveTxt });
    } catch (err) {
      const why = problem(err);
      if (why === null) throw err;
      return show(request, reply, account, {
        error: `${why} Publish the record and try again, or tick “activate without checking DNS”.`,
      }, 409);
    }
    return reply.redirect(`/mail-accounts/${account.id}/dkim?done=activated`, 303);
  });

  app.post<KeyParams>('/mail-accounts/:id/dkim/:key_id/delete', signedInPost, async (request, reply) => {
    const account = await ownAccount(request);
    await deleteDkimKey(db, user(request).teamId, account.id, keyId(request));
    return reply.redirect(`/mail-accounts/${account.id}/dkim?done=deleted`, 303);
  });
}
