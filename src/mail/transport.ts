// SMTP transport options of a mail account: one mapping used by the login check
// at create time and by the sending engine, so both talk to the server alike.
import nodemailer from 'nodemailer';
import type SMTPTransport from 'nodemailer/lib/smtp-transport';

export type MailSecurity = 'tls' | 'starttls' | 'none';

export type SmtpAccount = {
  host: string;
  port: number;
  security: MailSecurity;
  username: string | null;
};

/** Per connection, greeting and socket; a dead server costs a request at most ~10 s per phase. */
export const SMTP_TIMEOUT_MS = 10_000;

/**
 * `tls`: implicit TLS from the first byte (usually port 465).
 * `starttls`: plain connect, then STARTTLS is required (refused if not offered).
 * `none`: never upgrade, even when the server offers STARTTLS.
 */
export function transportOptions(account: SmtpAccount, password: string | null): SMTPTransport.Options {
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
  };
}

/** Connects, upgrades as configured and logs in (when there are credentials); throws nodemailer's error on failure. */
export async function verifySmtpLogin(account: SmtpAccount, password: string | null): Promise<void> {
  const transport = nodemailer.createTransport(transportOptions(account, password));
  try {
    await transport.verify();
  } finally {
    transport.close();
  }
}
