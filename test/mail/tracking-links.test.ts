import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TrackingLinks } from '../../src/lib/tracking-links.ts';

const id = '0190a7e2-0000-7000-8000-000000000001';
const links = new TrackingLinks('https://mail.example.com/', 'a'.repeat(64));

test('tracking URLs carry a signature that verifies for their own kind, id and target only', () => {
  const click = new URL(links.clickUrl(id, 'https://shop.example.com/a?b=1&c=2'));
  assert.equal(click.origin, 'https://mail.example.com');
  const [, t, c, logId, sig] = click.pathname.split('/');
  assert.deepEqual([t, c, logId], ['t', 'c', id]);
  const target = click.searchParams.get('u')!;
  assert.equal(target, 'https://shop.example.com/a?b=1&c=2');
  assert.ok(links.verify('click', id, sig!, target));
  assert.equal(links.verify('click', id, sig!, 'https://evil.example.net/'), false, 'another target');
  assert.equal(links.verify('open', id, sig!, target), false, 'another kind');
  assert.equal(links.verify('click', id.replace(/1$/, '2'), sig!, target), false, 'another send');
  assert.equal(links.verify('click', id, sig!.slice(0, -1), target), false, 'truncated');
  assert.equal(links.verify('click', id, '', target), false, 'empty');
});

test('a different APP_SECRET gives different signatures', () => {
  const other = new TrackingLinks('https://mail.example.com', 'b'.repeat(64));
  assert.notEqual(other.sign('unsubscribe', id), links.sign('unsubscribe', id));
  assert.equal(other.verify('unsubscribe', id, links.sign('unsubscribe', id)), false);
  assert.match(links.openPixelUrl(id), /^https:\/\/mail\.example\.com\/t\/o\/[0-9a-f-]{36}\/[A-Za-z0-9_-]{22}\.gif$/);
  assert.match(links.unsubscribeUrl(id), /^https:\/\/mail\.example\.com\/u\/[0-9a-f-]{36}\/[A-Za-z0-9_-]{22}$/);
  assert.match(links.honeypotUrl(id), /^https:\/\/mail\.example\.com\/t\/h\/[0-9a-f-]{36}\/[A-Za-z0-9_-]{22}$/);
});
