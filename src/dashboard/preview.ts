// The template preview of the dashboard (the template page and the editor):
// a template, saved or not, rendered by the sender's own renderMessage
// (mail/message.ts) in the untrusted pool, never on this event loop, with
// sample data the user can change: a contact of the team (by default the first
// active one, never an unsubscribed one; a made-up sample contact when the team
// has none), a trigger event with its payload, and a campaign name. Tracking is
// off and the unsubscribe link points nowhere: a preview mints no links.
import type { Db } from '../db/pool.ts';
import { findContactByEmail } from '../contacts/queries.ts';
import { TRIGGER_EVENTS } from '../campaigns/schemas.ts';
import type { RenderLimits } from '../lib/render-limits.ts';
import { normalizeEmail } from '../lib/text.ts';
import { renderMessage } from '../mail/message.ts';
import { RenderFailure } from '../templates/pool-run.ts';
import { UntrustedWorkError } from '../untrusted/pool.ts';
import { queryField, rawField } from './forms.ts';
import { firstActiveContact } from './queries.ts';

const ZERO_ID = '00000000-0000-0000-0000-000000000000';
/** Characters of the sample payload (JSON) at most: it is parsed on the event loop. */
export const MAX_SAMPLE_PAYLOAD_CHARS = 16 * 1024;

export const SAMPLE_EVENTS = TRIGGER_EVENTS;
export const DEFAULT_SAMPLE_PAYLOAD = '{\n  "source": "website",\n  "amount": 49.9,\n  "currency": "EUR",\n  "product": "Starter plan"\n}';
export const DEFAULT_SAMPLE_CAMPAIGN = 'Sample campaign';

/** The made-up contact of a team without active contacts. */
const SAMPLE_CONTACT = {
  id: ZERO_ID,
  email: 'sample.contact@example.com',
  status: 'active',
  first_name: 'Sam',
  last_name: 'Sample',
  tags: ['sample'],
  country_code: 'US',
};

/** What the user chose to preview with, as typed (shown back in the form). */
export type SampleInput = { contact: string; event_name: string; payload: string; campaign_name: string };

/** The sample fields of a form or query string; defaults for what is absent. */
export function readSample(source: unknown): SampleInput {
  const event = queryField(source, 'sample_event', 40);
  return {
    contact: queryField(source, 'sample_contact', 320).trim(),
    event_name: (SAMPLE_EVENTS as readonly string[]).includes(event) ? event : SAMPLE_EVENTS[0],
    // Checked for length where it is parsed (renderPreview), so the user sees why.
    payload: rawField(source, 'sample_payload') ?? DEFAULT_SAMPLE_PAYLOAD,
    campaign_name: (rawField(source, 'sample_campaign') ?? DEFAULT_SAMPLE_CAMPAIGN).slice(0, 255),
  };
}

export type PreviewResult = {
  /** Who the preview is for: a contact of the team, or the made-up sample. */
  contact: { id: string; email: string; status: string; sample: boolean } | null;
  subject?: string;
  html?: string;
  text?: string;
  /** Why nothing was rendered (unknown contact, bad payload, a template error). */
  error?: string;
};

function parsePayload(text: string): Record<string, unknown> | string {
  if (text.length > MAX_SAMPLE_PAYLOAD_CHARS) return `The sample event payload is longer than ${MAX_SAMPLE_PAYLOAD_CHARS / 1024} KiB.`;
  if (text.trim() === '') return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return `The sample event payload is not valid JSON: ${(err as Error).message}`;
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) return 'The sample event payload must be a JSON object, as an event’s payload is.';
  return value as Record<string, unknown>;
}

export async function renderPreview(
  db: Db,
  teamId: string,
  template: { subject: string | null; content: string; alt_content: string },
  sample: SampleInput,
  limits: RenderLimits,
): Promise<PreviewResult> {
  let contact: Record<string, unknown> | undefined;
  if (sample.contact) {
    contact = await findContactByEmail(db, teamId, normalizeEmail(sample.contact));
    if (!contact) return { contact: null, error: `No contact with the e-mail “${sample.contact}” in this team.` };
  } else {
    contact = await firstActiveContact(db, teamId);
  }
  const who = contact
    ? { id: String(contact.id), email: String(contact.email), status: String(contact.status), sample: false }
    : { id: ZERO_ID, email: SAMPLE_CONTACT.email, status: 'active', sample: true };
  const payload = parsePayload(sample.payload);
  if (typeof payload === 'string') return { contact: who, error: payload };
  try {
    const message = await renderMessage(
      {
        sendLogId: ZERO_ID,
        contact: contact ?? SAMPLE_CONTACT,
        template,
        account: { from_email: 'preview@plover.invalid', from_name: null },
        sendData: { open_tracking: false, click_tracking: false },
        event: { name: sample.event_name, occurred_at: new Date(), payload },
        campaign: { id: ZERO_ID, name: sample.campaign_name },
        // Inert links: no tracking, and the unsubscribe link points nowhere.
        links: null,
      },
      { limits, team: teamId },
    );
    return { contact: who, subject: message.subject, html: message.html, text: message.text };
  } catch (err) {
    // A template that fails for this data (a cap, its budget, a bad filter
    // argument, a syntax error in an unsaved edit) is something to show, not a 500.
    if (!(err instanceof RenderFailure || err instanceof UntrustedWorkError)) throw err;
    return { contact: who, error: `Could not render the template with this data: ${(err as Error).message}` };
  }
}
