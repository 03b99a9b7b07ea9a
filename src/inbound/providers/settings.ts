// A team's provider webhooks: the inbound URLs a relay posts its events to.
// Each has an unguessable token in its path (32 random bytes), looked up by
// its SHA-256 and kept sealed so the URL can be shown again; the provider's
// verification material is sealed too and never returned.
import { createHash, randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { Type, type Static } from 'typebox';
import type { Db } from '../../db/pool.ts';
import type { ProviderName } from '../../db/schema-inbound-providers.ts';
import { DateTime } from '../../http/schemas.ts';
import { notFound, validationFailed } from '../../lib/errors.ts';
import { paginate } from '../../lib/paginate.ts';
import { SecretBox } from '../../lib/secrets.ts';
import { sendgridPublicKey } from './events.ts';

export const PROVIDERS = ['ses', 'sendgrid', 'postmark', 'mailgun'] as const satisfies readonly ProviderName[];
/** The user name in a Postmark URL's basic credentials (the password is the secret). */
export const POSTMARK_USER = 'plover';
/** Provider webhooks per team: a relay needs one or two; a cap keeps a key from filling a table. */
export const MAX_PROVIDER_WEBHOOKS_PER_TEAM = 20;

export const ProviderWebhookBody = Type.Object(
  {
    provider: Type.Enum([...PROVIDERS], { description: 'The relay that will post events to this URL.' }),
    signing_key: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 4096,
        description:
          'SendGrid: the verification key of its signed event webhook (base64, or PEM). Mailgun: the HTTP webhook signing key. ' +
          'Required for both; not taken for SES (SNS signs with its certificate) or Postmark (the URL carries basic credentials). ' +
          'Stored encrypted; never returned.',
      }),
    ),
    description: Type.Optional(Type.String({ maxLength: 255 })),
  },
  { additionalProperties: false },
);
export type ProviderWebhookInput = Static<typeof ProviderWebhookBody>;

export const ProviderWebhook = Type.Object(
  {
    id: Type.String(),
    provider: Type.Enum([...PROVIDERS]),
    url: Type.String({ description: 'Give this URL to the provider. It is a secret: whoever holds it can post events for the team.' }),
    description: Type.Union([Type.String(), Type.Null()]),
    has_signing_key: Type.Boolean(),
    sns_topic_arn: Type.Union([Type.String(), Type.Null()], { description: 'SES: the SNS topic confirmed on this URL; others are refused.' }),
    events_received: Type.Integer(),
    events_unmatched: Type.Integer(),
    last_event_at: Type.Union([DateTime, Type.Null()]),
    created_at: DateTime,
  },
  { title: 'ProviderWebhook' },
);

type Row = {
  id: string;
  team_id: string;
  provider: ProviderName;
  description: string | null;
  token_enc: Buffer;
  secret_enc: Buffer | null;
  sns_topic_arn: string | null;
  events_received: number;
  events_unmatched: number;
  last_event_at: Date | null;
  created_at: Date;
};

const COLUMNS = [
  'id', 'team_id', 'provider', 'description', 'token_enc', 'secret_enc', 'sns_topic_arn', 'events_received', 'events_unmatched', 'last_event_at', 'created_at',
] as const;

const boxes = new Map<string, { token: SecretBox; secret: SecretBox }>();
export function providerBoxes(appSecret: string) {
  let b = boxes.get(appSecret);
  if (!b) {
    b = { token: new SecretBox(appSecret, 'provider-webhook-token'), secret: new SecretBox(appSecret, 'provider-webhook-secret') };
    boxes.set(appSecret, b);
  }
  return b;
}

export const tokenHash = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();
/** 32 random bytes, base64url: the path segment and the Postmark password. */
const newSecret = () => randomBytes(32).toString('base64url');
export const TOKEN_RE = /^[A-Za-z0-9_-]{43}$/;

export function inboundUrl(publicUrl: string, provider: ProviderName, token: string, postmarkPassword?: string): string {
  const u = new URL(`${publicUrl}/inbound/${provider}/${token}`);
  if (provider === 'postmark' && postmarkPassword) {
    u.username = POSTMARK_USER;
    u.password = postmarkPassword;
  }
  return u.href;
}

export function toProviderWebhook(row: Row, appSecret: string, publicUrl: string) {
  const box = providerBoxes(appSecret);
  const token = box.token.open(row.token_enc);
  const password = row.provider === 'postmark' && row.secret_enc ? box.secret.open(row.secret_enc) : undefined;
  return {
    id: row.id,
    provider: row.provider,
    url: inboundUrl(publicUrl, row.provider, token, password),
    description: row.description,
    has_signing_key: row.provider !== 'postmark' && row.secret_enc !== null,
    sns_topic_arn: row.sns_topic_arn,
    events_received: row.events_received,
    events_unmatched: row.events_unmatched,
    last_event_at: row.last_event_at?.toISOString() ?? null,
    created_at: row.created_at.toISOString(),
  };
}

/** Validates (the route schema has checked the shape), then one insert. Throws 422. */
export async function createProviderWebhook(db: Db, appSecret: string, teamId: string, body: ProviderWebhookInput): Promise<Row> {
  const needsKey = body.provider === 'sendgrid' || body.provider === 'mailgun';
  if (needsKey && !body.signing_key) throw validationFailed([{ field: 'signing_key', message: `is required for ${body.provider}` }]);
  if (!needsKey && body.signing_key !== undefined) {
    throw validationFailed([{ field: 'signing_key', message: `is not taken for ${body.provider}` }]);
  }
  if (body.provider === 'sendgrid' && !sendgridPublicKey(body.signing_key!)) {
    throw validationFailed([{ field: 'signing_key', message: 'must be the ECDSA public key SendGrid shows for its signed event webhook (base64 or PEM)' }]);
  }
  if (body.description?.includes('\u0000')) throw validationFailed([{ field: 'description', message: 'must not contain NUL (U+0000) characters' }]);
  const box = providerBoxes(appSecret);
  const token = newSecret();
  const secret = body.provider === 'postmark' ? newSecret() : (body.signing_key?.trim() ?? null);
  return db.transaction().execute(async (trx) => {
    // Serialises a team's creations so the cap holds under concurrent requests.
    await trx.selectFrom('teams').select('id').where('id', '=', teamId).forUpdate().execute();
    const { n } = await trx
      .selectFrom('provider_webhooks')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('team_id', '=', teamId)
      .executeTakeFirstOrThrow();
    if (n >= MAX_PROVIDER_WEBHOOKS_PER_TEAM) {
      throw validationFailed([{ field: 'provider', message: `a team has at most ${MAX_PROVIDER_WEBHOOKS_PER_TEAM} provider webhooks; delete one first` }]);
    }
    return trx
      .insertInto('provider_webhooks')
      .values({
        team_id: teamId,
        provider: body.provider,
        description: body.description ?? null,
        token_hash: tokenHash(token),
        token_enc: box.token.seal(token),
        secret_enc: secret === null ? null : box.secret.seal(secret),
      })
      .returning(COLUMNS)
      .executeTakeFirstOrThrow();
  });
}

export async function findProviderWebhook(db: Db, teamId: string, id: string): Promise<Row | undefined> {
  return db.selectFrom('provider_webhooks').select(COLUMNS).where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
}

export async function listProviderWebhooks(db: Db, teamId: string, opts: { page: number; perPage: number }) {
  const base = db.selectFrom('provider_webhooks').where('team_id', '=', teamId);
  return paginate(
    opts,
    async () => (await base.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n,
    (limit, offset) => base.select(COLUMNS).orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset).execute(),
  );
}

export async function deleteProviderWebhook(db: Db, teamId: string, id: string): Promise<void> {
  const res = await db.deleteFrom('provider_webhooks').where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
  if (res.numDeletedRows === 0n) throw notFound('provider webhook');
}

/** The receiving side: the webhook a token names, with its secret opened. Undefined for an unknown token. */
export async function webhookForToken(db: Db, appSecret: string, provider: ProviderName, token: string) {
  if (!TOKEN_RE.test(token)) return undefined;
  const row = await db
    .selectFrom('provider_webhooks')
    .select(['id', 'team_id', 'provider', 'secret_enc', 'sns_topic_arn'])
    .where('token_hash', '=', tokenHash(token))
    .where('provider', '=', provider)
    .executeTakeFirst();
  if (!row) return undefined;
  return {
    id: row.id,
    teamId: row.team_id,
    provider: row.provider,
    secret: row.secret_enc ? providerBoxes(appSecret).secret.open(row.secret_enc) : null,
    snsTopicArn: row.sns_topic_arn,
  };
}
export type ReceivingWebhook = NonNullable<Awaited<ReturnType<typeof webhookForToken>>>;

/** Pins the SNS topic at the first confirmation; false when another topic is pinned already. */
export async function pinSnsTopic(db: Db, id: string, topicArn: string): Promise<boolean> {
  const row = await db
    .updateTable('provider_webhooks')
    .set({ sns_topic_arn: topicArn, updated_at: new Date() })
    .where('id', '=', id)
    .where((eb) => eb.or([eb('sns_topic_arn', 'is', null), eb('sns_topic_arn', '=', topicArn)]))
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

/** Counters shown on the webhook (one statement per request). */
export async function countEvents(db: Db, id: string, received: number, unmatched: number): Promise<void> {
  if (received === 0 && unmatched === 0) return;
  await db
    .updateTable('provider_webhooks')
    .set({
      events_received: sql`events_received + ${received}`,
      events_unmatched: sql`events_unmatched + ${unmatched}`,
      last_event_at: new Date(),
    })
    .where('id', '=', id)
    .execute();
}
