// A DNS server for tests on 127.0.0.1 (UDP, dns-packet): answers MX, A and
// AAAA from a zone, NXDOMAIN for names it does not hold, SERVFAIL or silence
// where the zone says so, and counts the questions it was asked.
import dgram from 'node:dgram';
import dnsPacket from 'dns-packet';

export type ZoneEntry = {
  mx?: { exchange: string; priority: number }[];
  a?: string[];
  aaaa?: string[];
  /** Answer every question about the name with this code. */
  rcode?: 'SERVFAIL' | 'NXDOMAIN' | 'REFUSED';
  /** Never answer (the resolver times out). */
  silent?: boolean;
  /** Answer after this many ms. */
  delayMs?: number;
};
export type StubDns = { port: number; server: string; questions: string[]; close(): Promise<void> };

const RCODE = { NOERROR: 0, SERVFAIL: 2, NXDOMAIN: 3, REFUSED: 5 } as const;

export async function startStubDns(zone: Record<string, ZoneEntry>, fallback?: (name: string) => ZoneEntry | undefined): Promise<StubDns> {
  const socket = dgram.createSocket('udp4');
  const questions: string[] = [];
  socket.on('message', (msg, rinfo) => {
    let query: dnsPacket.Packet;
    try {
      query = dnsPacket.decode(msg);
    } catch {
      return;
    }
    const q = query.questions?.[0];
    if (!q) return;
    const name = q.name.toLowerCase();
    questions.push(`${q.type} ${name}`);
    const entry = zone[name] ?? fallback?.(name);
    if (entry?.silent) return;
    const answers: dnsPacket.Answer[] = [];
    let rcode: number = entry ? RCODE.NOERROR : RCODE.NXDOMAIN;
    if (entry?.rcode) rcode = RCODE[entry.rcode];
    else if (entry) {
      if (q.type === 'MX') for (const m of entry.mx ?? []) answers.push({ type: 'MX', name: q.name, ttl: 60, data: { preference: m.priority, exchange: m.exchange } });
      if (q.type === 'A') for (const a of entry.a ?? []) answers.push({ type: 'A', name: q.name, ttl: 60, data: a });
      if (q.type === 'AAAA') for (const a of entry.aaaa ?? []) answers.push({ type: 'AAAA', name: q.name, ttl: 60, data: a });
    }
    const reply = dnsPacket.encode({
      type: 'response', id: query.id, flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | rcode,
      questions: query.questions, answers,
    });
    const send = () => socket.send(reply, rinfo.port, rinfo.address);
    if (entry?.delayMs) setTimeout(send, entry.delayMs);
    else send();
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const port = socket.address().port;
  return {
    port,
    server: `127.0.0.1:${port}`,
    questions,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
