// The dashboard: server-rendered pages at `/`, in their own encapsulated scope
// (cookies, form bodies, HTML errors), so the public API under /public/v1 keeps
// its JSON-only behaviour.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import cookie from '@fastify/cookie';
import formbody from '@fastify/formbody';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../lib/errors.ts';
import { toErrorResponse } from '../http/errors.ts';
import { authRoutes } from './auth-routes.ts';
import { campaignPages } from './campaign-pages.ts';
import { listCampaignPages } from './list-campaign-pages.ts';
import { contactPages } from './contact-pages.ts';
import { dkimPages } from './dkim-pages.ts';
import { emailPages } from './email-pages.ts';
import { homePages } from './home-pages.ts';
import { importPages } from './import-pages.ts';
import { keyPages } from './key-pages.ts';
import { mailAccountPages } from './mail-account-pages.ts';
import { PageError, pageNotFound } from './page-error.ts';
import { refuseBeforeBody } from './intake.ts';
import { DashboardKeys, loadSession } from './security.ts';
import { templatePages } from './template-pages.ts';
import { suppressionPages } from './suppression-pages.ts';
import { render, views } from './views.ts';
import { webhookPages } from './webhook-pages.ts';

// Pages render team data: no caching anywhere, no framing, scripts and styles
// only from us. img-src allows any https image for the template preview.
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'self'; img-src 'self' https: data:; script-src 'self'; style-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  // Password-set links carry a token in the query string.
  'referrer-policy': 'no-referrer',
};

const asset = (name: string, type: string) => ({ type, body: readFileSync(join(import.meta.dirname, 'static', name)) });
const packageAsset = (specifier: string, type: string) => ({ type, body: readFileSync(fileURLToPath(import.meta.resolve(specifier))) });
const STATIC: Record<string, { type: string; body: Buffer }> = {
  'dashboard.css': asset('dashboard.css', 'text/css; charset=utf-8'),
  'dashboard.js': asset('dashboard.js', 'text/javascript; charset=utf-8'),
  'favicon.svg': asset('favicon.svg', 'image/svg+xml'),
  'charts.js': asset('charts.js', 'text/javascript; charset=utf-8'),
  // uPlot (MIT), served from the installed package: no CDN.
  'uPlot.iife.min.js': packageAsset('uplot/dist/uPlot.iife.min.js', 'text/javascript; charset=utf-8'),
  'uPlot.min.css': packageAsset('uplot/dist/uPlot.min.css', 'text/css; charset=utf-8'),
};
const FAVICON_ICO = asset('favicon.ico', 'image/x-icon');

// Paths outside the dashboard: the API, its reference, tracking links, operations.
const NOT_DASHBOARD = /^\/(public|t|u|docs|metrics|healthz|readyz)(\/|$)/;

/**
 * The dashboard's answer to an unknown path (404) or method (405), from the
 * root's not-found hook (http/errors.ts): an HTML page for a browser (its
 * Accept names text/html) on a dashboard path; false leaves the JSON answer
 * (API clients, curl, paths of the API and of tracking links). The session is
 * not read: the page offers the way back, which signs in if needed.
 */
export async function dashboardNotFoundPage(request: FastifyRequest, reply: FastifyReply, status: 404 | 405, message: string): Promise<boolean> {
  const path = request.url.split('?')[0] ?? '/';
  if (NOT_DASHBOARD.test(path) || !/\btext\/html\b/i.test(request.headers.accept ?? '')) return false;
  const html = await views.renderFile('error', { status, message, user: null, csrf: '', path, nav: [] });
  await reply.code(status).headers({ ...SECURITY_HEADERS, 'cache-control': 'no-store' }).type('text/html; charset=utf-8').send(html);
  return true;
}

/** What every dashboard route is, for tools that must reach them (the contract fuzz): not in the OpenAPI document. */
export type DashboardRoute = { method: string; url: string };

declare module 'fastify' {
  interface FastifyInstance {
    /** Every dashboard route (method and path), filled as the dashboard registers them. */
    dashboardRouteTable: DashboardRoute[];
  }
}

export async function dashboardRoutes(app: FastifyInstance): Promise<void> {
  const { config } = app.deps;
  // HTML pages, not the public API: hidden from openapi.json, listed here instead.
  const table = app.dashboardRouteTable;
  app.addHook('onRoute', (route) => {
    route.schema = { ...route.schema, hide: true };
    for (const method of ([] as string[]).concat(route.method)) if (method !== 'HEAD') table.push({ method, url: route.url });
  });
  if (!config.appSecret) throw new Error('the dashboard needs APP_SECRET (or the embedded database secret) to sign cookies');
  app.decorate('dashboardKeys', new DashboardKeys(config.appSecret, config.publicUrl));
  await app.register(cookie, { secret: app.dashboardKeys.cookie });
  // Forms are small; a big body is an attack or a mistake, not a form. Each
  // route's own limit (http/intake.ts: dashboard forms, template editor) applies.
  await app.register(formbody, { bodyLimit: config.intake.dashboardBodyLimitBytes });
  app.decorateRequest('dashboardUser', null);
  app.addHook('onRequest', loadSession);
  app.addHook('preParsing', refuseBeforeBody);
  app.addHook('onSend', async (_request, reply) => {
    if (!reply.hasHeader('cache-control')) reply.header('cache-control', 'no-store');
    reply.headers(SECURITY_HEADERS);
  });

  app.setErrorHandler(async (err, request, reply) => {
    let status: number;
    let message: string;
    if (err instanceof PageError) {
      status = err.statusCode;
      message = err.message;
    } else {
      const mapped = toErrorResponse(err);
      status = mapped.status;
      message = err instanceof AppError || status < 500 ? mapped.body.error.message : 'Something went wrong on our side. Try again shortly.';
      if (mapped.headers) reply.headers(mapped.headers);
      if (status >= 500) request.log.error({ err }, 'dashboard request failed');
    }
    return render(request, reply, 'error', { status, message }, status);
  });

  app.get('/assets/:name', async (request: FastifyRequest<{ Params: { name: string } }>, reply: FastifyReply) => {
    const file = Object.hasOwn(STATIC, request.params.name) ? STATIC[request.params.name] : undefined;
    if (!file) throw pageNotFound();
    return reply.header('cache-control', 'public, max-age=300').type(file.type).send(file.body);
  });

  // Browsers ask for /favicon.ico whatever the page says.
  app.get('/favicon.ico', async (_request, reply) =>
    reply.header('cache-control', 'public, max-age=86400').type(FAVICON_ICO.type).send(FAVICON_ICO.body));

  await app.register(authRoutes);
  await app.register(homePages);
  await app.register(keyPages);
  await app.register(listCampaignPages);
  await app.register(campaignPages);
  await app.register(emailPages);
  await app.register(importPages); // before contactPages: /contacts/import is not a contact id
  await app.register(contactPages);
  await app.register(suppressionPages);
  await app.register(mailAccountPages);
  await app.register(templatePages);
  await app.register(webhookPages);
  await app.register(dkimPages);
}
