// Request and response schemas of the campaign routes (docs/api.md,
// "Campaigns"). Response schemas declare every field: the serializer
// drops what a schema does not name.
import { Type, type Static } from 'typebox';
import { DateTime, PageMeta, pageQuery, StringOrNull, UUID_PATTERN } from '../http/schemas.ts';
import { SKIP_REASONS } from '../db/schema-engine.ts';

/** Both spellings are accepted (docs/api.md, "Campaigns"); the dotted one is stored and returned. */
export const TRIGGER_EVENT_INPUTS = ['contact.saved', 'lead.created', 'sale.created', 'contact_saved', 'lead_created', 'sale_created'] as const;
export { TRIGGER_EVENTS, type TriggerEvent } from '../events/triggers.ts';

export const MAX_IDS = 50;
export const MAX_COOLDOWN_SECONDS = 31_536_000; // one year
export const MAX_DAILY_CAP = 1_000;
export const MAX_SEGMENT_RULES = 100;

const IdList = (what: string) =>
  Type.Array(Type.String({ format: 'uuid' }), {
    minItems: 1,
    maxItems: MAX_IDS,
    uniqueItems: true,
    description: `Ids of ${what} of this team (1 to ${MAX_IDS}, no repeats)`,
  });

export const MAX_SEND_AMOUNT = 100_000_000;

const BroadcastSendInput = Type.Object(
  {
    scheduled_send_time: Type.Optional(
      Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'When the broadcast starts (UTC); null or absent: at once' }),
    ),
    send_amount: Type.Optional(
      Type.Integer({ minimum: 0, maximum: MAX_SEND_AMOUNT, default: 0, description: 'At most this many recipients; 0: all' }),
    ),
  },
  { additionalProperties: false },
);

/** Automation sends (warm-up batches): at most this many recipients an iteration, and seconds between iterations. */
export const MAX_ITERATION_SEND_AMOUNT = 1_000_000;
export const MAX_SEND_INTERVAL_SECONDS = 366 * 86_400;

const AutomationSendInput = Type.Object(
  {
    scheduled_send_time: Type.Optional(
      Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'When iteration 1 starts (UTC); null or absent: at once' }),
    ),
    iteration_send_amount: Type.Integer({ minimum: 1, maximum: MAX_ITERATION_SEND_AMOUNT, description: 'Recipients of iteration 1 (and of every iteration unless incremental)' }),
    send_interval: Type.Integer({ minimum: 1, maximum: MAX_SEND_INTERVAL_SECONDS, description: 'Seconds from one iteration to the next' }),
    is_incremental_send: Type.Optional(Type.Boolean({ default: false, description: 'Iteration k sends iteration_send_amount × k' })),
    max_iteration_send_amount: Type.Optional(
      Type.Integer({ minimum: 0, maximum: MAX_ITERATION_SEND_AMOUNT, default: 0, description: 'Caps an incremental iteration; 0: no cap' }),
    ),
    max_iterations: Type.Optional(Type.Integer({ minimum: 0, maximum: 100_000, default: 0, description: 'Ends after this many iterations; 0: no limit' })),
    send_amount: Type.Optional(
      Type.Integer({ minimum: 0, maximum: MAX_SEND_AMOUNT, default: 0, description: 'Ends after this many recipients in total; 0: no limit' }),
    ),
    min_delivery_rate: Type.Optional(
      Type.Integer({
        minimum: 0, maximum: 100, default: 0,
        description: 'Before each iteration after the first: pause (pause_reason delivery_rate) when (sent − bounced) ÷ sent so far, in percent, is below it; 0: never',
      }),
    ),
  },
  { additionalProperties: false },
);

const VerificationDataInput = Type.Object(
  {
    active: Type.Boolean({ description: 'Verify addresses before sending (syntax, DNS mail hosts, disposable domains, role addresses)' }),
    acceptable_statuses: Type.Optional(
      Type.Array(Type.Enum(['valid', 'risky', 'invalid', 'unknown']), {
        uniqueItems: true, maxItems: 4, default: ['valid'], description: 'Statuses that are sent to; empty or absent: valid only',
      }),
    ),
    max_budget: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_SEND_AMOUNT, default: 0, description: 'Verifications per send at most; 0: no limit' })),
    age_threshold: Type.Optional(
      Type.Integer({ minimum: 0, maximum: 3650, default: 0, description: 'A stored result younger than this many days is used again; 0: always verify' }),
    ),
  },
  { additionalProperties: false },
);

const HeaderText = (description: string) => Type.String({ maxLength: 255, description });

export const CreateCampaignBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 255 }),
    template_ids: IdList('active templates, used in rotation'),
    mail_account_ids: IdList('active mail accounts used for sending'),
    campaign_type: Type.Optional(
      Type.Enum(['event_triggered', 'broadcast', 'automation'], {
        default: 'event_triggered',
        description: '`event_triggered` (default), `broadcast` (one send to the segment, at `broadcast_send.scheduled_send_time`) or `automation` (the segment in growing batches, `automation_send`)',
      }),
    ),
    events: Type.Optional(
      Type.Array(Type.Enum([...TRIGGER_EVENT_INPUTS]), {
        minItems: 1,
        maxItems: MAX_IDS,
        description: 'Trigger events (required for event_triggered); the underscore spellings mean the same as the dotted ones, repeats are merged',
      }),
    ),
    broadcast_send: Type.Optional(BroadcastSendInput),
    automation_send: Type.Optional(AutomationSendInput),
    verification_data: Type.Optional(VerificationDataInput),
    // Extensions (docs/decisions.md, Campaigns): every field of send_data a client may set.
    from_name: Type.Optional(HeaderText('Sender display name (default: empty)')),
    reply_to_name: Type.Optional(HeaderText('Reply-To display name (default: empty)')),
    reply_to_email: Type.Optional(Type.String({ format: 'email', maxLength: 254, description: 'Reply-To address' })),
    open_tracking: Type.Optional(Type.Boolean({ default: true })),
    click_tracking: Type.Optional(Type.Boolean({ default: true })),
    event_triggered_send: Type.Optional(
      Type.Object(
        {
          enabled: Type.Optional(Type.Boolean({ default: true })),
          contact_cooldown_interval: Type.Optional(
            Type.Integer({
              minimum: 0,
              maximum: MAX_COOLDOWN_SECONDS,
              default: 3600,
              description: 'Seconds between two e-mails of this campaign to one contact',
            }),
          ),
          contact_daily_email_cap: Type.Optional(
            Type.Integer({
              minimum: 1,
              maximum: MAX_DAILY_CAP,
              default: 3,
              description: 'E-mails of this campaign to one contact per UTC day',
            }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
    segment_query: Type.Optional(
      Type.Object(
        { rules: Type.Array(Type.Unknown(), { maxItems: MAX_SEGMENT_RULES, description: 'Stored as given' }) },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);
export type CreateCampaignInput = Static<typeof CreateCampaignBody>;

/**
 * PATCH: any field of create (at least one), with no defaults: what is absent
 * stays as it is. `event_triggered_send` is merged field by field.
 */
export const UpdateCampaignBody = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
    template_ids: Type.Optional(IdList('active templates, used in rotation (replaces the list)')),
    mail_account_ids: Type.Optional(IdList('active mail accounts used for sending (replaces the list)')),
    broadcast_send: Type.Optional(BroadcastSendInput),
    automation_send: Type.Optional(AutomationSendInput),
    verification_data: Type.Optional(VerificationDataInput),
    events: Type.Optional(
      Type.Array(Type.Enum([...TRIGGER_EVENT_INPUTS]), {
        minItems: 1,
        maxItems: MAX_IDS,
        description: 'Trigger events (replaces the list); the underscore spellings mean the same as the dotted ones',
      }),
    ),
    from_name: Type.Optional(HeaderText('Sender display name; empty for none')),
    reply_to_name: Type.Optional(HeaderText('Reply-To display name; empty for none')),
    reply_to_email: Type.Optional(
      Type.Unsafe<string | null>({
        type: ['string', 'null'],
        maxLength: 254,
        description: 'Reply-To address (an e-mail address); empty or null for none',
      }),
    ),
    open_tracking: Type.Optional(Type.Boolean()),
    click_tracking: Type.Optional(Type.Boolean()),
    event_triggered_send: Type.Optional(
      Type.Object(
        {
          enabled: Type.Optional(Type.Boolean()),
          contact_cooldown_interval: Type.Optional(
            Type.Integer({ minimum: 0, maximum: MAX_COOLDOWN_SECONDS, description: 'Seconds between two e-mails of this campaign to one contact' }),
          ),
          contact_daily_email_cap: Type.Optional(
            Type.Integer({ minimum: 1, maximum: MAX_DAILY_CAP, description: 'E-mails of this campaign to one contact per UTC day' }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
    segment_query: Type.Optional(
      Type.Object(
        { rules: Type.Array(Type.Unknown(), { maxItems: MAX_SEGMENT_RULES, description: 'Replaces the rules' }) },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type UpdateCampaignInput = Static<typeof UpdateCampaignBody>;

export const SubmitBody = Type.Object(
  {
    event_name: Type.Optional(Type.Enum([...TRIGGER_EVENT_INPUTS], { description: "Recorded name of the submission (default: the campaign's first trigger)" })),
    email: Type.Optional(Type.String({ format: 'contact-email', description: 'An existing contact of this team' })),
    idempotency_key: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
    payload: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: 'Read by templates as `event.payload`' })),
  },
  { additionalProperties: false },
);

/** Path parameter: any string, so a malformed id is a 404 like an unknown one, never a 422. */
export const CampaignParams = Type.Object({ id: Type.String({ description: 'Campaign id (UUID)' }) });

export const ListCampaignsQuery = pageQuery(15, {
  search: Type.Optional(Type.String({ maxLength: 255, description: 'Case-insensitive substring of the campaign name' })),
});

const NullableDateTime = Type.Union([DateTime, Type.Null()]);

export const SendData = Type.Object({
  template_ids: Type.Array(Type.String()),
  mail_account_ids: Type.Array(Type.String()),
  from_name: Type.String(),
  reply_to_name: Type.String(),
  reply_to_email: Type.String(),
  broadcast_send: Type.Object({
    send_amount: Type.Integer(),
    scheduled_send_time: NullableDateTime,
  }),
  automation_send: Type.Object({
    send_amount: Type.Integer(),
    iteration_send_amount: Type.Integer(),
    min_delivery_rate: Type.Integer(),
    send_interval: Type.Integer(),
    scheduled_send_time: NullableDateTime,
    is_incremental_send: Type.Boolean(),
    max_iterations: Type.Integer(),
    max_iteration_send_amount: Type.Integer(),
  }),
  event_triggered_send: Type.Object({
    events: Type.Array(Type.String()),
    contact_cooldown_interval: Type.Integer(),
    contact_daily_email_cap: Type.Integer(),
    enabled: Type.Boolean(),
  }),
  segment_query: Type.Object({ rules: Type.Array(Type.Unknown()) }),
  open_tracking: Type.Boolean(),
  click_tracking: Type.Boolean(),
  verification_data: Type.Object({
    acceptable_statuses: Type.Array(Type.String()),
    active: Type.Boolean(),
    max_budget: Type.Integer(),
    age_threshold: Type.Integer(),
  }),
  contact_cache_level: Type.String(),
  user_platform_role: Type.String(),
});
export type SendDataValue = Static<typeof SendData>;

export const CampaignSend = Type.Object({
  id: Type.String(),
  campaign_id: Type.String(),
  campaign_type: Type.String(),
  status: Type.String({
    description: 'Event-triggered: active, paused, completed or failed. Broadcast: scheduled, sending, paused, completed or cancelled',
  }),
  next_send_at: NullableDateTime,
  next_send_countdown: Type.Object({ total: Type.Integer(), remaining: Type.Integer() }),
  send_data: SendData,
  send_progress: Type.Object({
    total_sent: Type.Integer(),
    total_bounced: Type.Integer(),
    delivery_rate: Type.Number(),
    current_iteration: Type.Integer(),
    reason: Type.String(),
    total_recipients: Type.Optional(Type.Integer({ description: 'Broadcast: recipients listed (messages queued) so far' })),
    sent: Type.Optional(Type.Integer({ description: 'Broadcast: messages handed to the SMTP server (accepted or refused)' })),
    bounced: Type.Optional(Type.Integer({ description: 'Broadcast: messages that bounced' })),
    remaining: Type.Optional(Type.Integer({ description: 'Broadcast: messages not yet attempted (queued, deferred or being sent)' })),
    list_complete: Type.Optional(Type.Boolean({ description: 'Broadcast: whether the recipient list is complete; automation: whether the last iteration is listed' })),
    pause_reason: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'Automation: why the send paused by itself (`delivery_rate`); null otherwise' })),
    rate_per_minute: Type.Optional(Type.Number({ description: 'Broadcast: messages attempted per minute over the last 5 minutes' })),
    eta: Type.Optional(Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'Broadcast: when the remaining messages should be attempted at that pace; null when idle, paused or done' })),
  }),
  created_at: DateTime,
  updated_at: DateTime,
});

export const Campaign = Type.Object({
  id: Type.String(),
  team_id: Type.String(),
  name: Type.String(),
  delivery_type: Type.String({ description: '`event` for event-triggered campaigns, `broadcast` for broadcasts' }),
  campaign_type: Type.String({ description: '`event_triggered`, `broadcast` or `automation`' }),
  meta: Type.Array(Type.Unknown()),
  created_at: DateTime,
  updated_at: DateTime,
  draft_data: Type.Object({
    last_sent_at: NullableDateTime,
    send_data: SendData,
  }),
  campaign_sends: Type.Array(CampaignSend, { description: 'Newest first' }),
});
export type CampaignValue = Static<typeof Campaign>;

export const CampaignResponse = Type.Object({ ok: Type.Literal(true), campaign: Campaign });

export const CampaignListResponse = Type.Object({
  ok: Type.Literal(true),
  campaigns: Type.Array(Campaign),
  meta: PageMeta,
});

export const DecisionObject = Type.Object({
  id: Type.String(),
  campaign_id: Type.String(),
  campaign_name: StringOrNull,
  campaign_send_id: StringOrNull,
  contact_id: StringOrNull,
  decision: Type.Enum(['send', 'skip']),
  reason: Type.Union([Type.String(), Type.Null()], {
    description: `Why nothing was sent: ${SKIP_REASONS.join(', ')}; null for a send`,
  }),
  email_send_log_id: StringOrNull,
  send_status: Type.Union([Type.String(), Type.Null()], { description: 'Status of the e-mail of a send decision (queued, sending, sent, …)' }),
  template_id: StringOrNull,
  mail_account_id: StringOrNull,
  decided_at: DateTime,
});

export const ListDecisionsQuery = pageQuery(20, {
  decision: Type.Optional(Type.Enum(['send', 'skip'], { description: 'Only sends or only skips' })),
  reason: Type.Optional(Type.Enum([...SKIP_REASONS], { description: 'Only skips for this reason' })),
  send_id: Type.Optional(Type.String({ pattern: UUID_PATTERN, description: 'Only the decisions of this campaign send (UUID)' })),
});

export const CampaignDecisionObject = Type.Object({
  ...DecisionObject.properties,
  event_id: Type.Union([Type.String(), Type.Null()], { description: 'The triggering event; null for broadcast and automation recipients' }),
  email: Type.Union([Type.String(), Type.Null()], { description: "The contact's address (null once erased)" }),
});
