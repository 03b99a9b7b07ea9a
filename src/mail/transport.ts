// SMTP transport options of a mail account: one mapping used by the login check
// at create time and by the sending engine, so both talk to the server alike,
// and both through the same address guard as webhooks (src/lib/net-guard.ts).
import net from 'node:net';
import nodemailer from 'nodemailer';
import type SMTPTransport from 'nodemailer/lib/smtp-transport';
import { guardedLookup, refusalFor, smtpPortRefusal, TargetRefusedError, type AllowList } from '../lib/net-guard.ts';

export type MailSecurity = 'tls' | 'starttls' | 'none';

export type SmtpAccount = {
  host: string;
  port: number;
  security: MailSecurity;
  username: string | null;
};

/** Per connection, greeting and socket; a dead server costs a request at most ~10 s per phase. */
export const SMTP_TIMEOUT_MS = 10_000;

type SocketCallback = (err: Error | null, socketOptions?: { connection: net.Socket }) => void;

/**
 * nodemailer's `getSocket` hook, so every connection it opens (each one of a
 * pool, each reconnect) is guarded: the host is resolved, every address is
 * checked (and the port rule applied) in the lookup, and the socket connects to
 * an address that was checked. nodemailer then speaks SMTP over that socket and
 * upgrades it to TLS with the account's host name as servername, so SNI and the
 * certificate check still use the name. Passing a resolved IP as `host` with
 * `tls.servername` would also work, but pins one address per transport (a pool
 * lives long) and leaves nodemailer's own resolver and cache on the path.
 */
function guardedSocket(allow: AllowList) {
  return (options: SMTPTransport.Options, reply: SocketCallback): void => {
    const host = String(options.host ?? '');
    const port = Number(options.port);
    let answered = false;
    const callback: SocketCallback = (err, socketOptions) => {
      if (answered) return;
      answered = true;
      reply(err, socketOptions);
    };
    // An IP literal never reaches a lookup, so it is checked here. Numeric
    // forms node does not read as IPs (2130706433, 0x7f.1) do reach the lookup,
    // which checks the address getaddrinfo makes of them.
    if (net.isIP(host)) {
      const why = refusalFor(allow, host, host) ?? smtpPortRefusal(allow, host, port, [host]);
      if (why) return callback(new TargetRefusedError(`refused to connect to ${host}: ${why}`));
    }
    const socket = net.connect({
      host,
      port,
      lookup: guardedLookup(allow, (name, addresses) => smtpPortRefusal(allow, name, port, addresses)) as never,
    });
    const timer = setTimeout(() => {
      socket.destroy();
      callback(Object.assign(new Error('connection timeout'), { code: 'ETIMEDOUT' }));
    }, Number(options.connectionTimeout ?? SMTP_TIMEOUT_MS));
    socket.once('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      socket.destroy();
      // The codes nodemailer itself would give, so a send classifies alike: a refused
      // address is permanent (ETARGETREFUSED), DNS and network trouble temporary.
      const code = err instanceof TargetRefusedError ? 'ETARGETREFUSED' : err.syscall === 'getaddrinfo' ? 'EDNS' : 'ECONNECTION';
      callback(Object.assign(err, { originalCode: err.code, code }));
    });
    socket.once('connect', () => {
      clearTimeout(timer);
      // nodemailer attaches its own error handler to the socket it is given.
      socket.removeAllListeners('error');
      callback(null, { connection: socket });
    });
  };
}

/**
 * `tls`: implicit TLS from the first byte (usually port 465).
 * `starttls`: plain connect, then STARTTLS is required (refused if not offered).
 * `none`: never upgrade, even when the server offers STARTTLS.
 */
export function transportOptions(account: SmtpAccount, password: string | null, allow: AllowList): SMTPTransport.Options {
  return {
    host: account.host,
    port: account.port,
    secure: account.security === 'tls',
    requireTLS: account.security === 'starttls',
    ignoreTLS: account.security === 'none',
    auth: account.username ? { user: account.username, pass: password ?? '' } : undefined,
    connectionTimeout: SMTP_TIMEOUT_MS,
    greetingTimeout: SMTP_TIMEOUT_MS,
    socketTimeout: SMTP_TIMEOUT_MS,
    getSocket: guardedSocket(allow),
  } as SMTPTransport.Options;
}

/** Why a login check failed, in words of our own: never the server's banner or error text. */
export class SmtpVerifyError extends Error {}

/** A fixed message for a failed login check; only our own refusal (which names the setting) is passed on. */
export function verifyFailure(err: unknown): string {
  const e = err as { code?: string; originalCode?: string; responseCode?: number; message?: string };
  if (err instanceof TargetRefusedError || e.code === 'ETARGETREFUSED') return String(e.message);
  const codes = `${e.code ?? ''} ${e.originalCode ?? ''}`;
  if (/ETIMEDOUT|TIMEOUT/.test(codes)) return 'timed out';
  if (/EDNS|ENOTFOUND|EAI_AGAIN/.test(codes)) return 'host not found';
  if (/ETLS|CERT|SSL|TLS/.test(codes)) return 'TLS handshake failed';
  if (/EAUTH/.test(codes)) return 'login refused';
  if (/ECONNECTION|ECONNREFUSED|ECONNRESET|EHOSTUNREACH|ENETUNREACH|ESOCKET/.test(codes)) return 'could not connect';
  return 'the server did not answer as an SMTP server';
}

/** Connects, upgrades as configured and logs in (when there are credentials); throws SmtpVerifyError on failure. */
export async function verifySmtpLogin(account: SmtpAccount, password: string | null, allow: AllowList): Promise<void> {
  const transport = nodemailer.createTransport(transportOptions(account, password, allow));
  try {
    await transport.verify();
  } catch (err) {
    throw new SmtpVerifyError(verifyFailure(err));
  } finally {
    transport.close();
  }
}
