// The full send_data object (docs/api.md, "Campaigns") of an event-triggered campaign,
// every field filled: what the client gave, else the defaults of docs/api.md, "Campaigns"
// and docs/decisions.md (Campaigns). Broadcast, automation and verification
// settings do not apply to event-triggered sends; they are present, zeroed, so
// the object has one shape for every campaign type.
import { dateTimeValue } from '../http/schemas.ts';
import type { ErrorDetail } from '../lib/errors.ts';
import type { CreateCampaignInput, SendDataValue, TriggerEvent } from './schemas.ts';

export const DEFAULT_COOLDOWN_SECONDS = 3600;
export const DEFAULT_DAILY_CAP = 3;

/** `contact_saved` → `contact.saved`; the schema has already refused anything else. */
export function normalizeEvent(name: string): TriggerEvent {
  return name.replace('_', '.') as TriggerEvent;
}

/** Dotted, de-duplicated, in the order first given. */
export function normalizeEvents(names: readonly string[]): TriggerEvent[] {
  return [...new Set(names.map(normalizeEvent))];
}

/** RFC 4122 allows `urn:uuid:` and upper case; we store the canonical lower-case form. */
export function canonicalUuid(id: string): string {
  return id.replace(/^urn:uuid:/i, '').toLowerCase();
}

export type NormalizedCampaignInput = {
  templateIds: string[];
  mailAccountIds: string[];
  events: TriggerEvent[];
  input: CreateCampaignInput;
};

/**
 * A schedule must fall within UTC years 1 to 9999: the API writes times as
 * toISOString() does with four-digit years (the date-time format of its
 * answers), and an offset can carry a valid `9999-12-31T23:59:59-15:59` into
 * year 10000.
 */
export function scheduleDetails(input: {
  broadcast_send?: { scheduled_send_time?: string | null } | null;
  automation_send?: { scheduled_send_time?: string | null } | null;
}): ErrorDetail[] {
  const details: ErrorDetail[] = [];
  for (const key of ['broadcast_send', 'automation_send'] as const) {
    const at = input[key]?.scheduled_send_time;
    if (typeof at !== 'string') continue;
    const year = dateTimeValue(at).getUTCFullYear();
    if (year < 1 || year > 9999) details.push({ field: `${key}.scheduled_send_time`, message: 'must fall within UTC years 1 to 9999' });
  }
  return details;
}

export function buildSendData(c: NormalizedCampaignInput): SendDataValue {
  const { input } = c;
  const ets = input.event_triggered_send ?? {};
  return {
    template_ids: c.templateIds,
    mail_account_ids: c.mailAccountIds,
    from_name: input.from_name ?? '',
    reply_to_name: input.reply_to_name ?? '',
    reply_to_email: input.reply_to_email?.toLowerCase() ?? '',
    broadcast_send: {
      send_amount: input.broadcast_send?.send_amount ?? 0,
      scheduled_send_time: input.broadcast_send?.scheduled_send_time ? dateTimeValue(input.broadcast_send.scheduled_send_time).toISOString() : null,
    },
    automation_send: automationSendData(input.automation_send),
    event_triggered_send: {
      events: c.events,
      contact_cooldown_interval: ets.contact_cooldown_interval ?? DEFAULT_COOLDOWN_SECONDS,
      contact_daily_email_cap: ets.contact_daily_email_cap ?? DEFAULT_DAILY_CAP,
      enabled: ets.enabled ?? true,
    },
    segment_query: { rules: input.segment_query?.rules ?? [] },
    open_tracking: input.open_tracking ?? true,
    click_tracking: input.click_tracking ?? true,
    verification_data: verificationData(input.verification_data),
    contact_cache_level: 'none',
    user_platform_role: 'api',
  };
}

type AutomationInput = NonNullable<CreateCampaignInput['automation_send']>;

/** The stored automation_send: the given fields, else the defaults (zero: no limit, not incremental, at once). */
export function automationSendData(a: Partial<AutomationInput> | undefined, base?: SendDataValue['automation_send']): SendDataValue['automation_send'] {
  const b = base ?? {
    send_amount: 0, iteration_send_amount: 0, min_delivery_rate: 0, send_interval: 0, scheduled_send_time: null,
    is_incremental_send: false, max_iterations: 0, max_iteration_send_amount: 0,
  };
  return {
    send_amount: a?.send_amount ?? b.send_amount,
    iteration_send_amount: a?.iteration_send_amount ?? b.iteration_send_amount,
    min_delivery_rate: a?.min_delivery_rate ?? b.min_delivery_rate,
    send_interval: a?.send_interval ?? b.send_interval,
    scheduled_send_time: a && a.scheduled_send_time !== undefined
      ? (a.scheduled_send_time === null ? null : dateTimeValue(a.scheduled_send_time).toISOString())
      : b.scheduled_send_time,
    is_incremental_send: a?.is_incremental_send ?? b.is_incremental_send,
    max_iterations: a?.max_iterations ?? b.max_iterations,
    max_iteration_send_amount: a?.max_iteration_send_amount ?? b.max_iteration_send_amount,
  };
}

/** The stored verification_data: the given fields, else off, valid only, no budget, always verify. */
export function verificationData(v: CreateCampaignInput['verification_data'], base?: SendDataValue['verification_data']): SendDataValue['verification_data'] {
  const b = base ?? { acceptable_statuses: [], active: false, max_budget: 0, age_threshold: 0 };
  if (!v) return b;
  return {
    active: v.active,
    acceptable_statuses: v.acceptable_statuses ?? b.acceptable_statuses,
    max_budget: v.max_budget ?? b.max_budget,
    age_threshold: v.age_threshold ?? b.age_threshold,
  };
}
