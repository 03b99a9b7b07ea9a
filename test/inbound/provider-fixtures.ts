// Provider event payloads shaped like the samples in each provider's
// documentation (SES notification contents, SendGrid's event webhook
// reference, Postmark's bounce/spam complaint/delivery webhooks, Mailgun's
// webhook payloads), with our own addresses and ids, and signers that sign
// them the way each provider does: SNS (SignatureVersion 1 = SHA1withRSA, 2 =
// SHA256withRSA over the canonical string, with a certificate and key made
// here), SendGrid (ECDSA P-256 over timestamp + body), Mailgun (HMAC-SHA256 of
// timestamp + token).
import { createHmac, createSign, generateKeyPairSync, randomBytes, sign as cryptoSign } from 'node:crypto';
import { generate } from 'selfsigned';
import { snsStringToSign, type SnsMessage } from '../../src/inbound/providers/sns.ts';

export const SNS_CERT_URL = 'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem';
export const TOPIC_ARN = 'arn:aws:sns:us-east-1:123456789012:ses-feedback';

export type SnsSigner = { certPem: string; sign(m: Omit<SnsMessage, 'Signature'>): SnsMessage };

/** A self-signed certificate and its key, valid now; sign() fills Signature. */
export async function snsSigner(): Promise<SnsSigner> {
  const pems = await generate([{ name: 'commonName', value: 'sns.amazonaws.com' }], { keySize: 2048, notBeforeDate: new Date(Date.now() - 3_600_000), notAfterDate: new Date(Date.now() + 2 * 86_400_000) });
  return {
    certPem: pems.cert,
    sign(m) {
      const signer = createSign(m.SignatureVersion === '1' ? 'RSA-SHA1' : 'RSA-SHA256');
      signer.update(snsStringToSign(m as SnsMessage), 'utf8');
      return { ...m, Signature: signer.sign(pems.private, 'base64') } as SnsMessage;
    },
  };
}

/** The SES bounce notification of the SES documentation's example, for our message. */
export function sesBounce(o: { sesId: string; messageId: string; recipient: string; permanent?: boolean }) {
  return {
    notificationType: 'Bounce',
    bounce: {
      bounceType: o.permanent === false ? 'Transient' : 'Permanent',
      bounceSubType: o.permanent === false ? 'MailboxFull' : 'General',
      bouncedRecipients: [{ emailAddress: o.recipient, action: 'failed', status: o.permanent === false ? '4.2.2' : '5.1.1', diagnosticCode: 'smtp; 550 5.1.1 user unknown' }],
      timestamp: '2026-11-24T12:00:00.000Z',
      feedbackId: '00000137860315fd-869464a4-8680-4114-98d3-716fe35851f9-000000',
      remoteMtaIp: '127.0.2.0',
      reportingMTA: 'dsn; a8-70.smtp-out.amazonses.com',
    },
    mail: {
      timestamp: '2026-11-24T11:59:58.000Z',
      source: 'news@example.com',
      sourceArn: 'arn:aws:ses:us-east-1:123456789012:identity/example.com',
      sendingAccountId: '123456789012',
      messageId: o.sesId,
      destination: [o.recipient],
      headersTruncated: false,
      headers: [
        { name: 'From', value: 'news@example.com' },
        { name: 'To', value: o.recipient },
        { name: 'Subject', value: 'Hello' },
        { name: 'Message-ID', value: `<${o.messageId}>` },
      ],
      commonHeaders: { from: ['news@example.com'], to: [o.recipient], messageId: `<${o.messageId}>`, subject: 'Hello' },
    },
  };
}

export function sesComplaint(o: { sesId: string; messageId: string; recipient: string }) {
  return {
    notificationType: 'Complaint',
    complaint: {
      userAgent: 'AnyCompany Feedback Loop (V0.01)',
      complainedRecipients: [{ emailAddress: o.recipient }],
      complaintFeedbackType: 'abuse',
      arrivalDate: '2026-11-24T12:01:00.000Z',
      timestamp: '2026-11-24T12:01:01.000Z',
      feedbackId: '000001378603177f-18c07c78-fa81-4a58-9dd1-fedc3cb8f49a-000000',
    },
    mail: { timestamp: '2026-11-24T11:59:58.000Z', source: 'news@example.com', messageId: o.sesId, destination: [o.recipient], commonHeaders: { messageId: `<${o.messageId}>` } },
  };
}

export function snsNotification(message: object, version: '1' | '2' = '2', topic = TOPIC_ARN): Omit<SnsMessage, 'Signature'> {
  return {
    Type: 'Notification',
    MessageId: '22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324',
    TopicArn: topic,
    Subject: 'Amazon SES Email Event Notification',
    Message: JSON.stringify(message),
    Timestamp: new Date().toISOString(),
    SignatureVersion: version,
    SigningCertURL: SNS_CERT_URL,
  };
}

export function snsSubscriptionConfirmation(version: '1' | '2' = '1', topic = TOPIC_ARN): Omit<SnsMessage, 'Signature'> {
  const token = randomBytes(32).toString('hex');
  return {
    Type: 'SubscriptionConfirmation',
    MessageId: '165545c9-2a5c-472c-8df2-7ff2be2b3b1b',
    Token: token,
    TopicArn: topic,
    Message: `You have chosen to subscribe to the topic ${topic}.\nTo confirm the subscription, visit the SubscribeURL included in this message.`,
    SubscribeURL: `https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=${encodeURIComponent(topic)}&Token=${token}`,
    Timestamp: new Date().toISOString(),
    SignatureVersion: version,
    SigningCertURL: SNS_CERT_URL,
  };
}

// ---------------------------------------------------------------- SendGrid

export function sendgridKeys() {
  const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  // SendGrid shows the verification key as base64 DER (SubjectPublicKeyInfo).
  const publicKeyBase64 = publicKey.export({ format: 'der', type: 'spki' }).toString('base64');
  return {
    publicKeyBase64,
    sign(body: string, timestamp = String(Math.floor(Date.now() / 1000))) {
      const signature = cryptoSign('sha256', Buffer.from(timestamp + body, 'utf8'), privateKey).toString('base64');
      return { 'x-twilio-email-event-webhook-signature': signature, 'x-twilio-email-event-webhook-timestamp': timestamp };
    },
  };
}

/** SendGrid's documented batch: processed, deferred, delivered, bounce, open, spamreport. */
export function sendgridEvents(o: { sgId: string; messageId: string; bounced: string; complained: string; delivered: string }) {
  const ts = Math.floor(Date.now() / 1000);
  const common = { timestamp: ts, 'smtp-id': `<${o.messageId}>`, category: 'cat facts', sg_message_id: `${o.sgId}.filter0001.16648.5515E0B88.0` };
  return [
    { ...common, email: o.delivered, event: 'processed', sg_event_id: 'rbtnWrG1DVDGGGFHFyun0A==' },
    { ...common, email: o.delivered, event: 'deferred', response: '400 try again later', attempt: '5', sg_event_id: 'qK1MxfAaE_ukyyNsjxTpkw==' },
    { ...common, email: o.delivered, event: 'delivered', response: '250 OK', sg_event_id: 'hqFbp3HH9WxIM0R2-x2M1Q==' },
    { ...common, email: o.bounced, event: 'bounce', reason: '500 unknown recipient', status: '5.0.0', type: 'bounce', sg_event_id: '6g4ZI7SA-xmRDv57GoPIPw==' },
    { ...common, email: o.delivered, event: 'open', useragent: 'Mozilla/4.0', ip: '255.255.255.255', sg_event_id: 'FOTFFO0ecsBE-zxFXfs6WA==' },
    { ...common, email: o.complained, event: 'spamreport', sg_event_id: '37nvH5QBz858KGVYCM4uOA==' },
  ];
}

// ---------------------------------------------------------------- Postmark

/** Postmark's bounce webhook example. */
export function postmarkBounce(o: { postmarkId: string; recipient: string; type?: string }) {
  return {
    RecordType: 'Bounce',
    MessageStream: 'outbound',
    ID: 4323372036,
    Type: o.type ?? 'HardBounce',
    TypeCode: o.type === 'SoftBounce' ? 4096 : 1,
    Name: 'Hard bounce',
    Tag: 'Test',
    MessageID: o.postmarkId,
    Metadata: { a_key: 'a_value' },
    ServerID: 23,
    Description: 'The server was unable to deliver your message (ex: unknown user, mailbox not found).',
    Details: 'smtp;550 5.1.1 The email account that you tried to reach does not exist.',
    Email: o.recipient,
    From: 'sender@example.com',
    BouncedAt: '2026-11-24T12:00:00Z',
    DumpAvailable: true,
    Inactive: true,
    CanActivate: true,
    Subject: 'Test subject',
    Content: 'Return-Path:....',
  };
}

export function postmarkSpamComplaint(o: { postmarkId: string; recipient: string }) {
  return { ...postmarkBounce(o), RecordType: 'SpamComplaint', Type: 'SpamComplaint', TypeCode: 512, Name: 'Spam complaint' };
}

// ---------------------------------------------------------------- Mailgun

export function mailgunSign(key: string, timestamp = String(Math.floor(Date.now() / 1000))) {
  const token = randomBytes(25).toString('hex');
  return { timestamp, token, signature: createHmac('sha256', key).update(timestamp + token).digest('hex') };
}

/** Mailgun's "failed" (permanent) payload. */
export function mailgunFailed(o: { key: string; messageId: string; recipient: string; severity?: 'permanent' | 'temporary' }) {
  return {
    signature: mailgunSign(o.key),
    'event-data': {
      id: 'G9Bn5sl1TC6nu79C8C0bwg',
      timestamp: Date.now() / 1000,
      'log-level': 'error',
      event: 'failed',
      severity: o.severity ?? 'permanent',
      reason: 'bounce',
      envelope: { sender: 'bob@example.com', transport: 'smtp', targets: o.recipient },
      flags: { 'is-routed': false, 'is-authenticated': true, 'is-system-test': false, 'is-test-mode': false },
      'delivery-status': {
        'attempt-no': 1,
        message: '',
        code: 550,
        'enhanced-code': '5.1.1',
        description: "The email account that you tried to reach does not exist. Please try double-checking the recipient's email address for typos.",
        'session-seconds': 0.1,
      },
      message: { headers: { to: o.recipient, 'message-id': o.messageId, from: 'Bob <bob@example.com>', subject: 'Test permanent_fail webhook' }, attachments: [], size: 111 },
      recipient: o.recipient,
      'recipient-domain': o.recipient.split('@')[1],
      storage: { url: 'https://se.api.mailgun.net/v3/domains/example.com/messages/message_key', key: 'message_key' },
      campaigns: [],
      tags: ['my_tag_1', 'my_tag_2'],
      'user-variables': { 'my_var_1': 'Mailgun Variable #1' },
    },
  };
}

export function mailgunComplained(o: { key: string; messageId: string; recipient: string }) {
  return {
    signature: mailgunSign(o.key),
    'event-data': {
      id: '-Agny091SquKnsrW2NEKUA',
      timestamp: Date.now() / 1000,
      'log-level': 'warn',
      event: 'complained',
      envelope: { sending_ip: '173.193.210.33' },
      flags: { 'is-test-mode': false },
      message: { headers: { to: o.recipient, 'message-id': o.messageId, from: 'Bob <bob@example.com>', subject: 'Test complained webhook' }, attachments: [], size: 111 },
      recipient: o.recipient,
      campaigns: [],
      tags: ['my_tag_1'],
      'user-variables': {},
    },
  };
}
