// Segment rules on a loaded contact row: the text a rule compares. A date-time
// field reads as its ISO form (as the API shows it), whatever the process time
// zone; a value with no text (an object in a rule stored before rules were
// checked) matches nothing. Both used String(), which the linter's
// no-base-to-string rule flagged.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { matchesSegment } from '../../src/campaigns/segment.ts';

const created = new Date('2026-11-24T16:34:10.000Z');
const contact = { email: 'a@example.com', first_name: '[object Object]', created_at: created, tags: [] };

describe('segment rule text', () => {
  const tz = process.env.TZ;
  after(() => {
    if (tz === undefined) delete process.env.TZ;
    else process.env.TZ = tz;
  });

  test('contains on a date-time field matches its ISO form in every time zone', () => {
    for (const zone of ['UTC', 'America/New_York', 'Asia/Kolkata']) {
      process.env.TZ = zone;
      assert.equal(matchesSegment(contact, [{ field: 'created_at', operator: 'contains', value: '2026-11-24T16' }]), true, zone);
      assert.equal(matchesSegment(contact, [{ field: 'created_at', operator: 'not_contains', value: '2026-11-24T16' }]), false, zone);
      // The time zone's long form ("Tue Nov 24 2026 … GMT-0500") is not what the rule reads.
      assert.equal(matchesSegment(contact, [{ field: 'created_at', operator: 'contains', value: 'GMT' }]), false, zone);
    }
  });

  test('a rule value with no text matches nothing, not "[object Object]"', () => {
    assert.equal(matchesSegment(contact, [{ field: 'first_name', operator: 'equals', value: {} }]), false);
    assert.equal(matchesSegment(contact, [{ field: 'first_name', operator: 'contains', value: {} }]), false);
    assert.equal(matchesSegment(contact, [{ field: 'created_at', operator: 'equals', value: { toString: () => created.toISOString() } }]), false);
    // Text, numbers and date-times still compare as before.
    assert.equal(matchesSegment(contact, [{ field: 'first_name', operator: 'equals', value: '[OBJECT object]' }]), true);
    assert.equal(matchesSegment(contact, [{ field: 'created_at', operator: 'equals', value: created.toISOString() }]), true);
    assert.equal(matchesSegment(contact, [{ field: 'created_at', operator: 'greater_than', value: '2026-01-01T00:00:00Z' }]), true);
  });
});
