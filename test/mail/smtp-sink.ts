// A real SMTP server on 127.0.0.1 for tests (smtp-server): plain connections,
// no STARTTLS offered, AUTH PLAIN/LOGIN accepted for one user and password.
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

export type SmtpSink = {
  port: number;
  /** Every login attempt the server saw, in order. */
  logins: { username: string; password: string; accepted: boolean }[];
  close(): Promise<void>;
};

export async function startSmtpSink(user: string, pass: string): Promise<SmtpSink> {
  const logins: SmtpSink['logins'] = [];
  const server = new SMTPServer({
    secure: false,
    disabledCommands: ['STARTTLS'],
    allowInsecureAuth: true,
    authMethods: ['PLAIN', 'LOGIN'],
    logger: false,
    onAuth(auth, _session, callback) {
      const accepted = auth.username === user && auth.password === pass;
      logins.push({ username: auth.username ?? '', password: auth.password ?? '', accepted });
      if (accepted) callback(null, { user: auth.username });
      else callback(Object.assign(new Error('Invalid username or password'), { responseCode: 535 }));
    },
    onData(stream, _session, callback) {
      stream.resume();
      stream.on('end', () => callback());
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.server.address() as AddressInfo;
  return {
    port,
    logins,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
