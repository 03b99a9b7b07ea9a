// A real IMAP server for tests: Debian's dovecot-imapd, started on 127.0.0.1
// on a free port with a configuration of its own in a temporary directory
// (one user, plain login, Maildir), stopped by stop(). No npm package offers a
// maintained in-process IMAP server (the candidates are years unmaintained or
// need MongoDB and Redis), so .ci/run installs dovecot-imapd; without it the
// tests skip with a message, unless PLOVER_REQUIRE_IMAP=1 (set by CI) makes
// its absence a failure.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';

export const DOVECOT = '/usr/sbin/dovecot';

/** Why the IMAP tests cannot run here (undefined: they can). Throws when CI requires them. */
export function dovecotMissing(): string | undefined {
  if (existsSync(DOVECOT)) return undefined;
  const why = `${DOVECOT} not found (apt-get install dovecot-imapd; .ci/run does)`;
  if (process.env.PLOVER_REQUIRE_IMAP === '1') throw new Error(`PLOVER_REQUIRE_IMAP=1 but ${why}`);
  return why;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

async function waitForPort(port: number, deadline: number): Promise<void> {
  while (Date.now() < deadline) {
    const ok = await new Promise<boolean>((resolve) => {
      const sock = connect(port, '127.0.0.1');
      sock.once('connect', () => (sock.destroy(), resolve(true)));
      sock.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`dovecot did not listen on 127.0.0.1:${port}`);
}

export type Dovecot = { port: number; user: string; password: string; log(): string; stop(): Promise<void> };

export async function startDovecot(): Promise<Dovecot> {
  const dir = mkdtempSync(join(tmpdir(), 'plover-dovecot-'));
  // Dovecot's auth process runs as its own user and reads the users file.
  chmodSync(dir, 0o755);
  const port = await freePort();
  const user = 'bounces@example.com';
  const password = 'imap-test-password';
  const me = userInfo();
  const root = me.uid === 0;
  // Dovecot never gives mail access as root: as root the mail belongs to nobody.
  const mailUid = root ? 65534 : me.uid;
  const mailGid = root ? 65534 : me.gid;
  const home = join(dir, 'home');
  mkdirSync(home, { recursive: true });
  if (root) chownSync(home, mailUid, mailGid);
  writeFileSync(join(dir, 'users'), `${user}:{PLAIN}${password}\n`);
  const internal = root ? 'dovecot' : me.username;
  const login = root ? 'dovenull' : me.username;
  writeFileSync(
    join(dir, 'dovecot.conf'),
    `
base_dir = ${dir}/run
state_dir = ${dir}/state
log_path = ${dir}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
default_internal_user = ${internal}
default_login_user = ${login}
first_valid_uid = ${Math.min(mailUid, 1)}
passdb {
  driver = passwd-file
  args = scheme=PLAIN username_format=%u ${dir}/users
}
userdb {
  driver = static
  args = uid=${mailUid} gid=${mailGid} home=${home}/%u
}
mail_location = maildir:~/Maildir
service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = ${port}
  }
  inet_listener imaps {
    port = 0
  }
}
service stats {
  unix_listener stats-reader {
    mode = 0666
  }
  unix_listener stats-writer {
    mode = 0666
  }
}
`,
  );
  const child: ChildProcess = spawn(DOVECOT, ['-F', '-c', join(dir, 'dovecot.conf')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await Promise.race([
      waitForPort(port, Date.now() + 15_000),
      exited.then(() => {
        throw new Error(`dovecot exited: ${output}`);
      }),
    ]);
  } catch (err) {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    port,
    user,
    password,
    log: () => (existsSync(join(dir, 'dovecot.log')) ? readFileSync(join(dir, 'dovecot.log'), 'utf8') : '') + output,
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
        if (child.exitCode === null) child.kill('SIGKILL');
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
