// The dashboard's view library: Liquid files under views/, every output escaped
// by default (outputEscape: 'escape'; `| raw` is the visible exception). This is
// a separate engine from the one that renders e-mail templates (templates/render.ts):
// that one has no file system and runs team-written templates; this one reads
// our own files and never sees a team's template source.
import { join } from 'node:path';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Liquid } from 'liquidjs';
import { navFor } from './nav.ts';
import { csrfToken } from './security.ts';

export const views = new Liquid({
  root: join(import.meta.dirname, 'views'),
  extname: '.liquid',
  outputEscape: 'escape',
  strictFilters: true,
  ownPropertyOnly: true,
  cache: true,
});

/** `2026-11-22 01:02 UTC`, or an em dash for never. */
export function when(value: unknown): string {
  if (value === null || value === undefined || value === '') return '—';
  const d = value instanceof Date ? value : typeof value === 'string' || typeof value === 'number' ? new Date(String(value)) : null;
  if (!d || Number.isNaN(d.getTime())) return '—';
  return d.toISOString().slice(0, 16).replace('T', ' ') + ' UTC';
}
views.registerFilter('when', when);

export type ViewData = Record<string, unknown>;

/** Renders a page with the layout's common data (signed-in user, CSRF token, current section). */
export async function render(request: FastifyRequest, reply: FastifyReply, view: string, data: ViewData = {}, status = 200) {
  const path = request.url.split('?')[0];
  const html = await views.renderFile(view, {
    user: request.dashboardUser,
    csrf: csrfToken(request, reply),
    path,
    nav: navFor(path),
    ...data,
  });
  return reply.code(status).type('text/html; charset=utf-8').send(html);
}
